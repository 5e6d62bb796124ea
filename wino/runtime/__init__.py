"""The runtime: dispatch a problem to a plan of cached AOT binaries and run it. Imports no
compiler (AOT: the cache is the only input)."""

from .api import conv2d
from .plan import GemmStep, KernelStep, Plan, dispatch, invalidate
from .reference import conv2d_reference, relative_error

__all__ = [
    "GemmStep",
    "KernelStep",
    "Plan",
    "conv2d",
    "conv2d_reference",
    "dispatch",
    "invalidate",
    "relative_error",
]
