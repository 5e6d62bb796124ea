"""K3's cuBLASLt shapes on any machine: the alignment a prepared algorithm may assume."""

from __future__ import annotations

import pytest

from wino.runtime.cublas import CUBLAS_OP_N, CUBLAS_OP_T, CUDA_R_16F, CUDA_R_32F, Shape
from wino.runtime.cuda import gemm_shape
from wino.runtime.plan import GemmStep
from wino.vocab import DType


def _shape(m, n, k, xtype=CUDA_R_16F, ctype=CUDA_R_32F, batch=36):
    return Shape(
        CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, xtype, k, m * k, xtype, k, n * k, ctype, m, n * m, batch
    )


@pytest.mark.parametrize(
    ("m", "n", "k", "xtype", "expected"),
    [
        (64, 128, 64, 2, 128),  # lda 64 fp16: 128 bytes
        (64, 4096, 256, 2, 256),  # every span a multiple of 256 bytes
        (48, 37, 3, 2, 2),  # C/G 3 in fp16: lda 6 bytes
        (48, 37, 3, 0, 4),  # the same in fp32: 12 bytes, so 4
        (16, 9, 8, 2, 16),  # C/G 8: 16 bytes, one vector
    ],
)
def test_alignment_is_the_smallest_span_power_of_two(m, n, k, xtype, expected):
    assert _shape(m, n, k, xtype).alignment() == expected


def test_m_stride_counts_too():
    # lda and ldb 256 bytes, but M's batch stride 7 * 9 fp16 values: 126 bytes -> 2
    assert _shape(7, 9, 128, CUDA_R_16F, CUDA_R_16F).alignment() == 2


def test_gemm_shape_is_m_transposed_as_column_major():
    step = GemmStep(batch=36, m=50, n=24, k=16, xdtype=DType.FP16, accdtype=DType.FP32)
    s = gemm_shape(step)
    assert (s.transa, s.transb, s.m, s.n, s.k) == (CUBLAS_OP_T, CUBLAS_OP_N, 24, 50, 16)
    assert (s.lda, s.stride_a, s.ldb, s.stride_b, s.ldc, s.stride_c) == (16, 384, 16, 800, 24, 1200)
    assert (s.atype, s.ctype, s.batch) == (CUDA_R_16F, CUDA_R_32F, 36)
