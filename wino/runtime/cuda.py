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
from ..launch import kernarg_names
from ..vocab import DType, Stage
from .arrays import dtype_of, is_torch
from .backends import carve, check_operands, kind_of
from .cublas import CUBLAS_OP_N, CUBLAS_OP_T, CUDA_R_16BF, CUDA_R_16F, CUDA_R_32F, Gemm
from .plan import GemmStep, KernelStep, Plan, plan_layout

_CUDA_TYPE = {DType.FP32: CUDA_R_32F, DType.FP16: CUDA_R_16F, DType.BF16: CUDA_R_16BF}
_RAW = {2: np.uint16, 4: np.float32}


@functools.cache
def args_dtype(kind: str) -> np.dtype:
    """The kernarg struct as a numpy structured dtype (passed by value to the kernel)."""
    return np.dtype(
        [(n, np.uint32 if n.startswith(("m_", "s_")) else np.int32) for n in kernarg_names(kind)]
    )


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


class CudaBackend:
    def __init__(self, manifest: cache.Manifest):
        import cupy

        self.cupy = cupy
        self.manifest = manifest
        self._functions: dict[str, Any] = {}
        self._dummy = cupy.zeros(4, dtype=cupy.float32)
        self._gemm: Gemm | None = None

    def function(self, name: str):
        if name not in self._functions:
            entry = self.manifest.kernel(name)
            module = self.cupy.RawModule(path=str(entry.path))
            self._functions[name] = module.get_function(entry.symbol)
        return self._functions[name]

    def launch(self, plan: Plan, step: KernelStep, *buffers) -> None:
        spec = plan.specs[step.stage]
        args = np.array(tuple(step.launch.kernargs.values()), dtype=args_dtype(kind_of(spec)))
        pointers = [b if b is not None else self._dummy for b in buffers]
        self.function(step.name)(step.launch.grid, step.launch.block, (args[()], *pointers))

    def workspace(self, plan: Plan, workspace, images: int) -> dict[str, Any]:
        cupy = self.cupy
        if workspace is None:
            workspace = cupy.empty(plan.workspace_bytes, dtype=cupy.uint8)
        raw = workspace.view(cupy.uint8).reshape(-1)
        views = {}
        layout = plan_layout(plan.problem, plan.tile, plan.specs, images)
        for name, (offset, shape, dtype, count) in carve(layout, raw.size).items():
            views[name] = (
                raw[offset : offset + count * dtype.itemsize]
                .view(_RAW[dtype.itemsize])
                .reshape(shape)
            )
        return views

    def transform_filter(self, plan: Plan, w, workspace=None):
        check_operands(plan, None, w)
        views = self.workspace(plan, workspace, plan.batch_split)
        U, fs = views["U"], views["fs"]
        if workspace is None:
            U, fs = U.copy(), fs.copy()
        k1 = next(s for s in plan.steps if s.stage is Stage.FILTER)
        self.launch(plan, k1, device_view(w, plan.problem.dtype), U, fs)
        return U, fs

    def run(self, plan: Plan, x, w, y, workspace, U):
        cupy = self.cupy
        check_operands(plan, x, w)
        p = plan.problem
        torch_out = is_torch(x)
        if y is None:
            if torch_out:
                import torch

                y = torch.empty((p.N, p.Ho, p.Wo, p.K), dtype=x.dtype, device=x.device)
            else:
                y = cupy.empty((p.N, p.Ho, p.Wo, p.K), dtype=x.dtype)
        elif dtype_of(y) is not p.dtype or tuple(y.shape) != (p.N, p.Ho, p.Wo, p.K):
            raise ValueError(
                f"y: expected shape {(p.N, p.Ho, p.Wo, p.K)} and dtype "
                f"{p.dtype.short}, got {tuple(y.shape)} {y.dtype}"
            )
        xv, yv = device_view(x, p.dtype), device_view(y, p.dtype)
        if workspace is None:
            workspace = cupy.empty(plan.workspace_bytes, dtype=cupy.uint8)
        if U is None:
            if w is None:
                raise ValueError("run: pass the filter w, or U from plan.transform_filter(w)")
            U = self.transform_filter(plan, w, workspace)
        u, fs = U
        for start, images in plan.chunks:
            views = self.workspace(plan, workspace, images)
            xs, ys = xv[start : start + images], yv[start : start + images]
            ts = views.get("ts")
            for step in plan.chunk_steps[images]:
                if isinstance(step, GemmStep):
                    self.gemm(step, views["V"], u, views["M"])
                elif step.stage is Stage.PRESCALE:
                    self.launch(plan, step, xs, ts)
                elif step.stage is Stage.INPUT:
                    self.launch(plan, step, xs, views["V"], ts)
                elif step.stage is Stage.OUTPUT:
                    self.launch(plan, step, views["M"], fs, ts, ys)
        return y

    def gemm(self, step: GemmStep, V, U, M) -> None:
        """Row-major M[P x Kg] = V[P x Cg] . U[Kg x Cg]^T per (bin, group), as column-major
        M^T = U . V^T: op(A) = U (A = U^T col-major, transposed), op(B) = V^T. Capturable into
        a CUDA graph (wino.runtime.cublas)."""
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
