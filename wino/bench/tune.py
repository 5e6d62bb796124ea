"""``wino tune``: measure like ``wino bench --verify`` and write each case's winner (the fastest
verified tile and its binaries) into the tuning DB, which ``dispatch`` then follows."""

from __future__ import annotations

from pathlib import Path

from ..problem import Problem
from ..runtime import tuning
from ..specs import StageSpec
from ..vocab import Stage, Target, Tile
from .sweep import CaseRun, Sweep, TileRun


def winner(run: CaseRun) -> TileRun | None:
    """The fastest verified pipeline of a case."""
    verified = [t for t in run.tiles if t.verified]
    return min(verified, key=lambda t: t.total_us) if verified else None


def record(run: CaseRun, sweep: Sweep, cache_root: Path | None) -> str:
    """Record the case's winner; returns the line to print."""
    best = winner(run)
    label = run.problem.label()
    if best is None:
        return f"not tuned {label}: no verified pipeline"
    plan = best.pick.plan
    return record_winner(
        run.problem, sweep.device.target, plan.tile, plan.specs, best.total_us, cache_root
    )


def record_winner(
    problem: Problem,
    target: Target,
    tile: Tile,
    specs: dict[Stage, StageSpec],
    time_us: float,
    cache_root: Path | None,
) -> str:
    """Write one winner into the tuning DB (here, or from a Dask shard); the line to print."""
    path = tuning.record(problem, target, tile, specs, time_us, cache_root)
    names = " ".join(spec.name for spec in specs.values())
    return f"tuned {problem.label()}: {tile} {time_us:.1f} us [{names}] -> {path}"


def tune(cases: list[Problem], sweep: Sweep, progress, cache_root: Path | None) -> int:
    """Measure, record the winners, print the Best line last; returns the exit code."""
    sweep.measure_all(cases, progress)
    for run in sweep.runs:
        if run.refused is None:
            print(record(run, sweep, cache_root), flush=True)
    line, code = sweep.summary(cases)
    print(line, flush=True)
    return code
