"""The results CSV: one row per case x engine x tile, merged by key and written atomically.

Key: (target, case, engine, tile); ``case`` is the canonical MIOpenDriver line (dtype, batch
and dilation included, each flag once). A later row replaces an earlier one with the same key;
other rows are kept in their order, so an interrupted sweep resumes (``--skip-measured``)
without losing rows. Values are strings as the csv module reads them; empty means not measured
/ not applicable. ``verified`` is ``yes`` (checked, within the bound), ``no`` (checked, out of
bounds: ``error`` says by how much) or ``unverified`` (not checked: ``wino bench --no-verify``).
"""

from __future__ import annotations

import csv
import math
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from ..files import chmod_as_open
from ..problem import canonical_line

KEY = ("target", "case", "engine", "tile")
SHAPE = ("N", "C", "H", "W", "K", "pad_h", "pad_w", "dil_h", "dil_w", "groups")
STAGE_COLUMNS = ("k1", "k2a", "k2", "k3", "k4")
COLUMNS = (
    "target",
    "case",
    "label",
    "dtype",
    *SHAPE,
    "engine",
    "tile",
    "timing",
    "xdtype",
    "batch_split",
    "k1",
    "k2a",
    "k2",
    "k4",
    *(f"{s}_us" for s in STAGE_COLUMNS),
    "total_us",
    "tflops",
    "k1_gbs",
    "k2a_gbs",
    "k2_gbs",
    "k4_gbs",
    "copy_gbs",
    "gemm_tflops",
    "bound_us",
    "bound_ratio",
    "error",
    "tolerance",
    "verified",
    "speedup",
    "winner",
    # wino bench --engines (added after the first columns, which keep their places)
    "plan_kind",  # unfused2d_rt or fused2d_rt (empty on a direct engine's row)
    "kf",  # the fused kernel
    "cached_us",  # U cached (K1 once per weights; a direct engine's time as is)
    "cached_tflops",
    "cached_speedup",  # a direct engine's time / this row's cached time
    "cached_winner",  # the fastest engine of the case with U cached
    # a fused row: bound_us its roofline with U cached, bound_ratio against cached_us
    "l2_mb",  # what the fused kernel reads through the L2
    "l2_gbs",  # the L2 bandwidth measured in the run
    # an unfused row: a plain copy of each stage's bytes, timed as the stage (sweep.COPIED_STAGES)
    "k2_copy_us",
    "k3_copy_us",
    "k4_copy_us",
    "mma_tflops",  # the tensor rate of a GEMM bound by its multiply-adds (Device.MMA_SHAPE)
)
#: Columns that are the sweep's content although they come after the first timing.
_CONTENT_TAIL = ("tolerance", "verified", "plan_kind", "kf", "l2_mb")
#: Columns that differ between two runs of the same sweep: the timings and the rates and ratios
#: derived from them, and the error (fresh random operands per run). The other columns are the
#: sweep's content: what ran (case, tile, binaries, batch split) and whether it verified.
#: (Written as the tail of COLUMNS from the first timing, less the verification's content.)
MEASURED = tuple(c for c in COLUMNS[COLUMNS.index("k1_us") :] if c not in _CONTENT_TAIL)
Row = dict[str, str]
UNVERIFIED = "unverified"  # ``verified`` of a row that was not checked (--no-verify)


def content(rows: Iterable[Row]) -> list[Row]:
    """The rows without their MEASURED columns, in order: what two runs of a sweep (serial, or
    sharded through Dask) must agree on."""
    return [{c: row.get(c, "") for c in COLUMNS if c not in MEASURED} for row in rows]


def key(row: Row) -> tuple[str, ...]:
    return tuple(row.get(k, "") for k in KEY)


def fmt(value: float | int | None, digits: int = 4) -> str:
    """A number for the CSV: significant digits, '' for None, 'inf' / 'nan' as such."""
    if value is None:
        return ""
    if isinstance(value, int):
        return str(value)
    if math.isnan(value) or math.isinf(value):
        return str(value)
    return f"{value:.{digits}g}"


def num(row: Row, column: str) -> float | None:
    text = row.get(column, "")
    return float(text) if text not in ("", None) else None


def failed(row: Row) -> bool:
    """Checked against the reference and out of bounds."""
    return row.get("error", "") != "" and row.get("verified") != "yes"


def read(path: Path) -> list[Row]:
    """The rows of a results CSV ([] when it does not exist); unknown columns are dropped."""
    path = Path(path)
    if not path.is_file():
        return []
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        missing = [k for k in KEY if k not in (reader.fieldnames or ())]
        if missing:
            raise ValueError(f"{path}: not a wino results CSV (no {', '.join(missing)} column)")
        rows = [{c: row.get(c) or "" for c in COLUMNS} for row in reader]
    for row in rows:  # CSVs written before the case strings were canonical spelled -l/-j twice
        row["case"] = canonical_line(row["case"])
    return rows


