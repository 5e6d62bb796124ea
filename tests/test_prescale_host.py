"""The tile scale on the host (c target): K2's fused prescale folds its block max in one serial
phase (the renderer's reduction schedule, not a tree of log2(block) loops over the block) and
scales each window vector as it is loaded. The results are those of every other route: the
fused K2's V and tile scales equal the split K2's (K2a, then K2 reading its scales) bit for
bit, V is the unscaled K2's V times the tile's power of two exactly (N(0,1) data: no
overflow, no subnormals), and y is bit-identical across the three, for fp32, fp16 and bf16
io, odd extents, dilation, groups and workgroups of several tiles."""

from __future__ import annotations

import numpy as np
import pytest

from tests import host_cache
from tests import runtime_fixtures as rf
from wino.codegen.render import render
from wino.codegen.renderers import RENDERERS
from wino.pick import default_stage_specs
from wino.problem import Problem
from wino.runtime import conv2d_reference, dispatch, relative_error
from wino.specs import RtFilterSpec, RtInputSpec, RtPrescaleSpec
from wino.vocab import DType, Prescale, Stage, Target, Tile

PROBLEMS = {
    "odd": dict(N=2, C=24, H=9, W=11, K=8, pad_h=1, pad_w=1),
    "dilated": dict(N=1, C=8, H=13, W=12, K=4, pad_h=2, pad_w=1, dil_h=2, dil_w=3),
    "groups": dict(N=1, C=16, H=7, W=10, K=8, pad_h=1, pad_w=0, groups=2),
}
TILES = (Tile(2, 2), Tile(4, 4), Tile(6, 6))
CASES = [
    (label, tile, dtype)
    for label in PROBLEMS
    for tile in TILES
    for dtype in ("fp32", "fp16", "bf16")
]
MODES = (Prescale.FUSED, Prescale.SPLIT, Prescale.NONE)


def _specs(label: str, tile: Tile, dtype: str, prescale: Prescale) -> dict:
    """The c default pick with K2 at vec 2 and block 64 (several tiles per fused workgroup,
    several lanes per tile) in the given prescale mode (K2a first for split)."""
    problem = Problem(**PROBLEMS[label], dtype=dtype)
    specs = default_stage_specs(problem, tile)
    k2 = specs[Stage.INPUT].replace(vec=2, block=64, prescale=prescale)
    return rf.with_input(specs, k2, problem)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("prescale-host")
    specs = set()
    for case in CASES:
        for mode in MODES:
            specs |= set(_specs(*case, mode).values())
    host_cache.build(sorted(specs, key=lambda s: s.name), root)
    return root


def _run(problem, tile, specs, root, x, w):
    plan = dispatch(problem, target="c", tile=tile, cache_root=root, specs=specs)
    y, workspace = rf.poisoned(plan)
    plan.run(x, w, y=y, workspace=workspace)
    assert not any(rf.unwritten(plan, workspace).values())
    views = plan.backend().workspace(plan, workspace, plan.batch_split)
    return plan, y, views


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_fused_split_and_unscaled_k2_agree_bit_for_bit(root, case):
    label, tile, dtype = case
    problem = Problem(**PROBLEMS[label], dtype=dtype)
    x, w = rf.inputs(problem, np.random.default_rng(len(label) * 7 + tile.bins))
    fused, y_fused, v_fused = _run(problem, tile, _specs(*case, Prescale.FUSED), root, x, w)
    _, y_split, v_split = _run(problem, tile, _specs(*case, Prescale.SPLIT), root, x, w)
    _, y_none, v_none = _run(problem, tile, _specs(*case, Prescale.NONE), root, x, w)
    assert np.array_equal(v_fused["ts"], v_split["ts"])
    assert np.array_equal(v_fused["V"].view(np.uint8), v_split["V"].view(np.uint8))
    ts = v_fused["ts"]
    # the scale of each tile: the power of two that brings its max|x| into [0.5, 1)
    assert np.all(np.frexp(ts)[0] == 0.5)
    scaled = v_none["V"].astype(np.float32) * ts[None, None, :, None]
    assert np.array_equal(v_fused["V"].astype(np.float32), scaled)
    for y in (y_split, y_none):
        assert np.array_equal(y_fused.view(np.uint8), y.view(np.uint8))
    ref = conv2d_reference(
        x, w, (problem.pad_h, problem.pad_w), (problem.dil_h, problem.dil_w), problem.groups
    )
    assert relative_error(y_fused, ref) <= rf.claimed_bound(tile, problem.dtype, fused.xdtype)


REDUCING = (
    RtFilterSpec(tile=Tile(4, 4), io=DType.FP32, xdtype=DType.FP32, vec=1, block=256, rows=1),
    RtPrescaleSpec(tile=Tile(4, 4), io=DType.FP32, vec=8, block=256),
    RtInputSpec(tile=Tile(4, 4), io=DType.FP32, xdtype=DType.FP32, vec=4, block=256),
)


@pytest.mark.parametrize("spec", REDUCING, ids=lambda s: s.name)
def test_the_host_folds_a_block_max_in_one_phase_the_gpus_in_a_tree(spec):
    """Under the host's workgroup-loop emulation a phase is a loop over the block's threads:
    the C render has three (the per-thread max, one serial fold, the transform), where the
    GPUs' renders fold in log2(block) barrier phases."""
    assert RENDERERS[Target.C]().reduce_strides(256) == [0]
    assert RENDERERS[Target.CUDA]().reduce_strides(256) == [128, 64, 32, 16, 8, 4, 2, 1]
    assert render(spec, Target.C).count("for (unsigned tid = 0; tid < 256; ++tid)") == 3
    assert render(spec, Target.CUDA).count("__syncthreads();") == 8 + 1
