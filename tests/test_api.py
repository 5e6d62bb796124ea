"""wino.conv2d on numpy arrays (fp16, fp32, bf16 through ml_dtypes): results within the bound,
padding / dilation / groups / tile / dispatch options passed through, refusals with their rule,
and ValueErrors naming the argument for bad shapes, dtypes and hyper-parameters."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import wino
from tests import runtime_fixtures as rf
from wino.refusals import Refused
from wino.runtime import conv2d_reference, relative_error
from wino.runtime.api import problem_of
from wino.runtime.host import HostGemm
from wino.runtime.plan import default_tile
from wino.vocab import DType, Tile


@pytest.fixture(scope="session")
def root(tmp_path_factory):
    return rf.host_cache(tmp_path_factory)


def _arrays(problem, seed=0):
    return rf.inputs(problem, np.random.default_rng(seed))


@pytest.mark.parametrize("dtype", rf.DTYPES, ids=lambda d: d.short)
def test_conv2d_on_numpy(root, dtype):
    p = rf.problem(dtype, N=2, C=64, H=14, W=14, K=64)  # the api problems' shape (rf.EXTRA)
    x, w = _arrays(p, 1)
    y = wino.conv2d(x, w, padding=1, cache_root=root)
    assert isinstance(y, np.ndarray) and y.dtype == x.dtype and y.shape == (2, 14, 14, 64)
    err = relative_error(y, conv2d_reference(x, w, (1, 1)))
    xdtype = DType.FP32 if dtype is DType.FP32 else DType.FP16
    assert err <= rf.issue_bound(default_tile(p), dtype, xdtype)


def test_bf16_is_ml_dtypes():
    assert rf.inputs(rf.problem(DType.BF16), np.random.default_rng(0))[0].dtype == np.dtype(
        ml_dtypes.bfloat16
    )


@pytest.mark.parametrize("label", ["dil2x3", "g4", "pad0x2", "depthwise"])
def test_conv2d_passes_padding_dilation_and_groups(root, label):
    case = next(
        c for c in rf.coverage_cases() if c.label == label and c.tile == default_tile(c.problem)
    )
    p = case.problem
    x, w = _arrays(p, 2)
    y = wino.conv2d(
        x,
        w,
        padding=(p.pad_h, p.pad_w),
        dilation=(p.dil_h, p.dil_w),
        groups=p.groups,
        cache_root=root,
    )
    ref = conv2d_reference(x, w, (p.pad_h, p.pad_w), (p.dil_h, p.dil_w), p.groups)
    assert relative_error(y, ref) <= rf.issue_bound(
        case.tile, p.dtype, case.specs[wino.Stage.INPUT].xdtype
    )


def test_conv2d_tile_and_dispatch_options(root):
    p = rf.problem(DType.FP32, N=3, C=16, H=12, W=12, K=8)  # rf.EXTRA: F4x4 and F2x2 built
    x, w = _arrays(p, 3)
    ref = conv2d_reference(x, w, (1, 1))
    y4 = wino.conv2d(x, w, tile="F4x4", cache_root=root)
    y2 = wino.conv2d(x, w, tile=Tile(2, 2), cache_root=root)
    split = wino.conv2d(x, w, tile="F4x4", batch_split=1, cache_root=root)
    if HostGemm.rows_independent():  # the BLAS's rows do not depend on the row count
        assert np.array_equal(y4, split)
    else:  # the GEMM's reassociation through K4: within fp32 F4x4's bound (4.3e-6 measured)
        assert relative_error(split, y4.astype(np.float64)) <= 4e-5
    for y, bound in ((y4, 4e-5), (y2, 2e-6)):
        assert relative_error(y, ref) <= bound


def test_conv2d_accepts_numpy_integers(root):
    p = rf.problem(DType.FP32, N=3, C=16, H=12, W=12, K=8)
    x, w = _arrays(p, 4)
    assert problem_of(x, w, np.int64(1), (np.int32(1), 1)) == p


@pytest.mark.parametrize(
    "w_shape, stride, rule",
    [
        ((8, 3, 3, 8), 2, "stride_not_1"),
        ((8, 3, 3, 8), (1, 2), "stride_not_1"),
        ((8, 1, 1, 8), 1, "not_3x3"),
        ((8, 5, 5, 8), 1, "not_3x3"),
    ],
)
def test_conv2d_refuses_with_the_rule(root, w_shape, stride, rule):
    x = np.zeros((1, 12, 12, 8), np.float16)
    with pytest.raises(Refused) as refused:
        wino.conv2d(x, np.zeros(w_shape, np.float16), stride=stride, cache_root=root)
    assert refused.value.rule == rule


X = np.zeros((1, 8, 8, 4), np.float32)
W = np.zeros((4, 3, 3, 4), np.float32)


@pytest.mark.parametrize(
    "x, w, kwargs, match",
    [
        (X[0], W, {}, "x must be a 4-D NHWC array, got \\(8, 8, 4\\)"),
        (X, W[0], {}, "w must be a 4-D KRSC array"),
        (X.tolist(), W, {}, "x must be a 4-D NHWC array, got list"),
        (X, np.zeros((4, 3, 3, 2), np.float32), {}, "w has C/G = 2 channels but x has C = 4"),
        (X, W, {"groups": 2}, "w has C/G = 4 channels but x has C = 4 with groups = 2"),
        (X, W, {"groups": 0}, "groups must be a positive int"),
        (X, W.astype(np.float16), {}, "x is float32 but w is float16"),
        (X.astype(np.float64), W, {}, "x: array dtype float64 is not supported"),
        (X, W.astype(np.int32), {}, "w: array dtype int32 is not supported"),
        (X, W, {"padding": "1"}, "padding must be an int or a pair of ints, got '1'"),
        (X, W, {"padding": (1, 2, 3)}, "padding must be an int or a pair"),
        (X, W, {"padding": 1.0}, "padding must be an int or a pair"),
        (X, W, {"dilation": (1, True)}, "dilation must be an int or a pair"),
        (X, W, {"stride": None}, "stride must be an int or a pair"),
        (X, W, {"padding": -1}, "pad_h: must be >= 0"),
        (X, W, {"dilation": 0}, "dil_h: must be >= 1"),
        (X, W, {"padding": 0, "dilation": 4}, "output extent .* is empty"),
    ],
)
def test_bad_arguments_are_value_errors_naming_them(x, w, kwargs, match):
    with pytest.raises(ValueError, match=match) as error:
        wino.conv2d(x, w, **kwargs)
    assert str(error.value).startswith("conv2d: ")


def test_nchw_shapes_get_a_layout_hint():
    x = np.zeros((2, 16, 10, 10), np.float32)  # NCHW
    w = np.zeros((8, 16, 3, 3), np.float32)  # KCRS
    with pytest.raises(ValueError, match=r"look like NCHW / KCRS; wino takes NHWC x and KRSC w"):
        wino.conv2d(x, w)
    with pytest.raises(ValueError) as plain:  # an NHWC mistake gets no layout hint
        wino.conv2d(X, np.zeros((4, 3, 3, 2), np.float32))
    assert "NCHW" not in str(plain.value)
