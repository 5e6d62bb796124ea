"""One renderer class per target: the dialect strings a stage template needs.

A template is written once. Its kernel body is a sequence of phases separated by block-wide
barriers at the body's top level. On the GPUs a phase is a brace scope and a barrier is the
target's barrier. On the host (``c``) the block is emulated PoCL-style: every phase is a loop
over the threads, a barrier closes one loop and opens the next, and OpenMP spreads the blocks
over the cores. A value needed after a barrier lives in shared memory or is re-derived (the
phases are scopes, so a phase-local variable used past a barrier compiles on no target).
Subclasses only supply strings; the base class holds the logic.
"""

from __future__ import annotations

from ..kinds import kernarg_ctype
from ..magic import magic_div
from ..vocab import DType, Target
from .transforms import PairOps


def baked_values(kernargs: dict[str, int]) -> dict[str, int]:
    """A launch's kernargs as a baked kernel holds them: every field as is, each magic pair
    (m_X, s_X) replaced by (X, 0), X read from the field of that name. Raises ValueError when
    a pair's divisor is not a field or its pair is not X's magic (kernargs of another launch)."""
    out = dict(kernargs)
    for name in kernargs:
        if not name.startswith("m_"):
            continue
        divisor = name[2:]
        if divisor not in kernargs:
            raise ValueError(f"baked kernargs: magic pair {name} divides by {divisor}, not a field")
        if magic_div(kernargs[divisor]) != (kernargs[name], kernargs[f"s_{divisor}"]):
            raise ValueError(
                f"baked kernargs: ({name}, s_{divisor}) is not the magic pair of "
                f"{divisor} = {kernargs[divisor]}; pass one launch's kernargs (stage_launch)"
            )
        out[name], out[f"s_{divisor}"] = kernargs[divisor], 0
    return out


