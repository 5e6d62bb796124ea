"""Per-stage times of wino's c-target chain, K2 variants side by side, interleaved in one process.

For each case (MIOpenDriver lines) and tile: the default-pick plan and, for fp32, the same plan
with K2 swapped for its unscaled form (prescale none, a valid spec outside the grid) and for the
split prescale (K2a, then the register K2 reading its scales), each run in turns for
``--repeats`` rounds (U cached, workspace and y passed in). Every kernel launch and K3 call is
timed around the backend's call: with one thread (OMP_NUM_THREADS=1) on the calling thread's
CPU clock (time.thread_time, insensitive to the machine's load), else on the wall clock. Prints
the median per stage and chain, and each variant's chain over the default's.

    OMP_NUM_THREADS=1 python scripts/host_stages.py docs/bench/host_cases.txt --tile F4x4

The kernels come from a temp cache built here (the real build, content-addressed: a second run
compiles nothing), so this needs a C compiler but no prebuilt cache.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np

import wino
from wino.builder import builder
from wino.launch import stage_launch
from wino.pick import candidates, default_stage_specs
from wino.problem import read_miopen_file
from wino.refusals import Refused
from wino.runtime.arrays import numpy_dtype
from wino.runtime.host import HostBackend, host_threads
from wino.runtime.program import GemmOp
from wino.vocab import DType, K2Path, Prescale, Stage, Target

LABELS = {Stage.PRESCALE: "K2a", Stage.INPUT: "K2", Stage.OUTPUT: "K4"}


def fits(spec, problem) -> bool:
    try:
        stage_launch(spec, replace(problem, N=1))
    except Refused:
        return False
    return True


def swapped(specs: dict, swap: str) -> dict | None:
    """The specs with one swap's fields replaced: ``k4.vec=8,k2.block=256`` (stage short name,
    field, value); None when the swap does not apply (a stage the plan lacks, a spec the grid's
    rules refuse for this problem)."""
    out = dict(specs)
    for item in swap.split(","):
        target, value = item.split("=")
        stage, field = target.split(".")
        stage = next(s for s in Stage if s.short == stage)
        if stage not in out:
            return None
        value = int(value) if value.isdigit() else value
        out[stage] = out[stage].replace(**{field: value})
    return out


def variants(problem, tile, swaps=()) -> dict[str, dict]:
    """The default pick, each ``--swap`` of it, and, for a scaled K2, its unscaled and split
    forms."""
    specs = default_stage_specs(problem, tile, target=Target.C)
    out = {"default": specs}
    for swap in swaps:
        changed = swapped(specs, swap)
        if changed is not None and all(fits(s, problem) for s in changed.values()):
            out[swap] = changed
    k2 = specs[Stage.INPUT]
    if k2.prescale is Prescale.NONE:
        return out
    base = {s: v for s, v in specs.items() if s is not Stage.PRESCALE}
    none = k2.replace(prescale=Prescale.NONE, block=256, path=K2Path.REGISTER)
    out["pnone"] = {**base, Stage.INPUT: none}
    if k2.prescale is Prescale.FUSED:
        k2a = next(  # the declared order's first K2a that fits
            s for s in candidates(Stage.PRESCALE, k2.tile, k2.io, k2.xdtype) if fits(s, problem)
        )
        out["psplit"] = {
            **base,
            Stage.PRESCALE: k2a,
            Stage.INPUT: k2.replace(prescale=Prescale.SPLIT, block=256),
        }
    return out


class Timer:
    """Wraps a HostBackend's issue / issue_gemm: seconds per stage label of the current call."""

    def __init__(self, clock):
        self.clock = clock
        self.current: dict[str, float] = defaultdict(float)
        issue, gemm = HostBackend.issue, HostBackend.issue_gemm

        def timed_issue(backend, op, pointers, ctx):
            start = clock()
            issue(backend, op, pointers, ctx)
            self.current[LABELS.get(op.step.stage, op.step.stage.short)] += clock() - start

        def timed_gemm(backend, op: GemmOp, pointers, arrays, ctx):
            start = clock()
            gemm(backend, op, pointers, arrays, ctx)
            self.current["K3"] += clock() - start

        HostBackend.issue, HostBackend.issue_gemm = timed_issue, timed_gemm

    def call(self, fn) -> dict[str, float]:
        self.current = defaultdict(float)
        start = self.clock()
        fn()
        self.current["chain"] = self.clock() - start
        return dict(self.current)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", type=Path)
    parser.add_argument("--tile", default="F4x4")
    parser.add_argument("--dtype", default="fp32")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cache-root", type=Path, default=Path("/tmp/wino-host-stages"))
    parser.add_argument("--only", default="", help="run only cases whose label contains this")
    parser.add_argument(
        "--swap", action="append", default=[], help="a variant: the default with k4.vec=8,..."
    )
    args = parser.parse_args()
    threads = host_threads()
    clock = time.thread_time if threads == 1 else time.perf_counter
    tiles = args.tile.split(",")
    dtypes = [DType.parse(d) for d in args.dtype.split(",")]
    problems = [p for p in read_miopen_file(str(args.cases)) if args.only in p.label()]
    cases = []
    for problem in problems:
        for dtype in dtypes:
            for tile in tiles:
                p = replace(problem, dtype=dtype)
                cases.append((p, tile, variants(p, tile, args.swap)))
    wanted = {spec for _, _, vs in cases for specs in vs.values() for spec in specs.values()}
    builder.build(sorted(wanted, key=lambda s: s.name), [Target.C], root=args.cache_root)
    timer = Timer(clock)
    kind = "CPU (thread_time)" if threads == 1 else "wall"
    print(f"threads {threads}, {kind} ms, medians of {args.repeats} interleaved rounds")
    for p, tile, vs in cases:
        rng = np.random.default_rng(0)
        x = rng.standard_normal((p.N, p.H, p.W, p.C), np.float32).astype(numpy_dtype(p.dtype))
        w = rng.standard_normal((p.K, p.R, p.S, p.Cg), np.float32).astype(numpy_dtype(p.dtype))
        calls, ys = {}, {}
        for label, specs in vs.items():
            plan = wino.dispatch(p, target="c", tile=tile, specs=specs, cache_root=args.cache_root)
            ws = np.empty(plan.workspace_bytes, np.uint8)
            y = ys[label] = np.empty((p.N, p.Ho, p.Wo, p.K), x.dtype)
            U = plan.transform_filter(w)
            calls[label] = lambda plan=plan, x=x, y=y, ws=ws, U=U: plan.run(
                x, y=y, workspace=ws, U=U
            )
        samples = {label: [] for label in calls}
        for fn in calls.values():
            timer.call(fn)  # warm-up
        for _ in range(args.repeats):
            for label, fn in calls.items():
                samples[label].append(timer.call(fn))
        same = {label: ys[label].tobytes() == ys["default"].tobytes() for label in ys}
        chain0 = statistics.median(s["chain"] for s in samples["default"])
        for label, rounds in samples.items():
            keys = [k for k in ("K2a", "K2", "K3", "K4", "chain") if k in rounds[0]]
            med = {k: statistics.median(r[k] for r in rounds) * 1e3 for k in keys}
            parts = " ".join(f"{k} {v:7.2f}" for k, v in med.items())
            ratio = med["chain"] / (chain0 * 1e3)
            name = vs[label][Stage.INPUT].name
            print(
                f"{p.label():44s} {tile} {label:12s} {parts}  x{ratio:.2f}"
                f"  y same bytes: {same[label]}  ({name})",
                flush=True,
            )


if __name__ == "__main__":
    main()
