"""The held fused kernel on the GPU (H200, sm_90): every held grid spec against float64 on an
odd shape (C/G % 8 != 0: U's element loads), an aligned one (16-byte B loads, two channel
blocks) and a grouped one, with y NaN-poisoned (an unwritten output makes the error NaN); the
shipped crossover rule (grids/algorithms.yaml, fused_held) routes a C = K = 64, 112x112
problem to it. Skipped where CuPy, a CUDA device or nvcc is missing."""

from __future__ import annotations

import dataclasses
import math
import shutil

import numpy as np
import pytest

from wino.geometry import TileGrid
from wino.grid import aot_stage_specs
from wino.pick import default_fused_specs
from wino.problem import Problem
from wino.runtime import dispatch
from wino.runtime.arrays import numpy_dtype as _numpy_dtype
from wino.runtime.registry import cuda_available
from wino.runtime.verify import bound_for
from wino.vocab import DType, Epilogue, Prescale, Stage, Target, Tile

from .test_fused import _pipeline, _rng, _scaled_twin, _wide_range_input
from .test_runtime_cuda import _run

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not cuda_available(), reason="needs CuPy and a CUDA device"),
    pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc to build the cubins"),
]

HELD = tuple(
    s for s in aot_stage_specs(Stage.FUSED, Target.CUDA) if s.hold and s.epilogue is Epilogue.NONE
)
SHAPES = {
    "odd": dict(N=2, C=37, H=13, W=11, K=21),
    "aligned": dict(N=2, C=64, H=30, W=29, K=136),
    "g2": dict(N=1, C=64, H=9, W=10, K=40, groups=2),
}
#: Where the crossover rule picks the fused plan (H200: 1.16x the unfused plan at N16), at
#: dispatch's default tile.
BIG_TILE = Tile(4, 4)
BIG = Problem(N=2, C=64, H=112, W=112, K=64, pad_h=1, pad_w=1, dtype=DType.FP16)
#: Past the held kernel's L2 gate (x and y about 56 MB, over the 50 MB L2): its blocks prefetch
#: the next block's window rows; odd C and K, dilation 2 (rows clipped at both image edges).
PREFETCHED = Problem(
    N=3, C=37, H=400, W=400, K=21, pad_h=2, pad_w=2, dil_h=2, dil_w=2, dtype=DType.FP16
)
#: The own-tile-scale check's problem: 256 F4x4 tiles, about 90 of them with one outlier.
WIDE = dict(N=4, C=37, H=30, W=30, K=21)
OWN = tuple(s for s in HELD if s.prescale is Prescale.FUSED)


def _problem(spec, shape: str) -> Problem:
    return Problem(**SHAPES[shape], pad_h=1, pad_w=1, dtype=spec.io)


@pytest.fixture(scope="module")
def fused_cache(tmp_path_factory):
    from tests import cuda_cache

    specs = set()
    for spec in HELD:
        for shape in SHAPES:
            specs.update(_pipeline(spec, _problem(spec, shape)).values())
    for spec in OWN:
        wide = Problem(**WIDE, pad_h=1, pad_w=1, dtype=spec.io)
        for s in (spec, _scaled_twin(spec)):
            specs.update(_pipeline(s, wide).values())
    for dtype in (DType.FP16, DType.BF16):
        for problem in (BIG, PREFETCHED):
            p = dataclasses.replace(problem, dtype=dtype)
            specs.update(default_fused_specs(p, BIG_TILE).values())
    root = tmp_path_factory.mktemp("fused-gpu-cache")
    cuda_cache.build(sorted(specs, key=lambda s: s.name), root)
    return root


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("spec", HELD, ids=lambda s: s.name)
def test_held_kernel_matches_reference(fused_cache, spec, shape):
    problem = _problem(spec, shape)
    plan, error, _ = _run(problem, fused_cache, specs=_pipeline(spec, problem))
    assert plan.kind == "fused2d_rt" and plan.steps[-1].name == spec.name
    bound = bound_for(spec.tile, spec.io, spec.mdtype)
    assert not math.isnan(error), "an output was left unwritten (NaN poison)"
    assert 0 < error <= bound, f"{spec.name} {shape}: error {error:.3g} over {bound:.3g}"


