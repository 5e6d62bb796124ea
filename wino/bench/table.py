"""A bench CSV as a Markdown table (`wino plot CSV --table`): per case, the best verified wino
pipeline against cuDNN and its roofline bound."""

from __future__ import annotations

from pathlib import Path

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
