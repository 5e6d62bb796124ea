"""K3 on the host (wino.runtime.host.HostGemm): the worker pool's result is the BLAS GEMM's,
bit for bit, for every worker count and dtype; 16-bit operands are widened exactly; the
thread count follows OMP_NUM_THREADS; OpenMP is asked to wait passively unless the caller chose."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from wino.runtime import host
from wino.runtime.host import HostGemm, host_threads


def _operands(dtype, a=5, g=2, p=37, cg=24, kg=16, seed=0):
    rng = np.random.default_rng(seed)
    V = rng.standard_normal((a, g, p, cg), np.float32).astype(dtype)
    U = rng.standard_normal((a, g, kg, cg), np.float32).astype(dtype)
    return V, U


def _expected(V, U):
    v, u = V.astype(np.float32), U.astype(np.float32)
    return np.matmul(v, u.swapaxes(-1, -2))


@pytest.mark.parametrize("threads", [1, 2, 3, 16])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
def test_workers_give_the_blas_result_bit_for_bit(threads, dtype):
    V, U = _operands(dtype)
    M = np.full(V.shape[:3] + (U.shape[2],), np.nan, np.float32)
    gemm = HostGemm(threads)
    gemm.run(V, U, M)
    assert np.array_equal(M, _expected(V, U))
    gemm.run(V, U, M)  # warm: scratch reused, same answer
    assert np.array_equal(M, _expected(V, U))


def test_fp16_accumulator_storage_is_the_rounded_fp32_result():
    V, U = _operands(np.float16)
    M = np.empty(V.shape[:3] + (U.shape[2],), np.float16)
    HostGemm(2).run(V, U, M)
    assert np.array_equal(M, _expected(V, U).astype(np.float16))


def test_scratch_is_kept_between_calls():
    V, U = _operands(np.float16)
    M = np.empty(V.shape[:3] + (U.shape[2],), np.float32)
    gemm = HostGemm(2)
    gemm.run(V, U, M)
    held = {key: array.ctypes.data for key, array in gemm._scratch.items()}
    gemm.run(V, U, M)
    assert held and held == {key: array.ctypes.data for key, array in gemm._scratch.items()}


def test_blas_is_held_to_one_thread_only_during_the_gemm():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    seen = []
    gemm = HostGemm(2)
    real = gemm._drain

    def spy(*args):
        seen.append(
            [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]
        )
        return real(*args)

    gemm._drain = spy
    V, U = _operands(np.float32)
    before = [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]
    gemm.run(V, U, np.empty(V.shape[:3] + (U.shape[2],), np.float32))
    assert seen and all(all(n == 1 for n in s) for s in seen)
    after = [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]
    assert after == before


@pytest.mark.parametrize(("value", "expected"), [("3", 3), ("4,2", 4), (" 2 ", 2)])
def test_threads_follow_omp_num_threads(monkeypatch, value, expected):
    monkeypatch.setenv("OMP_NUM_THREADS", value)
    assert host_threads() == expected


def test_threads_default_to_the_usable_cpus(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert host_threads() >= 1


def test_openmp_waits_passively_unless_the_caller_chose(monkeypatch):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    host.passive_openmp()
    assert host.os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    host.passive_openmp()
    assert host.os.environ["OMP_WAIT_POLICY"] == "ACTIVE"


def test_blas_advice_names_the_core_type_only_where_avx512_kernels_go_unused(monkeypatch):
    from wino.runtime.host import blas_advice

    monkeypatch.delenv("OPENBLAS_CORETYPE", raising=False)
    haswell = [{"internal_api": "openblas", "user_api": "blas", "architecture": "Haswell"}]
    skx = [{"internal_api": "openblas", "user_api": "blas", "architecture": "SkylakeX"}]
    advice = blas_advice(haswell, {"avx2", "avx512f"})
    assert "OPENBLAS_CORETYPE=SkylakeX" in advice and "Haswell" in advice
    assert blas_advice(haswell, {"avx2"}) is None  # no AVX-512: Haswell is the right core
    assert blas_advice(skx, {"avx2", "avx512f"}) is None
    assert blas_advice([], {"avx512f"}) is None  # another BLAS: nothing to say
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    assert blas_advice(haswell, {"avx512f"}) is None  # the caller chose
