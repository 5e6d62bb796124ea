"""``wino build``: the build without doit's database, here (a process pool) or on a Dask cluster
(``--dask local|SCHEDULER``). The cache it writes is byte for byte the one ``doit compile``
writes (the same plan, addresses, cache writer and manifests); doit stays the default build.
Only argparse and pathlib at import time: dask is imported when --dask is given."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def build_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--target",
        action="append",
        choices=["c", "cuda", "hip"],
        help="a target to build (repeatable; default: every target whose compiler is "
        "present, as doit)",
    )
    parser.add_argument(
        "--dask",
        metavar="SCHEDULER|local",
        help="compile on a Dask cluster: a scheduler address, or local (one worker per core); "
        "needs the dask extra. Without it: a process pool here",
    )
    parser.add_argument(
        "-j",
        "--jobs",
        type=int,
        metavar="N",
        help="processes here, or workers of --dask local (default: one per core)",
    )
    parser.add_argument(
        "--kernel",
        action="append",
        metavar="TEXT",
        help="only the grid's kernels whose name contains TEXT (repeatable; default: the grid)",
    )
    parser.add_argument(
        "--cache-root",
        type=Path,
        metavar="DIR",
        help="the build folder (default: $WINO_BUILD or build/)",
    )


def _specs(texts: list[str] | None):
    """None (each target's grid), or per target the specs of its grid whose name contains one
    of ``texts``."""
    from ..grid import aot_stage_specs

    if not texts:
        return None
    if not any(t in s.name for s in aot_stage_specs() for t in texts):
        raise ValueError(f"--kernel {' '.join(texts)}: no kernel of the grid matches")
    return lambda target: [
        s for s in aot_stage_specs(target=target) if any(t in s.name for t in texts)
    ]


def _run(args: argparse.Namespace, specs, targets):
    if args.jobs is not None and args.jobs < 1:
        raise ValueError(f"--jobs {args.jobs}: expected N >= 1")
    if not args.dask:
        from ..builder.builder import build

        return build(specs, targets, root=args.cache_root, jobs=args.jobs)
    from .build import build
    from .cluster import connect

    with connect(args.dask, workers=args.jobs) as client:
        return build(client, specs, targets, root=args.cache_root)


def build(args: argparse.Namespace) -> int:
    from ..vocab import Target

    targets = [Target(t) for t in dict.fromkeys(args.target)] if args.target else list(Target)
    specs = _specs(args.kernel)
    result = _run(args, specs, targets)
    for message in result.messages:
        print(message, file=sys.stderr)
    where = f"on the Dask cluster {args.dask}" if args.dask else "here"
    for p in result.plans:
        for tc in p.toolchains:
            compiled = sum(1 for flavor, _ in result.compiled if flavor == tc.flavor)
            print(
                f"wino build: {len(p.jobs)} {p.target.value} kernel(s) for {tc.flavor}: "
                f"{compiled} compiled {where}, {len(p.jobs) - compiled} already built; "
                f"manifest {result.manifests.get(tc.flavor, '(not published)')}"
            )
    return 0 if result.manifests else 1
