"""The runtime inside a model on the GPU (H200): launches on the caller's stream (torch's
current stream, an explicit torch/CuPy stream), CUDA graph capture and replay (torch and
CuPy), wino.torch in fp16 with torch.compile and CUDA graphs, and bad inputs refused before
any kernel. Skipped with a reason where CuPy, PyTorch with CUDA, a device or nvcc is missing."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from wino.pick import default_stage_specs
from wino.problem import Problem
from wino.runtime import conv2d_reference, dispatch, relative_error
from wino.runtime.plan import default_tile
from wino.runtime.registry import cuda_available
from wino.vocab import DType, Target

from .runtime_fixtures import issue_bound

torch = pytest.importorskip("torch", reason="the stream and graph tests use PyTorch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not cuda_available(), reason="needs CuPy and a CUDA device"),
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs PyTorch with CUDA"),
    pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc to build the cubins"),
]

#: One problem per path: fp16 F4x4 with a batch split, bf16, fp32 F2x2 with groups.
PROBLEMS = [
    Problem(N=8, C=64, H=28, W=28, K=64, pad_h=1, pad_w=1, dtype="fp16"),
    Problem(N=2, C=32, H=17, W=19, K=48, pad_h=1, pad_w=1, dtype="bf16"),
    Problem(N=2, C=32, H=9, W=9, K=32, pad_h=1, pad_w=1, groups=4, dtype="fp32"),
]
#: The layers of the wino.torch tests (fp16): (C, K, H, W, padding, dilation, groups, bias).
LAYERS = [
    (64, 64, 28, 28, 1, 1, 1, True),
    (32, 64, 20, 20, 2, 2, 2, False),
]
TORCH = {DType.FP16: "float16", DType.BF16: "bfloat16", DType.FP32: "float32"}


def _layer_problem(layer, n=4) -> Problem:
    c, k, h, w, p, d, g, _ = layer
    return Problem(N=n, C=c, H=h, W=w, K=k, pad_h=p, pad_w=p, dil_h=d, dil_w=d, groups=g,
                   dtype="fp16")  # fmt: skip


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    from tests import cuda_cache

    specs = set()
    for p in PROBLEMS + [_layer_problem(layer) for layer in LAYERS]:
        specs.update(default_stage_specs(p, default_tile(p), target=Target.CUDA).values())
    folder = tmp_path_factory.mktemp("stream-cache")
    cuda_cache.build(specs, folder)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WINO_BUILD", str(folder))  # wino.torch dispatches from the default cache
        yield folder


def _operands(p: Problem, seed: int = 0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    dt = getattr(torch, TORCH[p.dtype])
    x = torch.randn(p.N, p.H, p.W, p.C, device="cuda", generator=g).to(dt)
    w = torch.randn(p.K, 3, 3, p.Cg, device="cuda", generator=g).to(dt)
    return x, w


def _bound(plan) -> float:
    return issue_bound(plan.tile, plan.problem.dtype, plan.xdtype)


def _error(plan, x, w, y) -> float:
    p = plan.problem
    ref = conv2d_reference(
        x.double().cpu().numpy(),
        w.double().cpu().numpy(),
        (p.pad_h, p.pad_w),
        (p.dil_h, p.dil_w),
        p.groups,
    )
    return relative_error(y.double().cpu().numpy(), ref)


# Streams ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("p", PROBLEMS, ids=lambda p: p.dtype.short)
def test_runs_on_torchs_current_stream(root, p):
    """x is filled on a busy non-default stream right before the run: a launch on any other
    stream would read it early. 20 rounds, each compared with a synchronized rerun."""
    plan = dispatch(p, target="cuda", cache_root=root, batch_split=max(1, p.N // 3))
    src, w = _operands(p)
    U = plan.transform_filter(w)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    x = torch.empty_like(src)
    y = torch.empty(p.N, p.Ho, p.Wo, p.K, dtype=src.dtype, device="cuda")
    ws = torch.empty(plan.workspace_bytes, dtype=torch.uint8, device="cuda")
    wrong = 0
    for round_ in range(20):
        with torch.cuda.stream(side):
            x.zero_()
            torch.cuda._sleep(2_000_000)  # about a millisecond of a busy stream
            x.copy_(src * (round_ + 1))
            plan.run(x, U=U, y=y, workspace=ws)
        side.synchronize()
        expect = plan.run(x, U=U)
        torch.cuda.synchronize()
        wrong += not torch.equal(y, expect)
    assert wrong == 0, f"{wrong} of 20 runs read x before it was written"
    assert _error(plan, x, w, y) <= _bound(plan)


def test_explicit_streams_torch_cupy_and_raw(root):
    import cupy

    p = PROBLEMS[0]
    plan = dispatch(p, target="cuda", cache_root=root)
    src, w = _operands(p, 1)
    U = plan.transform_filter(w)
    expect = plan.run(src, U=U)
    torch.cuda.synchronize()
    for make in (
        lambda: torch.cuda.Stream(),
        lambda: cupy.cuda.Stream(non_blocking=True),
        lambda: torch.cuda.Stream().cuda_stream,  # a raw cudaStream_t
    ):
        stream = make()
        handle = stream if isinstance(stream, int) else getattr(stream, "cuda_stream", None)
        handle = handle if handle is not None else stream.ptr
        ext = torch.cuda.ExternalStream(handle)
        x = torch.zeros_like(src)
        y = torch.full_like(expect, float("nan"))
        with torch.cuda.stream(ext):
            torch.cuda._sleep(2_000_000)
            x.copy_(src)
        plan.run(x, U=U, y=y, stream=stream)  # the current stream is the default one
        ext.synchronize()
        assert torch.equal(y, expect), type(stream).__name__


def test_cupy_arrays_run_on_cupys_current_stream(root):
    import cupy

    p = PROBLEMS[2]
    plan = dispatch(p, target="cuda", cache_root=root)
    tx, tw = _operands(p, 2)
    x, w = cupy.asarray(tx), cupy.asarray(tw)
    expect = cupy.asarray(plan.run(tx, tw))
    torch.cuda.synchronize()
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        xs = cupy.zeros_like(x)
        for _ in range(50):  # a busy stream before x is written
            xs = xs * 1.0
        xs[...] = x
        y = plan.run(xs, w)
    stream.synchronize()
    assert bool((y == expect).all())


# Graphs ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("p", PROBLEMS, ids=lambda p: p.dtype.short)
def test_torch_graph_replay_equals_eager(root, p):
    plan = dispatch(p, target="cuda", cache_root=root, batch_split=max(1, p.N // 3))
    x, w = _operands(p, 3)
    y = torch.empty(p.N, p.Ho, p.Wo, p.K, dtype=x.dtype, device="cuda")
    ws = torch.empty(plan.workspace_bytes, dtype=torch.uint8, device="cuda")
    graph = plan.graph(x, w, y=y, workspace=ws)  # K1 captured too
    for seed in (4, 5):
        fresh, fresh_w = _operands(p, seed)
        x.copy_(fresh)
        w.copy_(fresh_w)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(y, plan.run(x, w))
    assert _error(plan, x, w, y) <= _bound(plan)


def test_user_capture_with_torch_cuda_graph(root):
    p = PROBLEMS[0]
    plan = dispatch(p, target="cuda", cache_root=root)
    x, w = _operands(p, 6)
    U = plan.transform_filter(w)
    y = torch.empty(p.N, p.Ho, p.Wo, p.K, dtype=x.dtype, device="cuda")
    ws = torch.empty(plan.workspace_bytes, dtype=torch.uint8, device="cuda")
    plan.run(x, U=U, y=y, workspace=ws)  # warm: modules loaded, cuBLAS handle made
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        plan.run(x, U=U, y=y, workspace=ws)
    x.mul_(-1.0)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, plan.run(x, U=U))
    # inside the caller's capture the launches themselves were recorded, no run graph made
    assert plan._graphs is None or plan._graphs.graphs() == 0


def test_cupy_graph_replay_equals_eager(root):
    import cupy

    p = PROBLEMS[0]  # fp16: CuPy arrays
    plan = dispatch(p, target="cuda", cache_root=root)
    tx, tw = _operands(p, 7)
    x, w = cupy.asarray(tx).copy(), cupy.asarray(tw).copy()
    y = cupy.empty((p.N, p.Ho, p.Wo, p.K), dtype=cupy.float16)
    ws = cupy.empty(plan.workspace_bytes, dtype=cupy.uint8)
    U = plan.transform_filter(w)
    graph = plan.graph(x, U=U, y=y, workspace=ws)
    x *= 0.5
    graph.replay(stream=cupy.cuda.Stream(non_blocking=True))
    cupy.cuda.runtime.deviceSynchronize()
    assert bool((y == plan.run(x, U=U)).all())


# wino.torch on the GPU -------------------------------------------------------------------------
def _net(layer):
    from torch import nn

    c, k, _, _, p, d, g, bias = layer
    torch.manual_seed(c + k)
    return nn.Sequential(
        nn.Conv2d(c, k, 3, padding=p, dilation=d, groups=g, bias=bias),
        nn.ReLU(),
        nn.Conv2d(k, k, 3, padding=1),
    )


@pytest.mark.parametrize("layer", LAYERS, ids=lambda v: f"c{v[0]}k{v[1]}d{v[5]}g{v[6]}")
def test_wino_torch_eager_compiled_and_graphed(root, layer):
    import wino.torch as wt

    net = _net(layer).cuda().half().eval().to(memory_format=torch.channels_last)
    c, _, h, w = layer[:4]
    x = torch.randn(4, c, h, w, device="cuda").half().to(memory_format=torch.channels_last)
    with torch.inference_mode():
        ref = net.float()(x.float())
        net.half()
        wt.convert(net)
        assert all(isinstance(m, wt.Conv2d) for m in (net[0], net[2]))
        eager = net(x)
        assert eager.is_contiguous(memory_format=torch.channels_last)
        error = ((eager.float() - ref).abs().max() / ref.abs().max()).item()
        assert error < 3e-2, error
        compiled = torch.compile(net, fullgraph=True)
        assert torch.allclose(compiled(x), eager, rtol=1e-3, atol=1e-3)
        static = x.clone()
        net(static)  # warm (U cached) before the capture
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = net(static)
        static.copy_(x * 2)
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, net(x * 2))


# Bad input -------------------------------------------------------------------------------------
def test_bad_inputs_are_named_before_any_kernel(root):
    p = PROBLEMS[0]
    plan = dispatch(p, target="cuda", cache_root=root)
    x, w = _operands(p, 8)
    y = torch.full((p.N, p.Ho, p.Wo, p.K), float("nan"), dtype=x.dtype, device="cuda")
    with pytest.raises(ValueError, match="x: a tensor on cpu"):
        plan.run(x.cpu(), w, y=y)
    with pytest.raises(ValueError, match="w: a tensor on cpu"):
        plan.run(x, w.cpu(), y=y)
    with pytest.raises(ValueError, match="y: must be C-contiguous"):
        plan.run(x, w, y=y.permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3))
    with pytest.raises(ValueError, match="workspace: expected"):
        plan.run(x, w, y=y, workspace=torch.empty(8, dtype=torch.uint8, device="cuda"))
    with pytest.raises(ValueError, match="stream: expected"):
        plan.run(x, w, y=y, stream="default")
    torch.cuda.synchronize()
    assert torch.isnan(y).all()  # nothing half-written
    import wino.torch as wt

    conv = torch.nn.Conv2d(p.C, p.K, 3, padding=1).cuda().half()
    xn = x.permute(0, 3, 1, 2)
    with pytest.raises(ValueError, match="weight: on cpu"):
        torch.ops.wino.conv2d(xn, conv.weight.cpu(), None, [1, 1], [1, 1], 1)
    with pytest.raises(ValueError, match="x: wino reads NCHW tensors in channels_last"):
        wt.ops.conv2d(xn.contiguous(), conv.weight, None, [1, 1], [1, 1], 1)
    assert np.isfinite(plan.run(x, w).float().cpu().numpy()).all()


# Seen calls ------------------------------------------------------------------------------------
def test_seen_calls_on_two_streams_use_a_workspace_each(root):
    """run(x, w) without a workspace: the plan's own, one per stream (runs on one stream are
    ordered, runs on two are not), and each result equals the first."""
    from wino.runtime.backends import OWN_WORKSPACE_MAX

    p = PROBLEMS[0]
    plan = dispatch(p, target="cuda", cache_root=root)
    plan.release()  # the other tests' workspaces (their streams may be gone)
    x, w = _operands(p, 2)
    expect = plan.run(x, w)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    for _ in range(3):
        with torch.cuda.stream(side):
            y = plan.run(x, w)
        side.synchronize()
        assert torch.equal(y, expect)
    held = 2 * plan.workspace_bytes if plan.workspace_bytes <= OWN_WORKSPACE_MAX else 0
    assert plan.held_bytes == held
    assert _error(plan, x, w, expect) <= _bound(plan)


#: A run on a CuPy stream with torch tensors and the plan's own workspace (and y allocated
#: per call), the stream destroyed, then everything freed and allocated again: with the
#: workspace ``record_stream``-ed on that stream, torch's free recorded an event on a dead
#: stream handle and the process crashed (segfault) at the next allocation. A subprocess, so
#: a crash fails this test and not the whole run.
_DEAD_STREAM = """
import gc, sys, cupy, torch
from wino.problem import Problem
from wino.runtime import dispatch
p = Problem(N=8, C=64, H=28, W=28, K=64, pad_h=1, pad_w=1, dtype="fp16")
plan = dispatch(p, target="cuda", cache_root=sys.argv[1])
x = torch.randn(p.N, p.H, p.W, p.C, device="cuda").half()
w = torch.randn(p.K, 3, 3, p.C, device="cuda").half()
expect = plan.run(x, w)
torch.cuda.synchronize()
outs = []
for _ in range(3):
    stream = cupy.cuda.Stream(non_blocking=True)
    outs.append(plan.run(x, w, stream=stream))
    stream.synchronize()
    del stream  # cudaStreamDestroy: its handle is dead
