"""Range: the power-of-two tile and filter scales keep the transformed values inside the
storage (16-bit, and fp32's own range for fp32 storage), so fp32, fp16 and bf16 inputs at the
extremes (near the largest finite value, subnormals, tiles of very different magnitudes) whose
direct convolution is finite and normal give outputs within the bound wino claims, on every tile,
on the GPUs' pick (fp16 storage) and the c target's (fp32 storage; fp16 io unscaled there, since
fp32 holds every transformed fp16 tile), and on each K2 path (fused and split prescale, register
and LDS-region); and the scale changes no bit of an ordinary fp32 result (a power of two is
exact)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tests import host_cache
from wino.grid import aot_stage_specs
from wino.pick import default_stage_specs
from wino.problem import Problem
from wino.runtime import conv2d_reference, dispatch, relative_error
from wino.runtime.verify import bound_for
from wino.specs import RtInputSpec
from wino.vocab import TILES as ALL_TILES
from wino.vocab import DType, K2Path, Prescale, Stage, Target, Tile

TILES = (Tile(2, 2), Tile(4, 4), Tile(6, 6))
DTYPES = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16}
SHAPE = dict(N=2, C=32, H=14, W=13, K=16, pad_h=1, pad_w=1)


def _problem(dtype: str) -> Problem:
    return Problem(**SHAPE, dtype=dtype)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("range")
    specs = {
        s
        for d in DTYPES
        for t in TILES
        for target in PICKS.values()
        for s in default_stage_specs(_problem(d), t, target=target).values()
    }
    specs |= {s for t in ALL_TILES for s in default_stage_specs(_problem("fp32"), t).values()}
    specs |= {s for path in FP32_PATHS.values() for s in path.values()}
    host_cache.build(specs, root)
    return root


#: Whose default pick runs (on the host): the c target's own, or the GPUs' (forced).
PICKS = {"c": Target.C, "gpu": Target.CUDA}


def _check(root, dtype: str, tile: Tile, x64, w64, pick: str = "gpu") -> None:
    problem = _problem(dtype)
    specs = default_stage_specs(problem, tile, target=PICKS[pick])
    plan = dispatch(problem, target="c", tile=tile, cache_root=root, specs=specs)
    assert plan.xdtype is (DType.FP32 if pick == "c" else DType.FP16)
    x, w = x64.astype(DTYPES[dtype]), w64.astype(DTYPES[dtype])
    ref = conv2d_reference(x, w, (1, 1))
    finite = np.finfo(np.float32).max if dtype == "bf16" else 65504.0
    assert np.abs(ref).max() < finite and np.abs(ref).max() > np.finfo(np.float32).tiny
    y = plan.run(x, w)
    error = relative_error(y, ref)
    bound = bound_for(tile, problem.dtype, plan.xdtype)
    assert error <= bound, f"{tile} {dtype}: error {error:.3e} > {bound:.1e}"


def _data(seed: int):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((2, 14, 13, 32)), rng.standard_normal((16, 3, 3, 32))


@pytest.mark.parametrize("pick", PICKS)
@pytest.mark.parametrize("tile", TILES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
def test_inputs_near_the_largest_value(root, dtype, tile, pick):
    """At 1/8 of the dtype's largest value (bf16: past fp32's range once transformed, so the c
    target's fp32 storage takes the tile scale too)."""
    x, w = _data(1)
    big = float(DType(dtype).largest_finite) / 8
    _check(root, dtype, tile, x / np.abs(x).max() * big, w * (1.0 / big) * 16, pick)


@pytest.mark.parametrize("pick", PICKS)
@pytest.mark.parametrize("tile", TILES, ids=str)
def test_bf16_subnormal_inputs(root, tile, pick):
    """x in bf16's subnormal range (below 2^-126) with a filter large enough that the direct
    convolution is normal: the subnormal tile max gets the scale 2^126 (was 1: all zeros);
    fp32 storage holds the subnormals as they are."""
    x, w = _data(2)
    _check(root, "bf16", tile, x / np.abs(x).max() * 2.0**-127, w * 2.0**20, pick)


