"""The CUDA device (H200): PyTorch tensors as operands (bf16 needs them; the runtime takes them
in place), the float64 reference through ``torch.nn.functional.conv2d`` on the GPU, CUDA-graph
timing, the copy bandwidth of a large device-to-device copy and the cuBLAS rate through
``CudaBackend.gemm``.

Streams: the operands and the reference live on PyTorch's current stream, the timed graphs on a
non-blocking CuPy stream; ``synchronize`` (the whole device) separates the two.
"""

from __future__ import annotations

from ..problem import Problem
from ..runtime.plan import GemmStep
from ..vocab import DType, Target
from .device import CopyShape, Device, Operands
from .timing import CupyGraphTimer, Settings, median_us

L2_BYTES = 60 << 20  # H200: 60 MB of L2
MAX_SETS = 16
COPY_BYTES = 1 << 30
L2_READ_BYTES = 16 << 20  # the buffer the L2 probe reads: it stays in the L2 (50 MB on the H100)
L2_READ_PASSES = 64  # passes over it in one launch (1 GiB read: launch costs vanish)
L2_READ_BLOCKS_PER_SM = 8
# Every thread reads 16 bytes a step through the L2 only (ld.global.cg skips the L1), a pass
# starting one block further on than the last so that no pass reuses a register's value.
L2_READ_SOURCE = r"""
extern "C" __global__ void l2_read(const float4* __restrict__ src, unsigned long long n4,
                                   int passes, float* __restrict__ sink) {
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  float acc = 0.f;
  for (int p = 0; p < passes; ++p) {
    const unsigned long long first = ((blockIdx.x + p) % gridDim.x) * blockDim.x + threadIdx.x;
    for (unsigned long long i = first; i < n4; i += stride) {
      const float4 v = __ldcg(src + i);
      acc += (v.x + v.y) + (v.z + v.w);
    }
  }
  if (acc == -1.f) sink[0] = acc;  // never true for the probe's data: keeps the loads
}
"""
# A stage's bytes as a plain copy (CopyShape): one 16-byte item a thread, item i read where
# i < reads and written where i < writes (zeros past the reads); a read past the writes feeds a
# store that never happens for the zeroed source, which keeps the load.
STAGE_COPY_SOURCE = r"""
extern "C" __global__ void stage_copy(const uint4* __restrict__ src, unsigned long long reads,
                                      uint4* __restrict__ dst, unsigned long long writes) {
  const unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  uint4 v = make_uint4(0u, 0u, 0u, 0u);
  if (i < reads) v = src[i];
  if (i < writes) dst[i] = v;
  else if (v.x == 0x7fc00001u) dst[0] = v;
}
"""
STAGE_COPY_BLOCK = 256

TORCH_DTYPES = {DType.FP16: "float16", DType.BF16: "bfloat16", DType.FP32: "float32"}


