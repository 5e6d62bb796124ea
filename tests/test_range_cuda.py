"""fp32 range on the GPU (H200, sm_90): the host's tests/test_range.py extremes through the
cubins and cuBLAS, on every tile and both split paths, and the bit-identity of the scaled fp32
result with the unscaled one. Skipped with a reason where CuPy, a CUDA device or nvcc is
missing."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from wino.pick import default_stage_specs
from wino.runtime import conv2d_reference, dispatch, relative_error
from wino.runtime.registry import cuda_available
from wino.runtime.verify import bound_for
from wino.vocab import TILES, DType, Prescale, Stage, Tile

from . import cuda_cache
from .test_range import FP32_MAX, FP32_PATHS, _data, _problem, _unscaled_specs

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not cuda_available(), reason="needs CuPy and a CUDA device"),
    pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc to build the cubins"),
]

UNSCALED_TILES = (Tile(2, 2), Tile(6, 6))


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("range-cuda")
    specs = {s for t in TILES for s in default_stage_specs(_problem("fp32"), t).values()}
    specs |= {s for path in FP32_PATHS.values() for s in path.values()}
    specs |= {s for t in UNSCALED_TILES for s in _unscaled_specs(t).values()}
    cuda_cache.build(specs, root)
    return root


def _run(root, tile, x, w, specs=None) -> np.ndarray:
    import cupy

    plan = dispatch(_problem("fp32"), target="cuda", tile=tile, cache_root=root, specs=specs)
    y = plan.run(cupy.asarray(x), cupy.asarray(w))
    return cupy.asnumpy(y)


def _check(root, tile, x64, w64, specs=None) -> None:
    x, w = x64.astype(np.float32), w64.astype(np.float32)
    ref = conv2d_reference(x, w, (1, 1))
    y = _run(root, tile, x, w, specs)
    bound = bound_for(tile, DType.FP32)
    for n in range(x.shape[0]):
        assert np.isfinite(y[n]).all(), f"{tile} image {n}: non-finite outputs"
        error = relative_error(y[n], ref[n])
        assert error <= bound, f"{tile} fp32 image {n}: error {error:.3e} > {bound:.1e}"


@pytest.mark.parametrize("tile", TILES, ids=str)
def test_fp32_extremes_on_the_gpu(root, tile):
    x, w = _data(4)
    _check(root, tile, x / np.abs(x).max() * FP32_MAX / 2, w * 2.0**-10)
    x, w = _data(6)
    _check(root, tile, x / np.abs(x).max() * 2.0**-130, w * 2.0**100)
    x, w = _data(7)
    x = x / np.abs(x).max()
    x[..., 0] *= 2.0**40
    _check(root, tile, x * np.array([2.0**80, 2.0**-140])[:, None, None, None], w * 2.0**-4)


@pytest.mark.parametrize("path", FP32_PATHS)
def test_fp32_extremes_on_the_split_paths(root, path):
    specs = FP32_PATHS[path]
    x, w = _data(8)
    _check(root, specs[Stage.INPUT].tile, x / np.abs(x).max() * FP32_MAX / 2, w * 2.0**-10, specs)


@pytest.mark.parametrize("tile", UNSCALED_TILES, ids=str)
def test_fp32_scale_changes_no_bit_on_the_gpu(root, tile):
    x, w = (a.astype(np.float32) for a in _data(9))
    assert default_stage_specs(_problem("fp32"), tile)[Stage.INPUT].prescale is Prescale.FUSED
    y = _run(root, tile, x, w)
    assert y.tobytes() == _run(root, tile, x, w, _unscaled_specs(tile)).tobytes()
