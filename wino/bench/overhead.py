"""``wino bench --overhead``: the runtime's host cost per call next to torch conv2d's.

Rows: the runtime's import and first dispatch in a fresh process (a subprocess), dispatch of
a seen problem, ``plan.run`` with y, workspace and U given, ``wino.conv2d`` (dispatch, K1,
allocation, run), a graph replay (``plan.graph``; on the host a replay is a run), and torch's
``conv2d`` on the same data. Per-call times are the median over repeats of a timed loop; on
CUDA the loop issues asynchronously (synchronized once at its end), so a row is the host cost
unless the GPU work of a call is longer. The per-call rows are timed in interleaved rounds
(each round times every row's loop once), so a drift of the machine's speed moves torch's
time and wino's alike and the ratios stay those of one moment.
"""

from __future__ import annotations

import contextlib
import functools
import json
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
    "conv2d reuse U": "<= 3x torch",
    "graph replay": "~ 1 launch",
}


@dataclass(frozen=True)
class Row:
    name: str
    us: float | None  # per call; None: not measured here (why in note)
    note: str = ""


def interleaved_us(
    calls: dict[str, Callable[[], object]], sync: Callable[[], object], loops: int, repeats: int
) -> dict[str, float]:
    """Per call, the median over ``repeats`` rounds of (time of ``loops`` calls, then one
    ``sync``) / loops, each round timing every one of ``calls`` in turn."""
    for call in calls.values():
        call()
    sync()
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            start = time.perf_counter()
            for _ in range(loops):
                call()
            sync()
            samples[name].append((time.perf_counter() - start) / loops * 1e6)
    return {name: statistics.median(times) for name, times in samples.items()}


#: The first call's parts, in the order a new process pays them (``first_call_phases``). The
#: first four are ``dispatch``'s own (the goal's "first dispatch"); the rest are the first run's.
DISPATCH_PHASES = ("manifest", "rules and YAML", "default pick", "plan")
PHASE_NOTES = {
    "import": "import wino, wino.runtime",
    "manifest": "find and read it: the build's index, or JSON + schema validation",
    "rules and YAML": "the rule book and grids/stages.yaml (stamped, or parsed + validated)",
    "default pick": "rank the manifest's kernels of the stages and tile, first that fits",
    "plan": "the rest of dispatch: launch geometry, chunks, workspace",
    "CUDA context": "import CuPy and create the context (the caller's, in a framework)",
    "backend": "the backend: device buffers (CUDA), kernel tables",
    "cuBLAS handle": "cublasCreate and its workspace",
    "module loads": "load the plan's binaries (sha256 checked) and pack its kernargs",
    "first run": "plan.run(x, w), synchronized",
}


def first_call_phases(problem: Problem, target: Target, cache_root) -> list[tuple[str, float]]:
    """Time each part of the first dispatch and the first run of a process, in the order
    they are paid (microseconds). Each call warms what the next relies on, so the parts add up
    to the first call; run it in a new process (``first_call_split``)."""
    from .. import cache, config, pick, refusals
    from ..runtime import dispatch, tuning
    from ..runtime import plan as plan_module

    out: list[tuple[str, float]] = []

    def timed(name: str, call: Callable[[], object]) -> object:
        start = time.perf_counter()
        value = call()
        out.append((name, (time.perf_counter() - start) * 1e6))
        return value

    def rank():
        tuned = tuning.best_tile(problem, target, cache_root, tuning.beside(manifest.path))
        tile = tuned or plan_module.default_tile(problem)
        ranking = plan_module._ranking(manifest)  # the target's own order and storage
        return pick.default_stage_specs(problem, tile, ranking=ranking, target=target)

    manifest = timed("manifest", lambda: cache.find_manifest(target, cache_root))
    timed("rules and YAML", lambda: (refusals.rule_book(), config.declared("stages")))
    timed("default pick", rank)
    plan = timed("plan", lambda: dispatch(problem, target=target, cache_root=cache_root))
    x, w, sync = _first_operands(problem, target, out, timed)
    backend = timed("backend", plan.backend)
    if target is Target.CUDA:
        timed("cuBLAS handle", backend.gemm_handle)
    timed("module loads", lambda: backend.program(plan))
    timed("first run", lambda: (plan.run(x, w), sync()))
    return out


