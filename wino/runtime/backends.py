"""Backend selection and what every backend shares: argument checks, workspace carving, the
filter transform and the chunk loop (``Backend``). A backend supplies the array primitives
(typed views, allocation, checks) and ``launch`` / ``gemm``."""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

from .. import cache
from ..vocab import DType, Stage
from . import aliasing, lru
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


#: The largest workspace a plan keeps for reuse when the caller gives none (bytes); larger
#: ones are allocated per call by the array framework (whose caching allocator reuses them).
OWN_WORKSPACE_MAX = 16 << 20
#: How many of its own workspaces a plan keeps (one per stream or thread, the most recently
#: used): streams and threads come and go, so the plan does not hold one for each forever.
OWN_WORKSPACE_SLOTS = 8


class Bound(NamedTuple):
    """A run's arrays as the checks found them: the call key they were checked for, the call
    context, the kernels' x and w pointers, y's (None: allocated per call), the caller's raw
    workspace (None: the plan's own) and the (U, fs) pair (None: K1 writes them)."""

    key: tuple | None
    ctx: Any
    x: int
    w: int | None
    y: int | None
    workspace: Any
    workspace_at: int | None  # its address
    u: tuple[Any, Any] | None
    u_at: tuple[int, int] | None  # their addresses
    bias_at: int  # the bias's address (the backend's null without one)
    extents: tuple  # of x, w, U, fs, workspace, bias (what a new y is checked against)
    keep: Any = None  # copies made for this call only (alive until it has issued)


#: Checked calls a plan remembers, the least recently used dropped: a plan serves every layer
#: of its shape in a model (ResNet-50's layer3 runs one plan on 5 sets of arrays per forward).
BOUND_SLOTS = 16


