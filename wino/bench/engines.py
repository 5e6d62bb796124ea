"""The wino engines of ``wino bench --engines`` besides the unfused pipeline (``sweep``): the
fused plan (fused2d_rt) per tile and the baked-extent mirror of the best unfused pipeline, and
the U-cached timing every wino engine reports next to its K1-per-call time.

- fused: per tile, the grid's KF kernels of the tile and io dtype that the cache holds and that
  fit the problem (MMA dtype fp16 first), each timed with U cached (K1 out of the loop, K2a and
  KF in); the fastest that verifies is the tile's fused plan.
- baked: the fastest verified unfused pipeline of the case, its kernels rendered with the case's
  extents as constants and compiled here (wino.bench.baked), run by the same plan: the difference
  is what shape-generic costs.
- Times: ``total_us`` is the whole chain with K1 (weights change every call), ``cached_us`` the
  chain with U cached (``plan.transform_filter`` once per weights: the inference case).
"""

from __future__ import annotations

import math
from dataclasses import replace

from ..grid import aot_stage_specs
from ..pick import fused_pipeline
from ..problem import Problem
from ..refusals import Refused, check_problem
from ..runtime.plan import Plan, dispatch
from ..vocab import DType, Epilogue, Stage, Target, Tile
from . import accuracy
from .candidates import fits
from .device import Device, Operands
from .runs import TileRun
from .select import Pick, Prober


def chain_us(plan: Plan, device: Device, operands: Operands, workspace, cached: bool) -> float:
    """The median time of one run of the whole plan: with U cached (U and fs computed once per
    operand set, outside the timing) or with K1 in every run."""
    backend = plan.backend()  # the plan's cache (baked or AOT)
    filters = [None] * operands.sets
    if cached:
        filters = [backend.transform_filter(plan, w) for _, w, _ in operands.arrays]
        device.synchronize()

    def chain(s: int) -> None:
        x, w, y = operands.arrays[s]
        # the timer's stream, asked inside the capture (outside it is another: nothing recorded)
        stream = device.launch_stream()
        backend.run(plan, x, None if cached else w, y, workspace, filters[s], stream)

    return device.timer(final=True).time_us(chain, operands.sets)


# Fused ----------------------------------------------------------------------------------------
def fused_pipelines(
    problem: Problem, tile: Tile, names: set[str], limit: int | None, target: Target | None = None
):
    """The fused pipelines (K1, K2a, KF specs) of a tile the cache can run, fp16 MMA first,
    from ``target``'s grid (None: any target's)."""
    out = []
    for mdtype in (DType.FP16, DType.BF16):
        for kf in aot_stage_specs(Stage.FUSED, target):
            if (kf.tile, kf.io, kf.mdtype) != (tile, problem.dtype, mdtype):
                continue
            if kf.epilogue is not Epilogue.NONE:
                continue  # the bench times the plain convolution
            if kf.name not in names or not fits(kf, [problem]):
                continue
            try:
                specs = fused_pipeline(problem, kf, target)
            except Refused:
                continue
            if all(s.name in names for s in specs.values()):
                out.append(specs)
    return out[:limit] if limit else out


def fused_tile(problem: Problem, tile: Tile, device: Device, operands: Operands, ref, options):
    """The tile's fused run (a sweep.TileRun; None when no fused kernel runs it), or None."""

    try:
        check_problem(problem, tile)
    except Refused:
        return None
    limit = options.candidate_limit or device.CANDIDATE_LIMIT
    prober = Prober(device, problem, operands, options.cache_root)
    timed = []
    for specs in fused_pipelines(problem, tile, device.kernel_names, limit, device.target):
        try:
            plan = dispatch(
                problem, target=device.target, specs=specs, cache_root=options.cache_root
            )
        except (Refused, KeyError):
            continue
        timed.append((chain_us(plan, device, operands, prober.workspace(plan), True), plan))
    if not timed:
        return None
    timed.sort(key=lambda t: t[0])
    bound = accuracy.tolerance(tile, problem.dtype)
    chosen, error = timed[0][1], None
    if ref is not None:
        for _, plan in timed:
            error = plan_error(plan, device, operands, prober.workspace(plan), ref)
            if accuracy.passes(error, bound):
                chosen = plan
                break
        else:
            chosen, error = (
                timed[0][1],
                plan_error(timed[0][1], device, operands, prober.workspace(timed[0][1]), ref),
            )
    run = timed_run(chosen, device, operands, prober, error, bound, options)
    prober.release()
    return run


def plan_error(plan: Plan, device: Device, operands: Operands, workspace, ref) -> float:
    """One run of the whole plan (K1 included) on a poisoned output; its error against ref."""
    x, w, y = operands.arrays[0]
    device.poison(y)
    plan.backend().run(plan, x, w, y, workspace, None)  # a backend loads from its own cache
    device.synchronize()
    return device.error(y, ref)


def timed_run(plan: Plan, device: Device, operands: Operands, prober, error, bound, options):
    """A sweep.TileRun of a plan timed whole: K1 per call (total) and U cached."""
    workspace = prober.workspace(plan)
    total = chain_us(plan, device, operands, workspace, False)
    cached = chain_us(plan, device, operands, workspace, True)
    pick = Pick(None, dict(plan.specs), {}, plan, prober)
    check = chain_us(plan, device, operands, workspace, False) if options.recheck else None
    return TileRun(pick, {}, total, error, bound, check, cached)


# Baked ----------------------------------------------------------------------------------------
def baked_run(best, device: Device, operands: Operands, ref, options):
    """The baked mirror of an unfused TileRun (its plan on binaries that know the extents)."""
    from .baked import baked_plan

    plan = baked_plan(best.pick.plan, options.baked_root)
    prober = Prober(device, plan.problem, operands, options.cache_root)
    error = None
    if ref is not None:
        error = plan_error(plan, device, operands, prober.workspace(plan), ref)
    run = timed_run(plan, device, operands, prober, error, best.tolerance, options)
    prober.release()
    return replace(run, stage_us={})


def best_of(runs) -> object | None:
    """The fastest run that verified (or, none checked, the fastest), by U-cached time."""
    usable = [r for r in runs if r.error is None or r.verified]
    if not usable:
        return None
    return min(usable, key=lambda r: r.cached_us if r.cached_us is not None else math.inf)
