"""Every value the rules accept builds and runs correctly: the extreme accepted knob values
(block 1024 on every stage, K1's most rows at the smallest and the largest block) built for the
host and run on adversarial data, the channel maximum on every lane in turn, asserting the
per-filter and per-tile power-of-two scales exactly (a reduction that skips a lane picks a
scale from a smaller value) and the output against the float64 reference."""

from __future__ import annotations

import numpy as np
import pytest

from tests import host_cache
from wino.problem import Problem
from wino.refusals import check_spec, rule_book
from wino.runtime import conv2d_reference, dispatch, relative_error
from wino.runtime.verify import bound_for
from wino.specs import RtFilterSpec, RtInputSpec, RtOutputSpec, RtPrescaleSpec
from wino.vocab import DType, Stage, Tile

TILE = Tile(2, 2)
LANES = 1024  # C / vec at vec 1: one channel lane per thread of a 1024-thread workgroup
COMMON = dict(tile=TILE, io=DType.FP16)
MAX_BLOCK = rule_book()[0]["max_block"]
K1_MOST_ROWS = {  # the largest rows the shared-memory rule accepts at each block
    b: rule_book()[0]["lds_bytes_limit"] // (4 * b) for b in (32, MAX_BLOCK)
}
K1 = [RtFilterSpec(**COMMON, xdtype=DType.FP16, block=b, rows=r) for b, r in K1_MOST_ROWS.items()]
K2_FUSED = RtInputSpec(**COMMON, xdtype=DType.FP16, block=MAX_BLOCK, prescale="fused")
K2A = RtPrescaleSpec(**COMMON, block=MAX_BLOCK)
K2_SPLIT = RtInputSpec(**COMMON, xdtype=DType.FP16, block=MAX_BLOCK, prescale="split")
K4 = RtOutputSpec(**COMMON, block=MAX_BLOCK)
SPECS = [*K1, K2_FUSED, K2A, K2_SPLIT, K4]


def test_the_extremes_are_accepted_and_one_past_them_is_not():
    for spec in SPECS:
        check_spec(spec)
    for block, rows in K1_MOST_ROWS.items():
        with pytest.raises(Exception, match="filter_shared_over_limit"):
            check_spec(RtFilterSpec(**COMMON, xdtype=DType.FP16, block=block, rows=rows + 1))


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("extremes")
    host_cache.build(SPECS, root)
    return root


def _pow2_scale(maxabs: np.ndarray) -> np.ndarray:
    """The power of two s with maxabs * s in [0.5, 1) (wino_pow2_scale for normal values)."""
    return np.ldexp(1.0, -np.frexp(maxabs.astype(np.float64))[1]).astype(np.float32)


def _specs(k1, k2):
    specs = {Stage.FILTER: k1, Stage.INPUT: k2, Stage.OUTPUT: K4}
    if k2.prescale.value == "split":
        specs[Stage.PRESCALE] = K2A
    return specs


@pytest.mark.parametrize("k1", K1, ids=lambda s: s.name)
def test_filter_scale_sees_every_lane(root, k1):
    """Filter k has its maximum on channel lane k: fs[k] must come from it."""
    rng = np.random.default_rng(11)
    problem = Problem(N=1, C=LANES, H=4, W=4, K=LANES, dtype="fp16")
    w = (rng.standard_normal((LANES, 3, 3, LANES)) * 0.01).astype(np.float16)
    ks = np.arange(LANES)
    big = (1000.0 + ks).astype(np.float16)  # a distinct maximum per filter
    w[ks, rng.integers(0, 3, LANES), rng.integers(0, 3, LANES), ks] = big
    plan = dispatch(problem, target="c", cache_root=root, specs=_specs(k1, K2_FUSED))
    _, fs = plan.transform_filter(w)
    np.testing.assert_array_equal(fs, _pow2_scale(np.abs(w.astype(np.float32)).max((1, 2, 3))))
    x = rng.standard_normal((1, 4, 4, LANES)).astype(np.float16)
    y = plan.run(x, w)
    assert relative_error(y, conv2d_reference(x, w)) < bound_for(TILE, DType.FP16)


@pytest.mark.parametrize("k2", [K2_FUSED, K2_SPLIT], ids=lambda s: s.prescale.value)
def test_tile_scale_sees_every_lane(root, k2):
    """Image n (one tile) has its maximum on channel lane n: ts[n] must come from it."""
    rng = np.random.default_rng(12)
    problem = Problem(N=LANES, C=LANES, H=4, W=4, K=8, dtype="fp16")
    x = (rng.standard_normal((LANES, 4, 4, LANES)) * 0.01).astype(np.float16)
    ns = np.arange(LANES)
    x[ns, rng.integers(0, 4, LANES), rng.integers(0, 4, LANES), ns] = 1000.0 + ns
    w = rng.standard_normal((8, 3, 3, LANES)).astype(np.float16)
    plan = dispatch(problem, target="c", cache_root=root, specs=_specs(K1[0], k2))
    assert len(plan.chunks) == 1
    workspace = np.zeros(plan.workspace_bytes, dtype=np.uint8)
    y = plan.run(x, w, workspace=workspace)
    ts = plan.backend().workspace(plan, workspace, plan.batch_split)["ts"]
    np.testing.assert_array_equal(ts, _pow2_scale(np.abs(x.astype(np.float32)).max((1, 2, 3))))
    assert relative_error(y, conv2d_reference(x, w)) < bound_for(TILE, DType.FP16)
