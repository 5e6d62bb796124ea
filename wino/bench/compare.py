"""cuDNN through PyTorch on the same tensors, timed the same way (graph replays, events).

NHWC data are channels_last NCHW views (``x.permute(0, 3, 1, 2)``), KRSC filters KCRS
channels_last views, so cuDNN runs its NHWC kernels on wino's operands with no copy.
``cudnn.benchmark`` picks the algorithm during the eager warm-up; TF32 is off, so fp32 is
strict fp32 as wino's is.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..problem import Problem
from .device import Operands
from .timing import TorchGraphTimer


@dataclass(frozen=True)
class DirectResult:
    time_us: float
    error: float | None


def configure(torch) -> None:
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False


def cudnn(problem: Problem, device, operands: Operands, ref=None) -> DirectResult:
    """Time PyTorch's conv2d (cuDNN) on the case's operands; its error against ``ref``."""
    torch = device.torch
    configure(torch)
    conv = torch.nn.functional.conv2d
    views = [(x.permute(0, 3, 1, 2), w.permute(0, 3, 1, 2)) for x, w, _ in operands.arrays]

    def issue(s: int):
        x, w = views[s]
        return conv(
            x,
            w,
            None,
            1,
            (problem.pad_h, problem.pad_w),
            (problem.dil_h, problem.dil_w),
            problem.groups,
        )

    device.synchronize()
    time_us = TorchGraphTimer(device.final_settings).time_us(issue, operands.sets)
    error = None
    if ref is not None:
        y = issue(0).permute(0, 2, 3, 1)  # NCHW channels_last -> NHWK view
        error = device.error(y, ref)
    return DirectResult(time_us, error)
