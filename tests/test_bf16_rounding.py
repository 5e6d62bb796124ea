"""bf16 rounding of the kernels (the host and CUDA builds of the real K1): fp32 -> bf16 is round to
nearest, ties to even (not truncation), NaN stays a NaN, Inf stays Inf. The filter values are
chosen so that the transform is exact in fp32 and the store is the only rounding: then every U
element must equal ml_dtypes' correctly rounded bf16 of the exact value, bit for bit."""

from __future__ import annotations

import shutil
import subprocess
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from tests import host_cache
from wino.problem import Problem
from wino.runtime import dispatch
from wino.runtime.registry import cuda_available
from wino.specs import RtFilterSpec, RtInputSpec, RtOutputSpec
from wino.vocab import DType, Stage, Target, Tile
from wino.winograd import matrices

TILE = Tile(2, 2)
BF16 = DType.BF16
SPECS = {
    Stage.FILTER: RtFilterSpec(TILE, BF16, BF16, 1, 256, 1),
    Stage.INPUT: RtInputSpec(TILE, BF16, BF16, 1, 256, prescale="none"),
    Stage.OUTPUT: RtOutputSpec(TILE, BF16, DType.FP32, 1, 256),
}
K, C = 64, 64


_GPU = [
    pytest.mark.gpu,
    pytest.mark.skipif(not cuda_available(), reason="needs CuPy and a CUDA device"),
    pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc to build the cubins"),
]


@pytest.fixture(scope="module", params=["c", pytest.param("cuda", marks=_GPU)])
def plan(request, tmp_path_factory):
    """The host build (wino_f32_to_bf16's integer rounding) and the CUDA one (the hardware
    conversion, CudaRenderer.from_float)."""
    root = tmp_path_factory.mktemp(f"bf16-{request.param}")
    host_cache.build(SPECS.values(), root, target=Target(request.param))
    problem = Problem(N=1, C=C, H=4, W=4, K=K, dtype="bf16")
    return dispatch(problem, target=request.param, cache_root=root, specs=SPECS)


def _filter_transform(plan, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(U, fs) of K1 over ``w`` as numpy arrays, on the plan's target."""
    if plan.target is Target.C:
        return plan.transform_filter(w)
    import cupy

    U, fs = (cupy.asnumpy(a) for a in plan.transform_filter(cupy.asarray(w)))
    return U.view(ml_dtypes.bfloat16), fs  # CuPy has no bf16: U comes back as its raw bits


def _exact_u(w: np.ndarray, fs: np.ndarray) -> np.ndarray:
    """s_k * (G g Gt) in float64 (exact here), as [bins][K][C]."""
    _, g, _ = matrices(2)
    G = np.array([[float(Fraction(v)) for v in row] for row in g])
    u = np.einsum("ir,krsc,js->ijkc", G, w.astype(np.float64), G)
    return (u * fs.astype(np.float64)[None, None, :, None]).reshape(16, K, C)


def _nonzero(a: np.ndarray) -> np.ndarray:
    """0xFFFF where a is not zero, 0x7FFF where it is (the sign bit of a zero ignored)."""
    return np.where(_bits(a) & 0x7FFF, 0xFFFF, 0x7FFF).astype(np.uint16)


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint16)


def test_store_rounds_to_nearest_even(plan):
    rng = np.random.default_rng(5)
    # multiples of 2^-8 below 1: exactly representable in bf16 (8 significant bits)
    w = (rng.integers(-255, 256, (K, 3, 3, C)) / 256.0).astype(ml_dtypes.bfloat16)
    U, fs = _filter_transform(plan, w)
    exact = _exact_u(w, fs)
    expected = exact.astype(ml_dtypes.bfloat16)  # correctly rounded, ties to even
    # bit for bit, but for the sign of a zero (the fp32 sums may make -0)
    np.testing.assert_array_equal(_bits(U) & _nonzero(U), _bits(expected) & _nonzero(U))
    # the data holds ties (exactly half an ulp) and they went to the even neighbour
    truncated = exact.astype(np.float32).view(np.uint32) >> 16
    low = exact.astype(np.float32).view(np.uint32) & 0xFFFF
    ties = low == 0x8000
    assert ties.sum() > 100
    assert not (_bits(U)[ties] & 1).any()  # even
    assert (_bits(U)[ties] != truncated[ties]).any()  # some ties rounded up, not truncated
    above = low > 0x8000
    assert (_bits(U)[above] == truncated[above] + 1).all()


def test_nan_and_inf_survive_the_store(plan):
    rng = np.random.default_rng(6)
    w = (rng.integers(-255, 256, (K, 3, 3, C)) / 256.0).astype(ml_dtypes.bfloat16)
    w[0, 0, 0, 0] = np.nan
    w[1, 0, 0, 0] = np.inf
    w[2, 1, 1, 3] = -np.inf
    U, fs = _filter_transform(plan, w)
    u = U.astype(np.float32)
    _, g, _ = matrices(2)
    G = np.array([[float(Fraction(v)) for v in row] for row in g])
    reach = np.einsum("ir,js->ijrs", G != 0, G != 0).reshape(16, 3, 3)
    nan_bins = reach[:, 0, 0]
    assert np.isnan(u[nan_bins, 0, 0]).all() and np.isfinite(u[~nan_bins, 0, 0]).all()
    assert np.isinf(u[nan_bins, 1, 0]).all() and np.isfinite(u[~nan_bins, 1, 0]).all()
    assert np.isinf(u[reach[:, 1, 1], 2, 3]).all()
    assert u[0, 1, 0] == np.inf  # bin (0, 0) is g[0][0] alone: +inf
    assert np.isfinite(u[:, 3:, :]).all()  # other filters untouched


