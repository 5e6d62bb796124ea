"""``wino bench`` / ``wino tune`` with ``--dask``: the ``--shard i/n`` pieces of the cases as Dask
tasks, merged by the client into one results CSV and one tuning DB.

Each shard runs on a worker exactly what ``wino bench`` runs for ``--shard i/n`` (the same
Sweep over the same cases) and returns its rows, its printed lines, its broken cases and (tune)
each case's winner. On cuda a shard asks for the worker resource GPU=1, so a GPU runs one shard
at a time; on c any worker takes it. A shard that raised is retried (RETRIES); one whose worker
died is re-run elsewhere by Dask itself. The client merges the rows in case order (the order a
serial run writes them), records the winners, and prints the Best line over all the cases.

The workers read the cache at --cache-root (default: their build/): on a LocalCluster that is
this machine's; on a cluster, a shared filesystem or the same build on every node.
"""

from __future__ import annotations

import argparse
import os
import socket
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from ..bench import results
from ..bench.cases import case_key, select_cases
from ..bench.device import open_device, with_final
from ..bench.sweep import Options, Sweep, best_line, exit_code
from ..cache import MANIFEST, cache_root
from ..problem import Problem
from ..specs import StageSpec
from ..vocab import Stage, Target, Tile
from . import require_distributed
from .cluster import GPU, connect, slots

#: Dask retries of a shard that raised (a lost worker's shard is re-run by Dask regardless).
RETRIES = 2


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (1-based, as ``--shard i/n``) and how to measure it."""

    index: int
    count: int
    cases: tuple[Problem, ...]
    target: Target
    options: Options
    warmup: int | None = None  # the final measurement's settings (None: the target's default)
    repeats: int | None = None
    tune: bool = False

    @property
    def label(self) -> str:
        return f"{self.index}/{self.count}"


@dataclass(frozen=True)
class Tuned:
    """A case's winner as a shard found it (tile None: no pipeline verified)."""

    problem: Problem
    tile: Tile | None
    specs: dict[Stage, StageSpec]
    time_us: float
    check_us: float | None = None  # the winner's second timing (the noise check's)


@dataclass
class ShardResult:
    shard: Shard
    rows: list[results.Row]
    lines: list[str]  # what the serial sweep would have printed for these cases
    errors: list[str]  # cases that broke (the shard went on)
    tuned: list[Tuned] = field(default_factory=list)
    worker: str = ""


# On the worker -------------------------------------------------------------------------------
class Lines:
    """The sweep's progress on a worker: no bar, the lines kept for the client."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def show(self, label: str) -> None:
        pass

    def advance(self) -> None:
        pass

    def clear(self) -> None:
        pass

    def say(self, text: str) -> None:
        self.lines.append(text)


def _manifest_stamp(target: Target, root: Path | None) -> tuple:
    """The target's manifests and their mtimes: a rebuilt cache opens a new device."""
    found = sorted((cache_root(root) / target.value).glob(f"*/{MANIFEST}"))
    return tuple((str(p), p.stat().st_mtime_ns) for p in found)


@lru_cache(maxsize=4)
def _cached_device(target: Target, root, warmup, repeats, stamp: tuple):
    return with_final(open_device(target, root), warmup, repeats)


def worker_device(shard: Shard):
    """The worker process's device for the shard's target and cache, opened once (its measured
    copy and GEMM rates are then shared by every shard the worker runs)."""
    root = shard.options.cache_root
    stamp = _manifest_stamp(shard.target, root)
    return _cached_device(shard.target, root, shard.warmup, shard.repeats, stamp)


def _worker_name() -> str:
    try:
        return str(require_distributed().get_worker().name)
    except ValueError:  # not inside a Dask task (called directly)
        return f"{socket.gethostname()}:{os.getpid()}"


def tuned(sweep: Sweep) -> list[Tuned]:
    from ..bench.tune import winner

    out = []
    for run in sweep.runs:
        if run.refused is not None:
            continue
        best = winner(run)
        if best is None:
            out.append(Tuned(run.problem, None, {}, 0.0))
        else:
            plan = best.pick.plan
            out.append(
                Tuned(run.problem, plan.tile, dict(plan.specs), best.total_us, best.check_us)
            )
    return out


def run_shard(shard: Shard) -> ShardResult:
    """Measure one shard's cases as ``wino bench --shard i/n`` would (the Dask task)."""
    sweep = Sweep(worker_device(shard), shard.options)
    lines = Lines()
    sweep.measure_all(list(shard.cases), lines)
    return ShardResult(
        shard,
        sweep.rows,
        lines.lines,
        list(sweep.errors),
        tuned(sweep) if shard.tune else [],
        _worker_name(),
    )


# On the client -------------------------------------------------------------------------------
def make_shards(cases: list[Problem], count: int, **how) -> list[Shard]:
    """``--shard i/n`` for i = 1..count (every count-th case from the i-th); empty ones
    dropped. ``how``: the Shard fields other than index, count and cases."""
    if count < 1:
        raise ValueError(f"--dask-shards {count}: expected N >= 1")
    out = []
    for i in range(1, count + 1):
        mine = select_cases(cases, shard=(i, count))
        if mine:
            out.append(Shard(i, count, tuple(mine), **how))
    return out


