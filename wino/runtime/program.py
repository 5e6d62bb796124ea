"""A plan prepared for running, once: every launch with its kernel handle, its kernarg struct
packed and where each of its buffers lives (an operand and a byte offset), per batch chunk.
The buffers of a kernel and their order come from its ABI record in the manifest.

``plan.run`` then does only what depends on the call's arrays: check them, take their base
pointers and issue the prepared launches. The backends supply the handles (``prepare``) and
the issuing (``issue`` / ``issue_gemm``); this module is the bookkeeping they share.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from ..vocab import DType, Stage
from .plan import GemmStep, KernelStep, Plan, plan_layout


class Source(enum.Enum):
    """Where a buffer of a launch lives in one call."""

    X = "x"  # the input (NHWC)
    W = "w"  # the filter (KRSC), K1 only
    Y = "y"  # the output (NHWK)
    WS = "workspace"  # V, M, ts of a chunk
    U = "U"  # the transformed filter (caller's, or in the workspace)
    FS = "fs"  # the filter scales (likewise)
    BIAS = "bias"  # the epilogue's bias [K] (null when the plan's epilogue adds none)
    NONE = "none"  # a buffer the plan does not have (ts without prescale): a null pointer

    #: Members are singletons compared by identity: hash them as objects (C), not by name
    #: (Enum's Python-level hash), since a run looks up every launch's buffers by Source.
    __hash__ = object.__hash__


@dataclass(frozen=True)
class Slot:
    """One buffer of a launch: its operand and the byte offset in it."""

    source: Source
    offset: int = 0


@dataclass(frozen=True)
class Buffer:
    """A workspace buffer: byte offset, element count, dtype and shape."""

    offset: int
    count: int
    dtype: DType
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return self.count * self.dtype.itemsize


@dataclass(frozen=True)
class KernelOp:
    step: KernelStep
    slots: tuple[Slot, ...]
    handle: Any  # the backend's prepared launch (kernel function, packed kernargs, geometry)


@dataclass(frozen=True)
class GemmOp:
    step: GemmStep
    images: int
    V: Buffer
    M: Buffer
    U: Buffer  # where U is when K1 wrote it into the workspace
    handle: Any = None  # the backend's prepared GEMM (CUDA: descriptors and algorithm)


@dataclass(frozen=True)
class Program:
    filter: KernelOp  # K1: w -> U, fs
    chunks: tuple[tuple[KernelOp | GemmOp, ...], ...]  # per batch chunk, in pipeline order
    U: Buffer  # where K1 leaves U and fs in the workspace
    fs: Buffer
    workspace_bytes: int


def carve(layout, total_bytes: int | None = None) -> dict[str, Buffer]:
    """Each workspace buffer (256-byte aligned, in layout order); raises when ``total_bytes``
    is given and too small."""
    out, at = {}, 0
    for name, (shape, dtype) in layout.items():
        count = 1
        for extent in shape:
            count *= extent
        out[name] = Buffer(at, count, dtype, tuple(shape))
        at += -(-count * dtype.itemsize // 256) * 256
    if total_bytes is not None and at > total_bytes:
        raise ValueError(f"workspace: {total_bytes} bytes given, {at} needed")
    return out


def _slot(name: str, buffers: dict[str, Buffer], x_at: int, y_at: int) -> Slot:
    if name == "x":
        return Slot(Source.X, x_at)
    if name == "y":
        return Slot(Source.Y, y_at)
    if name == "w":
        return Slot(Source.W)
    if name in ("U", "fs"):
        return Slot(Source.U if name == "U" else Source.FS)
    if name == "bias":
        return Slot(Source.BIAS)
    if name not in buffers:
        return Slot(Source.NONE)
    return Slot(Source.WS, buffers[name].offset)


def _buffers(plan: Plan, step: KernelStep) -> tuple[str, ...]:
    """The kernel's buffer parameters in calling order, from its ABI record in the manifest."""
    return plan.manifest.kernel(step.name, verify=False).abi.buffer_names


def build(plan: Plan, prepare, prepare_gemm) -> Program:
    """The plan's launches, each prepared once by ``prepare(plan, step)`` (a kernel step) or
    ``prepare_gemm(plan, step)`` (K3)."""
    p = plan.problem
    x_image = p.H * p.W * p.C * p.dtype.itemsize
    y_image = p.Ho * p.Wo * p.K * p.dtype.itemsize
    first = carve(plan_layout(p, plan.tile, plan.specs, plan.batch_split))
    k1 = next(s for s in plan.steps if s.stage is Stage.FILTER)
    k1_slots = tuple(_slot(n, first, 0, 0) for n in _buffers(plan, k1))
    k1_op = KernelOp(k1, k1_slots, prepare(plan, k1))
    chunks = []
    for start, images in plan.chunks:
        buffers = carve(plan_layout(p, plan.tile, plan.specs, images))
        ops: list[KernelOp | GemmOp] = []
        for step in plan.chunk_steps[images]:
            if isinstance(step, GemmStep):
                handle = prepare_gemm(plan, step)
                ops.append(GemmOp(step, images, buffers["V"], buffers["M"], first["U"], handle))
            elif step.stage is not Stage.FILTER:
                slots = tuple(
                    _slot(n, buffers, start * x_image, start * y_image)
                    for n in _buffers(plan, step)
                )
                ops.append(KernelOp(step, slots, prepare(plan, step)))
        chunks.append(tuple(ops))
    return Program(k1_op, tuple(chunks), first["U"], first["fs"], plan.workspace_bytes)
