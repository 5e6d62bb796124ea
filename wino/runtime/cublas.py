"""K3 on cuBLASLt through nvmath-python's bindings: a strided-batched mixed-precision GEMM whose
descriptors and algorithm are chosen once per shape, so a call is one ``cublasLtMatmul``.

Why not ``cublasGemmStridedBatchedEx``: it takes every extent, stride and type per call and
chooses its algorithm inside; measured on the H200's host it cost 11-20 us per call against
8-13 us for the prepared ``cublasLtMatmul`` (docs/BENCHMARKS.md, stop 11). Why not CuPy's
wrappers: they refuse to run while a stream is being captured into a CUDA graph. Here the
handle has a workspace of its own, set up front, so nothing is allocated during a capture,
and every call names the caller's stream.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF = 0, 2, 14
CUBLAS_COMPUTE_32F = 68
CUBLAS_OP_N, CUBLAS_OP_T = 0, 1
WORKSPACE_BYTES = 32 << 20  # cuBLAS's recommendation for Hopper
_ITEMSIZE = {CUDA_R_32F: 4, CUDA_R_16F: 2, CUDA_R_16BF: 2}
_MAX_ALIGNMENT = 256  # cuBLASLt's default assumption for every operand's pointer


@lru_cache(maxsize=1)
def bindings():
    """nvmath-python's cuBLASLt module (the optional `cuda` extra), imported on first use."""
    try:
        from nvmath.bindings import cublasLt
    except ImportError as err:
        raise ImportError(
            "wino's CUDA runtime runs K3 through nvmath-python's cuBLASLt bindings: "
            "pip install 'wino[cuda]' (or nvmath-python and cuda-bindings for CUDA 13)"
        ) from err
    return cublasLt


@dataclass(frozen=True)
class Shape:
    """One strided-batched GEMM, column-major: C[m x n] = op(A) op(B) per batch."""

    transa: int
    transb: int
    m: int
    n: int
    k: int
    atype: int
    lda: int
    stride_a: int
    btype: int
    ldb: int
    stride_b: int
    ctype: int
    ldc: int
    stride_c: int
    batch: int

    def alignment(self) -> int:
        """The largest power of two (at most 256 bytes) dividing every leading dimension and
        batch stride in bytes: what each batch's matrices keep of their base's alignment."""
        spans = (
            self.lda * _ITEMSIZE[self.atype],
            self.stride_a * _ITEMSIZE[self.atype],
            self.ldb * _ITEMSIZE[self.btype],
            self.stride_b * _ITEMSIZE[self.btype],
            self.ldc * _ITEMSIZE[self.ctype],
            self.stride_c * _ITEMSIZE[self.ctype],
        )
        align = _MAX_ALIGNMENT
        for span in spans:
            align = min(align, span & -span if span else _MAX_ALIGNMENT)
        return align


def _check(status_call, what: str):
    lt = bindings()
    try:
        return status_call()
    except lt.cuBLASLtError as err:
        raise RuntimeError(f"cuBLASLt {what} failed: {err}") from None


def _set(setter, dtype_of, obj: int, values) -> None:
    """Set each (attribute, value) of ``values`` on the cuBLASLt object ``obj`` through
    ``setter``, each value in the C type ``dtype_of(attribute)`` names."""
    for attr, value in values:
        buf = np.array([value], dtype=dtype_of(attr))
        setter(obj, attr, buf.ctypes.data, buf.nbytes)