class Renderer:
    """The target's dialect (class attributes, set by subclasses) and the per-render state."""

    target = Target.C
    fn = "static inline"  # qualifier of helper functions
    restrict = "restrict"
    fabs = "__builtin_fabsf"
    fmax = "__builtin_fmaxf"
    unroll = ""  # pragma before fixed-count loops
    no_unroll = ""  # pragma before a loop kept rolled (its body is large; registers are short)
    shared_qualifier = ""
    barrier_call = ""
    kernel_head = ""  # GPU: the qualifiers before a kernel's name ({block}: the block size)
    thread_ids = ""  # GPU: bx, by and tid from the target's builtins
    # An empty asm that "changes" a pointer variable: the compiler can no longer prove two of
    # its loads equal, so it reloads instead of keeping values live (K2's streamed transform)
    launder_asm = '__asm__ __volatile__("" : "+r"({var}));'
    # A point the compiler keeps memory accesses on their side of, so that straight-line code
    # made of independent pieces (K2's LDS-rows bin rows) does not have every piece's loads
    # hoisted to the top (live all at once: spills). Every thread of the warp must reach it.
    # The host runs a block's threads one at a time: nothing to order.
    warp_order_call = ""
    # A product the compiler never fuses into a following add (the tile and filter scales):
    # were x * s contracted into the transform's first sum, fma(x, s, c * y) would round c * y
    # where the unscaled sum fma(c, y, x) rounds nothing, and a power-of-two scale would change
    # bits. The host compiles with contraction off; HIP has no such intrinsic without the ROCm
    # headers (-nogpuinc), so its product is plain (compile-only there, not verified).
    exact_mul_format = "({a}) * ({b})"
    device_const = "static const"  # a constant table in the kernel's module

    def __init__(self, baked: dict[str, int] | None = None):
        self.baked = baked  # a problem's kernargs baked in as constants (the JIT route)
        self.block = 0

    # Division by an extent ------------------------------------------------------------------
    def udiv(self, n: str, m: str, s: str) -> str:
        """``n / d`` (n < 2^31) from d's magic pair (m = 0 encodes d = 1). Baked, the pair
        holds (d, 0) (``args_init``): the compiler sees a division by a literal and folds it
        its own way (a shift for a power of two)."""
        if self.baked is not None:
            return f"(void){s}, {n} / {m}"
        return f"{m} ? ({self.umulhi(n, m)} >> {s}) : {n}"

    # Conversions ----------------------------------------------------------------------------
    def umulhi(self, a: str, b: str) -> str:
        return f"(unsigned)(((unsigned long long)({a}) * (unsigned long long)({b})) >> 32)"

    def f2u(self, x: str) -> str:
        return f"__builtin_bit_cast(unsigned, (float)({x}))"

    def u2f(self, x: str) -> str:
        return f"__builtin_bit_cast(float, (unsigned)({x}))"

    def h2f(self, x: str) -> str:
        return f"(float)__builtin_bit_cast(_Float16, (unsigned short)({x}))"

    def f2h(self, x: str) -> str:
        return f"__builtin_bit_cast(unsigned short, (_Float16)({x}))"

    def to_float(self, dtype: DType, raw: str) -> str:
        if dtype is DType.FP32:
            return raw
        if dtype is DType.FP16:
            return self.h2f(raw)
        return f"wino_bf16_to_f32({raw})"

    def from_float(self, dtype: DType, value: str) -> str:
        if dtype is DType.FP32:
            return value
        if dtype is DType.FP16:
            return self.f2h(value)
        return f"wino_f32_to_bf16({value})"

    # Whole vectors of 16-bit lanes <-> fp32 (vector_io's loads and stores) ------------------
    def widen16(self, dtype: DType, vec: int, words: str, out: str) -> str:
        """Statements setting ``out[0..vec)`` (floats) to the ``vec`` 16-bit lanes of ``dtype``
        packed in the unsigned array ``words`` (lane i in bits 16 (i % 2) of word i / 2): here
        lane by lane through ``to_float`` (the GPUs' form)."""
        return "\n".join(
            f"  {out}[{i}] = "
            + self.to_float(dtype, f"(unsigned short)({words}[{i // 2}] >> {16 * (i % 2)})")
            + ";"
            for i in range(vec)
        )

    def narrow16(self, dtype: DType, vec: int, values: str, words: str) -> str:
        """Statements packing the floats ``values[0..vec)`` as 16-bit lanes of ``dtype`` into
        the unsigned array ``words`` (widen16's layout): here lane by lane through
        ``from_float``."""
        return "\n".join(
            f"  {words}[{k}] = (unsigned){self.from_float(dtype, f'{values}[{2 * k}]')}"
            f" | ((unsigned){self.from_float(dtype, f'{values}[{2 * k + 1}]')} << 16);"
            for k in range(vec // 2)
        )

    # File and kernel structure --------------------------------------------------------------
    def prelude(self) -> str:
        return ""

    def args_init(self) -> str:
        """Initialiser of the local kernarg copy A: the passed struct, or baked constants
        (the kernel then never reads its kernarg struct). Baked, each magic pair m_X, s_X
        holds (X, 0): ``udiv`` divides by X itself."""
        if self.baked is None:
            return self.args_source()
        values = ", ".join(
            f"{int(v)}" + ("u" if kernarg_ctype(k) == "unsigned" else "")
            for k, v in baked_values(self.baked).items()
        )
        return "{" + values + "} /* baked: the problem's kernargs, divisors for magic pairs */"

    def args_source(self) -> str:
        return "A_in"

    def kernel_begin(
        self, name: str, params: list[tuple[str, str]], block: int, min_blocks: int = 0
    ) -> str:
        """A GPU kernel's head: the struct by value, then the buffers; the thread ids.
        ``min_blocks``: blocks per SM the compiler must fit (0: no such bound)."""
        self.block = block
        sig = ", ".join(f"{ctype} {self.restrict} {n}" for ctype, n in params)
        bounds = f"{block}, {min_blocks}" if min_blocks else f"{block}"
        head = self.kernel_head.format(block=block, bounds=bounds)
        return (
            f"{head}{name}(const struct wino_args A_in, {sig})\n{{\n"
            f"  const struct wino_args A = {self.args_init()};\n"
            f"  const unsigned {self.thread_ids};\n"
            "  (void)A; (void)bx; (void)by; (void)tid;"
        )

    def shared(self, ctype: str, name: str, count: int) -> str:
        return f"{self.shared_qualifier}{ctype} {name}[{count}];"

    def body_begin(self) -> str:
        return "{"

    def launder(self, var: str) -> str:
        """A statement after which ``var`` (a pointer) is opaque to the optimiser."""
        return self.launder_asm.format(var=var)

    def barrier(self) -> str:
        return "}\n  " + self.barrier_call + "\n  {"

    def exact_mul(self, a: str, b: str) -> str:
        """``a * b`` rounded once, never contracted with a neighbouring add."""
        return self.exact_mul_format.format(a=a, b=b)

    def warp_order(self) -> str:
        """A statement memory accesses are not moved across (the warp's threads all reach it)."""
        return self.warp_order_call

    def kernel_end(self, name: str, params: list[tuple[str, str]]) -> str:
        return "}\n}"

    # Phases inside a block-uniform loop (a loop whose bounds every thread agrees on) ---------
    def phase_begin(self) -> str:
        return self.body_begin()

    def phase_end(self) -> str:
        return "}"

    def sync(self) -> str:
        return self.barrier_call

    # Block-wide max reductions ---------------------------------------------------------------
    def reduce_strides(self, block: int) -> list[int]:
        """The steps of a block-wide max reduction over shared memory, one phase each: a
        tree of halving strides block/2 ... 1 (every thread folds the value one stride
        above it), log2(block) barriers. A stride of 0 stands for one serial step instead:
        each segment's first thread folds the rest of its segment itself."""
        return [block >> step for step in range(1, block.bit_length())]

    # Per-thread arrays that live across barriers (accumulators) -------------------------------
    def private(self, ctype: str, name: str, count: int) -> str:
        """Declared at the kernel's top level, before the first phase."""
        return f"{ctype} {name}[{count}];"

    def priv(self, name: str) -> str:
        """The calling thread's private array (a pointer expression)."""
        return name

    # Shared memory sized at launch ------------------------------------------------------------
    def dynamic_shared(self, name: str, nbytes: int, align: int = 16) -> str:
        aligned = f"__attribute__((aligned({align})))"
        return f"extern {self.shared_qualifier}{aligned} unsigned char {name}[];"

    # The warp MMA: D[16x8] += A[16x16] . B[16x8] (B given as its transpose, [8][16]), fp32 ----
    def mma_helper(self, dtype: DType, mt: int, nt: int) -> str:
        """``wino_warp_mma(d, a, lda, b, ldb, lane)``: a warp tile of (16 mt) x (8 nt) over one
        k16 step, per-thread semantics. Accumulator tile (i, j) (rows 16 i.., columns 8 j..) is
        d[4 (i nt + j) ..]: lane l owns rows g = l / 4 and g + 8, columns 2 (l % 4) + (0, 1), as
        in mma.sync's fragments. This scalar form computes exactly those from the shared-memory
        tiles; CUDA renders ldmatrix fragment loads (each reused nt or mt times) and mma.sync."""
        a = self.to_float(dtype, "a[row * lda + k]")
        b = self.to_float(dtype, "b[col * ldb + k]")
        return (
            f"{self.fn} void wino_mma_m16n8k16(float* d, const unsigned short* a, int lda,"
            " const unsigned short* b, int ldb, unsigned lane)\n{\n"
            "  const unsigned g = lane >> 2, t = lane & 3u;\n"
            "  for (int i = 0; i < 4; ++i) {\n"
            "    const unsigned row = g + 8u * (unsigned)(i >> 1);\n"
            "    const unsigned col = 2u * t + (unsigned)(i & 1);\n"
            "    float s = 0.0f;\n"
            f"    for (int k = 0; k < 16; ++k) s += {a} * {b};\n"
            "    d[i] += s;\n"
            "  }\n}\n"
            f"{self.fn} void wino_warp_mma(float* d, const unsigned short* a, int lda,"
            " const unsigned short* b, int ldb, unsigned lane)\n{\n"
            f"  for (int i = 0; i < {mt}; ++i)\n"
            f"    for (int j = 0; j < {nt}; ++j)\n"
            f"      wino_mma_m16n8k16(d + 4 * (i * {nt} + j), a + i * 16 * lda, lda,"
            " b + j * 8 * ldb, ldb, lane);\n}"
        )

    # The held schedule's MMA: B straight from global memory, over one k32 step -------------
    def held_layout_helpers(self, swizzle: bool = False) -> str:
        """The held fused schedule's shared-memory layout, one definition for the template and
        the MMA primitive. ``wino_kchan(q)``: column q of a 32-channel MMA step pairs with
        channel wino_kchan(q) of U, so that lane l = 4 g + t loads its B fragments of both k16
        halves as the 8 consecutive channels 8 t .. 8 t + 7 of U's row g (one 16-byte load);
        ``wino_kcol`` is its inverse (channel pairs (c, c + 1), c even, stay adjacent).
        ``wino_vidx(row, col, ld)``: element (row, col) of V / M, row-major with row stride ld
        (the budget pads rows by 8 elements, so the 8 rows of an ldmatrix or of an accumulator
        store hit 8 distinct 16-byte units of the 32 banks). An XOR swizzle of the units
        instead of the padding measured slower on the H200 (the address arithmetic: 21.2 M
        instructions against 14.8 M, docs/FUSED.md). With ``swizzle`` (the warpgroup MMA,
        axis wgmma; ld is 64 there): rows of 64 elements (128 bytes) unpadded, the 16-byte
        unit u of row r at unit u ^ (r % 8), the 128-byte swizzle of the MMA's shared-memory
        descriptor (rows of one 8-row atom on 8 distinct units of the 32 banks)."""
        index = (
            "  return row * 64 + ((((col >> 3) ^ row) & 7) << 3) + (col & 7);  /* ld is 64 */\n}"
            if swizzle
            else "  return row * ld + col;\n}"
        )
        return (
            f"{self.fn} int wino_kchan(int q)\n{{\n"
            "  return 8 * ((q >> 1) & 3) + 4 * (q >> 4) + 2 * ((q >> 3) & 1) + (q & 1);\n}\n"
            f"{self.fn} int wino_kcol(int c)\n{{\n"
            "  return 16 * ((c >> 2) & 1) + 8 * ((c >> 1) & 1) + 2 * (c >> 3) + (c & 1);\n}\n"
            f"{self.fn} int wino_vidx(int row, int col, int ld)\n{{\n"
            + ("  (void)ld;\n" if swizzle else "")
            + index
        )

    # The held schedule's warpgroup MMA (axis wgmma) ------------------------------------------
    def wg_mma_helper(self, dtype: DType, n: int, steps: int) -> str:
        """One bin's product on a 128-thread warpgroup (lane = the thread's index in it, w =
        lane / 32, g = lane % 32 / 4, t = lane % 4) in three calls, so that the next bin's U
        loads while this bin multiplies: ``wino_wg_load(f, u, ldu, rows, cols, lane)`` takes
        U's rows (output channels) k < rows and channels c < cols (zero past them; at most 32
        ``steps`` of 32) into the fragment ``f``; ``wino_wg_issue(d, v, ld, f, cols, lane)``
        starts d[4 j + e] (j < n / 8) = sum over c of U(k, c) V(m, c) with k = 16 w + 2 g + e /
        2 (an output channel: the thread holds the pair 2 g, 2 g + 1 of its warp's 16) and m =
        8 j + 2 t + e % 2 (a tile of the bin's n), V(m, c) = v[wino_vidx(m, c', ld)] at c's
        column c' (``wino_kcol`` within each 32-channel step); ``wino_wg_wait(d, f)`` returns
        when d holds it and the MMA is done with f (f may then be loaded again). This scalar
        form keeps U's address in the fragment and sums at the issue, each 32-channel step in
        column order, then the steps, as ``mma_global_b_helper``'s (so the host's M is the
        per-warp kernel's, bit for bit);
        CUDA loads each thread's A fragments (U rows k, k + 1: one 16-byte load a row and
        32-channel step, ``wino_kchan``'s order) and issues wgmma.mma_async m64n{n}k16, V read
        by the tensor cores through a 128-byte-swizzle descriptor."""
        a = self.to_float(dtype, "f->u[k * f->ldu + c]")
        b = self.to_float(dtype, "v[wino_vidx(m, c0 + q, ld)]")
        return (
            "typedef struct { const unsigned short* u; int ldu, rows, cols; } wino_wg_frag;\n"
            f"{self.fn} void wino_wg_load(wino_wg_frag* f, const unsigned short* u, int ldu,"
            " int rows, int cols, unsigned lane)\n{\n"
            "  (void)lane;\n"
            "  f->u = u;\n  f->ldu = ldu;\n  f->rows = rows;\n  f->cols = cols;\n}\n"
            f"{self.fn} void wino_wg_issue(float* d, const unsigned short* v, int ld,"
            " const wino_wg_frag* f, int cols, unsigned lane)\n{\n"
            "  const int w = (int)(lane >> 5), g = (int)((lane >> 2) & 7u), t = (int)(lane & 3u);\n"
            f"  for (int j = 0; j < {n // 8}; ++j)\n"
            "    for (int e = 0; e < 4; ++e) {\n"
            "      const int k = 16 * w + 2 * g + (e >> 1), m = 8 * j + 2 * t + (e & 1);\n"
            "      float s = 0.0f;\n"
            f"      for (int c0 = 0; c0 < cols && c0 < {32 * steps}; c0 += 32) {{\n"
            "        float p = 0.0f;\n"
            "        for (int q = 0; q < 32; ++q) {\n"
            "          const int c = c0 + wino_kchan(q);\n"
            f"          if (k < f->rows && c < f->cols) p += {b} * {a};\n"
            "        }\n"
            "        s += p;\n"
            "      }\n"
            "      d[4 * j + e] = s;\n"
            "    }\n}\n"
            f"{self.fn} void wino_wg_wait(float* d, const wino_wg_frag* f) {{ (void)d; (void)f; }}"
        )

    def group_barrier(self) -> str:
        """Between two phases of one warpgroup (4 warps, axis wgmma): what its threads did
        before it, its threads see after it (the emulation: a phase boundary)."""
        return self.warp_barrier()

    def slot_barrier(self, slot: str, threads: int) -> str:
        """Between two phases of the ``threads`` threads that share ``slot`` (axis qsplit: a
        bin's warps, a pass each): what they did before it, they see after it. Here the
        block's barrier, which every thread reaches (the bins loop is uniform); the emulation:
        a phase boundary."""
        return self.barrier()

    def async_proxy_fence(self) -> str:
        """After a thread's shared-memory stores that a later asynchronous MMA reads (CUDA:
        the generic-to-async proxy fence; nothing elsewhere)."""
        return ""

    def shared_max(self, ptr: str, value: str) -> str:
        """``*ptr = max(*ptr, value)`` on an unsigned word of shared memory that other threads
        of the workgroup update too (GPUs: an atomic max; the emulation runs them in turn)."""
        return f"atomicMax({ptr}, {value});"

    def mma_global_b_helper(self, dtype: DType, mt: int, nt: int) -> str:
        """``wino_warp_mma32(d, a, lda, c0, u, ldu, rows, cols, lane)``: a warp tile of
        (16 mt) x (8 nt) over the 32-channel step at column c0 of the tile ``a``
        (``wino_vidx``), per-thread semantics as ``mma_helper``'s: tile (i, j) accumulates in
        d[4 (i nt + j) ..], d[r][n] += sum over q < 32 of A(r, c0 + q) times u[n][wino_kchan(q)],
        where u's row n (output channel, row stride ldu) counts only below ``rows`` and its
        channel c only below ``cols`` (zero past them). This scalar form reads u element by
        element; CUDA loads each lane's B fragments with one 16-byte load per 8-channel tile and
        multiplies on mma.sync."""
        a = self.to_float(dtype, "a[wino_vidx(row, c0 + q, lda)]")
        b = self.to_float(dtype, "u[col * ldu + c]")
        return (
            f"{self.fn} void wino_warp_mma32(float* d, const unsigned short* a, int lda, int c0,"
            " const unsigned short* u, int ldu, int rows, int cols, unsigned lane)\n{\n"
            "  const unsigned g = lane >> 2, t = lane & 3u;\n"
            f"  for (int i = 0; i < {mt}; ++i)\n"
            f"    for (int j = 0; j < {nt}; ++j)\n"
            "      for (int e = 0; e < 4; ++e) {\n"
            "        const int row = 16 * i + (int)g + 8 * (e >> 1);\n"
            "        const int col = 8 * j + 2 * (int)t + (e & 1);\n"
            "        float s = 0.0f;\n"
            "        for (int q = 0; q < 32; ++q) {\n"
            "          const int c = wino_kchan(q);\n"
            f"          if (col < rows && c < cols) s += {a} * {b};\n"
            "        }\n"
            f"        d[4 * (i * {nt} + j) + e] += s;\n"
            "      }\n}"
        )

    # The held schedule's transforms on the MMA -------------------------------------------------
    def _table(self, name: str, coef: list[list[int]]) -> str:
        """A constant table of 16-bit patterns in the kernel's module, one row a line."""
        rows = ",\n".join("  {" + ", ".join(f"{v:#06x}" for v in row) + "}" for row in coef)
        shape = f"[{len(coef)}][{len(coef[0])}]"
        return f"{self.device_const} unsigned short {name}{shape} = {{\n{rows}\n}};\n"

    def out_mma_helper(self, dtype: DType, coef: list[list[int]], bins: int) -> str:
        """The output transform as a GEMM per (tile, 16 output channels):
        ``Y[o][n] = sum over a of AT[o][a] M[a][n]``, AT the tile's Kronecker output matrix
        (``coef``: its rows as ``dtype`` bit patterns, exact; zero rows and columns pad it to
        multiples of 16). ``wino_out_frag(af, lane)`` fills the lane's A fragments of AT (per
        16-row tile i and k16 step ks, ``af[4 (i KS + ks) ..]``, mma.sync's layout);
        ``wino_warp_out_mma(d, af, m, bs, lane)`` accumulates, per 16-row tile i and 8-channel
        tile j, ``d[4 (2 i + j) + e]`` += sum over k < 16 KS of AT[r][k] times M(k, c), r =
        16 i + g + 8 (e / 2), c = 8 j + 2 t + e % 2 (g = lane / 4, t = lane % 4), where M(k, c)
        = ``m[min(k, bins - 1) * bs + c]`` (bin k's row at stride ``bs``; the padding bins
        read the last real bin, whose coefficient is 0: only a non-finite M there reaches the
        tile's other outputs, as a non-finite window value does). This scalar form sums from
        the table; CUDA loads B by ldmatrix.trans (rows: 8 consecutive bins, 8 channels each)
        and multiplies on mma.sync."""
        rows, kp = len(coef), len(coef[0])
        a = self.to_float(dtype, "wino_atk[r][k]")
        b = self.to_float(dtype, f"m[(k < {bins} ? k : {bins - 1}) * bs + c]")
        return (
            self._table("wino_atk", coef)
            + f"{self.fn} void wino_out_frag(unsigned* af, unsigned lane)\n{{\n"
            "  const unsigned g = lane >> 2, t = lane & 3u;\n"
            f"  for (int i = 0; i < {rows // 16}; ++i)\n"
            f"    for (int ks = 0; ks < {kp // 16}; ++ks)\n"
            "      for (int e = 0; e < 4; ++e) {\n"
            "        const unsigned r = 16u * (unsigned)i + g + 8u * (unsigned)(e & 1);\n"
            "        const unsigned k = 16u * (unsigned)ks + 2u * t + 8u * (unsigned)(e >> 1);\n"
            f"        af[4 * (i * {kp // 16} + ks) + e] ="
            " (unsigned)wino_atk[r][k] | (unsigned)wino_atk[r][k + 1] << 16;\n"
            "      }\n}\n"
            f"{self.fn} void wino_warp_out_mma(float* d, const unsigned* af,"
            " const unsigned short* m, int bs, unsigned lane)\n{\n"
            "  (void)af;\n"
            "  const unsigned g = lane >> 2, t = lane & 3u;\n"
            f"  for (int i = 0; i < {rows // 16}; ++i)\n"
            + _lane_sums(2, kp, a, b, "d[4 * (2 * i + j) + e]", "  ")
            + "}"
        )

    def in_mma_helper(self, dtype: DType, coef: list[list[int]], bins: int, ld: int) -> str:
        """The input transform as a GEMM per tile window staged in shared memory: rows are the
        window positions q (row stride ``ld`` elements), 32 channels each. ``wino_xfrag``
        holds a warp's view of one staged window (``wino_in_bfrag(f, slot, lane)``);
        ``wino_in_mma(d, i, f, lane)`` accumulates the bins of 16-row tile i, per 8-channel
        tile j: ``d[4 j + e]`` += sum over k < 16 KS of BK[r][k] times X(k, c), r = 16 i + g +
        8 (e / 2), c = 8 j + 2 t + e % 2, BK the tile's input matrix (``coef``: ``dtype`` bit
        patterns, exact, zero-padded to multiples of 16) and X(k, c) = ``slot[min(k, bins - 1)
        * ld + c]`` (the padding positions read the last one, whose coefficient is 0). This
        scalar form sums from the table; CUDA keeps the lane's B fragments (ldmatrix.trans of
        8 positions x 8 channels) in the frag and the A fragments of BK in a per-lane table."""
        kp = len(coef[0])
        a = self.to_float(dtype, "wino_btk[r][k]")
        b = self.to_float(dtype, f"f->p[(k < {bins} ? k : {bins - 1}) * {ld} + c]")
        return (
            self._table("wino_btk", coef)
            + "typedef struct { const unsigned short* p; } wino_xfrag;\n"
            f"{self.fn} void wino_in_bfrag(wino_xfrag* f, const unsigned short* slot,"
            " unsigned lane)\n{\n  (void)lane;\n  f->p = slot;\n}\n"
            f"{self.fn} void wino_in_mma(float* d, int i, const wino_xfrag* f, unsigned lane)\n{{\n"
            "  const unsigned g = lane >> 2, t = lane & 3u;\n"
            + _lane_sums(4, kp, a, b, "d[4 * j + e]", "")
            + "}"
        )

    # The kernel's own tile maxima: two 16-bit magnitudes at once ----------------------------
    def absmax16x2_helper(self, dtype: DType) -> str:
        """``wino_absmax2(acc, w)``: per 16-bit half of the words (``dtype`` fp16 or bf16), the
        larger of acc's (a magnitude, never NaN) and |w|'s, NaN dropped as fmax drops it (a NaN
        half of w leaves acc's half): on the bit patterns with the sign cleared, which order as
        the values do. CUDA: one max.f16x2 / max.bf16x2 of the sign-cleared word."""
        return (
            f"{self.fn} unsigned wino_absmax2(unsigned acc, unsigned w)\n{{\n"
            "  unsigned out = 0u;\n"
            "  for (int h = 0; h < 32; h += 16) {\n"
            "    const unsigned a = (acc >> h) & 0xffffu, v = (w >> h) & 0x7fffu;\n"
            f"    out |= (v > a && v <= {dtype.inf_bits:#x}u ? v : a) << h;\n"
            "  }\n  return out;\n}"
        )

    def warp_barrier(self) -> str:
        """Between two phases of one warp: what a warp's threads wrote before it, its threads
        read after it (the emulation: a phase boundary, as ``barrier``)."""
        return "}\n  " + self.warp_order_call + "\n  {"

    # Asynchronous 16-byte copy global -> shared (zero fill when !valid), commit, wait --------
    def async_copy_helpers(self) -> str:
        return (
            f"{self.fn} void wino_cp_async16(void* dst, const void* src, int valid)\n{{\n"
            "  wino_b16 v = {{0u, 0u, 0u, 0u}};\n"
            "  if (valid) v = *(const wino_b16*)src;\n"
            "  *(wino_b16*)dst = v;\n}\n"
            f"{self.fn} void wino_cp_async_commit(void) {{}}\n"
            f"{self.fn} void wino_cp_async_wait(void) {{}}"
        )

    def async_wait_pending(self, pending: int) -> str:
        """A statement that returns once at most ``pending`` of the calling thread's newest
        commit groups of ``wino_cp_async16`` copies are still in flight (the older ones have
        landed). Here the copies are plain stores, done at once: nothing to wait for."""
        return f"/* the async copies: at most {pending} group(s) in flight (done at once here) */"

    # A prefetch into L2, and the SM count it is aimed by -------------------------------------
    def prefetch_helpers(self) -> str:
        """``wino_prefetch_l2(p)``: ask for the 128-byte line holding p in L2 (no value, no
        fault; p must lie inside a buffer the kernel may read). ``wino_sm_count()``: the SMs
        that run blocks at once, one block each (the block after this one on this SM is about
        bx + wino_sm_count()). ``wino_l2_bytes()``: the L2's capacity; a launch whose x and y
        fit in most of it (7/8, the held kernel's gate) is taken to find x there (the layer
        before wrote it) and does not prefetch. The host and HIP forms do nothing, count 1 SM
        and no L2."""
        return (
            f"{self.fn} void wino_prefetch_l2(const void* p) {{ (void)p; }}\n"
            f"{self.fn} unsigned wino_sm_count(void) {{ return 1u; }}\n"
            f"{self.fn} long long wino_l2_bytes(void) {{ return 0; }}"
        )

    # Pairs of fp16 values (two channels at once), one rounding per operation --------------
    #: The host: two floats, each an fp16 value; every operation rounds its exact result
    #: (a product of two fp16 values is exact in double, so the double sum is rounded once
    #: more, to fp16: the fused multiply-add's one rounding but for a tie made by a double
    #: rounding, where an addend below 2^-53 of the product would be lost).
    pair_ops = PairOps(
        fma="wino_h2fma({k}, {a}, {c})",
        add="wino_h2add({a}, {b})",
        sub="wino_h2sub({a}, {b})",
        neg="wino_h2neg({a})",
        mul="wino_h2mul({k}, {a})",
        const="wino_h2k({bits}u)",
        ctype="wino_h2",
    )

    def pair_helpers(self) -> str:
        """The pair type and its operations (``pair_ops``), and ``wino_h2k(bits)`` (both
        halves one 16-bit pattern), ``wino_h2of(w)`` / ``wino_h2bits(h)`` (a word of two fp16
        patterns, low half first, and back), ``wino_h2pack(lo, hi)`` (two floats rounded)."""
        fn = self.fn
        ops = {
            "fma(wino_h2 k, wino_h2 a, wino_h2 c)": "wino_r16((double)k.v[i] * a.v[i] + c.v[i])",
            "add(wino_h2 a, wino_h2 b)": "wino_r16((double)a.v[i] + b.v[i])",
            "sub(wino_h2 a, wino_h2 b)": "wino_r16((double)a.v[i] - b.v[i])",
            "neg(wino_h2 a)": "-a.v[i]",
            "mul(wino_h2 k, wino_h2 a)": "wino_r16((double)k.v[i] * a.v[i])",
        }
        lo, hi = self.h2f("(unsigned short)w"), self.h2f("(unsigned short)(w >> 16)")
        bits = f"(unsigned){self.f2h('h.v[0]')} | ((unsigned){self.f2h('h.v[1]')} << 16)"
        out = [
            "typedef struct { float v[2]; } wino_h2;",
            f"{fn} float wino_r16(double x) {{ return (float)(_Float16)x; }}",
        ]
        out += [
            f"{fn} wino_h2 wino_h2{sig}\n{{\n  wino_h2 r;\n"
            f"  for (int i = 0; i < 2; ++i) r.v[i] = {expr};\n  return r;\n}}"
            for sig, expr in ops.items()
        ]
        out += [
            f"{fn} wino_h2 wino_h2k(unsigned short b)\n{{\n  const float f = {self.h2f('b')};\n"
            "  wino_h2 r = {{f, f}};\n  return r;\n}",
            f"{fn} wino_h2 wino_h2of(unsigned w)\n{{\n  wino_h2 r = {{{{{lo}, {hi}}}}};\n"
            "  return r;\n}",
            f"{fn} unsigned wino_h2bits(wino_h2 h) {{ return {bits}; }}",
            f"{fn} wino_h2 wino_h2pack(float lo, float hi)\n{{\n"
            "  wino_h2 r = {{wino_r16(lo), wino_r16(hi)}};\n  return r;\n}",
        ]
        return "\n".join(out)


class CRenderer(Renderer):
    """Host C11 + OpenMP: workgroup-loop emulation of the kernel text."""

    target = Target.C
    fmax = "wino_fmaxf"  # the prelude's: one maxss, where fmaxf is a libm call per element
    #: The block body twice in one portable binary: for any x86-64 and for x86-64-v3 (AVX2,
    #: FMA, F16C: hardware half conversions, 8-wide lanes), picked once at load (ifunc).
    #: -std=c11 keeps -ffp-contract=off, so both bodies round alike (no FMA contraction).
    CLONES = (
        "/* x86-64-v3 body beside the portable one, chosen at load (GNU ifunc). */\n"
        "#if defined(__x86_64__) && defined(__ELF__) && defined(__GNUC__)\n"
        '#define WINO_CLONES __attribute__((target_clones("default", "arch=x86-64-v3")))\n'
        "#else\n"
        "#define WINO_CLONES\n"
        "#endif\n"
    )

    def f2u(self, x: str) -> str:
        return f"wino_f2u({x})"

    def u2f(self, x: str) -> str:
        return f"wino_u2f({x})"

    def h2f(self, x: str) -> str:
        return f"wino_h2f({x})"

    def f2h(self, x: str) -> str:
        return f"wino_f2h({x})"

    def widen16(self, dtype: DType, vec: int, words: str, out: str) -> str:
        """bf16: the whole vector at once in GCC's vector extensions (each lane zero-extended
        to 32 bits and shifted up 16: wino_bf16_to_f32's bits), which the x86-64-v3 clone makes
        one vpmovzxwd and one vpslld; lane by lane, the 16-bit lanes went to memory one at a
        time and were read back as one vector (no store-to-load forwarding). fp16: lane by
        lane (F16C converts those; one vector of _Float16 would need it in the portable body)."""
        if dtype is not DType.BF16:
            return super().widen16(dtype, vec, words, out)
        return (
            "  {\n"
            f"    typedef unsigned short h_t __attribute__((vector_size({2 * vec})));\n"
            f"    typedef unsigned u_t __attribute__((vector_size({4 * vec})));\n"
            f"    h_t h; memcpy(&h, {words}, sizeof h);\n"
            "    const u_t u = __builtin_convertvector(h, u_t) << 16;\n"
            f"    memcpy({out}, &u, sizeof u);\n"
            "  }"
        )

    def narrow16(self, dtype: DType, vec: int, values: str, words: str) -> str:
        """bf16: wino_f32_to_bf16 on the whole vector at once (round to nearest, ties to even;
        a NaN keeps its top bits with the quiet bit set), the branch a lane mask (|u| compared
        as a signed lane: one vpcmpgtd); bit for bit the scalar function's result
        (tests/test_bf16_rounding.py). fp16: lane by lane."""
        if dtype is not DType.BF16:
            return super().narrow16(dtype, vec, values, words)
        return (
            "  {\n"
            f"    typedef unsigned u_t __attribute__((vector_size({4 * vec})));\n"
            f"    typedef int i_t __attribute__((vector_size({4 * vec})));\n"
            f"    typedef unsigned short h_t __attribute__((vector_size({2 * vec})));\n"
            f"    u_t u; memcpy(&u, {values}, sizeof u);\n"
            "    const u_t nan = (u_t)((i_t)(u & 0x7fffffffu) > 0x7f800000);\n"
            "    const u_t rne = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;\n"
            "    const h_t h = __builtin_convertvector("
            "(nan & ((u >> 16) | 0x40u)) | (~nan & rne), h_t);\n"
            f"    memcpy({words}, &h, sizeof h);\n"
            "  }"
        )

    def prelude(self) -> str:
        return (
            "#include <stdlib.h>\n"
            "#include <string.h>\n"
            "static inline unsigned wino_f2u(float f) "
            "{ unsigned u; memcpy(&u, &f, 4); return u; }\n"
            "static inline float wino_u2f(unsigned u) { float f; memcpy(&f, &u, 4); return f; }\n"
            "static inline float wino_h2f(unsigned short h) "
            "{ _Float16 f; memcpy(&f, &h, 2); return (float)f; }\n"
            "static inline unsigned short wino_f2h(float x) "
            "{ _Float16 f = (_Float16)x; unsigned short h; memcpy(&h, &f, 2); return h; }\n"
            "/* fmaxf(m, b) for a running max m that is never NaN (every use starts it at 0): b\n"
            " * when b > m, else m (a NaN b is ignored, as fmaxf does). GCC makes it one maxss;\n"
            " * fmaxf itself is a libm call per element without -ffinite-math-only. */\n"
            "static inline float wino_fmaxf(float m, float b) { return b > m ? b : m; }\n"
            + self.CLONES
        )

    def args_source(self) -> str:
        return "*A_in"

    def _signature(self, params: list[tuple[str, str]]) -> str:
        return ", ".join(
            f"{ctype} {self.restrict} {name}" if "*" in ctype else f"{ctype} {name}"
            for ctype, name in params
        )

    def kernel_begin(
        self, name: str, params: list[tuple[str, str]], block: int, min_blocks: int = 0
    ) -> str:
        self.block = block
        return (
            f"WINO_CLONES static void {name}_block("
            f"const struct wino_args* A_in, {self._signature(params)},"
            f" unsigned bx, unsigned by)\n{{\n"
            f"  const struct wino_args A = {self.args_init()};\n"
            "  (void)A; (void)bx; (void)by;"
        )

    def body_begin(self) -> str:
        return f"for (unsigned tid = 0; tid < {self.block}; ++tid) {{"

    def barrier(self) -> str:
        return "}\n  " + self.body_begin()

    def warp_barrier(self) -> str:
        return self.barrier()

    def private(self, ctype: str, name: str, count: int) -> str:
        return f"{ctype} {name}[{self.block}][{count}];"

    def reduce_strides(self, block: int) -> list[int]:
        """One serial step (stride 0): under the emulation a phase is a loop over the block's
        threads, so a tree would be log2(block) loops over every thread to fold a few values
        each; one loop in which each segment's first thread folds its segment does the same
        max (max is exact in any order) in one pass."""
        return [0]

    def priv(self, name: str) -> str:
        return f"{name}[tid]"

    def shared_max(self, ptr: str, value: str) -> str:
        return f"if ({value} > *({ptr})) *({ptr}) = {value};"

    def dynamic_shared(self, name: str, nbytes: int, align: int = 16) -> str:
        return f"unsigned char {name}[{nbytes}] __attribute__((aligned({align})));"

    def kernel_end(self, name: str, params: list[tuple[str, str]]) -> str:
        args = ", ".join(n for _, n in params)
        return (
            "}\n}\n\n"
            f"/* Entry point: runs the grid gx x gy of {self.block}-thread workgroups, handed to\n"
            " * the OpenMP threads one at a time (a thread the OS holds back stalls no share). */\n"
            f"void {name}(const struct wino_args* A_in, {self._signature(params)},"
            " unsigned gx, unsigned gy)\n{\n"
            "  #pragma omp parallel for collapse(2) schedule(dynamic, 1)\n"
            "  for (long by = 0; by < (long)gy; ++by)\n"
            "    for (long bx = 0; bx < (long)gx; ++bx)\n"
            f"      {name}_block(A_in, {args}, (unsigned)bx, (unsigned)by);\n"
            "}"
        )


class CudaRenderer(Renderer):
    """CUDA C++ for nvcc (sm_90)."""

    target = Target.CUDA
    fn = "static __device__ __forceinline__ __attribute__((unused))"
    restrict = "__restrict__"
    fabs = "fabsf"
    fmax = "fmaxf"
    exact_mul_format = "__fmul_rn({a}, {b})"
    device_const = "static __device__ const"
    unroll = "#pragma unroll"
    no_unroll = "#pragma unroll 1"
    shared_qualifier = "__shared__ "
    barrier_call = "__syncthreads();"
    kernel_head = 'extern "C" __global__ void __launch_bounds__({bounds})\n'
    thread_ids = "bx = blockIdx.x, by = blockIdx.y, tid = threadIdx.x"
    launder_asm = 'asm volatile("" : "+l"({var}));'
    warp_order_call = "__syncwarp();"

    def umulhi(self, a: str, b: str) -> str:
        return f"__umulhi({a}, {b})"

    def f2u(self, x: str) -> str:
        return f"__float_as_uint({x})"

    def u2f(self, x: str) -> str:
        return f"__uint_as_float({x})"

    def h2f(self, x: str) -> str:
        return f"__half2float(__ushort_as_half({x}))"

    def f2h(self, x: str) -> str:
        return f"__half_as_ushort(__float2half_rn({x}))"

    def from_float(self, dtype: DType, value: str) -> str:
        """bf16: the hardware conversion (one F2FP on sm_90) instead of wino_f32_to_bf16's
        integer rounding: the same bits (round to nearest, ties to even) for every non-NaN,
        a NaN stays a NaN (the canonical one)."""
        if dtype is DType.BF16:
            return f"__bfloat16_as_ushort(__float2bfloat16_rn({value}))"
        return super().from_float(dtype, value)

    def prelude(self) -> str:
        return "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n"

    def dynamic_shared(self, name: str, nbytes: int, align: int = 16) -> str:
        return f"extern __shared__ __align__({align}) unsigned char {name}[];"

    def wg_mma_helper(self, dtype: DType, n: int, steps: int) -> str:
        """``wino_wg_load``: lane l = 32 w + 4 g + t loads U rows k = 16 w + 2 g and k + 1 (its
        A rows g and g + 8) as 16-byte loads of channels 8 t .. 8 t + 7 per 32-channel step
        (element by element past cols or where ldu is not a multiple of 8; zero past rows /
        cols): words 0, 1 are its A fragment words of the step's first k16 half, 2, 3 of the
        second (``wino_kchan``). ``wino_wg_issue``: per k16 half one wgmma.mma_async
        m64n{n}k16 (A in registers, B = the bin's V through a descriptor: 128-byte swizzle,
        8-row groups 1024 bytes apart, the half's 32 bytes into each row), the first with
        scale-d 0, then one commit group; ``wino_wg_wait`` waits for it."""
        kind = {DType.FP16: "f16", DType.BF16: "bf16"}[dtype]
        nd = n // 2
        fence = (
            "#pragma unroll\n"
            f'  for (int i = 0; i < {nd}; ++i) asm volatile("" : "+f"(d[i]) :: "memory");\n'
        )
        return (
            f"typedef struct {{ wino_b16 a[{steps}][2]; }} wino_wg_frag;\n"
            f"{self.fn} void wino_wg_load(wino_wg_frag* f, const unsigned short* u, int ldu,"
            " int rows, int cols, unsigned lane)\n{\n"
            "  const int w = (int)(lane >> 5), g = (int)((lane >> 2) & 7u), t = (int)(lane & 3u);\n"
            "  const int k = 16 * w + 2 * g;\n"
            "  const unsigned short* const p0 = u + k * ldu + 8 * t;\n"
            "  if (k + 1 < rows && (ldu & 7) == 0 && (cols & 31) == 0) {\n"
            "    /* whole 32-channel steps, both rows in range: the loads back to back */\n"
            "#pragma unroll\n"
            f"    for (int s = 0; s < {steps}; ++s)\n"
            "#pragma unroll\n"
            "      for (int r = 0; r < 2; ++r) {\n"
            "        const wino_b16 z = {{0u, 0u, 0u, 0u}};\n"
            "        f->a[s][r] = 32 * s < cols ? *(const wino_b16*)(p0 + r * ldu + 32 * s) : z;\n"
            "      }\n"
            "    return;\n"
            "  }\n"
            "#pragma unroll\n"
            f"  for (int s = 0; s < {steps}; ++s)\n"
            "#pragma unroll\n"
            "    for (int r = 0; r < 2; ++r) {\n"
            "      const unsigned short* const p = p0 + r * ldu + 32 * s;\n"
            "      const int c = 32 * s + 8 * t;\n"
            "      wino_b16 x = {{0u, 0u, 0u, 0u}};\n"
            "      if (k + r < rows && c < cols) {\n"
            "        if ((ldu & 7) == 0 && c + 8 <= cols)\n"
            "          x = *(const wino_b16*)p;\n"
            "        else\n"
            "#pragma unroll\n"
            "          for (int e = 0; e < 8; ++e)\n"
            "            if (c + e < cols) x.w[e >> 1] |= (unsigned)p[e] << (16 * (e & 1));\n"
            "      }\n"
            "      f->a[s][r] = x;\n"
            "    }\n}\n"
            f"{self.fn} void wino_wg_issue(float* d, const unsigned short* v, int ld,"
            " const wino_wg_frag* f, int cols, unsigned lane)\n{\n"
            "  (void)ld;\n  (void)lane;\n"
            "  const unsigned base = (unsigned)__cvta_generic_to_shared(v);\n"
            "  /* 128-byte swizzle (1 << 62), 8-row groups 1024 bytes apart, LBO unused (1); k16\n"
            "   * half i starts 32 i bytes into the rows. Every descriptor is made before the\n"
            "   * first wgmma: an instruction that defines a wgmma input between two wgmmas\n"
            "   * makes ptxas serialize them (C7513). */\n"
            "  const unsigned long long hi = (1ull << 62) | (64ull << 32) | (1ull << 16);\n"
            f"  unsigned long long desc[{2 * steps}];\n"
            "#pragma unroll\n"
            f"  for (int i = 0; i < {2 * steps}; ++i)\n"
            "    desc[i] = hi | (((base + 32u * i) >> 4) & 0x3fffu);\n"
            "  const int ns = (cols + 31) >> 5;  /* 32-channel steps */\n"
            + fence
            + '  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");\n'
            + self._wg_issue_chain(kind, n, steps)
            + '  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");\n}\n'
            f"{self.fn} void wino_wg_wait(float* d, const wino_wg_frag* f)\n{{\n"
            '  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");\n'
            + fence
            + "  /* the MMA read f's registers until here: keep them from the next loads */\n"
            "#pragma unroll\n"
            f"  for (int s = 0; s < {steps}; ++s)\n"
            "#pragma unroll\n"
            "    for (int i = 0; i < 8; ++i)\n"
            '      asm volatile("" :: "r"(f->a[s][i >> 2].w[i & 3]));\n'
            "}"
        )

    @staticmethod
    def _wg_issue_chain(kind: str, n: int, steps: int) -> str:
        """The wgmma statements of ``wino_wg_issue``, unrolled in the text: for ns = steps ..
        1 a branch with its 2 ns k16 halves, the first with scale-d 0 (D = A B), the others 1
        (D += A B), each an immediate."""
        nd = n // 2
        dlist = ", ".join(f"%{i}" for i in range(nd))
        douts = ", ".join(f'"+f"(d[{i}])' for i in range(nd))
        out = []
        for m in range(steps, 0, -1):
            head = f"  if (ns >= {m}) {{\n" if m == steps else f"  }} else if (ns >= {m}) {{\n"
            body = []
            for i in range(2 * m):
                s, h = divmod(i, 2)
                body.append(
                    "    asm volatile(\n"
                    f'        "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{kind}.{kind} "\n'
                    f'        "{{{dlist}}}, "\n'
                    f'        "{{%{nd}, %{nd + 1}, %{nd + 2}, %{nd + 3}}}, "\n'
                    f'        "%{nd + 4}, {int(i > 0)}, 1, 1, 0;"\n'
                    f"        : {douts}\n"
                    f'        : "r"(f->a[{s}][0].w[{2 * h}]), "r"(f->a[{s}][1].w[{2 * h}]),\n'
                    f'          "r"(f->a[{s}][0].w[{2 * h + 1}]),\n'
                    f'          "r"(f->a[{s}][1].w[{2 * h + 1}]),\n'
                    f'          "l"(desc[{i}]));\n'
                )
            out.append(head + "".join(body))
        return "".join(out) + "  }\n"

    def group_barrier(self) -> str:
        """The warpgroup's named barrier (1 + its index: 0 is __syncthreads'), 128 threads."""
        return '}\n  asm volatile("bar.sync %0, 128;" :: "r"(1 + (int)(tid >> 7)) : "memory");\n  {'

    def slot_barrier(self, slot: str, threads: int) -> str:
        """The slot's named barrier (1 + slot: 0 is __syncthreads'), ``threads`` threads."""
        sync = f'asm volatile("bar.sync %0, {threads};" :: "r"(1 + (int)({slot})) : "memory");'
        return "}\n  " + sync + "\n  {"

    def async_proxy_fence(self) -> str:
        return 'asm volatile("fence.proxy.async.shared::cta;" ::: "memory");'

    def mma_helper(self, dtype: DType, mt: int, nt: int) -> str:
        """ldmatrix.x4 per A fragment (16 x 16, lane l addresses row l % 16, column 8 (l / 16)),
        ldmatrix.x4 per pair of B fragments (8 x 16 each, .col: rows are output channels, lane l
        addresses channel 8 (l / 16) + l % 8, column 8 ((l / 8) % 2)), .x2 for an odd last one;
        then the mt x nt mma.sync, every fragment held in registers and reused."""
        kind = {DType.FP16: "f16", DType.BF16: "bf16"}[dtype]
        pairs, odd = divmod(nt, 2)
        last = (
            "  {\n"
            "    const unsigned s = (unsigned)__cvta_generic_to_shared("
            f"b + ({(nt - 1) * 8}u + (lane & 7u)) * ldb + ((lane >> 3) & 1u) * 8u);\n"
            '    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];"\n'
            f'                 : "=r"(bf[{nt - 1}][0]), "=r"(bf[{nt - 1}][1]) : "r"(s));\n'
            "  }\n"
            if odd
            else ""
        )
        return (
            f"{self.fn} void wino_warp_mma(float* d, const unsigned short* a, int lda,"
            " const unsigned short* b, int ldb, unsigned lane)\n{\n"
            f"  unsigned af[{mt}][4], bf[{nt}][2];\n"
            "#pragma unroll\n"
            f"  for (int i = 0; i < {mt}; ++i) {{\n"
            "    const unsigned s = (unsigned)__cvta_generic_to_shared("
            "a + (i * 16u + (lane & 15u)) * lda + (lane >> 4) * 8u);\n"
            '    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"\n'
            '                 : "=r"(af[i][0]), "=r"(af[i][1]), "=r"(af[i][2]), "=r"(af[i][3])'
            ' : "r"(s));\n'
            "  }\n"
            "#pragma unroll\n"
            f"  for (int j = 0; j < {pairs}; ++j) {{\n"
            "    const unsigned s = (unsigned)__cvta_generic_to_shared("
            "b + (j * 16u + (lane >> 4) * 8u + (lane & 7u)) * ldb + ((lane >> 3) & 1u) * 8u);\n"
            '    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"\n'
            '                 : "=r"(bf[2 * j][0]), "=r"(bf[2 * j][1]),'
            ' "=r"(bf[2 * j + 1][0]), "=r"(bf[2 * j + 1][1]) : "r"(s));\n'
            "  }\n"
            f"{last}"
            "#pragma unroll\n"
            f"  for (int i = 0; i < {mt}; ++i)\n"
            "#pragma unroll\n"
            f"    for (int j = 0; j < {nt}; ++j)\n"
            + _mma_sync(kind, nt, "af[i]", "bf[j][0]", "bf[j][1]", "      ")
            + "}"
        )

    def mma_global_b_helper(self, dtype: DType, mt: int, nt: int) -> str:
        """Lane l = 4 g + t loads, per 8-channel tile j, channels 8 t .. 8 t + 7 of U's row
        8 j + g in one 16-byte load (unchecked when every row and channel of the step is in
        range, element by element when ldu is not a multiple of 8; zero past rows / cols):
        words 0, 1 are its B fragment of the first k16 half, 2, 3 of the second
        (``wino_kchan``); A by two ldmatrix.x4 per 16-row tile (``wino_vidx``'s rows); then
        2 mt nt mma.sync."""
        kind = {DType.FP16: "f16", DType.BF16: "bf16"}[dtype]
        return (
            f"{self.fn} void wino_warp_mma32(float* d, const unsigned short* a, int lda, int c0,"
            " const unsigned short* u, int ldu, int rows, int cols, unsigned lane)\n{\n"
            "  const int g = (int)(lane >> 2), t = (int)(lane & 3u);\n"
            f"  wino_b16 bf[{nt}];\n"
            f"  unsigned af[2][{mt}][4];\n"
            "  const unsigned short* const p0 = u + g * ldu + 8 * t;\n"
            f"  if (rows >= {8 * nt} && cols >= 32 && (ldu & 7) == 0) {{  /* all in range */\n"
            "#pragma unroll\n"
            f"    for (int j = 0; j < {nt}; ++j) bf[j] = *(const wino_b16*)(p0 + 8 * j * ldu);\n"
            "  } else {\n"
            "#pragma unroll\n"
            f"    for (int j = 0; j < {nt}; ++j) {{\n"
            "      const int n = 8 * j + g, c = 8 * t;\n"
            "      const unsigned short* const p = p0 + 8 * j * ldu;\n"
            "      wino_b16 v = {{0u, 0u, 0u, 0u}};\n"
            "      if (n < rows) {\n"
            "        if ((ldu & 7) == 0) {\n"
            "          if (c < cols) v = *(const wino_b16*)p;\n"
            "        } else {\n"
            "#pragma unroll\n"
            "          for (int e = 0; e < 8; ++e)\n"
            "            if (c + e < cols) v.w[e >> 1] |= (unsigned)p[e] << (16 * (e & 1));\n"
            "        }\n"
            "      }\n"
            "      bf[j] = v;\n"
            "    }\n"
            "  }\n"
            "#pragma unroll\n"
            "  for (int h = 0; h < 2; ++h)\n"
            "#pragma unroll\n"
            f"    for (int i = 0; i < {mt}; ++i) {{\n"
            "      const unsigned s = (unsigned)__cvta_generic_to_shared(a + wino_vidx("
            "i * 16 + (int)(lane & 15u), c0 + h * 16 + (int)(lane >> 4) * 8, lda));\n"
            '      asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 "\n'
            '                   "{%0, %1, %2, %3}, [%4];"\n'
            '                   : "=r"(af[h][i][0]), "=r"(af[h][i][1]), "=r"(af[h][i][2]),'
            ' "=r"(af[h][i][3]) : "r"(s));\n'
            "    }\n"
            "#pragma unroll\n"
            "  for (int h = 0; h < 2; ++h)\n"
            "#pragma unroll\n"
            f"    for (int i = 0; i < {mt}; ++i)\n"
            "#pragma unroll\n"
            f"      for (int j = 0; j < {nt}; ++j)\n"
            + _mma_sync(kind, nt, "af[h][i]", "bf[j].w[2 * h]", "bf[j].w[2 * h + 1]", "        ")
            + "}"
        )

    def out_mma_helper(self, dtype: DType, coef: list[list[int]], bins: int) -> str:
        """The base class's table and fragments; B per k16 step by one ldmatrix.x4.trans (lane
        l addresses bin 16 ks + 8 ((l / 8) % 2) + l % 8, clamped to the last bin, channels
        8 (l / 16) ..: registers 0, 1 the first 8-channel tile's B fragment, 2, 3 the
        second's), then 2 mma.sync per 16-row tile."""
        rows, kp = len(coef), len(coef[0])
        scalar = super().out_mma_helper(dtype, coef, bins)
        head = scalar[: scalar.index(f"{self.fn} void wino_warp_out_mma")]
        kind = {DType.FP16: "f16", DType.BF16: "bf16"}[dtype]
        a = f"(af + 4 * (i * {kp // 16} + ks))"
        mma = _mma_sync(kind, 2, a, "b[2 * j]", "b[2 * j + 1]", "        ")
        return (
            head + f"{self.fn} void wino_warp_out_mma(float* d, const unsigned* af,"
            " const unsigned short* m, int bs, unsigned lane)\n{\n"
            "  const int r = (int)(lane & 7u) + 8 * (int)((lane >> 3) & 1u);\n"
            "  const int j8 = 8 * (int)(lane >> 4);\n"
            "#pragma unroll\n"
            f"  for (int ks = 0; ks < {kp // 16}; ++ks) {{\n"
            f"    const int k = 16 * ks + r < {bins} ? 16 * ks + r : {bins - 1};\n"
            "    const unsigned s = (unsigned)__cvta_generic_to_shared(m + k * bs + j8);\n"
            "    unsigned b[4];\n"
            '    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 "\n'
            '                 "{%0, %1, %2, %3}, [%4];"\n'
            '                 : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3]) : "r"(s));\n'
            "#pragma unroll\n"
            f"    for (int i = 0; i < {rows // 16}; ++i)\n"
            "#pragma unroll\n"
            "      for (int j = 0; j < 2; ++j)\n" + mma + "  }\n}"
        )

    def in_mma_helper(self, dtype: DType, coef: list[list[int]], bins: int, ld: int) -> str:
        """The frag is the lane's B fragments of the whole window: per k16 step ks and
        channel half h, one ldmatrix.x4.trans (lane l addresses position 16 ks + 8 ((l / 8) %
        2) + l % 8, clamped to the last, channels 16 h + 8 (l / 16) ..): registers 0, 1 the
        B fragment of 8-channel tile 2 h, 2, 3 of tile 2 h + 1. BK's A fragments come from a
        per-lane table (one 16-byte load per 16-row tile and k16 step, L1-resident), then
        4 mma.sync per k16 step."""
        rows, kp = len(coef), len(coef[0])
        frags = []
        for i in range(rows // 16):
            for ks in range(kp // 16):
                for lane in range(32):
                    g, t = lane >> 2, lane & 3
                    words = []
                    for e in range(4):
                        r, k = 16 * i + g + 8 * (e & 1), 16 * ks + 2 * t + 8 * (e >> 1)
                        words.append(coef[r][k] | coef[r][k + 1] << 16)
                    frags.append("{{" + ", ".join(f"{w:#010x}u" for w in words) + "}}")
        kind = {DType.FP16: "f16", DType.BF16: "bf16"}[dtype]
        mma = _mma_sync(
            kind,
            0,
            "a.w",
            "f->r[ks][j >> 1][2 * (j & 1)]",
            "f->r[ks][j >> 1][2 * (j & 1) + 1]",
            "      ",
            tile="j",
        )
        return (
            f"{self.device_const} wino_b16 wino_btf[{len(frags)}] = {{\n  "
            + ",\n  ".join(frags)
            + "\n};\n"
            f"typedef struct {{ unsigned r[{kp // 16}][2][4]; }} wino_xfrag;\n"
            f"{self.fn} void wino_in_bfrag(wino_xfrag* f, const unsigned short* slot,"
            " unsigned lane)\n{\n"
            "  const int q = (int)(lane & 7u) + 8 * (int)((lane >> 3) & 1u);\n"
            "  const int c8 = 8 * (int)(lane >> 4);\n"
            "#pragma unroll\n"
            f"  for (int ks = 0; ks < {kp // 16}; ++ks) {{\n"
            f"    const int k = 16 * ks + q < {bins} ? 16 * ks + q : {bins - 1};\n"
            "#pragma unroll\n"
            "    for (int h = 0; h < 2; ++h) {\n"
            "      const unsigned s = (unsigned)__cvta_generic_to_shared("
            f"slot + k * {ld} + 16 * h + c8);\n"
            '      asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 "\n'
            '                   "{%0, %1, %2, %3}, [%4];"\n'
            '                   : "=r"(f->r[ks][h][0]), "=r"(f->r[ks][h][1]),'
            ' "=r"(f->r[ks][h][2]), "=r"(f->r[ks][h][3]) : "r"(s));\n'
            "    }\n  }\n}\n"
            f"{self.fn} void wino_in_mma(float* d, int i, const wino_xfrag* f, unsigned lane)\n{{\n"
            "#pragma unroll\n"
            f"  for (int ks = 0; ks < {kp // 16}; ++ks) {{\n"
            f"    const wino_b16 a = wino_btf[(i * {kp // 16} + ks) * 32 + (int)lane];\n"
            "#pragma unroll\n"
            "    for (int j = 0; j < 4; ++j)\n" + mma + "  }\n}"
        )

    pair_ops = PairOps(
        fma="__hfma2({k}, {a}, {c})",
        add="__hadd2({a}, {b})",
        sub="__hsub2({a}, {b})",
        neg="__hneg2({a})",
        mul="__hmul2({k}, {a})",
        const="wino_h2k({bits}u)",
        ctype="__half2",
    )

    def pair_helpers(self) -> str:
        """On __half2 (HFMA2 and kin: one rounding each, fp16 subnormals kept)."""
        fn = self.fn
        return (
            f"{fn} __half2 wino_h2k(unsigned short b) "
            "{ return __half2half2(__ushort_as_half(b)); }\n"
            f"{fn} __half2 wino_h2of(unsigned w) {{ __half2 h; memcpy(&h, &w, 4); return h; }}\n"
            f"{fn} unsigned wino_h2bits(__half2 h) {{ unsigned w; memcpy(&w, &h, 4); return w; }}\n"
            f"{fn} __half2 wino_h2pack(float lo, float hi) {{ return __floats2half2_rn(lo, hi); }}"
        )

    def absmax16x2_helper(self, dtype: DType) -> str:
        kind = {DType.FP16: "f16x2", DType.BF16: "bf16x2"}[dtype]
        return (
            f"{self.fn} unsigned wino_absmax2(unsigned acc, unsigned w)\n{{\n"
            "  unsigned out;  /* max without .NaN: a NaN operand yields the other */\n"
            f'  asm("max.{kind} %0, %1, %2;" : "=r"(out) : "r"(acc), "r"(w & 0x7fff7fffu));\n'
            "  return out;\n}"
        )

    def prefetch_helpers(self) -> str:
        """``prefetch.global.L2``; ``%nsmid`` (the SM identifiers: 132 on the H100 SXM); the
        L2 of the sm_90 parts (H100 and H200: 50 MB)."""
        return (
            f"{self.fn} void wino_prefetch_l2(const void* p) "
            '{ asm volatile("prefetch.global.L2 [%0];" :: "l"(p)); }\n'
            f"{self.fn} unsigned wino_sm_count(void)\n"
            '{ unsigned n; asm("mov.u32 %0, %%nsmid;" : "=r"(n)); return n; }\n'
            f"{self.fn} long long wino_l2_bytes(void) {{ return 50ll << 20; }}"
        )

    def async_copy_helpers(self) -> str:
        return (
            f"{self.fn} void wino_cp_async16(void* dst, const void* src, int valid)\n{{\n"
            "  const unsigned s = (unsigned)__cvta_generic_to_shared(dst);\n"
            '  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"\n'
            '               :: "r"(s), "l"(src), "r"(valid ? 16 : 0) : "memory");\n}\n'
            f"{self.fn} void wino_cp_async_commit(void) "
            '{ asm volatile("cp.async.commit_group;" ::: "memory"); }\n'
            f"{self.fn} void wino_cp_async_wait(void) "
            '{ asm volatile("cp.async.wait_group 0;" ::: "memory"); }'
        )

    def async_wait_pending(self, pending: int) -> str:
        return f'asm volatile("cp.async.wait_group {pending};" ::: "memory");'


class HipRenderer(Renderer):
    """HIP for clang's device-only mode without ROCm headers (-nogpulib -nogpuinc)."""

    target = Target.HIP
    fn = "static __attribute__((device, always_inline, unused)) inline"
    device_const = "static __attribute__((device)) const"
    restrict = "__restrict__"
    unroll = "#pragma unroll"
    no_unroll = "#pragma unroll 1"
    shared_qualifier = "__attribute__((shared)) "
    launder_asm = '__asm__ __volatile__("" : "+v"({var}));'
    warp_order_call = "__builtin_amdgcn_wave_barrier();"
    barrier_call = (
        '__builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup"); '
        "__builtin_amdgcn_s_barrier(); "
        '__builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");'
    )
    kernel_head = (
        'extern "C" __attribute__((global)) '
        "__attribute__((amdgpu_flat_work_group_size(1, {block})))\nvoid "
    )
    thread_ids = (
        "bx = __builtin_amdgcn_workgroup_id_x(), by = __builtin_amdgcn_workgroup_id_y(), "
        "tid = __builtin_amdgcn_workitem_id_x()"
    )

    def shared_max(self, ptr: str, value: str) -> str:
        """clang's scoped atomic (no ROCm headers: no atomicMax)."""
        return (
            f"__hip_atomic_fetch_max({ptr}, {value}, __ATOMIC_RELAXED,"
            " __HIP_MEMORY_SCOPE_WORKGROUP);"
        )

    pair_ops = PairOps(
        fma="__builtin_elementwise_fma({k}, {a}, {c})",
        add="({a} + {b})",
        sub="({a} - {b})",
        neg="(-{a})",
        mul="({k} * {a})",
        const="wino_h2k({bits}u)",
        ctype="wino_h2",
    )

    def pair_helpers(self) -> str:
        """On clang's _Float16 vectors (v_pk_fma_f16 and kin on gfx942 / gfx1100; compile-only)."""
        fn = self.fn
        return (
            "typedef _Float16 wino_h2 __attribute__((ext_vector_type(2)));\n"
            f"{fn} wino_h2 wino_h2k(unsigned short b) "
            "{ const _Float16 f = __builtin_bit_cast(_Float16, b); return (wino_h2){f, f}; }\n"
            f"{fn} wino_h2 wino_h2of(unsigned w) {{ return __builtin_bit_cast(wino_h2, w); }}\n"
            f"{fn} unsigned wino_h2bits(wino_h2 h) {{ return __builtin_bit_cast(unsigned, h); }}\n"
            f"{fn} wino_h2 wino_h2pack(float lo, float hi) "
            "{ return (wino_h2){(_Float16)lo, (_Float16)hi}; }"
        )

    # gfx11's WMMA (wave32) and gfx942's MFMA (wave64) for the MMA primitives -----------------
    def mma_helper(self, dtype: DType, mt: int, nt: int) -> str:
        """On gfx11 (wave32, ``__GFX11__``): per 16-row tile i and pair jp of 8-channel tiles,
        one ``v_wmma_f32_16x16x16`` (lane l loads row l % 16 of A and column l % 16 of B, 16
        k values each; a pair past nt reads the last column: its results are dropped), the
        16 x 16 result added into d in mma.sync's layout (``wino_wmma_add``). On gfx942
        (wave64: the template's 32-lane warp is half a wave) on the 16-block 4 x 4 x 4 MFMA,
        whose blocks leave the two warps of a wave independent (``_mfma_warp_mma``); the
        scalar form elsewhere. Compile-only: no AMD GPU has run it."""
        pairs = -(-nt // 2)
        wmma = (
            _wmma_prelude(dtype)
            + f"{self.fn} void wino_warp_mma(float* d, const unsigned short* a, int lda,"
            " const unsigned short* b, int ldb, unsigned lane)\n{\n"
            "  const int r = (int)(lane & 15u);\n"
            f"  wino_wmma_in af[{mt}], bf[{pairs}];\n"
            f"  for (int i = 0; i < {mt}; ++i)\n"
            "    __builtin_memcpy(&af[i], a + (16 * i + r) * lda, 32);\n"
            f"  for (int jp = 0; jp < {pairs}; ++jp) {{\n"
            "    const int n = 16 * jp + r;\n"
            f"    __builtin_memcpy(&bf[jp], b + (n < {8 * nt} ? n : {8 * nt - 1}) * ldb, 32);\n"
            "  }\n"
            f"  for (int i = 0; i < {mt}; ++i)\n"
            f"    for (int jp = 0; jp < {pairs}; ++jp)\n"
            f"      wino_wmma_add(d, {nt}, i, jp, wino_wmma(af[i], bf[jp]), lane);\n"
            "}\n"
        )
        return _by_arch(wmma, _mfma_warp_mma(dtype, mt, nt), super().mma_helper(dtype, mt, nt))

    def mma_global_b_helper(self, dtype: DType, mt: int, nt: int) -> str:
        """On gfx11: per k16 half h, 16-row tile i and pair jp of 8-channel tiles, one WMMA
        (A: row l % 16 of the step's columns 16 h .. 16 h + 15; B: output channel 16 jp + l %
        16, input channels wino_kchan(16 h + k), zero past rows / cols), added into d in
        mma.sync's layout; on gfx942 the 4 x 4 x 4 MFMA (``_mfma_warp_mma32``); the scalar
        form elsewhere. Compile-only."""
        pairs = -(-nt // 2)
        wmma = (
            _wmma_prelude(dtype)
            + f"{self.fn} void wino_warp_mma32(float* d, const unsigned short* a, int lda, int c0,"
            " const unsigned short* u, int ldu, int rows, int cols, unsigned lane)\n{\n"
            "  const int r = (int)(lane & 15u);\n"
            "  for (int h = 0; h < 2; ++h) {\n"
            f"    wino_wmma_in af[{mt}], bf[{pairs}];\n"
            f"    for (int i = 0; i < {mt}; ++i)\n"
            "      __builtin_memcpy(&af[i], a + wino_vidx(16 * i + r, c0 + 16 * h, lda), 32);\n"
            f"    for (int jp = 0; jp < {pairs}; ++jp) {{\n"
            "      const int n = 16 * jp + r;\n"
            "      unsigned short v[16];\n"
            "      for (int k = 0; k < 16; ++k) {\n"
            "        const int c = wino_kchan(16 * h + k);\n"
            "        v[k] = n < rows && c < cols ? u[n * ldu + c] : (unsigned short)0;\n"
            "      }\n"
            "      __builtin_memcpy(&bf[jp], v, 32);\n"
            "    }\n"
            f"    for (int i = 0; i < {mt}; ++i)\n"
            f"      for (int jp = 0; jp < {pairs}; ++jp)\n"
            f"        wino_wmma_add(d, {nt}, i, jp, wino_wmma(af[i], bf[jp]), lane);\n"
            "  }\n"
            "}\n"
        )
        scalar = super().mma_global_b_helper(dtype, mt, nt)
        return _by_arch(wmma, _mfma_warp_mma32(dtype, mt, nt), scalar)


RENDERERS: dict[Target, type[Renderer]] = {
    Target.C: CRenderer,
    Target.CUDA: CudaRenderer,
    Target.HIP: HipRenderer,
}


#: gfx11's WMMA result, lane l's element v: row 2 v + l / 16, column l % 16 of the 16 x 16
#: block (AMD's RDNA3 WMMA layout). mma.sync's accumulator element e of 8-column tile jj (of
#: a pair), lane l = 4 g + t: row g + 8 (e / 2), column 8 jj + 2 t + e % 2. So that element
#: lies in WMMA lane WMMA_SRC_LANE, element WMMA_SRC_SLOT: C expressions (in g, t, jj, e),
#: also valid Python, which tests/test_hip_mma.py checks against both layouts.
WMMA_SRC_LANE = "8 * jj + 2 * t + (e & 1) + 16 * (g & 1)"
WMMA_SRC_SLOT = "(g >> 1) + 4 * (e >> 1)"


def _wmma_prelude(dtype: DType) -> str:
    """gfx11's WMMA operand types, the product of two 16 x 16 blocks, and ``wino_wmma_add``:
    the result added into d's accumulator tiles (i, 2 jp) and (i, 2 jp + 1) (the second only
    below nt) in mma.sync's layout, each element fetched from its WMMA lane by ds_bpermute
    (four candidates: the element index differs between the lanes that read one source). The
    element is read into a float before its bit cast: clang 19 compiles ``__builtin_bit_cast(int,
    v[i])`` of an ext_vector element as element 0 whatever i is (stop 45: the lockstep test in
    tests/test_hip_mma.py found it: every conversion had taken the source lane's register 0)."""
    kind = {DType.FP16: ("_Float16", "f16"), DType.BF16: ("short", "bf16")}[dtype]
    fn = HipRenderer.fn
    return (
        "#ifndef WINO_WMMA\n#define WINO_WMMA\n"
        f"typedef {kind[0]} wino_wmma_in __attribute__((ext_vector_type(16)));\n"
        "typedef float wino_wmma_acc __attribute__((ext_vector_type(8)));\n"
        f"{fn} wino_wmma_acc wino_wmma(wino_wmma_in a, wino_wmma_in b)\n{{\n"
        f"  return __builtin_amdgcn_wmma_f32_16x16x16_{kind[1]}_w32(a, b,"
        " (wino_wmma_acc){});\n}\n"
        f"{fn} void wino_wmma_add(float* d, int nt, int i, int jp, wino_wmma_acc c,"
        " unsigned lane)\n{\n"
        "  const int g = (int)(lane >> 2), t = (int)(lane & 3u);\n"
        "  for (int jj = 0; jj < 2; ++jj) {\n"
        "    if (2 * jp + jj >= nt) break;\n"
        "    for (int e = 0; e < 4; ++e) {\n"
        f"      const int src = {WMMA_SRC_LANE}, slot = {WMMA_SRC_SLOT};\n"
        "      float v = 0.0f;\n"
        "      for (int k = 0; k < 4; ++k) {\n"
        "        const float ck = c[4 * (e >> 1) + k];  /* not bit_cast(c[...]): element 0 */\n"
        "        const int w = __builtin_amdgcn_ds_bpermute(src << 2,"
        " __builtin_bit_cast(int, ck));\n"
        "        if (k == (slot & 3)) v = __builtin_bit_cast(float, w);\n"
        "      }\n"
        "      d[4 * (i * nt + 2 * jp + jj) + e] += v;\n"
        "    }\n"
        "  }\n}\n"
        "#endif\n"
    )


def _by_arch(wmma: str, mfma: str, scalar: str) -> str:
    """gfx11's WMMA text where the compiler targets gfx11, gfx942's MFMA text there, else the
    scalar form."""
    return f"#if defined(__GFX11__)\n{wmma}#elif defined(__gfx942__)\n{mfma}#else\n{scalar}\n#endif"


#: gfx942's ``v_mfma_f32_4x4x4_16b_{f16,bf16}`` (CDNA3; AMD's matrix instruction calculator,
#: ``matrix_calculator.py --architecture cdna3 --instruction v_mfma_f32_4x4x4_16b_f16
#: --register-layout``): sixteen independent 4 x 4 x 4 products, block b in lanes 4 b .. 4 b + 3
#: of the wave64; lane 4 b + q holds row q of b's A (k = 0..3), column q of b's B and column q
#: of b's D (rows 0..3 in its 4 result registers). So blocks 0-7 are the wave's first 32-lane
#: warp and 8-15 its second: the two warps multiply independently, and the template's lane
#: l = 4 g + t is lane q = t of block g. Block g takes rows g and g + 8 of the 16-row tiles i0
#: and i1 (a pair; i0 twice for an odd mt's last tile) and, per 8-column tile j and parity par,
#: the columns 2 t + par: so lane (g, t) receives exactly elements par and 2 + par of its
#: mma.sync fragments of both tiles, and no lane moves (C expressions in g, t, i0, i1, j, par,
#: m, nt, also valid Python, which tests/test_hip_mma.py runs against the instruction's
#: layout). Half the products are dropped when i1 == i0 (an odd mt).
MFMA_A_ROW = "16 * (i0 + (t >> 1) * (i1 - i0)) + g + 8 * (t & 1)"
MFMA_B_COL = "8 * j + 2 * t + par"
MFMA_D_INDEX = "4 * ((i0 + (m >> 1) * (i1 - i0)) * nt + j) + 2 * (m & 1) + par"


def _mfma_prelude(dtype: DType) -> str:
    """gfx942's MFMA operand types and ``wino_mfma_tile``: lane (g, t)'s four accumulators of
    MFMA_D_INDEX (m < 4) through ``steps`` 4 x 4 x 4 MFMAs over the fragments af, bf (4 k values
    each), written back where they are kept (m < 2 when i1 == i0)."""
    ctype, name = {DType.FP16: ("_Float16", "4x4x4f16"), DType.BF16: ("short", "4x4x4bf16_1k")}[
        dtype
    ]
    fn = HipRenderer.fn
    return (
        "#ifndef WINO_MFMA\n#define WINO_MFMA\n"
        f"typedef {ctype} wino_mfma_in __attribute__((ext_vector_type(4)));\n"
        "typedef float wino_mfma_acc __attribute__((ext_vector_type(4)));\n"
        f"{fn} void wino_mfma_tile(float* d, int nt, int i0, int i1, int j, int par,"
        " const wino_mfma_in* af, const wino_mfma_in* bf, int steps)\n{\n"
        "  wino_mfma_acc c;\n"
        "#pragma unroll\n"
        f"  for (int m = 0; m < 4; ++m) c[m] = d[{MFMA_D_INDEX}];\n"
        "#pragma unroll\n"
        "  for (int s = 0; s < steps; ++s)\n"
        f"    c = __builtin_amdgcn_mfma_f32_{name}(af[s], bf[s], c, 0, 0, 0);\n"
        "#pragma unroll\n"
        f"  for (int m = 0; m < (i1 > i0 ? 4 : 2); ++m) d[{MFMA_D_INDEX}] = c[m];\n"
        "}\n#endif\n"
    )


def _mfma_pairs(mt: int, nt: int, rows: str, cols: str, steps: int) -> str:
    """The loops both MFMA helpers share: per pair of 16-row tiles (i0, i1), lane (g, t)'s A
    row ``rows`` (C statements filling af from row r), then per 8-column tile j and parity
    ``cols`` (filling bf from column n) and ``wino_mfma_tile``."""
    return (
        "  const int g = (int)(lane >> 2), t = (int)(lane & 3u);\n"
        "#pragma unroll\n"
        f"  for (int i0 = 0; i0 < {mt}; i0 += 2) {{\n"
        f"    const int i1 = i0 + 1 < {mt} ? i0 + 1 : i0, r = {MFMA_A_ROW};\n"
        f"    wino_mfma_in af[{steps}], bf[{steps}];\n"
        f"{rows}"
        "#pragma unroll\n"
        f"    for (int j = 0; j < {nt}; ++j)\n"
        "#pragma unroll\n"
        "      for (int par = 0; par < 2; ++par) {\n"
        f"        const int n = {MFMA_B_COL};\n"
        f"{cols}"
        f"        wino_mfma_tile(d, {nt}, i0, i1, j, par, af, bf, {steps});\n"
        "      }\n"
        "  }\n}\n"
    )


def _mfma_warp_mma(dtype: DType, mt: int, nt: int) -> str:
    """``wino_warp_mma`` on gfx942: one k16 step as 4 MFMAs per (tile pair, j, parity); lane
    (g, t) loads its A row and B column (16 k values, 32 bytes each) straight from the tiles."""
    return (
        _mfma_prelude(dtype)
        + f"{HipRenderer.fn} void wino_warp_mma(float* d, const unsigned short* a, int lda,"
        " const unsigned short* b, int ldb, unsigned lane)\n{\n"
        + _mfma_pairs(
            mt,
            nt,
            "    __builtin_memcpy(af, a + r * lda, 32);\n",
            "        __builtin_memcpy(bf, b + n * ldb, 32);\n",
            4,
        )
    )


def _mfma_warp_mma32(dtype: DType, mt: int, nt: int) -> str:
    """``wino_warp_mma32`` on gfx942: one 32-channel step as 8 MFMAs per (tile pair, j,
    parity), k running over U's channels c (contiguous in U's row n, zero past rows / cols)
    and A's columns ``wino_kcol(c)`` (the column that pairs with channel c)."""
    return (
        _mfma_prelude(dtype)
        + f"{HipRenderer.fn} void wino_warp_mma32(float* d, const unsigned short* a, int lda,"
        " int c0, const unsigned short* u, int ldu, int rows, int cols, unsigned lane)\n{\n"
        + _mfma_pairs(
            mt,
            nt,
            "    unsigned short av[32];\n"
            "    for (int c = 0; c < 32; ++c) av[c] = a[wino_vidx(r, c0 + wino_kcol(c), lda)];\n"
            "    __builtin_memcpy(af, av, 64);\n",
            "        unsigned short bv[32];\n"
            "        for (int c = 0; c < 32; ++c)\n"
            "          bv[c] = n < rows && c < cols ? u[n * ldu + c] : (unsigned short)0;\n"
            "        __builtin_memcpy(bf, bv, 64);\n",
            8,
        )
    )


def _lane_sums(nt: int, kp: int, a: str, b: str, dst: str, indent: str) -> str:
    """The scalar MMA form's loops over a lane's accumulators of one 16-row tile: per 8-column
    tile j < ``nt`` and fragment element e, row r = 16 i + g + 8 (e / 2) and column c = 8 j +
    2 t + e % 2 (mma.sync's ownership), ``dst`` += the sum over k < ``kp`` of ``a`` times
    ``b`` (C expressions in r, c and k)."""
    body = (
        f"for (int j = 0; j < {nt}; ++j)\n"
        "  for (int e = 0; e < 4; ++e) {\n"
        "    const int r = 16 * i + (int)g + 8 * (e >> 1);\n"
        "    const int c = 8 * j + 2 * (int)t + (e & 1);\n"
        "    float s = 0.0f;\n"
        f"    for (int k = 0; k < {kp}; ++k) s += {a} * {b};\n"
        f"    {dst} += s;\n"
        "  }\n"
    )
    return "".join(f"  {indent}{line}\n" for line in body.splitlines())


def _mma_sync(
    kind: str, nt: int, a: str, b0: str, b1: str, indent: str, tile: str | None = None
) -> str:
    """One m16n8k16 mma.sync statement: accumulator tile (i, j) of d (``nt`` tiles a row; or
    the tile index expression ``tile``), A fragment registers ``a``[0..3], B fragment
    registers ``b0`` and ``b1``."""
    tile = tile or f"(i * {nt} + j)"
    d = [f"d[4 * {tile}{f' + {e}' if e else ''}]" for e in range(4)]
    return (
        f'{indent}asm("mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32 "\n'
        f'{indent}    "{{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, {{%8, %9}}, {{%0, %1, %2, %3}};"\n'
        f'{indent}    : "+f"({d[0]}), "+f"({d[1]}), "+f"({d[2]}), "+f"({d[3]})\n'
        f'{indent}    : "r"({a}[0]), "r"({a}[1]), "r"({a}[2]), "r"({a}[3]),'
        f' "r"({b0}), "r"({b1}));\n'
    )
