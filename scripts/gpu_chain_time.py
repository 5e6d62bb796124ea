"""GPU time of each layer's default plan, U cached (the inference case), as a CUDA-graph
replay: the median of 25 timed batches of 20 replays (CUDA events), next to cuDNN's through
torch on the same NHWC tensors, timed the same way. One line per layer and dtype.

Run on a GPU machine from the repository root, after `doit compile:cuda`:
    python3 scripts/gpu_chain_time.py [--dtype fp16,bf16] [MIOPEN_LINE ...]
"""

from __future__ import annotations

import argparse
import statistics

import torch

import wino
from wino.runtime.plan import dispatch

LAYERS = (
    "conv -n 32 -c 64 -H 56 -W 56 -k 64 -y 3 -x 3 -p 1 -q 1",
    "conv -n 16 -c 128 -H 56 -W 56 -k 256 -y 3 -x 3 -p 1 -q 1",
    "conv -n 16 -c 256 -H 28 -W 28 -k 512 -y 3 -x 3 -p 1 -q 1",
    "conv -n 16 -c 512 -H 14 -W 14 -k 512 -y 3 -x 3 -p 1 -q 1",
    "conv -n 64 -c 512 -H 7 -W 7 -k 512 -y 3 -x 3 -p 1 -q 1",
)
BATCHES, REPLAYS = 25, 20
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def graph_us(calls, batches: int = BATCHES, replays: int = REPLAYS) -> float:
    """Median GPU time of one of ``calls`` (callables, e.g. one per operand set) when all are
    captured into one CUDA graph and replayed (microseconds per call)."""
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(3):
            for call in calls:
                call()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for call in calls:
            call()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    graph.replay()
    samples = []
    for _ in range(batches):
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / (replays * len(calls)))
    return statistics.median(samples)


def layer(line: str, dtype: str) -> str:
    prefix = {"fp16": "convfp16", "bf16": "convbfp16"}[dtype]  # MIOpenDriver's names
    p = wino.Problem.from_miopen(line.replace("conv ", f"{prefix} ", 1))
    dt = DTYPES[dtype]
    x = torch.randn(p.N, p.H, p.W, p.C, device="cuda").to(dt)
    w = torch.randn(p.K, 3, 3, p.Cg, device="cuda").to(dt)
    y = torch.empty(p.N, p.Ho, p.Wo, p.K, device="cuda", dtype=dt)
    plan = dispatch(p, target="cuda")
    U = plan.transform_filter(w)
    backend = plan.backend()
    ws = backend.raw_workspace(plan, None, backend.context(x, None))
    wino_us = graph_us([lambda: plan.run(x, U=U, y=y, workspace=ws)])
    xc, wc = (
        x.permute(0, 3, 1, 2),
        w.permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last),
    )
    torch.backends.cudnn.benchmark = True
    cudnn_us = graph_us([lambda: torch.nn.functional.conv2d(xc, wc, padding=(p.pad_h, p.pad_w))])
    ref = torch.nn.functional.conv2d(xc.float(), wc.float(), padding=(p.pad_h, p.pad_w))
    err = (y.permute(0, 3, 1, 2).float() - ref).abs().max().item() / ref.abs().max().item()
    return (
        f"{p.label():44} wino {wino_us:8.1f} us  cuDNN {cudnn_us:8.1f} us  "
        f"cuDNN/wino {cudnn_us / wino_us:5.3f}  error {err:.2e}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="fp16,bf16")
    parser.add_argument("lines", nargs="*", default=LAYERS)
    args = parser.parse_args()
    print(f"{torch.cuda.get_device_name()}, wino from {wino.__file__}")
    for dtype in args.dtype.split(","):
        for line in args.lines:
            print(layer(line, dtype), flush=True)


if __name__ == "__main__":
    main()
