"""The CUDA backend: cubins from the cache through CuPy, K3 through cuBLASLt's strided-batched
mixed-precision matmul (fp16/bf16 or fp32 in, fp32 accumulate; wino.runtime.cublas), each
shape's descriptors and algorithm chosen once.

Arrays: CuPy arrays and PyTorch CUDA tensors are used in place (no copies): their device
pointers are wrapped, so 16-bit buffers travel as raw ``unsigned short`` whatever the framework
calls them.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import threading
from typing import Any, NamedTuple

import numpy as np

from .. import cache
from ..vocab import DType
from .arrays import dtype_of, is_torch
from .backends import Backend
from .cublas import (
    CUBLAS_OP_N,
    CUBLAS_OP_T,
    CUDA_R_16BF,
    CUDA_R_16F,
    CUDA_R_32F,
    Gemm,
    Matmul,
    Shape,
)
from .graphs import RunGraphs
from .host import args_struct
from .plan import GemmStep, KernelStep, Plan
from .program import Source

_TORCH_NAMES = {DType.FP32: "float32", DType.FP16: "float16", DType.BF16: "bfloat16"}
#: What a run's launches read of its operands: a run graph serves calls with these pointers.
_GRAPH_KEY = (Source.X, Source.Y, Source.WS, Source.U, Source.FS, Source.W, Source.BIAS)
_CUDA_TYPE = {DType.FP32: CUDA_R_32F, DType.FP16: CUDA_R_16F, DType.BF16: CUDA_R_16BF}
_RAW = {2: np.uint16, 4: np.float32}


_NP_TYPES = {"int": np.int32, "unsigned": np.uint32}


@functools.cache
def args_dtype(abi: cache.KernelAbi) -> np.dtype:
    """The kernarg struct of a kernel's ABI record as a numpy structured dtype (passed by value
    to the kernel)."""
    return np.dtype([(name, _NP_TYPES[ctype]) for ctype, name in abi.kernargs])


def device_view(array: Any, dtype: DType, raw_bytes: bool = False):
    """A CuPy view of a CuPy array or torch CUDA tensor's memory, typed raw (uint16 / float32;
    uint8 with ``raw_bytes``)."""
    import cupy

    if is_torch(array):
        if not array.is_cuda or not array.is_contiguous():
            raise ValueError("torch tensors must be contiguous CUDA tensors")
        pointer, nbytes = array.data_ptr(), array.numel() * array.element_size()
        memory = cupy.cuda.UnownedMemory(pointer, nbytes, array)
        return cupy.ndarray(
            tuple(array.shape),
            dtype=np.uint8 if raw_bytes else _RAW[dtype.itemsize],
            memptr=cupy.cuda.MemoryPointer(memory, 0),
        )
    if not isinstance(array, cupy.ndarray):
        raise TypeError(
            f"the cuda target takes CuPy arrays or torch CUDA tensors, got {type(array).__name__}"
        )
    if not array.flags.c_contiguous:
        raise ValueError(
            "CuPy arrays must be C-contiguous (NHWC / KRSC): outputs written to a "
            "temporary copy would be lost; pass cupy.ascontiguousarray(a)"
        )
    return array.view(_RAW[dtype.itemsize])


def _torch():
    import torch

    return torch


def _torch_current_stream(device: int) -> int:
    """torch's current stream on ``device`` as a raw handle (the cheap route when present)."""
    global _CURRENT_RAW_STREAM
    if _CURRENT_RAW_STREAM is None:
        torch = _torch()
        _CURRENT_RAW_STREAM = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
            lambda index: torch.cuda.current_stream(index).cuda_stream
        )
    return _CURRENT_RAW_STREAM(device)


_CURRENT_RAW_STREAM = None  # torch's (device -> raw current stream), looked up once


@functools.cache
def _torch_devices(index: int):
    """torch.device("cuda", index), made once per device."""
    return _torch().device("cuda", index)


def _driver():
    """CuPy's bindings of the CUDA driver and runtime (Cython: a launch costs a fraction of a
    ctypes call's argument conversions)."""
    from cupy_backends.cuda.api import driver, runtime

    return driver, runtime


