"""A bench CSV as a Markdown table (`wino plot CSV --table`): per case, the best verified wino
pipeline against cuDNN and its roofline bound."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from ..problem import Problem
from ..vocab import DType
from . import results

HEADER = (
    "| layer | dtype | wino tile | wino us | wino TFLOPS | bound us | bound / time | verified "
    "tiles | cuDNN us | cuDNN TFLOPS | speedup |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|"
)


def _cell(value: float | None, digits: int = 1) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def _rate(value: float | None) -> str:
    """TFLOPS to 3 significant digits (a CPU's 0.004 must not print as 0.0)."""
    return "" if value is None else f"{value:.3g}"


def case_line(case_rows: list[results.Row]) -> str:
    first = case_rows[0]
    wino = [r for r in case_rows if r["engine"] == "wino"]
    ok = [r for r in wino if r.get("verified") == "yes"]
    best = results.best_wino(ok)
    cudnn = next((r for r in case_rows if r["engine"] == "cudnn"), None)
    label = first["label"].split(" ", 1)[1]
    if best is None:
        return f"| {label} | {first['dtype']} | none verified | | | | | 0/{len(wino)} | | | |"
    wino_us, cudnn_us = results.num(best, "total_us"), cudnn and results.num(cudnn, "total_us")
    speedup = cudnn_us / wino_us if cudnn_us and wino_us else None
    return (
        f"| {label} | {first['dtype']} | {best['tile']} | {_cell(wino_us)} "
        f"| {_rate(results.num(best, 'tflops'))} | {_cell(results.num(best, 'bound_us'))} "
        f"| {_cell(results.num(best, 'bound_ratio'), 2)} | {len(ok)}/{len(wino)} "
        f"| {_cell(cudnn_us)} | {_rate(cudnn and results.num(cudnn, 'tflops'))} "
        f"| {_cell(speedup, 2)} |"
    )


def markdown(csv_path: Path) -> str:
    """One line per case (in the CSV's order), best verified wino pipeline by total time."""
    by_case: dict[str, list[results.Row]] = {}
    for row in results.read(csv_path):
        by_case.setdefault(row["case"], []).append(row)
    return "\n".join([HEADER, *(case_line(rows) for rows in by_case.values())])


# wino bench --engines: every engine per case, and the geomeans -------------------------------
ENGINES_HEADER = (
    "| layer | dtype | unfused tile | unfused us (U cached / K1) | fused tile "
    "| fused us (U cached / K1) | fused roofline us (x its time) | fused L2 MB "
    "| baked us (U cached / K1) | direct us | fastest, U cached "
    "| best AOT / direct | unfused / baked |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)
AOT_ENGINES = results.AOT_ENGINES  # what a user gets without compiling


def best(case_rows: list[results.Row], engine: str, column: str = "cached_us"):
    """The wino engine's fastest verified row of the case by ``column`` (U-cached time by
    default), or None."""
    ok = [r for r in case_rows if r["engine"] == engine and r.get("verified") == "yes"]
    return results.best_wino(ok, column) if engine in results.WINO_ENGINES else None


def direct_row(case_rows: list[results.Row]) -> results.Row | None:
    return next((r for r in case_rows if r["engine"] in results.DIRECT_ENGINES), None)


def _pair(row: results.Row | None) -> str:
    if row is None:
        return ""
    return f"{_cell(results.num(row, 'cached_us'))} / {_cell(results.num(row, 'total_us'))}"


def _roofline(row: results.Row | None) -> str:
    """A fused row's roofline and its U-cached time over that roofline ("" without one)."""
    bound = row and results.num(row, "bound_us")
    if not bound:
        return ""
    return f"{_cell(bound)} ({_cell(results.num(row, 'cached_us') / bound, 2)}x)"


def case_ratios(case_rows: list[results.Row]) -> dict[str, float]:
    """The case's ratios (U cached): direct time / best AOT engine (``aot``), direct time /
    the fused engine's (``fused``), and the baked engine's shape-generic cost, unfused time /
    baked time of the same tile (``generic``)."""
    out = {}
    direct = direct_row(case_rows)
    aot = [b for b in (best(case_rows, e) for e in AOT_ENGINES) if b is not None]
    if direct is not None and aot:
        fastest = min(results.num(b, "cached_us") for b in aot)
        out["aot"] = results.num(direct, "cached_us") / fastest
    fused = best(case_rows, "fused")
    if direct is not None and fused is not None:
        out["fused"] = results.num(direct, "cached_us") / results.num(fused, "cached_us")
    baked = best(case_rows, "baked")
    if baked is not None:
        same = [r for r in case_rows if r["engine"] == "wino" and r["tile"] == baked["tile"]]
        if same and results.num(same[0], "cached_us"):
            out["generic"] = results.num(same[0], "cached_us") / results.num(baked, "cached_us")
    return out


def engines_case_line(case_rows: list[results.Row]) -> str:
    first = case_rows[0]
    unfused, fused, baked = (best(case_rows, e) for e in ("wino", "fused", "baked"))
    direct = direct_row(case_rows)
    label = first["label"].split(" ", 1)[1]
    times = results.engine_times(case_rows)
    fastest = min(times.values(), key=lambda lt: lt[1])[0] if times else ""
    ratios = case_ratios(case_rows)
    return (
        f"| {label} | {first['dtype']} | {unfused['tile'] if unfused else ''} | {_pair(unfused)} "
        f"| {fused['tile'] if fused else ''} | {_pair(fused)} | {_roofline(fused)} "
        f"| {_cell(fused and results.num(fused, 'l2_mb'), 0)} | {_pair(baked)} "
        f"| {_cell(direct and results.num(direct, 'total_us'))} | {fastest} "
        f"| {_cell(ratios.get('aot'), 2)} | {_cell(ratios.get('generic'), 3)} |"
    )


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def row_problem(row: results.Row) -> Problem | None:
    """The case's problem from the row's extents (``results.SHAPE``) and dtype, or None where
    the row has no extents (a hand-made CSV)."""
    if not all(row.get(k) for k in results.SHAPE):
        return None
    dtype = {"dtype": DType(row["dtype"])} if row.get("dtype") else {}
    return Problem(**{k: int(row[k]) for k in results.SHAPE}, **dtype)


def _wide(row: results.Row) -> bool:
    """C and K of at least 256 (the 256- and 512-channel layers)."""
    p = row_problem(row)
    return p is not None and min(p.C, p.K) >= 256


def _early(row: results.Row) -> bool:
    """64 to 128 input channels and outputs of at least 56x56: the ResNet and VGG stages that
    only a fused kernel can win (V and M through memory cost the unfused plan more than
    cuDNN's whole time there)."""
    p = row_problem(row)
    return p is not None and 64 <= p.C <= 128 and min(p.Ho, p.Wo) >= 56


_BEST = "best wino engine (U cached) vs the direct engine"
#: The summary's ratio lines: (ratio key, what it compares, the layers it covers or None: all,
#: and how the line names them).
_RATIO_LINES = (
    ("aot", _BEST, None, ""),
    ("aot", _BEST, _wide, " with C, K >= 256"),
    (
        "fused",
        "the fused engine (U cached) vs the direct engine",
        _early,
        " with 64 <= C <= 128 and outputs of 56x56 or more",
    ),
)


def engines_summary(rows: list[results.Row]) -> list[str]:
    """Per dtype, the geomeans over the cases: direct time / best AOT engine's (U cached),
    over every case and over the 256- and 512-channel ones; direct time / the fused engine's
    over the 64- and 128-channel ones at 56x56 and more; the shape-generic cost
    (unfused / baked - 1, in percent); and K2 of the best unfused rows (``k2_lines``)."""
    by_dtype: dict[str, list[tuple[results.Row, dict[str, float]]]] = {}
    unfused: dict[str, list[results.Row]] = {}
    for case_rows in cases(rows).values():
        first = case_rows[0]
        by_dtype.setdefault(first["dtype"], []).append((first, case_ratios(case_rows)))
        row = best(case_rows, "wino")
        if row is not None:
            unfused.setdefault(first["dtype"], []).append(row)
    lines = []
    for dtype, ratios in by_dtype.items():
        for key, what, covers, where in _RATIO_LINES:
            values = [r[key] for row, r in ratios if key in r and (covers is None or covers(row))]
            if values:
                lines.append(
                    f"{dtype}: {what}: {_geomean(values):.3g}x geomean over {len(values)} "
                    f"layers{where} (min {min(values):.3g}x, max {max(values):.3g}x)"
                )
        generic = [r["generic"] for _, r in ratios if "generic" in r]
        if generic:
            cost = (_geomean(generic) - 1) * 100
            lines.append(
                f"{dtype}: shape-generic cost (unfused / baked, U cached): {cost:+.1f}% geomean "
                f"over {len(generic)} layers (min {(min(generic) - 1) * 100:+.1f}%, "
                f"max {(max(generic) - 1) * 100:+.1f}%)"
            )
        lines.extend(k2_lines(dtype, unfused.get(dtype, [])))
    return lines


K2_GOAL = 0.85  # issue 9: K2 at >= 85% of the copy bandwidth
#: K2's efficiency two ways, each a ratio of two columns: its bandwidth over the large copy's,
#: and a plain copy of its own bytes (timed as K2 is) over K2's time.
K2_MEASURES = (
    ("the copy bandwidth", "k2_gbs", "copy_gbs"),
    ("a plain copy of its bytes", "k2_copy_us", "k2_us"),
)


def k2_lines(dtype: str, rows: list[results.Row]) -> list[str]:
    """K2 of the unfused engine's rows by each of ``K2_MEASURES``: the median, the range and
    the layers at the goal."""
    lines = []
    for what, top, bottom in K2_MEASURES:
        pairs = [(results.num(r, top), results.num(r, bottom)) for r in rows]
        values = [a / b for a, b in pairs if a and b]
        if values:
            met = sum(v >= K2_GOAL for v in values)
            lines.append(
                f"{dtype}: unfused K2 at {statistics.median(values):.0%} of {what} (median over "
                f"{len(values)} layers, {min(values):.0%}-{max(values):.0%}; "
                f">= {K2_GOAL:.0%} on {met})"
            )
    return lines


def cases(rows: list[results.Row]) -> dict[str, list[results.Row]]:
    by_case: dict[str, list[results.Row]] = {}
    for row in rows:
        by_case.setdefault(row["case"], []).append(row)
    return by_case


def engines_markdown(csv_path: Path) -> str:
    """The engines table (one line per case) and the geomeans under it."""
    rows = results.read(csv_path)
    lines = [engines_case_line(case_rows) for case_rows in cases(rows).values()]
    return "\n".join([ENGINES_HEADER, *lines, "", *engines_summary(rows)])
