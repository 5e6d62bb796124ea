"""The host (c target) runtime end to end: every tile and dtype against the float64 reference,
within the bounds wino claims (verify.BOUNDS), with poisoned outputs and workspaces (every
output element and every workspace element the plan uses is written); dilation, groups, odd
extents, padding, odd and wide C, forced LDS / vec-1 / split-prescale / wide-fused binaries,
batch split, the filter transform reused, refusals and operand checks."""

from __future__ import annotations

import zlib
from dataclasses import replace

import numpy as np
import pytest

import wino
from tests import runtime_fixtures as rf
from wino.pick import default_stage_specs
from wino.problem import Problem
from wino.refusals import Refused
from wino.runtime import conv2d_reference, dispatch, relative_error
from wino.vocab import TILES, DType, K2Path, Prescale, Stage, Target, Tile


@pytest.fixture(scope="session")
def root(tmp_path_factory):
    return rf.host_cache(tmp_path_factory)


def _rng(text: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(text.encode()))


def _dispatch(case: rf.Case, root, **options):
    return dispatch(
        case.problem,
        target="c",
        tile=case.tile,
        cache_root=root,
        specs=case.dispatch_specs(),
        **options,
    )


def run_checked(case: rf.Case, root, **options):
    """Run the case on fresh N(0,1) inputs with y and the workspace poisoned; check that every
    output and every workspace element the plan uses was written. Returns (plan, y, error)."""
    plan = _dispatch(case, root, **options)
    p = plan.problem
    x, w = rf.inputs(p, _rng(case.id))
    y, workspace = rf.poisoned(plan)
    out = plan.run(x, w, y=y, workspace=workspace)
    assert out is y
    assert np.isfinite(y.astype(np.float32)).all(), (
        f"{np.count_nonzero(~np.isfinite(y.astype(np.float32)))} of {y.size} outputs unwritten"
    )
    if len(plan.chunks) == 1:
        unwritten = rf.unwritten(plan, workspace)
        assert set(unwritten) == rf.expected_buffers(plan)
        assert not any(unwritten.values()), f"unwritten workspace elements: {unwritten}"
    else:  # a later, smaller chunk reuses the front of the workspace with its own layout
        _assert_written_across_chunks(plan, x, w, y, workspace)
    ref = conv2d_reference(x, w, (p.pad_h, p.pad_w), (p.dil_h, p.dil_w), p.groups)
    return plan, y, relative_error(y, ref)


def _assert_written_across_chunks(plan, x, w, y, workspace) -> None:
    """Run again over 0x00 instead of 0xFF poison: a byte no chunk wrote keeps its poison and
    so differs between the runs (the kernels are deterministic and read no unwritten byte)."""
    y0 = np.zeros_like(y)
    workspace0 = np.zeros_like(workspace)
    plan.run(x, w, y=y0, workspace=workspace0)
    assert np.array_equal(y.view(np.uint8), y0.view(np.uint8))
    views = plan.backend().workspace(plan, workspace, plan.batch_split)
    views0 = plan.backend().workspace(plan, workspace0, plan.batch_split)
    assert set(views) == rf.expected_buffers(plan)
    for name, view in views.items():
        differ = np.count_nonzero(view.view(np.uint8) != views0[name].view(np.uint8))
        assert differ == 0, f"{name}: {differ} bytes no chunk wrote"


# Numerics: every tile x every dtype -------------------------------------------------------------
@pytest.mark.parametrize("case", rf.numerics_cases(), ids=lambda c: c.id)
def test_every_tile_and_dtype_within_bound(root, case):
    plan, _, err = run_checked(case, root)
    # the c target's pick stores fp32 for every io dtype; forced: fp16 or bf16 storage
    xdtype = {"": DType.FP32, "xfp16": DType.FP16, "xbf16": DType.BF16}[case.label]
    assert plan.xdtype is xdtype
    scaled = plan.specs[Stage.INPUT].prescale is not Prescale.NONE
    # every K2 scales its tiles but fp16 io stored in fp32 (fp32 holds every transformed fp16 tile)
    assert scaled != ((case.problem.dtype, xdtype) == (DType.FP16, DType.FP32))
    bound = rf.claimed_bound(case.tile, case.problem.dtype, xdtype)
    assert err <= bound, f"{case.id}: error {err:.3e} > {bound:.1e}"


