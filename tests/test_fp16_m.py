"""M stored in fp16 (K4's accdtype fp16, K3 accumulating in fp32): the range bound the
fp16_m_range rule rests on (wino.winograd.m_growth) is attained and never exceeded, the default
pick takes fp16 M for 16-bit io exactly where the rule admits it, the refusals carry their rule
ids, and on the host adversarial data (every channel at its tile's max, signs aligned with the
largest bin, C/G at the rule's limit) fills M up to fp16's range without passing it, while the
output stays within the claimed bound with poisoned buffers."""

from __future__ import annotations

import math
from dataclasses import replace
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from tests import host_cache
from tests import runtime_fixtures as rf
from wino.launch import stage_launch
from wino.pick import default_stage_specs
from wino.problem import Problem
from wino.refusals import Refused, check_spec, m_per_channel
from wino.runtime import conv2d_reference, dispatch, relative_error
from wino.runtime.verify import bound_for
from wino.specs import RtOutputSpec
from wino.vocab import TILES, DType, Prescale, Stage, Target, Tile
from wino.winograd import POINTS, ROW_GROWTH, m_growth, matrices

FP16_MAX = 65504


def _bin_product(m: int, i: int, d: list[Fraction], g: list[Fraction]) -> Fraction:
    """(Bt d)[i] * (G g)[i] in one dimension."""
    _, gm, bt = matrices(m)
    return sum(b * x for b, x in zip(bt[i], d, strict=True)) * sum(
        c * x for c, x in zip(gm[i], g, strict=True)
    )


@pytest.mark.parametrize("m", (2, 4, 6))
def test_m_growth_is_attained_by_aligned_signs_and_never_exceeded(m):
    """Per dimension, |(Bt d)[i] (G g)[i]| over d, g in [-1, 1] peaks at the sign patterns of
    the bin's rows, where it equals the growth m_growth takes the square root of."""
    _, gm, bt = matrices(m)
    n = m + 2
    peak = max(
        _bin_product(
            m,
            i,
            [Fraction(1 if b >= 0 else -1) for b in bt[i]],
            [Fraction(1 if c >= 0 else -1) for c in gm[i]],
        )
        for i in range(n)
    )
    assert peak * peak == m_growth(m, m)
    rng = np.random.default_rng(m)
    for _ in range(200):
        d = [Fraction(float(v)) for v in rng.uniform(-1, 1, n)]
        g = [Fraction(float(v)) for v in rng.uniform(-1, 1, 3)]
        assert all(abs(_bin_product(m, i, d, g)) <= peak for i in range(n))


def test_m_growth_values():
    assert m_growth(2, 2) == 9 and m_growth(4, 4) == 100
    assert m_growth(6, 6) == Fraction(3136, 9) and m_growth(6, 4) == Fraction(560, 3)
    assert set(ROW_GROWTH) == set(POINTS)  # the test above derives each from the matrices
    with pytest.raises(ValueError, match="no interpolation points"):
        m_growth(4, 8)


def _limit(tile: Tile) -> int:
    """The largest C/G the fp16_m_range rule admits (the same for every io dtype)."""
    return math.floor(FP16_MAX / m_per_channel(tile))


def _problem(C: int, dtype: str, **kw) -> Problem:
    base = dict(N=1, H=8, W=8, K=8, pad_h=1, pad_w=1)
    return Problem(**{**base, **kw}, C=C, dtype=dtype)


@pytest.mark.parametrize("tile", (Tile(2, 2), Tile(4, 4), Tile(6, 4), Tile(6, 6)), ids=str)
@pytest.mark.parametrize("dtype", (DType.FP16, DType.BF16))
def test_default_pick_takes_fp16_m_up_to_the_rule_limit(tile, dtype):
    limit = _limit(tile)
    at, past = _problem(limit, dtype.short), _problem(limit + 1, dtype.short)
    assert default_stage_specs(at, tile, target=Target.CUDA)[Stage.OUTPUT].accdtype is DType.FP16
    assert default_stage_specs(past, tile, target=Target.CUDA)[Stage.OUTPUT].accdtype is DType.FP32


def test_fp16_m_limits_per_tile():
    """F4x4 serves C/G up to 653 with fp16 M (the public 512-channel layers), for bf16 io too:
    the scales keep every finite bf16 maximum (subnormal or near the largest) below 1."""
    assert _limit(Tile(4, 4)) == 653
    assert _limit(Tile(2, 2)) == 7264


