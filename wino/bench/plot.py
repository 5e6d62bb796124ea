"""``wino plot out.csv -o speedup.png``: per dtype, one picture with two panels per layer: the
speedup of the best wino pipeline over cuDNN, and the times of both against the wino
pipeline's roofline bound (a CSV without cuDNN rows, e.g. the host's, gets the second only).
matplotlib is optional (``pip install 'wino[plot]'``) and is imported here only."""

from __future__ import annotations

from pathlib import Path

from . import results

INSTALL = "pip install 'wino[plot]'"


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed."""


def pyplot():
    try:
        import matplotlib
    except ImportError:
        raise PlotUnavailable(f"wino plot needs matplotlib: {INSTALL}") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def output_paths(output: Path, dtypes: list[str]) -> dict[str, Path]:
    """One file per dtype: ``output`` itself for one dtype, else suffixed ``_<dtype>``."""
    if len(dtypes) == 1:
        return {dtypes[0]: output}
    return {d: output.with_name(f"{output.stem}_{d}{output.suffix}") for d in dtypes}


def layers(rows: list[results.Row], dtype: str) -> list[dict]:
    """Per case of this dtype (in CSV order): its label, the best wino row and the cuDNN row."""
    out, seen = [], set()
    for row in rows:
        if row["dtype"] != dtype or (row["target"], row["case"]) in seen:
            continue
        seen.add((row["target"], row["case"]))
        group = [r for r in rows if (r["target"], r["case"]) == (row["target"], row["case"])]
        best = results.best_wino(group)
        cudnn = next((r for r in group if r["engine"] == "cudnn"), None)
        if best is not None or cudnn is not None:
            label = row["label"].split(" ", 1)[-1].split(" 3x3")[0]
            out.append({"label": label, "wino": best, "cudnn": cudnn})
    return out


def _time(row, column: str = "total_us"):
    return results.num(row, column) if row is not None else None


def _ratio(a, b) -> float:
    return a / b if a and b else 0.0


ENGINES = {"wino": "wino", "cudnn": "cuDNN"}  # engine -> its name in the legend


def engines_with_data(data: list[dict]) -> list[str]:
    """The engines that have a time in at least one layer (a host CSV has no cuDNN)."""
    return [e for e in ENGINES if any(_time(d[e]) for d in data)]


def figure(plt, dtype: str, data: list[dict]):
    """Top (when both engines have data): cuDNN time / wino time per layer (1 = parity).
    Bottom: each engine's time over the wino pipeline's roofline bound (1 = at the bound), the
    wino time written on its bar. Engines without data are left out."""
    present = engines_with_data(data)
    xs = list(range(len(data)))
    compare = present == list(ENGINES)
    size = (max(6.0, 0.8 * len(data) + 2), 8 if compare else 4.5)
    fig, axes = plt.subplots(2 if compare else 1, 1, figsize=size, sharex=True, squeeze=False)
    bottom = axes[-1][0]
    if compare:
        _speedup_panel(axes[0][0], dtype, data, xs)
    else:
        bottom.set_title(f"wino (best verified pipeline) against its roofline bound, {dtype}")
    width = 0.8 / len(present)
    for i, engine in enumerate(present):
        ratios = [_ratio(_time(d[engine]), _time(d["wino"], "bound_us")) for d in data]
        offset = (i - (len(present) - 1) / 2) * width
        bars = bottom.bar(
            [x + offset for x in xs], ratios, width, label=f"{ENGINES[engine]} time / bound"
        )
        if engine == "wino":
            labels = [f"{_time(d['wino']) or 0:.0f} us" for d in data]
            bottom.bar_label(bars, labels=labels, fontsize=7, rotation=90, padding=2)
    bottom.axhline(1.0, color="black", linewidth=0.8)
    bottom.margins(y=0.2)
    bottom.set_ylabel("time / roofline bound (x)")
    bottom.legend()
    bottom.set_xticks(xs)
    bottom.set_xticklabels([d["label"] for d in data], rotation=45, ha="right", fontsize=8)
    fig.tight_layout()
    return fig


def _speedup_panel(top, dtype: str, data: list[dict], xs: list[int]) -> None:
    speedups = [_ratio(_time(d["cudnn"]), _time(d["wino"])) for d in data]
    top.bar(xs, speedups, color=["tab:green" if s >= 1 else "tab:red" for s in speedups])
    top.axhline(1.0, color="black", linewidth=0.8)
    top.set_ylabel("speedup over cuDNN (x)")
    top.set_title(f"wino (best verified pipeline) vs cuDNN, {dtype}")


def plot(csv_path: Path, output: Path) -> list[Path]:
    """Write the pictures; returns their paths."""
    rows = results.read(csv_path)
    if not rows:
        raise ValueError(f"{csv_path}: no rows to plot")
    plt = pyplot()
    dtypes = list(dict.fromkeys(r["dtype"] for r in rows))
    written = []
    for dtype, path in output_paths(Path(output), dtypes).items():
        data = layers(rows, dtype)
        if not data:
            continue
        fig = figure(plt, dtype, data)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.append(path)
    return written
