"""wino's c target against onnxruntime's CPU Conv, same process, same threads, interleaved.

For each case (MIOpenDriver lines): the default-pick plan of each tile (filter transform done
once, workspace and output passed in) and an onnxruntime session of the same Conv (NCHW, the
filter a constant initializer) run in turns, ``--repeats`` rounds; the medians and the ratio
onnxruntime time / best wino time, then the geometric mean. Interleaving makes the ratio robust
to a shared machine's load (both engines see the same load); absolute times are not.

    OMP_NUM_THREADS=2 python scripts/host_vs_onnxruntime.py docs/bench/host_cases.txt \\
        --cache-root build --tile F4x4,F2x2 --dtype fp32

Needs the onnx extra (pip install -e '.[onnx]') and a c cache holding the default picks.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

import wino
from wino.bench.compare import conv_model, import_onnxruntime
from wino.problem import read_miopen_file
from wino.runtime.arrays import numpy_dtype
from wino.runtime.host import host_threads
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


def medians_ms(calls: dict, repeats: int) -> dict[str, float]:
    for call in calls.values():
        call()  # warm-up: binaries loaded, scratch and sessions ready
    samples = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(s) * 1e3 for name, s in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", type=Path)
    parser.add_argument("--cache-root", type=Path, default=None)
    parser.add_argument("--tile", default="F4x4,F2x2")
    parser.add_argument("--dtype", default="fp32", choices=[d.short for d in DType])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    dtype = next(d for d in DType if d.short == args.dtype)
    tiles = args.tile.split(",")
    logs = []
    print(f"threads {host_threads()}, {args.dtype}, {args.repeats} interleaved rounds, medians")
    for problem in read_miopen_file(str(args.cases)):
        problem = replace(problem, dtype=dtype)
        rng = np.random.default_rng(0)
        x = rng.standard_normal((problem.N, problem.H, problem.W, problem.C), np.float32)
        w = rng.standard_normal((problem.K, problem.R, problem.S, problem.Cg), np.float32)
        x, w = x.astype(numpy_dtype(dtype)), w.astype(numpy_dtype(dtype))
        calls = {t: wino_call(problem, t, x, w, args.cache_root) for t in tiles}
        calls["onnxruntime"] = onnxruntime_call(problem, x, w)
        ms = medians_ms(calls, args.repeats)
        best = min(tiles, key=ms.get)
        ratio = ms["onnxruntime"] / ms[best]
        logs.append(math.log(ratio))
        times = " ".join(f"{t} {ms[t]:.1f}" for t in tiles)
        print(
            f"{problem.label():44s} onnxruntime {ms['onnxruntime']:8.1f} ms  wino {times} ms"
            f"  ratio {ratio:.2f}",
            flush=True,
        )
    print(
        f"geomean onnxruntime time / wino time: {math.exp(sum(logs) / len(logs)):.2f} "
        f"over {len(logs)} layers"
    )


if __name__ == "__main__":
    main()
