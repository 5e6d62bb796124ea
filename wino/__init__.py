"""wino: ahead-of-time, shape-generic Winograd F(m,3) convolution kernels.

The core (vocabulary, problem, math, specs, grid, refusals, launch geometry) needs no compiler
and no GPU. The runtime (``dispatch``, ``conv2d``) is imported lazily from ``wino.runtime``.
"""

from .grid import aot_stage_specs, refused_stage_specs
from .launch import FORMAT, Launch, batch_chunks, stage_launch
from .magic import magic_div
from .pick import default_stage_specs
from .problem import Problem
from .refusals import Refused
from .specs import RtFilterSpec, RtInputSpec, RtOutputSpec, RtPrescaleSpec, kernel_name
from .vocab import TILES, Activation, DType, Epilogue, K2Path, Prescale, Stage, Target, Tile

__all__ = [
    "FORMAT",
    "TILES",
    "Activation",
    "DType",
    "Epilogue",
    "K2Path",
    "Launch",
    "Prescale",
    "Problem",
    "Refused",
    "RtFilterSpec",
    "RtInputSpec",
    "RtOutputSpec",
    "RtPrescaleSpec",
    "Stage",
    "Target",
    "Tile",
    "aot_stage_specs",
    "batch_chunks",
    "conv2d",
    "default_stage_specs",
    "dispatch",
    "kernel_name",
    "magic_div",
    "refused_stage_specs",
    "stage_launch",
]


def __getattr__(name):
    if name in ("dispatch", "conv2d", "Plan"):
        from . import runtime

        value = globals()[name] = getattr(runtime, name)  # looked up here once
        return value
    raise AttributeError(f"module 'wino' has no attribute {name!r}")
