"""Verify and time problems end to end: the engine of ``wino run``.

``run_cases`` dispatches each problem (a refusal is reported with its rule id, never raised),
runs it on N(0, 1) inputs of the problem's dtype, measures max|out - ref| / max|ref| against the
float64 reference convolution and checks it against ``bound_for(tile, dtype, xdtype)``, then
times the plan (the median of a few runs after the verifying run, which is the warm-up).
``format_results`` prints one line per case and a summary; wino/cli.py's ``run`` handler calls both.
"""

from __future__ import annotations

import enum
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..pick import default_xdtype
from ..problem import Problem
from ..refusals import Refused
from ..vocab import DType, Target, Tile, coerce
from .arrays import numpy_dtype
from .plan import Plan, dispatch
from .reference import conv2d_reference, relative_error

#: Tiles grouped by how much the transforms amplify rounding (the points they interpolate at).
_F2x2, _F4x2, _F4x4, _F6x6 = Tile(2, 2), Tile(4, 2), Tile(4, 4), Tile(6, 6)
FAMILY: dict[Tile, Tile] = {
    Tile(2, 2): _F2x2,
    Tile(4, 2): _F4x2,
    Tile(2, 4): _F4x2,
    Tile(6, 2): _F4x2,
    Tile(2, 6): _F4x2,
    Tile(4, 4): _F4x4,
    Tile(6, 4): _F4x4,
    Tile(4, 6): _F4x4,
    Tile(6, 6): _F6x6,
}

#: max|out - ref| / max|ref| bounds per tile family, io dtype and transformed storage dtype
#: (N(0,1) data, C in 64..4096): the issue's, tightened where it left room. Measured on the host
#: (C = 256, 12x12 and 14x14 outputs, K = 64, max over 24 seeds), as fp32 / fp16 / bf16 with fp16
#: storage / bf16 with bf16 storage: F2x2 7.9e-7 / 7.2e-4 / 3.0e-3 / 5.0e-3; F4x2 family
#: 4.2e-6 / 3.2e-3 / 4.5e-3 / 2.6e-2; F4x4 family 5.5e-6 / 1.4e-2 / 1.5e-2 (F6x4) / 9.0e-2;
#: F6x6 6.8e-6 / 1.4e-2 / 1.6e-2 / 0.11. bf16 with fp16 storage (the GPUs' default pick) is
#: about 6x more accurate than bf16 storage. The same bounds hold with M stored in fp16 (the
#: GPUs' default for 16-bit io where the fp16_m_range rule admits it): it adds at most one 2^-11
#: rounding per bin through the output transform, no more than fp16 V storage already does
#: (docs/BENCHMARKS.md); H200, public layers, F4x4: fp16 1.0-1.6e-2, bf16 1.3-1.5e-2 (fp32 M:
#: 0.8-1.05e-2). 16-bit io with fp32 storage (the host's default pick, which keeps M in fp32:
#: M is never narrower than V) computes like fp32 and rounds y once: its bound is half an ulp
#: of the io dtype (2^-11 for fp16, 2^-8 for bf16) plus the family's fp32 bound, rounded up;
#: measured (same cases, 12 seeds) 3.6e-4 (fp16) and 2.9e-3 (bf16) on every tile: y's rounding
#: is all of it.
BOUNDS: dict[tuple[Tile, DType, DType], float] = {
    (_F2x2, DType.FP32, DType.FP32): 2e-6,
    (_F2x2, DType.FP16, DType.FP16): 2e-3,
    (_F2x2, DType.BF16, DType.FP16): 1e-2,
    (_F2x2, DType.BF16, DType.BF16): 1.5e-2,
    (_F2x2, DType.FP16, DType.FP32): 5e-4,
    (_F2x2, DType.BF16, DType.FP32): 4e-3,
    (_F4x2, DType.FP32, DType.FP32): 1e-5,
    (_F4x2, DType.FP16, DType.FP16): 1e-2,
    (_F4x2, DType.BF16, DType.FP16): 2e-2,
    (_F4x2, DType.BF16, DType.BF16): 6e-2,
    (_F4x2, DType.FP16, DType.FP32): 5e-4,
    (_F4x2, DType.BF16, DType.FP32): 4e-3,
    (_F4x4, DType.FP32, DType.FP32): 4e-5,
    (_F4x4, DType.FP16, DType.FP16): 3e-2,
    (_F4x4, DType.BF16, DType.FP16): 2e-2,
    (_F4x4, DType.BF16, DType.BF16): 0.2,
    (_F4x4, DType.FP16, DType.FP32): 6e-4,
    (_F4x4, DType.BF16, DType.FP32): 4e-3,
    (_F6x6, DType.FP32, DType.FP32): 6e-5,
    (_F6x6, DType.FP16, DType.FP16): 4e-2,
    (_F6x6, DType.BF16, DType.FP16): 4e-2,
    (_F6x6, DType.BF16, DType.BF16): 0.25,
    (_F6x6, DType.FP16, DType.FP32): 6e-4,
    (_F6x6, DType.BF16, DType.FP32): 4e-3,
}


