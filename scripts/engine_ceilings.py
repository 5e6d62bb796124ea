"""How far any Winograd engine could get past the direct engine, per layer of a `wino bench
--engines` CSV, from the rates measured in the same run:

- the MMA floor: the tile's Winograd multiply-adds (2 x bins x tiles x K x C/G FLOPs) at the
  run's tensor rate (the unfused row's ``mma_tflops``: cuBLAS on a GEMM too large to wait on
  memory; ``--mma-tflops`` for a CSV without the column), with no transform, no memory traffic
  and no launch costing anything;
- the memory floor: x read and y written once at the run's copy bandwidth (``copy_gbs``);
- the ceiling: the direct engine's time over the larger floor, the most a Winograd engine with
  that tile and at that MMA rate could reach; next to it what the best AOT engine reached.

    python3 scripts/engine_ceilings.py docs/bench/h100_engines_stop41.csv [--dtype fp16]

Runs anywhere (no GPU): it reads the CSV only.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from wino.bench import results  # noqa: E402
from wino.bench.table import best, case_ratios, cases, direct_row, row_problem  # noqa: E402
from wino.geometry import TileGrid  # noqa: E402
from wino.vocab import Tile  # noqa: E402

HEADER = (
    "| layer | dtype | tile | direct us | best AOT / direct | MMA floor us | memory floor us "
    "| ceiling (direct / larger floor) |\n|---|---|---|---:|---:|---:|---:|---:|"
)


def floors(row: results.Row, mma: float | None = None) -> tuple[float, float] | None:
    """(MMA floor, memory floor) in microseconds of an unfused row (``mma``: the tensor rate
    where the row has none), None without the rates."""
    p, copy = row_problem(row), results.num(row, "copy_gbs")
    mma = results.num(row, "mma_tflops") or mma
    if p is None or not mma or not copy:
        return None
    tile = Tile.parse(row["tile"])
    flops = 2 * tile.bins * TileGrid.of(p, tile).P * p.K * p.Cg
    moved = p.dtype.itemsize * p.N * (p.H * p.W * p.C + p.Ho * p.Wo * p.K)
    return flops / (mma * 1e6), moved / (copy * 1e3)


def case_line(case_rows: list[results.Row], mma: float | None = None) -> str | None:
    unfused, direct = best(case_rows, "wino"), direct_row(case_rows)
    if unfused is None or direct is None or (both := floors(unfused, mma)) is None:
        return None
    mma, memory = both
    direct_us = results.num(direct, "total_us")
    aot = case_ratios(case_rows).get("aot")
    label = unfused["label"].split(" ", 1)[1]
    return (
        f"| {label} | {unfused['dtype']} | {unfused['tile']} | {direct_us:.1f} "
        f"| {aot:.2f}x | {mma:.1f} | {memory:.1f} | {direct_us / max(mma, memory):.2f}x |"
    )


def markdown(rows: list[results.Row], dtype: str | None = None, mma: float | None = None) -> str:
    lines = [
        line
        for case_rows in cases(rows).values()
        if dtype in (None, case_rows[0]["dtype"])
        if (line := case_line(case_rows, mma)) is not None
    ]
    return "\n".join([HEADER, *lines])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", type=Path, help="a `wino bench --engines` CSV")
    parser.add_argument("--dtype", help="only this dtype's cases (fp16, bf16, fp32)")
    parser.add_argument(
        "--mma-tflops", type=float, help="the tensor rate for rows without mma_tflops (TFLOP/s)"
    )
    args = parser.parse_args(argv)
    print(markdown(results.read(args.csv), args.dtype, args.mma_tflops))
    return 0


if __name__ == "__main__":
    sys.exit(main())
