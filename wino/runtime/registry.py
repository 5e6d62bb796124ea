"""Backends by target, loaded by name on first use. The plan and the bench reach a backend
through this table without importing the backend modules (which import the plan), so the
import graph has no circle and importing the runtime loads no backend it does not use."""

from __future__ import annotations

import functools
import importlib
from typing import Any

from .. import cache
from ..vocab import Target

#: Target -> "module:class" of its runtime backend (HIP is compile-only: none).
BACKENDS: dict[Target, str] = {
    Target.C: "wino.runtime.host:HostBackend",
    Target.CUDA: "wino.runtime.cuda:CudaBackend",
}


def load(ref: str) -> Any:
    """The object a "module:attribute" reference names."""
    module, _, attribute = ref.partition(":")
    return getattr(importlib.import_module(module), attribute)


#: One backend per manifest object (a new manifest file makes a new object): kernel handles are
#: resolved once per process. Keyed by id; the value keeps the manifest alive.
_BACKENDS: dict[int, tuple[cache.Manifest, Any]] = {}


def backend_for(target: Target, manifest: cache.Manifest):
    """The backend running ``manifest``'s kernels (one per manifest and process)."""
    hit = _BACKENDS.get(id(manifest))
    if hit is not None and hit[0] is manifest:
        return hit[1]
    if target not in BACKENDS:
        raise ValueError(f"target {target.value} has no runtime backend here (HIP is compile-only)")
    backend = load(BACKENDS[target])(manifest)
    _BACKENDS[id(manifest)] = (manifest, backend)
    return backend


CUDA_ERROR_NO_DEVICE = 100  # cudaErrorNoDevice: a driver and no GPU


@functools.lru_cache(maxsize=1)
def cuda_available() -> bool:
    """CuPy importable and at least one CUDA device present. No CuPy or no device is False; a
    broken stack (a driver mismatch, a failing device) raises instead of hiding as "no GPU"."""
    try:
        import cupy
    except ImportError:
        return False
    try:
        return cupy.cuda.runtime.getDeviceCount() > 0
    except cupy.cuda.runtime.CUDARuntimeError as err:
        if getattr(err, "status", None) == CUDA_ERROR_NO_DEVICE:
            return False
        raise