class Status(enum.Enum):
    """A case's outcome, printed as its value."""

    PASS = "PASS"  # error within the bound
    FAIL = "FAIL"  # error past the bound
    REFUSED = "REFUSED"  # a refusal rule (a skip, not a failure)
    ERROR = "ERROR"  # no plan, no binary, or the run raised


PASS, FAIL, REFUSED, ERROR = Status


def bound_for(tile: Tile | str, dtype: DType | str, xdtype: DType | str | None = None) -> float:
    """The error bound of a tile, io dtype and transformed storage dtype (default: the GPUs'
    default pick's, fp16 for bf16; ``default_xdtype(dtype, target)`` names a target's)."""
    tile = Tile.parse(tile) if isinstance(tile, str) else tile
    dtype = DType.parse(dtype) if isinstance(dtype, str) else dtype
    if xdtype is None:
        xdtype = default_xdtype(dtype)
    xdtype = DType.parse(xdtype) if isinstance(xdtype, str) else xdtype
    key = (FAMILY[tile], dtype, xdtype)
    if key not in BOUNDS:
        raise ValueError(
            f"no error bound for {tile.name} io {dtype.short} with "
            f"{xdtype.short} storage (not a supported pairing)"
        )
    return BOUNDS[key]


@dataclass
class CaseResult:
    """One problem's outcome: PASS / FAIL (error against bound), REFUSED (rule id), ERROR."""

    problem: Problem
    status: Status
    target: Target | None = None
    tile: Tile | None = None
    xdtype: str = ""
    error: float | None = None
    bound: float | None = None
    time_s: float | None = None
    rule: str = ""
    message: str = ""
    kernels: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """Strings parse to members ("PASS", "c", "F4x4"); a bad one lists the valid values."""
        self.status = coerce(Status, self.status, "CaseResult.status")
        self.target = None if self.target in (None, "") else coerce(Target, self.target, "target")
        self.tile = None if self.tile in (None, "") else coerce(Tile, self.tile, "tile")

    @property
    def ok(self) -> bool:
        """Passed, or refused (a refusal is a skip, not a failure)."""
        return self.status in (PASS, REFUSED)


