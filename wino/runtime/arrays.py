"""Array interop: dtypes of numpy (fp16, fp32, bf16 through ml_dtypes), CuPy and PyTorch CUDA
tensors (through DLPack, no copies)."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from ..vocab import DType, Target

NUMPY_DTYPES = {
    DType.FP16: np.dtype(np.float16),
    DType.FP32: np.dtype(np.float32),
    DType.BF16: np.dtype(ml_dtypes.bfloat16),
}


def numpy_dtype(dtype: DType) -> np.dtype:
    return NUMPY_DTYPES[dtype]


_BY_NAME = {"float16": DType.FP16, "float32": DType.FP32, "bfloat16": DType.BF16}
#: wino dtypes by the arrays' dtype objects (numpy, CuPy, torch), filled on first sight: a
#: dtype's name is computed in Python (numpy's str), a dict lookup is not.
_BY_DTYPE: dict[Any, DType] = {}


def dtype_of(array: Any) -> DType:
    """The wino dtype of a numpy / CuPy array or a torch tensor."""
    dtype = getattr(array, "dtype", None)
    try:
        return _BY_DTYPE[dtype]
    except (KeyError, TypeError):
        pass
    name = str(dtype or "").replace("torch.", "")
    if name not in _BY_NAME:
        raise TypeError(
            f"array dtype {name or type(array).__name__} is not supported; "
            "use float16, bfloat16 or float32"
        )
    _BY_DTYPE[dtype] = _BY_NAME[name]
    return _BY_NAME[name]


def is_torch(array: Any) -> bool:
    return type(array).__module__.startswith("torch")


def torch_numpy(tensor) -> np.ndarray:
    """A CPU torch tensor's memory as a numpy array (a view; bf16 as ml_dtypes.bfloat16)."""
    import torch

    tensor = tensor.detach()
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return tensor.numpy()


def target_of(array: Any) -> Target:
    """Host numpy -> c; CuPy arrays and torch CUDA tensors -> cuda."""
    if isinstance(array, np.ndarray):
        return Target.C
    if is_torch(array):
        return Target.CUDA if array.is_cuda else Target.C
    if type(array).__module__.startswith("cupy"):
        return Target.CUDA
    raise TypeError(
        f"unsupported array type {type(array).__name__}: pass a numpy array, a CuPy "
        "array or a torch tensor"
    )