gc.collect()
plan.release()
torch.cuda.synchronize()
assert all(torch.equal(y, expect) for y in outs)
del outs
gc.collect()
y = plan.run(x, w)
torch.cuda.synchronize()
assert torch.equal(y, expect)
print("ok")
"""


def test_a_destroyed_callers_stream_leaves_nothing_dangling(root):
    import os
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-X", "faulthandler", "-c", _DEAD_STREAM, str(root)],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


def test_a_captured_run_keeps_no_workspace_on_the_plan(root):
    """Captured with torch.cuda.graph without workspace=: the run's workspace comes from the
    graph's memory pool (alive as long as the graph), not the plan's own, so the plan can
    drop its workspaces (release) and the graph still replays right."""
    p = PROBLEMS[0]
    plan = dispatch(p, target="cuda", cache_root=root)
    plan.release()
    x, w = _operands(p, 9)
    U = plan.transform_filter(w)
    y = torch.empty(p.N, p.Ho, p.Wo, p.K, dtype=x.dtype, device="cuda")
    plan.run(x, U=U, y=y)  # warm, on the current stream: one workspace of its own
    torch.cuda.synchronize()
    held = plan.held_bytes
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        plan.run(x, U=U, y=y)
    assert plan.held_bytes == held
    plan.release()
    x.mul_(-0.5)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, plan.run(x, U=U))


def test_a_plan_graph_holds_its_arrays(root):
    import gc
    import weakref

    p = PROBLEMS[0]
    plan = dispatch(p, target="cuda", cache_root=root)
    x, w = _operands(p, 10)
    y = torch.empty(p.N, p.Ho, p.Wo, p.K, dtype=x.dtype, device="cuda")
    ws = torch.empty(plan.workspace_bytes, dtype=torch.uint8, device="cuda")
    graph = plan.graph(x, w, y=y, workspace=ws)
    kept = weakref.ref(y), weakref.ref(ws)
    del y, ws
    gc.collect()
    assert all(ref() is not None for ref in kept)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(graph.arrays[2], plan.run(x, w))


def test_conv2d_reuse_filter_on_cuda_follows_the_weights_version(root):
    import wino

    p = PROBLEMS[0]
    x, w = _operands(p, 3)
    plan = dispatch(p, target="cuda", cache_root=root)
    for _ in range(2):
        y = wino.conv2d(x, w, padding=1, reuse_filter=True, cache_root=root)
        assert _error(plan, x, w, y) <= _bound(plan)
    w.mul_(-1)  # in place: a new version
    y = wino.conv2d(x, w, padding=1, reuse_filter=True, cache_root=root)
    assert _error(plan, x, w, y) <= _bound(plan)


@pytest.mark.parametrize("with_k1", [False, True], ids=["U given", "K1 per call"])
def test_seen_pointers_run_as_one_graph_launch(root, with_k1):
    """From the second call on the same pointers plan.run launches one CUDA graph of its
    launches: each replay reads x as it is now (filled in place between calls) and writes
    what the launches themselves write, bit for bit; y and the workspace poisoned first."""
    p = PROBLEMS[0]
    plan = dispatch(p, target="cuda", cache_root=root, batch_split=3)
    plan.release()  # dispatch's plans are shared: no graph from an earlier test
    backend = plan.backend()
    src, w = _operands(p, 11)
    U = None if with_k1 else plan.transform_filter(w)
    filt = {"w": w} if with_k1 else {"U": U}
    x = src.clone()
    y = torch.full((p.N, p.Ho, p.Wo, p.K), float("nan"), dtype=x.dtype, device="cuda")
    ws = torch.full((plan.workspace_bytes,), 0xFF, dtype=torch.uint8, device="cuda")
    for call in range(4):
        x.copy_(src * (call + 1))
        y.fill_(float("nan"))
        plan.run(x, y=y, workspace=ws, **filt)
        torch.cuda.synchronize()
        assert plan._graphs.graphs() == (0 if call == 0 else 1), call
        backend.run_graphs = False
        try:
            expect = plan.run(x, **filt)  # every launch issued, the plan's own workspace
        finally:
            backend.run_graphs = True
        torch.cuda.synchronize()
        assert torch.equal(y, expect), call
    assert _error(plan, x, w, y) <= _bound(plan)


def test_run_graphs_follow_the_pointers_not_the_arrays(root):
    """A fresh y per call at a new address issues every launch (nothing is captured for
    pointers seen once); the same address again, in another array, replays its graph."""
    p = PROBLEMS[0]
    plan = dispatch(p, target="cuda", cache_root=root)
    plan.release()  # dispatch's plans are shared: no graph from an earlier test
    x, w = _operands(p, 12)
    U = plan.transform_filter(w)
    ws = torch.empty(plan.workspace_bytes, dtype=torch.uint8, device="cuda")
    held = [torch.empty(p.N, p.Ho, p.Wo, p.K, dtype=x.dtype, device="cuda") for _ in range(5)]
    for y in held:
        plan.run(x, U=U, y=y, workspace=ws)
    assert plan._graphs.graphs() == 0
    base = torch.empty(2 * held[0].numel(), dtype=x.dtype, device="cuda")
    first = base[: held[0].numel()].view(held[0].shape)
    plan.run(x, U=U, y=first, workspace=ws)
    again = base[: held[0].numel()].view(held[0].shape)  # another tensor, the same address
    again.fill_(float("nan"))
    plan.run(x, U=U, y=again, workspace=ws)
    torch.cuda.synchronize()
    assert plan._graphs.graphs() == 1
    assert torch.equal(again, held[0])
    plan.release()
    assert plan._graphs.graphs() == 0
