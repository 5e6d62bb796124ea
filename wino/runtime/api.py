"""``wino.conv2d(x, w, ...)``: build the Problem from the arrays and run it."""

from __future__ import annotations

from ..problem import Problem
from ..vocab import Tile
from .arrays import dtype_of, target_of
from .plan import dispatch


def _pair(value, name: str) -> tuple[int, int]:
    if isinstance(value, int) and not isinstance(value, bool):
        return value, value
    try:
        a, b = value
        return int(a), int(b)
    except (TypeError, ValueError):
        raise ValueError(f"conv2d: {name} must be an int or a pair of ints, got {value!r}") from None


def problem_of(x, w, padding=1, dilation=1, groups: int = 1) -> Problem:
    """The Problem of NHWC input x and KRSC filter w."""
    if len(x.shape) != 4 or len(w.shape) != 4:
        raise ValueError(f"conv2d: x must be NHWC and w KRSC (4-D each), got shapes "
                         f"{tuple(x.shape)} and {tuple(w.shape)}")
    n, h, wd, c = (int(e) for e in x.shape)
    k, r, s, cg = (int(e) for e in w.shape)
    if cg * groups != c:
        raise ValueError(f"conv2d: w has C/G = {cg} channels but x has C = {c} with groups = "
                         f"{groups}; expected w.shape[3] == C / groups")
    if dtype_of(x) is not dtype_of(w):
        raise ValueError(f"conv2d: x is {x.dtype} but w is {w.dtype}; pass one dtype")
    (ph, pw), (dh, dw) = _pair(padding, "padding"), _pair(dilation, "dilation")
    return Problem(N=n, C=c, H=h, W=wd, K=k, R=r, S=s, pad_h=ph, pad_w=pw, dil_h=dh, dil_w=dw,
                   groups=groups, dtype=dtype_of(x))


def conv2d(x, w, padding=1, dilation=1, groups: int = 1, tile: Tile | str | None = None,
           **dispatch_options):
    """y = conv2d(x, w) from the cache: numpy arrays on the host, CuPy arrays or torch CUDA
    tensors on the GPU (no copies). Raises Refused for problems wino does not serve."""
    problem = problem_of(x, w, padding, dilation, groups)
    plan = dispatch(problem, target=target_of(x), tile=tile, **dispatch_options)
    return plan.run(x, w)
