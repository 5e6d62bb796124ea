"""The leaner unfused pipeline on an H200: per public layer, each stage's time, bytes, achieved
bandwidth and share of the copy bandwidth, fp16 and bf16, M stored in fp32 (the old default)
against the current default pick (M in fp16 where the fp16_m_range rule admits it), with cuDNN.

    python3 scripts/gpu_lean.py build           # the CUDA kernels this needs, into $WINO_BUILD
    python3 scripts/gpu_lean.py table           # the per-stage table and the geomeans vs cuDNN
    python3 scripts/gpu_lean.py stages          # every K2 and K4 candidate of each layer, alone
    python3 scripts/gpu_lean.py once CASE       # each K2 candidate once (under ncu)
    python3 scripts/gpu_lean.py rowstages       # the default K2 and every LDS-rows K2, alone

WINO_LEAN_VARIANTS picks the pipelines `build` and `table` use (default old,new): old (the
pick before issue 9's first changes), new (the default pick), rows8 / rows4 (the default pick
with K2 on the LDS-rows path at vec 8 / vec 4: the fused prescale's fewest lanes that hold C,
else the split one). `once` runs the default K2 and the LDS-rows candidates of the case.

Run from the repository root with CuPy and PyTorch importable (doit is not needed: the build
goes through wino.builder.builder). Times are CUDA-graph replays (wino.bench's timer: the
median of 25 after 5 warm-ups, operands rotated past the L2); "chain" is K2a + K2 + K3 + K4
replayed together with U cached (K1 once per weights, the inference case).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from wino.bench import compare, stages  # noqa: E402
from wino.bench.candidates import family  # noqa: E402
from wino.bench.cases import problems_from  # noqa: E402
from wino.bench.device import open_device  # noqa: E402
from wino.bench.roofline import bandwidth_gbs, stage_bytes  # noqa: E402
from wino.bench.select import Prober  # noqa: E402
from wino.grid import aot_stage_specs  # noqa: E402
from wino.launch import stage_launch  # noqa: E402
from wino.pick import candidates, default_stage_specs  # noqa: E402
from wino.problem import Problem  # noqa: E402
from wino.refusals import Refused  # noqa: E402
from wino.runtime.plan import default_tile  # noqa: E402
from wino.runtime.verify import bound_for  # noqa: E402
from wino.vocab import DType, K2Path, Prescale, Stage, Target  # noqa: E402

ROOT = Path(os.environ.get("WINO_BUILD", "/tmp/wino-lean-build"))
TARGET = Target(os.environ.get("WINO_LEAN_TARGET", "cuda"))  # c: a host smoke run
LIMIT = int(os.environ.get("WINO_LEAN_LIMIT", "0")) or None  # the first N layers
CASES = Path(
    os.environ.get("WINO_LEAN_CASES", Path(__file__).resolve().parents[1] / "cases/public.txt")
)
DTYPES = tuple(DType(d) for d in os.environ.get("WINO_LEAN_DTYPES", "fp16,bf16").split(","))
TIMED = (Stage.PRESCALE, Stage.INPUT, Stage.GEMM, Stage.OUTPUT)  # U cached: K1 once
VARIANTS = tuple(os.environ.get("WINO_LEAN_VARIANTS", "old,new").split(","))
ROW_VECS = (8, 4, 2)  # the LDS-rows K2 vectors the grid holds (rowstages, build)


def layers() -> list[Problem]:
    """The public layers wino serves (3x3 stride 1), each in fp16 and bf16."""
    problems, _ = problems_from([CASES])
    out = []
    for p in problems:
        if p.R != 3 or p.stride_h != 1:
            continue
        out += [replace(p, dtype=d) for d in DTYPES]
    return out[:LIMIT]


def _first_fit(specs, problem: Problem, **kw):
    for spec in specs:
        try:
            stage_launch(spec, replace(problem, N=1), **kw)
        except Refused:
            continue
        return spec
    raise LookupError(f"nothing fits {problem.label()}")


def old_pick(problem: Problem, new: dict) -> dict:
    """The default pick before this work: K2 by (vec descending, register path, fused / split /
    none, block 256 / 512 / 1024) without the streamed transform, K4 with M in fp32."""
    tile, k2 = new[Stage.INPUT].tile, new[Stage.INPUT]
    rank = {Prescale.FUSED: 0, Prescale.SPLIT: 1, Prescale.NONE: 2}
    held = [
        s
        for s in candidates(Stage.INPUT, tile, problem.dtype, k2.xdtype, target=TARGET)
        if s.stream == 0 and s.path is K2Path.REGISTER and s.block >= 256
    ]
    held.sort(key=lambda s: (-s.vec, rank[s.prescale], s.block))
    old = {Stage.FILTER: new[Stage.FILTER]}
    old[Stage.INPUT] = _first_fit(held, problem)
    if old[Stage.INPUT].prescale is Prescale.SPLIT:
        k2a = candidates(Stage.PRESCALE, tile, problem.dtype, k2.xdtype, target=TARGET)
        old[Stage.PRESCALE] = _first_fit(k2a, problem)
    k4s = [
        s
        for s in candidates(Stage.OUTPUT, tile, problem.dtype, k2.xdtype, target=TARGET)
        if s.accdtype is DType.FP32 and s.block == 256
    ]
    old[Stage.OUTPUT] = _first_fit(k4s, problem)
    return old


def lds_rows(problem: Problem, vec: int) -> list:
    """The grid's LDS-rows K2 specs of the problem's default tile and storage at ``vec`` that
    fit it: the fused prescale first, then the fewest lanes (the smallest region holding C)."""
    tile = default_tile(problem)
    xdtype = default_stage_specs(problem, tile, target=TARGET)[Stage.INPUT].xdtype
    rank = {Prescale.FUSED: 0, Prescale.SPLIT: 1, Prescale.NONE: 2}
    specs = [
        s
        for s in aot_stage_specs(Stage.INPUT, TARGET)
        if s.path is K2Path.LDS_ROWS
        and (s.tile, s.io, s.xdtype, s.vec) == (tile, problem.dtype, xdtype, vec)
    ]
    specs.sort(key=lambda s: (rank[s.prescale], s.lds_lanes, s.block))
    out = []
    for spec in specs:
        try:
            stage_launch(spec, replace(problem, N=1))
        except Refused:
            continue
        out.append(spec)
    return out


def rows_pick(problem: Problem, new: dict, vec: int) -> dict | None:
    """The default pick with K2 on the LDS-rows path at ``vec`` (K2a where it is split)."""
    fitting = lds_rows(problem, vec)
    if not fitting:
        return None
    specs = {k: v for k, v in new.items() if k is not Stage.PRESCALE}
    specs[Stage.INPUT] = fitting[0]
    if fitting[0].prescale is Prescale.SPLIT:
        k2a = candidates(
            Stage.PRESCALE, fitting[0].tile, problem.dtype, fitting[0].xdtype, target=TARGET
        )
        specs[Stage.PRESCALE] = _first_fit(k2a, problem)
    return specs


def variants(problem: Problem) -> dict[str, dict]:
    """old: the pick before this work (held-window K2 at block >= 256, M in fp32); new: the
    default pick; rows8 / rows4: the default pick with the LDS-rows K2 (``rows_pick``).
    Only those WINO_LEAN_VARIANTS names; a rows variant nothing fits is left out."""
    new = default_stage_specs(problem, default_tile(problem), target=TARGET)
    out = {"old": lambda: old_pick(problem, new), "new": lambda: new}
    out |= {f"rows{v}": (lambda v=v: rows_pick(problem, new, v)) for v in (8, 4)}
    picked = {name: out[name]() for name in VARIANTS}
    return {name: specs for name, specs in picked.items() if specs is not None}


def k2_candidates(problem: Problem):
    specs = variants(problem)["new"]
    return family(problem, default_tile(problem), specs[Stage.INPUT].xdtype).by_stage


def build() -> None:
    from wino.builder import builder

    specs = set()
    for p in layers():
        for v in variants(p).values():
            specs |= set(v.values())
        if any(v.startswith("rows") for v in VARIANTS):  # every LDS-rows K2 (rowstages)
            specs |= {s for vec in ROW_VECS for s in lds_rows(p, vec)} | {split_prescale(p)}
        if os.environ.get("WINO_LEAN_CANDIDATES", "1") != "0":  # 0: the variants' kernels only
            by = k2_candidates(p)
            specs |= set(by[Stage.INPUT]) | set(by[Stage.PRESCALE]) | set(by[Stage.OUTPUT])
    result = builder.build(
        sorted(specs, key=lambda s: s.name), [TARGET], root=ROOT, jobs=os.cpu_count()
    )
    print(f"built {len(specs)} kernels into {ROOT}: {result.messages[-3:]}")


def _label(p: Problem) -> str:
    return f"N{p.N} C{p.C} {p.H}x{p.W} K{p.K}"


def _chain(prober: Prober, plan, operands) -> float:
    backend, ws = prober.device.backend, prober.workspace(plan)
    stages.load(plan, backend)
    calls = [stages.issuers(plan, backend, *raw, ws) for raw in operands.raw]

    def issue(s: int) -> None:
        for stage in TIMED:
            if stage in calls[s]:
                calls[s][stage]()

    return prober.device.timer(True).time_us(issue, operands.sets)


def _error(prober: Prober, plan, operands, ref) -> float:
    x, w, y = operands.arrays[0]
    dev = prober.device
    dev.poison(y)
    dev.backend.run(plan, x, w, y, prober.workspace(plan), None)
    dev.synchronize()
    return dev.error(y, ref)


def table() -> int:
    device = open_device(TARGET, ROOT)
    copy = device.copy_gbs()
    print(f"copy bandwidth {copy:.0f} GB/s (1 GiB device-to-device, eager)")
    print("layer | dtype | M | stage | us | MB | GB/s | % copy | kernel")
    ratios: dict[tuple[str, DType], list[tuple[Problem, float]]] = {}
    status = 0
    for p in layers():
        operands = device.operands(p)
        ref = device.reference(p, operands)
        cudnn_us = compare.cudnn(p, device, operands).time_us if TARGET is Target.CUDA else math.nan
        prober = Prober(device, p, operands, ROOT)
        for label, specs in variants(p).items():
            plan = prober.plan(specs)
            moved = stage_bytes(plan)
            for stage in TIMED:
                if stage not in moved:
                    continue
                us = prober.time_stage(plan, stage, final=True)
                gbs = bandwidth_gbs(moved[stage], us)
                name = "cuBLAS" if stage is Stage.GEMM else plan.specs[stage].name
                print(
                    f"{_label(p)} | {p.dtype.short} | {plan.accdtype.short} | {stage.short} | "
                    f"{us:.1f} | {moved[stage] / 1e6:.1f} | {gbs:.0f} | {100 * gbs / copy:.0f} | "
                    f"{name}"
                )
            chain = _chain(prober, plan, operands)
            error = _error(prober, plan, operands, ref)
            bound = bound_for(plan.tile, p.dtype, plan.xdtype)
            ok = error <= bound
            status |= not ok
            ratio = cudnn_us / chain
            ratios.setdefault((label, p.dtype), []).append((p, ratio))
            print(
                f"{_label(p)} | {p.dtype.short} | {plan.accdtype.short} | chain | {chain:.1f} | "
                f"cuDNN {cudnn_us:.1f} us | {ratio:.3f}x cuDNN | error {error:.2e} "
                f"bound {bound:.0e} {'PASS' if ok else 'FAIL'} | {plan.tile.name}"
            )
        prober.release()
    _geomeans(ratios)
    return status


def _geomeans(ratios) -> None:
    def geo(values):
        return math.exp(statistics.fmean(math.log(v) for v in values)) if values else float("nan")

    for (label, dtype), rows in sorted(ratios.items(), key=lambda kv: (kv[0][1].short, kv[0][0])):
        wide = [r for p, r in rows if p.C >= 64 and p.K >= 64]
        big = [r for p, r in rows if p.C >= 256 and p.K >= 256]
        print(
            f"geomean {dtype.short} {label}: C,K >= 64 {geo(wide):.3f}x cuDNN "
            f"({len(wide)} layers); "
            f"256/512-channel {geo(big):.3f}x ({len(big)} layers)"
        )


def _time_candidate(prober: Prober, base: dict, stage: Stage, spec, k2a) -> tuple[float, int]:
    specs = {k: v for k, v in base.items() if k is not Stage.PRESCALE}
    specs[stage] = spec
    k2 = specs[Stage.INPUT]
    if k2.prescale is Prescale.SPLIT:
        specs[Stage.PRESCALE] = k2a
    plan = prober.plan(specs)
    return prober.time_stage(plan, stage, final=True), stage_bytes(plan)[stage]


def _print_candidate(prober, base, stage: Stage, spec, k2a, copy: float) -> None:
    """One candidate timed alone, as a table row: us, GB/s and % of the copy bandwidth."""
    p = prober.problem
    try:
        us, moved = _time_candidate(prober, base, stage, spec, k2a)
    except (Refused, KeyError) as err:
        print(f"{_label(p)} {p.dtype.short} {spec.name}: {err}")
        return
    gbs = bandwidth_gbs(moved, us)
    print(
        f"{stage.short} {_label(p)} | {p.dtype.short} | {spec.name} | {us:.1f} us | "
        f"{gbs:.0f} GB/s | {100 * gbs / copy:.0f}% copy"
    )


def stage_candidates() -> None:
    """Every K2 and K4 candidate of each layer (the default xdtype), timed alone."""
    device = open_device(TARGET, ROOT)
    copy = device.copy_gbs()
    print(f"copy bandwidth {copy:.0f} GB/s")
    for p in layers():
        operands = device.operands(p)
        prober = Prober(device, p, operands, ROOT)
        base = variants(p)["new"]
        by = k2_candidates(p)
        k2a = by[Stage.PRESCALE][0] if by[Stage.PRESCALE] else None
        for stage in (Stage.INPUT, Stage.OUTPUT):
            for spec in by[stage]:
                _print_candidate(prober, base, stage, spec, k2a, copy)
        prober.release()


def split_prescale(problem: Problem):
    """The K2a of the problem's default tile and storage (for the split LDS-rows K2)."""
    k2 = default_stage_specs(problem, default_tile(problem), target=TARGET)[Stage.INPUT]
    return _first_fit(
        candidates(Stage.PRESCALE, k2.tile, problem.dtype, k2.xdtype, target=TARGET), problem
    )