def test_numerics_cover_every_tile_dtype_and_storage():
    seen = {(c.tile, c.problem.dtype, c.label) for c in rf.numerics_cases()}
    assert seen == {(t, d, "") for t in TILES for d in rf.DTYPES} | {
        (t, d, "xfp16") for t in TILES for d in (DType.FP16, DType.BF16)
    } | {(t, DType.BF16, "xbf16") for t in TILES}


# Shapes ----------------------------------------------------------------------------------------
SHAPES = rf.coverage_cases() + rf.extent_cases()


@pytest.mark.parametrize("case", SHAPES, ids=lambda c: c.id)
def test_shapes_within_bound(root, case):
    plan, _, err = run_checked(case, root)
    bound = rf.claimed_bound(plan.tile, case.problem.dtype, plan.xdtype)
    assert err <= bound, f"{case.id}: error {err:.3e} > {bound:.1e}"


def test_shape_cases_cover_the_issue():
    problems = [c.problem for c in SHAPES]
    assert {(p.dil_h, p.dil_w) for p in problems} >= {(2, 2), (3, 3), (2, 3), (3, 1), (1, 2)}
    assert {p.groups for p in problems} >= {2, 4}
    assert any(p.groups == p.C == p.K for p in problems)  # depthwise
    assert {p.pad_h for p in problems} >= {0, 1, 2, 3}
    assert any(p.pad_h != p.pad_w for p in problems)
    assert {p.C for p in problems} >= {3, 5, 6, 12}
    assert {p.H for p in problems} >= {1, 2, 3, 5, 7, 11, 13, 19, 23}
    assert {p.W for p in problems} >= {1, 2, 3, 6, 9, 17, 21, 23}
    cases = [(c.problem, c.tile) for c in SHAPES]
    assert any(p.Ho < t.mh or p.Wo < t.mw for p, t in cases)  # image smaller than the tile
    assert all(d in {p.dtype for p in problems} for d in rf.DTYPES)


# Wide C and the K2 mode the default pick chose -------------------------------------------------
@pytest.mark.parametrize("case", rf.wide_cases(), ids=lambda c: c.id)
def test_wide_c_within_bound(root, case):
    plan, _, err = run_checked(case, root)
    bound = rf.claimed_bound(plan.tile, case.problem.dtype, plan.xdtype)
    assert err <= bound, f"{case.id}: error {err:.3e} > {bound:.1e}"


@pytest.mark.parametrize(
    "c, tile, prescale, block, vec", rf.WIDE, ids=[f"C{c}-{t}" for c, t, *_ in rf.WIDE]
)
def test_wide_c_default_k2_mode(root, c, tile, prescale, block, vec):
    for dtype in rf.DTYPES:
        problem = rf.problem(dtype, C=c, H=3, W=4, K=8)
        plan = dispatch(problem, target="c", tile=tile, cache_root=root)
        k2 = plan.specs[Stage.INPUT]
        stages = [s.stage for s in plan.steps]
        # the cache's pick is the c grid's own (its wider windows: vec 8 where the GPUs'
        # register rules refuse it); the WIDE row is the GPUs' mode, checked on their pick
        assert k2 == default_stage_specs(problem, tile, target=Target.C)[Stage.INPUT]
        if dtype is DType.FP16:
            # the c target stores fp16 io as fp32, unscaled (fp32 holds every transformed fp16
            # tile); fp32 and bf16 keep the tile scale there (fp32's range needs it)
            assert (k2.xdtype, k2.prescale) == (DType.FP32, Prescale.NONE)
            assert Stage.PRESCALE not in stages
        if dtype is DType.BF16:
            # the host widens and narrows bf16 a whole vector at once (CRenderer.widen16): its
            # K2 mode is fp32's, vec 8 included (no c exclusion of bf16 vec 8 any more)
            fp32 = default_stage_specs(replace(problem, dtype=DType.FP32), tile, target=Target.C)
            assert k2 == fp32[Stage.INPUT].replace(io=DType.BF16)
            continue  # the GPUs store bf16 io as fp16: their pick is fp16's, checked there
        # the GPUs' pick (fp16 storage for fp16): the WIDE row's mode; the c suite runs it forced
        gpu = default_stage_specs(problem, tile, target=Target.CUDA)
        k2, stages = (
            gpu[Stage.INPUT],
            [Stage.PRESCALE, Stage.INPUT] if Stage.PRESCALE in gpu else [Stage.INPUT],
        )
        if k2.path is K2Path.LDS_ROWS:  # F2x2 / F4x4, C <= 512 in 16-byte units: all C staged
            assert tile in ("F2x2", "F4x4") and c <= 512 and c % 8 == 0
            assert k2.prescale is Prescale.FUSED and Stage.PRESCALE not in stages
            assert k2.lds_lanes * k2.vec >= c > k2.lds_lanes * k2.vec // 2
            continue
        assert (k2.prescale.value, k2.block, k2.vec, k2.path) == (
            prescale,
            block,
            vec,
            K2Path.REGISTER,
        )
        assert (Stage.PRESCALE in stages) == (prescale == "split")
        if prescale == "split":  # K2a runs before K2
            assert stages.index(Stage.PRESCALE) < stages.index(Stage.INPUT)


