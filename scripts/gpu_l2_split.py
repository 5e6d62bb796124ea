"""The unfused plan per batch chunk size: does keeping a chunk's V and M in the L2 pay?

Per public layer and dtype, the unfused default plan at every batch split N, N/2, ..., 1
(``dispatch(..., algorithm="unfused", batch_split=s)``), the default plan (``dispatch``'s own
choice) and cuDNN through torch on the same NHWC tensors, U cached, each a CUDA-graph replay of
R calls on R operand sets (R so that the sets fill twice the L2: no call finds its x in the L2
from the call before). Each line: the chunk's V + M bytes, us per call, cuDNN / wino and the
error against a float32 torch convolution of the same operands.

Run on a GPU machine from the repository root after ``doit -n 16 compile:cuda`` (or with
$WINO_BUILD naming another cache):
    python3 scripts/gpu_l2_split.py [--dtype fp16,bf16] [--splits 16,8,4] [MIOPEN_LINE ...]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_chain_time import graph_us  # noqa: E402  (the same graph replay timing)

from wino.bench.cases import problems_from  # noqa: E402
from wino.launch import workspace_bytes  # noqa: E402
from wino.problem import Problem  # noqa: E402
from wino.runtime.plan import dispatch  # noqa: E402
from wino.vocab import DType  # noqa: E402

ROOT = Path(os.environ["WINO_BUILD"]) if "WINO_BUILD" in os.environ else None  # None: build/
CASES = Path(__file__).resolve().parents[1] / "cases/public.txt"
BATCHES, REPLAYS = 15, 10  # per timing: 15 batches of 10 replays of the R calls
TORCH = {DType.FP16: torch.float16, DType.BF16: torch.bfloat16}


def public_problems() -> list[Problem]:
    """The public layers with C, K >= 64, 3x3 stride 1 (those of scripts/gpu_engines.sh)."""
    problems, _ = problems_from([CASES])
    return [
        p
        for p in problems
        if (p.R, p.S, p.stride_h, p.stride_w) == (3, 3, 1, 1) and min(p.C, p.K) >= 64
    ]


def splits_of(n: int) -> list[int]:
    out, s = [], n
    while s >= 1:
        out.append(s)
        s //= 2
    return out


def chunk_vm_mb(plan) -> float:
    return workspace_bytes({k: v for k, v in plan.layout().items() if k in ("V", "M")}) / 1e6


class Layer:
    def __init__(self, problem: Problem, l2_bytes: int):
        self.p = p = problem
        dt = TORCH[p.dtype]
        per_set = (p.N * p.H * p.W * p.C + p.N * p.Ho * p.Wo * p.K) * 2
        self.sets = max(1, math.ceil(2 * l2_bytes / per_set))
        self.xs = [torch.randn(p.N, p.H, p.W, p.C, device="cuda").to(dt) for _ in range(self.sets)]
        self.ys = [torch.empty(p.N, p.Ho, p.Wo, p.K, device="cuda", dtype=dt)]
        self.ys += [torch.empty_like(self.ys[0]) for _ in range(self.sets - 1)]
        self.w = torch.randn(p.K, 3, 3, p.Cg, device="cuda").to(dt)
        xc, wc = self.nchw(self.xs[0]), self.nchw(self.w)
        self.ref = torch.nn.functional.conv2d(xc.float(), wc.float(), padding=(p.pad_h, p.pad_w))

    @staticmethod
    def nchw(t):
        return t.permute(0, 3, 1, 2)

    def error(self) -> float:
        y = self.nchw(self.ys[0]).float()
        return ((y - self.ref).abs().max() / self.ref.abs().max()).item()

    def wino_us(self, plan) -> tuple[float, float]:
        U = plan.transform_filter(self.w)
        backend = plan.backend()
        ws = backend.raw_workspace(plan, None, backend.context(self.xs[0], None))
        for y in self.ys:
            y.fill_(float("nan"))
        calls = [
            (lambda x=x, y=y: plan.run(x, U=U, y=y, workspace=ws))
            for x, y in zip(self.xs, self.ys, strict=True)
        ]
        us = graph_us(calls, BATCHES, REPLAYS)
        torch.cuda.synchronize()
        return us, self.error()

    def cudnn_us(self) -> float:
        p = self.p
        wc = self.nchw(self.w).contiguous(memory_format=torch.channels_last)
        torch.backends.cudnn.benchmark = True
        calls = [
            (lambda x=x: torch.nn.functional.conv2d(self.nchw(x), wc, padding=(p.pad_h, p.pad_w)))
            for x in self.xs
        ]
        return graph_us(calls, BATCHES, REPLAYS)


def run(p: Problem, l2_bytes: int, splits: list[int] | None) -> None:
    layer = Layer(p, l2_bytes)
    cudnn = layer.cudnn_us()
    label = f"N{p.N} C{p.C} {p.H}x{p.W} K{p.K} {p.dtype.short}"
    default = dispatch(p, target="cuda", cache_root=ROOT)
    us, err = layer.wino_us(default)
    print(
        f"{label} | default {default.kind} split {default.batch_split} | "
        f"{chunk_vm_mb(default):7.1f} MB | {us:8.1f} us | cuDNN {cudnn:7.1f} | "
        f"{cudnn / us:5.3f}x | err {err:.2e}",
        flush=True,
    )
    for s in splits or splits_of(p.N):
        if s > p.N:
            continue
        plan = dispatch(p, target="cuda", algorithm="unfused", batch_split=s, cache_root=ROOT)
        us, err = layer.wino_us(plan)
        print(
            f"{label} | unfused split {s:3d} | {chunk_vm_mb(plan):7.1f} MB | {us:8.1f} us | "
            f"cuDNN {cudnn:7.1f} | {cudnn / us:5.3f}x | err {err:.2e}",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="fp16,bf16")
    parser.add_argument("--splits", default="", help="comma-separated; default N, N/2, ..., 1")
    parser.add_argument("lines", nargs="*")
    args = parser.parse_args()
    props = torch.cuda.get_device_properties(0)
    l2 = props.L2_cache_size
    print(f"{props.name}, L2 {l2 / 2**20:.0f} MiB, {props.multi_processor_count} SMs")
    splits = [int(s) for s in args.splits.split(",")] if args.splits else None
    problems = [Problem.from_miopen(line) for line in args.lines] or public_problems()
    for dtype in args.dtype.split(","):
        for p in problems:
            run(replace(p, dtype=DType(dtype)), l2, splits)


if __name__ == "__main__":
    main()