@pytest.mark.parametrize("dtype", [DType.FP16, DType.BF16], ids=lambda d: d.short)
def test_the_crossover_rule_runs_the_held_kernel(fused_cache, dtype):
    problem = dataclasses.replace(BIG, dtype=dtype)
    plan, error, _ = _run(problem, fused_cache)
    assert plan.kind == "fused2d_rt" and "_h64" in plan.steps[-1].name  # the default held pick
    assert "rule fused_held" in plan.explain()
    assert 0 < error <= bound_for(plan.specs[Stage.FUSED].tile, dtype, DType.FP16)


@pytest.mark.parametrize("spec", OWN, ids=lambda s: s.name)
def test_own_tile_scales_give_the_split_prescales_bits(fused_cache, spec):
    """As on the host (tests/test_fused.py): the kernel's own tile maxima (max.f16x2 /
    max.bf16x2 here) give K2a's scales, so y bit for bit, on 2^12-outlier data with an Inf and
    a NaN."""
    import cupy as cp

    problem = Problem(**WIDE, pad_h=1, pad_w=1, dtype=spec.io)
    x = cp.asarray(_wide_range_input(problem, spec.name))
    w = _rng("w" + spec.name).standard_normal((problem.K, 3, 3, problem.Cg))
    w = cp.asarray(w.astype(x.dtype))
    ys = []
    for s in (spec, _scaled_twin(spec)):
        plan = dispatch(problem, target="cuda", cache_root=fused_cache, specs=_pipeline(s, problem))
        ys.append(cp.asnumpy(plan.run(x, w)).view("uint16"))
    assert (ys[0] == ys[1]).all()


@pytest.mark.parametrize("dtype", [DType.FP16, DType.BF16], ids=lambda d: d.short)
def test_the_prefetching_blocks_change_no_bit(fused_cache, dtype):
    """Each image of a batch past the L2 gate (its blocks prefetch the next block's x rows) is
    bit for bit the image run alone (under the gate: no prefetch), every output written: the
    prefetch reads nothing into the result and faults nowhere, edges and dilation included."""
    import cupy as cp

    problem = dataclasses.replace(PREFETCHED, dtype=dtype)
    assert _streams_past_l2_gate(problem)
    specs = default_fused_specs(problem, BIG_TILE)
    assert specs[Stage.FUSED].hold  # the held kernel, the one that prefetches
    rng = _rng("prefetch" + dtype.short)
    x = cp.asarray(rng.standard_normal((problem.N, problem.H, problem.W, problem.C)))
    w = cp.asarray(rng.standard_normal((problem.K, 3, 3, problem.Cg)))
    x, w = (a.astype(_numpy_dtype(dtype)) for a in (x, w))
    batch = dispatch(problem, target="cuda", cache_root=fused_cache, specs=specs)
    y = cp.full((problem.N, problem.Ho, problem.Wo, problem.K), cp.nan, dtype=x.dtype)
    batch.run(x, w, y=y)
    y = cp.asnumpy(y)
    assert not np.isnan(y.astype(np.float32)).any(), "an output was left unwritten"
    one = dataclasses.replace(problem, N=1)
    assert not _streams_past_l2_gate(one)
    alone = dispatch(one, target="cuda", cache_root=fused_cache, specs=specs)
    for n in range(problem.N):
        y1 = cp.asnumpy(alone.run(x[n : n + 1], w))
        assert np.array_equal(y[n : n + 1].view(np.uint16), y1.view(np.uint16)), n


def _streams_past_l2_gate(problem: Problem) -> bool:
    """The held kernel's gate (templates/fused2d.j2, prefetch_next_windows): tiles x outputs a
    tile x (C + K) 16-bit values over 7/8 of the L2's 50 MiB (CudaRenderer.prefetch_helpers)."""
    tiles = TileGrid.of(problem, BIG_TILE).P
    return tiles * 16 * (problem.C + problem.K) * 2 > (50 << 20) // 8 * 7
