"""y must share no memory with x, w, U or the workspace (wino.runtime.aliasing): refused
before any launch on the host; byte extents of strided views computed exactly."""

from __future__ import annotations

import numpy as np
import pytest

from tests import host_cache
from tests import runtime_fixtures as rf
from wino.pick import default_stage_specs
from wino.problem import Problem
from wino.runtime import aliasing, dispatch
from wino.vocab import Tile

TILE = Tile(4, 4)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """fp32 N3 C16 12x12 K8 F4x4 (its default pick, built into a cache of its own)."""
    problem = Problem(N=3, C=16, H=12, W=12, K=8, pad_h=1, pad_w=1)
    root = tmp_path_factory.mktemp("aliasing")
    host_cache.build(default_stage_specs(problem, TILE).values(), root)
    plan = dispatch(problem, target="c", tile=TILE, cache_root=root)
    x, w = rf.inputs(problem, np.random.default_rng(3))
    return plan, x, w


def _y_shape(plan):
    p = plan.problem
    return (p.N, p.Ho, p.Wo, p.K)


def _view(buffer: np.ndarray, offset_bytes: int, shape, dtype) -> np.ndarray:
    count = int(np.prod(shape))
    raw = buffer.view(np.uint8).reshape(-1)
    return (
        raw[offset_bytes : offset_bytes + count * np.dtype(dtype).itemsize]
        .view(dtype)
        .reshape(shape)
    )


def test_y_inside_x_is_refused(small):
    plan, x, w = small
    shape = _y_shape(plan)
    buffer = np.zeros(x.size + int(np.prod(shape)), dtype=x.dtype)
    xs = buffer[: x.size].reshape(x.shape)
    xs[...] = x
    y = _view(buffer, 64, shape, x.dtype)  # starts inside x
    with pytest.raises(ValueError, match="y overlaps x in memory"):
        plan.run(xs, w, y=y)
    np.testing.assert_array_equal(xs, x)  # nothing was written


def test_y_right_after_x_is_accepted(small):
    plan, x, w = small
    shape = _y_shape(plan)
    buffer = np.zeros(x.size + int(np.prod(shape)), dtype=x.dtype)
    xs = buffer[: x.size].reshape(x.shape)
    xs[...] = x
    y = _view(buffer, x.nbytes, shape, x.dtype)  # x.nbytes is a multiple of 16 here
    assert plan.run(xs, w, y=y) is y
    np.testing.assert_array_equal(y, plan.run(x, w))


def test_y_inside_w_is_refused(small):
    plan, x, w = small
    big = np.zeros(w.size + int(np.prod(_y_shape(plan))), dtype=w.dtype)
    ws = big[: w.size].reshape(w.shape)
    ws[...] = w
    y = _view(big, 0, _y_shape(plan), w.dtype)
    with pytest.raises(ValueError, match="y overlaps w in memory"):
        plan.run(x, ws, y=y)


def test_y_inside_the_workspace_is_refused(small):
    plan, x, w = small
    ny = int(np.prod(_y_shape(plan))) * x.itemsize
    workspace = np.zeros(plan.workspace_bytes + ny, dtype=np.uint8)
    y = _view(workspace, plan.workspace_bytes - 256, _y_shape(plan), x.dtype)
    with pytest.raises(ValueError, match="y overlaps workspace in memory"):
        plan.run(x, w, y=y, workspace=workspace)
    tail = _view(workspace, plan.workspace_bytes, _y_shape(plan), x.dtype)
    assert plan.run(x, w, y=tail, workspace=workspace[: plan.workspace_bytes]) is tail


def test_y_inside_U_is_refused(small):
    plan, x, w = small
    U, fs = plan.transform_filter(w)
    assert U.nbytes >= int(np.prod(_y_shape(plan))) * x.itemsize
    y = _view(U, 0, _y_shape(plan), x.dtype)
    with pytest.raises(ValueError, match="y overlaps U in memory"):
        plan.run(x, None, y=y, U=(U, fs))


@pytest.mark.parametrize(
    "make, first, last",
    [
        (lambda a: a, 0, 4 * 24),
        (lambda a: a[::-1], 0, 4 * 24),
        (lambda a: a.reshape(4, 6)[:, ::2], 0, 4 * 23),
        (lambda a: a.reshape(4, 6)[::-2, 1:3], 4 * 7, 4 * 21),
        (lambda a: a[5:5], None, None),
    ],
    ids=["contiguous", "reversed", "strided", "negative-2d", "empty"],
)
def test_extent_of_strided_views(make, first, last):
    base = np.zeros(24, dtype=np.float32)
    start = base.__array_interface__["data"][0]
    got = aliasing.extent(make(base))
    assert got == (None if first is None else (start + first, start + last))


def test_non_arrays_have_no_extent():
    assert aliasing.extent(b"bytes") is None and aliasing.extent(None) is None