def _without_y(key: tuple) -> tuple:
    """A call key (x, w, y, workspace, U, fs, bias) but y: what a remembered call is found by."""
    return key[:2] + key[3:]


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

    def describe(self, array) -> tuple | None:
        """What this backend's checks of ``array`` depend on (pointer, shape, strides, dtype,
        device...), cheaply; None for an array it does not take (the checks then say why)."""
        raise NotImplementedError

    def restream(self, ctx, x, stream):
        """The checked context of a seen call with this call's stream."""
        return ctx

    def workspace_slot(self, ctx):
        """Which of the plan's own workspaces a call uses: one per stream (CUDA), thread
        (host)."""
        raise NotImplementedError

    def check_device(self, label: str, array, ctx) -> None:
        """Raise ValueError naming ``label`` when ``array`` is not on the call's device."""

    def pointer(self, array) -> int:
        raise NotImplementedError

    def prepare(self, plan, step) -> Any:
        """A kernel step's launch, prepared once (function handle, packed kernargs)."""
        raise NotImplementedError

    def prepare_gemm(self, plan, step) -> Any:
        """K3's GEMM, prepared once where the backend has anything to prepare."""
        return None

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
            plan._program = build(plan, self.prepare, self.prepare_gemm)
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
        """Every check first (nothing is written when one fails), then the prepared launches.
        A call whose arrays describe as one of the plan's last BOUND_SLOTS checked calls did
        (``describe``: pointer, shape, strides, dtype) skips the checks and reuses what they
        found; one where only y differs (a fresh output per call) checks y alone."""
        prog = self.program(plan)
        key = self.call_key(x, w, y, workspace, U, bias)
        found = None if key is None else _without_y(key)
        bound = None if found is None else plan._bounds.get(found)
        if bound is None:
            bound = self.bind(plan, prog, key, x, w, y, workspace, U, stream, bias)
            return self.launch_bound(plan, prog, bound, bound.ctx, x, y)
        ctx = self.restream(bound.ctx, x, stream)
        if bound.key[2] != key[2] and y is not None:
            # only y is new (a framework's fresh output): its own checks, the rest as found
            aliasing.check_extents(y, bound.extents)
            bound = bound._replace(key=key, y=self.pointer(self.output(plan, x, y, ctx)[1]))
            lru.put(plan._bounds, found, bound, BOUND_SLOTS)
        return self.launch_bound(plan, prog, bound, ctx, x, y)

    def call_key(self, x, w, y, workspace, U, bias=None) -> tuple | None:
        """What the checks of a call depend on, per array (None: not keyable, check it all)."""
        try:
            u, fs = (None, None) if U is None else U
        except (TypeError, ValueError):
            return None
        key = []
        for array in (x, w, y, workspace, u, fs, bias):
            if array is None:
                key.append(None)
                continue
            described = self.describe(array)
            if described is None:
                return None
            key.append(described)
        return tuple(key)

    def bind(self, plan, prog, key, x, w, y, workspace, U, stream, bias=None) -> Bound:
        """Check a call's arrays (all of them, before any kernel) and keep what the checks
        found on the plan when the kernels read the caller's arrays as they are."""
        spans = aliasing.extents(x=x, w=w, U=U, workspace=workspace, bias=bias)
        aliasing.check_extents(y, spans)
        ctx = self.context(x, stream)
        check_operands(plan, x, w)
        check_bias(plan, bias)
        if U is None and w is None:
            raise ValueError("run: pass the filter w, or U from plan.transform_filter(w)")
        xv = self.operand(x, plan.problem.dtype, "x", ctx)
        wv = self.operand(w, plan.problem.dtype, "w", ctx) if U is None else None
        bv = None if bias is None else self.operand(bias, plan.problem.dtype, "bias", ctx)
        yp = None if y is None else self.pointer(self.output(plan, x, y, ctx)[1])
        raw = None if workspace is None else self.raw_workspace(plan, workspace, ctx)
        u = None if U is None else self.filter_operand(plan, U, ctx)
        pairs = [(xv, x), (wv, w), (bv, bias)]
        pairs += [] if u is None else list(zip(u, U, strict=True))
        as_given = all(used is None or self.pointer(used) == self.pointer(a) for used, a in pairs)
        bound = Bound(
            key,
            ctx,
            self.pointer(xv),
            None if wv is None else self.pointer(wv),
            yp,
            raw,
            None if raw is None else self.pointer(raw),
            u,
            None if u is None else (self.pointer(u[0]), self.pointer(u[1])),
            self.null if bv is None else self.pointer(bv),
            spans,
            keep=(xv, wv, bv),  # a copy made for this call lives until its launches are issued
        )
        if key is not None and as_given:
            lru.put(plan._bounds, _without_y(key), bound._replace(keep=None), BOUND_SLOTS)
        return bound

    def launch_bound(self, plan, prog, bound: Bound, ctx, x, y):
        """Issue the plan's launches on a checked call (y allocated here when not given; the
        workspace the caller's, else the plan's own)."""
        if y is None:
            y, yv = self.output(plan, x, None, ctx)
            yp = self.pointer(yv)
        else:
            yp = bound.y
        if bound.workspace is None:
            raw = self.own_workspace(plan, ctx)
            base = self.pointer(raw)
        else:
            raw, base = bound.workspace, bound.workspace_at
        pointers = {Source.X: bound.x, Source.Y: yp, Source.WS: base, Source.NONE: self.null}
        pointers[Source.BIAS] = bound.bias_at
        if bound.u is None:
            pointers[Source.U], pointers[Source.FS] = base + prog.U.offset, base + prog.fs.offset
            pointers[Source.W] = bound.w
            u = None  # K1 writes it into the workspace (prog.U)
        else:
            u = bound.u[0]
            pointers[Source.U], pointers[Source.FS] = bound.u_at
        self.issue_program(plan, prog, pointers, {Source.WS: raw, Source.U: u}, ctx)
        return y

    def issue_program(self, plan, prog, pointers: dict, arrays: dict, ctx) -> None:
        """Every launch of a run in pipeline order: K1 where U is not given (``pointers``
        then holds w), then each chunk's kernels and GEMMs."""
        if Source.W in pointers:
            self.issue(prog.filter, pointers, ctx)
        for ops in prog.chunks:
            for op in ops:
                if isinstance(op, GemmOp):
                    self.issue_gemm(op, pointers, arrays, ctx)
                else:
                    self.issue(op, pointers, ctx)

    def own_workspace(self, plan, ctx):
        """The plan's own workspace for the call's stream (CUDA) or thread (host), allocated
        once when it is at most OWN_WORKSPACE_MAX bytes, at most OWN_WORKSPACE_SLOTS of them
        (the least recently used one is dropped). A larger one, and one for a run being
        captured into a CUDA graph (``keeps_workspace``: the graph's own memory pool must hold
        it for as long as the graph lives, not the plan), comes from the array framework's
        allocator per call, so plans do not hold it."""
        if plan.workspace_bytes > OWN_WORKSPACE_MAX or not self.keeps_workspace(ctx):
            return self.raw_workspace(plan, None, ctx)
        slot = self.workspace_slot(ctx)
        held = plan._workspaces
        raw = held.pop(slot, None)  # re-inserted below: the most recently used is last
        if raw is None:
            raw = self.raw_workspace(plan, None, ctx)
            for oldest in list(held)[: max(0, len(held) - OWN_WORKSPACE_SLOTS + 1)]:
                held.pop(oldest, None)  # freed in order after its stream's work (cuda.py)
        held[slot] = raw
        return raw

    def keeps_workspace(self, ctx) -> bool:
        """Whether a run in ``ctx`` may use a workspace the plan keeps (not while its stream
        is being captured into a CUDA graph)."""
        return True

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
