"""The output must share no memory with what the kernels read while writing it: ``y``
overlapping x, w, U (and its filter scales) or the workspace is refused before any launch, on
the host and on CUDA. Only byte extents are compared (no array library is imported): numpy
arrays through ``__array_interface__``, CuPy arrays through ``__cuda_array_interface__``,
torch tensors through ``data_ptr``/``stride``."""

from __future__ import annotations

from typing import Any

Extent = tuple[int, int]  # [first byte, one past the last byte)


def _span(pointer: int, shape, strides, itemsize: int) -> Extent | None:
    """The bytes an array of that shape and byte strides at ``pointer`` may touch."""
    if pointer is None or any(n == 0 for n in shape):
        return None
    low = high = pointer
    for n, stride in zip(shape, strides, strict=True):
        reach = (n - 1) * stride
        low, high = (low + reach, high) if reach < 0 else (low, high + reach)
    return low, high + itemsize


def _contiguous_strides(shape, itemsize: int) -> tuple[int, ...]:
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def extent(array: Any) -> Extent | None:
    """The byte extent of a numpy / CuPy array or torch tensor; None for anything else."""
    if type(array).__module__.startswith("torch"):
        size = array.element_size()
        strides = tuple(s * size for s in array.stride())
        return _span(array.data_ptr(), tuple(array.shape), strides, size)
    for name in ("__cuda_array_interface__", "__array_interface__"):
        face = getattr(array, name, None)
        if isinstance(face, dict):
            itemsize = int(face["typestr"][2:])
            shape = tuple(face["shape"])
            strides = face.get("strides") or _contiguous_strides(shape, itemsize)
            return _span(face["data"][0], shape, strides, itemsize)
    return None


def _overlap(a: Extent | None, b: Extent | None) -> bool:
    return a is not None and b is not None and a[0] < b[1] and b[0] < a[1]


def extents(**operands: Any) -> tuple[tuple[str, Extent | None], ...]:
    """(label, byte extent) of every operand (a pair such as U = (U, fs) member by member);
    None operands are skipped."""
    out = []
    for label, operand in operands.items():
        members = operand if isinstance(operand, (tuple, list)) else (operand,)
        out += [(label, extent(member)) for member in members if member is not None]
    return tuple(out)


def check_output(y: Any, **operands: Any) -> None:
    """ValueError when ``y`` overlaps any operand (a pair such as U = (U, fs) is checked
    member by member); None operands are skipped."""
    check_extents(y, extents(**operands))


def check_extents(y: Any, operands: tuple[tuple[str, Extent | None], ...]) -> None:
    """``check_output`` against operand extents found before (``extents``)."""
    if y is None:
        return
    out = extent(y)
    for label, span in operands:
        if _overlap(out, span):
            raise ValueError(
                f"y overlaps {label} in memory: the kernels would overwrite what they "
                f"still read; pass a y that shares no memory with x, w, U or the "
                "workspace (or y=None to allocate one)"
            )
