"""The ``wino`` command line: one subcommand per concern, each an entry of ``COMMANDS``.

To add a subcommand (``run``, ``bench``, ``tune``, ``plot``...), write two functions,
``add_arguments(parser)`` and ``handler(args) -> int``, and add one ``Command`` to
``COMMANDS``; import heavy modules (the runtime, the build) inside the handler so that
``wino grid`` stays light. Errors wino raises (``Refused``, ``ValueError``, ``ConfigError``)
become one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import config, grid
from .bench import cli as bench_cli
from .cache import CacheError
from .launch import (
    largest_split,
    stage_launch,
    workspace_bytes,
    workspace_layout,
)
from .matrix import MATRIX_PATH, support_matrix
from .pick import default_stage_specs
from .problem import Direction, Problem, forward_only, read_miopen_cases
from .refusals import Refused, check_problem
from .scale import cli as scale_cli
from .specs import RtInputSpec, StageSpec
from .vocab import TILES, DType, Prescale, Stage, Target, Tile

EXIT_ERROR = 2


@dataclass(frozen=True)
class Command:
    """A subcommand: its one-line help, its arguments and its handler (returns the exit code)."""

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    handler: Callable[[argparse.Namespace], int]


# `wino grid` ----------------------------------------------------------------------------------
def _grid_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--stage", choices=[s.short for s in grid.GRID_STAGES], help="only this stage's specs"
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--refused",
        action="store_true",
        help="list the refused specs with the rule id and message of each",
    )
    mode.add_argument(
        "--explain",
        metavar="MIOPEN_LINE",
        help='the default pick per tile for a problem, e.g. "convfp16 -n 64 -c '
        '256 -H 14 -W 14 -k 256 -y 3 -x 3 -p 1 -q 1"',
    )
    mode.add_argument(
        "--matrix", action="store_true", help="write the Markdown support matrix (stdout, or -o)"
    )
    mode.add_argument(
        "--spills",
        action="store_true",
        help="the kernels of the built CUDA cache that spill registers (ptxas report)",
    )
    parser.add_argument(
        "--cache-root", type=Path, metavar="DIR", help="with --spills: the build folder to read"
    )
    parser.add_argument(
        "--target",
        choices=[t.value for t in Target],
        default=None,
        help="that target's grid (a listing; default: every spec some target builds) or, with "
        "--explain, its default pick (default: c; 16-bit inputs store V and U in fp32 on c, "
        "in fp16 on the GPUs)",
    )
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        help=f"with --matrix: the file to write (the committed one is {MATRIX_PATH})",
    )


def _grid(args: argparse.Namespace) -> int:
    if args.output is not None and not args.matrix:
        raise ValueError("wino grid: -o/--output only goes with --matrix")
    if args.matrix:
        return _write_matrix(args.output)
    if args.explain:
        return _explain(args.explain, Target(args.target or Target.C.value))
    if args.spills:
        return _spills(args.cache_root)
    stages = _stages(args.stage)
    target = None if args.target is None else Target(args.target)
    print(f"targets: {', '.join(_targets()) if target is None else target.value}")
    if args.refused:
        return _list_refused(stages, target)
    return _list_accepted(stages, target)


def _spills(root: Path | None) -> int:
    """Print the CUDA cache's spill report (`doit compile:cuda` builds the cache)."""
    from .builder.report import format_spill_report
    from .cache import find_manifest
    from .vocab import Target

    print(format_spill_report(find_manifest(Target.CUDA, root)))
    return 0


def _stages(short: str | None) -> tuple[Stage, ...]:
    return grid.GRID_STAGES if short is None else (Stage(short),)


def _targets() -> list[str]:
    return list(config.declared("targets")["targets"])


def _list_accepted(stages: tuple[Stage, ...], target: Target | None = None) -> int:
    total = 0
    for stage in stages:
        specs = grid.aot_stage_specs(stage, target)
        print(f"{stage.short}: {len(specs)} specs")
        for spec in specs:
            print(f"  {spec.name}")
        total += len(specs)
    print(f"total: {total} specs")
    return 0


def _list_refused(stages: tuple[Stage, ...], target: Target | None = None) -> int:
    total = 0
    for stage in stages:
        refused = [r for r in grid.refused_stage_specs(target) if r.spec.stage is stage]
        print(f"{stage.short}: {len(refused)} refused")
        for item in refused:
            print(f"  {item.spec.name}  [{item.refusal.rule}] {item.refusal.message}")
        total += len(refused)
    print(f"total: {total} refused")
    return 0


