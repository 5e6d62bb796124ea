"""``wino tune``: measure like ``wino bench`` (verified) and write each case's winner (the
fastest verified tile and its binaries) into the tuning DB, which ``dispatch`` then follows.

A winner is timed twice; when the two timings disagree by more than the noise threshold
(``--noise``, percent), the machine is too noisy for the pick to mean anything and the case is
not recorded (the exit code says so): pin the threads and run again on an idle machine."""

from __future__ import annotations

import os
from pathlib import Path

from ..problem import Problem
from ..runtime import tuning
from ..specs import StageSpec
from ..vocab import Stage, Target, Tile
from .sweep import CaseRun, Sweep, TileRun

EXIT_NOISY = 1


def pinning_advice(target: Target) -> str | None:
    """What to do about thread placement on the host target (None: nothing to say)."""
    if target is not Target.C or os.environ.get("OMP_NUM_THREADS"):
        return None
    cores = len(os.sched_getaffinity(0))
    return (
        f"OMP_NUM_THREADS is unset, so the c kernels use every core ({cores}) and timings on a "
        f"shared machine are noisy; pin them: `OMP_NUM_THREADS={cores} taskset -c "
        f"0-{cores - 1} wino tune ...` on an idle machine"
    )


def winner(run: CaseRun) -> TileRun | None:
    """The fastest verified plan of a case (unfused pipelines, and fused plans when the sweep
    ran the fused engine: ``wino tune --engines unfused,fused``)."""
    verified = [t for t in run.tiles + run.fused if t.verified]
    return min(verified, key=lambda t: t.total_us) if verified else None


def noisy(best: TileRun, noise: float) -> str | None:
    """Why the winner's timings are not to be trusted (None: they agree within ``noise``)."""
    return timings_disagree(best.total_us, best.check_us, noise)


def timings_disagree(total_us: float, check_us: float | None, noise: float) -> str | None:
    """Why two timings of one winner are not to be trusted (None: timed once, or they agree
    within ``noise``, a fraction of the faster)."""
    if check_us is None:
        return None
    apart = abs(total_us - check_us) / max(min(total_us, check_us), 1e-9)
    if apart <= noise:
        return None
    return (
        f"two timings of the winner disagree by {apart:.0%} ({total_us:.1f} vs "
        f"{check_us:.1f} us; threshold {noise:.0%}): the machine is too noisy to pick; "
        "pin the threads (OMP_NUM_THREADS=<cores> taskset -c <cpus> wino tune ...) on an idle "
        "machine, or raise --noise"
    )


def record(run: CaseRun, sweep: Sweep, cache_root: Path | None, noise: float) -> tuple[str, bool]:
    """Record the case's winner; returns the line to print (``not tuned`` when it is not) and
    whether the winner was refused for noisy timings."""
    best = winner(run)
    label = run.problem.label()
    if best is None:
        return f"not tuned {label}: no verified pipeline", False
    why = noisy(best, noise)
    if why is not None:
        return f"not tuned {label}: {why}", True
    plan = best.pick.plan
    line = record_winner(
        run.problem, sweep.device.target, plan.tile, plan.specs, best.total_us, cache_root
    )
    return line, False


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


def tune(
    cases: list[Problem], sweep: Sweep, progress, cache_root: Path | None, noise: float
) -> int:
    """Measure, record the winners, print the Best line last; returns the exit code (1 when
    a winner was not recorded because its timings disagreed)."""
    sweep.measure_all(cases, progress)
    refused_noisy = False
    for run in sweep.runs:
        if run.refused is None:
            line, was_noisy = record(run, sweep, cache_root, noise)
            refused_noisy |= was_noisy
            print(line, flush=True)
    line, code = sweep.summary(cases)
    print(line, flush=True)
    return max(code, EXIT_NOISY if refused_noisy else 0)