class Matmul:
    """One shape's descriptors and algorithm, for operands aligned to ``align`` bytes."""

    def __init__(self, gemm: Gemm, shape: Shape, align: int):
        lt = bindings()
        self.gemm, self.shape, self.align = gemm, shape, align
        self.mask = align - 1
        self.desc = lt.matmul_desc_create(CUBLAS_COMPUTE_32F, CUDA_R_32F)
        ops = lt.MatmulDescAttribute
        _set(
            lt.matmul_desc_set_attribute,
            lt.get_matmul_desc_attribute_dtype,
            self.desc,
            ((ops.TRANSA, shape.transa), (ops.TRANSB, shape.transb)),
        )
        s = shape
        a_rows, a_cols = (s.m, s.k) if s.transa == CUBLAS_OP_N else (s.k, s.m)
        b_rows, b_cols = (s.k, s.n) if s.transb == CUBLAS_OP_N else (s.n, s.k)
        self.a = self._layout(s.atype, a_rows, a_cols, s.lda, s.stride_a)
        self.b = self._layout(s.btype, b_rows, b_cols, s.ldb, s.stride_b)
        self.c = self._layout(s.ctype, s.m, s.n, s.ldc, s.stride_c)
        self.result = self._heuristic()
        self.algo = self.result.ptr  # cublasLtMatmulHeuristicResult_t starts with its algo

    def _layout(self, dtype: int, rows: int, cols: int, ld: int, stride: int) -> int:
        lt = bindings()
        layout = lt.matrix_layout_create(dtype, rows, cols, ld)
        attrs = lt.MatrixLayoutAttribute
        _set(
            lt.matrix_layout_set_attribute,
            lt.get_matrix_layout_attribute_dtype,
            layout,
            ((attrs.BATCH_COUNT, self.shape.batch), (attrs.STRIDED_BATCH_OFFSET, stride)),
        )
        return layout

    def _heuristic(self):
        """cuBLASLt's first algorithm for this shape, workspace and alignment."""
        lt = bindings()
        pref = lt.matmul_preference_create()
        attrs = lt.MatmulPreferenceAttribute
        try:
            values = [(attrs.MAX_WORKSPACE_BYTES, WORKSPACE_BYTES)] + [
                (attr, self.align)
                for attr in (
                    attrs.MIN_ALIGNMENT_A_BYTES,
                    attrs.MIN_ALIGNMENT_B_BYTES,
                    attrs.MIN_ALIGNMENT_C_BYTES,
                    attrs.MIN_ALIGNMENT_D_BYTES,
                )
            ]
            _set(
                lt.matmul_preference_set_attribute,
                lt.get_matmul_preference_attribute_dtype,
                pref,
                values,
            )
            result = lt.MatmulHeuristicResult(1)
            found = np.zeros(1, dtype=np.int32)
            _check(
                lambda: lt.matmul_algo_get_heuristic(
                    self.gemm.handle,
                    self.desc,
                    self.a,
                    self.b,
                    self.c,
                    self.c,
                    pref,
                    1,
                    result.ptr,
                    found.ctypes.data,
                ),
                "heuristic",
            )
        finally:
            lt.matmul_preference_destroy(pref)
        if found[0] < 1:
            raise RuntimeError(f"cuBLASLt has no algorithm for {self.shape} at {self.align} B")
        return result

    def run(self, a: int, b: int, c: int, stream: int) -> None:
        """C = op(A) op(B) per batch (alpha 1, beta 0) on ``stream``; operands less aligned
        than this algorithm assumes go to the algorithm for their alignment."""
        if (a | b | c) & self.mask:
            self.gemm.matmul(self.shape, a | b | c).run(a, b, c, stream)
            return
        g = self.gemm
        g.lt.matmul(
            g.handle,
            self.desc,
            g.alpha,
            a,
            self.a,
            b,
            self.b,
            g.beta,
            c,
            self.c,
            c,
            self.c,
            self.algo,
            g.workspace_at,
            WORKSPACE_BYTES,
            stream,
        )


class Gemm:
    """One cuBLASLt handle per device, with its own workspace and the prepared shapes.

    The workspace is shared by the device's streams: GEMMs of plans run concurrently on two
    streams may share it, as one cuBLAS handle's workspace always was here."""

    def __init__(self, cupy):
        self.lt = bindings()
        self.handle = _check(self.lt.create, "create")
        self.workspace = cupy.empty(WORKSPACE_BYTES, dtype=cupy.uint8)
        self.workspace_at = self.workspace.data.ptr
        self._scalars = np.array([1.0, 0.0], dtype=np.float32)  # alpha, beta (host memory)
        self.alpha = self._scalars.ctypes.data
        self.beta = self.alpha + 4
        self._prepared: dict[tuple[Shape, int], Matmul] = {}

    def matmul(self, shape: Shape, pointers: int = 0) -> Matmul:
        """The prepared GEMM of ``shape`` for operands whose addresses OR to ``pointers``
        (0: aligned to cuBLASLt's default)."""
        align = shape.alignment()
        if pointers:
            align = min(align, pointers & -pointers)
        key = (shape, align)
        prepared = self._prepared.get(key)
        if prepared is None:
            prepared = self._prepared[key] = Matmul(self, shape, align)
        return prepared
