"""The epilogue (issue 9): per-channel bias and ReLU applied by K4 and KF in fp32 before y's
store, on the host (the same kernel text the GPUs run).

Every grid epilogue kernel (K4 and KF) and K4's epilogue at every tile against the float64
reference (conv + bias, then ReLU) within the per-tile, per-dtype bounds, with biases larger
than the convolution and of both signs, grouped channels (bias[g * K/G + k]), y and the
workspace poisoned; ReLU clamps exactly (the relu kernel's y is max(y of the same kernel
without it, 0), bit for bit); NaN in the bias propagates through ReLU; a bad bias writes
nothing; dispatch's epilogue refusal by rule id; conv2d(bias=, activation=)."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

import wino
from tests import host_cache
from wino import grid
from wino.kinds import BY_KIND, Kind
from wino.pick import default_fused_specs, default_stage_specs, fused_pipeline
from wino.problem import Problem
from wino.refusals import Refused, spec_refusal
from wino.runtime import conv2d_reference, dispatch, relative_error, tuning
from wino.runtime.arrays import numpy_dtype
from wino.runtime.plan import default_tile
from wino.runtime.reference import epilogue_reference
from wino.runtime.verify import bound_for
from wino.specs import RtFusedSpec, RtOutputSpec
from wino.vocab import TILES, Activation, DType, Epilogue, Stage, Target, Tile

NONE, BIAS, RELU, BIAS_RELU = Epilogue
GRID_EPILOGUE = tuple(
    s
    for stage in (Stage.OUTPUT, Stage.FUSED)
    for s in grid.aot_stage_specs(stage)
    if s.epilogue is not NONE
)


def _problem(dtype: DType, groups: int = 3, K: int = 24, **fields) -> Problem:
    """Odd spatial extents, 3 groups (the bias index crosses groups), K/G = 8 (vec 8 fits)."""
    base = dict(N=2, C=18, H=11, W=13, K=K, pad_h=1, pad_w=1, groups=groups)
    return Problem(**{**base, **fields}, dtype=dtype)


def _pipeline(spec, problem: Problem) -> dict:
    """The default picks of the spec's tile and dtypes with ``spec`` as the last kernel."""
    if isinstance(spec, RtFusedSpec):
        return fused_pipeline(problem, spec)
    return {**default_stage_specs(problem, spec.tile, target=Target.CUDA), Stage.OUTPUT: spec}


def _every_tile_specs():
    """K4 with bias then ReLU at every tile (vec 1, odd K), and without (for exactness)."""
    for tile in TILES:
        for epilogue in (NONE, BIAS_RELU):
            yield RtOutputSpec(tile=tile, io=DType.FP32, vec=1, epilogue=epilogue)


def _problem_for(spec) -> Problem:
    # M in fp16 (K4's or the held kernel's) needs C/G >= 16 (the fp16_m_few_channels and
    # fused_hold_few_channels rules): C 48 over the 3 groups
    fp16_m = getattr(spec, "accdtype", None) is DType.FP16 or getattr(spec, "hold", 0)
    wide = {"C": 48} if fp16_m else {}
    if getattr(spec, "vec", 8) == 1:
        return _problem(spec.io, K=21, **wide)  # K/G = 7: only vec 1 fits
    return _problem(spec.io, **wide)


def _plain(spec):
    return spec.replace(epilogue=NONE)


#: The held KF epilogue kernels (hold > 0): their output phase stores channel pairs, so an odd
#: K/G leaves the last pair of each group with one channel (K = 21 over 3 groups).
HELD_EPILOGUE = tuple(s for s in GRID_EPILOGUE if getattr(s, "hold", 0))


def _odd_k_problem(spec) -> Problem:
    return _problem(spec.io, K=21, C=48)


@pytest.fixture(scope="session")
def root(tmp_path_factory):
    """One host cache: every grid epilogue kernel and its epilogue-free twin, K4 at every tile,
    the stages that go with them, and the default picks the conv2d tests dispatch."""
    folder = tmp_path_factory.mktemp("epilogue-cache")
    specs = set()
    for spec in (*GRID_EPILOGUE, *_every_tile_specs()):
        problem = _problem_for(spec)
        specs.update(_pipeline(spec, problem).values())
        specs.update(_pipeline(_plain(spec), problem).values())
    for spec in HELD_EPILOGUE:
        specs.update(_pipeline(spec, _odd_k_problem(spec)).values())
    for dtype in (DType.FP16, DType.FP32):
        problem = _problem(dtype)
        for epilogue in Epilogue:
            for target in (Target.C, Target.CUDA):  # the host's pick and the GPUs' (forced)
                for tile in (Tile(2, 2), Tile(4, 4)):
                    picks = default_stage_specs(problem, tile, epilogue=epilogue, target=target)
                    specs.update(picks.values())
    host_cache.build(sorted(specs, key=lambda s: s.name), folder)
    return folder


