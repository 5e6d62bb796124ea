"""Render a stage spec into kernel source for a target: Jinja2 + the target's renderer.

Rendering is byte-for-byte deterministic (no timestamps, no paths, sorted inputs), so a source's
hash is its identity in the cache and in the golden shard.
"""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path

import jinja2

from ..config import ROOT
from ..fused import SWIZZLE_ALIGN, FusedBudget
from ..kinds import kind_of
from ..launch import stage_launch
from ..problem import Problem
from ..specs import RtFusedSpec, StageSpec
from ..vocab import Activation, DType, K2Path, Prescale, Target
from ..winograd import exact_bits, growth, kron_bits
from .renderers import RENDERERS
from .transforms import apply_2d, apply_2d_row_pieces, apply_2d_rows, pair_lines, tile_matrices

TEMPLATES = ROOT / "templates"


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def template_files() -> list[Path]:
    """Every file rendering depends on (templates and this package's codegen modules)."""
    here = Path(__file__).resolve().parent
    return sorted(TEMPLATES.glob("*.j2")) + sorted(here.glob("*.py"))


def _transform_lines(spec: StageSpec) -> dict[str, list[str]]:
    tile, vec = spec.tile, getattr(spec, "vec", 1)  # KF has no channel vector
    mats = tile_matrices(tile.mh, tile.mw)

    def window(cols, vec=vec):
        return lambda a, b: f"win[{(a * cols + b) * vec} + v]"

    return {
        "input_lines": apply_2d(*mats["input"], window(tile.aw), window(tile.aw), "t"),
        "filter_lines": apply_2d(*mats["filter"], window(3), window(tile.aw), "t"),
        "output_lines": apply_2d(*mats["output"], window(tile.aw), window(tile.mw), "t"),
        # KF's held schedule at tcx 0: two output channels interleaved, v < 2 (fused2d.j2)
        "output_pair_lines": apply_2d(*mats["output"], window(tile.aw, 2), window(tile.mw, 2), "t"),
        # K2's streamed variant: one row of bins at a time into vout[j] (templates/k2_input.j2)
        "input_rows": apply_2d_rows(
            *mats["input"], window(tile.aw), lambda i, j: f"vout[{j * vec} + v]", "t"
        ),
        # K2's LDS-rows path: one source column in, one bin out at a time (k2_input.j2)
        "input_pieces": apply_2d_row_pieces(
            *mats["input"],
            lambda a, b: f"win[{a * vec} + v]",
            lambda i, b: f"tb[{b * vec} + v]",
            lambda i, j: "vout[v]",
        ),
    }


def _held_matrices(spec: StageSpec, budget: FusedBudget | None) -> dict[str, object]:
    """The held fused kernel's transforms on the MMA (axis tcx, templates/fused2d.j2): the
    input transform's matrix in the io dtype, the output transform's in the MMA dtype."""
    if budget is None or not budget.tcx:
        return {"in_kron": None, "out_kron": None}
    tile = spec.tile
    return {
        "in_kron": kron_bits("input", tile.mh, tile.mw, spec.io),
        "out_kron": kron_bits("output", tile.mh, tile.mw, spec.mdtype),
    }


def _input_pair_lines(spec: StageSpec, renderer) -> list[str]:
    """xbits 16 (KF, K2): the input transform on fp16 pairs, ``win[k]`` the pair at window
    position k (fused2d.j2's pair_transform16, k2_input.j2's held LDS-rows window)."""
    if getattr(spec, "xbits", 32) != 16:
        return []
    tile = spec.tile
    window = lambda a, b: f"win[{a * tile.aw + b} + v]"  # noqa: E731 - one channel's layout
    lines = apply_2d(*tile_matrices(tile.mh, tile.mw)["input"], window, window, "t")
    return pair_lines(lines, renderer.pair_ops, fp16_bits)


def _output_pairs16(spec: StageSpec, renderer) -> dict[str, object]:
    """obits 16 (KF, held, tcx 0; fused2d.j2's out_item): the output transform on fp16 pairs,
    ``win[a]`` the pair of two output channels' M at bin a, then ``win[o]`` the pair at output
    o; M first times 2^-shift, the smallest power of two that keeps the transform's largest
    growth (F4x4: 19 x 19 = 361, shift 9) times fp16's largest M inside fp16's range."""
    if getattr(spec, "obits", 32) != 16:
        return {"output_pair_lines16": [], "out16_shift": 0, "out16_bits": 0}
    tile = spec.tile
    at_h, at_w = tile_matrices(tile.mh, tile.mw)["output"]
    lines = apply_2d(
        at_h,
        at_w,
        lambda a, b: f"win[{a * tile.aw + b} + v]",
        lambda a, b: f"win[{a * tile.mw + b} + v]",
        "t",
    )
    shift = math.ceil(math.log2(growth(at_h) * growth(at_w)))
    return {
        "output_pair_lines16": pair_lines(lines, renderer.pair_ops, fp16_bits),
        "out16_shift": shift,
        "out16_bits": fp16_bits(2.0**-shift),
    }


def fp16_bits(value: float) -> int:
    """A coefficient's fp16 pattern: every tile's input- and output-transform coefficients are
    exact in fp16 (tests/test_transforms.py renders each tile's pair forms), so a render never
    rounds one."""
    return exact_bits(value, DType.FP16)


def baked_symbol(spec: StageSpec) -> str:
    return f"{spec.name}_baked"


def render(
    spec: StageSpec,
    target: Target | str,
    baked: Problem | None = None,
    *,
    constants: dict[str, int] | None = None,
) -> str:
    """Kernel source of one spec for one target. With ``baked``, the problem's kernargs are
    compiled in as constants (the per-problem JIT route) under the symbol ``<name>_baked``.
    With ``constants`` (one launch's kernargs, ``Launch.kernargs``), the same under the
    kernel's own name, so a cache of baked binaries binds as the AOT one (wino.builder.baked).
    Either way the signature stays the same and the kernel never reads its kernarg struct."""
    target = Target(target) if isinstance(target, str) else target
    if baked is not None and constants is not None:
        raise ValueError("render: pass baked (a problem) or constants (kernargs), not both")
    kernargs = stage_launch(spec, baked).kernargs if baked is not None else constants
    kind = kind_of(spec)
    renderer = RENDERERS[target](baked=kernargs)
    tile = spec.tile
    budget = FusedBudget.of(spec) if isinstance(spec, RtFusedSpec) else None
    context = dict(
        spec=spec,
        r=renderer,
        name=baked_symbol(spec) if baked is not None else spec.name,
        kernargs=kind.kernargs,
        params=kind.params(spec),
        axis_constants=spec.axis_values(),
        K2Path=K2Path,
        Prescale=Prescale,
        Activation=Activation,
        tile=tile.name,
        mh=tile.mh,
        mw=tile.mw,
        ah=tile.ah,
        aw=tile.aw,
        bins=tile.bins,
        vec=getattr(spec, "vec", 1),
        block=spec.block,
        fused=budget,
        swizzle_align=SWIZZLE_ALIGN,
        **_held_matrices(spec, budget),
        input_pair_lines=_input_pair_lines(spec, renderer),
        **_output_pairs16(spec, renderer),
        io=spec.io,
        xdtype=getattr(spec, "xdtype", None),
        accdtype=getattr(spec, "accdtype", None),
        **_transform_lines(spec),
    )
    text = environment().get_template(kind.template).render(context)
    return "\n".join(line.rstrip() for line in text.splitlines()) + "\n"