def _first_operands(problem: Problem, target: Target, out, timed):
    """(x, w, sync) for the first run (made outside the timers, after the CUDA context)."""
    import numpy as np

    from ..runtime.arrays import numpy_dtype

    p, dtype = problem, numpy_dtype(problem.dtype)
    x = np.ones((p.N, p.H, p.W, p.C), dtype)
    w = np.ones((p.K, 3, 3, p.Cg), dtype)
    if target is not Target.CUDA:
        return x, w, lambda: None
    cupy = timed("CUDA context", _cuda_context)
    return cupy.asarray(x), cupy.asarray(w), cupy.cuda.runtime.deviceSynchronize


def _cuda_context():
    """Import CuPy and make the device's primary context current (cudaFree(0))."""
    import cupy

    cupy.cuda.runtime.free(0)
    return cupy


_SPLIT_CHILD = """
import json, sys, time
if sys.argv[4] == "1":  # the caller's framework made the context before wino is imported
    import cupy
    cupy.cuda.runtime.free(0)
start = time.perf_counter()
import wino, wino.runtime
imported = (time.perf_counter() - start) * 1e6
from wino.bench.overhead import first_call_phases
problem = wino.Problem.from_miopen(sys.argv[1])
phases = first_call_phases(problem, wino.Target(sys.argv[2]), sys.argv[3] or None)
print(json.dumps([["import", imported], *phases]))
"""


def first_call_split(
    problem: Problem, target: Target, cache_root, context_first: bool = False
) -> list[tuple[str, float]]:
    """``first_call_phases`` in a new process (after its import); ``context_first``: the
    CUDA context exists before wino is imported, as in a process where torch or CuPy made it."""
    args = [sys.executable, "-c", _SPLIT_CHILD, problem.to_miopen(), target.value]
    args += [str(cache_root or ""), "1" if context_first else "0"]
    out = subprocess.run(args, capture_output=True, text=True, check=True)
    return [(name, us) for name, us in json.loads(out.stdout.strip().splitlines()[-1])]


def first_call_splits(problem: Problem, target: Target, cache_root) -> list[tuple[str, list]]:
    """The first call's split in new processes: as it is, and on CUDA also with the context
    made before the import (the goal's condition: inside a model, torch or CuPy made it)."""
    splits = [("new process", first_call_split(problem, target, cache_root))]
    if target is Target.CUDA:
        made = first_call_split(problem, target, cache_root, context_first=True)
        splits.append(("context first", made))
    return splits


def first_dispatch_us(phases: list[tuple[str, float]]) -> float:
    """The sum of dispatch's own parts in a split (each timed alone, so the fit checks that
    the default pick and the plan both make count twice: a little over one dispatch)."""
    return sum(us for name, us in phases if name in DISPATCH_PHASES)


_DISPATCH_CHILD = """
import sys, time
if sys.argv[4] == "1":  # the caller's framework made the context before wino is imported
    import cupy
    cupy.cuda.runtime.free(0)
import wino, wino.runtime
problem = wino.Problem.from_miopen(sys.argv[1])
start = time.perf_counter()
wino.runtime.dispatch(problem, target=sys.argv[2], cache_root=sys.argv[3] or None)
print((time.perf_counter() - start) * 1e6)
"""


def first_dispatch_alone(problem: Problem, target: Target, cache_root, runs: int = 3) -> float:
    """The first dispatch after the import, one call timed alone in each of ``runs`` new
    processes (on CUDA with the context made before the import): the median (us)."""
    args = [sys.executable, "-c", _DISPATCH_CHILD, problem.to_miopen(), target.value]
    args += [str(cache_root or ""), "1" if target is Target.CUDA else "0"]
    times = [
        float(subprocess.run(args, capture_output=True, text=True, check=True).stdout)
        for _ in range(runs)
    ]
    return statistics.median(times)


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


def _torch_call(arrays: _Arrays, problem: Problem, target: Target):
    """(torch's conv2d on the case's data, or None, the row's note)."""
    torch = arrays.torch
    if torch is None:
        return None, "PyTorch not installed"
    p = problem
    if target is Target.CUDA and not torch.is_tensor(arrays.x):
        return None, "PyTorch has no CUDA here"
    if torch.is_tensor(arrays.x):
        x, w = arrays.x, arrays.w
    else:
        dt = getattr(torch, _TORCH_DTYPE[p.dtype.short])
        x, w = (torch.from_numpy(a.astype("float32")).to(dt) for a in (arrays.x, arrays.w))
    # both NCHW views of the NHWC / KRSC memory, channels_last as a user holding these arrays
    # calls it (a contiguous NCHW w beside a channels_last x costs torch a copy of w per call)
    xn, wn = x.permute(0, 3, 1, 2), w.permute(0, 3, 1, 2)
    pad, dil = (p.pad_h, p.pad_w), (p.dil_h, p.dil_w)

    def call():
        return torch.nn.functional.conv2d(xn, wn, None, 1, pad, dil, p.groups)

    return call, "cuDNN" if target is Target.CUDA else "CPU"


