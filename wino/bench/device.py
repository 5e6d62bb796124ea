"""What a sweep needs of a target, shared by the host (``bench.host``) and CUDA
(``bench.cuda``) devices: the runtime backend, operands, the reference and the error, the two
timers (candidate selection and the final chain) and the rates the roofline uses, measured once
per run and cached."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import cache
from ..runtime.plan import GemmStep
from ..runtime.registry import backend_for, load
from ..vocab import DType, Target
from .timing import Settings


@dataclass
class Operands:
    """Input/output sets of one case: ``arrays`` in the framework's type (numpy or torch) and
    ``raw`` the backend's views of the same memory. More than one set where one fits in L2."""

    arrays: list[tuple[Any, Any, Any]]  # (x NHWC, w KRSC, y NHWK)
    raw: list[tuple[Any, Any, Any]]

    @property
    def sets(self) -> int:
        return len(self.arrays)


@dataclass
class Rates:
    """Ceilings measured in this run: copy bandwidth (GB/s, bytes read + written over time), the
    same for a copy whose buffers stay in the L2 (the fused roofline's L2 term), the GEMM rate
    of K3's shape and the tensor rate of a GEMM too large to wait on memory (TFLOP/s, per
    (xdtype, accdtype)) and the time of a plain copy of a stage's bytes (us) per
    ``CopyShape``."""

    copy_gbs: float | None = None
    l2_gbs: float | None = None
    gemm_tflops: dict[tuple[DType, DType], float] = field(default_factory=dict)
    mma_tflops: dict[tuple[DType, DType], float] = field(default_factory=dict)
    stage_copy_us: dict[CopyShape, float] = field(default_factory=dict)


@dataclass(frozen=True)
class CopyShape:
    """A plain copy moving one stage's bytes, timed as the stage is: ``read`` bytes read and
    ``write`` written in one launch (the bytes both have copied, the surplus of the larger
    side written as zeros or read into a check that never stores), the buffer on the
    ``rotating`` side ("read" or "write": where the stage has the caller's x or y) one of
    ``sets``, the other one buffer (the plan's workspace, which every operand set shares);
    ``rotating`` None: both sides are workspace (K3), one buffer each. On a layer too small
    for any kernel to reach the large-copy rate, this is the stage's own memory floor."""

    read: int
    write: int
    rotating: str | None
    sets: int = 1

    def __post_init__(self) -> None:
        if self.rotating not in ("read", "write", None):
            raise ValueError(
                f"CopyShape.rotating: {self.rotating!r}, expected 'read', 'write' or None"
            )
        if self.rotating is None and self.sets != 1:
            raise ValueError(f"CopyShape.sets: {self.sets} with no rotating side, expected 1")


class Device:
    target: Target
    #: A representative K3: batch (bins x groups), m (tiles), n (K/G), k (C/G). Its V and M
    #: through memory bound its rate (the unfused roofline's GEMM term).
    GEMM_SHAPE: tuple[int, int, int, int]
    #: A GEMM whose every extent is large, so the multiply-adds, not memory, bound it: the MMA
    #: rate of the fused roofline (V and M stay on chip) and of scripts/engine_ceilings.py.
    MMA_SHAPE: tuple[int, int, int, int]

    def __init__(self, manifest: cache.Manifest, candidate: Settings, final: Settings):
        self.manifest = manifest
        self.backend = backend_for(self.target, manifest)
        self.candidate_settings, self.final_settings = candidate, final
        self.rates = Rates()

    @property
    def kernel_names(self) -> set[str]:
        return set(self.manifest.kernels)

    def copy_gbs(self) -> float:
        if self.rates.copy_gbs is None:
            self.rates.copy_gbs = self.measure_copy_gbs()
        return self.rates.copy_gbs

    def l2_gbs(self) -> float:
        if self.rates.l2_gbs is None:
            self.rates.l2_gbs = self.measure_l2_gbs()
        return self.rates.l2_gbs

    def gemm_tflops(self, xdtype: DType, accdtype: DType) -> float:
        """K3's rate: ``GEMM_SHAPE`` timed (once per dtype pair and run)."""
        return self._rate(self.rates.gemm_tflops, self.GEMM_SHAPE, xdtype, accdtype)

    def mma_tflops(self, xdtype: DType, accdtype: DType) -> float:
        """The tensor rate: ``MMA_SHAPE`` timed (once per dtype pair and run)."""
        return self._rate(self.rates.mma_tflops, self.MMA_SHAPE, xdtype, accdtype)

    def _rate(self, rates: dict, shape, xdtype: DType, accdtype: DType) -> float:
        if (xdtype, accdtype) not in rates:
            step = GemmStep(*shape, xdtype, accdtype)
            rates[xdtype, accdtype] = step.flops / (self.measure_gemm_us(step) * 1e-6) / 1e12
        return rates[xdtype, accdtype]

    def stage_copy_us(self, shape: CopyShape) -> float:
        """The median time of a plain copy of ``shape`` (measured once per shape and run)."""
        if shape not in self.rates.stage_copy_us:
            self.rates.stage_copy_us[shape] = self.measure_stage_copy_us(shape)
        return self.rates.stage_copy_us[shape]

    # Per target ------------------------------------------------------------------------------
    def operand_sets(self, problem) -> int:
        """How many operand sets ``operands(problem)`` makes (the timers rotate through them)."""
        return 1

    def launch_stream(self):
        """The stream a timed chain launches on: the timer's (None: the target has none)."""
        return None

    def measure_copy_gbs(self) -> float:
        raise NotImplementedError

    def measure_l2_gbs(self) -> float:
        raise NotImplementedError

    def measure_gemm_us(self, step: GemmStep) -> float:
        raise NotImplementedError

    def measure_stage_copy_us(self, shape: CopyShape) -> float:
        raise NotImplementedError


#: Target -> "module:class" of its device, loaded on first use (the device modules import this
#: one; the table keeps `wino grid` light and the import graph free of circles).
DEVICES: dict[Target, str] = {
    Target.C: "wino.bench.host:HostDevice",
    Target.CUDA: "wino.bench.cuda:CudaDevice",
}


def open_device(
    target: Target,
    cache_root: Path | None,
    candidate: Settings | None = None,
    final: Settings | None = None,
) -> Device:
    """The device of ``target`` over its cache (``cache_root``: the build folder; None: build/).
    Timing settings default per target."""
    manifest = cache.find_manifest(target, cache_root)
    if target not in DEVICES:
        raise ValueError(f"target {target.value}: no device to benchmark on (compile only)")
    cls = load(DEVICES[target])
    return cls(manifest, candidate or cls.CANDIDATE, final or cls.FINAL)


def with_final(device: Device, warmup: int | None, repeats: int | None) -> Device:
    """``device`` with its final measurement's warm-up and repeats replaced where given (the
    command line's --warmup / --repeats, here or in a Dask shard)."""
    if warmup is not None or repeats is not None:
        default = device.final_settings
        device.final_settings = Settings(
            default.warmup if warmup is None else warmup,
            default.repeats if repeats is None else repeats,
        )
    return device
