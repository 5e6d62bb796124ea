"""The host backend: the c target's shared objects through ctypes, K3 through numpy's BLAS."""

from __future__ import annotations

import ctypes
import functools
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from threadpoolctl import ThreadpoolController

from .. import cache
from ..vocab import DType
from . import loader
from .arrays import is_torch, numpy_dtype, torch_numpy
from .backends import Backend
from .plan import GemmStep, KernelStep, Plan
from .program import Source

ALIGN = 16  # the widest vector load or store the kernels make (bytes)


def _aligned(array: np.ndarray) -> np.ndarray:
    """A C-contiguous array whose data is ALIGN-byte aligned (copied only when it is not)."""
    array = np.ascontiguousarray(array)
    if array.ctypes.data % ALIGN:
        out = np.empty_like(array)  # malloc'd: aligned
        out[...] = array
        array = out
    return array


def host_array(label: str, array) -> np.ndarray:
    """A numpy array or a CPU torch tensor as numpy (a view: no copy); ValueError otherwise."""
    if isinstance(array, np.ndarray):
        return array
    if is_torch(array):
        if array.device.type != "cpu":
            raise ValueError(
                f"{label}: a tensor on {array.device} on the c (host) target; pass CPU "
                "tensors, or dispatch the cuda target"
            )
        return torch_numpy(array)
    raise ValueError(
        f"{label}: expected a numpy array or a CPU torch tensor on the c target, got "
        f"{type(array).__name__}"
    )


