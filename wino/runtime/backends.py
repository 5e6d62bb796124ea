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
from .program import GemmOp, Source, build, carve


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


def check_bias(plan, bias) -> None:
    """The bias against the plan's epilogue: required (shape [K], the problem's dtype) when
    the epilogue adds one, refused when it does not (nothing runs on a bad one)."""
    p, epilogue = plan.problem, plan.epilogue
    if bias is None:
        if epilogue.bias:
            raise ValueError(
                f"bias: this plan's epilogue {epilogue.short} adds a bias; pass bias= a [K] = "
                f"[{p.K}] {p.dtype.short} array"
            )
        return
    if not epilogue.bias:
        raise ValueError(
            f"bias: this plan's epilogue {epilogue.short} adds no bias; dispatch with "
            "epilogue='bias' (or 'bias_relu'), or use wino.conv2d(x, w, bias=b)"
        )
    if tuple(getattr(bias, "shape", ())) != (p.K,):
        raise ValueError(
            f"bias: expected shape ({p.K},) (one value per output channel K), got "
            f"{getattr(bias, 'shape', type(bias).__name__)}"
        )
    try:
        dtype = dtype_of(bias)
    except TypeError as err:
        raise ValueError(f"bias: {err}") from None
    if dtype is not p.dtype:
        raise ValueError(
            f"bias: expected dtype {p.dtype.short} (the io dtype of x, w and y), got {bias.dtype}"
        )


