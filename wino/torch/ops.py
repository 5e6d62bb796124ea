"""The ``wino::conv2d`` custom op: a real implementation that runs a wino plan on the NHWC
view of channels_last tensors, and a fake one (shapes and strides only) for torch.compile.

The real implementation dispatches (plans are cached by wino.dispatch), transforms the filter
once per weight version (the (U, fs) pair is kept on the weight tensor itself, so it lives and
dies with it) and applies the bias and the activation ("relu": a ReLU fused after the conv) in
the last kernel's epilogue (fp32, before y's conversion). A tile whose kernels have no such
epilogue (``epilogue_not_in_grid``) runs without it and adds the bias / applies the ReLU with
in-place torch ops. A problem wino refuses (its rule id is logged once) runs torch's
convolution (and ReLU) instead.
"""

import logging

import torch
from torch import Tensor

from ..problem import Problem
from ..refusals import Refused
from ..runtime.arrays import dtype_of
from ..runtime.plan import dispatch
from ..vocab import Activation, Epilogue, Stage, Target, coerce

log = logging.getLogger("wino.torch")

_U_ATTR = "_wino_filters"  # on the weight tensor: {K1 kernel name: (version, data_ptr, U)}
_PROBLEMS: dict[tuple, Problem] = {}
_LOGGED: set[tuple[str, str]] = set()


def output_size(x: Tensor, weight: Tensor, padding, dilation) -> tuple[int, int, int, int]:
    n, _, h, w = x.shape
    return (
        n,
        weight.shape[0],
        h + 2 * padding[0] - 2 * dilation[0],
        w + 2 * padding[1] - 2 * dilation[1],
    )


def check(x: Tensor, weight: Tensor, bias: Tensor | None, groups: int) -> None:
    """Raise ValueError naming the argument wino cannot take as it is (before any kernel)."""
    if x.dim() != 4 or weight.dim() != 4 or tuple(weight.shape[2:]) != (3, 3):
        raise ValueError(
            f"wino.conv2d: expected x NCHW and weight [K, C/groups, 3, 3], got x "
            f"{tuple(x.shape)} and weight {tuple(weight.shape)}"
        )
    if not x.permute(0, 2, 3, 1).is_contiguous():
        raise ValueError(
            "x: wino reads NCHW tensors in channels_last memory (the NHWC view, no copy); "
            "pass x.contiguous(memory_format=torch.channels_last) or convert the model and "
            "its input with .to(memory_format=torch.channels_last)"
        )
    for label, t in (("weight", weight), ("bias", bias)):
        if t is not None and t.device != x.device:
            raise ValueError(f"{label}: on {t.device}, but x is on {x.device}")
        if t is not None and t.dtype != x.dtype:
            raise ValueError(f"{label}: {t.dtype}, but x is {x.dtype}; pass one dtype")
    try:
        dtype_of(x)
    except TypeError:
        raise ValueError(f"x: {x.dtype} is not served; use float16, bfloat16 or float32") from None
    if x.shape[1] != weight.shape[1] * groups:
        raise ValueError(
            f"weight: {weight.shape[1]} input channels per group but x has {x.shape[1]} "
            f"channels and groups = {groups}"
        )


def problem_of(x: Tensor, weight: Tensor, padding, dilation, groups: int) -> Problem:
    """The Problem of the call (cached by its extents: Problem validates on construction)."""
    key = (tuple(x.shape), tuple(weight.shape), tuple(padding), tuple(dilation), groups, x.dtype)
    problem = _PROBLEMS.get(key)
    if problem is None:
        n, c, h, w = x.shape
        problem = Problem(
            N=n,
            C=c,
            H=h,
            W=w,
            K=weight.shape[0],
            pad_h=padding[0],
            pad_w=padding[1],
            dil_h=dilation[0],
            dil_w=dilation[1],
            groups=groups,
            dtype=dtype_of(x),
        )
        _PROBLEMS[key] = problem
    return problem


def _warn_once(key: tuple[str, str], message: str, *args) -> None:
    """log.warning(message, *args) the first time ``key`` is seen in this process."""
    if key not in _LOGGED:
        _LOGGED.add(key)
        log.warning(message, *args)


def _transformed(plan, weight: Tensor):
    """(U, fs) of ``weight`` for ``plan``, from its [K][3][3][C/G] view."""
    return plan.transform_filter(weight.detach().permute(0, 2, 3, 1).contiguous())


