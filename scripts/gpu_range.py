"""The fp32 tile scale on an H200: what it costs. From the repository root, with CuPy and nvcc
(PyTorch optional: cuDNN strict fp32 for context), wino's dependencies on PYTHONPATH:

    python3 scripts/gpu_range.py build   # the cubins this needs, into $WINO_BUILD
    python3 scripts/gpu_range.py time    # fp32 scaled (the grid's pick) vs unscaled, two layers

Per layer (two public fp32 layers, the tile dispatch picks, U cached, CUDA-graph replays): the
plan with the scaled K2 (the default pick), the same plan with the unscaled K2 (prescale none,
what fp32 ran before), their ratio, the K2 names, and cuDNN's time where PyTorch is present.
Both outputs must be bit-identical on N(0,1) data (a power-of-two scale is exact): checked.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from wino.builder import builder
from wino.pick import default_stage_specs
from wino.problem import Problem
from wino.runtime import dispatch
from wino.runtime.plan import default_tile
from wino.vocab import Prescale, Stage, Target

ROOT = Path(os.environ.get("WINO_BUILD") or "/tmp/wino-range-build")
LAYERS = (
    "conv -n 64 -c 256 -H 14 -W 14 -k 256 -y 3 -x 3 -p 1 -q 1",  # ResNet-50 stage 3
    "conv -n 16 -c 128 -H 56 -W 56 -k 256 -y 3 -x 3 -p 1 -q 1",  # VGG-16
)


def _pipelines(problem: Problem) -> dict[str, dict]:
    """{"scaled": the default pick, "unscaled": its K2 without the tile scale, no K2a}."""
    scaled = default_stage_specs(problem, default_tile(problem), target=Target.CUDA)
    k2 = scaled[Stage.INPUT]
    unscaled = {s: v for s, v in scaled.items() if s is not Stage.PRESCALE}
    unscaled[Stage.INPUT] = replace(k2, prescale=Prescale.NONE, block=256)
    return {"scaled": scaled, "unscaled": unscaled}


def build() -> None:
    specs = set()
    for line in LAYERS:
        for pipeline in _pipelines(Problem.from_miopen(line)).values():
            specs.update(pipeline.values())
    result = builder.build(
        sorted(specs, key=lambda s: s.name), [Target.CUDA], root=ROOT, jobs=os.cpu_count() or 4
    )
    if not result.manifests:
        sys.exit(f"build failed: {result.messages}")
    print(f"built {len(specs)} kernels into {ROOT}")


def _cudnn_us(x, w) -> float | None:
    try:
        import torch
    except ImportError:
        return None
    from wino.bench.compare import configure
    from wino.bench.timing import Settings, TorchGraphTimer

    configure(torch)  # strict fp32: TF32 off
    xt = torch.as_tensor(x, device="cuda").permute(0, 3, 1, 2)
    wt = torch.as_tensor(w, device="cuda").permute(0, 3, 1, 2)
    timer = TorchGraphTimer(Settings(warmup=5, repeats=20))
    return timer.time_us(lambda s: torch.nn.functional.conv2d(xt, wt, None, 1, 1))


def _timed(cupy, timer, plan, xd, wd) -> tuple[float, np.ndarray]:
    """(us per call with U cached, the output); on the timer's stream, which the graph it
    captures must be named (docs/BENCHMARKS.md)."""
    p = plan.problem
    y = cupy.empty((p.N, p.Ho, p.Wo, p.K), cupy.float32)
    ws = cupy.empty(plan.workspace_bytes, cupy.uint8)
    u = plan.transform_filter(wd, ws)
    stream = timer.stream
    t = timer.time_us(lambda s: plan.run(xd, y=y, workspace=ws, U=u, stream=stream))
    return t, cupy.asnumpy(y)


def time_layers() -> None:
    import cupy

    from wino.bench.timing import CupyGraphTimer, Settings

    timer = CupyGraphTimer(Settings(warmup=5, repeats=20))
    print("layer | tile | scaled us | unscaled us | scaled/unscaled | cudnn us | K2s")
    bad = 0
    for line in LAYERS:
        problem = Problem.from_miopen(line)
        rng = np.random.default_rng(0)
        x = rng.standard_normal((problem.N, problem.H, problem.W, problem.C), np.float32)
        w = rng.standard_normal((problem.K, 3, 3, problem.C), np.float32)
        xd, wd = cupy.asarray(x), cupy.asarray(w)
        times, outs, names = {}, {}, {}
        for label, specs in _pipelines(problem).items():
            plan = dispatch(problem, target="cuda", cache_root=ROOT, specs=specs)
            times[label], outs[label] = _timed(cupy, timer, plan, xd, wd)
            names[label] = specs[Stage.INPUT].name
        same = outs["scaled"].tobytes() == outs["unscaled"].tobytes()
        bad += not same
        cudnn = _cudnn_us(x, w)
        print(
            f"{problem.label()} | {plan.tile} | {times['scaled']:.1f} | {times['unscaled']:.1f} | "
            f"{times['scaled'] / times['unscaled']:.3f} | "
            f"{'-' if cudnn is None else f'{cudnn:.1f}'} | {names['scaled']}, {names['unscaled']}"
            f"{'' if same else ' | OUTPUTS DIFFER'}"
        )
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    {"build": build, "time": time_layers}[sys.argv[1]]()
