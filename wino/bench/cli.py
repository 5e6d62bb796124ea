"""The ``bench``, ``tune`` and ``plot`` subcommands: arguments and handlers. Only argparse and
pathlib at import time; the handlers import the runtime (``wino grid`` stays light)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..vocab import coerce
from .cases import SHAPE_FLAGS
from .modes import TARGET_ENGINES, Compare, Engine, Timing

EXIT_UNAVAILABLE = 2
AVAILABLE = "available"  # --engines alone
EXIT_FAILED = 1  # some case failed, broke or could not be read (the run went on)
NOISE_PERCENT = 10.0  # wino tune: the largest disagreement of two timings of a winner


# Arguments -----------------------------------------------------------------------------------
def _case_arguments(parser: argparse.ArgumentParser) -> None:
    cases = parser.add_argument_group("cases (files first, then commands, then the shape flags)")
    cases.add_argument(
        "--miopen-file",
        action="append",
        type=Path,
        default=[],
        metavar="FILE",
        help="a file of MIOpenDriver conv lines (repeatable)",
    )
    cases.add_argument(
        "--miopen-cmd",
        action="append",
        default=[],
        metavar='"conv ..."',
        help="one MIOpenDriver conv line (repeatable)",
    )
    for flag, field in SHAPE_FLAGS.items():
        cases.add_argument(
            flag,
            type=int,
            dest=f"shape_{field}",
            metavar=field,
            help=f"MIOpenDriver {flag} ({field})",
        )
    cases.add_argument(
        "--dtype",
        action="append",
        metavar="fp16|bf16|fp32",
        help="override the lines' dtype; repeat or give a comma list to sweep",
    )
    cases.add_argument(
        "--direction",
        metavar="fwd",
        help="override the lines' -F: fwd (forward, the only direction wino serves); "
        "bwd and wrw are refused",
    )
    cases.add_argument("--limit", type=int, metavar="N", help="only the first N cases")
    cases.add_argument(
        "--shard", metavar="i/n", help="shard i of n (1-based): every n-th case from the i-th"
    )
    parser.epilog = (
        "One case from MIOpenDriver shape flags: "
        + " ".join(f"{flag} {field}" for flag, field in SHAPE_FLAGS.items())
        + " (MIOpenDriver defaults)."
    )


def _run_arguments(parser: argparse.ArgumentParser) -> None:
    run = parser.add_argument_group("measuring")
    run.add_argument(
        "--target",
        choices=["c", "cuda"],
        help="where to run (default: cuda when a GPU is present, else c)",
    )
    run.add_argument(
        "--tile",
        action="append",
        metavar="F4x4",
        help="only these tiles (repeatable or a comma list; default: every tile)",
    )
    run.add_argument(
        "--timing",
        choices=[t.value for t in Timing],
        default=Timing.BLOCK.value,
        help="block: the whole chain timed; staged: each stage timed alone",
    )
    run.add_argument(
        "--cache-root",
        type=Path,
        metavar="DIR",
        help="the build folder holding cache/ (default: build/)",
    )
    run.add_argument(
        "--candidates",
        type=int,
        metavar="N",
        help="time at most N candidates per stage (default: all on cuda, 2 on c)",
    )
    run.add_argument(
        "--repeats",
        type=int,
        metavar="N",
        help="timed runs of the final measurement (default: 25 on cuda, 3 on c)",
    )
    run.add_argument("--warmup", type=int, metavar="N", help="warm-up runs before them")
    run.add_argument(
        "--results",
        type=Path,
        metavar="CSV",
        help="merge one row per case x engine x tile into this CSV",
    )
    run.add_argument(
        "--dask",
        metavar="SCHEDULER|local",
        help="run the cases as shards on a Dask cluster (a scheduler address, or local: one "
        "worker per GPU on cuda, per core on c) and merge them (needs the dask extra)",
    )
    run.add_argument(
        "--dask-shards",
        type=int,
        metavar="N",
        help="with --dask: N shards (default: one per GPU worker on cuda, per worker on c)",
    )
    run.add_argument(
        "--progress",
        action="store_true",
        help="show the progress bar on stderr even when it is not a terminal",
    )


def bench_arguments(parser: argparse.ArgumentParser) -> None:
    _case_arguments(parser)
    _run_arguments(parser)
    parser.add_argument(
        "--verify",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="check every pipeline against a float64 reference (default); --no-verify skips "
        "the check and labels the figures unverified",
    )
    parser.add_argument(
        "--compare",
        choices=[c.value for c in Compare],
        help="time a direct convolution on the same tensors: cudnn (PyTorch, cuda target) or "
        "onnxruntime (its CPU Conv with the same threads, c target; the onnx extra)",
    )
    parser.add_argument(
        "--engines",
        nargs="?",
        const=AVAILABLE,
        metavar="LIST",
        help="time these engines on the same tensors, a comma list of "
        + ",".join(e.value for e in Engine)
        + " (unfused: the AOT pipeline, rows named wino; fused: the fused plan; baked: the best "
        "unfused pipeline compiled with the case's extents as constants; cudnn on cuda, "
        "onnxruntime on c); --engines alone: every engine available here. Without it: unfused "
        "and --compare's engine",
    )
    parser.add_argument(
        "--baked-root",
        type=Path,
        metavar="DIR",
        help="where the baked engine compiles its kernels (default: a folder in the temp dir)",
    )
    parser.add_argument(
        "--overhead",
        action="store_true",
        help="print the runtime's host cost per call (dispatch, plan.run, wino.conv2d, graph "
        "replay) next to torch conv2d's, for the first case (default: "
        "convfp16 -n 1 -c 64 -H 8 -W 8 -k 64 -p 1 -q 1)",
    )
    parser.add_argument(
        "--skip-measured",
        action="store_true",
        help="resume: skip the cases --results already holds",
    )


def tune_arguments(parser: argparse.ArgumentParser) -> None:
    _case_arguments(parser)
    _run_arguments(parser)
    parser.add_argument(
        "--engines",
        default=Engine.UNFUSED.value,
        metavar="unfused,fused",
        help="the plan kinds whose fastest verified plan is recorded (default unfused; with "
        "fused, a fused winner makes dispatch run fused2d_rt for that problem)",
    )
    parser.add_argument(
        "--noise",
        type=float,
        default=NOISE_PERCENT,
        metavar="PCT",
        help="record a winner only when two timings of it agree within PCT percent "
        f"(default {NOISE_PERCENT:g})",
    )


def plot_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("csv", type=Path, help="a results CSV of wino bench")
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        default=None,
        help="the picture (suffixed _<dtype> when the CSV holds several; default speedup.png; "
        "with --engines: the engines pictures, drawn only when given)",
    )
    parser.add_argument(
        "--table",
        action="store_true",
        help="print the CSV as a Markdown table (best verified wino pipeline per case vs cuDNN) "
        "instead of drawing",
    )
    parser.add_argument(
        "--engines",
        action="store_true",
        help="print the CSV of a `wino bench --engines` run as a Markdown table (every engine "
        "per case, U cached and K1 per call) and the geomeans (best wino engine vs the direct "
        "one, over every case and over those with C, K >= 256; the fused engine vs the direct "
        "one over those with 64 <= C <= 128 at 56x56 and more; the shape-generic cost, "
        "unfused vs baked); with -o also draw, per dtype, each "
        "wino engine's speedup over the direct one per layer (U cached; K1 on every call)",
    )


# Building the sweep --------------------------------------------------------------------------
def gather_cases(args: argparse.Namespace):
    """(the cases, the files' bad lines): the bad lines are reported on stderr now and skipped;
    the handler turns them into a non-zero exit at the end."""
    from ..problem import Direction, forward_only
    from .cases import parse_dtypes, parse_shard, problems_from, select_cases, with_dtypes

    shape = {
        flag: getattr(args, f"shape_{field}")
        for flag, field in SHAPE_FLAGS.items()
        if getattr(args, f"shape_{field}") is not None
    }
    direction = Direction.parse(args.direction) if args.direction else None
    problems, bad = problems_from(args.miopen_file, args.miopen_cmd, shape)
    report_bad_lines(bad)
    if not problems:
        raise ValueError(
            "no cases: pass --miopen-file, --miopen-cmd or shape flags (-n -c -H -W -k ...)"
        )
    cases = with_dtypes(forward_only(problems, direction), parse_dtypes(args.dtype))
    return select_cases(cases, args.limit, parse_shard(args.shard)), bad


def report_bad_lines(bad) -> None:
    for line in bad:
        print(f"wino: skipping {line}", file=sys.stderr, flush=True)


def with_bad_lines(code: int, bad) -> int:
    """The exit code once the run is over: failed when a case file had bad lines."""
    if not bad:
        return code
    print(
        f"wino: {len(bad)} line(s) of the case files were not cases and were skipped: "
        + ", ".join(f"{b.path}:{b.line}" for b in bad),
        file=sys.stderr,
    )
    return max(code, EXIT_FAILED)


def _tiles(values):
    from ..vocab import TILES, Tile

    if not values:
        return TILES
    return tuple(
        dict.fromkeys(Tile.parse(t.strip()) for v in values for t in v.split(",") if t.strip())
    )


def _target(name: str | None):
    from ..runtime.registry import cuda_available
    from ..vocab import Target

    if name is not None:
        return Target(name)
    return Target.CUDA if cuda_available() else Target.C


def _device(args: argparse.Namespace, target):
    from .device import open_device, with_final

    return with_final(open_device(target, args.cache_root), args.warmup, args.repeats)


def _check_compare(engine: str, target) -> None:
    """The engine runs beside this target and is installed (else a message saying what to do)."""
    from .compare import ENGINES, import_onnxruntime

    if ENGINES[engine] != target.value:
        raise ValueError(
            f"--compare {engine} needs the {ENGINES[engine]} target (--target {ENGINES[engine]})"
        )
    if engine == "onnxruntime":
        import_onnxruntime()


def available_engines(target) -> tuple[Engine, ...]:
    """The engines that can run on ``target`` here (a direct engine's package installed, the
    toolchain the baked engine compiles with present)."""
    from ..builder.baked import BakeUnavailable
    from .compare import EngineUnavailable

    out = []
    for engine in TARGET_ENGINES[target.value]:
        try:
            _check_engine(engine, target)
        except (EngineUnavailable, BakeUnavailable):
            continue
        out.append(engine)
    return tuple(out)


def _check_engine(engine: Engine, target) -> None:
    """The engine runs on this target and what it needs is here (else an exception that says
    what to do)."""
    if engine not in TARGET_ENGINES.get(target.value, ()):
        runs_on = [t for t, es in TARGET_ENGINES.items() if engine in es]
        raise ValueError(
            f"--engines {engine.value} runs on the {' or '.join(runs_on)} target, not "
            f"{target.value} (--target {runs_on[0]})"
        )
    if engine.direct:
        _check_compare(engine.value, target)
        if engine is Engine.CUDNN:
            _import_torch()
    elif engine is Engine.BAKED:
        from ..builder.baked import toolchain

        toolchain(target)


def _import_torch():
    from .compare import EngineUnavailable

    try:
        import torch
    except ImportError:
        raise EngineUnavailable(
            "cudnn is timed through PyTorch: pip install torch (a CUDA build)"
        ) from None
    return torch


def parse_engines(text: str | None, target) -> tuple[Engine, ...]:
    """``--engines``: None (not given), every available engine, or the comma list checked."""
    if text is None:
        return ()
    if text == AVAILABLE:
        return available_engines(target)
    engines = tuple(
        dict.fromkeys(coerce(Engine, e.strip(), "--engines") for e in text.split(",") if e.strip())
    )
    if not engines:
        raise ValueError(f"--engines {text!r}: name at least one engine")
    for engine in engines:
        _check_engine(engine, target)
    return engines


def sweep_options(
    args: argparse.Namespace,
    verify: bool,
    compare: Compare | str | None,
    skip_measured: bool = False,
    recheck: bool = False,
):
    """The target and the sweep's Options, the arguments checked (no device opened)."""
    from .sweep import Options

    target = _target(args.target)
    compare = None if compare is None else coerce(Compare, compare, "--compare")
    if compare is not None:
        _check_compare(compare.value, target)
    engines = parse_engines(getattr(args, "engines", None), target)
    if skip_measured and args.results is None:
        raise ValueError("--skip-measured needs --results (the CSV to resume)")
    if args.candidates is not None and args.candidates < 1:
        raise ValueError(f"--candidates {args.candidates}: expected N >= 1")
    if args.dask_shards is not None and not args.dask:
        raise ValueError("--dask-shards needs --dask SCHEDULER|local")
    options = Options(
        tiles=_tiles(args.tile),
        timing=Timing(args.timing),
        verify=verify,
        compare=compare,
        candidate_limit=args.candidates,
        cache_root=args.cache_root,
        recheck=recheck,
        engines=engines,
        baked_root=getattr(args, "baked_root", None),
    )
    return target, options


def build_sweep(
    args: argparse.Namespace,
    verify: bool,
    compare: str | None,
    skip_measured: bool = False,
    recheck: bool = False,
):
    from .sweep import Sweep

    target, options = sweep_options(args, verify, compare, skip_measured, recheck)
    return Sweep(_device(args, target), options, args.results, skip_measured)


def _header(command: str, sweep, cases) -> None:
    d, o = sweep.device, sweep.options
    tiles = "all" if len(o.tiles) > 8 else ",".join(t.name for t in o.tiles)
    check = "" if o.verify else ", NOT verified (--no-verify): figures are labelled unverified"
    engines = ",".join(e.value for e in o.engines)
    print(
        f"wino {command}: {len(cases)} case(s) on {d.target.value} ({d.manifest.flavor}), "
        f"engines {engines}, timing {o.timing.value}, tiles {tiles}{check}",
        flush=True,
    )


# Handlers ------------------------------------------------------------------------------------
def overhead(args: argparse.Namespace) -> int:
    from ..problem import Problem
    from .overhead import DEFAULT_CASE, measure, report

    given = args.miopen_file or args.miopen_cmd
    given = given or any(
        getattr(args, f"shape_{field}") is not None for field in SHAPE_FLAGS.values()
    )
    problem = gather_cases(args)[0][0] if given else Problem.from_miopen(DEFAULT_CASE)
    target = _target(args.target)
    repeats = args.repeats if args.repeats is not None else 7
    rows, splits = measure(problem, target, args.cache_root, repeats=repeats)
    print(report(problem, target, rows, splits))
    return 0


def bench(args: argparse.Namespace) -> int:
    from ..builder.baked import BakeUnavailable
    from .compare import EngineUnavailable
    from .progress import Progress

    if args.overhead:
        return overhead(args)

    cases, bad = gather_cases(args)
    try:
        if args.dask:
            from ..scale.sweep import run_dask

            setup = sweep_options(args, args.verify, args.compare, args.skip_measured)
            return with_bad_lines(run_dask(args, cases, *setup, tune=False), bad)
        sweep = build_sweep(args, args.verify, args.compare, args.skip_measured)
    except (EngineUnavailable, BakeUnavailable) as missing:
        print(f"wino bench: skipped: {missing}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    _header("bench", sweep, cases)
    code = sweep.run(cases, Progress(len(cases), True if args.progress else None))
    return with_bad_lines(code, bad)


def tune(args: argparse.Namespace) -> int:
    from .progress import Progress
    from .tune import pinning_advice
    from .tune import tune as run_tune

    cases, bad = gather_cases(args)
    if args.noise <= 0:
        raise ValueError(f"--noise {args.noise:g}: expected a percentage > 0")
    engines = set(parse_engines(args.engines, _target(args.target)))
    if not engines <= {Engine.UNFUSED, Engine.FUSED}:
        raise ValueError(
            f"--engines {args.engines}: wino tune records unfused and fused plans only; "
            "pass unfused, fused or unfused,fused"
        )
    if args.dask:
        from ..scale.sweep import run_dask

        setup = sweep_options(args, True, None, recheck=True)
        return with_bad_lines(run_dask(args, cases, *setup, tune=True), bad)
    sweep = build_sweep(args, verify=True, compare=None, recheck=True)
    _header("tune", sweep, cases)
    advice = pinning_advice(sweep.device.target)
    if advice:
        print(f"wino tune: {advice}", file=sys.stderr, flush=True)
    progress = Progress(len(cases), True if args.progress else None)
    code = run_tune(cases, sweep, progress, args.cache_root, args.noise / 100)
    return with_bad_lines(code, bad)


def plot(args: argparse.Namespace) -> int:
    from .plot import PlotUnavailable, plot_engines
    from .plot import plot as draw

    if args.engines:
        from .table import engines_markdown

        print(engines_markdown(args.csv))
        if args.output is None:
            return 0
    if args.table:
        from .table import markdown

        print(markdown(args.csv))
        return 0
    try:
        if args.engines:
            paths = plot_engines(args.csv, args.output)
        else:
            paths = draw(args.csv, args.output or Path("speedup.png"))
    except PlotUnavailable as missing:
        print(f"wino: {missing}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    for path in paths:
        print(f"wrote {path}")
    return 0