def _rng(text: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(text.encode()))


def _operands(problem: Problem, seed: str, bias_scale: float = 1.0):
    """x, w ~ N(0,1); a bias of alternating sign and 0.5x to 4x the convolution's largest
    output, a different magnitude per channel (so reading another channel's bias shows)."""
    rng = _rng(seed)
    dtype = numpy_dtype(problem.dtype)
    x = rng.standard_normal((problem.N, problem.H, problem.W, problem.C)).astype(dtype)
    w = rng.standard_normal((problem.K, 3, 3, problem.Cg)).astype(dtype)
    ref = conv2d_reference(x, w, (problem.pad_h, problem.pad_w), groups=problem.groups)
    k = np.arange(problem.K)
    magnitude = np.abs(ref).max() * rng.uniform(0.5, 4.0, problem.K) * bias_scale
    bias = (np.where(k % 2, -1.0, 1.0) * magnitude).astype(dtype)
    return x, w, bias, ref


def _run_poisoned(plan, x, w, bias):
    """plan.run into a NaN y and a 0xFF workspace; asserts every output was written."""
    p = plan.problem
    y = np.full((p.N, p.Ho, p.Wo, p.K), np.nan, dtype=numpy_dtype(p.dtype))
    workspace = np.full(plan.workspace_bytes, 0xFF, dtype=np.uint8)
    assert plan.run(x, w, y=y, workspace=workspace, bias=bias) is y
    unwritten = np.count_nonzero(np.isnan(y.astype(np.float32)))
    assert unwritten == 0, f"{unwritten} of {y.size} outputs unwritten"
    return y.astype(np.float32)


def _plan(root, spec, problem):
    return dispatch(problem, target="c", cache_root=root, specs=_pipeline(spec, problem))


def _bound(spec) -> float:
    return bound_for(spec.tile, spec.io, spec.xdtype if spec.stage is Stage.FUSED else None)


def _check(root, spec, problem: Problem | None = None):
    """The spec's plan against the float64 epilogue reference (on ``problem``, default
    ``_problem_for(spec)``); returns (y, x, w, problem)."""
    problem = problem or _problem_for(spec)
    x, w, bias, ref = _operands(problem, spec.name)
    plan = _plan(root, spec, problem)
    assert plan.epilogue is spec.epilogue and plan.steps[-1].name == spec.name
    use_bias = bias if spec.epilogue.bias else None
    y = _run_poisoned(plan, x, w, use_bias)
    relu = spec.epilogue.activation is Activation.RELU
    expect = epilogue_reference(ref, use_bias, relu)
    error = relative_error(y, expect)
    assert 0 < error <= _bound(spec), f"{spec.name}: error {error:.3g}, bound {_bound(spec):.3g}"
    if relu:
        pre = epilogue_reference(ref, use_bias)
        assert (y >= 0).all()  # never below zero, not even -tiny
        clearly = pre < -2 * _bound(spec) * np.abs(pre).max()  # negative past any error
        assert clearly.any() and (y[clearly] == 0).all()  # exactly 0
    return y, x, w, problem


# Numerics -------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec", GRID_EPILOGUE, ids=lambda s: s.name)
def test_grid_epilogue_kernels_within_bound(root, spec):
    y, x, w, problem = _check(root, spec)
    if spec.epilogue is RELU:  # clamps exactly: max(y of the same kernel without relu, 0)
        plain = _run_poisoned(_plan(root, _plain(spec), problem), x, w, None)
        assert np.count_nonzero(plain < 0) > 0
        assert np.array_equal(y, np.maximum(plain, 0))


@pytest.mark.parametrize("spec", HELD_EPILOGUE, ids=lambda s: s.name)
def test_held_epilogue_at_odd_output_channels(root, spec):
    """K/G = 7: the held kernel's last channel pair of each group has one channel (its bias
    and fs read only where the channel exists, the other half of the pair not stored)."""
    assert _odd_k_problem(spec).Kg % 2 == 1
    _check(root, spec, _odd_k_problem(spec))


