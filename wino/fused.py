"""The fused kernel's (KF, plan kind fused2d_rt) on-chip budget, derived from its spec alone.

Shapes per block (tm = tiles, kb = kblock, cb = cchunk, A = bins; operands in mdtype, raw
16-bit; rows padded by ``PAD`` elements so the 8 row addresses of an ``ldmatrix`` hit 8
distinct 16-byte bank groups):
  Xs [S][A][tm][cb + PAD]   the transformed input chunk       (MMA operand A, row-major)
  Us [S][A][kb][cb + PAD]   the U chunk, U[a][k][c] as stored  (MMA operand B, column-major)
(S = stages: with 2, chunk i + 1's U is copied asynchronously and its X transformed while warps
still multiply chunk i.)
  Ms [A][tm][cols + MS_PAD] fp32, a slice of ``cols`` output channels of the accumulators on
                         the way to the output transform; it reuses the bytes of Xs and Us
                         after the C loop (``cols``: the widest multiple of 8 dividing kb that
                         fits in those bytes, so most specs take one slice, one barrier pair).
  Tiles [tm]             per tile of the block, after both (computed once per block): the
                         in-image masks of its input window and of its outputs (u64 each),
                         the element offsets of its window origin in x and of its first output
                         in y (int each), its power-of-two scale (fp32): ``TILE_BYTES`` a tile.
Warps own whole bins: warp w multiplies bins w, w + warps, ... (``bins_per_warp``), each a
(tm x kb) warp tile of (tm/16) x (kb/8) m16n8k16 MMAs, so every A fragment is reused across
the kb/8 channel tiles and every B fragment across the tm/16 tile rows. Accumulators per thread:
bins_per_warp x tm x kb / 32.

The held schedule (axis ``hold`` > 0, docs/FUSED.md "The held schedule"):
  Vs [A][tm][hold + PAD]  V of every channel (at most hold), columns permuted within each
                         32-channel step to the order the MMA's B fragments load U in
                         (``wino_kcol``; addressed through ``wino_vidx``);
                         after bin a's MMA its warp stores M[a] [tm][kb] in fp16 over the
                         first kb columns of Vs[a] (kb <= hold)
  Tiles [tm]             as above
Warps own whole bins and multiply them one after another, so the accumulators per thread are
one bin's: tm x kb / 32, or with ``kpass`` (kb / kpass passes over the same V) one pass's,
tm x kpass / 32, the earlier passes' M parked as fp16 pairs in registers until the last pass.
"""

from __future__ import annotations

from dataclasses import dataclass

from .specs import RtFusedSpec

MMA_M, MMA_N, MMA_K = 16, 8, 16  # mma.sync m16n8k16
PAD = 8  # elements of row padding in Xs and Us
MS_PAD = 8  # floats of row padding in Ms (64-bit fragment stores of 16 lanes hit 32 banks)
TILE_BYTES = 8 + 8 + 4 + 4 + 4  # the tile table's row: x mask, y mask, x offset, y offset, scale
SM_REGISTERS = 65536  # 32-bit registers per SM (sm_90)
SM_SHARED = 233472  # bytes of shared memory per SM (sm_90: 228 KB)
BLOCK_SHARED_RESERVE = 1024  # bytes the hardware keeps per resident block
REG_OVERHEAD = 40  # registers per thread beyond the accumulators and the window (addresses)


