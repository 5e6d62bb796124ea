"""``wino.torch.Conv2d`` (a drop-in for ``nn.Conv2d`` on 3x3 stride-1 layers, optionally with
the ReLU that follows it fused) and ``convert(model)``."""

from __future__ import annotations

import logging
from itertools import pairwise

import torch
from torch import nn

from ..problem import Problem
from ..refusals import Refused, check_problem
from ..runtime.arrays import dtype_of
from . import ops

log = logging.getLogger("wino.torch")

#: Reasons outside wino's refusal rules (torch-side settings wino does not take), by id.
TORCH_RULES = {
    "padding_mode_not_zeros": "padding_mode {mode!r}: wino pads with zeros only",
    "dtype_unsupported": "dtype {dtype}: wino serves float16, bfloat16 and float32",
    "not_conv2d": "a {kind} is not an nn.Conv2d",
}


def _padding(conv: nn.Conv2d) -> tuple[int, int]:
    """nn.Conv2d's padding as two ints ('same' is the dilation for a 3x3 stride-1 filter)."""
    if conv.padding == "valid":
        return 0, 0
    if conv.padding == "same":
        return tuple(conv.dilation)
    return tuple(conv.padding)


def refusal(conv: nn.Module) -> tuple[str, str] | None:
    """(rule id, message) when wino will not run ``conv`` at any input size, else None."""
    if type(conv) not in (nn.Conv2d, Conv2d):  # a subclass has a forward of its own
        return "not_conv2d", TORCH_RULES["not_conv2d"].format(kind=type(conv).__name__)
    if conv.padding_mode != "zeros":
        return "padding_mode_not_zeros", TORCH_RULES["padding_mode_not_zeros"].format(
            mode=conv.padding_mode
        )
    try:
        dtype = dtype_of(conv.weight)
    except TypeError:
        return "dtype_unsupported", TORCH_RULES["dtype_unsupported"].format(dtype=conv.weight.dtype)
    (r, s), (ph, pw), (dh, dw) = conv.kernel_size, _padding(conv), conv.dilation
    side = 4 * max(dh, dw) + 1  # a nominal input every 3x3 dilated filter fits
    problem = Problem(
        N=1,
        C=conv.in_channels,
        H=side,
        W=side,
        K=conv.out_channels,
        R=r,
        S=s,
        pad_h=ph,
        pad_w=pw,
        stride_h=conv.stride[0],
        stride_w=conv.stride[1],
        dil_h=dh,
        dil_w=dw,
        groups=conv.groups,
        dtype=dtype,
    )
    try:
        check_problem(problem)
    except Refused as err:
        return err.rule, err.message
    return None


class Conv2d(nn.Conv2d):
    """``nn.Conv2d`` run by wino: 3x3, stride 1, any padding, dilation, groups and bias, and
    ``activation="relu"`` for the ReLU that follows it, applied in the last kernel's epilogue
    with the bias (``convert`` fuses a Conv2d and the ReLU after it this way).

    Takes NCHW tensors in channels_last memory (the NHWC view, no copy) and returns NCHW in
    channels_last memory. The transformed filter is kept per weight version (an in-place
    update of the weight, e.g. ``load_state_dict``, makes a new one). Inference only: in
    training mode, or with grad enabled on an input or weight that requires grad, it runs
    torch's convolution (and ReLU; run inference under ``torch.inference_mode()``)."""

    def __init__(self, *args, activation: str = "none", **kwargs):
        super().__init__(*args, **kwargs)
        self.activation = ops.activation_of(activation).value
        self._check()

    def _check(self) -> None:
        reason = refusal(self)
        if reason is not None:
            raise Refused(*reason)

    @classmethod
    def from_conv(cls, conv: nn.Conv2d, activation: str = "none") -> Conv2d:
        """The wino module for ``conv`` (then ``activation``: "none" or "relu"), sharing its
        parameters (no copy)."""
        module = cls.__new__(cls)
        module.__dict__.update(conv.__dict__)
        module.activation = ops.activation_of(activation).value
        module._check()
        return module

    def extra_repr(self) -> str:
        relu = ", activation=relu" if self.activation != "none" else ""
        return super().extra_repr() + relu + ", wino"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        grad = torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad)
        if self.training or grad:
            y = super().forward(x)
            return torch.relu(y) if self.activation == "relu" else y
        padding, dilation = list(_padding(self)), list(self.dilation)
        args = (x, self.weight, self.bias, padding, dilation, self.groups, self.activation)
        if type(x) is torch.Tensor and not torch.compiler.is_compiling():
            return ops.run(*args)  # eager: the op's implementation without its wrapping
        return ops.conv2d(*args)  # traced (fake tensors under torch.compile): the op


def convert(model: nn.Module, fuse_relu: bool = True) -> nn.Module:
    """Swap every eligible ``nn.Conv2d`` of ``model`` (in place) for ``wino.torch.Conv2d``,
    sharing its parameters; each layer left to torch is named once, with its rule id, on the
    ``wino.torch`` logger. With ``fuse_relu``, an eligible conv that an ``nn.ReLU`` follows in
    an ``nn.Sequential`` (and that appears nowhere else in the model) takes the ReLU into its
    epilogue (``activation="relu"``) and the ReLU becomes an ``nn.Identity``. Returns
    ``model`` (or the new module when ``model`` is a conv)."""
    swapped: dict[int, nn.Module] = {}  # a conv shared by several parents stays shared

    def swap(conv: nn.Conv2d, label: str) -> nn.Module:
        if id(conv) not in swapped:
            reason = refusal(conv)
            if reason is not None:
                log.warning("wino.torch.convert: left %s to torch (rule %s: %s)", label, *reason)
            swapped[id(conv)] = conv if reason is not None else Conv2d.from_conv(conv)
        return swapped[id(conv)]

    if type(model) is nn.Conv2d:
        return swap(model, type(model).__name__)
    if fuse_relu:
        _fuse_relus(model)
    for name, parent in list(model.named_modules()):
        for child_name, child in list(parent.named_children()):
            if type(child) is nn.Conv2d:
                label = f"{name}.{child_name}" if name else child_name
                setattr(parent, child_name, swap(child, label))
    return model


def _fuse_relus(model: nn.Module) -> None:
    """Each (eligible nn.Conv2d, nn.ReLU) pair of consecutive children of an nn.Sequential,
    the conv reachable by no other path of the model: the conv becomes
    Conv2d(activation="relu"), the ReLU an nn.Identity."""
    uses: dict[int, int] = {}
    for _, module in model.named_modules(remove_duplicate=False):  # every path to a module
        uses[id(module)] = uses.get(id(module), 0) + 1
    for parent in list(model.modules()):
        if type(parent) is not nn.Sequential:
            continue
        names = [name for name, _ in parent.named_children()]
        for first, second in pairwise(names):
            conv, relu = getattr(parent, first), getattr(parent, second)
            if (
                type(conv) is nn.Conv2d
                and type(relu) is nn.ReLU
                and uses[id(conv)] == 1
                and refusal(conv) is None
            ):
                setattr(parent, first, Conv2d.from_conv(conv, activation="relu"))
                setattr(parent, second, nn.Identity())