@pytest.mark.parametrize("pick", PICKS)
@pytest.mark.parametrize("tile", TILES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
def test_mixed_magnitudes_across_tiles(root, dtype, tile, pick):
    """Each image row band at its own scale, 2^-12 .. 2^12: each tile is scaled on its own."""
    x, w = _data(3)
    bands = 2.0 ** np.linspace(-12, 12, 14)[None, :, None, None]
    _check(root, dtype, tile, x * bands, w * 2.0**-4, pick)


# fp32 ------------------------------------------------------------------------------------------
FP32_MAX = float(np.finfo(np.float32).max)


def _fp32_path(tile: Tile, prescale: Prescale, path: K2Path) -> dict[Stage, object]:
    """The default pick of F fp32 with K2 (and K2a) replaced by the grid's first spec of the
    given prescale and path."""
    picks = default_stage_specs(_problem("fp32"), tile)
    k2 = next(
        s
        for s in aot_stage_specs(Stage.INPUT)
        if s.tile == tile and s.io is DType.FP32 and s.prescale is prescale and s.path is path
    )
    picks[Stage.INPUT] = k2
    if prescale is Prescale.SPLIT:
        picks[Stage.PRESCALE] = next(
            s for s in aot_stage_specs(Stage.PRESCALE) if s.tile == tile and s.io is DType.FP32
        )
    return picks


#: The fp32 K2 paths besides the default (fused) one, on one tile each.
FP32_PATHS = {
    "split-reg": _fp32_path(Tile(4, 4), Prescale.SPLIT, K2Path.REGISTER),
    "split-lds": _fp32_path(Tile(2, 2), Prescale.SPLIT, K2Path.LDS),
}


def _fp32_run(root, tile: Tile, x: np.ndarray, w: np.ndarray, specs=None):
    plan = dispatch(_problem("fp32"), target="c", tile=tile, cache_root=root, specs=specs)
    return plan, plan.run(x.astype(np.float32), w.astype(np.float32))


def _fp32_check(root, tile: Tile, x64, w64, specs=None) -> None:
    """Finite and within the bound, image by image (each image against its own largest
    reference value: a tiny image next to a huge one is held to its own precision)."""
    x, w = x64.astype(np.float32), w64.astype(np.float32)
    ref = conv2d_reference(x, w, (1, 1))
    plan, y = _fp32_run(root, tile, x, w, specs)
    bound = bound_for(tile, DType.FP32)
    for n in range(x.shape[0]):
        top = np.abs(ref[n]).max()
        assert FP32_MAX > top > np.finfo(np.float32).tiny, f"image {n}: direct conv {top:.3e}"
        assert np.isfinite(y[n]).all(), f"{tile} image {n}: non-finite outputs"
        error = relative_error(y[n], ref[n])
        assert error <= bound, f"{tile} fp32 image {n}: error {error:.3e} > {bound:.1e}"


@pytest.mark.parametrize("tile", ALL_TILES, ids=str)
def test_fp32_inputs_near_the_largest_value(root, tile):
    """x up to half of fp32's largest value in every tile (the input transform's growth would
    carry V past it unscaled: inf/NaN before), with a filter small enough that the direct
    convolution stays finite."""
    x, w = _data(4)
    _fp32_check(root, tile, x / np.abs(x).max() * FP32_MAX / 2, w * 2.0**-10)


@pytest.mark.parametrize("tile", ALL_TILES, ids=str)
def test_fp32_filters_near_the_largest_value(root, tile):
    """w up to half of fp32's largest value and x small: the filter scale keeps U in range,
    and K4 puts the tile scale (2^40 here) and the filter scale (2^-127, an fp32 subnormal) back as
    one product."""
    x, w = _data(5)
    _fp32_check(root, tile, x / np.abs(x).max() * 2.0**-40, w / np.abs(w).max() * FP32_MAX / 2)


@pytest.mark.parametrize("tile", ALL_TILES, ids=str)
def test_fp32_subnormal_inputs(root, tile):
    """x in fp32's subnormal range (largest 2^-130) with a filter that makes the direct
    convolution normal: the subnormal tile max gets the scale 2^126, so the transform and the
    GEMM run at full precision."""
    x, w = _data(6)
    _fp32_check(root, tile, x / np.abs(x).max() * 2.0**-130, w * 2.0**100)


@pytest.mark.parametrize("tile", ALL_TILES, ids=str)
def test_fp32_mixed_magnitudes(root, tile):
    """Image 0 up to 2^120, image 1 up to 2^-100 (its other channels subnormal), each held to
    its own precision; within each tile, channel 0 is 2^40 above the others."""
    x, w = _data(7)
    x = x / np.abs(x).max()
    x[..., 0] *= 2.0**40
    x *= np.array([2.0**80, 2.0**-140])[:, None, None, None]
    _fp32_check(root, tile, x, w * 2.0**-4)


@pytest.mark.parametrize("path", FP32_PATHS)
def test_fp32_extremes_on_every_k2_path(root, path):
    specs = FP32_PATHS[path]
    tile = specs[Stage.INPUT].tile
    x, w = _data(8)
    big = x / np.abs(x).max() * FP32_MAX / 2
    _fp32_check(root, tile, big, w * 2.0**-10, specs)
    _fp32_check(root, tile, x / np.abs(x).max() * 2.0**-130, w * 2.0**100, specs)


def _unscaled_specs(tile: Tile) -> dict[Stage, object]:
    """The fp32 default pick with K2 without the tile scale (prescale none, what fp32 ran
    before; a valid spec, no longer in the grid)."""
    scaled = default_stage_specs(_problem("fp32"), tile)
    k2 = scaled[Stage.INPUT]
    none = RtInputSpec(
        tile, DType.FP32, DType.FP32, k2.vec, 256, K2Path.REGISTER, 0, 0, Prescale.NONE
    )
    return {**scaled, Stage.INPUT: none}


@pytest.fixture(scope="module")
def unscaled(tmp_path_factory):
    """A cache of the unscaled fp32 pipelines, for the bit-identity check."""
    root = tmp_path_factory.mktemp("unscaled")
    picks = {tile: _unscaled_specs(tile) for tile in (Tile(2, 2), Tile(6, 6))}
    host_cache.build({s for p in picks.values() for s in p.values()}, root)
    return root, picks


@pytest.mark.parametrize("tile", [Tile(2, 2), Tile(6, 6)], ids=str)
def test_fp32_scale_changes_no_bit_of_ordinary_results(root, unscaled, tile):
    """N(0,1) data: the scaled pipeline (tile scale 2^-2 .. 2^-3 here) and the unscaled one
    give the same bits: scaling by a power of two is exact away from overflow and
    subnormals, in K2's transform, the GEMM and K4's."""
    x, w = _data(9)
    plan, y = _fp32_run(root, tile, x, w)
    assert plan.prescale is Prescale.FUSED
    _, y_none = _fp32_run(unscaled[0], tile, x, w, unscaled[1][tile])
    assert y.tobytes() == y_none.tobytes()
