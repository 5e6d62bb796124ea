"""dispatch and the Plan: route selection, steps named by their specs, GEMM extents, kernargs
and magic pairs, workspace size, batch split and workspace limit, caller and tuning-DB specs,
missing kernels and caches, refusals, explain()."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests import runtime_fixtures as rf
from wino.grid import aot_stage_specs
from wino.kinds import BY_KIND, Kind, kind_of
from wino.magic import magic_apply, magic_div
from wino.pick import default_stage_specs
from wino.problem import Problem
from wino.refusals import Refused
from wino.runtime import GemmStep, KernelStep, dispatch, tuning
from wino.runtime.host import HostBackend
from wino.specs import RtFilterSpec, RtOutputSpec
from wino.vocab import DType, Prescale, Stage, Target, Tile


@pytest.fixture(scope="session")
def root(tmp_path_factory):
    return rf.host_cache(tmp_path_factory)


def _tiles(problem: Problem, tile: Tile) -> int:
    """P = N * dil_h * ceil(ceil(Ho/dil_h)/mh) * dil_w * ceil(ceil(Wo/dil_w)/mw)."""
    th = problem.dil_h * math.ceil(math.ceil(problem.Ho / problem.dil_h) / tile.mh)
    tw = problem.dil_w * math.ceil(math.ceil(problem.Wo / problem.dil_w) / tile.mw)
    return problem.N * th * tw


PLAN_CASES = [c for c in rf.coverage_cases() if c.label in ("dil2x3", "g4dil", "c12", "pad3x1")]
PLAN_CASES += [c for c in rf.forced_cases() if c.label in ("lds", "split")][:6]
PLAN_CASES += rf.wide_cases()[:3] + rf.EXTRA[:2]


# Route -----------------------------------------------------------------------------------------
def test_explicit_c_target_runs_on_the_host_backend(root):
    case = rf.EXTRA[2]
    for target in ("c", Target.C):
        plan = dispatch(case.problem, target=target, cache_root=root)
        assert plan.target is Target.C and plan.manifest.target is Target.C
        assert isinstance(plan.backend(), HostBackend)
        assert plan.kind == "unfused2d_rt" and plan.source == "default pick"


def test_default_target_is_c_without_a_gpu(root, monkeypatch):
    from wino.runtime import registry

    case = rf.EXTRA[2]
    monkeypatch.setattr(registry, "cuda_available", lambda: False)
    assert dispatch(case.problem, cache_root=root).target is Target.C
    monkeypatch.setattr(registry, "cuda_available", lambda: True)  # no cuda cache here: c
    assert dispatch(case.problem, cache_root=root).target is Target.C


def test_this_machine_defaults_to_c(root):
    from wino.runtime.registry import cuda_available

    if cuda_available():
        pytest.skip("this machine has CuPy and a GPU: the default target is cuda")
    assert dispatch(rf.EXTRA[2].problem, cache_root=root).target is Target.C


def test_unknown_algorithm(root):
    with pytest.raises(ValueError, match="algorithm"):
        dispatch(rf.EXTRA[2].problem, algorithm="fft", target="c", cache_root=root)


# Steps -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", PLAN_CASES, ids=lambda c: c.id)
def test_steps_are_the_specs_and_the_gemm(root, case):
    plan = dispatch(
        case.problem, target="c", tile=case.tile, cache_root=root, specs=case.dispatch_specs()
    )
    p, specs = case.problem, case.specs
    kernels = [s for s in plan.steps if isinstance(s, KernelStep)]
    assert [s.name for s in kernels] == [spec.name for spec in specs.values()]
    assert [s.stage for s in kernels] == list(specs)
    order = [s.stage for s in plan.steps]
    assert order == [
        st
        for st in (Stage.FILTER, Stage.PRESCALE, Stage.INPUT, Stage.GEMM, Stage.OUTPUT)
        if st in specs or st is Stage.GEMM
    ]
    (gemm,) = [s for s in plan.steps if isinstance(s, GemmStep)]
    tile = case.tile
    assert (gemm.batch, gemm.m, gemm.n, gemm.k) == (
        tile.bins * p.groups,
        _tiles(p, tile),
        p.K // p.groups,
        p.C // p.groups,
    )
    assert gemm.xdtype is specs[Stage.INPUT].xdtype
    assert gemm.accdtype is specs[Stage.OUTPUT].accdtype  # M's storage is K4's input
    assert gemm.flops == 2 * gemm.batch * gemm.m * gemm.n * gemm.k
    assert plan.prescale is specs[Stage.INPUT].prescale


@pytest.mark.parametrize("case", PLAN_CASES, ids=lambda c: c.id)
def test_kernargs_extents_and_magic_pairs(root, case):
    plan = dispatch(
        case.problem, target="c", tile=case.tile, cache_root=root, specs=case.dispatch_specs()
    )
    p, tile = case.problem, case.tile
    P = _tiles(p, tile)
    tw = p.dil_w * math.ceil(math.ceil(p.Wo / p.dil_w) / tile.mw)  # tile columns per image
    th = P // p.N // tw
    for step in plan.steps:
        if not isinstance(step, KernelStep):
            continue
        spec = plan.specs[step.stage]
        args = step.launch.kernargs
        kind = kind_of(spec).kind.value
        assert list(args) == list(BY_KIND[Kind(kind)].kernarg_names)
        assert step.launch.block == (spec.block, 1, 1)
        if "P" in args:
            assert args["P"] == P
        if "TH" in args:
            assert (args["TH"], args["TW"]) == (th, tw)
            assert args["thp"] == th // p.dil_h and args["twp"] == tw // p.dil_w
        channels = {Stage.FILTER: p.Cg, Stage.OUTPUT: p.K}.get(step.stage, p.C)
        if "lanes" in args:
            assert args["lanes"] == channels // spec.vec
        for divisor in BY_KIND[Kind(kind)].magics:
            pair = (args[f"m_{divisor}"], args[f"s_{divisor}"])
            assert pair == magic_div(args[divisor])
            for n in (0, 1, args[divisor] - 1, args[divisor], 12345, 2**31 - 1):
                assert magic_apply(n, *pair) == n // args[divisor]
        gx = step.launch.grid[0]
        if kind in ("k2_reg", "k4"):
            assert args["total"] == P * args["lanes"]
            assert gx == math.ceil(args["total"] / spec.block)
        elif kind == "k2_fused":
            assert args["slots"] == spec.block // args["lanes"]
            assert gx == math.ceil(P / args["slots"])
        elif kind == "k2a":  # a tile's lanes over `span` threads, `slots` tiles a group
            assert args["span"] == min(args["lanes"], spec.block)
            assert args["slots"] == spec.block // args["span"]
            assert gx == math.ceil(P / args["slots"])
        elif kind == "k1":
            assert gx == math.ceil(p.K / spec.rows)
        elif kind == "k2_lds":
            assert args["CH"] == math.ceil(p.Cg / (spec.lds_lanes * spec.vec))
            assert args["RW"] == math.ceil(args["twp"] / spec.lds_width)
            assert step.launch.grid[:2] == (p.N * th * p.dil_w * args["RW"], p.groups * args["CH"])
            assert step.launch.shared_bytes > 0


@pytest.mark.parametrize("case", PLAN_CASES, ids=lambda c: c.id)
def test_workspace_bytes_is_the_sum_of_aligned_buffers(root, case):
    plan = dispatch(
        case.problem, target="c", tile=case.tile, cache_root=root, specs=case.dispatch_specs()
    )
    p, tile = case.problem, case.tile
    x = plan.xdtype.itemsize
    P = _tiles(p.with_batch(plan.batch_split), tile)
    sizes = {
        "U": tile.bins * p.K * p.Cg * x,
        "fs": p.K * 4,
        "V": tile.bins * p.groups * P * p.Cg * x,
        "M": tile.bins * p.groups * P * p.Kg * plan.accdtype.itemsize,
    }
    if plan.prescale is not Prescale.NONE:
        sizes["ts"] = P * 4
    assert set(plan.layout()) == set(sizes)
    assert plan.workspace_bytes == sum(-(-b // 256) * 256 for b in sizes.values())
    views = plan.backend().workspace(
        plan, np.zeros(plan.workspace_bytes, np.uint8), plan.batch_split
    )
    assert {k: v.nbytes for k, v in views.items()} == sizes


# Batch split and workspace limit ---------------------------------------------------------------
def test_batch_split_chunks_and_steps(root):
    case = next(c for c in rf.EXTRA if c.problem.N == 7)
    p, tile = case.problem, case.tile
    plan = dispatch(p, target="c", tile=tile, cache_root=root, batch_split=3)
    assert plan.batch_split == 3 and plan.chunks == [(0, 3), (3, 3), (6, 1)]
    assert set(plan.chunk_steps) == {3, 1}
    for images, steps in plan.chunk_steps.items():
        (gemm,) = [s for s in steps if isinstance(s, GemmStep)]
        assert gemm.m == _tiles(p.with_batch(images), tile)
        for step in steps:
            if isinstance(step, KernelStep) and "P" in step.launch.kernargs:
                assert step.launch.kernargs["P"] == gemm.m
    assert plan.steps == plan.chunk_steps[3]
    whole = dispatch(p, target="c", tile=tile, cache_root=root)
    assert whole.chunks == [(0, 7)] and whole.batch_split == 7
    big = dispatch(p, target="c", tile=tile, cache_root=root, batch_split=100)
    assert big.chunks == [(0, 7)]
    assert plan.workspace_bytes < whole.workspace_bytes


@pytest.mark.parametrize("split", [0, -1, 2.5, True, "2", None.__class__])
def test_batch_split_not_a_positive_integer_is_refused(root, split):
    with pytest.raises(Refused) as refused:
        dispatch(rf.EXTRA[1].problem, target="c", cache_root=root, batch_split=split)
    assert refused.value.rule == "batch_split_not_positive"


def test_workspace_limit_forces_a_smaller_split(root):
    case = next(c for c in rf.EXTRA if c.problem.N == 7)
    p, tile = case.problem, case.tile
    per = {
        n: dispatch(p, target="c", tile=tile, cache_root=root, batch_split=n).workspace_bytes
        for n in (1, 2, 3)
    }
    assert per[1] < per[2] < per[3]
    plan = dispatch(p, target="c", tile=tile, cache_root=root, workspace_limit=per[3] - 1)
    assert plan.batch_split == 2 and plan.chunks == [(0, 2), (2, 2), (4, 2), (6, 1)]
    assert plan.workspace_bytes == per[2] <= per[3] - 1
    plan = dispatch(p, target="c", tile=tile, cache_root=root, workspace_limit=per[1])
    assert plan.batch_split == 1 and len(plan.chunks) == 7
    with pytest.raises(Refused) as refused:
        dispatch(p, target="c", tile=tile, cache_root=root, workspace_limit=per[1] - 1)
    assert refused.value.rule == "workspace_over_limit"
    with pytest.raises(Refused, match="workspace_over_limit"):  # an explicit split too big
        dispatch(p, target="c", tile=tile, cache_root=root, batch_split=3, workspace_limit=per[2])


# Cache -----------------------------------------------------------------------------------------
def test_missing_kernel_names_it_and_the_build_command(root):
    built = set(rf.needed_specs())
    p = rf.problem(DType.FP16, C=64, H=9, W=9, K=16)
    k2 = next(
        s
        for s in aot_stage_specs(Stage.INPUT)
        if s not in built and s.io is DType.FP16 and s.path.value == "reg"
    )
    specs = rf.pipeline(p, k2)
    missing = next(s for s in specs if s not in built)
    with pytest.raises(KeyError) as error:
        dispatch(p, target="c", cache_root=root, specs={s.stage: s for s in specs})
    message = error.value.args[0]
    assert missing.name in message and "doit compile:c" in message


def test_no_cache_names_the_build_command(tmp_path):
    with pytest.raises(FileNotFoundError, match="doit compile:c"):
        dispatch(rf.EXTRA[2].problem, target="c", cache_root=tmp_path)


def test_index_limit_is_checked_against_the_tile_that_runs(tmp_path):
    """4 H W C elements of V at F2x2 pass 2^31 here, 2.25 H W C at F4x4 (the default) do not:
    the F4x4 dispatch gets past the refusal rules (to the missing cache), F2x2 is refused."""
    big = Problem(N=1, C=768, H=1024, W=1024, K=8, pad_h=1, pad_w=1, dtype="fp16")
    with pytest.raises(FileNotFoundError):
        dispatch(big, target="c", cache_root=tmp_path)
    with pytest.raises(Refused) as refused:
        dispatch(big, target="c", cache_root=tmp_path, tile=Tile(2, 2))
    assert refused.value.rule == "index_past_31_bits"


# Caller specs ----------------------------------------------------------------------------------
def test_caller_specs_set_the_tile(root):
    case = next(c for c in rf.forced_cases() if c.label == "split")
    small = case.problem  # Ho 13 x Wo 12: the default tile would be F4x4 too; force a check
    plan = dispatch(small, target="c", cache_root=root, specs=case.specs)
    assert plan.tile == case.tile and plan.source == "caller"
    tiny = rf.problem(case.problem.dtype, C=64, H=5, W=5, K=16)  # default tile F2x2
    plan = dispatch(tiny, target="c", cache_root=root, specs=case.specs)
    assert plan.tile == case.tile
    x, w = rf.inputs(tiny, np.random.default_rng(1))
    from wino.runtime import conv2d_reference, relative_error

    ref = conv2d_reference(x, w, (1, 1))
    assert relative_error(plan.run(x, w), ref) <= rf.issue_bound(plan.tile, tiny.dtype, plan.xdtype)


def test_caller_specs_are_put_in_pipeline_order(root):
    case = next(c for c in rf.forced_cases() if c.label == "split")
    shuffled = dict(reversed(list(case.specs.items())))
    plan = dispatch(case.problem, target="c", cache_root=root, specs=shuffled)
    assert list(plan.specs) == [Stage.FILTER, Stage.PRESCALE, Stage.INPUT, Stage.OUTPUT]


def test_inconsistent_caller_specs_are_refused(root):
    case = next(c for c in rf.forced_cases() if c.label == "split")
    specs = case.specs
    p = case.problem
    no_k2a = {k: v for k, v in specs.items() if k is not Stage.PRESCALE}
    with pytest.raises(ValueError, match="k2a goes with prescale split"):
        dispatch(p, target="c", cache_root=root, specs=no_k2a)
    other_tile = {**specs, Stage.OUTPUT: RtOutputSpec(Tile(2, 2), p.dtype, DType.FP32, 8, 256)}
    with pytest.raises(ValueError, match="mix tiles"):
        dispatch(p, target="c", cache_root=root, specs=other_tile)
    with pytest.raises(ValueError, match="tile F2x2 but the specs are F4x4"):
        dispatch(p, target="c", tile="F2x2", cache_root=root, specs=specs)
    bad_storage = {**specs, Stage.FILTER: RtFilterSpec(Tile(4, 4), DType.FP16, DType.BF16)}
    with pytest.raises(ValueError, match="stores U as bf16"):
        dispatch(p, target="c", cache_root=root, specs=bad_storage)
    swapped = {**specs, Stage.FILTER: specs[Stage.OUTPUT]}
    with pytest.raises(ValueError, match="key each spec by its own Stage"):
        dispatch(p, target="c", cache_root=root, specs=swapped)
    fp32 = rf.problem(DType.FP32, C=64, H=13, W=12, K=16)
    with pytest.raises(Refused, match="io_dtype_mismatch"):
        dispatch(fp32, target="c", cache_root=root, specs=specs)


# Tuning DB -------------------------------------------------------------------------------------
def test_tuning_db_in_the_cache_root_picks_tile_and_specs(tmp_path):
    from tests import host_cache

    case = next(c for c in rf.forced_cases() if c.label == "split")
    p = case.problem
    host_cache.build([*case.forced, *default_stage_specs(p, Tile(2, 2)).values()], tmp_path)
    assert dispatch(p, target="c", cache_root=tmp_path, tile="F2x2").source == "default pick"
    tuning.record(p, Target.C, case.tile, case.specs, 12.5, tmp_path)
    plan = dispatch(p, target="c", cache_root=tmp_path)  # tile from the DB
    assert plan.source == "tuning DB" and plan.tile == case.tile
    assert list(plan.specs) == [Stage.FILTER, Stage.PRESCALE, Stage.INPUT, Stage.OUTPUT]
    assert [s.name for s in plan.steps if isinstance(s, KernelStep)] == [
        s.name for s in case.forced
    ]
    x, w = rf.inputs(p, np.random.default_rng(3))
    from wino.runtime import conv2d_reference, relative_error

    err = relative_error(plan.run(x, w), conv2d_reference(x, w, (1, 1)))
    assert err <= rf.issue_bound(plan.tile, p.dtype, plan.xdtype)
    other = dispatch(p, target="c", cache_root=tmp_path, tile="F2x2")  # not the DB's tile
    assert other.source == "default pick" and other.tile == Tile(2, 2)


# Refusals --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "fields, rule",
    [
        (dict(stride_h=2, stride_w=2), "stride_not_1"),
        (dict(R=1, S=1, pad_h=0, pad_w=0), "not_3x3"),
        (dict(R=5, S=5, pad_h=2, pad_w=2), "not_3x3"),
        (dict(C=8, K=12, groups=3), "groups_not_dividing_c"),
        (dict(C=12, K=8, groups=3), "groups_not_dividing_k"),
        (dict(C=4096, H=1024, W=1024), "index_past_31_bits"),
    ],
)
def test_refusals_carry_their_rule(root, fields, rule):
    problem = Problem(**{**dict(N=1, C=8, H=10, W=10, K=8, pad_h=1, pad_w=1), **fields})
    with pytest.raises(Refused) as refused:
        dispatch(problem, target="c", cache_root=root)
    assert refused.value.rule == rule
    assert str(refused.value).startswith(f"[{rule}] ")


# explain ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("split", [None, 2])
def test_explain_mentions_every_step(root, split):
    case = next(c for c in rf.EXTRA if c.problem.N == 5)
    plan = dispatch(case.problem, target="c", tile=case.tile, cache_root=root, batch_split=split)
    text = plan.explain()
    for steps in plan.chunk_steps.values():
        for step in steps:
            assert step.name in text
    assert plan.tile.name in text and str(plan.workspace_bytes) in text
    assert f"batch split {plan.batch_split}" in text and plan.problem.label() in text


def test_explain_names_extents_and_shows_magic_only_as_pairs_of_divisors(root):
    import re

    from wino.magic import magic_div

    case = next(c for c in rf.EXTRA if c.problem.N == 5)
    plan = dispatch(case.problem, target="c", tile=case.tile, cache_root=root)
    text = plan.explain()
    assert not re.search(r"\b[ms]_\w+=", text)  # no raw magic fields
    assert f"cache {plan.manifest.directory} (the cache root given)" in text
    for step in plan.steps:
        if isinstance(step, KernelStep):
            args = step.launch.kernargs
            for name in (k[2:] for k in args if k.startswith("m_")):
                magic, shift = magic_div(args[name])
                assert f"/{name} ({magic:#x}, >>{shift})" in text
                assert f" {name}={args[name]}" in text