def filters(plan, weight: Tensor):
    """(U, fs) of ``weight`` for ``plan``: transformed once per weight version. An inference
    tensor (a weight made under ``torch.inference_mode``) has no version counter, so an
    in-place update could not be seen: its filter is transformed on every call (logged once,
    with the way to cache it)."""
    if weight.is_inference():
        _warn_once(
            ("inference_weight", ""),
            "wino.torch: a weight is an inference tensor (made under torch.inference_mode), "
            "which tracks no version, so its filter is transformed on every call; create or "
            "load the model outside inference_mode to cache it",
        )
        return _transformed(plan, weight)
    name = plan.specs[Stage.FILTER].name  # the filter transform decides U
    cached = getattr(weight, _U_ATTR, None)
    if cached is None:
        cached = {}
        setattr(weight, _U_ATTR, cached)
    key = (weight._version, weight.data_ptr())
    hit = cached.get(name)
    if hit is not None and hit[0] == key:
        return hit[1]
    U = _transformed(plan, weight)
    cached[name] = (key, U)
    return U


def _refused(x, weight, bias, padding, dilation, groups, relu: bool, err: Refused) -> Tensor:
    key = (err.rule, f"{tuple(x.shape)} {tuple(weight.shape)}")
    _warn_once(key, "wino refuses %s (rule %s), running torch's conv2d: %s", key[1], key[0], err)
    y = torch.nn.functional.conv2d(x, weight, bias, 1, tuple(padding), tuple(dilation), groups)
    y = y.contiguous(memory_format=torch.channels_last)
    return y.relu_() if relu else y


def activation_of(activation: str) -> Activation:
    """The op's ``activation`` argument ("none" or "relu") as an Activation (ValueError naming
    the argument and the values otherwise)."""
    return coerce(Activation, activation, "activation")


def run(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    padding: list[int],
    dilation: list[int],
    groups: int,
    activation: str = "none",
) -> Tensor:
    """y = act(conv2d(x, weight) + bias), 3x3, stride 1, act "none" or "relu"; x NCHW in
    channels_last memory, y too."""
    check(x, weight, bias, groups)
    act = activation_of(activation)
    try:
        problem = problem_of(x, weight, padding, dilation, groups)
        plan = _plan(problem, x, bias, act)
    except Refused as err:
        return _refused(x, weight, bias, padding, dilation, groups, act is Activation.RELU, err)
    y = torch.empty(
        output_size(x, weight, padding, dilation),
        dtype=x.dtype,
        device=x.device,
        memory_format=torch.channels_last,
    )
    fused_bias = bias.detach() if plan.epilogue.bias else None
    plan.run(
        x.detach().permute(0, 2, 3, 1),
        U=filters(plan, weight),
        y=y.permute(0, 2, 3, 1),
        bias=fused_bias,
    )
    if bias is not None and fused_bias is None:
        y.add_(bias.view(1, -1, 1, 1))
    if act is not plan.epilogue.activation:  # the plain plan: the ReLU after it
        y.relu_()
    return y


#: The op torch.compile traces (its fake below); eager callers may call ``run`` itself, which
#: the op wraps: the dispatcher's wrapping cost 30-45 us a call (host, 2026-12-02).
conv2d = torch.library.custom_op("wino::conv2d", mutates_args=())(run)


def _plan(problem: Problem, x: Tensor, bias: Tensor | None, act: Activation):
    """The plan with the epilogue of the bias and activation when there is one and the grid
    has it for the problem's tile, else the plain plan (the bias and ReLU then follow it)."""
    target = Target.CUDA if x.is_cuda else Target.C
    epilogue = Epilogue.of(bias is not None, act)
    if epilogue is not Epilogue.NONE:
        try:
            return dispatch(problem, target=target, epilogue=epilogue)
        except Refused as err:
            if err.rule != "epilogue_not_in_grid":
                raise
        except KeyError:  # a cache built without the epilogue kernels: the plain plan
            pass
    return dispatch(problem, target=target)


@conv2d.register_fake
def _(x, weight, bias, padding, dilation, groups, activation="none"):
    return torch.empty(
        output_size(x, weight, padding, dilation),
        dtype=x.dtype,
        device=x.device,
        memory_format=torch.channels_last,
    )
