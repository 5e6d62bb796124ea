"""Direct convolutions on the same tensors, timed the same way as wino's chain: cuDNN through
PyTorch on the GPU (graph replays, events), onnxruntime's CPU Conv (MLAS) on the host.

cuDNN: NHWC data are channels_last NCHW views (``x.permute(0, 3, 1, 2)``), KRSC filters KCRS
channels_last views, so cuDNN runs its NHWC kernels on wino's operands with no copy.
``cudnn.benchmark`` picks the algorithm during the eager warm-up; TF32 is off, so fp32 is
strict fp32 as wino's is.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..problem import Problem
from .device import Operands
from .timing import HostTimer, TorchGraphTimer

#: What ``--compare`` takes: the engine's name and the target it runs beside.
ENGINES = {"cudnn": "cuda", "onnxruntime": "c"}
ONNX_HINT = "pip install 'wino[onnx]' (or pip install -e '.[onnx]' in a checkout)"


@dataclass(frozen=True)
class DirectResult:
    time_us: float
    error: float | None


def configure(torch) -> None:
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False


def cudnn(problem: Problem, device, operands: Operands, ref=None) -> DirectResult:
    """Time PyTorch's conv2d (cuDNN) on the case's operands; its error against ``ref``."""
    torch = device.torch
    configure(torch)
    conv = torch.nn.functional.conv2d
    views = [(x.permute(0, 3, 1, 2), w.permute(0, 3, 1, 2)) for x, w, _ in operands.arrays]

    def issue(s: int):
        x, w = views[s]
        return conv(
            x,
            w,
            None,
            1,
            (problem.pad_h, problem.pad_w),
            (problem.dil_h, problem.dil_w),
            problem.groups,
        )

    device.synchronize()
    time_us = TorchGraphTimer(device.final_settings).time_us(issue, operands.sets)
    error = None
    if ref is not None:
        y = issue(0).permute(0, 2, 3, 1)  # NCHW channels_last -> NHWK view
        error = device.error(y, ref)
    return DirectResult(time_us, error)


class EngineUnavailable(RuntimeError):
    """A compare engine whose package is not installed (the message says what to install)."""


def import_onnxruntime():
    """(onnx, onnxruntime), or EngineUnavailable naming the extra to install."""
    try:
        import onnx
        import onnxruntime
    except ImportError as err:
        raise EngineUnavailable(
            f"--compare onnxruntime needs onnx and onnxruntime ({err.name} is missing): "
            + ONNX_HINT
        ) from None
    return onnx, onnxruntime


def conv_model(problem: Problem, w_kcrs: np.ndarray) -> bytes:
    """An ONNX model of one fp32 Conv (NCHW), the filter a constant initializer as a model
    holds it (so onnxruntime prepacks it once, as it would in a network)."""
    onnx, _ = import_onnxruntime()
    helper, proto = onnx.helper, onnx.TensorProto
    p = problem
    x = helper.make_tensor_value_info("x", proto.FLOAT, [p.N, p.C, p.H, p.W])
    y = helper.make_tensor_value_info("y", proto.FLOAT, [p.N, p.K, p.Ho, p.Wo])
    node = helper.make_node(
        "Conv",
        ["x", "w"],
        ["y"],
        kernel_shape=[p.R, p.S],
        pads=[p.pad_h, p.pad_w, p.pad_h, p.pad_w],
        dilations=[p.dil_h, p.dil_w],
        strides=[1, 1],
        group=p.groups,
    )
    weights = onnx.numpy_helper.from_array(w_kcrs, "w")
    graph = helper.make_graph([node], "wino_compare", [x], [y], initializer=[weights])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model.SerializeToString()


def onnxruntime(problem: Problem, device, operands: Operands, ref=None) -> DirectResult:
    """Time onnxruntime's CPU Conv on the case's operands with wino's thread count.

    The NHWC input and KRSC filter are transposed to NCHW / KCRS (and widened to fp32, the
    dtype onnxruntime's x86 Conv takes) before the timing; the session's intra-op threads are
    the kernels' OpenMP width (``wino.runtime.host.host_threads``), one inter-op thread."""
    _, ort = import_onnxruntime()
    from ..runtime.host import host_threads

    x, w, _ = operands.arrays[0]
    xn = np.ascontiguousarray(x.astype(np.float32).transpose(0, 3, 1, 2))
    wn = np.ascontiguousarray(w.astype(np.float32).transpose(0, 3, 1, 2))
    options = ort.SessionOptions()
    options.intra_op_num_threads = host_threads()
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(
        conv_model(problem, wn), options, providers=["CPUExecutionProvider"]
    )
    p = problem
    y = np.empty((p.N, p.K, p.Ho, p.Wo), np.float32)
    binding = session.io_binding()
    binding.bind_cpu_input("x", xn)
    binding.bind_output("y", "cpu", 0, np.float32, list(y.shape), y.ctypes.data)

    def issue(s: int) -> None:
        session.run_with_iobinding(binding)

    time_us = HostTimer(device.final_settings).time_us(issue)
    error = None
    if ref is not None:
        issue(0)
        error = device.error(y.transpose(0, 2, 3, 1), ref)
    return DirectResult(time_us, error)


def compare(engine: str, problem: Problem, device, operands: Operands, ref=None):
    """The DirectResult of ``engine`` (a key of ENGINES) on the case."""
    run = {"cudnn": cudnn, "onnxruntime": onnxruntime}[engine]
    return run(problem, device, operands, ref)
