"""Backend selection and what every backend shares: argument checks, workspace carving, the
filter transform and the chunk loop (``Backend``). A backend supplies the array primitives
(typed views, allocation, checks) and ``launch`` / ``gemm``."""

from __future__ import annotations

import functools
from typing import Any

from .. import cache
from ..vocab import DType, Stage
from .arrays import dtype_of
from .plan import GemmStep, plan_layout


def check_operands(plan, x, w) -> None:
    """Shapes and dtypes of x (NHWC) and w (KRSC) against the plan's problem (None: skip)."""
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


class Backend:
    """The run of a plan, written once; subclasses supply the primitives below it."""

    def __init__(self, manifest: cache.Manifest):
        self.manifest = manifest

    # Primitives (per backend) --------------------------------------------------------------
    def raw_workspace(self, plan, workspace) -> Any:
        """The caller's workspace as a flat uint8 array (checked), or a new one when None."""
        raise NotImplementedError

    def typed_view(self, raw, offset: int, count: int, dtype: DType, shape) -> Any:
        raise NotImplementedError

    def operand(self, array, dtype: DType) -> Any:
        """An input (x or w) as the kernels read it."""
        raise NotImplementedError

    def output(self, plan, x, y) -> tuple[Any, Any]:
        """(what run returns, what the kernels write): y checked, or allocated like x."""
        raise NotImplementedError

    def holds(self, array, shape: tuple[int, ...], dtype: DType) -> bool:
        """Whether ``array`` is this backend's array of that shape and dtype."""
        raise NotImplementedError

    def launch(self, plan, step, buffers: dict[str, Any]) -> None:
        """Launch one kernel step; ``buffers`` maps parameter names (x, w, y, U, fs, V, ts, M)
        to arrays, bound in the order of the kernel's ABI record (a missing one: null)."""
        raise NotImplementedError

    def gemm(self, step, V, U, M, images: int) -> None:
        raise NotImplementedError

    # Shared ----------------------------------------------------------------------------------
    def filter_operand(self, plan, U) -> tuple[Any, Any]:
        """(U, fs) from plan.transform_filter, checked against this plan's layout."""
        try:
            u, fs = U
        except (TypeError, ValueError):
            raise ValueError("U: pass the (U, fs) pair plan.transform_filter(w) returns") from None
        layout = plan.layout()
        for label, array in (("U", u), ("fs", fs)):
            shape, dtype = layout[label]
            if not self.holds(array, shape, dtype):
                raise ValueError(
                    f"U: {label} must be {list(shape)} {dtype.short} (this plan's "
                    f"transform_filter output), got {getattr(array, 'shape', None)} "
                    f"{getattr(array, 'dtype', '')}"
                )
        return self.operand(u, layout["U"][1]), self.operand(fs, layout["fs"][1])

    def workspace(self, plan, workspace, images: int) -> dict[str, Any]:
        """Typed views of the workspace buffers for a chunk of ``images`` images."""
        raw = self.raw_workspace(plan, workspace)
        layout = plan_layout(plan.problem, plan.tile, plan.specs, images)
        return {
            name: self.typed_view(raw, offset, count, dtype, shape)
            for name, (offset, shape, dtype, count) in carve(layout, raw.size).items()
        }

    def transform_filter(self, plan, w, workspace=None):
        """K1 alone: (U, fs), in the workspace when one is given, else in new arrays."""
        check_operands(plan, None, w)
        views = self.workspace(plan, workspace, plan.batch_split)
        U, fs = views["U"], views["fs"]
        if workspace is None:
            U, fs = U.copy(), fs.copy()
        k1 = next(s for s in plan.steps if s.stage is Stage.FILTER)
        self.launch(plan, k1, {"w": self.operand(w, plan.problem.dtype), "U": U, "fs": fs})
        return U, fs

    def run(self, plan, x, w, y, workspace, U):
        check_operands(plan, x, w)
        xv = self.operand(x, plan.problem.dtype)
        y, yv = self.output(plan, x, y)
        workspace = self.raw_workspace(plan, workspace)
        if U is None:
            if w is None:
                raise ValueError("run: pass the filter w, or U from plan.transform_filter(w)")
            U = self.transform_filter(plan, w, workspace)
        u, fs = self.filter_operand(plan, U)
        for start, images in plan.chunks:
            views = self.workspace(plan, workspace, images)
            chunk = slice(start, start + images)
            self.run_chunk(plan, images, xv[chunk], yv[chunk], views, u, fs)
        return y

    def run_chunk(self, plan, images: int, xs, ys, views, u, fs) -> None:
        """K2a, K2, K3 and K4 of one batch chunk (K1 ran once before)."""
        for _, launch in self.chunk_launches(plan, images, xs, ys, views, u, fs):
            launch()

    def chunk_launches(self, plan, images: int, xs, ys, views, u, fs):
        """(stage, a callable issuing it) per step of one batch chunk, in pipeline order."""
        named = {**views, "x": xs, "y": ys, "U": u, "fs": fs}
        out = []
        for step in plan.chunk_steps[images]:
            if isinstance(step, GemmStep):
                args = (self.gemm, step, views["V"], u, views["M"], images)
            elif step.stage is Stage.FILTER:
                continue  # K1 runs once per filter, not per chunk
            else:
                args = (self.launch, plan, step, named)
            out.append((step.stage, functools.partial(*args)))
        return out
