"""The CUDA backend: cubins from the cache through CuPy, K3 through cuBLAS strided-batched
mixed precision (fp16/bf16 in, fp32 accumulate and out).

Arrays: CuPy arrays and PyTorch CUDA tensors are used in place (no copies): their device
pointers are wrapped, so 16-bit buffers travel as raw ``unsigned short`` whatever the framework
calls them.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from .. import cache
from ..vocab import DType
from .arrays import dtype_of, is_torch
from .backends import Backend
from .cublas import CUBLAS_OP_N, CUBLAS_OP_T, CUDA_R_16BF, CUDA_R_16F, CUDA_R_32F, Gemm
from .plan import GemmStep, KernelStep, Plan

_CUDA_TYPE = {DType.FP32: CUDA_R_32F, DType.FP16: CUDA_R_16F, DType.BF16: CUDA_R_16BF}
_RAW = {2: np.uint16, 4: np.float32}


_NP_TYPES = {"int": np.int32, "unsigned": np.uint32}


@functools.cache
def args_dtype(abi: cache.KernelAbi) -> np.dtype:
    """The kernarg struct of a kernel's ABI record as a numpy structured dtype (passed by value
    to the kernel)."""
    return np.dtype([(name, _NP_TYPES[ctype]) for ctype, name in abi.kernargs])


def device_view(array: Any, dtype: DType):
    """A CuPy view of a CuPy array or torch CUDA tensor's memory, typed raw (uint16 / float32)."""
    import cupy

    if is_torch(array):
        if not array.is_cuda or not array.is_contiguous():
            raise ValueError("torch tensors must be contiguous CUDA tensors")
        pointer, nbytes = array.data_ptr(), array.numel() * array.element_size()
        memory = cupy.cuda.UnownedMemory(pointer, nbytes, array)
        return cupy.ndarray(
            tuple(array.shape),
            dtype=_RAW[dtype.itemsize],
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


class CudaBackend(Backend):
    def __init__(self, manifest: cache.Manifest):
        import cupy

        super().__init__(manifest)
        self.cupy = cupy
        self._functions: dict[str, Any] = {}
        self._dummy = cupy.zeros(4, dtype=cupy.float32)
        self._gemm: Gemm | None = None

    def function(self, name: str):
        if name not in self._functions:
            entry = self.manifest.kernel(name)
            module = self.cupy.RawModule(path=str(entry.path))
            self._functions[name] = module.get_function(entry.symbol)
        return self._functions[name]

    def launch(self, plan: Plan, step: KernelStep, buffers: dict[str, Any]) -> None:
        abi = self.manifest.kernel(step.name).abi
        args = np.array(tuple(abi.pack(step.launch.kernargs)), dtype=args_dtype(abi))
        arrays = [buffers.get(name) for name in abi.buffer_names]
        pointers = [self._dummy if b is None else b for b in arrays]
        self.function(step.name)(step.launch.grid, step.launch.block, (args[()], *pointers))

    # Array primitives --------------------------------------------------------------------------
    def raw_workspace(self, plan: Plan, workspace):
        if workspace is None:
            return self.cupy.empty(plan.workspace_bytes, dtype=self.cupy.uint8)
        if not isinstance(workspace, self.cupy.ndarray) or not workspace.flags.c_contiguous:
            raise ValueError(
                f"workspace: expected a C-contiguous CuPy array of at least "
                f"{plan.workspace_bytes} bytes"
            )
        return workspace.view(self.cupy.uint8).reshape(-1)

    def typed_view(self, raw, offset: int, count: int, dtype: DType, shape):
        nbytes = count * dtype.itemsize
        return raw[offset : offset + nbytes].view(_RAW[dtype.itemsize]).reshape(shape)

    def operand(self, array, dtype: DType):
        return device_view(array, dtype)

    def output(self, plan: Plan, x, y):
        p = plan.problem
        shape = (p.N, p.Ho, p.Wo, p.K)
        if y is None:
            if is_torch(x):
                import torch

                y = torch.empty(shape, dtype=x.dtype, device=x.device)
            else:
                y = self.cupy.empty(shape, dtype=x.dtype)
        elif dtype_of(y) is not p.dtype or tuple(y.shape) != shape:
            raise ValueError(
                f"y: expected shape {shape} and dtype {p.dtype.short}, got "
                f"{tuple(y.shape)} {y.dtype}"
            )
        return y, device_view(y, p.dtype)

    def holds(self, array, shape: tuple[int, ...], dtype: DType) -> bool:
        itemsize = getattr(getattr(array, "dtype", None), "itemsize", None)
        return tuple(getattr(array, "shape", ())) == shape and itemsize == dtype.itemsize

    def gemm(self, step: GemmStep, V, U, M, images: int = 1) -> None:
        """Row-major M[P x Kg] = V[P x Cg] . U[Kg x Cg]^T per (bin, group), as column-major
        M^T = U . V^T: op(A) = U (A = U^T col-major, transposed), op(B) = V^T. Capturable into
        a CUDA graph (wino.runtime.cublas). ``images`` is unused: one batched call per chunk."""
        if self._gemm is None:
            self._gemm = Gemm(self.cupy)
        m, n, k = step.n, step.m, step.k
        xt, at = _CUDA_TYPE[step.xdtype], _CUDA_TYPE[step.accdtype]
        self._gemm.strided_batched(
            CUBLAS_OP_T,
            CUBLAS_OP_N,
            m,
            n,
            k,
            U.data.ptr,
            xt,
            k,
            m * k,
            V.data.ptr,
            xt,
            k,
            n * k,
            M.data.ptr,
            at,
            m,
            n * m,
            step.batch,
        )
