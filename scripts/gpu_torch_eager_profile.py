"""ResNet-50 fp16 (batch 32, torchvision, random weights, channels_last) eager through
wino.torch.convert against cuDNN, the run graphs each plan keeps, a cProfile of 10 forwards,
and one converted layer alone against torch's (host time per call). Run on a GPU machine from
the repository root with WINO_BUILD at a cache holding the layers' kernels (a full
`doit compile:cuda`, or `python3 scripts/cuda_layers_build.py`, carried):
    python3 scripts/gpu_torch_eager_profile.py
"""

import cProfile
import pstats
import statistics
import time

import torch
import torchvision

import wino.torch as wt
from wino.runtime import plan as plan_mod

torch.backends.cudnn.benchmark = True
m = torchvision.models.resnet50().cuda().half().eval().to(memory_format=torch.channels_last)
x = torch.randn(32, 3, 224, 224, device="cuda").half().to(memory_format=torch.channels_last)
ref = torchvision.models.resnet50().cuda().half().eval().to(memory_format=torch.channels_last)
ref.load_state_dict(m.state_dict())
wt.convert(m)


def profiled(call, calls: int, rows: int) -> None:
    """A cProfile of ``calls`` calls (inference mode, synchronized): top ``rows`` by own time."""
    with torch.inference_mode():
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
        profile.disable()
    pstats.Stats(profile).sort_stats("tottime").print_stats(rows)


def timed(f, n=20):
    with torch.inference_mode():
        for _ in range(5):
            f()
        torch.cuda.synchronize()
        s = []
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(n):
                f()
            torch.cuda.synchronize()
            s.append((time.perf_counter() - t) / n * 1e3)
    return statistics.median(s)


print(f"eager ms: cudnn {timed(lambda: ref(x)):.3f} wino {timed(lambda: m(x)):.3f}")
plans = [v[1] for v in plan_mod._PLANS.values()]
for p in plans:
    g = p._graphs
    print(
        p.problem.label(),
        "graphs",
        None if g is None else g.graphs(),
        None if g is None else list(g._entries.values())[:10],
    )
profiled(lambda: m(x), 10, 25)
# one layer alone: host time per call
conv = [mod for mod in m.modules() if isinstance(mod, wt.Conv2d)][0]
xi = torch.randn(32, 64, 56, 56, device="cuda").half().to(memory_format=torch.channels_last)
tconv = torch.nn.Conv2d(64, 64, 3, padding=1, bias=False).cuda().half().eval()
torch_ms, wino_ms = timed(lambda: tconv(xi), 50), timed(lambda: conv(xi), 50)
print(f"layer1 conv alone, ms per call: torch {torch_ms:.4f} wino {wino_ms:.4f}")
profiled(lambda: conv(xi), 100, 20)
