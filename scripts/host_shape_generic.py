"""What shape-generic costs on the host, robust to a shared machine's load: per layer, the AOT
plan (the default pick) and its baked mirror (wino.bench.baked) run interleaved with U cached,
timed in CPU time of this process (``time.process_time``: with OMP_NUM_THREADS=1 the kernels and
the host GEMM run on the calling thread), and the median of the per-round ratios.

    OMP_NUM_THREADS=1 python scripts/host_shape_generic.py docs/bench/host_cases.txt \
        --dtype fp32 --tile F4x4 --rounds 7 [--limit 4]

Builds the AOT kernels it needs into $WINO_BUILD (default /tmp/wino-shape-generic) and the
baked ones under the temp dir. Prints one line per layer and the geomean of unfused / baked.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from wino.bench.baked import baked_plan  # noqa: E402
from wino.builder import builder  # noqa: E402
from wino.pick import default_stage_specs  # noqa: E402
from wino.problem import Problem  # noqa: E402
from wino.runtime import dispatch  # noqa: E402
from wino.runtime.arrays import numpy_dtype  # noqa: E402
from wino.vocab import DType, Target, Tile  # noqa: E402


def cpu_us(run) -> float:
    start = time.process_time()
    run()
    return (time.process_time() - start) * 1e6


def layer(problem: Problem, tile: Tile, root: Path, rounds: int) -> tuple[float, float, float]:
    """(AOT us, baked us, median ratio AOT / baked), U cached, interleaved rounds."""
    specs = default_stage_specs(problem, tile)
    builder.build(list(specs.values()), [Target.C], root=root, jobs=2)
    aot = dispatch(problem, target=Target.C, specs=specs, cache_root=root)
    baked = baked_plan(aot)
    rng = np.random.default_rng(0)
    dt = numpy_dtype(problem.dtype)
    x = rng.standard_normal((problem.N, problem.H, problem.W, problem.C)).astype(dt)
    w = rng.standard_normal((problem.K, 3, 3, problem.Cg)).astype(dt)
    runs = []
    for plan in (aot, baked):
        u = plan.transform_filter(w)
        y = np.empty((problem.N, problem.Ho, problem.Wo, problem.K), dt)
        ws = np.empty(plan.workspace_bytes, np.uint8)
        runs.append(lambda plan=plan, u=u, y=y, ws=ws: plan.run(x, U=u, y=y, workspace=ws))
    for run in runs:
        run()  # warm-up: loads, first touches
    times: list[list[float]] = [[], []]
    for _ in range(rounds):
        for i, run in enumerate(runs):
            times[i].append(cpu_us(run))
    ratios = [a / b for a, b in zip(*times, strict=True)]
    return statistics.median(times[0]), statistics.median(times[1]), statistics.median(ratios)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", type=Path)
    parser.add_argument("--dtype", default="fp32")
    parser.add_argument("--tile", default="F4x4")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--limit", type=int)
    args = parser.parse_args()
    root = Path(os.environ.get("WINO_BUILD") or "/tmp/wino-shape-generic")
    text = args.cases.read_text(encoding="utf-8")
    lines = [line.split("#", 1)[0].strip() for line in text.splitlines()]
    problems = [Problem.from_miopen(line) for line in lines if line][: args.limit]
    dtype, tile = DType(args.dtype), Tile.parse(args.tile)
    threads = os.environ.get("OMP_NUM_THREADS", "unset")
    print(f"OMP_NUM_THREADS={threads}, {args.rounds} interleaved rounds, CPU time, U cached")
    ratios = []
    for problem in problems:
        problem = dataclasses.replace(problem, dtype=dtype)
        aot_us, baked_us, ratio = layer(problem, tile, root, args.rounds)
        ratios.append(ratio)
        print(
            f"{problem.label()} {tile.name}: AOT {aot_us:.0f} us, baked {baked_us:.0f} us, "
            f"AOT / baked {ratio:.3f} (median of rounds)",
            flush=True,
        )
    geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    print(f"shape-generic cost (AOT / baked - 1), geomean over {len(ratios)}: {geomean - 1:+.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