def test_held_mma_output_transform_applies_the_epilogue(tmp_path):
    """tcx 1 (the output transform on the MMA; not among the grid's epilogue variants) adds
    the bias and clamps on its lanes' channel pairs, at even and odd K/G."""
    held = next(
        s
        for s in grid.aot_stage_specs(Stage.FUSED)
        if s.tcx and s.io is DType.FP16 and s.epilogue is NONE and s.tile == Tile(4, 4)
    )
    spec = held.replace(epilogue=BIAS_RELU)
    assert spec_refusal(spec, Target.CUDA) is None
    problems = [_problem_for(spec), _odd_k_problem(spec)]
    specs = {s for p in problems for s in _pipeline(spec, p).values()}
    host_cache.build(sorted(specs, key=lambda s: s.name), tmp_path)
    for problem in problems:
        _check(tmp_path, spec, problem)


@pytest.mark.parametrize("epilogue", [BIAS, RELU, BIAS_RELU], ids=lambda e: e.value)
@pytest.mark.parametrize("dtype", [DType.FP16, DType.BF16], ids=lambda d: d.short)
def test_the_default_fused_pick_keeps_its_kernel_with_an_epilogue(dtype, epilogue):
    """A bias / ReLU layer runs the fused kernel a plain one runs, with the epilogue: on the
    C = K = 64 layers grids/algorithms.yaml sends to the fused plan (fused_held), the held
    kernel, not the chunked one (which the pick fell back to while the held schedule had no
    epilogue: 2.2-2.7x slower on the C = 64 layers, H100, docs/FUSED.md)."""
    for tile, hw in [(Tile(4, 4), 224), (Tile(2, 2), 14)]:
        problem = Problem(N=16, C=64, H=hw, W=hw, K=64, pad_h=1, pad_w=1, dtype=dtype)
        plain = default_fused_specs(problem, tile, target=Target.CUDA)
        picked = default_fused_specs(problem, tile, epilogue=epilogue, target=Target.CUDA)
        assert plain[Stage.FUSED].hold == 64
        assert picked == {**plain, Stage.FUSED: plain[Stage.FUSED].replace(epilogue=epilogue)}


@pytest.mark.parametrize("tile", TILES, ids=lambda t: t.name)
def test_k4_bias_relu_at_every_tile(root, tile):
    _check(root, RtOutputSpec(tile=tile, io=DType.FP32, vec=1, epilogue=BIAS_RELU))


@pytest.mark.parametrize(
    "spec",
    [s for s in GRID_EPILOGUE if s.epilogue is BIAS_RELU],
    ids=lambda s: s.name,
)
def test_relu_clamps_exactly(root, spec):
    """bias_relu's y is max(bias's y, 0) bit for bit: the same fp32 value, clamped before the
    conversion (which keeps 0 and the sign)."""
    problem = _problem_for(spec)
    x, w, bias, _ = _operands(problem, "exact" + spec.name)
    with_relu = _run_poisoned(_plan(root, spec, problem), x, w, bias)
    bias_only = spec.replace(epilogue=BIAS)
    without = _run_poisoned(_plan(root, bias_only, problem), x, w, bias)
    assert np.count_nonzero(without < 0) > 0  # the bias pushes outputs below zero
    assert np.array_equal(with_relu, np.maximum(without, 0))


@pytest.mark.parametrize("io", [DType.FP16, DType.FP32], ids=lambda d: d.short)
def test_large_bias(root, io):
    """A bias 1000x the convolution's outputs (fp16: still finite) is added, not lost."""
    spec = RtOutputSpec(tile=Tile(4, 4), io=io, vec=8, epilogue=BIAS)
    problem = _problem_for(spec)
    x, w, bias, ref = _operands(problem, "large", bias_scale=250.0)
    assert np.abs(bias.astype(np.float64)).max() > 500 * np.abs(ref).max()
    y = _run_poisoned(_plan(root, spec, problem), x, w, bias)
    expect = epilogue_reference(ref, bias)
    assert relative_error(y, expect) <= _bound(spec)
    # the convolution is still there under the bias: y - bias against the plain reference
    residual = y.astype(np.float64) - bias.astype(np.float64)
    ulp = np.spacing(np.abs(expect).astype(numpy_dtype(io))).astype(np.float64)
    assert (np.abs(residual - ref) <= ulp + _bound(spec) * np.abs(ref).max()).all()