# `wino grid --explain` ------------------------------------------------------------------------
def _explain(line: str, target: Target = Target.C) -> int:
    problem = Problem.from_miopen(line)
    results = {tile: _explain_tile(problem, tile, target) for tile in TILES}
    refusals = [r for r in results.values() if isinstance(r, Refused)]
    if len(refusals) == len(results):  # nothing serves it: the refusal is the answer
        raise refusals[0]
    print(f"problem: {problem.label()}")
    print(f"default pick on the {target.value} target (--target names another)")
    picks = _dispatch_picks(problem)
    for tile, result in results.items():
        if isinstance(result, Refused):
            print(f"{tile}: refused [{result.rule}] {result.message}")
        else:
            mark = f"  <- dispatch's pick ({'; '.join(picks[tile])})" if tile in picks else ""
            print(result[0] + mark)
            print("\n".join(result[1:]))
    return 0


def _dispatch_picks(problem: Problem) -> dict[Tile, list[str]]:
    """The tile ``dispatch`` runs when none is given, and why: a target's tuning DB (the one
    dispatch follows: beside the cache it finds) when it has the problem, else the default
    rule."""
    from .runtime import tuning
    from .runtime.plan import default_tile
    from .vocab import Target

    picks: dict[Tile, list[str]] = {}
    untuned = []
    for target in (Target.C, Target.CUDA):
        tuned = tuning.best_tile(problem, target, path=tuning.followed(target))
        if tuned is None:
            untuned.append(target.value)
        else:
            picks.setdefault(tuned, []).append(f"{target.value}: tuning DB")
    if untuned:
        rule = " ".join(default_tile.__doc__.split())  # the rule's one statement
        reason = f"{', '.join(untuned)}: default rule, {rule}"
        picks.setdefault(default_tile(problem), []).append(reason)
    return picks


def _explain_tile(problem: Problem, tile: Tile, target: Target) -> list[str] | Refused:
    """The default pick on ``target`` for one tile, one line per stage, or the refusal."""
    try:
        check_problem(problem, tile)
        picks = default_stage_specs(problem, tile, target=target)
        k2 = picks[Stage.INPUT]
        split = largest_split(problem, tile, None, k2.xdtype, DType.FP32)
        layout = workspace_layout(problem, tile, k2.xdtype, DType.FP32, split)
        chunks = -(-problem.N // split)
        lines = [
            f"{tile}: batch split {split} ({chunks} chunk{'s' * (chunks > 1)}), "
            f"workspace {_size(workspace_bytes(layout))}"
        ]
        chunk = problem.with_batch(split)
        return lines + [
            f"  {stage.short:<4}{_launch_line(spec, chunk, k2)}" for stage, spec in picks.items()
        ]
    except Refused as refusal:
        return refusal


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} B"


def _launch_line(spec: StageSpec, chunk: Problem, k2: RtInputSpec) -> str:
    launch = stage_launch(spec, chunk, tile_scale=k2.prescale is not Prescale.NONE)
    shared = f" shared {launch.shared_bytes} B" if launch.shared_bytes else ""
    return f"{spec.name:<44} grid {launch.grid} block {launch.block}{shared}"


# `wino grid --matrix` -------------------------------------------------------------------------
def _write_matrix(output: Path | None) -> int:
    text = support_matrix()
    if output is None:
        sys.stdout.write(text)
    else:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text, encoding="utf-8")
        print(f"wrote {output}")
    return 0


# `wino run` ----------------------------------------------------------------------------------
def _run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--miopen-cmd",
        action="append",
        default=[],
        metavar="LINE",
        help='a MIOpenDriver line, e.g. "convfp16 -n 2 -c 64 -H 14 -W 14 -k 64 '
        '-y 3 -x 3 -p 1 -q 1" (repeatable)',
    )
    parser.add_argument(
        "--miopen-file",
        action="append",
        default=[],
        metavar="FILE",
        help="a file of MIOpenDriver lines, '#' comments (repeatable)",
    )
    parser.add_argument(
        "--target",
        choices=["c", "cuda"],
        help="where to run (default: cuda when CuPy sees a GPU, else c)",
    )
    parser.add_argument(
        "--tile", help="force a tile, e.g. F4x4 (default: the tuning DB, then the default pick)"
    )
    parser.add_argument(
        "--cache-root",
        type=Path,
        metavar="DIR",
        help="the build folder holding cache/v<FORMAT>/ (default: build/)",
    )
    parser.add_argument(
        "--direction",
        metavar="fwd",
        help="override the lines' -F: fwd (forward, the only direction wino serves); "
        "bwd and wrw are refused",
    )
    parser.add_argument("--seed", type=int, default=0, help="input seed (default 0)")
    parser.add_argument(
        "--repeats",
        type=int,
        default=5,
        help="timed runs per case after the verifying run (default 5)",
    )


