"""compute-sanitizer driver for scripts/gpu_sanitize.sh (run on the H200 from the repo root).

    python3 scripts/gpu_sanitize.py build ROOT       build the cuda cache of the set into ROOT
    python3 scripts/gpu_sanitize.py run ROOT         run every plan of the set once (under a tool)
    python3 scripts/gpu_sanitize.py summarize TOOL LOG   one summary line for a tool's log

``build`` and ``run`` take ``--target c`` to smoke-test the driver on the host (numpy arrays).

The set: every tile's default pick for fp16 (fused prescale), bf16 and fp32 at F4x4, the wide-C
split prescale (K2a), a vec-1 split register K2, and every LDS-region K2 of the grid for fp16
and its LDS-rows K2 whose region holds C = 64 (one per tile, vector and stream).
WINO_SANITIZE_ONLY=TEXT keeps the cases whose label holds TEXT (`ldsrow`: the LDS-rows ones).
"""

from __future__ import annotations

import os
import re
import sys
from collections import Counter
from pathlib import Path

import numpy as np

from wino.grid import aot_stage_specs
from wino.pick import default_stage_specs
from wino.problem import Problem
from wino.specs import RtPrescaleSpec
from wino.vocab import TILES, DType, K2Path, Prescale, Stage, Tile

SMALL = Problem(N=2, C=64, H=13, W=11, K=32, pad_h=1, pad_w=1, dtype="fp16")
WIDE = Problem(N=1, C=2048, H=5, W=6, K=16, pad_h=1, pad_w=1, dtype="fp16")


def _with(problem: Problem, dtype: str) -> Problem:
    return Problem(**{**problem.__dict__, "dtype": DType(dtype)})


def _forced(problem: Problem, k2) -> dict:
    specs = dict(default_stage_specs(problem, k2.tile, target="cuda"))
    specs[Stage.INPUT] = k2
    if k2.prescale is Prescale.SPLIT:
        specs.setdefault(Stage.PRESCALE, RtPrescaleSpec(k2.tile, k2.io, 1))
    if k2.xdtype is not specs[Stage.FILTER].xdtype:
        specs[Stage.FILTER] = specs[Stage.FILTER].replace(xdtype=k2.xdtype)
    return dict(sorted(specs.items(), key=lambda kv: list(Stage).index(kv[0])))


def cases() -> list[tuple[str, Problem, dict]]:
    """(label, problem, stage specs) of the representative set."""
    out = [
        (f"default {t} fp16", SMALL, default_stage_specs(SMALL, t, target="cuda")) for t in TILES
    ]
    for dtype in ("bf16", "fp32"):
        p = _with(SMALL, dtype)
        out.append((f"default F4x4 {dtype}", p, default_stage_specs(p, Tile(4, 4), target="cuda")))
    out.append(
        ("wide C (split prescale)", WIDE, default_stage_specs(WIDE, Tile(4, 4), target="cuda"))
    )
    for k2 in aot_stage_specs(Stage.INPUT):
        if k2.io is not DType.FP16:
            continue
        rows = k2.path is K2Path.LDS_ROWS and k2.lds_lanes * k2.vec == SMALL.C  # one region
        if rows or k2.path is K2Path.LDS or (k2.vec == 1 and k2.prescale is Prescale.SPLIT):
            out.append((f"forced {k2.name}", SMALL, _forced(SMALL, k2)))
    only = os.environ.get("WINO_SANITIZE_ONLY", "")
    return [case for case in out if only in case[0]]


def build(root: Path, target: str = "cuda") -> None:
    from wino.builder import builder
    from wino.vocab import Target

    specs = {spec for _, _, specs in cases() for spec in specs.values()}
    ordered = sorted(specs, key=lambda s: s.name)
    result = builder.build(ordered, [Target(target)], root=root, jobs=16)
    if not result.manifests:
        sys.exit(f"nothing built for {target}: {result.messages}")
    print(f"built {len(specs)} kernels into {root}")


