"""``wino plot out.csv -o speedup.png``: per dtype, one picture with two panels per layer: the
speedup of the best wino pipeline over cuDNN, and the times of both against the wino
pipeline's roofline bound (a CSV without cuDNN rows, e.g. the host's, gets the second only).
``wino plot engines.csv --engines -o engines.png`` (a ``wino bench --engines`` run): per dtype,
each wino engine's speedup over the direct one per layer, with U cached and with K1 per call.
matplotlib is optional (``pip install 'wino[plot]'``) and is imported here only."""

from __future__ import annotations

from pathlib import Path

from . import results, table

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
    return _draw(rows, output, layers, figure)


def _draw(rows: list[results.Row], output: Path, data_of, figure_of) -> list[Path]:
    """One picture per dtype with data: ``figure_of(plt, dtype, data_of(rows, dtype))``."""
    plt = pyplot()
    dtypes = list(dict.fromkeys(r["dtype"] for r in rows))
    written = []
    for dtype, path in output_paths(Path(output), dtypes).items():
        data = data_of(rows, dtype)
        if not data:
            continue
        fig = figure_of(plt, dtype, data)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.append(path)
    return written


# Every engine of a `wino bench --engines` run ------------------------------------------------
#: The wino engines of an engines picture, in bar order, with their names in the legend.
ENGINE_BARS = {"fused": "fused", "wino": "unfused", "baked": "baked (JIT)"}
#: The two panels: the time column and its title (U cached: the inference case).
ENGINE_PANELS = {"cached_us": "U cached", "total_us": "K1 on every call"}


def engine_speedups(rows: list[results.Row], dtype: str) -> list[dict]:
    """Per case of this dtype (CSV order): its label and, per panel column and wino engine
    with a verified time, the direct engine's time over that engine's fastest verified tile
    (``table.best``; 1 = parity; engines without one are absent). Cases without a direct
    engine are left out."""
    out = []
    for group in table.cases(rows).values():
        direct = table.direct_row(group)
        if group[0]["dtype"] != dtype or direct is None:
            continue
        ratios = {}
        for column in ENGINE_PANELS:
            base = results.num(direct, column)
            fastest = {e: table.best(group, e, column) for e in ENGINE_BARS}
            ratios[column] = {
                e: base / results.num(row, column)
                for e, row in fastest.items()
                if row is not None and base
            }
        label = group[0]["label"].split(" ", 1)[-1].split(" 3x3")[0]
        out.append({"label": label, "direct": direct["engine"], **ratios})
    return out


def engines_figure(plt, dtype: str, data: list[dict]):
    """One panel per time column: per layer, a bar per wino engine, its speedup over the
    direct engine (1 = parity, the line)."""
    xs = list(range(len(data)))
    size = (max(6.0, 0.8 * len(data) + 2), 8)
    fig, axes = plt.subplots(len(ENGINE_PANELS), 1, figsize=size, sharex=True, squeeze=False)
    direct = ENGINES.get(data[0]["direct"], data[0]["direct"]) if data else "cuDNN"
    width = 0.8 / len(ENGINE_BARS)
    for (column, title), (ax,) in zip(ENGINE_PANELS.items(), axes, strict=True):
        for i, (engine, name) in enumerate(ENGINE_BARS.items()):
            offset = (i - (len(ENGINE_BARS) - 1) / 2) * width
            ratios = [d[column].get(engine, 0.0) for d in data]
            ax.bar([x + offset for x in xs], ratios, width, label=name)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_ylabel(f"speedup over {direct} (x)")
        ax.set_title(f"wino engines vs {direct}, {dtype}, {title}")
        ax.legend(fontsize=8, loc="upper left")
    bottom = axes[-1][0]
    bottom.set_xticks(xs)
    bottom.set_xticklabels([d["label"] for d in data], rotation=45, ha="right", fontsize=8)
    fig.tight_layout()
    return fig


def plot_engines(csv_path: Path, output: Path) -> list[Path]:
    """Write the engines pictures (one per dtype); returns their paths."""
    return _draw(results.read(csv_path), output, engine_speedups, engines_figure)
