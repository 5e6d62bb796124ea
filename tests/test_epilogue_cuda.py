"""The epilogue (bias, ReLU) on the GPU (H200, sm_90): every grid epilogue kernel, K4 and the
fused KF, on torch CUDA tensors against the float64 reference within the per-tile, per-dtype
bounds, y poisoned; ReLU exact against the same kernel without it; wino.conv2d(bias=,
activation=) and wino.torch.Conv2d(bias=True) through the epilogue. Skipped with a reason
where CuPy, a CUDA device or nvcc is missing."""

from __future__ import annotations

import shutil
import zlib

import numpy as np
import pytest

import wino
from wino import grid
from wino.pick import default_stage_specs, fused_pipeline
from wino.problem import Problem
from wino.runtime import conv2d_reference, dispatch, relative_error
from wino.runtime.reference import epilogue_reference
from wino.runtime.registry import cuda_available
from wino.runtime.verify import bound_for
from wino.specs import RtFusedSpec
from wino.vocab import Activation, DType, Epilogue, Stage, Target

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not cuda_available(), reason="needs CuPy and a CUDA device"),
    pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc to build the cubins"),
]

GRID_EPILOGUE = tuple(
    s
    for stage in (Stage.OUTPUT, Stage.FUSED)
    for s in grid.aot_stage_specs(stage)
    if s.epilogue is not Epilogue.NONE
)


def _problem(spec) -> Problem:
    """3 groups (the bias index crosses them), odd extents; K/G 8 (vec 8) or 7 (vec 1)."""
    k = 21 if getattr(spec, "vec", 8) == 1 else 48
    return Problem(N=2, C=48, H=29, W=23, K=k, pad_h=1, pad_w=1, groups=3, dtype=spec.io)


def _pipeline(spec, problem: Problem) -> dict:
    if isinstance(spec, RtFusedSpec):
        return fused_pipeline(problem, spec)
    return {**default_stage_specs(problem, spec.tile, target=Target.CUDA), Stage.OUTPUT: spec}


@pytest.fixture(scope="session")
def gpu_cache(tmp_path_factory):
    from tests import cuda_cache

    specs = set()
    for spec in GRID_EPILOGUE:
        problem = _problem(spec)
        for epilogue in (spec.epilogue, Epilogue.NONE, Epilogue.BIAS):
            specs.update(_pipeline(spec.replace(epilogue=epilogue), problem).values())
    root = tmp_path_factory.mktemp("gpu-epilogue-cache")
    cuda_cache.build(specs, root)
    return root


def _operands(problem: Problem, seed: str):
    torch = pytest.importorskip("torch", reason="the GPU epilogue tests feed torch tensors")
    rng = np.random.default_rng(zlib.crc32(seed.encode()))
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[
        problem.dtype.short
    ]
    x = torch.from_numpy(rng.standard_normal((problem.N, problem.H, problem.W, problem.C)))
    w = torch.from_numpy(rng.standard_normal((problem.K, 3, 3, problem.Cg)))
    x, w = x.to("cuda", dtype), w.to("cuda", dtype)
    ref = conv2d_reference(
        x.double().cpu().numpy(), w.double().cpu().numpy(), (1, 1), groups=problem.groups
    )
    k = np.arange(problem.K)
    bias64 = np.where(k % 2, -1.0, 1.0) * np.abs(ref).max() * rng.uniform(0.5, 4.0, problem.K)
    bias = torch.from_numpy(bias64).to("cuda", dtype)
    return x, w, bias, ref


def _run(plan, x, w, bias):
    import torch

    p = plan.problem
    y = torch.full((p.N, p.Ho, p.Wo, p.K), float("nan"), dtype=x.dtype, device="cuda")
    plan.run(x, w, y=y, bias=bias)
    torch.cuda.synchronize()
    out = y.double().cpu().numpy()
    assert not np.isnan(out).any(), "unwritten outputs"
    return out