def operand_sets(problem: Problem) -> int:
    """Operand sets to rotate through: enough to hold twice L2 when one set fits in it."""
    io = problem.dtype.itemsize
    footprint = io * (
        problem.N * problem.H * problem.W * problem.C
        + problem.K * problem.R * problem.S * problem.Cg
        + problem.N * problem.Ho * problem.Wo * problem.K
    )
    if footprint >= L2_BYTES:
        return 1
    return min(MAX_SETS, -(-2 * L2_BYTES // footprint))


class CudaDevice(Device):
    target = Target.CUDA
    CANDIDATE = Settings(warmup=3, repeats=20)
    FINAL = Settings(warmup=5, repeats=25)
    GEMM_SHAPE = (36, 4096, 256, 256)
    MMA_SHAPE = (1, 8192, 8192, 8192)  # 1.1 TFLOP on 0.5 GB: about 1.5 ms on an H100
    CANDIDATE_LIMIT = None

    def __init__(self, manifest, candidate: Settings, final: Settings):
        try:
            import torch
        except ImportError:
            raise ValueError(
                "wino bench --target cuda needs PyTorch (bf16 tensors, the float64 "
                "reference, cuDNN): pip install torch"
            ) from None
        import cupy

        super().__init__(manifest, candidate, final)
        self.torch, self.cupy = torch, cupy
        self._timers: dict[bool, CupyGraphTimer] = {}

    def timer(self, final: bool = False) -> CupyGraphTimer:
        if final not in self._timers:
            settings = self.final_settings if final else self.candidate_settings
            self._timers[final] = CupyGraphTimer(settings)
        return self._timers[final]

    def tensor_dtype(self, dtype: DType):
        return getattr(self.torch, TORCH_DTYPES[dtype])

    def operands(self, problem: Problem) -> Operands:
        from ..runtime.cuda import device_view

        torch, dtype = self.torch, self.tensor_dtype(problem.dtype)
        p = problem
        arrays, raw = [], []
        for _ in range(self.operand_sets(problem)):
            x = torch.randn((p.N, p.H, p.W, p.C), device="cuda").to(dtype)
            w = torch.randn((p.K, p.R, p.S, p.Cg), device="cuda").to(dtype)
            y = torch.empty((p.N, p.Ho, p.Wo, p.K), device="cuda", dtype=dtype)
            arrays.append((x, w, y))
            raw.append(tuple(device_view(t, p.dtype) for t in (x, w, y)))
        self.synchronize()
        return Operands(arrays, raw)

    def workspace(self, nbytes: int):
        return self.cupy.empty(nbytes, dtype=self.cupy.uint8)

    def poison(self, y) -> None:
        y.fill_(float("nan"))

    def synchronize(self) -> None:
        self.torch.cuda.synchronize()

    def launch_stream(self):
        """CuPy's current stream, which the graph timer captures (the operands are torch
        tensors, whose default is torch's current stream: a capture would record nothing)."""
        return self.cupy.cuda.get_current_stream()

    def reference(self, problem: Problem, operands: Operands):
        """float64 direct convolution on the GPU, NHWK (a view of PyTorch's NCHW result)."""
        F = self.torch.nn.functional
        x, w, _ = operands.arrays[0]
        ref = F.conv2d(
            x.double().permute(0, 3, 1, 2),
            w.double().permute(0, 3, 1, 2),
            None,
            1,
            (problem.pad_h, problem.pad_w),
            (problem.dil_h, problem.dil_w),
            problem.groups,
        )
        return ref.permute(0, 2, 3, 1)

    def error(self, y, ref) -> float:
        """max|y - ref| / max|ref| on the GPU (inf when y holds a NaN or an inf)."""
        self.synchronize()
        out = y.double()
        if not bool(self.torch.isfinite(out).all()):
            return float("inf")
        scale = float(ref.abs().max())
        err = float((out - ref).abs().max())
        return err / scale if scale > 0 else (0.0 if err == 0 else float("inf"))

    def measure_copy_gbs(self) -> float:
        """A 1 GiB device-to-device copy (``cudaMemcpyAsync`` through PyTorch's ``copy_``),
        timed eagerly: events around each of 20 copies after 3 warm-ups, the median. Not as a
        graph replay: a memcpy node in a CUDA graph runs on the copy engines, measured at
        2.77 TB/s on the H200 against 4.26 TB/s for the same copy launched eagerly (the
        stages' kernels time the same either way)."""
        torch = self.torch
        src = torch.randn(COPY_BYTES // 4, device="cuda")
        dst = torch.empty_like(src)
        for _ in range(3):
            dst.copy_(src)
        events = [torch.cuda.Event(enable_timing=True) for _ in range(21)]
        events[0].record()
        for event in events[1:]:
            dst.copy_(src)
            event.record()
        events[-1].synchronize()
        pairs = zip(events[:-1], events[1:], strict=True)
        us = median_us([a.elapsed_time(b) * 1e-3 for a, b in pairs])
        return 2 * src.numel() * src.element_size() / (us * 1e-6) / 1e9

    def measure_l2_gbs(self) -> float:
        """The L2's read bandwidth, as the fused kernel uses it (U and the input windows are
        reads): one kernel streams a 16 MiB buffer, resident in the L2 after the first pass,
        64 times with 16-byte L2-only loads from 8 blocks per SM; bytes read over the time of
        the launch (graph replay, median). Stop 40's probe (an elementwise copy between two
        8 MiB buffers) read 1.5 TB/s on the H100, below its HBM copy rate: its 4-byte accesses
        and write-backs measured something else."""
        cupy = self.cupy
        kernel = cupy.RawKernel(L2_READ_SOURCE, "l2_read")
        src = cupy.ones(L2_READ_BYTES // 4, dtype=cupy.float32)
        sink = cupy.zeros(1, dtype=cupy.float32)
        sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
        n4 = cupy.uint64(L2_READ_BYTES // 16)
        passes = cupy.int32(L2_READ_PASSES)

        def reads(s: int) -> None:
            kernel((sms * L2_READ_BLOCKS_PER_SM,), (256,), (src, n4, passes, sink))

        us = CupyGraphTimer(Settings(3, 20)).time_us(reads)
        return L2_READ_BYTES * L2_READ_PASSES / (us * 1e-6) / 1e9

    def operand_sets(self, problem: Problem) -> int:
        return operand_sets(problem)

    def measure_stage_copy_us(self, shape: CopyShape) -> float:
        """``STAGE_COPY_SOURCE`` over zeroed buffers, timed as the stages are (graph replays,
        the rotating side's buffer one of ``shape.sets``)."""
        cupy = self.cupy
        kernel = cupy.RawKernel(STAGE_COPY_SOURCE, "stage_copy")
        reads, writes = (-(-n // 16) for n in (shape.read, shape.write))  # 16-byte items
        count = {"read": 1, "write": 1}
        if shape.rotating is not None:
            count[shape.rotating] = shape.sets
        srcs = [cupy.zeros(reads * 4, dtype=cupy.uint32) for _ in range(count["read"])]
        dsts = [cupy.zeros(writes * 4, dtype=cupy.uint32) for _ in range(count["write"])]
        blocks = -(-max(reads, writes) // STAGE_COPY_BLOCK)
        n_read, n_write = cupy.uint64(reads), cupy.uint64(writes)

        def copy(s: int) -> None:
            src, dst = srcs[s % len(srcs)], dsts[s % len(dsts)]
            kernel((blocks,), (STAGE_COPY_BLOCK,), (src, n_read, dst, n_write))

        return self.timer(final=True).time_us(copy, shape.sets)

    def _random_raw(self, shape, dtype: DType):
        """N(0, 1) data as the backend's raw type (uint16 bits for 16-bit dtypes)."""
        cupy = self.cupy
        data = cupy.random.standard_normal(shape, dtype=cupy.float32)
        if dtype is DType.FP32:
            return data
        if dtype is DType.FP16:
            return data.astype(cupy.float16).view(cupy.uint16)
        return (data.view(cupy.uint32) >> 16).astype(cupy.uint16)  # bf16: the top half

    def measure_gemm_us(self, step: GemmStep) -> float:
        V = self._random_raw((step.batch, step.m, step.k), step.xdtype)
        U = self._random_raw((step.batch, step.n, step.k), step.xdtype)
        M = self.cupy.empty(
            (step.batch, step.m, step.n),
            dtype=self.cupy.float32 if step.accdtype is DType.FP32 else self.cupy.uint16,
        )
        return CupyGraphTimer(Settings(3, 20)).time_us(lambda s: self.backend.gemm(step, V, U, M))