@pytest.mark.parametrize(
    "spec",
    [
        RtOutputSpec(tile=Tile(4, 4), io=DType.FP16, vec=8, epilogue=BIAS_RELU),
        next(s for s in GRID_EPILOGUE if s.stage is Stage.FUSED and s.epilogue is BIAS_RELU),
    ],
    ids=lambda s: s.name,
)
def test_nonfinite_bias_propagates_through_relu(root, spec):
    """bias[k] NaN: every output of channel k is NaN, ReLU included (as torch.relu); -inf: 0
    after ReLU; +inf: inf. No other channel changes."""
    problem = _problem_for(spec)
    x, w, bias, _ = _operands(problem, "nan" + spec.name)
    plan = _plan(root, spec, problem)
    clean = plan.run(x, w, bias=bias).astype(np.float32)
    bias[[3, 10, 17]] = [np.nan, -np.inf, np.inf]
    y = plan.run(x, w, bias=bias).astype(np.float32)
    assert np.isnan(y[..., 3]).all()
    assert (y[..., 10] == 0).all() and np.isposinf(y[..., 17]).all()
    others = np.setdiff1d(np.arange(problem.K), [3, 10, 17])
    assert np.array_equal(y[..., others], clean[..., others])


# Arguments ------------------------------------------------------------------------------------
@pytest.fixture()
def bias_plan(root):
    spec = RtOutputSpec(tile=Tile(2, 2), io=DType.FP16, vec=8, epilogue=BIAS)
    problem = _problem_for(spec)
    x, w, bias, _ = _operands(problem, "args")
    return _plan(root, spec, problem), x, w, bias


def test_bad_bias_is_refused_before_any_write(bias_plan):
    plan, x, w, bias = bias_plan
    p = plan.problem
    y = np.full((p.N, p.Ho, p.Wo, p.K), np.nan, np.float16)
    for value, what in [
        (None, "bias: this plan's epilogue bias adds a bias; pass bias="),
        (bias[:-1], r"bias: expected shape \(24,\)"),
        (bias.reshape(3, 8), r"bias: expected shape \(24,\)"),
        (bias.astype(np.float32), "bias: expected dtype fp16"),
        (bias.astype(np.float64), "bias: array dtype float64"),
    ]:
        with pytest.raises(ValueError, match=what):
            plan.run(x, w, y=y, bias=value)
    assert np.isnan(y.astype(np.float32)).all()  # nothing written


def test_bias_without_a_bias_epilogue_is_refused(root):
    problem = _problem(DType.FP16)
    plan = dispatch(problem, target="c", cache_root=root, tile="F2x2", epilogue="relu")
    x, w, bias, _ = _operands(problem, "relu-only")
    with pytest.raises(ValueError, match="bias: this plan's epilogue relu adds no bias"):
        plan.run(x, w, bias=bias)


def test_conv2d_bias_and_activation(root):
    problem = _problem(DType.FP16)
    x, w, bias, ref = _operands(problem, "conv2d")
    opts = dict(padding=1, groups=3, tile="F2x2", cache_root=root)
    bound = bound_for(Tile(2, 2), DType.FP16)
    for kwargs, relu in [
        (dict(bias=bias), False),
        (dict(bias=bias, activation="relu"), True),
        (dict(activation=Activation.RELU), True),
    ]:
        y = wino.conv2d(x, w, **opts, **kwargs)
        expect = epilogue_reference(ref, kwargs.get("bias"), relu)
        assert relative_error(y, expect) <= bound, kwargs
    with pytest.raises(ValueError, match=r"activation: 'gelu' is not one of \['none', 'relu'\]"):
        wino.conv2d(x, w, **opts, activation="gelu")
    with pytest.raises(ValueError, match="bias: expected shape"):
        wino.conv2d(x, w, **opts, bias=bias[:8])
    with pytest.raises(ValueError, match=r"bias: expected shape \(24,\) .*got list"):
        wino.conv2d(x, w, **opts, bias=list(bias))


def test_conv2d_default_tile_has_the_epilogue(root):
    """Without tile=, dispatch picks a tile whose grid has the epilogue (the default tile)."""
    problem = _problem(DType.FP32, H=7, W=7)
    assert default_tile(problem) == Tile(2, 2)
    x, w, bias, ref = _operands(problem, "default")
    y = wino.conv2d(x, w, padding=1, groups=3, bias=bias, activation="relu", cache_root=root)
    assert relative_error(y, epilogue_reference(ref, bias, True)) <= bound_for(Tile(2, 2), "fp32")


