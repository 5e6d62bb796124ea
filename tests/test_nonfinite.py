"""Non-finite semantics (docs/TESTING.md): a NaN or Inf in x reaches every output of every tile
whose input window holds it (all K channels; as NaN or Inf) and no other output; a NaN or Inf
in filter k reaches every output of channel k and no other channel."""

from __future__ import annotations

import numpy as np
import pytest

from tests import host_cache
from wino.pick import default_stage_specs
from wino.problem import Problem
from wino.runtime import dispatch
from wino.vocab import Tile

PROBLEMS = [
    Problem(N=2, C=8, H=11, W=10, K=8, pad_h=1, pad_w=1, dtype=dtype)
    for dtype in ("fp32", "fp16", "bf16")
]
TILE = Tile(4, 4)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("nonfinite")
    specs = {s for p in PROBLEMS for s in default_stage_specs(p, TILE).values()}
    host_cache.build(specs, root)
    return root


def _tiles_holding(p: Problem, i: int, j: int) -> np.ndarray:
    """Output mask [Ho][Wo]: the tiles whose (mh+2) x (mw+2) input window holds x[i][j]."""
    mask = np.zeros((p.Ho, p.Wo), dtype=bool)
    for ti in range(-(-p.Ho // TILE.mh)):
        for tj in range(-(-p.Wo // TILE.mw)):
            r0, c0 = ti * TILE.mh - p.pad_h, tj * TILE.mw - p.pad_w
            if r0 <= i < r0 + TILE.ah and c0 <= j < c0 + TILE.aw:
                mask[ti * TILE.mh : (ti + 1) * TILE.mh, tj * TILE.mw : (tj + 1) * TILE.mw] = True
    return mask


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.dtype.short)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf], ids=["nan", "inf", "-inf"])
def test_a_non_finite_input_reaches_its_tiles_only(root, problem, bad):
    plan = dispatch(problem, target="c", tile=TILE, cache_root=root)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 11, 10, 8)).astype(plan_dtype(problem))
    w = rng.standard_normal((8, 3, 3, 8)).astype(plan_dtype(problem))
    x[1, 5, 6, 3] = bad
    y = plan.run(x, w).astype(np.float32)
    reached = ~np.isfinite(y)
    expected = np.zeros_like(reached)
    expected[1] = _tiles_holding(problem, 5, 6)[:, :, None]
    np.testing.assert_array_equal(reached, expected)


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.dtype.short)
def test_a_non_finite_filter_reaches_its_channel_only(root, problem):
    plan = dispatch(problem, target="c", tile=TILE, cache_root=root)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 11, 10, 8)).astype(np.float32)
    w = rng.standard_normal((8, 3, 3, 8)).astype(np.float32)
    w[5, 1, 2, 4] = np.nan
    y = plan.run(x.astype(plan_dtype(problem)), w.astype(plan_dtype(problem))).astype(np.float32)
    assert np.isnan(y[..., 5]).all() and np.isfinite(np.delete(y, 5, axis=-1)).all()


def plan_dtype(problem: Problem):
    import ml_dtypes

    return {"fp32": np.float32, "fp16": np.float16, "bf16": ml_dtypes.bfloat16}[problem.dtype.short]
