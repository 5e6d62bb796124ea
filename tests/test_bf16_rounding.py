"""bf16 rounding of the kernels (the host build of the real K1): fp32 -> bf16 is round to
nearest, ties to even (not truncation), NaN stays a NaN, Inf stays Inf. The filter values are
chosen so that the transform is exact in fp32 and the store is the only rounding: then every U
element must equal ml_dtypes' correctly rounded bf16 of the exact value, bit for bit."""

from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from tests import host_cache
from wino.problem import Problem
from wino.runtime import dispatch
from wino.specs import RtFilterSpec, RtInputSpec, RtOutputSpec
from wino.vocab import DType, Stage, Tile
from wino.winograd import matrices

TILE = Tile(2, 2)
BF16 = DType.BF16
SPECS = {
    Stage.FILTER: RtFilterSpec(TILE, BF16, BF16, 1, 256, 1),
    Stage.INPUT: RtInputSpec(TILE, BF16, BF16, 1, 256, prescale="none"),
    Stage.OUTPUT: RtOutputSpec(TILE, BF16, DType.FP32, 1, 256),
}
K, C = 64, 64


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    root = tmp_path_factory.mktemp("bf16")
    host_cache.build(SPECS.values(), root)
    problem = Problem(N=1, C=C, H=4, W=4, K=K, dtype="bf16")
    return dispatch(problem, target="c", cache_root=root, specs=SPECS)


def _exact_u(w: np.ndarray, fs: np.ndarray) -> np.ndarray:
    """s_k * (G g Gt) in float64 (exact here), as [bins][K][C]."""
    _, g, _ = matrices(2)
    G = np.array([[float(Fraction(v)) for v in row] for row in g])
    u = np.einsum("ir,krsc,js->ijkc", G, w.astype(np.float64), G)
    return (u * fs.astype(np.float64)[None, None, :, None]).reshape(16, K, C)


def _nonzero(a: np.ndarray) -> np.ndarray:
    """0xFFFF where a is not zero, 0x7FFF where it is (the sign bit of a zero ignored)."""
    return np.where(_bits(a) & 0x7FFF, 0xFFFF, 0x7FFF).astype(np.uint16)


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint16)


def test_store_rounds_to_nearest_even(plan):
    rng = np.random.default_rng(5)
    # multiples of 2^-8 below 1: exactly representable in bf16 (8 significant bits)
    w = (rng.integers(-255, 256, (K, 3, 3, C)) / 256.0).astype(ml_dtypes.bfloat16)
    U, fs = plan.transform_filter(w)
    exact = _exact_u(w, fs)
    expected = exact.astype(ml_dtypes.bfloat16)  # correctly rounded, ties to even
    # bit for bit, but for the sign of a zero (the fp32 sums may make -0)
    np.testing.assert_array_equal(_bits(U) & _nonzero(U), _bits(expected) & _nonzero(U))
    # the data holds ties (exactly half an ulp) and they went to the even neighbour
    truncated = exact.astype(np.float32).view(np.uint32) >> 16
    low = exact.astype(np.float32).view(np.uint32) & 0xFFFF
    ties = low == 0x8000
    assert ties.sum() > 100
    assert not (_bits(U)[ties] & 1).any()  # even
    assert (_bits(U)[ties] != truncated[ties]).any()  # some ties rounded up, not truncated
    above = low > 0x8000
    assert (_bits(U)[above] == truncated[above] + 1).all()


def test_nan_and_inf_survive_the_store(plan):
    rng = np.random.default_rng(6)
    w = (rng.integers(-255, 256, (K, 3, 3, C)) / 256.0).astype(ml_dtypes.bfloat16)
    w[0, 0, 0, 0] = np.nan
    w[1, 0, 0, 0] = np.inf
    w[2, 1, 1, 3] = -np.inf
    U, fs = plan.transform_filter(w)
    u = U.astype(np.float32)
    _, g, _ = matrices(2)
    G = np.array([[float(Fraction(v)) for v in row] for row in g])
    reach = np.einsum("ir,js->ijrs", G != 0, G != 0).reshape(16, 3, 3)
    nan_bins = reach[:, 0, 0]
    assert np.isnan(u[nan_bins, 0, 0]).all() and np.isfinite(u[~nan_bins, 0, 0]).all()
    assert np.isinf(u[nan_bins, 1, 0]).all() and np.isfinite(u[~nan_bins, 1, 0]).all()
    assert np.isinf(u[reach[:, 1, 1], 2, 3]).all()
    assert u[0, 1, 0] == np.inf  # bin (0, 0) is g[0][0] alone: +inf
    assert np.isfinite(u[:, 3:, :]).all()  # other filters untouched
