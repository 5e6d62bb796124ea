"""The roofline of a plan: the fewest bytes each stage moves through memory (every buffer it
reads read once, every buffer it writes written once), at the copy bandwidth measured in the same
run, plus the GEMM work at the GEMM rate measured in the same run.

Bytes per stage, summed over the batch chunks, sizes from the plan's dtypes and
``workspace_layout`` (buffer extents, not the 256-byte aligned allocations):
  K1   w read + U write + fs write
  K2a  x read + ts write
  K2   x read + V write (+ ts: fused writes it, split reads it)
  K3   V read + U read + M write
  K4   M read + y write + fs read (+ ts read)
bound = sum(bytes) / copy bandwidth + sum(GemmStep.flops) / GEMM rate; ratio = bound / measured.

The fused plan keeps V and M on chip, so its roofline (issue 9's) is the largest of three times,
U cached: x, U, fs and y through memory once (x again, ts written and read, where K2a runs) at
the copy bandwidth; the MMA work (2 x bins x tiles x K x C/G) at the tensor rate (a GEMM
that waits on no memory: ``Device.MMA_SHAPE``, not K3's shape, whose V and M bound it); and what the
fused kernel reads through the L2 at the L2 bandwidth: U once per tile block (each of its
channel blocks takes its own output channels of every bin) and each tile's window of x once per
channel block of its group.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil, prod

from ..geometry import TileGrid
from ..runtime.plan import GemmStep, Plan, plan_layout
from ..vocab import Prescale, Stage


def _nbytes(layout, name: str) -> int:
    if name not in layout:
        return 0
    shape, dtype = layout[name]
    return prod(shape) * dtype.itemsize


@dataclass(frozen=True)
class Traffic:
    """What one stage reads and writes through memory, in bytes."""

    read: int = 0
    write: int = 0

    def __add__(self, other: Traffic) -> Traffic:
        return Traffic(self.read + other.read, self.write + other.write)

    @property
    def total(self) -> int:
        return self.read + self.write


def stage_traffic(plan: Plan) -> dict[Stage, Traffic]:
    """Bytes each stage reads and writes (the plan's stages only; K2a only with the split
    prescale), summed over the batch chunks."""
    p, io = plan.problem, plan.problem.dtype.itemsize
    full = plan_layout(p, plan.tile, plan.specs, plan.batch_split)
    w_bytes = p.K * p.R * p.S * p.Cg * io
    out = {
        Stage.FILTER: Traffic(w_bytes, _nbytes(full, "U") + _nbytes(full, "fs")),
        Stage.INPUT: Traffic(),
        Stage.GEMM: Traffic(),
        Stage.OUTPUT: Traffic(),
    }
    split = plan.prescale is Prescale.SPLIT
    if split:
        out[Stage.PRESCALE] = Traffic()
    for _, images in plan.chunks:
        layout = plan_layout(p, plan.tile, plan.specs, images)
        x = images * p.H * p.W * p.C * io
        y = images * p.Ho * p.Wo * p.K * io
        v, m, ts = _nbytes(layout, "V"), _nbytes(layout, "M"), _nbytes(layout, "ts")
        u, fs = _nbytes(layout, "U"), _nbytes(layout, "fs")
        if split:
            out[Stage.PRESCALE] += Traffic(x, ts)
        out[Stage.INPUT] += Traffic(x + ts, v) if split else Traffic(x, v + ts)
        out[Stage.GEMM] += Traffic(v + u, m)
        out[Stage.OUTPUT] += Traffic(m + fs + ts, y)
    return out


def stage_bytes(plan: Plan) -> dict[Stage, int]:
    """Bytes each stage moves, read and written (``stage_traffic``'s totals)."""
    return {stage: t.total for stage, t in stage_traffic(plan).items()}


def gemm_flops(plan: Plan) -> int:
    """The GEMM work of every chunk."""
    return sum(
        step.flops
        for _, images in plan.chunks
        for step in plan.chunk_steps[images]
        if isinstance(step, GemmStep)
    )


def bound_us(plan: Plan, copy_gbs: float, gemm_tflops: float) -> float:
    """The roofline time in microseconds: bytes at ``copy_gbs`` GB/s plus the GEMM FLOPs at
    ``gemm_tflops`` TFLOP/s."""
    memory = sum(stage_bytes(plan).values()) / (copy_gbs * 1e9)
    compute = gemm_flops(plan) / (gemm_tflops * 1e12)
    return (memory + compute) * 1e6


def fused_hbm_bytes(plan: Plan) -> int:
    """A fused plan's bytes through memory with U cached: x, U, fs, y (x and ts twice with K2a)."""
    p, io = plan.problem, plan.problem.dtype.itemsize
    total = 0
    for _, images in plan.chunks:
        layout = plan_layout(p, plan.tile, plan.specs, images)
        x = images * p.H * p.W * p.C * io
        total += x + _nbytes(layout, "U") + _nbytes(layout, "fs") + images * p.Ho * p.Wo * p.K * io
        if Stage.PRESCALE in plan.specs:  # K2a reads x and writes ts, KF reads ts
            total += x + 2 * _nbytes(layout, "ts")
    return total


def fused_l2_bytes(plan: Plan) -> int:
    """What a fused plan's kernel reads through the L2: U once per tile block, every tile's
    window of x (bins values a channel) once per channel block of its group."""
    p, kf = plan.problem, plan.specs[Stage.FUSED]
    total = 0
    for _, images in plan.chunks:
        tiles = TileGrid.of(p.with_batch(images), plan.tile).P
        k_blocks = ceil(p.Kg / kf.kblock)
        u = plan.tile.bins * p.K * p.Cg * plan.xdtype.itemsize
        x = tiles * plan.tile.bins * p.C * p.dtype.itemsize * k_blocks
        total += ceil(tiles / kf.tiles) * u + x
    return total


def fused_flops(plan: Plan) -> int:
    """The fused kernel's MMA work: bins x tiles x K x C/G multiply-adds, every chunk."""
    p = plan.problem
    tiles = sum(TileGrid.of(p.with_batch(i), plan.tile).P for _, i in plan.chunks)
    return 2 * plan.tile.bins * tiles * p.K * p.Cg


def fused_bound_us(plan: Plan, copy_gbs: float, mma_tflops: float, l2_gbs: float) -> float:
    """A fused plan's roofline in microseconds, U cached: the largest of its memory, MMA and L2
    times (each phase could hide the others)."""
    return 1e6 * max(
        fused_hbm_bytes(plan) / (copy_gbs * 1e9),
        fused_flops(plan) / (mma_tflops * 1e12),
        fused_l2_bytes(plan) / (l2_gbs * 1e9),
    )


def bandwidth_gbs(nbytes: int, time_us: float) -> float:
    """Achieved bandwidth in GB/s (bytes moved over the measured time)."""
    return nbytes / (time_us * 1e-6) / 1e9 if time_us > 0 else 0.0
