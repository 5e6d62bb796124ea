"""``wino bench --overhead``: the runtime's host cost per call next to torch conv2d's.

Rows: the runtime's import and first dispatch in a fresh process (a subprocess), dispatch of
a seen problem, ``plan.run`` with y, workspace and U given, ``wino.conv2d`` (dispatch, K1,
allocation, run), a graph replay (``plan.graph``; on the host a replay is a run), and torch's
``conv2d`` on the same data. Per-call times are the median over repeats of a timed loop; on
CUDA the loop issues asynchronously (synchronized once at its end), so a row is the host cost
unless the GPU work of a call is longer.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..problem import Problem
from ..vocab import Target

DEFAULT_CASE = "convfp16 -n 1 -c 64 -H 8 -W 8 -k 64 -y 3 -x 3 -p 1 -q 1"
#: The goals of issue 10, as a multiple of torch conv2d's per-call time (or microseconds).
GOALS = {
    "first dispatch": "<= 5 ms",
    "dispatch (seen)": "<= 5 us",
    "plan.run": "<= 2x torch",
    "wino.conv2d": "<= 3x torch",
    "graph replay": "~ 1 launch",
}


@dataclass(frozen=True)
class Row:
    name: str
    us: float | None  # per call; None: not measured here (why in note)
    note: str = ""


def per_call_us(call: Callable[[], object], sync: Callable[[], object], loops: int, repeats: int):
    """Median over ``repeats`` of (time of ``loops`` calls, then one ``sync``) / loops."""
    call()
    sync()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(loops):
            call()
        sync()
        samples.append((time.perf_counter() - start) / loops * 1e6)
    return statistics.median(samples)


def first_dispatch_us(problem: Problem, target: Target, cache_root) -> tuple[float, float]:
    """(import of wino's runtime, then its first dispatch) in a new process, in microseconds:
    the dispatch pays the manifest's read and validation and the rule book's load."""
    code = (
        "import sys, time\n"
        "t = time.perf_counter()\n"
        "import wino, wino.runtime\n"
        "t1 = time.perf_counter()\n"
        "p = wino.Problem.from_miopen(sys.argv[1])\n"
        "t2 = time.perf_counter()\n"
        "wino.runtime.dispatch(p, target=sys.argv[2], cache_root=sys.argv[3] or None)\n"
        "print((t1 - t) * 1e6, (time.perf_counter() - t2) * 1e6)\n"
    )
    args = [sys.executable, "-c", code, problem.to_miopen(), target.value, str(cache_root or "")]
    out = subprocess.run(args, capture_output=True, text=True, check=True)
    imported, first = out.stdout.strip().splitlines()[-1].split()
    return float(imported), float(first)


class _Arrays:
    """The case's operands for wino (NHWC) and torch (the same memory as NCHW channels_last
    where torch runs on that device)."""

    def __init__(self, problem: Problem, target: Target):
        import numpy as np

        from ..runtime.arrays import numpy_dtype

        rng = np.random.default_rng(0)
        p, dtype = problem, numpy_dtype(problem.dtype)
        x = rng.standard_normal((p.N, p.H, p.W, p.C)).astype(dtype)
        w = rng.standard_normal((p.K, 3, 3, p.Cg)).astype(dtype)
        self.torch = _torch()
        self.sync: Callable[[], object] = lambda: None
        if target is Target.CUDA:
            self.x, self.w, self.y = self._cuda(x, w, problem)
        else:
            self.x, self.w, self.y = x, w, np.empty((p.N, p.Ho, p.Wo, p.K), dtype)

    def _cuda(self, x, w, problem: Problem):
        torch = self.torch
        if torch is not None and torch.cuda.is_available():
            self.sync = torch.cuda.synchronize
            dt = getattr(torch, _TORCH_DTYPE[problem.dtype.short])
            tx, tw = (torch.from_numpy(a.astype("float32")).cuda().to(dt) for a in (x, w))
            p = problem
            return tx, tw, torch.empty((p.N, p.Ho, p.Wo, p.K), dtype=dt, device="cuda")
        import cupy

        self.sync = cupy.cuda.get_current_stream().synchronize
        p = problem
        return cupy.asarray(x), cupy.asarray(w), cupy.empty((p.N, p.Ho, p.Wo, p.K), x.dtype)


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def _torch_row(arrays: _Arrays, problem: Problem, target: Target, loops, repeats) -> Row:
    torch = arrays.torch
    if torch is None:
        return Row("torch conv2d", None, "PyTorch not installed")
    p = problem
    if target is Target.CUDA and not torch.is_tensor(arrays.x):
        return Row("torch conv2d", None, "PyTorch has no CUDA here")
    if torch.is_tensor(arrays.x):
        x, w = arrays.x, arrays.w
    else:
        dt = getattr(torch, _TORCH_DTYPE[p.dtype.short])
        x, w = (torch.from_numpy(a.astype("float32")).to(dt) for a in (arrays.x, arrays.w))
    xn, wn = x.permute(0, 3, 1, 2), w.permute(0, 3, 1, 2).contiguous()  # NCHW channels_last
    pad, dil = (p.pad_h, p.pad_w), (p.dil_h, p.dil_w)
    with torch.inference_mode():
        us = per_call_us(
            lambda: torch.nn.functional.conv2d(xn, wn, None, 1, pad, dil, p.groups),
            arrays.sync,
            loops,
            repeats,
        )
    return Row("torch conv2d", us, "cuDNN" if target is Target.CUDA else "CPU")


_TORCH_DTYPE = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}


def measure(
    problem: Problem, target: Target, cache_root=None, loops: int = 200, repeats: int = 7
) -> list[Row]:
    from ..runtime import conv2d, dispatch

    imported, first = first_dispatch_us(problem, target, cache_root)
    rows = [
        Row("import runtime", imported, "import wino, wino.runtime (new process)"),
        Row("first dispatch", first, "after the import: manifest read and validated"),
    ]
    plan = dispatch(problem, target=target, cache_root=cache_root)
    arrays = _Arrays(problem, target)
    sync, backend = arrays.sync, plan.backend()
    x, w, y = arrays.x, arrays.w, arrays.y
    ws = backend.raw_workspace(plan, None, backend.context(x, None))
    U = plan.transform_filter(w)
    seen = per_call_us(
        lambda: dispatch(problem, target=target, cache_root=cache_root), sync, loops, repeats
    )
    rows.append(Row("dispatch (seen)", seen))
    run = per_call_us(lambda: plan.run(x, U=U, y=y, workspace=ws), sync, loops, repeats)
    rows.append(Row("plan.run", run, "y, workspace, U given"))
    pad, dil = (problem.pad_h, problem.pad_w), (problem.dil_h, problem.dil_w)
    rows.append(
        Row(
            "wino.conv2d",
            per_call_us(
                lambda: conv2d(x, w, pad, dil, problem.groups, cache_root=cache_root),
                sync,
                loops,
                repeats,
            ),
            "dispatch, K1, allocation, run",
        )
    )
    graph = plan.graph(x, U=U, y=y, workspace=ws)
    note = "CUDA graph" if target is Target.CUDA else "host: a replay is a run"
    rows.append(Row("graph replay", per_call_us(graph.replay, sync, loops, repeats), note))
    rows.append(_torch_row(arrays, problem, target, loops, repeats))
    return rows


def report(problem: Problem, target: Target, rows: list[Row]) -> str:
    torch_us = next((r.us for r in rows if r.name == "torch conv2d"), None)
    lines = [
        f"wino bench --overhead: {problem.label()} on {target.value}, per call",
        f"{'':16} {'us':>10} {'x torch':>8}  {'goal':12} note",
    ]
    for r in rows:
        us = "n/a" if r.us is None else f"{r.us:10.1f}"
        ratio = f"{r.us / torch_us:8.2f}" if r.us is not None and torch_us else f"{'':8}"
        lines.append(f"{r.name:16} {us:>10} {ratio}  {GOALS.get(r.name, ''):12} {r.note}")
    return "\n".join(lines)
