"""``wino.conv2d(x, w, ...)``: build the Problem from the arrays and run it."""

from __future__ import annotations

import numbers

from ..problem import Problem
from ..vocab import Activation, Epilogue, Tile, coerce
from .arrays import dtype_of, target_of
from .plan import dispatch


def _pair(value, name: str) -> tuple[int, int]:
    def is_int(v) -> bool:
        return isinstance(v, numbers.Integral) and not isinstance(v, bool)

    if is_int(value):
        return int(value), int(value)
    try:
        a, b = value
    except (TypeError, ValueError):
        a = b = None
    if not (is_int(a) and is_int(b)):
        raise ValueError(f"conv2d: {name} must be an int or a pair of ints, got {value!r}")
    return int(a), int(b)


def _dtype(array, name: str):
    try:
        return dtype_of(array)
    except TypeError as err:
        raise ValueError(f"conv2d: {name}: {err}") from None


def _shape(array, name: str, layout: str) -> tuple[int, int, int, int]:
    shape = getattr(array, "shape", None)
    if shape is None or len(shape) != 4:
        got = tuple(shape) if shape is not None else type(array).__name__
        raise ValueError(f"conv2d: {name} must be a 4-D {layout} array, got {got}")
    return tuple(int(e) for e in shape)


def _layout_hint(x_shape, w_shape, groups: int) -> str:
    """A hint when x and w look like NCHW / KCRS (PyTorch's shapes) instead of NHWC / KRSC."""
    kcrs = tuple(w_shape[2:]) == (3, 3)
    nchw = int(x_shape[1]) == int(w_shape[1]) * groups
    if not (kcrs or nchw):
        return ""
    return (
        f" (x {tuple(x_shape)} and w {tuple(w_shape)} look like NCHW / KCRS; wino takes NHWC x "
        "and KRSC w: pass x.transpose(0, 2, 3, 1) and w.transpose(0, 2, 3, 1), or "
        ".permute(0, 2, 3, 1) for torch tensors, which is a free view of channels_last memory)"
    )


def problem_of(x, w, padding=1, dilation=1, groups: int = 1, stride=1) -> Problem:
    """The Problem of NHWC input x and KRSC filter w. Raises ValueError naming the argument
    that is wrong (shape, dtype, padding, dilation, stride, groups)."""
    n, h, wd, c = _shape(x, "x", "NHWC")
    k, r, s, cg = _shape(w, "w", "KRSC")
    if not isinstance(groups, numbers.Integral) or isinstance(groups, bool) or groups < 1:
        raise ValueError(f"conv2d: groups must be a positive int, got {groups!r}")
    groups = int(groups)
    if cg * groups != c:
        raise ValueError(
            f"conv2d: w has C/G = {cg} channels but x has C = {c} with groups = "
            f"{groups}; expected w.shape[3] == C / groups" + _layout_hint(x.shape, w.shape, groups)
        )
    dx, dw_ = _dtype(x, "x"), _dtype(w, "w")
    if dx is not dw_:
        raise ValueError(f"conv2d: x is {x.dtype} but w is {w.dtype}; pass one dtype")
    (ph, pw), (dh, dw), (sh, sw) = (
        _pair(padding, "padding"),
        _pair(dilation, "dilation"),
        _pair(stride, "stride"),
    )
    try:
        return Problem(
            N=n,
            C=c,
            H=h,
            W=wd,
            K=k,
            R=r,
            S=s,
            pad_h=ph,
            pad_w=pw,
            stride_h=sh,
            stride_w=sw,
            dil_h=dh,
            dil_w=dw,
            groups=groups,
            dtype=dx,
        )
    except ValueError as err:
        raise ValueError(f"conv2d: {err}") from None


#: Problems by the arguments that make them (Problem validates on construction: a seen call
#: skips it). Keyed by array type, shapes, dtypes and the options; unhashable options skip it.
_PROBLEMS: dict[tuple, Problem] = {}


def _key(x, w, padding, dilation, groups, stride) -> tuple | None:
    try:
        key = (type(x), tuple(x.shape), tuple(w.shape), x.dtype, w.dtype)
        key += (padding, dilation, groups, stride)
        hash(key)
    except (AttributeError, TypeError):
        return None
    return key


def conv2d(
    x,
    w,
    padding=1,
    dilation=1,
    groups: int = 1,
    tile: Tile | str | None = None,
    stride=1,
    bias=None,
    activation: Activation | str | None = None,
    **dispatch_options,
):
    """y = act(conv2d(x, w) + bias) from the cache: numpy arrays on the host, CuPy arrays or
    torch CUDA tensors on the GPU (no copies). ``bias``: [K], the dtype and device of x;
    ``activation``: None, "relu" or an Activation. Both are the last kernel's epilogue, in
    fp32 before y's conversion. Raises Refused (with its rule id) for problems wino does not
    serve (stride != 1, filters other than 3x3, a tile without the epilogue...), ValueError
    for bad arguments (before any kernel runs)."""
    epilogue = _epilogue(bias, activation)
    key = _key(x, w, padding, dilation, groups, stride)
    problem = _PROBLEMS.get(key) if key is not None else None
    if problem is None:
        problem = problem_of(x, w, padding, dilation, groups, stride)
        if key is not None and len(_PROBLEMS) < 4096:
            _PROBLEMS[key] = problem
    if epilogue is not Epilogue.NONE:
        dispatch_options["epilogue"] = epilogue
    plan = dispatch(problem, target=target_of(x), tile=tile, **dispatch_options)
    return plan.run(x, w, bias=bias)


def _epilogue(bias, activation) -> Epilogue:
    """The epilogue of conv2d's bias and activation arguments."""
    act = Activation.NONE if activation is None else coerce(Activation, activation, "activation")
    return Epilogue.of(bias is not None, act)
