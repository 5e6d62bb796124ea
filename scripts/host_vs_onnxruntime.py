"""wino's c target against onnxruntime's CPU Conv, same process, same threads, interleaved.

For each case (MIOpenDriver lines): the default-pick plan of each dtype and tile (filter
transform done once, workspace and output passed in) and an onnxruntime session of the same
Conv in fp32 (NCHW, the filter a constant initializer) run in turns, ``--repeats`` rounds; the
medians, the ratio onnxruntime time / best wino time per dtype, and each 16-bit dtype's best
time over fp32's; then geometric means and the worst layer. Interleaving makes the ratios
robust to a shared machine's load (every engine and dtype sees the same load); absolute times
are not.

    OMP_NUM_THREADS=2 python scripts/host_vs_onnxruntime.py docs/bench/host_cases.txt \\
        --cache-root build --tile F4x4,F2x2 --dtype fp32,fp16,bf16

Needs the onnx extra (pip install -e '.[onnx]') and a c cache holding the default picks.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

import wino
from wino.bench.compare import conv_model, import_onnxruntime
from wino.problem import read_miopen_file
from wino.runtime.arrays import numpy_dtype
from wino.runtime.host import blas_advice, host_threads
from wino.vocab import DType


def wino_call(problem, tile: str, x, w, root):
    plan = wino.dispatch(problem, target="c", tile=tile, cache_root=root)
    workspace = np.empty(plan.workspace_bytes, np.uint8)
    y = np.empty((problem.N, problem.Ho, problem.Wo, problem.K), x.dtype)
    U = plan.transform_filter(w)
    return lambda: plan.run(x, y=y, workspace=workspace, U=U)


def onnxruntime_call(problem, x, w):
    _, ort = import_onnxruntime()
    options = ort.SessionOptions()
    options.intra_op_num_threads = host_threads()
    options.inter_op_num_threads = 1
    wn = np.ascontiguousarray(w.astype(np.float32).transpose(0, 3, 1, 2))
    session = ort.InferenceSession(
        conv_model(problem, wn), options, providers=["CPUExecutionProvider"]
    )
    xn = np.ascontiguousarray(x.astype(np.float32).transpose(0, 3, 1, 2))
    return lambda: session.run(None, {"x": xn})


def medians_ms(calls: dict, repeats: int, clock=time.perf_counter) -> dict[str, float]:
    for call in calls.values():
        call()  # warm-up: binaries loaded, scratch and sessions ready
    samples = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            start = clock()
            call()
            samples[name].append(clock() - start)
    return {name: statistics.median(s) * 1e3 for name, s in samples.items()}


def layer_calls(problem, dtypes, tiles, root) -> dict:
    """One onnxruntime call (fp32: its x86 Conv has no 16-bit kernel) and a wino call per dtype
    and tile, on the same N(0, 1) values (rounded to each dtype)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((problem.N, problem.H, problem.W, problem.C), np.float32)
    w = rng.standard_normal((problem.K, problem.R, problem.S, problem.Cg), np.float32)
    calls = {"onnxruntime": onnxruntime_call(problem, x, w)}
    for dtype in dtypes:
        p = replace(problem, dtype=dtype)
        xd, wd = x.astype(numpy_dtype(dtype)), w.astype(numpy_dtype(dtype))
        for tile in tiles:
            calls[f"{dtype.short} {tile}"] = wino_call(p, tile, xd, wd, root)
    return calls


def machine_line() -> str:
    """CPU model, the BLAS numpy's K3 runs on (its core type: OPENBLAS_CORETYPE picks another
    before numpy loads), onnxruntime's version and the load average, for the log."""
    from threadpoolctl import threadpool_info

    _, ort = import_onnxruntime()
    model = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    blas = [
        f"{i['internal_api']} {i.get('version')} {i.get('architecture')}"
        for i in threadpool_info()
        if i.get("user_api") == "blas"
    ]
    load = " ".join(f"{v:.2f}" for v in os.getloadavg())
    return f"CPU {model}; BLAS {', '.join(blas)}; onnxruntime {ort.__version__}; load {load}"


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", type=Path)
    parser.add_argument("--cache-root", type=Path, default=None)
    parser.add_argument("--tile", default="F4x4,F2x2")
    parser.add_argument(
        "--dtype", default="fp32", help="a comma list of fp32, fp16, bf16, timed in turns"
    )
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="cpu: the calling thread's CPU time (time.thread_time), insensitive to the "
        "machine's load; needs one thread (OMP_NUM_THREADS=1: both engines then run on the "
        "calling thread)",
    )
    args = parser.parse_args()
    if args.clock == "cpu" and host_threads() != 1:
        parser.error("--clock cpu times the calling thread: run with OMP_NUM_THREADS=1")
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    dtypes = [DType.parse(d) for d in args.dtype.split(",")]
    tiles = args.tile.split(",")
    vs_ort = {d: [] for d in dtypes}
    vs_fp32 = {d: [] for d in dtypes}
    print(
        f"threads {host_threads()}, {args.dtype}, {args.repeats} interleaved rounds, medians, "
        f"{'CPU time of the calling thread' if args.clock == 'cpu' else 'wall time'}"
    )
    print(machine_line(), flush=True)
    advice = blas_advice()
    if advice:
        print(f"note: {advice}", flush=True)
    for problem in read_miopen_file(str(args.cases)):
        calls = layer_calls(problem, dtypes, tiles, args.cache_root)
        ms = medians_ms(calls, args.repeats, clock)
        best = {d: min(ms[f"{d.short} {t}"] for t in tiles) for d in dtypes}
        parts = []
        for d in dtypes:
            vs_ort[d].append(ms["onnxruntime"] / best[d])
            times = " ".join(f"{t} {ms[f'{d.short} {t}']:.1f}" for t in tiles)
            part = f"{d.short}: {times} ms, ratio {vs_ort[d][-1]:.2f}"
            if DType.FP32 in best and d is not DType.FP32:
                vs_fp32[d].append(best[d] / best[DType.FP32])
                part += f", /fp32 {vs_fp32[d][-1]:.2f}"
            parts.append(part)
        label = replace(problem, dtype=DType.FP32).label().removeprefix("fp32 ")
        print(f"{label:40s} onnxruntime {ms['onnxruntime']:7.1f} ms | " + " | ".join(parts))
    for d in dtypes:
        line = (
            f"{d.short}: geomean onnxruntime time / wino time {geomean(vs_ort[d]):.2f} "
            f"(worst {min(vs_ort[d]):.2f}) over {len(vs_ort[d])} layers"
        )
        if vs_fp32[d]:
            line += (
                f"; wino {d.short} time / fp32 time geomean {geomean(vs_fp32[d]):.2f}, "
                f"worst {max(vs_fp32[d]):.2f}"
            )
        print(line, flush=True)
    print("load at the end " + " ".join(f"{v:.2f}" for v in os.getloadavg()), flush=True)


if __name__ == "__main__":
    main()