@pytest.mark.parametrize("tile", TILES, ids=str)
def test_few_channels_keep_fp32_m(tile):
    """Below C/G 16 an output sums too few products for fp16 M's rounding to average out."""
    assert (
        default_stage_specs(_problem(16, "fp16"), tile, target=Target.CUDA)[Stage.OUTPUT].accdtype
        is DType.FP16
    )
    assert (
        default_stage_specs(_problem(12, "fp16"), tile, target=Target.CUDA)[Stage.OUTPUT].accdtype
        is DType.FP32
    )
    assert (
        default_stage_specs(_problem(3, "bf16"), tile, target=Target.CUDA)[Stage.OUTPUT].accdtype
        is DType.FP32
    )


def _gpu_pick(problem):
    """The GPUs' default pick (fp16 storage: fp16 M where the rules allow), run on the host."""
    return default_stage_specs(problem, F4, target=Target.CUDA)


@pytest.mark.parametrize("tile", TILES, ids=str)
def test_fp32_io_and_bf16_storage_keep_fp32_m(tile):
    """fp32 io keeps fp32 M (m_dtype_unsupported); bf16 storage too (fp16 M only after fp16 V:
    pick.m_storable, since cuBLAS writes no fp16 from bf16 operands)."""
    assert (
        default_stage_specs(_problem(64, "fp32"), tile, target=Target.CUDA)[Stage.OUTPUT].accdtype
        is DType.FP32
    )
    specs = default_stage_specs(_problem(64, "bf16"), tile, xdtype=DType.BF16, target=Target.CUDA)
    assert specs[Stage.INPUT].xdtype is DType.BF16
    assert specs[Stage.OUTPUT].accdtype is DType.FP32


def test_fp16_m_for_fp32_io_is_a_spec_refusal():
    with pytest.raises(Refused) as info:
        check_spec(RtOutputSpec(io=DType.FP32, accdtype=DType.FP16))
    assert info.value.rule == "m_dtype_unsupported"
    with pytest.raises(Refused) as info:
        check_spec(RtOutputSpec(io=DType.FP16, accdtype=DType.BF16))
    assert info.value.rule == "m_dtype_unsupported"


# Host runs -------------------------------------------------------------------------------------
F4 = Tile(4, 4)
AT_LIMIT = _problem(640, "fp16")  # C/G 640 <= 653
PAST_LIMIT = _problem(660, "fp16")
SUBNORMAL = _problem(640, "bf16")  # C/G 640 <= 653


def _fp16_m_specs(problem: Problem) -> dict:
    specs = default_stage_specs(problem, F4, target=Target.CUDA)
    specs[Stage.OUTPUT] = replace(specs[Stage.OUTPUT], accdtype=DType.FP16)
    return specs


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("fp16-m")
    specs = set()
    for p in (AT_LIMIT, PAST_LIMIT, SUBNORMAL, replace(SUBNORMAL, dtype=DType.FP16)):
        specs |= set(default_stage_specs(p, F4, target=Target.CUDA).values())
        specs |= set(_fp16_m_specs(p).values())
        fp32 = default_stage_specs(p, F4, target=Target.CUDA)
        specs.add(replace(fp32[Stage.OUTPUT], accdtype=DType.FP32))
    host_cache.build(specs, root)
    return root


def _aligned(problem: Problem, value: float, dtype) -> tuple[np.ndarray, np.ndarray]:
    """x = value * f(h) f(w) on every channel, f(i) = -1 where i % 4 == 2: every interior F4x4
    window (rows 4t-1 .. 4t+4) carries the signs of Bt's last row (0, 4, 0, -5, 0, 1), so bin
    (5, 5) of V reaches 100 x the scaled max; w is `value` at tap (2, 2) only (G's last row
    (0, 0, 1)), so every channel adds 100 x the scaled maxima to M's bin (5, 5)."""
    p = problem
    f = np.where(np.arange(max(p.H, p.W)) % 4 == 2, -1.0, 1.0)
    x = np.broadcast_to((f[: p.H, None] * f[None, : p.W])[None, :, :, None], (p.N, p.H, p.W, p.C))
    w = np.zeros((p.K, 3, 3, p.Cg))
    w[:, 2, 2, :] = 1.0
    return (x * value).astype(dtype), (w * value).astype(dtype)