@pytest.mark.parametrize("spec", GRID_EPILOGUE, ids=lambda s: s.name)
def test_grid_epilogue_kernels_on_cuda(gpu_cache, spec):
    problem = _problem(spec)
    x, w, bias, ref = _operands(problem, spec.name)
    plan = dispatch(problem, target="cuda", cache_root=gpu_cache, specs=_pipeline(spec, problem))
    assert plan.epilogue is spec.epilogue
    use_bias = bias if spec.epilogue.bias else None
    y = _run(plan, x, w, use_bias)
    relu = spec.epilogue.activation is Activation.RELU
    b64 = None if use_bias is None else use_bias.double().cpu().numpy()
    bound = bound_for(spec.tile, spec.io, spec.xdtype if spec.stage is Stage.FUSED else None)
    error = relative_error(y, epilogue_reference(ref, b64, relu))
    assert 0 < error <= bound, f"{spec.name}: {error:.3g} over {bound:.3g}"
    if relu:  # clamps exactly: max(.., 0) of the same kernel's arithmetic without relu
        before = spec.replace(epilogue=Epilogue.BIAS if spec.epilogue.bias else Epilogue.NONE)
        plain = dispatch(
            problem, target="cuda", cache_root=gpu_cache, specs=_pipeline(before, problem)
        )
        y_before = _run(plain, x, w, use_bias)
        assert (y_before < 0).any() and np.array_equal(y, np.maximum(y_before, 0))


def test_conv2d_and_torch_module_on_cuda(tmp_path, monkeypatch):
    """wino.conv2d(bias=, activation="relu") and wino.torch.Conv2d(bias=True) (the bias in the
    epilogue) on CUDA tensors, default picks of the F4x4 fp16 grid. Its own cache: a build
    publishes a manifest of exactly its specs, so building into the session's cache would
    drop the kernels the later tests dispatch."""
    torch = pytest.importorskip("torch", reason="needs PyTorch")
    import wino.torch as wt
    from tests import cuda_cache

    problem = Problem(N=2, C=48, H=29, W=23, K=48, pad_h=1, pad_w=1, dtype=DType.FP16)
    specs = set()
    for epilogue in (Epilogue.BIAS, Epilogue.BIAS_RELU):
        specs.update(
            default_stage_specs(problem, "F4x4", epilogue=epilogue, target=Target.CUDA).values()
        )
    cuda_cache.build(specs, tmp_path)
    monkeypatch.setenv("WINO_BUILD", str(tmp_path))
    x, w, bias, ref = _operands(problem, "conv2d")
    y = wino.conv2d(x, w, padding=1, bias=bias, activation="relu", tile="F4x4")
    expect = epilogue_reference(ref, bias.double().cpu().numpy(), True)
    assert relative_error(y.double().cpu().numpy(), expect) <= bound_for("F4x4", DType.FP16)
    conv = torch.nn.Conv2d(48, 48, 3, padding=1, bias=True).to("cuda", torch.float16).eval()
    with torch.no_grad():
        conv.weight.copy_(w.permute(0, 3, 1, 2))
        conv.bias.copy_(bias)
    xc = x.permute(0, 3, 1, 2)  # NCHW view of NHWC memory: channels_last
    with torch.inference_mode():
        yc = wt.Conv2d.from_conv(conv)(xc)
    expect = epilogue_reference(ref, bias.double().cpu().numpy())
    got = yc.permute(0, 2, 3, 1).double().cpu().numpy()
    assert relative_error(got, expect) <= bound_for("F4x4", DType.FP16)


def test_torch_graph_replay_reads_the_bias(gpu_cache):
    """plan.graph(..., bias=) on torch tensors: a replay after an in-place bias update equals
    an eager run with the new bias."""
    import torch

    spec = next(s for s in GRID_EPILOGUE if s.stage is Stage.OUTPUT and s.epilogue.bias)
    problem = _problem(spec)
    x, w, bias, _ = _operands(problem, "graph")
    plan = dispatch(problem, target="cuda", cache_root=gpu_cache, specs=_pipeline(spec, problem))
    y = torch.empty((problem.N, problem.Ho, problem.Wo, problem.K), dtype=x.dtype, device="cuda")
    ws = torch.empty(plan.workspace_bytes, dtype=torch.uint8, device="cuda")
    graph = plan.graph(x, w, y=y, workspace=ws, bias=bias)
    bias.add_(1.0)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, plan.run(x, w, bias=bias))