def run_shards(
    client,
    shards: list[Shard],
    fn: Callable[[Shard], ShardResult] = run_shard,
    on_done: Callable[[ShardResult], None] | None = None,
) -> list[ShardResult]:
    """Run ``fn`` per shard on ``client`` (resource GPU=1 for cuda shards), calling ``on_done``
    as each finishes; the results in shard order."""
    distributed = require_distributed()
    token = uuid.uuid4().hex[:8]
    futures = {}
    for shard in shards:
        resources = {GPU: 1} if shard.target is Target.CUDA else None
        key = f"wino-shard-{shard.index}of{shard.count}-{token}"
        future = client.submit(fn, shard, key=key, resources=resources, retries=RETRIES)
        futures[future] = shard
    done: dict[int, ShardResult] = {}
    for future in distributed.as_completed(list(futures)):
        result = _result(future, futures[future])
        done[result.shard.index] = result
        if on_done is not None:
            on_done(result)
    return [done[s.index] for s in shards]


def _result(future, shard: Shard) -> ShardResult:
    """The shard's result; a shard that failed for good (its retries spent, or its workers
    lost too often) counts its cases as broken and the others go on, as a serial sweep does."""
    try:
        return future.result()
    except Exception as err:  # noqa: BLE001 - one lost shard must not lose the others
        line = f"shard {shard.label} failed: {type(err).__name__}: {err}"
        return ShardResult(shard, [], [line], [p.label() for p in shard.cases])


def merged_rows(cases: Iterable[Problem], shard_results: list[ShardResult]) -> list[results.Row]:
    """Every shard's rows in case order (the order a serial sweep writes them)."""
    order = {case_key(p): i for i, p in enumerate(cases)}
    rows = [row for r in shard_results for row in r.rows]
    return sorted(rows, key=lambda row: order[row["case"]])  # stable: tile order kept


def tuned_in_order(cases: Iterable[Problem], shard_results: list[ShardResult]) -> list[Tuned]:
    order = {case_key(p): i for i, p in enumerate(cases)}
    found = [t for r in shard_results for t in r.tuned]
    return sorted(found, key=lambda t: order[case_key(t.problem)])


# The command ---------------------------------------------------------------------------------
def _todo(cases: list[Problem], args, target: Target, engines: tuple[str, ...]) -> list[Problem]:
    """The cases to measure: with --skip-measured, those --results lacks (said per case)."""
    if not getattr(args, "skip_measured", False):
        return list(cases)
    measured = results.measured_cases(results.read(args.results), target.value, engines)
    todo = []
    for problem in cases:
        if case_key(problem) in measured:
            print(f"skip {problem.label()}: measured in {args.results}", flush=True)
        else:
            todo.append(problem)
    return todo


def _on_done(progress, csv: Path | None) -> Callable[[ShardResult], None]:
    """As a shard finishes: its lines, the bar, and its rows merged into the CSV at once (so an
    interrupted run resumes with --skip-measured; the final write puts them in case order)."""

    def on_done(result: ShardResult) -> None:
        shard = result.shard
        progress.say(f"shard {shard.label} ({len(shard.cases)} case(s)) on {result.worker}:")
        for line in result.lines:
            progress.say(line)
        if csv is not None and result.rows:
            results.update(csv, result.rows)
        progress.done += len(shard.cases)
        progress.show(f"shard {shard.label} done")

    return on_done


def _record(target: Target, cases, shard_results, cache_root, noise: float) -> bool:
    """Record the shards' winners as ``wino tune`` does; True when one was refused as noisy."""
    from ..bench.tune import record_winner, timings_disagree

    refused_noisy = False
    for t in tuned_in_order(cases, shard_results):
        why = None if t.tile is None else timings_disagree(t.time_us, t.check_us, noise)
        if t.tile is None:
            print(f"not tuned {t.problem.label()}: no verified pipeline", flush=True)
        elif why is not None:
            refused_noisy = True
            print(f"not tuned {t.problem.label()}: {why}", flush=True)
        else:
            line = record_winner(t.problem, target, t.tile, t.specs, t.time_us, cache_root)
            print(line, flush=True)
    return refused_noisy


def run_dask(
    args: argparse.Namespace, cases: list[Problem], target: Target, options: Options, tune: bool
) -> int:
    """``wino bench|tune --dask SCHEDULER`` (the arguments checked by the bench command line:
    ``target``, ``options``): the exit code (as the serial command's)."""
    from ..bench.progress import Progress

    todo = _todo(cases, args, target, options.row_engines)
    with connect(args.dask, gpus=target is Target.CUDA) as client:
        resource = GPU if target is Target.CUDA else None
        workers = slots(client, resource)
        if workers == 0:
            raise ValueError(
                f"--dask {args.dask}: no worker offers the resource {GPU} for the cuda target; "
                f"start one worker per GPU with `dask worker SCHEDULER --nthreads 1 "
                f"--resources {GPU}=1` (CUDA_VISIBLE_DEVICES set per worker)"
            )
        shards = make_shards(
            todo,
            workers if args.dask_shards is None else args.dask_shards,
            target=target,
            options=options,
            warmup=args.warmup,
            repeats=args.repeats,
            tune=tune,
        )
        print(
            f"wino {'tune' if tune else 'bench'}: {len(todo)} case(s) on {target.value} through "
            f"Dask ({len(shards)} shard(s), {workers} {resource or 'worker'} slot(s)), "
            f"timing {options.timing.value}",
            flush=True,
        )
        progress = Progress(len(todo), True if args.progress else None)
        before = results.read(args.results) if args.results is not None else []
        done = run_shards(client, shards, on_done=_on_done(progress, args.results))
        progress.clear()
    rows = results.annotate(results.merge(before, merged_rows(todo, done)))
    if args.results is not None:
        results.write(args.results, rows)
    noisy = tune and _record(target, todo, done, args.cache_root, args.noise / 100)
    keys = {case_key(p) for p in cases}
    mine = [r for r in rows if r["target"] == target.value and r["case"] in keys]
    errors = [e for r in done for e in r.errors]
    print(best_line(mine), flush=True)
    return max(exit_code(mine), int(bool(errors)), int(noisy))