# The host's vector conversions (CRenderer.widen16 / narrow16, in vector_io's loads and stores)
# against the scalar wino_bf16_to_f32 / wino_f32_to_bf16 of the same rendered source, compiled
# with the c target's flags: as they are (the portable body) and for x86-64-v3 (the body the
# kernels' target_clones pick on an AVX2 host).
_HARNESS = """
void wino_test_widen(const unsigned short* h, float* f, long n)
{ for (long i = 0; i < n; i += VEC) wino_ld_bf16_vVEC(h + i, f + i); }
void wino_test_narrow(const float* f, unsigned short* h, long n)
{ for (long i = 0; i < n; i += VEC) wino_st_bf16_vVEC(h + i, f + i); }
void wino_test_scalar_widen(const unsigned short* h, float* f, long n)
{ for (long i = 0; i < n; ++i) f[i] = wino_bf16_to_f32(h[i]); }
void wino_test_scalar_narrow(const float* f, unsigned short* h, long n)
{ for (long i = 0; i < n; ++i) h[i] = wino_f32_to_bf16(f[i]); }
"""
_ISAS = {"portable": [], "x86-64-v3": ["-march=x86-64-v3"]}


def _host_has_v3() -> bool:
    try:
        flags = set(open("/proc/cpuinfo", encoding="ascii").read().split())
    except OSError:
        return False
    return {"avx2", "fma", "f16c", "bmi2", "movbe"} <= flags


def _adversarial_f32() -> np.ndarray:
    """Every bf16 pattern as the high half, each with low halves that decide the rounding:
    0, 1, just below / at / just above the tie, 0xffff (carries into the exponent: the
    largest finite values round to inf), and random ones. Covers +-0, subnormals, inf, and
    quiet and signalling NaNs (whose low bits only the NaN rule must not round away)."""
    high = np.arange(1 << 16, dtype=np.uint32) << 16
    lows = [0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF]
    rng = np.random.default_rng(7)
    parts = [high | low for low in lows] + [high | rng.integers(0, 1 << 16, high.size, np.uint32)]
    return np.concatenate(parts).view(np.float32)


@pytest.fixture(scope="module", params=[2, 4, 8], ids=lambda v: f"v{v}")
def conversions(request, tmp_path_factory):
    """The harness of each ISA (ctypes), compiled with the source of a bf16 -> bf16 K2 at the
    vector (its loads and stores are the bf16 wino_ld / wino_st of that vector)."""
    import ctypes

    from wino.builder import toolchains
    from wino.codegen.render import render
    from wino.vocab import Target

    chains = toolchains.resolve(Target.C).toolchains
    if not chains:
        pytest.skip("no C compiler for the c target")
    tc, vec = chains[0], request.param
    source = render(RtInputSpec(TILE, BF16, BF16, vec, 256, prescale="none"), "c")
    assert "__builtin_convertvector" in source  # the vector form, not the per-lane one
    folder = tmp_path_factory.mktemp(f"bf16conv_v{vec}")
    src = folder / "conv.c"
    src.write_text(source + _HARNESS.replace("VEC", str(vec)), encoding="utf-8")
    libs = {}
    for isa, extra in _ISAS.items():
        if extra and not _host_has_v3():
            continue
        out = folder / f"conv_{isa}.so"
        subprocess.run([tc.path, *tc.flags, *extra, "-o", str(out), str(src)], check=True)
        libs[isa] = ctypes.CDLL(str(out))
    return libs


def _call(lib, fn: str, src: np.ndarray, dtype) -> np.ndarray:
    import ctypes

    out = np.zeros(src.size, dtype)
    getattr(lib, fn)(
        src.ctypes.data_as(ctypes.c_void_p), out.ctypes.data_as(ctypes.c_void_p), src.size
    )
    return out


def test_vector_widening_matches_the_scalar_one(conversions):
    h = np.arange(1 << 16, dtype=np.uint16)  # every bf16 pattern
    expected = h.astype(np.uint32) << 16
    for isa, lib in conversions.items():
        scalar = _call(lib, "wino_test_scalar_widen", h, np.float32).view(np.uint32)
        vector = _call(lib, "wino_test_widen", h, np.float32).view(np.uint32)
        np.testing.assert_array_equal(scalar, expected, err_msg=isa)
        np.testing.assert_array_equal(vector, scalar, err_msg=isa)


def test_vector_narrowing_matches_the_scalar_one(conversions):
    f = _adversarial_f32()
    u = f.view(np.uint32)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    with np.errstate(invalid="ignore"):  # the NaNs' cast; their bits come from the rule below
        rounded = _bits(f.astype(ml_dtypes.bfloat16))
    # an independent reference: ml_dtypes' round to nearest even; a NaN keeps its top bits, quiet
    expected = np.where(nan, (u >> 16) | 0x40, rounded)
    assert (rounded[~nan] != (u >> 16)[~nan]).any()  # some round up, not truncated
    assert "portable" in conversions
    for isa, lib in conversions.items():
        scalar = _call(lib, "wino_test_scalar_narrow", f, np.uint16)
        vector = _call(lib, "wino_test_narrow", f, np.uint16)
        np.testing.assert_array_equal(scalar, expected.astype(np.uint16), err_msg=isa)
        np.testing.assert_array_equal(vector, scalar, err_msg=isa)