def _inference_mode(torch):
    return torch.inference_mode() if torch is not None else contextlib.nullcontext()


_TORCH_DTYPE = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}


def measure(
    problem: Problem, target: Target, cache_root=None, loops: int = 200, repeats: int = 7
) -> tuple[list[Row], list[tuple[str, list]]]:
    """(rows, the first call's splits): the first dispatch from new processes, the rest per
    call in this one."""
    from ..runtime import conv2d, dispatch

    splits = first_call_splits(problem, target, cache_root)
    phases = splits[-1][1]  # with the CUDA context made first: the goal's condition
    rows = [
        Row("import runtime", dict(phases)["import"], "import wino, wino.runtime (new process)"),
        Row(
            "first dispatch",
            first_dispatch_alone(problem, target, cache_root),
            "after the import, median of 3 new processes (its parts: the split below)",
        ),
    ]
    plan = dispatch(problem, target=target, cache_root=cache_root)
    arrays = _Arrays(problem, target)
    sync, backend = arrays.sync, plan.backend()
    x, w, y = arrays.x, arrays.w, arrays.y
    ws = backend.raw_workspace(plan, None, backend.context(x, None))
    U = plan.transform_filter(w)
    pad, dil = (problem.pad_h, problem.pad_w), (problem.dil_h, problem.dil_w)
    graph = plan.graph(x, U=U, y=y, workspace=ws)
    torch_call, torch_note = _torch_call(arrays, problem, target)
    timed = [
        ("dispatch (seen)", lambda: dispatch(problem, target=target, cache_root=cache_root), ""),
        ("plan.run", lambda: plan.run(x, U=U, y=y, workspace=ws), "y, workspace, U given"),
    ]
    for name, reuse, note in (
        ("wino.conv2d", False, "dispatch, K1, y allocated, run (the plan's workspace)"),
        ("conv2d reuse U", True, "wino.conv2d(..., reuse_filter=True): no K1"),
    ):
        call = functools.partial(
            conv2d, x, w, pad, dil, problem.groups, reuse_filter=reuse, cache_root=cache_root
        )
        timed.append((name, call, note))
    note = "CUDA graph" if target is Target.CUDA else "host: a replay is a run"
    timed.append(("graph replay", graph.replay, note))
    if torch_call is not None:
        timed.append(("torch conv2d", torch_call, torch_note))
    with _inference_mode(arrays.torch):  # torch's conv2d as in inference, wino's calls alike
        us = interleaved_us({name: call for name, call, _ in timed}, sync, loops, repeats)
    rows += [Row(name, us[name], note) for name, _, note in timed]
    if torch_call is None:
        rows.append(Row("torch conv2d", None, torch_note))
    return rows, splits


def split_report(splits: list[tuple[str, list]]) -> list[str]:
    """The first call's parts, one column per new process (us)."""
    names = [name for name, _ in splits[0][1]]
    for _, phases in splits[1:]:
        names += [name for name, _ in phases if name not in names]
    head = "".join(f"{label:>15}" for label, _ in splits)
    lines = ["", "first call in a new process, split (us):", f"{'':16}{head}  note"]
    for name in names:
        cells = "".join(f"{dict(phases).get(name, 0.0):15.1f}" for _, phases in splits)
        lines.append(f"{name:16}{cells}  {PHASE_NOTES.get(name, '')}")
    total = "".join(f"{first_dispatch_us(phases):15.1f}" for _, phases in splits)
    lines.append(f"{'= dispatch':16}{total}  {' + '.join(DISPATCH_PHASES)} (fit checks twice)")
    return lines


def report(
    problem: Problem, target: Target, rows: list[Row], splits: list[tuple[str, list]] = ()
) -> str:
    torch_us = next((r.us for r in rows if r.name == "torch conv2d"), None)
    lines = [
        f"wino bench --overhead: {problem.label()} on {target.value}, per call",
        f"{'':16} {'us':>10} {'x torch':>8}  {'goal':12} note",
    ]
    for r in rows:
        us = "n/a" if r.us is None else f"{r.us:10.1f}"
        ratio = f"{r.us / torch_us:8.2f}" if r.us is not None and torch_us else f"{'':8}"
        lines.append(f"{r.name:16} {us:>10} {ratio}  {GOALS.get(r.name, ''):12} {r.note}")
    if splits:
        lines += split_report(splits)
    return "\n".join(lines)