def _run(args: argparse.Namespace) -> int:
    """Verify and time every problem given; 0 when every verified case passes (refusals are
    skipped), 1 otherwise."""
    from .runtime import verify  # numpy and the runtime: only when `run` runs

    problems = [Problem.from_miopen(line) for line in args.miopen_cmd]
    bad = []
    for path in args.miopen_file:
        read, wrong = read_miopen_cases(path)
        problems, bad = problems + read, bad + wrong
    for line in bad:  # reported now, the run goes on, the exit code says so at the end
        print(f"wino: skipping {line}", file=sys.stderr, flush=True)
    if not problems:
        raise ValueError("wino run: pass at least one --miopen-cmd LINE or --miopen-file FILE")
    direction = Direction.parse(args.direction) if args.direction else None
    problems = forward_only(problems, direction)
    tile = Tile.parse(args.tile) if args.tile else None
    results = verify.run_cases(
        problems, args.target, tile, args.seed, cache_root=args.cache_root, repeats=args.repeats
    )
    print(verify.format_results(results))
    if bad:
        print(f"wino: {len(bad)} line(s) of the case files were skipped", file=sys.stderr)
    return 0 if all(r.ok for r in results) and not bad else 1


# `wino cache` --------------------------------------------------------------------------------
def _cache_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action", choices=["verify"], help="verify: check every manifest and binary (loads none)"
    )
    parser.add_argument(
        "--target", choices=[t.value for t in Target], help="one target (default: every one)"
    )
    parser.add_argument(
        "--cache-root",
        type=Path,
        metavar="DIR",
        help="the build folder holding cache/v<FORMAT>/ (default: $WINO_BUILD, else build/)",
    )


def _cache(args: argparse.Namespace) -> int:
    """`wino cache verify`: one line per problem, a summary; exit 1 when anything is wrong."""
    from . import cache

    targets = [Target(args.target)] if args.target else None
    found = cache.manifests(args.cache_root, targets)
    checked, problems = cache.verify(args.cache_root, targets)
    for line in problems:
        print(line)
    where = cache.cache_root(args.cache_root)
    if not found:
        print(f"no manifest under {where}: build the cache with `doit compile`")
        return 1
    verdict = "intact" if not problems else f"{len(problems)} problem(s)"
    print(f"{where}: {len(found)} manifest(s), {checked} kernels checked: {verdict}")
    if problems:
        target = args.target or "<target>"
        print(f"repair: `doit compile:{target}` rebuilds what is missing or corrupt")
    return 1 if problems else 0


# The command line -----------------------------------------------------------------------------
COMMANDS: dict[str, Command] = {
    "grid": Command(
        "list the AOT grid, its refusals, a problem's pick or the support matrix",
        _grid_arguments,
        _grid,
    ),
    "build": Command(
        "build the kernel cache without doit: a process pool, or --dask on a Dask cluster",
        scale_cli.build_arguments,
        scale_cli.build,
    ),
    "run": Command(
        "verify problems against the float64 reference (error vs bound, PASS/FAIL) and time them",
        _run_arguments,
        _run,
    ),
    "bench": Command(
        "time each case's pipelines (binaries picked by timing), verify, compare with cuDNN",
        bench_cli.bench_arguments,
        bench_cli.bench,
    ),
    "tune": Command(
        "write each case's fastest verified pipeline into the tuning DB",
        bench_cli.tune_arguments,
        bench_cli.tune,
    ),
    "cache": Command(
        "verify the kernel cache: manifests, entries and every binary's sha256 (loads nothing)",
        _cache_arguments,
        _cache,
    ),
    "plot": Command(
        "plot a bench CSV: speedup over cuDNN and time against the roofline, per dtype",
        bench_cli.plot_arguments,
        bench_cli.plot,
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="wino", description="Ahead-of-time, shape-generic Winograd F(m,3) convolution."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, command in COMMANDS.items():
        child = sub.add_parser(name, help=command.help, description=command.help)
        command.add_arguments(child)
        child.set_defaults(handler=command.handler)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; return its exit code (2 for errors, with one line on stderr)."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit_:  # argparse has printed its usage message
        return int(exit_.code or 0)
    try:
        return args.handler(args)
    except BrokenPipeError:  # the reader went away (`wino grid | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except Refused as refusal:
        print(f"wino: refused [{refusal.rule}]: {refusal.message}", file=sys.stderr)
    except (ValueError, OSError, CacheError) as err:  # ConfigError is a ValueError
        print(f"wino: error: {err}", file=sys.stderr)
    return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
