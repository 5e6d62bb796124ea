"""wino inside PyTorch (the optional extra ``wino[torch]``; the core never imports torch).

- ``torch.ops.wino.conv2d(x, weight, bias, padding, dilation, groups, activation="none")``: a
  custom op registered with ``torch.library`` (with a fake implementation, so
  ``torch.compile(fullgraph=True)`` traces it without a graph break). x is NCHW in
  channels_last memory (the NHWC view wino reads, no copy); the result is NCHW in
  channels_last memory; ``activation="relu"`` applies a ReLU in the kernel's epilogue.
- ``Conv2d``: a drop-in for ``nn.Conv2d`` with 3x3 stride-1 kernels (any padding, dilation,
  groups, bias; ``activation="relu"`` for a fused ReLU), caching the transformed filter per
  weight version.
- ``convert(model)``: swaps every eligible ``nn.Conv2d`` for ``Conv2d`` (fusing the ``nn.ReLU``
  that follows one in an ``nn.Sequential``) and names each layer it leaves (with the rule id)
  once, through the ``wino.torch`` logger.

Forward (inference) only: a module in training mode, or called with grad enabled on a tensor
that requires it, runs torch's own convolution.
"""

from .modules import Conv2d, convert, refusal
from .ops import conv2d

__all__ = ["Conv2d", "conv2d", "convert", "refusal"]