def _arrays(problem: Problem, target: str, rng: np.random.Generator):
    """Random x and w: numpy on the host, CuPy on CUDA (bf16 through torch: CuPy has none)."""
    shapes = ((problem.N, problem.H, problem.W, problem.C), (problem.K, 3, 3, problem.Cg))
    if target == "c":
        from wino.runtime.arrays import numpy_dtype

        return [rng.standard_normal(s).astype(numpy_dtype(problem.dtype)) for s in shapes]
    if problem.dtype is DType.BF16:
        import torch

        return [torch.randn(s, device="cuda").to(torch.bfloat16) for s in shapes]
    import cupy as cp

    dtype = cp.float16 if problem.dtype is DType.FP16 else cp.float32
    return [cp.asarray(rng.standard_normal(s), dtype=dtype) for s in shapes]


def _workspace(plan, target: str):
    """None (the plan allocates it), or with WINO_SANITIZE_ZERO_WORKSPACE=1 a zero-filled one:
    initcheck then counts only reads of memory no operation wrote, the workspace excepted (to
    tell reads of M, which cuBLAS writes, from reads outside every buffer)."""
    if target != "cuda" or os.environ.get("WINO_SANITIZE_ZERO_WORKSPACE", "") in ("", "0"):
        return None
    import cupy as cp

    return cp.zeros(plan.workspace_bytes, dtype=cp.uint8)


def run(root: Path, target: str = "cuda") -> None:
    from wino.runtime import dispatch

    kernels = Counter()
    for label, problem, specs in cases():
        plan = dispatch(problem, target=target, cache_root=root, specs=specs)
        x, w = _arrays(problem, target, np.random.default_rng(7))
        plan.run(x, w, workspace=_workspace(plan, target))
        if target == "cuda":
            import cupy as cp

            cp.cuda.get_current_stream().synchronize()
        names = [spec.name for spec in plan.specs.values()]  # (K3 is cuBLAS: no name)
        kernels.update(names)
        print(f"ran {label}: {' '.join(names)}")
    print(f"ran {len(cases())} plans, {len(kernels)} distinct kernels")


_AT = re.compile(r"^=+\s+at\s+(?:0x[0-9a-f]+\s+in\s+)?([A-Za-z_][\w]*)", re.M)
_RACE = re.compile(r"Race reported between \w+ access at ([A-Za-z_]\w*)")
_SUMMARY = re.compile(
    r"(?:ERROR SUMMARY: (\d+) error|RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) error)"
)
#: Kernels that are not wino's (cuBLAS's GEMMs): their reports are listed apart.
_LIBRARY = re.compile(r"^(nvjet_|sm\d+_xmma|cutlass|ampere_|gemm)")


def summarize(tool: str, log: Path) -> int:
    text = log.read_text(errors="replace")
    total = _SUMMARY.findall(text)
    ran = re.findall(r"^ran (\d+) plans", text, re.M)
    if not total or not ran:
        print(f"{tool}: DID NOT FINISH (see {log})")
        return 1
    kernels = Counter(_AT.findall(text)) + Counter(_RACE.findall(text))
    ours = Counter({k: n for k, n in kernels.items() if not _LIBRARY.match(k)})
    library = Counter({k: n for k, n in kernels.items() if _LIBRARY.match(k)})
    errors = int(next(a or b for a, b in total[-1:]))
    worst = ", ".join(f"{k}: {n}" for k, n in ours.most_common(8))
    theirs = ", ".join(f"{k}: {n}" for k, n in library.most_common(4))
    line = f"{tool}: {errors} errors over {ran[-1]} plans"
    line += f" (wino: {worst or 'none'}; library: {theirs or 'none'})" if errors else ""
    print(line)
    return 1 if ours else 0


def main(argv: list[str]) -> int:
    target = "cuda"
    if argv[-2:-1] == ["--target"]:
        target, argv = argv[-1], argv[:-2]
    if len(argv) == 2 and argv[0] in ("build", "run"):
        (build if argv[0] == "build" else run)(Path(argv[1]), target)
        return 0
    if len(argv) == 3 and argv[0] == "summarize":
        return summarize(argv[1], Path(argv[2]))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
