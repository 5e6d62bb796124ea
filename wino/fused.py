"""The fused kernel's (KF, plan kind fused2d_rt) on-chip budget, derived from its spec alone.

Shapes per block (tm = tiles, kb = kblock, cb = cchunk, A = bins; operands in mdtype, raw
16-bit; rows padded by ``PAD`` elements so the MMA fragment loads hit distinct banks):
  Xs [S][A][tm][cb + PAD]   the transformed input chunk       (MMA operand A, row-major)
  Us [S][A][kb][cb + PAD]   the U chunk, U[a][k][c] as stored  (MMA operand B, column-major)
(S = stages: with 2, chunk i + 1's U is copied asynchronously and its X transformed while warps
still multiply chunk i.)
  Ms [A][tm][8]          fp32, one 8-channel slice of the accumulators on the way to the
                         output transform; it reuses the bytes of Xs and Us after the C loop.
The accumulators are MMA tiles (bin, 16-tile row block, 8-channel column block): ``units`` of
them, dealt round-robin to the warps, 4 fp32 values per thread each.
"""

from __future__ import annotations

from dataclasses import dataclass

from .specs import RtFusedSpec

MMA_M, MMA_N, MMA_K = 16, 8, 16  # mma.sync m16n8k16
PAD = 8  # elements of row padding in Xs and Us


@dataclass(frozen=True)
class FusedBudget:
    lda: int  # row stride of Xs and Us, elements
    xs_elems: int
    us_elems: int
    ms_floats: int
    units: int  # MMA tiles per block: bins x tiles/16 x kblock/8
    units_per_warp: int  # 0 when the units do not split evenly (a spec rule refuses it)
    acc_per_thread: int
    smem_bytes: int

    @classmethod
    def of(cls, spec: RtFusedSpec) -> FusedBudget:
        bins = spec.tile.bins
        lda = spec.cchunk + PAD
        xs, us = bins * spec.tiles * lda, bins * spec.kblock * lda
        ms = bins * spec.tiles * MMA_N
        units = bins * (spec.tiles // MMA_M) * (spec.kblock // MMA_N)
        per_warp = units // spec.warps if spec.warps > 0 and units % spec.warps == 0 else 0
        stages = max(spec.stages, 1)
        smem = max((xs + us) * stages * spec.mdtype.itemsize, ms * 4)
        smem = -(-smem // 16) * 16
        return cls(lda, xs, us, ms, units, per_warp, 4 * per_warp, smem)


def fused_namespace(spec: RtFusedSpec) -> dict[str, int]:
    """The derived sizes the refusal rules of stage kf may use."""
    b = FusedBudget.of(spec)
    return dict(
        block=spec.block,
        units=b.units,
        acc_per_thread=b.acc_per_thread,
        smem_bytes=b.smem_bytes,
    )
