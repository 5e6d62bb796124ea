"""A minimal ctypes binding of cuBLAS's strided-batched mixed-precision GEMM.

CuPy's own cuBLAS wrappers refuse to run while a stream is being captured into a CUDA graph,
which the benchmark (and any caller that replays a plan as a graph) needs. This binding calls
``cublasGemmStridedBatchedEx`` on a handle of its own, bound to the caller's stream, with a
workspace set up front so that nothing is allocated during capture. It uses the libcublas that
CuPy already loaded.
"""

from __future__ import annotations

import ctypes
from functools import lru_cache

CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF = 0, 2, 14
CUBLAS_COMPUTE_32F = 68
CUBLAS_GEMM_DEFAULT = -1
CUBLAS_OP_N, CUBLAS_OP_T = 0, 1
WORKSPACE_BYTES = 32 << 20  # cuBLAS's recommendation for Hopper


def _loaded_library_path(stem: str) -> str:
    """Path of a shared library already mapped into this process (CuPy loaded it)."""
    with open("/proc/self/maps", encoding="utf-8") as maps:
        for line in maps:
            path = line.split()[-1]
            if f"/{stem}.so" in path:
                return path
    return f"{stem}.so"


@lru_cache(maxsize=1)
def library() -> ctypes.CDLL:
    from cupy_backends.cuda.libs import cublas  # noqa: F401 - makes CuPy load libcublas

    lib = ctypes.CDLL(_loaded_library_path("libcublas"))
    lib.cublasCreate_v2.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    lib.cublasSetStream_v2.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.cublasSetWorkspace_v2.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    # cublasGemmStridedBatchedEx has no argtypes: converting 23 arguments through them costs
    # more than the rest of a run's Python work. The caller passes each argument as its C type
    # (c_void_p for handles and pointers, c_longlong for strides, ints below 2**31 for the int
    # parameters, which ctypes passes as C int): Gemm.strided_batched does.
    return lib


def _check(status: int, what: str) -> None:
    if status != 0:
        raise RuntimeError(f"cuBLAS {what} failed with status {status}")


class Gemm:
    """One cuBLAS handle per device, with its own workspace."""

    def __init__(self, cupy):
        self.cupy = cupy
        self.lib = library()
        self.handle = ctypes.c_void_p()
        _check(self.lib.cublasCreate_v2(ctypes.byref(self.handle)), "create")
        self.workspace = cupy.empty(WORKSPACE_BYTES, dtype=cupy.uint8)
        _check(
            self.lib.cublasSetWorkspace_v2(self.handle, self.workspace.data.ptr, WORKSPACE_BYTES),
            "set workspace",
        )
        self.alpha = ctypes.c_float(1.0)
        self.beta = ctypes.c_float(0.0)
        self._alpha, self._beta = ctypes.byref(self.alpha), ctypes.byref(self.beta)
        self.stream: int | None = None  # the stream the handle is bound to

    def bind(self, stream: int) -> None:
        """Bind the handle to ``stream`` (the caller's). cublasSetStream resets the workspace
        to cuBLAS's default pool, so ours is set again after it: nothing is allocated inside
        a graph capture."""
        if stream == self.stream:
            return
        _check(self.lib.cublasSetStream_v2(self.handle, stream), "set stream")
        _check(
            self.lib.cublasSetWorkspace_v2(self.handle, self.workspace.data.ptr, WORKSPACE_BYTES),
            "set workspace",
        )
        self.stream = stream

    def strided_batched(
        self,
        transa,
        transb,
        m,
        n,
        k,
        a,
        atype,
        lda,
        stride_a,
        b,
        btype,
        ldb,
        stride_b,
        c,
        ctype,
        ldc,
        stride_c,
        batch,
        stream: int | None = None,
    ) -> None:
        """C = op(A) op(B) per batch, column-major, fp32 accumulate, alpha 1, beta 0, on
        ``stream`` (a cudaStream_t; None: CuPy's current stream)."""
        self.bind(self.cupy.cuda.get_current_stream().ptr if stream is None else stream)
        ptr, i64 = ctypes.c_void_p, ctypes.c_longlong
        status = self.lib.cublasGemmStridedBatchedEx(
            self.handle,
            transa,
            transb,
            m,
            n,
            k,
            self._alpha,
            ptr(a),
            atype,
            lda,
            i64(stride_a),
            ptr(b),
            btype,
            ldb,
            i64(stride_b),
            self._beta,
            ptr(c),
            ctype,
            ldc,
            i64(stride_c),
            batch,
            CUBLAS_COMPUTE_32F,
            CUBLAS_GEMM_DEFAULT,
        )
        _check(status, "GemmStridedBatchedEx")
