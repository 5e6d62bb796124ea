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
                         (``wino_kcol``; addressed through ``wino_vidx``); bin a starts at
                         a x ``bin_ld`` elements, ``bin_ld`` = tm x (hold + PAD), + PAD with
                         the transforms on the MMA (axis ``tcx``), so the 8 consecutive bins
                         an ``ldmatrix.trans`` row set of the output transform's MMA reads hit
                         8 distinct 16-byte bank groups;
                         after bin a's MMA its warp stores M[a] [tm][kb] in fp16 over the
                         first kb columns of Vs[a] (kb <= hold)
  Xw [warps][A][STEP + PAD]  (tcx 1) per warp, one tile's input window of one 32-channel step (io
                         dtype), staged by 16-byte asynchronous copies: the B operand of the
                         input transform's MMA (rows: window positions; the row pad puts the 8
                         rows of an ldmatrix.trans on 8 distinct 16-byte bank groups)
  Tiles [tm]             as above
  Tfr [kb]               (tcx 1) 1 / fs[k] of the block's output channels (0 where fs is past
                         2^-100 .. 2^100): the output phase's unscale is one product there
With ``chain`` > 0 (the pipelined held schedule: a workgroup runs chain tile blocks, block
i's output transform and block i + 1's input transform in one phase) the tile table is a ring
of ``TABLE_RING`` tables (block i's, i + 1's and i + 2's are in use at once), and the tile
maxima's partials ``Tpm [tm][16]`` (u32, own tile scales) lie after V instead of over it (V
holds block i's M while block i + 2's maxima are taken).
With ``wgmma`` 1 (hold 64) a 128-thread warpgroup owns whole bins (bins / (warps / 4) each) and
multiplies each on the asynchronous warpgroup MMA: V's rows are hold = 64 channels, 128 bytes,
unpadded, their 16-byte units XOR-swizzled by the row's index mod 8 (the 128-byte swizzle the
MMA's shared-memory descriptor names; ``wino_vidx``), bins tm x 128 bytes apart from a
``SWIZZLE_ALIGN``-aligned start, so every 8-row atom starts aligned; the accumulators per thread
are one bin's tm x kb / 128, the A fragments (U) two 16-byte rows a 32-channel step.
Warps own whole bins and multiply them one after another, so the accumulators per thread are
one bin's: tm x kb / 32, or with ``kpass`` (kb / kpass passes over the same V) one pass's,
tm x kpass / 32, the earlier passes' M parked as fp16 pairs in registers until the last pass.
With ``qsplit`` 1 each pass of a bin has its own warp (``passes`` = kb / kpass warps a bin, S =
warps / passes bins at a time, bins / S each warp): one pass's accumulators a thread, none
parked.
"""

from __future__ import annotations

from dataclasses import dataclass

from .specs import RtFusedSpec
from .vocab import Prescale

MMA_M, MMA_N, MMA_K = 16, 8, 16  # mma.sync m16n8k16
PAD = 8  # elements of row padding in Xs and Us
STEP = 32  # held schedule: input channels per MMA step (and per staged window)
MS_PAD = 8  # floats of row padding in Ms (64-bit fragment stores of 16 lanes hit 32 banks)
TILE_BYTES = 8 + 8 + 4 + 4 + 4  # the tile table's row: x mask, y mask, x offset, y offset, scale
SM_REGISTERS = 65536  # 32-bit registers per SM (sm_90)
SM_SHARED = 233472  # bytes of shared memory per SM (sm_90: 228 KB)
BLOCK_SHARED_RESERVE = 1024  # bytes the hardware keeps per resident block
TABLE_RING = 4  # the pipelined held schedule's tile tables (blocks i .. i + 2 in use; a power of 2)
MAXIMA_PARTIALS = 16  # the own tile scales' partial maxima a tile (u32 each: one a channel pair)
REG_OVERHEAD = 40  # registers per thread beyond the accumulators and the window (addresses)
WARPGROUP = 4  # warps of one wgmma (axis wgmma: a 128-thread warpgroup owns whole bins)
SWIZZLE_ALIGN = 1024  # bytes: where V's 128-byte swizzle atoms (8 rows of 128 bytes) start


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
    bin_ld: int = 0  # held schedule: elements from bin a's rows of Vs to bin a + 1's
    slot_ld: int = 0  # held schedule: elements between window positions in a warp's slot
    slot_elems: int = 0  # held schedule: elements of one warp's staged window
    tfr_offset: int = 0  # held schedule: bytes from the start of shared memory to Tfr
    tcx: int = 0  # held schedule: 1 runs both transforms on the MMA (axis tcx)
    chain: int = 0  # held schedule: tile blocks a workgroup pipelines (axis chain; 0: one)
    tpm_offset: int = 0  # chain > 0: bytes from the start of shared memory to Tpm
    ring: int = 1  # tile tables (TABLE_RING with chain > 0)
    wgmma: int = 0  # held schedule: 1 runs each bin on a warpgroup's wgmma (axis wgmma)
    tmx_offset: int = 0  # tsfix > 0: bytes from the start of shared memory to Tmx (u32 a tile)
    passes: int = 1  # held schedule: warps that share one bin, a pass each (axis qsplit 1)

    @classmethod
    def of(cls, spec: RtFusedSpec) -> FusedBudget:
        bins, tm, kb = spec.tile.bins, spec.tiles, spec.kblock
        hold = getattr(spec, "hold", 0)  # 0 where a grid does not declare the axis
        wgmma = getattr(spec, "wgmma", 0) if hold > 0 else 0
        kpass = (getattr(spec, "kpass", 0) or kb) if hold > 0 and not wgmma else kb
        qsplit = getattr(spec, "qsplit", 0) if hold > 0 and not wgmma and kb % kpass == 0 else 0
        passes = kb // kpass if qsplit else 1  # warps sharing one bin (axis qsplit)
        owners = spec.warps // WARPGROUP if wgmma else spec.warps // passes  # of whole bins
        whole = spec.warps % passes == 0 and owners > 0 and bins % owners == 0
        per_warp = bins // owners if whole else 0
        tcx = getattr(spec, "tcx", 0) if hold > 0 else 0
        chain = getattr(spec, "chain", 0) if hold > 0 else 0
        tpm = 0
        if wgmma:  # 128-byte swizzled rows; one bin's accumulators and A fragments a thread
            lda, bin_ld = hold, tm * hold  # bin a at a x tm x 128 bytes: atoms stay aligned
            xs, us, cols, ms_ld = bins * bin_ld, 0, kb, lda
            slot_ld = slot_elems = 0
            table = tpm = -(-xs * spec.mdtype.itemsize // 16) * 16
            park = 0
            acc = tm * kb // (32 * WARPGROUP) if per_warp else 0
            regs = acc + 2 * 4 * (hold // STEP)  # two 16-byte U rows a 32-channel step
        elif hold > 0:  # V of every channel; one bin's accumulators and B fragments a thread
            lda = hold + PAD
            bin_ld = tm * lda + (PAD if tcx else 0)
            xs, us = bins * bin_ld, 0
            cols, ms_ld = kb, lda  # M in fp16 over V, one slice
            slot_ld = STEP + PAD if tcx else 0
            slot_elems = bins * slot_ld
            slots = spec.warps * slot_elems * spec.io.itemsize
            table = -(-(xs * spec.mdtype.itemsize + slots) // 16) * 16
            tpm = table
            if chain and spec.prescale is Prescale.FUSED:  # the partial maxima after V
                table += tm * MAXIMA_PARTIALS * 4
            acc = tm * kpass // 32 if per_warp else 0
            park = (kb // kpass - 1) * acc // 2 if kb % kpass == 0 and not qsplit else 0
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
            park, bin_ld, slot_ld, slot_elems = 0, 0, 0, 0
        ring = TABLE_RING if chain else 1
        smem = tfr = table + ring * -(-tm * TILE_BYTES // 16) * 16
        if tcx:  # after the tiles: 1 / fs of the block's channels (fp32 each)
            smem += -(-kb * 4 // 16) * 16
        tmx = smem if hold > 0 and getattr(spec, "tsfix", 0) else 0
        if tmx:  # after the tiles: each tile's max|x| as the input transform reads it
            smem += -(-tm * 4 // 16) * 16
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
            bin_ld=bin_ld,
            slot_ld=slot_ld,
            slot_elems=slot_elems,
            tfr_offset=tfr if tcx else 0,
            tcx=tcx,
            chain=chain,
            tpm_offset=tpm,
            ring=ring,
            wgmma=wgmma,
            tmx_offset=tmx,
            passes=passes,
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


def transforms_exact(spec: RtFusedSpec) -> bool:
    """Whether the held schedule's MMA transforms hold their coefficients exactly: the input
    transform's in the io dtype (the MMA multiplies x as stored), the output transform's in
    the MMA dtype (M's storage). F6x6's input transform (21/4 and its products) is not exact
    in bf16."""
    from .vocab import DType
    from .winograd import kron_bits

    pairs = (("input", spec.io), ("output", spec.mdtype))
    if any(dtype not in (DType.FP16, DType.BF16) for _, dtype in pairs):
        return False
    try:
        for kind, dtype in pairs:
            kron_bits(kind, spec.tile.mh, spec.tile.mw, dtype)
    except ValueError:
        return False
    return True


def fused_namespace(spec: RtFusedSpec) -> dict[str, int]:
    """The derived sizes the refusal rules of stage kf may use."""
    b = FusedBudget.of(spec)
    return dict(
        transforms_exact=b.tcx == 0 or transforms_exact(spec),
        block=spec.block,
        bins_per_warp=b.bins_per_warp,
        acc_per_thread=b.acc_per_thread,
        smem_bytes=b.smem_bytes,
        blocks_fit=blocks_fit(spec.block, b.smem_bytes),
    )
