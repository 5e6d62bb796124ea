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


class Engine(enum.Enum):
    """What ``wino bench --engines`` times on the same tensors (the CSV's ``engine`` column
    is ``row_name``: the unfused pipeline's rows keep their first name, ``wino``)."""

    UNFUSED = "unfused"  # the unfused2d_rt pipeline, each stage's binary picked by timing
    FUSED = "fused"  # the fused2d_rt plan, the fastest grid KF kernel per tile
    BAKED = "baked"  # the best unfused pipeline on binaries with the extents baked in
    CUDNN = "cudnn"
    ONNXRUNTIME = "onnxruntime"

    @property
    def row_name(self) -> str:
        return "wino" if self is Engine.UNFUSED else self.value

    @property
    def direct(self) -> bool:
        """A direct convolution of another library (``--compare``'s engines)."""
        return self in (Engine.CUDNN, Engine.ONNXRUNTIME)


#: The engines of a target, in the order they run (``--engines`` alone: those available).
TARGET_ENGINES = {
    "c": (Engine.UNFUSED, Engine.FUSED, Engine.BAKED, Engine.ONNXRUNTIME),
    "cuda": (Engine.UNFUSED, Engine.FUSED, Engine.BAKED, Engine.CUDNN),
}
