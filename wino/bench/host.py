"""The host (c target) device: numpy operands, the numpy float64 reference, ``perf_counter``
timing, memcpy bandwidth and the GEMM rate through the host backend's numpy GEMM.

The host is a functional stand-in for the GPU, not a performance target: candidates are timed
once each (no warm-up: the binaries are loaded first), the chain a few times."""

from __future__ import annotations

import numpy as np

from ..problem import Problem
from ..runtime.arrays import numpy_dtype
from ..runtime.plan import GemmStep
from ..runtime.reference import conv2d_reference, relative_error
from ..vocab import Target
from .device import CopyShape, Device, Operands
from .timing import HostTimer, Settings

COPY_BYTES = 64 << 20
L2_COPY_BYTES = 256 << 10  # each of the two buffers: both in a core's L2
L2_COPY_REPEATS = 64


class HostDevice(Device):
    target = Target.C
    CANDIDATE = Settings(warmup=0, repeats=1)
    FINAL = Settings(warmup=0, repeats=3)
    GEMM_SHAPE = (16, 2048, 128, 128)
    MMA_SHAPE = (4, 512, 512, 512)
    #: Candidates per stage on the host (the GPU times every candidate).
    CANDIDATE_LIMIT = 2

    def timer(self, final: bool = False) -> HostTimer:
        return HostTimer(self.final_settings if final else self.candidate_settings)

    def operands(self, problem: Problem) -> Operands:
        """One set of fresh N(0, 1) inputs (host caches are far smaller than the operands)."""
        rng = np.random.default_rng()
        dtype = numpy_dtype(problem.dtype)
        x = rng.standard_normal((problem.N, problem.H, problem.W, problem.C), np.float32)
        w = rng.standard_normal((problem.K, problem.R, problem.S, problem.Cg), np.float32)
        y = np.empty((problem.N, problem.Ho, problem.Wo, problem.K), dtype)
        arrays = (x.astype(dtype), w.astype(dtype), y)
        return Operands([arrays], [arrays])

    def workspace(self, nbytes: int) -> np.ndarray:
        return np.empty(nbytes, np.uint8)

    def poison(self, y) -> None:
        y[...] = np.nan

    def synchronize(self) -> None:
        pass

    def reference(self, problem: Problem, operands: Operands):
        x, w, _ = operands.arrays[0]
        return conv2d_reference(
            x, w, (problem.pad_h, problem.pad_w), (problem.dil_h, problem.dil_w), problem.groups
        )

    def error(self, y, ref) -> float:
        return relative_error(y, ref)

    def measure_copy_gbs(self) -> float:
        return _copy_gbs(COPY_BYTES, 1)

    def measure_l2_gbs(self) -> float:
        return _copy_gbs(L2_COPY_BYTES, L2_COPY_REPEATS)

    def measure_stage_copy_us(self, shape: CopyShape) -> float:
        """numpy: the common bytes copied, the surplus written as zeros or read by a max."""
        reads, writes = (-(-n // 8) for n in (shape.read, shape.write))  # 8-byte words
        both = min(reads, writes)
        src = np.random.default_rng().integers(0, 1 << 62, reads, np.uint64)
        dst = np.empty(writes, np.uint64)

        def run(s: int) -> None:
            np.copyto(dst[:both], src[:both])
            dst[both:] = 0
            if reads > both:
                src[both:].max()

        return self.timer(final=True).time_us(run)

    def measure_gemm_us(self, step: GemmStep) -> float:
        rng = np.random.default_rng()
        x, acc = numpy_dtype(step.xdtype), numpy_dtype(step.accdtype)
        V = rng.standard_normal((step.batch, 1, step.m, step.k), np.float32).astype(x)
        U = rng.standard_normal((step.batch, step.n, step.k), np.float32).astype(x)
        M = np.empty((step.batch, 1, step.m, step.n), acc)
        return HostTimer(Settings(1, 3)).time_us(lambda s: self.backend.gemm(step, V, U, M, 1))


def _copy_gbs(nbytes: int, copies: int) -> float:
    """``copies`` copies of an ``nbytes`` buffer into another a timed call: bytes read + written
    over the time."""
    src = np.random.default_rng().standard_normal(nbytes // 4, np.float32)
    dst = np.empty_like(src)

    def run(s: int) -> None:
        for _ in range(copies):
            np.copyto(dst, src)

    seconds = HostTimer(Settings(1, 5)).time_us(run) * 1e-6
    return 2 * src.nbytes * copies / seconds / 1e9
