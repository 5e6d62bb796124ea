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
from ..vocab import DType, Target


class Renderer:
    """The target's dialect (class attributes, set by subclasses) and the per-render state."""

    target = Target.C
    fn = "static inline"  # qualifier of helper functions
    restrict = "restrict"
    fabs = "__builtin_fabsf"
    fmax = "__builtin_fmaxf"
    unroll = ""  # pragma before fixed-count loops
    shared_qualifier = ""
    barrier_call = ""
    kernel_head = ""  # GPU: the qualifiers before a kernel's name ({block}: the block size)
    thread_ids = ""  # GPU: bx, by and tid from the target's builtins

    def __init__(self, baked: dict[str, int] | None = None):
        self.baked = baked  # a problem's kernargs baked in as constants (the JIT route)
        self.block = 0

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

    # File and kernel structure --------------------------------------------------------------
    def prelude(self) -> str:
        return ""

    def args_init(self) -> str:
        """Initialiser of the local kernarg copy A: the passed struct, or baked constants."""
        if self.baked is None:
            return self.args_source()
        values = ", ".join(
            f"{int(v)}" + ("u" if kernarg_ctype(k) == "unsigned" else "")
            for k, v in self.baked.items()
        )
        return "{" + values + "}"

    def args_source(self) -> str:
        return "A_in"

    def kernel_begin(self, name: str, params: list[tuple[str, str]], block: int) -> str:
        """A GPU kernel's head: the struct by value, then the buffers; the thread ids."""
        self.block = block
        sig = ", ".join(f"{ctype} {self.restrict} {n}" for ctype, n in params)
        head = self.kernel_head.format(block=block)
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

    def barrier(self) -> str:
        return "}\n  " + self.barrier_call + "\n  {"

    def kernel_end(self, name: str, params: list[tuple[str, str]]) -> str:
        return "}\n}"


class CRenderer(Renderer):
    """Host C11 + OpenMP: workgroup-loop emulation of the kernel text."""

    target = Target.C
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
            + self.CLONES
        )

    def args_source(self) -> str:
        return "*A_in"

    def _signature(self, params: list[tuple[str, str]]) -> str:
        return ", ".join(
            f"{ctype} {self.restrict} {name}" if "*" in ctype else f"{ctype} {name}"
            for ctype, name in params
        )

    def kernel_begin(self, name: str, params: list[tuple[str, str]], block: int) -> str:
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
    unroll = "#pragma unroll"
    shared_qualifier = "__shared__ "
    barrier_call = "__syncthreads();"
    kernel_head = 'extern "C" __global__ void __launch_bounds__({block})\n'
    thread_ids = "bx = blockIdx.x, by = blockIdx.y, tid = threadIdx.x"

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

    def prelude(self) -> str:
        return "#include <cuda_fp16.h>\n"


class HipRenderer(Renderer):
    """HIP for clang's device-only mode without ROCm headers (-nogpulib -nogpuinc)."""

    target = Target.HIP
    fn = "static __attribute__((device, always_inline, unused)) inline"
    restrict = "__restrict__"
    unroll = "#pragma unroll"
    shared_qualifier = "__attribute__((shared)) "
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


RENDERERS: dict[Target, type[Renderer]] = {
    Target.C: CRenderer,
    Target.CUDA: CudaRenderer,
    Target.HIP: HipRenderer,
}
