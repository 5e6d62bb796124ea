"""Launch geometry: grid, block and the scalar kernel arguments of each stage (the per-kind facts
are wino.kinds'), the workspace layout and the batch split.

Tile numbering (every stage agrees): per dimension, outputs split into ``dil`` interleaved phases;
a phase is an ordinary stride-1 Winograd over inputs spaced by ``dil``. Tile rows are phase-major:
``tr = ph * thp + i`` with ``thp = ceil(ceil(Ho / dil_h) / mh)`` tiles per phase, likewise
columns; ``TH = dil_h * thp``, ``TW = dil_w * twp``, and tile ``p = (n * TH + tr) * TW + tc``
over ``P = N * TH * TW`` tiles. Tile (n, ph, i, pw, j) covers outputs
``oh = ph + dil_h * (i * mh + r)``, ``ow = pw + dil_w * (j * mw + s)`` and reads inputs
``ih = ph + dil_h * (i * mh + a) - pad_h``, ``iw = pw + dil_w * (j * mw + b) - pad_w``.

Workspace layouts (xd = transformed dtype, acc = accumulator dtype):
  U  [A][K][C/G]        xd    (k = g * K/G + kl, so per group a K/G x C/G block)
  fs [K]                fp32  filter scales
  V  [A][G][P][C/G]     xd
  ts [P]                fp32  tile scales
  M  [A][G][P][K/G]     acc
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from .geometry import INDEX_LIMIT, TileGrid, aligned, ceil_div, elems, tiles_per_image
from .kinds import KINDS, kind_of
from .magic import magic_div
from .problem import Problem
from .refusals import Refused, Scope, check_fit, check_problem, kept, may_read
from .specs import RtFilterSpec, RtOutputSpec, StageSpec
from .vocab import DType, Tile

_PROBLEM_ARGS = "C K Cg Kg N H W pad_h pad_w dil_h dil_w Ho Wo".split()  # kernargs as is
FORMAT = 2  # the kernarg ABI version (wino.kinds): bump when a kind's kernargs or buffers change


@dataclass(frozen=True)
class Launch:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    kernargs: dict[str, int]  # in ABI order
    shared_bytes: int = 0
    dynamic_shared: bool = False  # shared_bytes is dynamic (passed at launch), not static


def stage_launch(spec: StageSpec, problem: Problem, *, tile_scale: bool = True) -> Launch:
    """Grid, block and kernargs of one stage for one problem (a batch chunk: problem.N is the
    chunk). Runs the geometry check: raises Refused when the spec does not fit the problem.
    ``tile_scale``: whether K4 divides by tile scales (the K2 spec's prescale is not none).
    The problem rules run first (not 3x3, stride, groups, 31-bit), with their rule ids.
    A launch that fits is kept per (spec, problem, tile_scale) and rule book, and the same
    Launch is returned again (a dispatch's pick and its steps launch the same specs): treat
    it, and its kernargs, as read-only. Where ``tile_scale`` cannot change the launch
    (``_tile_scale_matters``), it is made, and kept, as for True: the pick launches K1 and K2
    with the default, the steps with the K2 spec's prescale, and both get the one Launch."""
    if not tile_scale and not _tile_scale_matters(spec):
        tile_scale = True
    key = (spec, problem, tile_scale)
    return kept(_LAUNCHES, key, lambda: _stage_launch(spec, problem, tile_scale))


def spread(launch: Launch, spec: StageSpec, workgroups: int) -> Launch:
    """A pipelined KF launch (``spec`` has chain > 0) re-sized to min(tile blocks, workgroups)
    workgroups, grid x and the kernarg GX both: workgroup bx runs the tile blocks bx, bx + GX,
    ..., its share derived from GX in the kernel, so any GX covers every block once. Any
    other kernel reads its block from bx alone (re-sized, it would skip blocks): ValueError.
    (A baked binary holds the GX it was baked with: re-size only the shape-generic one.)"""
    if not getattr(spec, "chain", 0) or "GX" not in launch.kernargs:
        raise ValueError(f"spread: {spec.name} is not a pipelined KF kernel (axis chain > 0)")
    n = max(1, min(workgroups, ceil_div(launch.kernargs["P"], spec.tiles)))
    return replace(launch, grid=(n, *launch.grid[1:]), kernargs={**launch.kernargs, "GX": n})


#: Launches that fit, by (spec, problem, tile_scale), ``refusals.kept``.
_LAUNCHES: dict[tuple, tuple[Any, Launch]] = {}


def _tile_scale_matters(spec: StageSpec) -> bool:
    """Whether ``tile_scale`` can change a launch of the spec: a kind of its class has the
    has_tile_scale kernarg (K4), or a fit rule of its stage may read tile_scale (its text
    names it); kept per spec class and rule book."""

    def matters() -> bool:
        kinds = (k for k in KINDS if k.spec_class is type(spec))
        return any("has_tile_scale" in k.fields for k in kinds) or may_read(
            Scope.FIT, spec.stage.short, "tile_scale"
        )

    return kept(_SCALE_MATTERS, type(spec), matters)


#: ``_tile_scale_matters`` by spec class, ``refusals.kept``.
_SCALE_MATTERS: dict[type, tuple[Any, bool]] = {}


def _stage_launch(spec: StageSpec, problem: Problem, tile_scale: bool) -> Launch:
    check_problem(problem, spec.tile)
    kind = kind_of(spec)
    tg = TileGrid.of(problem, spec.tile)
    base = {name: getattr(problem, name) for name in _PROBLEM_ARGS}
    base.update(tg.counts(), G=problem.groups, has_tile_scale=int(tile_scale))
    channels = {RtFilterSpec: problem.Cg, RtOutputSpec: problem.K}.get(type(spec), problem.C)
    lanes = channels // getattr(spec, "vec", 1)  # KF has no channel vector
    geometry, derived = kind.geometry(spec, problem, tg, lanes)
    derived.setdefault("grid_y", geometry[0][1])
    derived["lanes"] = lanes
    derived["tile_scale"] = int(tile_scale)  # K4: M carries the tile scales (fp16_m_range)
    derived["max_elems_chunk"] = elems(problem, spec.tile)
    derived["max_threads_chunk"] = geometry[0][0] * geometry[1][0] * geometry[0][1]
    check_fit(spec, problem, derived)
    args = {**base, **derived}
    kernargs = {name: int(args[name]) for name in kind.fields}
    for divisor in kind.magics:
        magic, shift = magic_div(int(args[divisor]))
        kernargs[f"m_{divisor}"], kernargs[f"s_{divisor}"] = magic, shift
    grid_dims, block_dims, shared = geometry
    return Launch(grid_dims, block_dims, kernargs, shared, kind.dynamic_shared)


# Workspace -------------------------------------------------------------------------------------
def workspace_layout(
    problem: Problem, tile: Tile, xdtype: DType, accdtype: DType, chunk: int
) -> dict[str, tuple[tuple[int, ...], DType]]:
    """Shapes and dtypes of the plan's buffers for a batch chunk of ``chunk`` images."""
    tg = TileGrid.of(problem.with_batch(chunk), tile)
    a, g = tile.bins, problem.groups
    return {
        "U": ((a, problem.K, problem.Cg), xdtype),
        "fs": ((problem.K,), DType.FP32),
        "V": ((a, g, tg.P, problem.Cg), xdtype),
        "ts": ((tg.P,), DType.FP32),
        "M": ((a, g, tg.P, problem.Kg), accdtype),
    }


def workspace_bytes(layout: dict[str, tuple[tuple[int, ...], DType]]) -> int:
    total = 0
    for shape, dtype in layout.values():
        count = 1
        for extent in shape:
            count *= extent
        total += aligned(count * dtype.itemsize)
    return total


# Batch split -----------------------------------------------------------------------------------
def batch_chunks(n: int, split: Any) -> list[tuple[int, int]]:
    """(first image, images) per chunk of at most ``split`` images; split must be a positive
    integer (refused otherwise)."""
    if not isinstance(split, int) or isinstance(split, bool) or split < 1:
        raise Refused(
            "batch_split_not_positive",
            f"batch split {split!r} is not a positive integer; pass the number of "
            "images per chunk (1 <= split <= N), or None to let dispatch choose",
        )
    split = min(split, n)
    return [(start, min(split, n - start)) for start in range(0, n, split)]


def largest_split(
    problem: Problem, tile: Tile, workspace_limit: int | None, xdtype: DType, accdtype: DType
) -> int:
    """The largest images-per-chunk whose indices fit 31 bits and whose workspace fits."""
    per_image = max(
        problem.H * problem.W * problem.C,
        problem.Ho * problem.Wo * problem.K,
        tile.bins * tiles_per_image(problem, tile) * max(problem.C, problem.K),
    )
    split = max(1, min(problem.N, (INDEX_LIMIT - 1) // max(per_image, 1)))
    # thread counts: P * lanes (lanes <= C or K) is bounded by the same product
    if workspace_limit is not None:  # bisect: the workspace grows with the chunk
        low, high = 1, split  # 1 even when one image alone does not fit the budget
        while low < high:
            mid = (low + high + 1) // 2
            layout = workspace_layout(problem, tile, xdtype, accdtype, mid)
            low, high = (
                (mid, high) if workspace_bytes(layout) <= workspace_limit else (low, mid - 1)
            )
        split = low
    return split
