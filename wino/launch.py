"""Launch geometry: grid, block and the scalar kernel arguments of each stage, and the default
per-problem pick of stage specs.

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

from . import grid
from .magic import INDEX_LIMIT, magic_div
from .problem import Problem
from .refusals import Refused, check_fit, check_problem, lds_bytes, rule_book, tiles_per_image
from .specs import RtFilterSpec, RtInputSpec, RtOutputSpec, RtPrescaleSpec, StageSpec
from .vocab import VECS, DType, K2Path, Prescale, Stage, Tile, coerce

FORMAT = 1  # the kernarg ABI version: bump when KERNARG_FIELDS or a buffer layout changes

_TILE_DECODE = ("TH", "TW", "thp", "twp")
_INPUT_WINDOW = ("H", "W", "pad_h", "pad_w", "dil_h", "dil_w")

#: Kernel argument struct fields per stage kind, in ABI order (all 32-bit; m_X / s_X are the
#: magic pair for a division by X). The templates render their structs from this table.
KERNARG_FIELDS: dict[str, tuple[str, ...]] = {
    "k1": ("K", "Cg", "lanes"),
    "k2a": ("P", "C", "lanes", "span", "slots", *_INPUT_WINDOW, *_TILE_DECODE),
    "k2_reg": ("P", "C", "lanes", "Cg", "G", "total", *_INPUT_WINDOW, *_TILE_DECODE),
    "k2_fused": ("P", "C", "lanes", "slots", "Cg", "G", *_INPUT_WINDOW, *_TILE_DECODE),
    "k2_lds": ("P", "C", "Cg", "G", "N", *_INPUT_WINDOW, *_TILE_DECODE, "RW", "CH"),
    "k4": (
        "P",
        "K",
        "lanes",
        "Kg",
        "G",
        "total",
        "Ho",
        "Wo",
        "dil_h",
        "dil_w",
        *_TILE_DECODE,
        "has_tile_scale",
    ),
}
#: Divisors each stage kind needs as magic pairs (appended to its fields as m_X, s_X).
KERNARG_MAGICS: dict[str, tuple[str, ...]] = {
    "k1": (),
    "k2a": ("span", *_TILE_DECODE),
    "k2_reg": ("lanes", "Cg", *_TILE_DECODE),
    "k2_fused": ("lanes", "Cg", *_TILE_DECODE),
    "k2_lds": ("RW", "dil_w", *_TILE_DECODE, "CH"),
    "k4": ("lanes", "Kg", *_TILE_DECODE),
}


def kernarg_kind(spec: StageSpec) -> str:
    if isinstance(spec, RtInputSpec):
        if spec.path is K2Path.LDS:
            return "k2_lds"
        return "k2_fused" if spec.prescale is Prescale.FUSED else "k2_reg"
    return spec.stage.short


def kernarg_names(kind: str) -> tuple[str, ...]:
    magics = tuple(f"{p}_{d}" for d in KERNARG_MAGICS[kind] for p in ("m", "s"))
    return KERNARG_FIELDS[kind] + magics


@dataclass(frozen=True)
class TileGrid:
    """Tile counts of one (batch chunk of a) problem for one tile."""

    thp: int
    twp: int
    TH: int
    TW: int
    P: int

    @classmethod
    def of(cls, problem: Problem, tile: Tile) -> TileGrid:
        thp = _ceil_div(_ceil_div(problem.Ho, problem.dil_h), tile.mh)
        twp = _ceil_div(_ceil_div(problem.Wo, problem.dil_w), tile.mw)
        th, tw = problem.dil_h * thp, problem.dil_w * twp
        return cls(thp, twp, th, tw, problem.N * th * tw)


@dataclass(frozen=True)
class Launch:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    kernargs: dict[str, int]  # in ABI order
    shared_bytes: int = 0


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def stage_launch(spec: StageSpec, problem: Problem, *, tile_scale: bool = True) -> Launch:
    """Grid, block and kernargs of one stage for one problem (a batch chunk: problem.N is the
    chunk). Runs the geometry check: raises Refused when the spec does not fit the problem.
    ``tile_scale``: whether K4 divides by tile scales (the K2 spec's prescale is not none).
    The problem rules run first (not 3x3, stride, groups, 31-bit), with their rule ids."""
    check_problem(problem, spec.tile)
    kind = kernarg_kind(spec)
    tg = TileGrid.of(problem, spec.tile)
    g = problem.groups
    base = dict(
        P=tg.P,
        C=problem.C,
        K=problem.K,
        Cg=problem.Cg,
        Kg=problem.Kg,
        G=g,
        N=problem.N,
        H=problem.H,
        W=problem.W,
        pad_h=problem.pad_h,
        pad_w=problem.pad_w,
        dil_h=problem.dil_h,
        dil_w=problem.dil_w,
        Ho=problem.Ho,
        Wo=problem.Wo,
        TH=tg.TH,
        TW=tg.TW,
        thp=tg.thp,
        twp=tg.twp,
        has_tile_scale=int(tile_scale),
    )
    channels = problem.K if isinstance(spec, RtOutputSpec) else problem.C
    lanes = channels // spec.vec if not isinstance(spec, RtFilterSpec) else problem.Cg // spec.vec
    geometry, derived = _GEOMETRY[kind](spec, problem, tg, lanes, base)
    bins = spec.tile.bins
    derived.setdefault("grid_y", geometry[0][1])
    derived["lanes"] = lanes
    derived["max_elems_chunk"] = max(
        problem.N * problem.H * problem.W * problem.C,
        problem.N * problem.Ho * problem.Wo * problem.K,
        bins * tg.P * problem.C,
        bins * tg.P * problem.K,
        bins * problem.K * problem.Cg,
    )
    derived["max_threads_chunk"] = geometry[0][0] * geometry[1][0] * geometry[0][1]
    check_fit(spec, problem, derived)
    args = {**base, **derived}
    kernargs = {}
    for name in KERNARG_FIELDS[kind]:
        kernargs[name] = int(args[name])
    for divisor in KERNARG_MAGICS[kind]:
        magic, shift = magic_div(int(args[divisor]))
        kernargs[f"m_{divisor}"], kernargs[f"s_{divisor}"] = magic, shift
    grid_dims, block_dims, shared = geometry
    return Launch(grid_dims, block_dims, kernargs, shared)


def _k1(spec, problem, tg, lanes, base):
    return ((_ceil_div(problem.K, spec.rows), 1, 1), (spec.block, 1, 1), 0), {}


def _k2a(spec, problem, tg, lanes, base):
    span = max(min(lanes, spec.block), 1)  # lanes is 0 when vec > C: the fit rules refuse it
    slots = spec.block // span
    return ((_ceil_div(tg.P, slots), 1, 1), (spec.block, 1, 1), 0), {"span": span, "slots": slots}


def _k2_reg(spec, problem, tg, lanes, base):
    total = tg.P * lanes
    return ((_ceil_div(total, spec.block), 1, 1), (spec.block, 1, 1), 0), {"total": total}


def _k2_fused(spec, problem, tg, lanes, base):
    slots = max(spec.block // max(lanes, 1), 1)
    return ((_ceil_div(tg.P, slots), 1, 1), (spec.block, 1, 1), 0), {"slots": slots}


def _k2_lds(spec, problem, tg, lanes, base):
    regions = _ceil_div(tg.twp, spec.lds_width)
    chunks = _ceil_div(problem.Cg, spec.lds_lanes * spec.vec)
    grid_x = problem.N * tg.TH * problem.dil_w * regions
    geometry = ((grid_x, problem.groups * chunks, 1), (spec.block, 1, 1), lds_bytes(spec))
    return geometry, {"RW": regions, "CH": chunks, "grid_y": problem.groups * chunks}


def _k4(spec, problem, tg, lanes, base):
    total = tg.P * lanes
    return ((_ceil_div(total, spec.block), 1, 1), (spec.block, 1, 1), 0), {"total": total}


_GEOMETRY = {
    "k1": _k1,
    "k2a": _k2a,
    "k2_reg": _k2_reg,
    "k2_fused": _k2_fused,
    "k2_lds": _k2_lds,
    "k4": _k4,
}


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
        total += _ceil_div(count * dtype.itemsize, 256) * 256  # each buffer 256-byte aligned
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


# Default pick ----------------------------------------------------------------------------------
def default_xdtype(dtype: DType) -> DType:
    """fp16 transformed storage for 16-bit inputs (bf16 too: about 8x more accurate than bf16
    storage, made safe by the prescale), fp32 for fp32."""
    return DType.FP32 if dtype is DType.FP32 else DType.FP16


def _first_fit(candidates, problem: Problem) -> StageSpec:
    """The first candidate that is in the grid and fits the problem."""
    reasons = []
    for spec in candidates:
        if not grid.in_grid(spec):
            reasons.append(f"{spec.name}: not in the grid")
            continue
        try:
            stage_launch(spec, problem)
        except Refused as refusal:
            reasons.append(f"{spec.name}: {refusal}")
            continue
        return spec
    raise Refused(
        "no_spec_in_grid",
        "no kernel of the grid fits this problem; tried "
        + "; ".join(reasons)
        + ". Add a fitting sub-grid to grids/stages.yaml and rebuild",
    )


def _vecs_dividing(n: int) -> list[int]:
    return [v for v in sorted(VECS, reverse=True) if n % v == 0]


def _input_candidates(problem: Problem, tile: Tile, dtype: DType, xdtype: DType):
    for vec in _vecs_dividing(problem.Cg):
        if xdtype is DType.FP16:
            for block in (256, 512, 1024):
                yield RtInputSpec(
                    tile, dtype, xdtype, vec, block, K2Path.REGISTER, 0, 0, Prescale.FUSED
                )
            yield RtInputSpec(tile, dtype, xdtype, vec, 256, K2Path.REGISTER, 0, 0, Prescale.SPLIT)
        else:
            yield RtInputSpec(tile, dtype, xdtype, vec, 256, K2Path.REGISTER, 0, 0, Prescale.NONE)


def default_stage_specs(
    problem: Problem, tile: Tile, dtype: DType | None = None, xdtype: DType | None = None
) -> dict[Stage, StageSpec]:
    """The default pick per stage for a problem (its first batch chunk decides nothing: the
    channel extents do); ``dtype`` overrides the problem's. Always inside the grid; raises
    Refused when nothing fits."""
    tile = coerce(Tile, tile, "tile")
    dtype = problem.dtype if dtype is None else coerce(DType, dtype, "dtype")
    xdtype = default_xdtype(dtype) if xdtype is None else coerce(DType, xdtype, "xdtype")
    probe = replace(problem, N=1, dtype=dtype)
    k2 = _first_fit(_input_candidates(probe, tile, dtype, xdtype), probe)
    picks: dict[Stage, StageSpec] = {
        Stage.FILTER: _first_fit(
            (RtFilterSpec(tile, dtype, xdtype, v, 256, 1) for v in _vecs_dividing(problem.Cg)),
            probe,
        ),
        Stage.INPUT: k2,
    }
    if k2.prescale is Prescale.SPLIT:
        picks[Stage.PRESCALE] = _first_fit(
            (RtPrescaleSpec(tile, dtype, v, 256) for v in _vecs_dividing(problem.C)), probe
        )
    picks[Stage.OUTPUT] = _first_fit(
        (RtOutputSpec(tile, dtype, DType.FP32, v, 256) for v in _vecs_dividing(problem.Kg)), probe
    )
    return dict(sorted(picks.items(), key=lambda item: grid.GRID_STAGES.index(item[0])))


def rule_params() -> dict[str, int]:
    return rule_book()[0]