_MAX_DYNAMIC_SHARED = 8  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
ALIGN = 16  # the widest vector load or store the kernels make (bytes)


class _Launch:
    """A kernel launch prepared once: the CUfunction, the kernarg struct packed, and the
    parameter array cuLaunchKernel reads (kernargs, then one pointer slot per buffer)."""

    def __init__(self, function, args: ctypes.Structure, buffers: int, grid, block, shared=0):
        self.function, self.args, self.grid, self.block = function, args, grid, block
        self.shared = shared  # dynamic shared memory bytes
        self.pointers = (ctypes.c_uint64 * buffers)()
        base = ctypes.addressof(self.pointers)
        self.params = (ctypes.c_void_p * (1 + buffers))(
            ctypes.addressof(args), *[base + 8 * i for i in range(buffers)]
        )
        self.params_at = ctypes.addressof(self.params)


class Context(NamedTuple):
    device: int
    stream: int  # cudaStream_t
    torch: bool  # x is a torch tensor: new arrays are torch tensors (torch's allocator)
    current: bool = False  # stream is x's framework's current stream (no stream= given)


def _torch_device(array) -> int | None:
    return array.device.index if array.is_cuda else None


class CudaBackend(Backend):
    def __init__(self, manifest: cache.Manifest):
        import cupy

        super().__init__(manifest)
        self.cupy = cupy
        self.device = cupy.cuda.runtime.getDevice()
        self._functions: dict[str, Any] = {}
        self._dummy = cupy.zeros(4, dtype=cupy.float32)
        self.null = self._dummy.data.ptr
        self._gemm: Gemm | None = None
        self._lock = threading.Lock()  # the prepared parameter arrays are shared
        driver, runtime = _driver()
        self._driver = driver
        self._launch, self._driver_error = driver.launchKernel, driver.CUDADriverError
        self._is_capturing, self._runtime_error = (
            runtime.streamIsCapturing,
            runtime.CUDARuntimeError,
        )
        self._streams: dict[int, Any] = {}
        self._graph_launch = runtime.graphLaunch
        self._capture_mode = runtime.streamCaptureModeThreadLocal
        self._capture_streams = threading.local()  # one private capture stream per thread
        #: plan.run's launches as CUDA graphs on seen pointers (WINO_CUDA_GRAPHS=0: never)
        self.run_graphs = os.environ.get("WINO_CUDA_GRAPHS", "1") != "0"

    def function(self, name: str):
        if name not in self._functions:
            image = self.manifest.image(name)  # read once, sha256 of these bytes checked
            module = self.cupy.cuda.function.Module()
            module.load(image)  # cuModuleLoadData: exactly the checked bytes
            self._functions[name] = (
                module,
                module.get_function(self.manifest.kernels[name].symbol),
            )
        return self._functions[name][1]

    def gemm_handle(self) -> Gemm:
        if self._gemm is None:
            self._gemm = Gemm(self.cupy)
        return self._gemm

    # Prepared launches -----------------------------------------------------------------------
    def prepare(self, plan: Plan, step: KernelStep) -> _Launch:
        self.gemm_handle()  # created before any capture
        abi = self.manifest.kernel(step.name).abi
        args = args_struct(abi)(*abi.pack(step.launch.kernargs))
        function = self.function(step.name)
        launch = step.launch
        shared = launch.shared_bytes if launch.dynamic_shared else 0
        if shared > 48 * 1024:  # past the default dynamic limit the kernel must opt in
            try:
                self._driver.funcSetAttribute(function.ptr, _MAX_DYNAMIC_SHARED, shared)
            except self._driver_error as err:
                raise RuntimeError(
                    f"{step.name}: {shared} bytes of dynamic shared memory refused by the "
                    f"driver ({err})"
                ) from None
        return _Launch(function.ptr, args, len(abi.buffers), launch.grid, launch.block, shared)

    def issue(self, op, pointers: dict, ctx: Context) -> None:
        h = op.handle
        (gx, gy, gz), (bx, by, bz) = h.grid, h.block
        try:
            with self._lock:
                for i, slot in enumerate(op.slots):
                    h.pointers[i] = pointers[slot.source] + slot.offset
                self._launch(
                    h.function, gx, gy, gz, bx, by, bz, h.shared, ctx.stream, h.params_at, 0
                )
        except self._driver_error as err:
            raise RuntimeError(f"cuLaunchKernel {op.step.name} failed: {err}") from None

    def issue_program(self, plan, prog, pointers: dict, arrays: dict, ctx: Context) -> None:
        """The run as one graph launch where the same pointers came back (graphs.RunGraphs);
        every launch issued where they are new or the call's stream is being captured (the
        caller's graph then records the launches themselves)."""
        if not self.run_graphs or not self.keeps_workspace(ctx):
            return super().issue_program(plan, prog, pointers, arrays, ctx)
        if plan._graphs is None:
            plan._graphs = RunGraphs()
        key = tuple(pointers.get(source) for source in _GRAPH_KEY)
        graph, capture = plan._graphs.find(key)
        if graph is None and capture:
            graph = self._capture(plan, prog, pointers, arrays, ctx)
            plan._graphs.keep(key, graph)
        if graph is None:
            return super().issue_program(plan, prog, pointers, arrays, ctx)
        try:
            self._graph_launch(graph.graphExec, ctx.stream)
        except self._runtime_error as err:
            raise RuntimeError(f"cudaGraphLaunch of {plan.problem.label()}: {err}") from None

    def _capture(self, plan, prog, pointers: dict, arrays: dict, ctx: Context):
        """The run's launches recorded on a private stream (thread-local capture mode: other
        threads' CUDA calls are not disturbed), instantiated; nothing runs here."""
        side = getattr(self._capture_streams, "stream", None)
        if side is None:
            side = self._capture_streams.stream = self.cupy.cuda.Stream(non_blocking=True)
        side.begin_capture(mode=self._capture_mode)
        try:
            super().issue_program(plan, prog, pointers, arrays, ctx._replace(stream=side.ptr))
        except BaseException:
            with contextlib.suppress(Exception):
                side.end_capture()
            raise
        return side.end_capture()

    def prepare_gemm(self, plan: Plan, step: GemmStep) -> Matmul:
        return self.gemm_handle().matmul(gemm_shape(step))

    def issue_gemm(self, op, pointers: dict, arrays: dict, ctx: Context) -> None:
        ws = pointers[Source.WS]
        op.handle.run(pointers[Source.U], ws + op.V.offset, ws + op.M.offset, ctx.stream)

    # Array primitives --------------------------------------------------------------------------
    def context(self, array, stream, label: str = "x") -> Context:
        device = self._device_of(label, array)
        if device != self.device:
            raise ValueError(
                f"{label}: on cuda:{device}, but this process runs wino on cuda:{self.device} (the "
                "current device when the cache was opened); one device per process"
            )
        handle = self._stream_handle(array, stream)
        return Context(device, handle, is_torch(array), stream is None)

    def _device_of(self, label: str, array) -> int:
        if is_torch(array):
            device = _torch_device(array)
            if device is None:
                raise ValueError(
                    f"{label}: a tensor on {array.device} on the cuda target; move it with "
                    ".cuda() or dispatch the c target"
                )
            return device
        if isinstance(array, self.cupy.ndarray):
            return array.device.id
        raise ValueError(
            f"{label}: the cuda target takes CuPy arrays or torch CUDA tensors, got "
            f"{type(array).__name__}"
        )

    def _stream_handle(self, array, stream) -> int:
        if stream is None:
            if is_torch(array):
                return _torch_current_stream(array.device.index)
            return self.cupy.cuda.get_current_stream().ptr
        if isinstance(stream, int) and not isinstance(stream, bool):
            return stream
        for attr in ("cuda_stream", "ptr"):  # torch.cuda.Stream, cupy Stream
            handle = getattr(stream, attr, None)
            if isinstance(handle, int):
                return handle
        raise ValueError(
            f"stream: expected a torch.cuda.Stream, a CuPy stream or a cudaStream_t int, got "
            f"{type(stream).__name__}"
        )

    def check_device(self, label: str, array, ctx: Context) -> None:
        device = self._device_of(label, array)
        if device != ctx.device:
            raise ValueError(f"{label}: on cuda:{device}, but x is on cuda:{ctx.device}")

    def pointer(self, array) -> int:
        return array.data_ptr() if is_torch(array) else array.data.ptr

    def describe(self, array) -> tuple | None:
        """Pointer, strides, shape, dtype (and torch's device index): under unified virtual
        addressing a device pointer also names its device."""
        if isinstance(array, self.cupy.ndarray):
            return (self.cupy.ndarray, array.data.ptr, array.strides, array.shape, array.dtype)
        if is_torch(array):
            shape, device = tuple(array.shape), array.get_device()
            return (type(array), array.data_ptr(), array.stride(), shape, array.dtype, device)
        return None

    def restream(self, ctx: Context, x, stream) -> Context:
        if stream is not None:
            handle = self._stream_handle(x, stream)
        elif ctx.torch:
            handle = _torch_current_stream(ctx.device)
        else:
            handle = self.cupy.cuda.get_current_stream().ptr
        current = stream is None
        if handle == ctx.stream and current == ctx.current:
            return ctx
        return ctx._replace(stream=handle, current=current)

    def workspace_slot(self, ctx: Context):
        return ctx.stream  # launches on one stream are ordered: its runs may share one

    def keeps_workspace(self, ctx: Context) -> bool:
        """Not while the call's stream is being captured: the graph would replay on memory
        the plan may free (release, a dropped slot) while the graph lives."""
        try:
            return not self._is_capturing(ctx.stream)
        except self._runtime_error:  # the legacy stream while another stream captures: no
            return False

    def _contiguous(self, array) -> bool:
        if is_torch(array):
            return array.is_contiguous()
        return array.flags.c_contiguous

    def operand(self, array, dtype: DType, label: str = "x", ctx: Context | None = None):
        if ctx is not None:
            self.check_device(label, array, ctx)
        if self._contiguous(array) and self.pointer(array) % ALIGN == 0:
            return array
        if is_torch(array):
            with self._torch_on(ctx):  # a copy, ordered on the call's stream
                return array.clone(memory_format=_torch().contiguous_format)
        with self._on(ctx):
            return self.cupy.array(array, order="C", copy=True)

    def output(self, plan: Plan, x, y, ctx: Context | None = None):
        p = plan.problem
        shape = (p.N, p.Ho, p.Wo, p.K)
        if y is None:
            if ctx is not None and ctx.torch:  # like x: its dtype and device, torch's allocator
                with self._torch_on(ctx):
                    y = x.new_empty(shape)
            else:
                y = self._new(ctx, shape, x.dtype, x.dtype)
            return y, y
        try:
            ok = dtype_of(y) is p.dtype and tuple(y.shape) == shape
        except TypeError:
            ok = False
        if not ok:
            raise ValueError(
                f"y: expected shape {shape} and dtype {p.dtype.short}, got "
                f"{tuple(getattr(y, 'shape', ()))} {getattr(y, 'dtype', type(y).__name__)}"
            )
        if ctx is not None:
            self.check_device("y", y, ctx)
        if not self._contiguous(y) or self.pointer(y) % ALIGN:
            raise ValueError(
                f"y: must be C-contiguous (NHWK) and {ALIGN}-byte aligned: the kernels write "
                "it in place and a temporary copy would lose the output"
            )
        return y, y

    def _new(self, ctx: Context | None, shape, torch_dtype, cupy_dtype):
        """A new array (a torch tensor when x is one, else CuPy) allocated on the call's
        stream: the framework's caching allocator then reuses its memory only on that stream
        (so in order) once it is freed. Never ``record_stream`` on the caller's stream: that
        makes the free record an event on it, and a stream the caller destroyed before the
        array is freed (a CuPy stream, a raw handle) would be a dangling handle there."""
        if ctx is not None and ctx.torch:
            device = _torch_devices(ctx.device)
            with self._torch_on(ctx):
                return _torch().empty(shape, dtype=torch_dtype, device=device)
        with self._on(ctx):
            return self.cupy.empty(shape, dtype=cupy_dtype)

    def _on(self, ctx: Context | None):
        """The call's stream as CuPy's current stream (for CuPy allocations and copies)."""
        if ctx is None:
            return contextlib.nullcontext()
        if ctx.stream not in self._streams:
            if len(self._streams) >= 64:  # wrappers of handles only: cheap to make again
                self._streams.clear()
            self._streams[ctx.stream] = self.cupy.cuda.ExternalStream(ctx.stream)
        return self._streams[ctx.stream]

    def _torch_on(self, ctx: Context | None):
        """The call's stream as torch's current stream (for torch copies and allocations),
        when it is not."""
        if ctx is None or (ctx.current and ctx.torch):  # torch's current stream already
            return contextlib.nullcontext()
        if ctx.stream == _torch_current_stream(ctx.device):
            return contextlib.nullcontext()
        torch = _torch()
        return torch.cuda.stream(torch.cuda.ExternalStream(ctx.stream, device=ctx.device))

    def empty(self, like, buffer, ctx: Context | None = None):
        torch_dtype = getattr(_torch(), _TORCH_NAMES[buffer.dtype]) if is_torch(like) else None
        return self._new(ctx, buffer.shape, torch_dtype, _RAW[buffer.dtype.itemsize])

    def raw_workspace(self, plan: Plan, workspace, ctx: Context | None = None):
        if workspace is None:
            torch_uint8 = _torch().uint8 if ctx is not None and ctx.torch else None
            return self._new(ctx, (plan.workspace_bytes,), torch_uint8, self.cupy.uint8)
        if ctx is not None:
            self.check_device("workspace", workspace, ctx)
        torch_ws = is_torch(workspace)
        nbytes = workspace.numel() * workspace.element_size() if torch_ws else workspace.nbytes
        if not self._contiguous(workspace) or nbytes < plan.workspace_bytes:
            raise ValueError(
                f"workspace: expected a C-contiguous CuPy array or torch CUDA tensor of at "
                f"least {plan.workspace_bytes} bytes, got {nbytes} bytes"
            )
        if self.pointer(workspace) % 256:
            raise ValueError("workspace: must be 256-byte aligned (as allocators return it)")
        return workspace

    def typed_view(self, raw, offset: int, count: int, dtype: DType, shape):
        if is_torch(raw):
            raw = device_view(raw.reshape(-1).view(_torch().uint8), DType.FP32, raw_bytes=True)
        raw = raw.view(self.cupy.uint8).reshape(-1)
        nbytes = count * dtype.itemsize
        return raw[offset : offset + nbytes].view(_RAW[dtype.itemsize]).reshape(shape)

    def launch(self, plan: Plan, step: KernelStep, buffers: dict[str, Any]) -> None:
        """One step on CuPy arrays on CuPy's current stream (the benchmark's route)."""
        abi = self.manifest.kernel(step.name).abi
        args = np.array(tuple(abi.pack(step.launch.kernargs)), dtype=args_dtype(abi))
        arrays = [buffers.get(name) for name in abi.buffer_names]
        pointers = [self._dummy if b is None else b for b in arrays]
        self.function(step.name)(step.launch.grid, step.launch.block, (args[()], *pointers))

    def holds(self, array, shape: tuple[int, ...], dtype: DType) -> bool:
        itemsize = getattr(getattr(array, "dtype", None), "itemsize", None)
        return tuple(getattr(array, "shape", ())) == shape and itemsize == dtype.itemsize

    def gemm(self, step: GemmStep, V, U, M, images: int = 1) -> None:
        """K3 on CuPy arrays on CuPy's current stream (the benchmark's route)."""
        stream = self.cupy.cuda.get_current_stream().ptr
        matmul = self.gemm_handle().matmul(gemm_shape(step))
        matmul.run(U.data.ptr, V.data.ptr, M.data.ptr, stream)


def gemm_shape(step: GemmStep) -> Shape:
    """Row-major M[P x Kg] = V[P x Cg] . U[Kg x Cg]^T per (bin, group), as column-major
    M^T = U . V^T: op(A) = U (A = U^T col-major, transposed), op(B) = V^T."""
    m, n, k = step.n, step.m, step.k
    xt, at = _CUDA_TYPE[step.xdtype], _CUDA_TYPE[step.accdtype]
    return Shape(
        CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, xt, k, m * k, xt, k, n * k, at, m, n * m, step.batch
    )
