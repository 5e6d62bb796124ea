"""The numeric suite on the GPU (H200, sm_90): every tile and dtype against float64, poisoned
workspaces, forced LDS / split / vec-1 binaries, batch split, torch interop.
Skipped with a reason where CuPy or a CUDA device or nvcc is missing."""

from __future__ import annotations

import shutil
import zlib

import numpy as np
import pytest

from wino.grid import aot_stage_specs
from wino.pick import default_stage_specs, m_storable
from wino.problem import Problem
from wino.runtime import conv2d_reference, dispatch, relative_error, verify
from wino.runtime.plan import default_tile
from wino.runtime.registry import cuda_available
from wino.specs import RtInputSpec
from wino.vocab import TILES, DType, K2Path, Prescale, Stage, Target, Tile

from .runtime_fixtures import issue_bound

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not cuda_available(), reason="needs CuPy and a CUDA device"),
    pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc to build the cubins"),
]

DTYPES = ("fp32", "fp16", "bf16")
BASE = Problem(N=3, C=64, H=29, W=23, K=48, pad_h=1, pad_w=1)
CASES = [
    Problem(N=2, C=24, H=17, W=19, K=16, pad_h=2, pad_w=0),
    Problem(N=2, C=12, H=21, W=14, K=20, pad_h=1, pad_w=1, dil_h=2, dil_w=3),
    Problem(N=1, C=32, H=11, W=9, K=32, pad_h=1, pad_w=1, groups=4),
    Problem(N=1, C=3, H=23, W=23, K=8, pad_h=1, pad_w=1),
    Problem(N=1, C=2048, H=4, W=5, K=16, pad_h=1, pad_w=1),
    Problem(N=1, C=4096, H=3, W=3, K=8, pad_h=1, pad_w=1),
]


def _with(problem: Problem, dtype: str) -> Problem:
    return Problem(**{**problem.__dict__, "dtype": DType(dtype)})


def _lds_specs():
    return [s for s in aot_stage_specs(Stage.INPUT) if s.path is K2Path.LDS]


def _needed_specs():
    specs = set()
    for dtype in DTYPES:
        for tile in TILES:
            specs.update(default_stage_specs(_with(BASE, dtype), tile, target=Target.CUDA).values())
            if dtype != "fp32":  # fp32 storage for 16-bit io (the c target's pick), forced
                specs.update(default_stage_specs(_with(BASE, dtype), tile).values())
        for case in CASES:
            p = _with(case, dtype)
            specs.update(default_stage_specs(p, default_tile(p), target=Target.CUDA).values())
    for k2 in _lds_specs() + _vec1_split():
        p = _with(BASE, k2.io.short)
        specs.update(_forced(p, k2).values())
    return specs


def _vec1_split():
    return [
        s
        for s in aot_stage_specs(Stage.INPUT)
        if s.vec == 1 and s.prescale is Prescale.SPLIT and s.path is K2Path.REGISTER
    ]


def _forced(problem: Problem, k2: RtInputSpec):
    specs = dict(default_stage_specs(problem, k2.tile, target=Target.CUDA))
    specs[Stage.INPUT] = k2
    if k2.prescale is Prescale.SPLIT and Stage.PRESCALE not in specs:
        from wino.specs import RtPrescaleSpec

        specs[Stage.PRESCALE] = RtPrescaleSpec(k2.tile, k2.io, 8 if problem.C % 8 == 0 else 1)
    if k2.xdtype is not specs[Stage.FILTER].xdtype:
        specs[Stage.FILTER] = specs[Stage.FILTER].replace(xdtype=k2.xdtype)
    if not m_storable(specs[Stage.OUTPUT].accdtype, k2.xdtype):  # fp16 M only from fp16 V
        specs[Stage.OUTPUT] = specs[Stage.OUTPUT].replace(accdtype=DType.FP32)
    return dict(sorted(specs.items(), key=lambda kv: list(Stage).index(kv[0])))


@pytest.fixture(scope="session")
def gpu_cache(tmp_path_factory):
    from tests import cuda_cache

    root = tmp_path_factory.mktemp("gpu-cache")
    cuda_cache.build(_needed_specs(), root)
    return root