def _run(plan, x, w):
    """y (float64) and the workspace views (float64) of one run over poisoned buffers."""
    y, workspace = rf.poisoned(plan)
    plan.run(x, w, y=y, workspace=workspace)
    views = plan.backend().workspace(plan, workspace, plan.batch_split)
    return y.astype(np.float64), {k: v.astype(np.float64) for k, v in views.items()}


def _moved_by_m_rounding(ws: dict, problem: Problem) -> np.ndarray:
    """Per output (NHWK), sum over bins of |At[r][i]| |At[s][j]| |M[i][j]| / (s_p s_k) (F4x4,
    groups 1): how far one relative rounding of every M element can move it, over 2^-11."""
    at = np.abs(np.array(matrices(4)[0], dtype=np.float64))  # 4 x 6
    p = problem
    th, tw = -(-p.Ho // 4), -(-p.Wo // 4)
    m = np.abs(ws["M"]).reshape(6, 6, p.N, th, tw, p.K)
    m = m / ws["ts"].reshape(1, 1, p.N, th, tw, 1) / ws["fs"].reshape(1, 1, 1, 1, 1, p.K)
    out = np.einsum("ri,sj,ijnabk->narbsk", at, at, m).reshape(p.N, th * 4, tw * 4, p.K)
    return out[:, : p.Ho, : p.Wo]


def _fp16_m_adds_one_rounding(root, problem: Problem, plan, x, w):
    """Run ``plan`` (fp16 M) and the same specs with fp32 M; every output of the first is
    within one fp16 rounding (2^-11 relative) of every M element through |At| . |A|, plus both
    outputs' own roundings, of the second. Returns (y16, ws16, y32)."""
    y16, ws16 = _run(plan, x, w)
    specs = dict(plan.specs)
    specs[Stage.OUTPUT] = replace(specs[Stage.OUTPUT], accdtype=DType.FP32)
    fp32 = dispatch(problem, target="c", tile=F4, cache_root=root, specs=specs)
    y32, ws32 = _run(fp32, x, w)
    out_eps = 2.0**-8 if problem.dtype is DType.BF16 else 2.0**-11
    allowed = 2.0**-11 * _moved_by_m_rounding(ws32, problem) + out_eps * (np.abs(y16) + np.abs(y32))
    assert (np.abs(y16 - y32) <= allowed).all()
    assert np.abs(y16 - y32).max() > 0  # M's rounding shows (the check is not vacuous)
    return y16, ws16, y32


def test_adversarial_data_fills_fp16_m_and_adds_one_rounding_per_bin(root):
    """Aligned signs at the scaled max, C/G 640 (the rule admits 653): M reaches 0.98 x 65504
    in fp16 and stays finite, and fp16 M adds at most one rounding per bin (the bound of
    docs/BENCHMARKS.md)."""
    top = float(np.nextafter(np.float16(1), np.float16(0)))  # scaled max 1 - 2^-11
    x, w = _aligned(AT_LIMIT, top, np.float16)
    plan = dispatch(AT_LIMIT, target="c", tile=F4, cache_root=root, specs=_gpu_pick(AT_LIMIT))
    assert plan.accdtype is DType.FP16 and plan.prescale is not Prescale.NONE
    y16, ws16, _ = _fp16_m_adds_one_rounding(root, AT_LIMIT, plan, x, w)
    assert np.isfinite(ws16["M"]).all() and np.isfinite(y16).all()
    assert np.abs(ws16["M"]).max() > 0.95 * FP16_MAX  # the data reached the range it tests


def test_past_the_limit_fp16_m_is_refused_and_the_pick_keeps_fp32(root):
    with pytest.raises(Refused) as info:
        dispatch(PAST_LIMIT, target="c", tile=F4, cache_root=root, specs=_fp16_m_specs(PAST_LIMIT))
    assert info.value.rule == "fp16_m_range"
    assert "C/G = 660" in info.value.message and "accdtype fp32" in info.value.message
    plan = dispatch(PAST_LIMIT, target="c", tile=F4, cache_root=root, specs=_gpu_pick(PAST_LIMIT))
    assert plan.accdtype is DType.FP32
    top = float(np.nextafter(np.float16(1), np.float16(0)))
    x, w = _aligned(PAST_LIMIT, top, np.float16)
    y, ws = _run(plan, x, w)
    assert np.abs(ws["M"]).max() > FP16_MAX  # fp16 M would have overflowed here
    ref = conv2d_reference(x, w, (1, 1))
    assert relative_error(y, ref) <= bound_for(F4, DType.FP16)


def test_bf16_subnormal_tiles_stay_inside_fp16_m(root):
    """An all-subnormal bf16 input is scaled by 2^126 to just below 1 (the clamped 2^127 left it
    just below 2, which would pass fp16 here): M reaches about 100 x C/G = 0.98 x 65504, and
    nothing is NaN or inf."""
    plan = dispatch(SUBNORMAL, target="c", tile=F4, cache_root=root, specs=_gpu_pick(SUBNORMAL))
    assert plan.accdtype is DType.FP16
    tiny = float(np.finfo(np.float32).tiny) * (1 - 2.0**-7)  # the largest bf16 subnormal
    x, _ = _aligned(SUBNORMAL, tiny, ml_dtypes.bfloat16)
    _, w = _aligned(SUBNORMAL, 1 - 2.0**-8, ml_dtypes.bfloat16)
    y, ws = _run(plan, x, w)
    assert np.isfinite(ws["M"]).all() and np.isfinite(y).all()
    assert np.abs(ws["M"]).max() > 0.95 * FP16_MAX


def test_bf16_near_largest_tiles_stay_inside_fp16_m(root):
    """bf16 inputs at 1.5 x 2^127 (past 2^126) get the subnormal scale 2^-128, to 0.75 (the
    clamped 2^-126 left 3, and M would pass fp16 by 1.5x here); a filter at 2^-12 keeps y
    finite. M stays finite, and K4 puts the subnormal scale back exactly: y is bit for bit
    2^100 times the output of the same data 2^100 smaller (whose scales are normal)."""
    plan = dispatch(SUBNORMAL, target="c", tile=F4, cache_root=root, specs=_gpu_pick(SUBNORMAL))
    assert plan.accdtype is DType.FP16
    x, _ = _aligned(SUBNORMAL, 1.5 * 2.0**127, ml_dtypes.bfloat16)
    _, w = _aligned(SUBNORMAL, 2.0**-12, ml_dtypes.bfloat16)
    y, ws = _run(plan, x, w)
    assert (ws["ts"] == 2.0**-128).all()
    assert np.isfinite(ws["M"]).all() and np.isfinite(y).all()
    assert np.abs(ws["M"]).max() > 0.35 * FP16_MAX  # 100 x 640 x 0.75 x 0.5
    smaller = (x.astype(np.float64) * 2.0**-100).astype(ml_dtypes.bfloat16)
    y_smaller, ws_smaller = _run(plan, smaller, w)
    assert (ws_smaller["ts"] == 2.0**-28).all()
    np.testing.assert_array_equal(ws["M"], ws_smaller["M"])
    np.testing.assert_array_equal(y, y_smaller * 2.0**100)
    assert np.abs(y).max() > 2.0**124  # the output itself is near the top of the range


@pytest.mark.parametrize("dtype", ("fp16", "bf16"))
def test_fp16_m_on_normal_data_within_the_bound(root, dtype):
    """N(0,1) data at C 640: fp16 M within the claimed bound and one rounding per bin of fp32
    M's result."""
    problem = replace(SUBNORMAL, dtype=DType(dtype))
    x, w = rf.inputs(problem, np.random.default_rng(9))
    plan = dispatch(problem, target="c", tile=F4, cache_root=root, specs=_gpu_pick(problem))
    assert plan.accdtype is DType.FP16
    y16, _, _ = _fp16_m_adds_one_rounding(root, problem, plan, x, w)
    ref = conv2d_reference(x, w, (1, 1))
    assert relative_error(y16, ref) <= bound_for(F4, DType(dtype))


def test_fp16_m_without_tile_scales_is_refused():
    """bf16 storage takes no tile scale (V has bf16's range): fp16 M is refused at any C."""
    spec = RtOutputSpec(io=DType.BF16, accdtype=DType.FP16)
    problem = _problem(16, "bf16")
    stage_launch(spec, problem)  # with tile scales it fits
    with pytest.raises(Refused) as info:
        stage_launch(spec, problem, tile_scale=False)
    assert info.value.rule == "fp16_m_range" and "tile scales: 0" in info.value.message
