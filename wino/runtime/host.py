"""The host backend: the c target's shared objects through ctypes, K3 through numpy's BLAS."""

from __future__ import annotations

import ctypes
import functools
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from threadpoolctl import ThreadpoolController

from .. import cache
from ..vocab import DType
from .arrays import numpy_dtype
from .backends import Backend
from .plan import GemmStep, KernelStep, Plan

ALIGN = 16  # the widest vector load or store the kernels make (bytes)


def _aligned(array: np.ndarray) -> np.ndarray:
    """A C-contiguous array whose data is ALIGN-byte aligned (copied only when it is not)."""
    array = np.ascontiguousarray(array)
    if array.ctypes.data % ALIGN:
        out = np.empty_like(array)  # malloc'd: aligned
        out[...] = array
        array = out
    return array


def _writable(label: str, array, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Check a caller's output buffer: numpy, the shape and dtype, C-contiguous, aligned."""
    if not isinstance(array, np.ndarray):
        raise ValueError(
            f"{label}: expected a numpy array on the c target, got {type(array).__name__}"
        )
    if tuple(array.shape) != shape or array.dtype != dtype:
        raise ValueError(
            f"{label}: expected shape {shape} and dtype {dtype}, got "
            f"{tuple(array.shape)} {array.dtype}"
        )
    if not (array.flags.c_contiguous and array.flags.writeable) or array.ctypes.data % ALIGN:
        raise ValueError(
            f"{label}: must be a writeable, C-contiguous, {ALIGN}-byte aligned "
            "array (the kernels write it in place)"
        )
    return array


_CTYPES = {"int": ctypes.c_int, "unsigned": ctypes.c_uint}


@functools.cache
def args_struct(abi: cache.KernelAbi) -> type[ctypes.Structure]:
    """The kernarg struct of a kernel's ABI record (wino.cache.KernelAbi)."""
    fields = [(name, _CTYPES[ctype]) for ctype, name in abi.kernargs]
    return type(f"Args_{abi.kind}", (ctypes.Structure,), {"_fields_": fields})


class HostBackend(Backend):
    def __init__(self, manifest: cache.Manifest):
        super().__init__(manifest)
        self._functions: dict[str, ctypes._CFuncPtr] = {}
        self._gemm = HostGemm(host_threads())

    def function(self, name: str):
        if name not in self._functions:
            entry = self.manifest.kernel(name)
            library = ctypes.CDLL(str(entry.path))
            self._functions[name] = getattr(library, entry.symbol)
        return self._functions[name]

    def launch(self, plan: Plan, step: KernelStep, buffers: dict[str, np.ndarray]) -> None:
        abi = self.manifest.kernel(step.name).abi
        args = args_struct(abi)(*abi.pack(step.launch.kernargs))
        arrays = [buffers.get(name) for name in abi.buffer_names]
        pointers = [ctypes.c_void_p(0 if b is None else b.ctypes.data) for b in arrays]
        gx, gy, _ = step.launch.grid
        self.function(step.name)(
            ctypes.byref(args), *pointers, ctypes.c_uint(gx), ctypes.c_uint(gy)
        )

    # Array primitives --------------------------------------------------------------------------
    def raw_workspace(self, plan: Plan, workspace) -> np.ndarray:
        if workspace is None:
            return np.empty(plan.workspace_bytes, dtype=np.uint8)
        if (
            not isinstance(workspace, np.ndarray)
            or not workspace.flags.c_contiguous
            or (workspace.ctypes.data % ALIGN or not workspace.flags.writeable)
        ):
            raise ValueError(
                f"workspace: expected a writeable, C-contiguous, {ALIGN}-byte "
                f"aligned numpy array of at least {plan.workspace_bytes} bytes"
            )
        return workspace.view(np.uint8).reshape(-1)

    def typed_view(self, raw, offset: int, count: int, dtype: DType, shape) -> np.ndarray:
        nbytes = count * dtype.itemsize
        return raw[offset : offset + nbytes].view(numpy_dtype(dtype)).reshape(shape)

    def operand(self, array, dtype: DType) -> np.ndarray:
        return _aligned(array)

    def output(self, plan: Plan, x, y) -> tuple[np.ndarray, np.ndarray]:
        p = plan.problem
        shape, dtype = (p.N, p.Ho, p.Wo, p.K), numpy_dtype(p.dtype)
        y = np.empty(shape, dtype=dtype) if y is None else _writable("y", y, shape, dtype)
        return y, y

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
    the A * G GEMMs spread over a pool of ``threads`` workers (the kernels' OpenMP width).

    Why not the BLAS's own threads: numpy's OpenBLAS splits each GEMM of a Winograd chunk
    (a few hundred rows) over its threads and synchronises them per call; on a small, shared
    machine that costs more than the GEMM (measured: 5-20x slower than one thread per GEMM).
    The BLAS is held to one thread (threadpoolctl) while the workers run.

    A row's result does not depend on the chunk: OpenBLAS's sgemm kernels accumulate each
    element over C/G in the same order for any row count, so a batch split changes no bit
    (tests/test_runtime_host.py checks it). 16-bit operands are widened one bin at a time into
    per-worker fp32 scratch that is kept between calls (no allocation per call once warm)."""

    def __init__(self, threads: int):
        self.threads = max(1, threads)
        self._pool = None
        self._controller = None
        self._scratch: dict[tuple[int, str], np.ndarray] = {}

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
        bounds = np.linspace(0, a * g, min(self.threads, a * g) + 1).astype(int)
        slices = list(zip(bounds[:-1], bounds[1:], strict=True))
        with self._limit_blas():
            if len(slices) == 1:
                self._slice(0, v, u, m, *slices[0])
                return
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="wino-k3")
            futures = [
                self._pool.submit(self._slice, i, v, u, m, lo, hi)
                for i, (lo, hi) in enumerate(slices)
            ]
            for future in futures:
                future.result()

    def _slice(self, worker: int, v, u, m, lo: int, hi: int) -> None:
        """GEMMs lo..hi of the batch (bins x groups) on this thread."""
        if v.dtype == u.dtype == m.dtype == np.float32:
            np.matmul(v[lo:hi], u[lo:hi].swapaxes(-1, -2), out=m[lo:hi])
            return
        vs = self._buffer(worker, "V", v.shape[1:])
        us = self._buffer(worker, "U", u.shape[1:])
        ms = None if m.dtype == np.float32 else self._buffer(worker, "M", m.shape[1:])
        for b in range(lo, hi):
            np.copyto(vs, v[b], casting="unsafe")
            np.copyto(us, u[b], casting="unsafe")
            if ms is None:
                np.matmul(vs, us.T, out=m[b])
            else:
                np.matmul(vs, us.T, out=ms)
                np.copyto(m[b], ms, casting="unsafe")


def host_threads() -> int:
    """The OpenMP width the kernels run with: OMP_NUM_THREADS (its first level) when set, else
    the CPUs this process may run on."""
    value = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if value.isdigit() and int(value) > 0:
        return int(value)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