class Backend:
    """The run of a plan, written once; subclasses supply the primitives below it."""

    #: The address passed for a buffer the plan does not have (ts without prescale).
    null = 0

    def __init__(self, manifest: cache.Manifest):
        self.manifest = manifest

    # Primitives (per backend) --------------------------------------------------------------
    def context(self, array, stream, label: str = "x") -> Any:
        """What a call needs besides its arrays (the CUDA device and stream), from the first
        array and the caller's ``stream``; checks the array is on this backend's device."""
        raise NotImplementedError

    def raw_workspace(self, plan, workspace, ctx=None) -> Any:
        """The caller's workspace as a flat uint8 array (checked), or a new one when None."""
        raise NotImplementedError

    def typed_view(self, raw, offset: int, count: int, dtype: DType, shape) -> Any:
        raise NotImplementedError

    def operand(self, array, dtype: DType, label: str = "x", ctx=None) -> Any:
        """An input (x or w) as the kernels read it (a copy where its layout needs one)."""
        raise NotImplementedError

    def output(self, plan, x, y, ctx=None) -> tuple[Any, Any]:
        """(what run returns, what the kernels write): y checked, or allocated like x."""
        raise NotImplementedError

    def empty(self, like, buffer, ctx=None) -> Any:
        """A new array for a workspace-shaped buffer (U, fs), of the framework of ``like``."""
        raise NotImplementedError

    def holds(self, array, shape: tuple[int, ...], dtype: DType) -> bool:
        """Whether ``array`` is this backend's array of that shape and dtype."""
        raise NotImplementedError

    def check_device(self, label: str, array, ctx) -> None:
        """Raise ValueError naming ``label`` when ``array`` is not on the call's device."""

    def pointer(self, array) -> int:
        raise NotImplementedError

    def prepare(self, plan, step) -> Any:
        """A kernel step's launch, prepared once (function handle, packed kernargs)."""
        raise NotImplementedError

    def issue(self, op, pointers: dict, ctx) -> None:
        """Launch a prepared kernel op on the buffers at ``pointers`` (Source -> address)."""
        raise NotImplementedError

    def issue_gemm(self, op, pointers: dict, arrays: dict, ctx) -> None:
        raise NotImplementedError

    def launch(self, plan, step, buffers: dict[str, Any]) -> None:
        """One kernel step on arrays (the benchmark's per-stage route); ``buffers`` maps
        parameter names (x, w, y, U, fs, V, ts, M) to arrays, bound in the order of the
        kernel's ABI record (a missing one: null)."""
        raise NotImplementedError

    def gemm(self, step, V, U, M, images: int) -> None:
        raise NotImplementedError

    # Shared ----------------------------------------------------------------------------------
    def program(self, plan):
        """The plan's launches prepared once (kept on the plan)."""
        if plan._program is None:
            plan._program = build(plan, self.prepare)
        return plan._program

    def filter_operand(self, plan, U, ctx=None) -> tuple[Any, Any]:
        """(U, fs) from plan.transform_filter, checked against this plan's layout."""
        try:
            u, fs = U
        except (TypeError, ValueError):
            raise ValueError("U: pass the (U, fs) pair plan.transform_filter(w) returns") from None
        prog = self.program(plan)
        for label, array, buffer in (("U", u, prog.U), ("fs", fs, prog.fs)):
            if not self.holds(array, buffer.shape, buffer.dtype):
                raise ValueError(
                    f"U: {label} must be {list(buffer.shape)} {buffer.dtype.short} (this "
                    f"plan's transform_filter output), got {getattr(array, 'shape', None)} "
                    f"{getattr(array, 'dtype', '')}"
                )
            self.check_device("U", array, ctx)
        return self.operand(u, prog.U.dtype, "U", ctx), self.operand(fs, prog.fs.dtype, "U", ctx)

    def workspace(self, plan, workspace, images: int) -> dict[str, Any]:
        """Typed views of the workspace buffers for a chunk of ``images`` images."""
        raw = self.raw_workspace(plan, workspace)
        layout = plan_layout(plan.problem, plan.tile, plan.specs, images)
        return {
            name: self.typed_view(raw, b.offset, b.count, b.dtype, b.shape)
            for name, b in carve(layout, raw.size).items()
        }

    def transform_filter(self, plan, w, workspace=None, stream=None):
        """K1 alone: (U, fs), in the workspace when one is given, else in new arrays."""
        prog = self.program(plan)
        ctx = self.context(w, stream, "w")
        check_operands(plan, None, w)
        wv = self.operand(w, plan.problem.dtype, "w", ctx)
        if workspace is None:
            U, fs = self.empty(w, prog.U, ctx), self.empty(w, prog.fs, ctx)
            u, f = self.pointer(U), self.pointer(fs)
        else:
            raw = self.raw_workspace(plan, workspace, ctx)
            U, fs = (
                self.typed_view(raw, b.offset, b.count, b.dtype, b.shape) for b in (prog.U, prog.fs)
            )
            base = self.pointer(raw)
            u, f = base + prog.U.offset, base + prog.fs.offset
        pointers = {Source.W: self.pointer(wv), Source.U: u, Source.FS: f, Source.NONE: self.null}
        self.issue(prog.filter, pointers, ctx)
        return U, fs

    def run(self, plan, x, w, y, workspace, U, stream=None, bias=None):
        """Every check first (nothing is written when one fails), then the prepared launches."""
        prog = self.program(plan)
        ctx = self.context(x, stream)
        check_operands(plan, x, w)
        check_bias(plan, bias)
        if U is None and w is None:
            raise ValueError("run: pass the filter w, or U from plan.transform_filter(w)")
        xv = self.operand(x, plan.problem.dtype, "x", ctx)
        wv = self.operand(w, plan.problem.dtype, "w", ctx) if U is None else None
        bv = None if bias is None else self.operand(bias, plan.problem.dtype, "bias", ctx)
        y, yv = self.output(plan, x, y, ctx)
        raw = self.raw_workspace(plan, workspace, ctx)
        base = self.pointer(raw)
        pointers = {Source.X: self.pointer(xv), Source.Y: self.pointer(yv), Source.WS: base}
        pointers[Source.NONE] = self.null
        pointers[Source.BIAS] = self.null if bv is None else self.pointer(bv)
        if U is None:
            u = None  # in the workspace (prog.U)
            pointers[Source.U], pointers[Source.FS] = base + prog.U.offset, base + prog.fs.offset
            pointers[Source.W] = self.pointer(wv)
            self.issue(prog.filter, pointers, ctx)
        else:
            u, fs = self.filter_operand(plan, U, ctx)
            pointers[Source.U], pointers[Source.FS] = self.pointer(u), self.pointer(fs)
        arrays = {Source.WS: raw, Source.U: u}
        for ops in prog.chunks:
            for op in ops:
                if isinstance(op, GemmOp):
                    self.issue_gemm(op, pointers, arrays, ctx)
                else:
                    self.issue(op, pointers, ctx)
        return y

    def chunk_launches(self, plan, images: int, xs, ys, views, u, fs):
        """(stage, a callable issuing it) per step of one batch chunk, in pipeline order, on
        arrays (the benchmark times stages through this)."""
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
