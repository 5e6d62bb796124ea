"""Range: the power-of-two tile and filter scales keep the transformed values inside the 16-bit
storage, so fp16 and bf16 inputs at the extremes (near the largest finite value, bf16
subnormals, tiles of very different magnitudes) whose direct convolution is finite and normal
give outputs within the bound wino claims: the GPUs' pick (fp16 storage, prescaled) and the c
target's (fp32 storage, unscaled). (fp32 inputs near fp32's largest value still overflow, and so
do bf16 inputs on the c target's pick, which stores them as fp32: docs/TESTING.md.)"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tests import host_cache
from wino.pick import default_stage_specs
from wino.problem import Problem
from wino.runtime import conv2d_reference, dispatch, relative_error
from wino.runtime.verify import bound_for
from wino.vocab import DType, Target, Tile

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
    """At 1/8 of the dtype's largest value; bf16 on the c target's pick (fp32 storage, no tile
    scale: fp32's range less the transforms' growth, as fp32 inputs) at 2^100 instead, far
    past fp16's range."""
    x, w = _data(1)
    big = float(DType(dtype).largest_finite) / 8
    if (dtype, pick) == ("bf16", "c"):
        big = 2.0**100
    _check(root, dtype, tile, x / np.abs(x).max() * big, w * (1.0 / big) * 16, pick)


@pytest.mark.parametrize("pick", PICKS)
@pytest.mark.parametrize("tile", TILES, ids=str)
def test_bf16_subnormal_inputs(root, tile, pick):
    """x in bf16's subnormal range (below 2^-126) with a filter large enough that the direct
    convolution is normal: the subnormal tile max gets the scale 2^127 (was 1: all zeros);
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