def _seed(problem: Problem) -> int:
    """A seed from the problem's text: the same in every process (hash() is not)."""
    return zlib.crc32(repr(problem).encode())


def _run(problem: Problem, root, tile=None, specs=None, **options):
    import cupy as cp
    import ml_dtypes  # noqa: F401

    torch = pytest.importorskip("torch", reason="the GPU numeric suite feeds torch tensors")
    plan = dispatch(problem, target="cuda", tile=tile, cache_root=root, specs=specs, **options)
    rng = np.random.default_rng(_seed(problem))
    x64 = rng.standard_normal((problem.N, problem.H, problem.W, problem.C))
    w64 = rng.standard_normal((problem.K, 3, 3, problem.Cg))
    tdtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    x = torch.from_numpy(x64).to("cuda", tdtype[problem.dtype.short])
    w = torch.from_numpy(w64).to("cuda", tdtype[problem.dtype.short])
    y = torch.full(
        (problem.N, problem.Ho, problem.Wo, problem.K), float("nan"), dtype=x.dtype, device="cuda"
    )
    ws = cp.full(plan.workspace_bytes, 0xFF, dtype=cp.uint8)  # NaN in every view
    plan.run(x, w, y=y, workspace=ws)
    cp.cuda.get_current_stream().synchronize()
    ref = conv2d_reference(
        x.double().cpu().numpy(),
        w.double().cpu().numpy(),
        (problem.pad_h, problem.pad_w),
        (problem.dil_h, problem.dil_w),
        problem.groups,
    )
    views = plan.backend().workspace(plan, ws, plan.chunks[-1][1])
    return plan, relative_error(y.double().cpu().numpy(), ref), views


def _all_written(plan, views):
    import cupy as cp

    for name, view in views.items():
        data = view.view(cp.float16) if view.dtype == cp.uint16 else view
        if plan.xdtype is DType.BF16 and name in ("U", "V"):
            data = (view.astype(cp.uint32) & 0x7FFF) > 0x7F80  # bf16 NaN bit pattern
            assert not bool(data.any()), f"{name} has unwritten elements"
            continue
        assert bool(cp.isfinite(data).all()), f"{name} has unwritten elements"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tile", [t.name for t in TILES])
def test_every_tile_and_dtype(gpu_cache, tile, dtype):
    problem = _with(BASE, dtype)
    plan, err, views = _run(problem, gpu_cache, Tile.parse(tile))
    assert err <= issue_bound(plan.tile, problem.dtype, plan.xdtype), f"{tile} {dtype}: {err:.3e}"
    _all_written(plan, views)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("tile", [t.name for t in TILES])
def test_fp32_storage_for_16bit_io(gpu_cache, tile, dtype):
    """The c target's pick (V and U in fp32, no prescale; cuBLAS's fp32 GEMM) run on the GPU
    as an accuracy option: within wino's own bound (y's rounding plus the fp32 bound)."""
    problem = _with(BASE, dtype)
    specs = default_stage_specs(problem, Tile.parse(tile), target=Target.C)
    plan, err, views = _run(problem, gpu_cache, Tile.parse(tile), specs=specs)
    assert plan.xdtype is DType.FP32 and Stage.PRESCALE not in plan.specs
    bound = verify.bound_for(plan.tile, problem.dtype, DType.FP32)
    assert err <= bound, f"{tile} {dtype}: {err:.3e} > {bound:.1e}"
    _all_written(plan, views)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES, ids=lambda p: p.label().replace(" ", "_"))
def test_shapes(gpu_cache, case, dtype):
    problem = _with(case, dtype)
    plan, err, views = _run(problem, gpu_cache)
    bound = issue_bound(plan.tile, problem.dtype, plan.xdtype)
    assert err <= bound, f"{plan.tile} {dtype}: {err:.3e}"
    _all_written(plan, views)