# Forced binaries -------------------------------------------------------------------------------
@pytest.mark.parametrize("case", rf.forced_cases(), ids=lambda c: c.id)
def test_forced_specs_within_bound(root, case):
    plan, _, err = run_checked(case, root)
    assert plan.source == "caller"
    assert [s.name for s in plan.steps if s.stage is not Stage.GEMM] == [
        s.name for s in case.forced
    ]
    bound = rf.claimed_bound(plan.tile, case.problem.dtype, plan.xdtype)
    assert err <= bound, f"{case.id}: error {err:.3e} > {bound:.1e}"


def test_forced_cases_cover_the_grid_variants():
    from wino.grid import in_grid

    forced = [s for c in rf.forced_cases() for s in c.forced]
    assert all(in_grid(s) for s in forced)
    k2s = [s for s in forced if s.stage is Stage.INPUT]
    assert set(rf.lds_specs()) <= set(k2s)  # every LDS spec of the grid
    assert any(s.vec == 1 and s.path is K2Path.REGISTER for s in k2s)
    assert any(s.prescale is Prescale.SPLIT and s.path is K2Path.REGISTER for s in k2s)
    assert {s.block for s in k2s if s.prescale is Prescale.FUSED} >= {256, 512, 1024}
    assert all(s.vec == 1 for c in rf.forced_cases() if c.label == "vec1" for s in c.forced)


# Batch split -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "n, split, chunks",
    [
        (5, 2, [(0, 2), (2, 2), (4, 1)]),
        (7, 3, [(0, 3), (3, 3), (6, 1)]),
    ],
)
def test_batch_split_matches_the_whole(root, n, split, chunks):
    case = next(c for c in rf.EXTRA if c.label == "split" and c.problem.N == n)
    plan, y_split, err = run_checked(case, root, batch_split=split)
    assert plan.chunks == chunks and plan.batch_split == split
    assert sorted(plan.chunk_steps) == sorted({c for _, c in chunks})
    whole = _dispatch(case, root, batch_split=n)
    assert whole.chunks == [(0, n)]
    x, w = rf.inputs(case.problem, _rng(case.id))
    y_whole = whole.run(x, w)
    rf.assert_split_matches(y_split, y_whole, case.tile, case.problem.dtype)
    assert err <= rf.claimed_bound(case.tile, case.problem.dtype, plan.xdtype)


# Filter transform reuse ------------------------------------------------------------------------
@pytest.mark.parametrize("index", range(3))
def test_transform_filter_then_run_with_U(root, index):
    case = [rf.EXTRA[2], rf.EXTRA[4], rf.EXTRA[5]][index]
    plan = _dispatch(case, root)
    x, w = rf.inputs(case.problem, _rng(case.id))
    U = plan.transform_filter(w)
    assert [a.shape for a in U] == [plan.layout()["U"][0], plan.layout()["fs"][0]]
    with_u = plan.run(x, U=U)
    direct = plan.run(x, w)
    assert np.array_equal(with_u.view(np.uint8), direct.view(np.uint8))
    workspace = np.full(plan.workspace_bytes, 0xFF, dtype=np.uint8)  # U inside a workspace
    U_ws = plan.transform_filter(w, workspace)
    assert np.array_equal(
        plan.run(x, U=U_ws, workspace=workspace).view(np.uint8), direct.view(np.uint8)
    )