# Arrays on the plan's target -------------------------------------------------------------------
def _inputs(problem: Problem, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """N(0,1) x (NHWC) and w (KRSC), rounded to the problem's dtype."""
    dtype = numpy_dtype(problem.dtype)
    x = rng.standard_normal((problem.N, problem.H, problem.W, problem.C)).astype(dtype)
    w = rng.standard_normal((problem.K, problem.R, problem.S, problem.Cg)).astype(dtype)
    return x, w


def _to_device(array: np.ndarray, target: Target):
    """Host arrays stay numpy; on CUDA, torch tensors when torch is there (it carries bf16),
    else CuPy arrays (fp16 / fp32 only)."""
    if target is Target.C:
        return array
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        tdtype = {"float16": torch.float16, "float32": torch.float32, "bfloat16": torch.bfloat16}[
            str(array.dtype)
        ]
        return torch.from_numpy(array.astype(np.float32)).to("cuda").to(tdtype)
    if str(array.dtype) == "bfloat16":
        raise ValueError("bf16 on the cuda target needs torch (CuPy has no bfloat16)")
    import cupy

    return cupy.asarray(array)


def _to_host(array) -> np.ndarray:
    if isinstance(array, np.ndarray):
        return array
    if type(array).__module__.startswith("torch"):
        return array.float().cpu().numpy()
    import cupy

    return cupy.asnumpy(array)


def _synchronize(target: Target) -> None:
    if target is Target.CUDA:
        import cupy

        cupy.cuda.Device().synchronize()


def _buffers(plan: Plan, x):
    """Preallocated y and workspace on x's device (so the timed runs allocate nothing)."""
    p = plan.problem
    if isinstance(x, np.ndarray):
        return (
            np.empty((p.N, p.Ho, p.Wo, p.K), dtype=x.dtype),
            np.empty(plan.workspace_bytes, dtype=np.uint8),
        )
    import cupy

    if type(x).__module__.startswith("torch"):
        import torch

        y = torch.empty((p.N, p.Ho, p.Wo, p.K), dtype=x.dtype, device=x.device)
    else:
        y = cupy.empty((p.N, p.Ho, p.Wo, p.K), dtype=x.dtype)
    return y, cupy.empty(plan.workspace_bytes, dtype=cupy.uint8)


# Running ---------------------------------------------------------------------------------------
def _time_plan(plan: Plan, x, w, repeats: int) -> float:
    """Median wall time of plan.run with the filter transformed once (U reused, as in
    inference) and y / workspace preallocated."""
    y, workspace = _buffers(plan, x)
    U = plan.transform_filter(w)
    _synchronize(plan.target)
    times = []
    for _ in range(max(repeats, 1)):
        start = time.perf_counter()
        plan.run(x, U=U, y=y, workspace=workspace)
        _synchronize(plan.target)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def run_case(
    problem: Problem,
    target: Target | str | None = None,
    tile: Tile | str | None = None,
    seed: int = 0,
    *,
    cache_root: Path | None = None,
    repeats: int = 5,
    **dispatch_options,
) -> CaseResult:
    """Dispatch, verify and time one problem (see the module docstring)."""
    try:
        plan = dispatch(
            problem, target=target, tile=tile, cache_root=cache_root, **dispatch_options
        )
    except Refused as refusal:
        return CaseResult(problem, REFUSED, rule=refusal.rule, message=refusal.message)
    except (KeyError, FileNotFoundError, RuntimeError, ValueError) as err:
        return CaseResult(problem, ERROR, message=str(err.args[0] if err.args else err))
    result = CaseResult(
        problem,
        ERROR,
        target=plan.target,
        tile=plan.tile,
        xdtype=plan.xdtype.short,
        kernels=tuple(s.name for s in plan.steps),
    )
    try:
        x_host, w_host = _inputs(problem, np.random.default_rng(seed))
        x, w = _to_device(x_host, plan.target), _to_device(w_host, plan.target)
        y = _to_host(plan.run(x, w))  # the verifying run is the warm-up
        reference = conv2d_reference(
            x_host,
            w_host,
            (problem.pad_h, problem.pad_w),
            (problem.dil_h, problem.dil_w),
            problem.groups,
        )
        result.error = relative_error(y, reference)
        result.bound = bound_for(plan.tile, problem.dtype, plan.xdtype)
        result.time_s = _time_plan(plan, x, w, repeats)
    except (KeyError, RuntimeError, ValueError, OSError) as err:
        result.message = str(err.args[0] if err.args else err)
        return result
    result.status = PASS if result.error <= result.bound else FAIL
    return result


def run_cases(
    problems,
    target: Target | str | None = None,
    tile: Tile | str | None = None,
    seed: int = 0,
    *,
    cache_root: Path | None = None,
    repeats: int = 5,
    **dispatch_options,
) -> list[CaseResult]:
    """``run_case`` for each problem; case i draws its inputs from the seed (seed, i)."""
    return [
        run_case(
            problem,
            target,
            tile,
            seed=np.random.SeedSequence([seed, index]),
            cache_root=cache_root,
            repeats=repeats,
            **dispatch_options,
        )
        for index, problem in enumerate(problems)
    ]


# Printing --------------------------------------------------------------------------------------
def _time_text(seconds: float | None) -> str:
    if seconds is None:
        return ""
    return f"{seconds * 1e3:.3f} ms" if seconds < 1 else f"{seconds:.3f} s"


def format_results(results: list[CaseResult]) -> str:
    """One line per case (status, problem, tile and storage, error against bound, time) and a
    summary line."""
    lines = []
    for r in results:
        head = f"{r.status.value:<8} {r.problem.label()}"
        if r.status is REFUSED:
            lines.append(f"{head}  [{r.rule}] {r.message}")
        elif r.error is None:
            where = f"  {r.tile} x{r.xdtype}" if r.tile else ""
            lines.append(f"{head}{where}  {r.message}")
        else:
            relation = "<=" if r.status is PASS else ">"
            lines.append(
                f"{head}  {r.tile} x{r.xdtype} on {r.target.value}  err {r.error:.2e} "
                f"{relation} bound {r.bound:.1e}  time {_time_text(r.time_s)}"
            )
    count = {s: sum(r.status is s for r in results) for s in Status}
    lines.append(
        f"{len(results)} case(s): {count[PASS]} passed, {count[FAIL]} failed, "
        f"{count[ERROR]} error(s), {count[REFUSED]} refused (skipped)"
    )
    return "\n".join(lines)