# Dispatch -------------------------------------------------------------------------------------
def test_tile_without_the_epilogue_is_refused_by_rule(root):
    problem = _problem(DType.FP16)
    with pytest.raises(Refused) as refused:
        dispatch(problem, target="c", cache_root=root, tile="F6x6", epilogue="bias")
    assert refused.value.rule == "epilogue_not_in_grid"
    assert "F2x2, F4x4" in refused.value.message and "bias" in refused.value.message
    with pytest.raises(Refused) as refused:
        dispatch(problem, target="c", cache_root=root, tile="F4x6", algorithm="fused",
                 epilogue=BIAS_RELU)  # fmt: skip
    assert refused.value.rule == "epilogue_not_in_grid" and "kf" in refused.value.message
    with pytest.raises(ValueError, match=r"epilogue: 'gelu' is not one of"):
        dispatch(problem, target="c", cache_root=root, epilogue="gelu")


def test_tuned_tile_without_the_epilogue_gives_way(root, tmp_path):
    """A tuning DB entry on F6x6 (no epilogue kernels): with an epilogue and no tile=, dispatch
    takes the default tile; with tile="F6x6" it refuses by rule."""
    problem = _problem(DType.FP16)
    tuned = default_stage_specs(problem, Tile(6, 6))
    tuning.record(problem, wino.Target.C, Tile(6, 6), tuned, 1.0, root=root)
    try:
        assert tuning.best_tile(problem, wino.Target.C, root) == Tile(6, 6)
        with_bias = dispatch(problem, target="c", cache_root=root, epilogue=BIAS)
        assert with_bias.tile == default_tile(problem) and with_bias.epilogue is BIAS
        with pytest.raises(Refused, match="epilogue_not_in_grid"):
            dispatch(problem, target="c", cache_root=root, tile="F6x6", epilogue=BIAS)
    finally:
        tuning.db_path(wino.Target.C, root).unlink()


def test_tuned_specs_keep_their_stages_and_swap_k4(root):
    """A tuning DB entry on F2x2: the epilogue plan keeps the tuned K1/K2 and takes K4's
    epilogue variant."""
    problem = _problem(DType.FP16)
    tuned = default_stage_specs(problem, Tile(2, 2))
    tuned[Stage.OUTPUT] = tuned[Stage.OUTPUT].replace(vec=8)  # a K4 the epilogues cover
    tuning.record(problem, wino.Target.C, Tile(2, 2), tuned, 1.0, root=root)
    try:
        plan = dispatch(problem, target="c", cache_root=root, epilogue=BIAS_RELU)
        assert plan.source == "tuning DB"
        assert plan.specs[Stage.INPUT] == tuned[Stage.INPUT]
        assert plan.specs[Stage.OUTPUT] == tuned[Stage.OUTPUT].replace(epilogue=BIAS_RELU)
    finally:
        tuning.db_path(wino.Target.C, root).unlink()