@pytest.mark.parametrize("k2", _lds_specs() + _vec1_split(), ids=lambda s: s.name)
def test_forced_lds_and_split(gpu_cache, k2):
    problem = _with(BASE, k2.io.short)
    bound = issue_bound(k2.tile, k2.io, k2.xdtype)
    plan, err, views = _run(problem, gpu_cache, k2.tile, specs=_forced(problem, k2))
    assert err <= bound, f"{k2.name}: {err:.3e}"
    _all_written(plan, views)


def test_batch_split_verifies(gpu_cache):
    """N = 5 in chunks of 2, 2 and 1 (cuBLAS may round a 2-image chunk differently from a
    5-image run, so this checks the bound, not bit equality as the host suite does)."""
    problem = _with(BASE, "fp16").with_batch(5)
    plan, err_split, _ = _run(problem, gpu_cache, Tile(4, 4), batch_split=2)
    assert plan.chunks == [(0, 2), (2, 2), (4, 1)]
    assert err_split <= issue_bound(Tile(4, 4), DType.FP16, DType.FP16)


def test_y_inside_the_workspace_is_refused_on_cuda(gpu_cache):
    import cupy as cp

    problem = _with(BASE, "fp16")
    plan = dispatch(problem, target="cuda", cache_root=gpu_cache)
    x = cp.zeros((problem.N, problem.H, problem.W, problem.C), dtype=cp.float16)
    w = cp.zeros((problem.K, 3, 3, problem.C), dtype=cp.float16)
    ny = problem.N * problem.Ho * problem.Wo * problem.K
    workspace = cp.zeros(plan.workspace_bytes + 2 * ny, dtype=cp.uint8)
    y = (
        workspace[256 : 256 + 2 * ny]
        .view(cp.float16)
        .reshape(problem.N, problem.Ho, problem.Wo, -1)
    )
    with pytest.raises(ValueError, match="y overlaps workspace in memory"):
        plan.run(x, w, y=y, workspace=workspace)
    y = x.reshape(-1)[:ny].reshape(y.shape)
    with pytest.raises(ValueError, match="y overlaps x in memory"):
        plan.run(x, w, y=y)


@pytest.mark.parametrize("offset", [0, 2, 16])
def test_k3_matmul_at_any_operand_alignment(offset):
    """cuBLASLt's algorithm is chosen for an alignment once; operands at a smaller one (a
    caller's U at an odd offset) must take the algorithm prepared for theirs, not fail or
    read past: M = V . U^T per batch against float64, M's poisoned tail untouched."""
    import cupy

    from wino.runtime.cublas import Gemm
    from wino.runtime.cuda import gemm_shape
    from wino.runtime.plan import GemmStep

    step = GemmStep(batch=5, m=37, n=24, k=40, xdtype=DType.FP16, accdtype=DType.FP32)
    rng = np.random.default_rng(7)
    V = rng.standard_normal((step.batch, step.m, step.k)).astype(np.float16)
    U = rng.standard_normal((step.batch, step.n, step.k)).astype(np.float16)

    def placed(host, pad):
        raw = cupy.zeros(host.nbytes + 256, dtype=cupy.uint8)
        view = raw[pad : pad + host.nbytes].view(host.dtype).reshape(host.shape)
        view[...] = cupy.asarray(host)
        return raw, view

    _, v = placed(V, offset)
    _, u = placed(U, offset)
    m_raw = cupy.full(step.batch * step.m * step.n + 64, np.nan, dtype=cupy.float32)
    gemm = Gemm(cupy)
    shape = gemm_shape(step)
    gemm.matmul(shape).run(u.data.ptr, v.data.ptr, m_raw.data.ptr, 0)
    cupy.cuda.runtime.deviceSynchronize()
    got = cupy.asnumpy(m_raw)
    ref = np.einsum("bpc,bkc->bpk", V.astype(np.float64), U.astype(np.float64))
    M = got[: ref.size].reshape(ref.shape)
    assert np.max(np.abs(M - ref)) <= 1e-5 * np.max(np.abs(ref)) * step.k
    assert np.isnan(got[ref.size :]).all()
    aligns = {align for (s, align) in gemm._prepared if s == shape}
    assert min(aligns) == min(shape.alignment(), offset or 256)