@dataclass(frozen=True)
class FusedBudget:
    lda: int  # row stride of Xs and Us, elements
    xs_elems: int
    us_elems: int
    ms_cols: int  # output channels per accumulator slice through Ms
    ms_ld: int  # row stride of Ms, floats
    mt: int  # MMA tile rows of a warp tile (tiles / 16)
    nt: int  # MMA tile columns of a warp tile (kblock / 8)
    bins_per_warp: int  # 0 when the bins do not split evenly (a spec rule refuses it)
    acc_per_thread: int
    table_offset: int  # bytes from the start of shared memory to the tile table
    smem_bytes: int
    min_blocks: int  # blocks per SM the launch bounds ask the compiler to fit (axis min_blocks)
    kpass: int = 0  # held schedule: output channels per MMA pass (kblock for one pass)
    park_per_thread: int = 0  # held schedule: fp16 pairs of the earlier passes' M a thread parks
    hold: int = 0  # the schedule: 0 chunked, else the held schedule's most channels (axis hold)

    @classmethod
    def of(cls, spec: RtFusedSpec) -> FusedBudget:
        bins, tm, kb = spec.tile.bins, spec.tiles, spec.kblock
        per_warp = bins // spec.warps if spec.warps > 0 and bins % spec.warps == 0 else 0
        hold = getattr(spec, "hold", 0)  # 0 where a grid does not declare the axis
        if hold > 0:  # V of every channel; one bin's accumulators and B fragments a thread
            lda = hold + PAD
            xs, us = bins * tm * lda, 0
            cols, ms_ld = kb, lda  # M in fp16 over V, one slice
            table = -(-xs * spec.mdtype.itemsize // 16) * 16
            kpass = getattr(spec, "kpass", 0) or kb
            acc = tm * kpass // 32 if per_warp else 0
            park = (kb // kpass - 1) * acc // 2 if kb % kpass == 0 else 0
            # a lane's 16-byte B loads of one 32-channel step, and its parked M pairs
            regs = acc + 4 * (kpass // MMA_N) + park
        else:
            lda = spec.cchunk + PAD
            xs, us = bins * tm * lda, bins * kb * lda
            operand_bytes = (xs + us) * max(spec.stages, 1) * spec.mdtype.itemsize
            cols = _slice_cols(bins * tm, kb, operand_bytes)
            ms_ld = cols + MS_PAD
            table = -(-max(operand_bytes, bins * tm * ms_ld * 4) // 16) * 16
            acc = regs = per_warp * tm * kb // 32
            kpass, park = kb, 0
        smem = table + -(-tm * TILE_BYTES // 16) * 16
        regs += max(64, bins + REG_OVERHEAD)
        return cls(
            lda=lda,
            xs_elems=xs,
            us_elems=us,
            ms_cols=cols,
            ms_ld=ms_ld,
            mt=tm // MMA_M,
            nt=kpass // MMA_N,
            bins_per_warp=per_warp,
            acc_per_thread=acc,
            table_offset=table,
            smem_bytes=smem,
            min_blocks=getattr(spec, "min_blocks", 0) or _min_blocks(spec.block, regs, smem),
            kpass=kpass,
            park_per_thread=park,
            hold=hold,
        )


def _slice_cols(rows: int, kb: int, nbytes: int) -> int:
    """The widest multiple of 8 dividing kb whose Ms slice fits in nbytes (at least 8)."""
    fits = [
        c for c in range(MMA_N, kb + 1, MMA_N) if kb % c == 0 and rows * (c + MS_PAD) * 4 <= nbytes
    ]
    return max(fits, default=MMA_N)


def _min_blocks(block: int, regs: int, smem: int) -> int:
    """Blocks per SM that registers (``regs`` per thread: the accumulators, the input window
    and addresses) and shared memory allow; the launch bounds ask for that many, so ptxas caps
    the registers at 65536 / (block x blocks)."""
    by_regs = SM_REGISTERS // max(block * regs, 1)
    return max(1, min(by_regs, blocks_fit(block, smem)))


def blocks_fit(block: int, smem: int) -> int:
    """Blocks per SM that shared memory and the SM's 2048 threads allow."""
    return min(SM_SHARED // (smem + BLOCK_SHARED_RESERVE), 2048 // max(block, 1))


def fused_namespace(spec: RtFusedSpec) -> dict[str, int]:
    """The derived sizes the refusal rules of stage kf may use."""
    b = FusedBudget.of(spec)
    return dict(
        block=spec.block,
        bins_per_warp=b.bins_per_warp,
        acc_per_thread=b.acc_per_thread,
        smem_bytes=b.smem_bytes,
        blocks_fit=blocks_fit(spec.block, b.smem_bytes),
    )
