"""Backend selection and the pieces every backend shares (argument checks, workspace carving)."""

from __future__ import annotations

from functools import lru_cache

from .. import cache
from ..launch import kernarg_kind
from ..specs import StageSpec
from ..vocab import Target


@lru_cache(maxsize=1)
def cuda_available() -> bool:
    """CuPy importable and at least one CUDA device present."""
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - any import or driver failure means no CUDA here
        return False


def backend_for(target: Target, manifest: cache.Manifest):
    if target is Target.C:
        from .host import HostBackend

        return HostBackend(manifest)
    if target is Target.CUDA:
        from .cuda import CudaBackend

        return CudaBackend(manifest)
    raise ValueError(f"target {target.value} has no runtime backend here (HIP is compile-only)")


def check_operands(plan, x, w) -> None:
    """Shapes and dtypes of x (NHWC) and w (KRSC) against the plan's problem (None: skip)."""
    from .arrays import dtype_of

    p = plan.problem
    want_x, want_w = (p.N, p.H, p.W, p.C), (p.K, p.R, p.S, p.Cg)
    if x is not None and tuple(x.shape) != want_x:
        raise ValueError(f"x: expected NHWC shape {want_x}, got {tuple(x.shape)}")
    if w is not None and tuple(w.shape) != want_w:
        raise ValueError(f"w: expected KRSC shape {want_w}, got {tuple(w.shape)}")
    for label, array in (("x", x), ("w", w)):
        if array is None:
            continue
        try:
            dtype = dtype_of(array)
        except TypeError as err:
            raise ValueError(f"{label}: {err}") from None
        if dtype is not p.dtype:
            raise ValueError(f"{label}: expected dtype {p.dtype.short}, got {array.dtype}")


def carve(layout, total_bytes: int):
    """Byte offsets of each workspace buffer (256-byte aligned), in layout order."""
    offsets, at = {}, 0
    for name, (shape, dtype) in layout.items():
        count = 1
        for extent in shape:
            count *= extent
        offsets[name] = (at, shape, dtype, count)
        at += -(-count * dtype.itemsize // 256) * 256
    if at > total_bytes:
        raise ValueError(f"workspace: {total_bytes} bytes given, {at} needed")
    return offsets


def kind_of(spec: StageSpec) -> str:
    return kernarg_kind(spec)