def _writable(label: str, array, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Check a caller's output buffer: the shape and dtype, C-contiguous, aligned."""
    array = host_array(label, array)
    if tuple(array.shape) != shape or array.dtype != dtype:
        raise ValueError(
            f"{label}: expected shape {shape} and dtype {dtype}, got "
            f"{tuple(array.shape)} {array.dtype}"
        )
    if not (array.flags.c_contiguous and array.flags.writeable) or array.ctypes.data % ALIGN:
        raise ValueError(
            f"{label}: must be a writeable, C-contiguous, {ALIGN}-byte aligned "
            "array (the kernels write it in place; a copy would lose the output)"
        )
    return array


_CTYPES = {"int": ctypes.c_int, "unsigned": ctypes.c_uint}


@functools.cache
def args_struct(abi: cache.KernelAbi) -> type[ctypes.Structure]:
    """The kernarg struct of a kernel's ABI record (wino.cache.KernelAbi)."""
    fields = [(name, _CTYPES[ctype]) for ctype, name in abi.kernargs]
    return type(f"Args_{abi.kind}", (ctypes.Structure,), {"_fields_": fields})


class _Launch(NamedTuple):
    function: Any  # the ctypes function, argtypes set
    args: ctypes.Structure  # the kernargs, packed once
    address: int  # of args
    gx: int
    gy: int


class HostBackend(Backend):
    def __init__(self, manifest: cache.Manifest):
        super().__init__(manifest)
        self._functions: dict[str, ctypes._CFuncPtr] = {}
        self._gemm = HostGemm(host_threads())

    def function(self, name: str):
        if name not in self._functions:
            passive_openmp()
            image = self.manifest.image(name)  # read once, sha256 of these bytes checked
            library = loader.load_shared_object(image, name)
            self._functions[name] = getattr(library, self.manifest.kernels[name].symbol)
        return self._functions[name]

    def prepare(self, plan: Plan, step: KernelStep) -> _Launch:
        abi = self.manifest.kernel(step.name).abi
        function = self.function(step.name)
        function.argtypes = [ctypes.c_void_p] * (1 + len(abi.buffers)) + [ctypes.c_uint] * 2
        function.restype = None
        args = args_struct(abi)(*abi.pack(step.launch.kernargs))
        gx, gy, _ = step.launch.grid
        return _Launch(function, args, ctypes.addressof(args), gx, gy)

    def issue(self, op, pointers: dict, ctx) -> None:
        h = op.handle
        h.function(h.address, *[pointers[s.source] + s.offset for s in op.slots], h.gx, h.gy)

    def issue_gemm(self, op, pointers: dict, arrays: dict, ctx) -> None:
        raw, u = arrays[Source.WS], arrays[Source.U]
        view = self.typed_view
        if u is None:
            u = view(raw, op.U.offset, op.U.count, op.U.dtype, op.U.shape)
        V = view(raw, op.V.offset, op.V.count, op.V.dtype, op.V.shape)
        M = view(raw, op.M.offset, op.M.count, op.M.dtype, op.M.shape)
        self.gemm(op.step, V, u, M, op.images)

    def launch(self, plan: Plan, step: KernelStep, buffers: dict[str, np.ndarray]) -> None:
        abi = self.manifest.kernel(step.name).abi
        args = args_struct(abi)(*abi.pack(step.launch.kernargs))
        arrays = [buffers.get(name) for name in abi.buffer_names]
        pointers = [ctypes.c_void_p(0 if b is None else b.ctypes.data) for b in arrays]
        gx, gy, _ = step.launch.grid
        self.function(step.name)(
            ctypes.c_void_p(ctypes.addressof(args)), *pointers, ctypes.c_uint(gx), ctypes.c_uint(gy)
        )

    # Array primitives --------------------------------------------------------------------------
    def context(self, array, stream, label: str = "x") -> None:
        if stream is not None:
            raise ValueError("stream: the c (host) target runs synchronously; pass stream=None")
        host_array(label, array)

    def pointer(self, array) -> int:
        """The data address of a numpy array (or of a CPU torch tensor)."""
        return array.data_ptr() if is_torch(array) else array.ctypes.data

    def describe(self, array) -> tuple | None:
        if isinstance(array, np.ndarray):
            face = array.__array_interface__
            return (np.ndarray, face["data"], face["strides"], array.shape, array.dtype)
        if is_torch(array):
            shape, strides = tuple(array.shape), array.stride()
            return (type(array), array.data_ptr(), strides, shape, array.dtype, array.device)
        return None

    def restream(self, ctx, x, stream):
        return self.context(x, stream)  # refuses a stream, as a first call does

    def workspace_slot(self, ctx):
        return threading.get_ident()  # the host runs synchronously: one per calling thread

    def raw_workspace(self, plan: Plan, workspace, ctx=None) -> np.ndarray:
        if workspace is None:
            return np.empty(plan.workspace_bytes, dtype=np.uint8)
        workspace = host_array("workspace", workspace)
        if not workspace.flags.c_contiguous or (
            workspace.ctypes.data % ALIGN or not workspace.flags.writeable
        ):
            raise ValueError(
                f"workspace: expected a writeable, C-contiguous, {ALIGN}-byte "
                f"aligned numpy array of at least {plan.workspace_bytes} bytes"
            )
        raw = workspace.view(np.uint8).reshape(-1)
        if raw.size < plan.workspace_bytes:
            raise ValueError(f"workspace: {raw.size} bytes given, {plan.workspace_bytes} needed")
        return raw

    def typed_view(self, raw, offset: int, count: int, dtype: DType, shape) -> np.ndarray:
        nbytes = count * dtype.itemsize
        return raw[offset : offset + nbytes].view(numpy_dtype(dtype)).reshape(shape)

    def operand(self, array, dtype: DType, label: str = "x", ctx=None) -> np.ndarray:
        return _aligned(host_array(label, array))

    def output(self, plan: Plan, x, y, ctx=None) -> tuple[Any, np.ndarray]:
        p = plan.problem
        shape, dtype = (p.N, p.Ho, p.Wo, p.K), numpy_dtype(p.dtype)
        if y is not None:
            return y, _writable("y", y, shape, dtype)
        if is_torch(x):
            import torch

            y = torch.empty(shape, dtype=x.dtype)
            return y, torch_numpy(y)
        y = np.empty(shape, dtype=dtype)
        return y, y

    def empty(self, like, buffer, ctx=None) -> np.ndarray:
        return np.empty(buffer.shape, dtype=numpy_dtype(buffer.dtype))

    def holds(self, array, shape: tuple[int, ...], dtype: DType) -> bool:
        return (
            isinstance(array, np.ndarray)
            and tuple(array.shape) == shape
            and array.dtype == numpy_dtype(dtype)
        )

    def gemm(self, step: GemmStep, V, U, M, images: int) -> None:
        """M[a][g] = V[a][g] . U[a][g]^T in fp32 (16-bit operands widened, fp32 accumulate)."""
        self._gemm.run(V, U, M)


class HostGemm:
    """K3 on the host: one single-threaded BLAS GEMM per (bin, group) over the whole chunk,
    taken one at a time by ``threads`` workers (the calling thread and a kept pool; the
    kernels' OpenMP width), so a worker the OS holds back delays no other's share.

    Why not the BLAS's own threads: numpy's OpenBLAS splits each GEMM of a Winograd chunk
    (a few hundred rows) over its threads and synchronises them per call; on a small, shared
    machine that costs more than the GEMM (measured: 5-20x slower than one thread per GEMM).
    The BLAS is held to one thread (threadpoolctl) while the workers run.

    Whether a batch split changes a bit is the BLAS's business: a row of M is the same GEMM
    row whatever the chunk, but the BLAS may round it differently in a call of another row
    count (``blas_rows_invariant`` probes it). On the earlier development machines OpenBLAS
    kept the bits; on the Zen 5 machine of 2026-12-02 neither its Haswell kernels (the
    environment's ``OPENBLAS_CORETYPE``) nor its SkylakeX ones do: the rows of a tail panel
    take another order, so a split moves y by fp32 rounding in K3 alone (docs/RUNTIME.md,
    "Batch split"; the host tests check both cases).

    The c target's default pick stores V and U in fp32 for every io dtype (grids/targets.yaml),
    so nothing is widened; 16-bit operands (forced 16-bit storage) are widened one bin at a
    time into per-worker fp32 scratch that is kept between calls (no allocation per call once
    warm)."""

    def __init__(self, threads: int):
        self.threads = max(1, threads)
        self._pool = None
        self._controller = None
        self._scratch: dict[tuple[int, str], np.ndarray] = {}
        self._lock = threading.Lock()  # one K3 at a time per backend: the scratch is shared

    def _limit_blas(self):
        if self._controller is None:
            self._controller = ThreadpoolController()
        return self._controller.limit(limits=1, user_api="blas")

    def _buffer(self, worker: int, label: str, shape: tuple[int, ...]) -> np.ndarray:
        count = int(np.prod(shape))
        held = self._scratch.get((worker, label))
        if held is None or held.size < count:
            held = self._scratch[(worker, label)] = np.empty(count, np.float32)
        return held[:count].reshape(shape)

    def run(self, V: np.ndarray, U: np.ndarray, M: np.ndarray) -> None:
        a, g, p, cg = V.shape
        kg = M.shape[-1]
        v, u, m = V.reshape(a * g, p, cg), U.reshape(a * g, kg, cg), M.reshape(a * g, p, kg)
        jobs = iter(range(a * g))  # shared; a range iterator's next() is atomic under the GIL
        helpers = min(self.threads, a * g) - 1
        with self._lock, self._limit_blas():
            if helpers and self._pool is None:
                self._pool = ThreadPoolExecutor(self.threads - 1, thread_name_prefix="wino-k3")
            futures = [self._pool.submit(self._drain, i + 1, jobs, v, u, m) for i in range(helpers)]
            self._drain(0, jobs, v, u, m)
            for future in futures:
                future.result()

    def _drain(self, worker: int, jobs, v, u, m) -> None:
        """Take GEMMs from ``jobs`` until none is left: M[b] = V[b] . U[b]^T."""
        widen = not (v.dtype == u.dtype == m.dtype == np.float32)
        if widen:
            vs = self._buffer(worker, "V", v.shape[1:])
            us = self._buffer(worker, "U", u.shape[1:])
            ms = None if m.dtype == np.float32 else self._buffer(worker, "M", m.shape[1:])
        for b in jobs:
            if not widen:
                np.matmul(v[b], u[b].T, out=m[b])
                continue
            np.copyto(vs, v[b], casting="unsafe")
            np.copyto(us, u[b], casting="unsafe")
            if ms is None:
                np.matmul(vs, us.T, out=m[b])
            else:
                np.matmul(vs, us.T, out=ms)
                np.copyto(m[b], ms, casting="unsafe")


@functools.cache
def blas_rows_invariant() -> bool:
    """Whether numpy's BLAS, held to one thread as K3 runs it, gives each row of an fp32 GEMM
    the same bits in a call of any row count (then a batch split changes no bit of y). Probed
    once per process on fixed data: 61 rows x 64 x 40, whole against calls of 1 to 24 rows."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((61, 64)).astype(np.float32)
    b = rng.standard_normal((40, 64)).astype(np.float32)
    with ThreadpoolController().limit(limits=1, user_api="blas"):
        whole = a @ b.T
        return all(
            np.array_equal(whole[i : i + rows], a[i : i + rows] @ b.T)
            for rows in (1, 3, 7, 16, 24)
            for i in range(0, len(a), rows)
        )


#: OpenBLAS core types without AVX-512 kernels (what a DYNAMIC_ARCH build takes on a CPU with
#: AVX-512 that it does not know, or what OPENBLAS_CORETYPE forces).
_AVX2_CORES = {"haswell", "zen"}


def blas_advice(info: list[dict] | None = None, flags: set[str] | None = None) -> str | None:
    """A sentence when numpy's OpenBLAS runs AVX2 kernels on a CPU with AVX-512 (K3 is most of
    the host's time on wide layers): OPENBLAS_CORETYPE=SkylakeX, set before numpy is imported,
    picks the AVX-512 kernels. None otherwise. ``info`` (threadpoolctl's) and ``flags`` (the
    CPU's, /proc/cpuinfo) for tests."""
    if info is None:
        from threadpoolctl import threadpool_info

        info = threadpool_info()
    if flags is None:
        flags = cpu_flags()
    cores = [
        i.get("architecture") or ""
        for i in info
        if i.get("internal_api") == "openblas" and i.get("user_api") == "blas"
    ]
    slow = [c for c in cores if c.lower() in _AVX2_CORES]
    if not slow or "avx512f" not in flags or os.environ.get("OPENBLAS_CORETYPE"):
        return None
    return (
        f"numpy's OpenBLAS runs its {slow[0]} (AVX2) kernels on this AVX-512 CPU; K3 (the "
        "GEMM) runs about 1.5x faster on its SkylakeX kernels: set OPENBLAS_CORETYPE=SkylakeX "
        "before numpy is imported"
    )


def cpu_flags() -> set[str]:
    """The CPU's feature flags (Linux /proc/cpuinfo; empty elsewhere)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="ascii", errors="replace")
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def passive_openmp() -> None:
    """Ask the kernels' OpenMP runtime to sleep, not spin, between kernels (unless the caller
    chose: OMP_WAIT_POLICY set). Between K2 and K4 the cores belong to K3's BLAS workers; a
    spinning OpenMP thread takes one of them. Read by libgomp when it loads with the first
    kernel; a no-op when it is already loaded."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def host_threads() -> int:
    """The OpenMP width the kernels run with: OMP_NUM_THREADS (its first level) when set, else
    the CPUs this process may run on."""
    value = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if value.isdigit() and int(value) > 0:
        return int(value)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
