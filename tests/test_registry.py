"""registry.cuda_available: no CuPy or no device is "no CUDA here"; a broken stack raises."""

from __future__ import annotations

import sys
import types

import pytest

from wino.runtime import registry as backends


class _CudaError(RuntimeError):
    def __init__(self, status: int):
        super().__init__(f"cuda error {status}")
        self.status = status


def _fake_cupy(monkeypatch, count):
    def get_device_count():
        if isinstance(count, Exception):
            raise count
        return count

    runtime = types.SimpleNamespace(CUDARuntimeError=_CudaError, getDeviceCount=get_device_count)
    cupy = types.ModuleType("cupy")
    cupy.cuda = types.SimpleNamespace(runtime=runtime)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    backends.cuda_available.cache_clear()


@pytest.fixture(autouse=True)
def _fresh():
    backends.cuda_available.cache_clear()
    yield
    backends.cuda_available.cache_clear()


def test_no_cupy_is_no_cuda(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import raises ImportError
    assert backends.cuda_available() is False


@pytest.mark.parametrize("count, expected", [(0, False), (1, True), (_CudaError(100), False)])
def test_device_count(monkeypatch, count, expected):
    _fake_cupy(monkeypatch, count)
    assert backends.cuda_available() is expected


def test_a_broken_stack_raises_instead_of_skipping(monkeypatch):
    _fake_cupy(monkeypatch, _CudaError(35))  # cudaErrorInsufficientDriver
    with pytest.raises(_CudaError):
        backends.cuda_available()
