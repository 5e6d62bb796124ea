"""The host backend: the c target's shared objects through ctypes, K3 through numpy's BLAS."""

from __future__ import annotations

import ctypes
from functools import lru_cache

import numpy as np

from .. import cache
from ..launch import kernarg_names
from ..vocab import Stage
from .arrays import numpy_dtype
from .backends import carve, check_operands, kind_of
from .plan import GemmStep, KernelStep, Plan, plan_layout


@lru_cache(maxsize=None)
def args_struct(kind: str) -> type[ctypes.Structure]:
    """The kernarg struct of a stage kind (field order: wino.launch.KERNARG_FIELDS)."""
    fields = [(n, ctypes.c_uint if n.startswith(("m_", "s_")) else ctypes.c_int)
              for n in kernarg_names(kind)]
    return type(f"Args_{kind}", (ctypes.Structure,), {"_fields_": fields})


class HostBackend:
    def __init__(self, manifest: cache.Manifest):
        self.manifest = manifest
        self._functions: dict[str, ctypes._CFuncPtr] = {}

    def function(self, name: str):
        if name not in self._functions:
            entry = self.manifest.kernel(name)
            library = ctypes.CDLL(str(entry.path))
            self._functions[name] = getattr(library, entry.symbol)
        return self._functions[name]

    def launch(self, plan: Plan, step: KernelStep, *buffers: np.ndarray | None) -> None:
        spec = plan.specs[step.stage]
        args = args_struct(kind_of(spec))(*step.launch.kernargs.values())
        pointers = [ctypes.c_void_p(b.ctypes.data if b is not None else 0) for b in buffers]
        gx, gy, _ = step.launch.grid
        self.function(step.name)(ctypes.byref(args), *pointers, ctypes.c_uint(gx),
                                 ctypes.c_uint(gy))

    # Workspace ---------------------------------------------------------------------------------
    def workspace(self, plan: Plan, workspace, images: int) -> dict[str, np.ndarray]:
        """Views of the workspace buffers for a chunk of ``images`` images."""
        if workspace is None:
            workspace = np.empty(plan.workspace_bytes, dtype=np.uint8)
        raw = np.asarray(workspace).view(np.uint8).reshape(-1)
        views = {}
        layout = plan_layout(plan.problem, plan.tile, plan.specs, images)
        for name, (offset, shape, dtype, count) in carve(layout, raw.size).items():
            nbytes = count * dtype.itemsize
            views[name] = raw[offset:offset + nbytes].view(numpy_dtype(dtype)).reshape(shape)
        return views

    # Running -----------------------------------------------------------------------------------
    def transform_filter(self, plan: Plan, w, workspace=None):
        check_operands(plan, None, w)
        views = self.workspace(plan, workspace, plan.batch_split)
        U, fs = views["U"], views["fs"]
        if workspace is None:
            U, fs = U.copy(), fs.copy()
        k1 = next(s for s in plan.steps if s.stage is Stage.FILTER)
        self.launch(plan, k1, np.ascontiguousarray(w), U, fs)
        return U, fs

    def run(self, plan: Plan, x, w, y, workspace, U):
        check_operands(plan, x, w)
        p = plan.problem
        x = np.ascontiguousarray(x)
        if y is None:
            y = np.empty((p.N, p.Ho, p.Wo, p.K), dtype=numpy_dtype(p.dtype))
        if workspace is None:
            workspace = np.empty(plan.workspace_bytes, dtype=np.uint8)
        if U is None:
            if w is None:
                raise ValueError("run: pass the filter w, or U from plan.transform_filter(w)")
            U = self.transform_filter(plan, w, workspace)
        u, fs = U
        for start, images in plan.chunks:
            views = self.workspace(plan, workspace, images)
            xs, ys = x[start:start + images], y[start:start + images]
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

    @staticmethod
    def gemm(step: GemmStep, V: np.ndarray, U: np.ndarray, M: np.ndarray) -> None:
        """M[a][g] = V[a][g] . U[a][g]^T in fp32 (16-bit operands widened, fp32 accumulate)."""
        a, g, p, cg = V.shape
        u = U.reshape(a, g, -1, cg).astype(np.float32)
        M[...] = np.matmul(V.astype(np.float32), u.swapaxes(-1, -2)).astype(M.dtype)