# Grid, names, ABI -----------------------------------------------------------------------------
def test_grid_variants_are_the_declared_ones():
    """K4 F2x2/F4x4 x vec 1/8 x (3 io with fp32 M + fp16/bf16 io with fp16 M), KF F2x2/F4x4
    one-stage chunked specs (hold 0) and the held kernels the default fused pick takes (F4x4
    two-pass 18 warps, own tile scales, fp32 transforms: fp16 with both input arithmetics, bf16
    with fp32's; the same at hold 128; F2x2 8 warps: fp16 and bf16), x 3 epilogues; each has
    its epilogue-free twin in the grid."""
    k4 = [s for s in GRID_EPILOGUE if s.stage is Stage.OUTPUT]
    kf = [s for s in GRID_EPILOGUE if s.stage is Stage.FUSED]
    assert len(k4) == 2 * 2 * 3 * (3 + 2)
    assert {s.tile for s in GRID_EPILOGUE} == {Tile(2, 2), Tile(4, 4)}
    assert {s.vec for s in k4} == {1, 8} and {s.stages for s in kf} == {1}
    plain = {s.name for s in grid.aot_stage_specs()}
    assert all(_plain(s).name in plain for s in GRID_EPILOGUE)
    one_stage = [
        s
        for s in grid.aot_stage_specs(Stage.FUSED)
        if s.epilogue is NONE
        and s.stages == 1
        and s.hold == 0
        and s.tile in (Tile(2, 2), Tile(4, 4))
    ]
    chunked = [s for s in kf if not s.hold]
    assert len(chunked) == 3 * len(one_stage)
    held = sorted({_plain(s).name for s in kf if s.hold})
    assert held == sorted(
        [
            "kf_f4x4_ifp16_mfp16_p32_k64_c32_w18_s1_pfused_h64_q32",
            "kf_f4x4_ifp16_mfp16_p32_k64_c32_w18_s1_pfused_h64_q32_x16",
            "kf_f4x4_ibf16_mfp16_p32_k64_c32_w18_s1_pfused_h64_q32",
            # their own scales at the fixed scale 2^-6, checked (tsfix 6: the default picks)
            "kf_f4x4_ifp16_mfp16_p32_k64_c32_w18_s1_pfused_h64_q32_z6",
            "kf_f4x4_ifp16_mfp16_p32_k64_c32_w18_s1_pfused_h64_q32_x16_z6",
            "kf_f4x4_ibf16_mfp16_p32_k64_c32_w18_s1_pfused_h64_q32_z6",
            # the same at hold 128 (16 tiles x 128 channels; fp16's input transform on pairs)
            "kf_f4x4_ifp16_mfp16_p16_k128_c32_w18_s1_pfused_h128_q32_x16",
            "kf_f4x4_ibf16_mfp16_p16_k128_c32_w18_s1_pfused_h128_q32",
            "kf_f4x4_ifp16_mfp16_p16_k128_c32_w18_s1_pfused_h128_q32_x16_z6",
            "kf_f4x4_ibf16_mfp16_p16_k128_c32_w18_s1_pfused_h128_q32_z6",
            "kf_f2x2_ifp16_mfp16_p32_k64_c32_w8_s1_psplit_h64",
            "kf_f2x2_ibf16_mfp16_p32_k64_c32_w8_s1_psplit_h64",
            # the HIP grid's held kernel (64 KiB of LDS: 16 tiles)
            "kf_f2x2_ifp16_mfp16_p16_k64_c32_w8_s1_psplit_h64",
            "kf_f2x2_ibf16_mfp16_p16_k64_c32_w8_s1_psplit_h64",
        ]
    )
    assert len(kf) == len(chunked) + 3 * len(held)


def test_names_keep_none_and_tag_the_rest():
    spec = RtOutputSpec(tile=Tile(4, 4), vec=8)
    assert spec.name == "k4_f4x4_ifp16_afp32_v8_b256"
    assert spec.replace(epilogue="bias_relu").name == "k4_f4x4_ifp16_afp32_v8_b256_ebiasrelu"
    assert RtFusedSpec(epilogue=RELU).name.endswith("_psplit_erelu")
    assert spec.replace(epilogue=BIAS).fields_dict()["epilogue"] == "bias"
    with pytest.raises(ValueError, match="RtOutputSpec.epilogue: 'tanh' is not one of"):
        RtOutputSpec(epilogue="tanh")


def test_bias_buffer_in_both_abis():
    """bias [K] in the io dtype, read only, before y, in K4 and KF (null without a bias)."""
    k4 = BY_KIND[Kind.K4].abi_record(RtOutputSpec(io=DType.BF16))
    kf = BY_KIND[Kind.KF].abi_record(RtFusedSpec(io=DType.FP16, epilogue=BIAS))
    assert [b["name"] for b in k4["buffers"]] == ["M", "fs", "ts", "bias", "y"]
    assert [b["name"] for b in kf["buffers"]] == ["x", "U", "fs", "ts", "bias", "y"]
    assert k4["buffers"][3] == {
        "ctype": "const unsigned short*",
        "name": "bias",
        "role": "operand",
        "dtype": "bf16",
        "access": "read",
    }


def test_epilogue_of():
    assert Epilogue.of(True, Activation.RELU) is BIAS_RELU
    assert Epilogue.of(False, Activation.NONE) is NONE
    assert [(e.bias, e.activation.value) for e in Epilogue] == [
        (False, "none"),
        (True, "none"),
        (False, "relu"),
        (True, "relu"),
    ]


def test_graph_replays_with_the_bias(bias_plan):
    """plan.graph(..., bias=): a replay reads the bias in place (host: a replay is a run)."""
    plan, x, w, bias = bias_plan
    p = plan.problem
    y = np.empty((p.N, p.Ho, p.Wo, p.K), np.float16)
    workspace = np.empty(plan.workspace_bytes, np.uint8)
    graph = plan.graph(x, w, y=y, workspace=workspace, bias=bias)
    first = y.copy()
    bias += np.float16(1.0)
    graph.replay()
    assert np.array_equal(y, plan.run(x, w, bias=bias)) and not np.array_equal(y, first)