@pytest.mark.parametrize("dtype", [DType.FP16, DType.BF16])
def test_16bit_io_stores_fp32_and_k3_widens_nothing(root, dtype):
    """The c target's pick for 16-bit io: x read and y written in 16 bits, U (cached by
    transform_filter) and V in fp32, so K3 is the fp32 BLAS GEMM with no per-call widening
    (its scratch stays empty) and no prescale step."""
    case = next(c for c in rf.numerics_cases() if c.problem.dtype is dtype and not c.label)
    plan = _dispatch(case, root)
    assert plan.xdtype is DType.FP32 and plan.source == "default pick"
    assert [s.stage for s in plan.steps] == [Stage.FILTER, Stage.INPUT, Stage.GEMM, Stage.OUTPUT]
    x, w = rf.inputs(case.problem, _rng(case.id))
    U = plan.transform_filter(w)
    assert U[0].dtype == np.float32
    backend = plan.backend()
    backend._gemm._scratch.clear()
    y = plan.run(x, U=U)
    assert y.dtype == x.dtype and not backend._gemm._scratch
    assert np.array_equal(y.view(np.uint16), plan.run(x, w).view(np.uint16))


# Refusals --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "fields, rule",
    [
        (dict(stride_h=2, stride_w=2), "stride_not_1"),
        (dict(stride_h=1, stride_w=2), "stride_not_1"),
        (dict(R=1, S=1, pad_h=0, pad_w=0), "not_3x3"),
        (dict(R=5, S=5, pad_h=2, pad_w=2), "not_3x3"),
        (dict(R=3, S=5, pad_h=1, pad_w=2), "not_3x3"),
    ],
)
def test_refusals_via_dispatch_and_conv2d(root, fields, rule):
    problem = Problem(N=1, C=8, H=10, W=10, K=8, **{"pad_h": 1, "pad_w": 1, **fields})
    with pytest.raises(Refused) as refused:
        dispatch(problem, target="c", cache_root=root)
    assert refused.value.rule == rule and rule in str(refused.value)
    x = np.zeros((1, 10, 10, 8), np.float32)
    w = np.zeros((8, problem.R, problem.S, 8), np.float32)
    with pytest.raises(Refused) as refused:
        wino.conv2d(
            x,
            w,
            padding=(problem.pad_h, problem.pad_w),
            stride=(problem.stride_h, problem.stride_w),
            cache_root=root,
        )
    assert refused.value.rule == rule


def test_refusals_need_no_cache(tmp_path):
    problem = Problem(N=1, C=8, H=10, W=10, K=8, stride_h=2, stride_w=2)
    with pytest.raises(Refused, match="stride_not_1"):
        dispatch(problem, target="c", cache_root=tmp_path)


# Operands --------------------------------------------------------------------------------------
@pytest.fixture()
def small(root):
    case = rf.EXTRA[2]  # fp32 N3 C16 12x12 K8 F4x4
    plan = _dispatch(case, root)
    x, w = rf.inputs(case.problem, _rng(case.id))
    return plan, x, w


def test_bad_outputs_are_refused_before_any_write(small):
    plan, x, w = small
    p = plan.problem
    shape = (p.N, p.Ho, p.Wo, p.K)
    for y, what in [
        (np.zeros(shape, np.float16), "shape .* and dtype"),
        (np.zeros((p.N, p.Ho, p.Wo, p.K + 1), np.float32), "shape .* and dtype"),
        (np.zeros((p.N, p.Ho, p.Wo, 2 * p.K), np.float32)[..., ::2], "contiguous"),
        ([[0.0]], "numpy array"),
    ]:
        with pytest.raises(ValueError, match=f"y: .*{what}"):
            plan.run(x, w, y=y)
    with pytest.raises(ValueError, match="workspace"):
        plan.run(x, w, workspace=np.zeros(plan.workspace_bytes - 256, np.uint8))


def test_bad_inputs_name_the_argument(small):
    plan, x, w = small
    with pytest.raises(ValueError, match="x: expected NHWC shape"):
        plan.run(x[:, :-1], w)
    with pytest.raises(ValueError, match="w: expected KRSC shape"):
        plan.run(x, w[:-1])
    with pytest.raises(ValueError, match="x: expected dtype fp32"):
        plan.run(x.astype(np.float16), w)
    with pytest.raises(ValueError, match="w: array dtype float64"):
        plan.run(x, w.astype(np.float64))
    with pytest.raises(ValueError, match="pass the filter w"):
        plan.run(x)


