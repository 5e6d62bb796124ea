"""Where wino.conv2d's per-call host time goes on CUDA (issue 10): a cProfile of many seen
calls and the per-call cost of each part the call makes, timed alone (us, median of 5 loops).

Run on a GPU machine from the repository root, after `doit compile:cuda`:
    python3 scripts/gpu_overhead_profile.py [MIOPEN_LINE]
"""

from __future__ import annotations

import cProfile
import pstats
import sys

import torch

import wino
from wino.bench.overhead import interleaved_us
from wino.runtime import api, cuda
from wino.runtime.plan import dispatch
from wino.runtime.program import GemmOp

LOOPS, REPEATS = 200, 15  # as wino bench --overhead: short loops, host-bound
CASE = "convfp16 -n 1 -c 64 -H 8 -W 8 -k 64 -y 3 -x 3 -p 1 -q 1"  # the bench's


def main() -> None:
    p = wino.Problem.from_miopen(sys.argv[1] if len(sys.argv) > 1 else CASE)
    x = torch.randn(p.N, p.H, p.W, p.C, device="cuda").half()
    w = torch.randn(p.K, 3, 3, p.Cg, device="cuda").half()
    y = torch.empty(p.N, p.Ho, p.Wo, p.K, device="cuda").half()
    plan = dispatch(p, target="cuda")
    backend = plan.backend()
    U = plan.transform_filter(w)
    for _ in range(50):
        wino.conv2d(x, w)
        plan.run(x, U=U, y=y)
    torch.cuda.synchronize()
    ctx = backend.context(x, None)
    prog = backend.program(plan)
    pointers = _pointers(backend, plan, prog, x, w)
    gemm = next(op for op in prog.chunks[0] if isinstance(op, GemmOp))
    parts = {
        "wino.conv2d(x, w)": lambda: wino.conv2d(x, w),
        "plan.run(x, U=U, y=y)": lambda: plan.run(x, U=U, y=y),
        "torch conv2d (NHWC as channels_last)": None,
        "dispatch (seen)": lambda: dispatch(p, target="cuda"),
        "conv2d key + problem": lambda: api._PROBLEMS.get(api._key(x, w, 1, 1, 1, 1)),
        "target_of(x)": lambda: api.target_of(x),
        "backend.call_key(x, w)": lambda: backend.call_key(x, w, None, None, None),
        "backend.describe(x)": lambda: backend.describe(x),
        "backend.restream": lambda: backend.restream(ctx, x, None),
        "torch current raw stream": lambda: cuda._torch_current_stream(0),
        "backend.output (new y)": lambda: backend.output(plan, x, None, ctx),
        "torch.empty(y)": lambda: torch.empty(
            (p.N, p.Ho, p.Wo, p.K), dtype=x.dtype, device=cuda._torch_devices(0)
        ),
        "x.new_empty(y)": lambda: x.new_empty((p.N, p.Ho, p.Wo, p.K)),
        "keeps_workspace (cuStreamIsCapturing)": lambda: backend.keeps_workspace(ctx),
        "own_workspace": lambda: backend.own_workspace(plan, ctx),
        "issue K1": lambda: backend.issue(prog.filter, pointers, ctx),
        "issue K3 (cuBLASLt matmul)": lambda: backend.issue_gemm(gemm, pointers, {}, ctx),
    }
    xc = x.permute(0, 3, 1, 2)
    wc = w.permute(0, 3, 1, 2)
    parts["torch conv2d (NHWC as channels_last)"] = lambda: torch.nn.functional.conv2d(
        xc, wc, padding=1
    )
    print(
        f"per call, us (median of {REPEATS} interleaved rounds of {LOOPS} calls, each loop "
        "synchronized; torch conv2d under inference_mode like every part)"
    )
    with torch.inference_mode():
        us = interleaved_us(parts, torch.cuda.synchronize, LOOPS, REPEATS)
    for name, value in us.items():
        print(f"  {name:42} {value:8.2f}")
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(LOOPS):
        wino.conv2d(x, w)
    profile.disable()
    torch.cuda.synchronize()
    print(f"\ncProfile of {LOOPS} wino.conv2d calls, by own time:")
    pstats.Stats(profile).sort_stats("tottime").print_stats(30)


def _pointers(backend, plan, prog, x, w):
    from wino.runtime.program import Source

    ws = backend.own_workspace(plan, backend.context(x, None))
    base = backend.pointer(ws)
    return {
        Source.W: backend.pointer(w),
        Source.WS: base,
        Source.U: base + prog.U.offset,
        Source.FS: base + prog.fs.offset,
        Source.NONE: backend.null,
    }


if __name__ == "__main__":
    main()