def merge(old: Iterable[Row], new: Iterable[Row]) -> list[Row]:
    """``old`` with rows of the same key replaced by ``new`` (in place), then the rest of new."""
    fresh = {key(row): row for row in new}
    out = [fresh.pop(key(row), row) for row in old]
    return out + list(fresh.values())


def write(path: Path, rows: Iterable[Row]) -> Path:
    """Write the CSV atomically: a temp file in the same folder, then a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", suffix=".tmp", dir=path.parent)
    try:
        chmod_as_open(fd)  # mkstemp's 0600 would outlive the rename
        with os.fdopen(fd, "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=COLUMNS, extrasaction="ignore")
            writer.writeheader()
            for row in rows:
                writer.writerow({c: row.get(c, "") for c in COLUMNS})
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def update(path: Path, new: Iterable[Row]) -> list[Row]:
    """Merge ``new`` into the CSV at ``path`` (winners and speedups recomputed) and write it;
    returns every row."""
    rows = annotate(merge(read(path), new))
    write(path, rows)
    return rows


def measured_cases(rows: Iterable[Row], target: str, engines: Iterable[str]) -> set[str]:
    """Cases that have a row of every engine on this target."""
    seen: dict[str, set[str]] = {}
    for row in rows:
        if row.get("target") == target:
            seen.setdefault(row["case"], set()).add(row["engine"])
    want = set(engines)
    return {case for case, have in seen.items() if want <= have}


#: The CSV's engine names of wino's own engines (wino.bench.modes.Engine.row_name).
WINO_ENGINES = ("wino", "fused", "baked")
#: Those a user runs without a compiler (the Best line's pool).
AOT_ENGINES = ("wino", "fused")


def best_wino(rows: Iterable[Row], column: str = "total_us") -> Row | None:
    """The fastest row of a wino engine (unfused, fused, baked) by ``column`` that did not
    fail verification, verified rows first."""
    usable = [
        r for r in rows if r.get("engine") in WINO_ENGINES and not failed(r) and num(r, column)
    ]
    verified = [r for r in usable if r.get("verified") == "yes"]
    pool = verified or usable
    return min(pool, key=lambda r: num(r, column)) if pool else None


def engine_label(row: Row) -> str:
    """``wino F4x4`` (unfused), ``fused F2x2``, ``baked F4x4``, or the direct engine."""
    return f"{row['engine']} {row['tile']}" if row["engine"] in WINO_ENGINES else row["engine"]


#: The engines a wino row is compared with (``wino bench --compare``).
DIRECT_ENGINES = ("cudnn", "onnxruntime")


def annotate(rows: list[Row]) -> list[Row]:
    """Per case: ``speedup`` on the wino rows (direct time / wino time) and the ``winner`` on
    every row (``wino <tile>`` or the engine), when the case has a direct engine's row (cuDNN
    or onnxruntime)."""
    by_case: dict[tuple[str, str], list[Row]] = {}
    for row in rows:
        by_case.setdefault((row["target"], row["case"]), []).append(row)
    for case_rows in by_case.values():
        _annotate_case(case_rows, "total_us", "speedup", "winner")
        _annotate_case(case_rows, "cached_us", "cached_speedup", "cached_winner")
    return rows


def _annotate_case(case_rows: list[Row], time: str, speedup: str, winner: str) -> None:
    """``speedup`` (direct / wino time) on the wino rows and ``winner`` on every row, by the
    ``time`` column, when the case has a direct engine's row with that time."""
    cudnn = next((r for r in case_rows if r["engine"] in DIRECT_ENGINES), None)
    cudnn_us = num(cudnn, time) if cudnn else None
    if not cudnn_us:
        return
    for row in case_rows:
        if row["engine"] in WINO_ENGINES and num(row, time):
            row[speedup] = fmt(cudnn_us / num(row, time))
    best = best_wino(case_rows, time)
    won = best is not None and num(best, time) < cudnn_us
    label = engine_label(best) if won else cudnn["engine"]
    for row in case_rows:
        row[winner] = label


def engine_times(case_rows: list[Row], time: str = "cached_us") -> dict[str, tuple[str, float]]:
    """Per engine of a case, its best usable row's (label, time): a wino engine's fastest tile
    that did not fail verification, a direct engine's row."""
    out: dict[str, tuple[str, float]] = {}
    for row in case_rows:
        value = num(row, time)
        if not value or failed(row):
            continue
        if row["engine"] not in out or value < out[row["engine"]][1]:
            out[row["engine"]] = (engine_label(row), value)
    return out
