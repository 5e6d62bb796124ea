"""How a sweep times and what it compares with: the enums behind ``--timing`` and ``--compare``
(no imports, so the argument parser takes its choices from them without loading the runtime)."""

from __future__ import annotations

import enum


class Timing(enum.Enum):
    """How a pipeline is timed (``--timing``)."""

    BLOCK = "block"  # the whole chain
    STAGED = "staged"  # each stage alone


class Compare(enum.Enum):
    """The direct convolution timed beside wino (``--compare``)."""

    CUDNN = "cudnn"  # PyTorch's conv2d on the GPU
    ONNXRUNTIME = "onnxruntime"  # onnxruntime's CPU Conv on the host