def test_U_from_another_plan_is_refused(root, small):
    plan, x, w = small
    other = _dispatch(rf.EXTRA[3], root)  # same problem, F2x2: other U shape
    with pytest.raises(ValueError, match="U: U must be"):
        plan.run(x, U=other.transform_filter(w))
    with pytest.raises(ValueError, match="U: pass the"):
        plan.run(x, U=np.zeros(3))


def test_misaligned_and_strided_inputs_compute_the_same(small):
    plan, x, w = small
    expect = plan.run(x, w)
    raw = np.empty(x.size * 4 + 4, np.uint8)[4:].view(np.float32)  # 4 bytes past alignment
    shifted = raw.reshape(x.shape)
    shifted[...] = x
    assert shifted.ctypes.data % 16
    assert np.array_equal(plan.run(shifted, w), expect)
    strided = np.repeat(x, 2, axis=3)[..., ::2]
    assert not strided.flags.c_contiguous
    assert np.array_equal(plan.run(strided, np.asfortranarray(w)), expect)


def test_conv2d_on_every_dtype_matches_the_plan(root):
    for dtype in rf.DTYPES:
        p = rf.problem(dtype, C=16, H=10, W=10, K=16)
        x, w = rf.inputs(p, _rng(f"conv2d-{dtype.short}"))
        y = wino.conv2d(x, w, padding=1, cache_root=root)
        plan = dispatch(p, target="c", cache_root=root)
        assert y.dtype == x.dtype and y.shape == (1, 10, 10, 16)
        assert np.array_equal(y.view(np.uint8), plan.run(x, w).view(np.uint8))


# The c target's own K4 order (grids/targets.yaml default_pick) ---------------------------------
@pytest.fixture(scope="module")
def k4_vec_root(tmp_path_factory):
    """A cache of the c default picks of K4_VEC_PROBLEMS and the same plans with K4 at vec 2
    (grids/stages.yaml's first, what the c target took before its own order)."""
    from tests import host_cache

    specs = set()
    for p, tile in K4_VEC_PROBLEMS:
        picked = default_stage_specs(p, tile, target=Target.C)
        specs |= set(picked.values()) | {picked[Stage.OUTPUT].replace(vec=2)}
    root = tmp_path_factory.mktemp("k4-vec")
    host_cache.build(sorted(specs, key=lambda s: s.name), root)
    return root


K4_VEC_PROBLEMS = [
    (rf.problem(dtype, N=2, C=16, H=13, W=11, K=24, pad_h=1, pad_w=1), tile)
    for dtype in rf.DTYPES
    for tile in (Tile(2, 2), Tile(4, 4))
]


@pytest.mark.parametrize("index", range(len(K4_VEC_PROBLEMS)))
def test_c_k4_takes_vec_8_with_the_same_bytes_as_vec_2(k4_vec_root, index):
    """The c target's K4 takes the widest vector (8 channels: one AVX2 register) where the
    GPUs' order takes vec 2 first; a channel's output transform does not depend on its
    vector, so y is bit-identical, and within the claimed bound."""
    p, tile = K4_VEC_PROBLEMS[index]
    picked = default_stage_specs(p, tile, target=Target.C)
    assert picked[Stage.OUTPUT].vec == 8
    assert default_stage_specs(p, tile, target=Target.CUDA)[Stage.OUTPUT].vec == 2
    x, w = rf.inputs(p, _rng(f"k4-vec-{index}"))
    plan = dispatch(p, target="c", tile=tile, cache_root=k4_vec_root)
    assert plan.specs == picked and plan.source == "default pick"
    vec2 = {**picked, Stage.OUTPUT: picked[Stage.OUTPUT].replace(vec=2)}
    other = dispatch(p, target="c", tile=tile, cache_root=k4_vec_root, specs=vec2)
    y = plan.run(x, w)
    assert np.array_equal(y.view(np.uint8), other.run(x, w).view(np.uint8))
    ref = conv2d_reference(x, w, (p.pad_h, p.pad_w))
    assert relative_error(y, ref) <= rf.claimed_bound(tile, p.dtype, plan.xdtype)