def rows_stages() -> None:
    """The default K2 and every LDS-rows K2 of each layer (grid order: fused, fewest lanes
    first; vec 8, 4, then 2; held and streamed), each timed alone, as % of the copy
    bandwidth."""
    device = open_device(TARGET, ROOT)
    copy = device.copy_gbs()
    print(f"copy bandwidth {copy:.0f} GB/s")
    for p in layers():
        operands = device.operands(p)
        prober = Prober(device, p, operands, ROOT)
        base = variants(p)["new"]
        k2a = base.get(Stage.PRESCALE) or split_prescale(p)
        for spec in (base[Stage.INPUT], *(s for vec in ROW_VECS for s in lds_rows(p, vec))):
            _print_candidate(prober, base, Stage.INPUT, spec, k2a, copy)
        prober.release()


def once(case: str) -> None:
    """Each K2 candidate of the case (a MIOpenDriver line) run once, for ncu -k regex:k2_."""
    device = open_device(TARGET, ROOT)
    for dtype in DTYPES:
        p = replace(Problem.from_miopen(case), dtype=dtype)
        operands = device.operands(p)
        prober = Prober(device, p, operands, ROOT)
        base = variants(p)["new"]
        by = k2_candidates(p)
        k2s = by[Stage.INPUT]
        if any(v.startswith("rows") for v in VARIANTS):  # the default K2 and the LDS-rows ones
            k2s = (base[Stage.INPUT], *lds_rows(p, 8)[:1], *lds_rows(p, 4)[:1])
        for spec in k2s:
            specs = {k: v for k, v in base.items() if k is not Stage.PRESCALE}
            specs[Stage.INPUT] = spec
            if spec.prescale.value == "split":
                specs[Stage.PRESCALE] = by[Stage.PRESCALE][0]
            plan = prober.plan(specs)
            stages.load(plan, device.backend)
            x, w, y = operands.raw[0]
            stages.issuers(plan, device.backend, x, w, y, prober.workspace(plan))[Stage.INPUT]()
            device.synchronize()
            print(f"ran {spec.name}")
        prober.release()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("build", "table", "stages", "rowstages", "once"))
    parser.add_argument("case", nargs="?", default="")
    args = parser.parse_args()
    if args.mode == "build":
        build()
    elif args.mode == "table":
        return table()
    elif args.mode == "stages":
        stage_candidates()
    elif args.mode == "rowstages":
        rows_stages()
    else:
        once(args.case)
    return 0


if __name__ == "__main__":
    sys.exit(main())
