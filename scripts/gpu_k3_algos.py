"""K3: cuBLASLt's first heuristic algorithm (what wino.runtime.cublas runs) against the best of
its top 16, per public 3x3 layer's default-plan GEMM shape, each timed alone (CUDA events, the
median of 5 batches of 30). Run on a GPU machine from the repository root, after
`doit compile:cuda` (or with WINO_BUILD naming a cuda cache that holds the default picks):

    python3 scripts/gpu_k3_algos.py [fp16|bf16]
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import cupy
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from wino.problem import read_miopen_file  # noqa: E402
from wino.refusals import Refused  # noqa: E402
from wino.runtime import dispatch  # noqa: E402
from wino.runtime.cublas import _ITEMSIZE, WORKSPACE_BYTES, _set, bindings  # noqa: E402
from wino.runtime.plan import GemmStep  # noqa: E402

CASES = Path(__file__).resolve().parents[1] / "cases" / "public.txt"
COUNT = 16


def top_algorithms(gemm, matmul):
    """(results, found): up to COUNT heuristic results for the prepared matmul's shape."""
    lt = bindings()
    pref = lt.matmul_preference_create()
    attrs = lt.MatmulPreferenceAttribute
    aligned = (
        attrs.MIN_ALIGNMENT_A_BYTES,
        attrs.MIN_ALIGNMENT_B_BYTES,
        attrs.MIN_ALIGNMENT_C_BYTES,
        attrs.MIN_ALIGNMENT_D_BYTES,
    )
    values = [(attrs.MAX_WORKSPACE_BYTES, WORKSPACE_BYTES)] + [(a, matmul.align) for a in aligned]
    _set(lt.matmul_preference_set_attribute, lt.get_matmul_preference_attribute_dtype, pref, values)
    results = lt.MatmulHeuristicResult(COUNT)
    found = np.zeros(1, dtype=np.int32)
    m = matmul
    lt.matmul_algo_get_heuristic(
        gemm.handle, m.desc, m.a, m.b, m.c, m.c, pref, COUNT, results.ptr, found.ctypes.data
    )
    lt.matmul_preference_destroy(pref)
    return results, int(found[0])


def operand(elements: int, dtype: int):
    return cupy.zeros(elements * _ITEMSIZE[dtype] + 256, dtype=cupy.uint8)


def time_us(gemm, m, algo: int, a, b, c, reps: int = 30) -> float:
    lt = bindings()

    def run():
        lt.matmul(
            gemm.handle, m.desc, gemm.alpha, a.data.ptr, m.a, b.data.ptr, m.b, gemm.beta,
            c.data.ptr, m.c, c.data.ptr, m.c, algo, gemm.workspace_at, WORKSPACE_BYTES, 0,
        )  # fmt: skip

    for _ in range(3):
        run()
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    samples = []
    for _ in range(5):
        start.record()
        for _ in range(reps):
            run()
        end.record()
        end.synchronize()
        samples.append(cupy.cuda.get_elapsed_time(start, end) * 1e3 / reps)
    return sorted(samples)[2]


def shape_line(p, gemm, matmul) -> str:
    s = matmul.shape
    a = operand(max(s.stride_a * s.batch, s.lda * max(s.m, s.k)), s.atype)
    b = operand(max(s.stride_b * s.batch, s.ldb * max(s.n, s.k)), s.btype)
    c = operand(max(s.stride_c * s.batch, s.ldc * s.n), s.ctype)
    results, found = top_algorithms(gemm, matmul)
    item = bindings().matmul_heuristic_result_dtype.itemsize
    times = [time_us(gemm, matmul, results.ptr + i * item, a, b, c) for i in range(found)]
    best = min(times)
    return (
        f"{p.dtype.short} N{p.N} C{p.C} {p.H}x{p.W} K{p.K} | m{s.m} n{s.n} k{s.k} "
        f"batch{s.batch} | first {times[0]:.1f} us | best {best:.1f} us "
        f"(#{times.index(best)} of {found}) | x{times[0] / best:.2f} | "
        + " ".join(f"{t:.1f}" for t in times)
    )


def main() -> None:
    dtype = sys.argv[1] if len(sys.argv) > 1 else "fp16"
    for problem in read_miopen_file(str(CASES)):
        p = dataclasses.replace(problem, dtype=dtype)
        if p.C < 64:
            continue
        try:
            plan = dispatch(p, target="cuda")
        except Refused as err:
            print(f"{p.label()}: refused ({err.rule})")
            continue
        gemm = plan.backend().gemm_handle()
        gemm._prepared.clear()
        for step in plan.steps:
            if isinstance(step, GemmStep):  # prepare its matmul as a run would
                plan.backend().prepare_gemm(plan, step)
        for matmul in gemm._prepared.values():
            print(shape_line(p, gemm, matmul), flush=True)


if __name__ == "__main__":
    main()
