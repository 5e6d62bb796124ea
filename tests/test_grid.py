"""The AOT grid: expansion, accepted and refused specs, and the default per-problem pick."""

from __future__ import annotations

import copy
import functools
from dataclasses import replace

import pytest

from wino import config, grid
from wino.fused import FusedBudget
from wino.launch import largest_split, stage_launch
from wino.pick import default_stage_specs, default_xdtype
from wino.problem import Problem
from wino.refusals import Refused, check_problem, lds_bytes, rule_book, rules, spec_namespace
from wino.specs import RtFusedSpec, RtInputSpec, RtOutputSpec
from wino.vocab import TILES, VECS, DType, K2Path, Prescale, Stage, Target, Tile

STAGES = grid.GRID_STAGES
DTYPES = (DType.FP16, DType.BF16, DType.FP32)
FUSED_BLOCKS = (64, 128, 256, 512, 1024)


def test_grid_size_and_coverage():
    total = grid.aot_stage_specs()
    assert 200 <= len(total) <= 5000, f"{len(total)} specs: expected a few hundred"
    assert len(total) == sum(len(grid.aot_stage_specs(s)) for s in STAGES)
    for stage in STAGES:
        specs = grid.aot_stage_specs(stage)
        assert specs and all(s.stage is stage for s in specs)
        tiles = {s.tile for s in specs}
        if stage is Stage.FUSED:  # F2x2, F4x4 and one large tile (docs/FUSED.md)
            assert tiles >= {Tile(2, 2), Tile(4, 4)} and tiles & {Tile(6, 4), Tile(4, 6)}
        else:
            assert tiles == set(TILES), f"{stage.short}: a tile is missing"
        assert {s.io for s in specs} >= {DType.FP16, DType.BF16}
    for stage in (Stage.FILTER, Stage.INPUT, Stage.OUTPUT):
        assert {s.io for s in grid.aot_stage_specs(stage)} == set(DTYPES)


def test_names_unique_and_lookup():
    names = [s.name for s in grid.aot_stage_specs()]
    assert len(names) == len(set(names))
    refused = [r.spec.name for r in grid.refused_stage_specs()]
    assert not set(names) & set(refused) and len(refused) == len(set(refused))
    first = grid.aot_stage_specs()[0]
    assert grid.in_grid(first) and grid.spec_by_name(first.name) == first
    with pytest.raises(KeyError, match="no kernel named 'k9_nope'"):
        grid.spec_by_name("k9_nope")


@pytest.mark.parametrize("target", list(Target), ids=lambda t: t.value)
def test_no_accepted_spec_breaks_any_rule(target):
    """A target's grid breaks none of the rules that apply on that target."""
    for spec in grid.aot_stage_specs(target=target):
        ns = spec_namespace(spec)
        stage_rules = rules("spec", spec.stage.short)
        broken = [r.id for r in stage_rules if r.applies_to(target) and r.fires(ns)]
        assert not broken, f"{spec.name} is accepted on {target.value} but breaks {broken}"


def test_the_gpu_register_rules_cull_only_the_gpu_grids():
    """input_window_registers and window_registers name cuda and hip: the c grid holds the
    vec-8 windows they refuse there (the host's window is a stack array; 8 fp32 lanes are one
    AVX2 register), the GPU grids none of them."""
    k2 = RtInputSpec(tile=Tile(4, 4), io=DType.FP32, xdtype=DType.FP32, vec=8, block=64)
    k2 = k2.replace(prescale=Prescale.FUSED)
    k4 = RtOutputSpec(tile=Tile(6, 6), io=DType.FP32, vec=8)
    for spec, rule in ((k2, "input_window_registers"), (k4, "window_registers")):
        assert grid.in_grid(spec, Target.C) and grid.spec_targets(spec) == (Target.C,)
        for gpu in (Target.CUDA, Target.HIP):
            assert not grid.in_grid(spec, gpu)
            assert grid.spec_refusal(spec, gpu).rule == rule
            (item,) = [r for r in grid.refused_stage_specs(gpu) if r.spec == spec]
            assert item.refusal.rule == rule and item.target is gpu
        assert grid.spec_refusal(spec, Target.C) is None
        assert grid.spec_refusal(spec).rule == rule  # no target: every rule applies
    assert grid.in_grid(k2) and k2 not in [r.spec for r in grid.refused_stage_specs()]
    gpu = {s.name for s in grid.aot_stage_specs(target=Target.CUDA)}
    c = {s.name for s in grid.aot_stage_specs(target=Target.C)}
    assert gpu < c and c == {s.name for s in grid.aot_stage_specs()}  # the host holds them all


def test_the_host_keeps_bf16_at_vec_8():
    """The c grid holds bf16 K2 and K2a at vec 8 (the host widens bf16 a whole vector at once:
    once excluded there, slower than vec 4 when widened lane by lane), and its default pick
    for bf16 is fp32's mode."""
    f4 = RtInputSpec(tile=Tile(4, 4), io=DType.BF16, xdtype=DType.FP32, vec=8, block=64)
    f4 = f4.replace(prescale=Prescale.FUSED)
    assert grid.spec_targets(f4) == (Target.C,)  # the GPUs' register rule refuses it there
    k2a = [s for s in grid.aot_stage_specs(Stage.PRESCALE, Target.C) if s.io is DType.BF16]
    assert 8 in {s.vec for s in k2a}
    problem = Problem(N=1, C=64, H=9, W=9, K=64, dtype="bf16")
    picks = default_stage_specs(problem, Tile(4, 4), target=Target.C)
    assert picks[Stage.INPUT] == f4
    fp32 = default_stage_specs(replace(problem, dtype=DType.FP32), Tile(4, 4), target=Target.C)
    assert picks[Stage.INPUT] == fp32[Stage.INPUT].replace(io=DType.BF16)


def test_an_exclusion_with_targets_applies_on_those_targets_only(declared_stages):
    """exclude's ``targets``: the entry leaves the spec out of those targets' grids only,
    listed there as refused by grid_exclude; the other targets keep it."""
    data = _minimal_k2(vec=[1, 2])
    data["exclude"] = [{"stage": "k2", "targets": ["c"], "vec": 2, "reason": "slow here"}]
    accepted, refused = declared_stages(data)
    assert [s.vec for s in accepted[Stage.INPUT]] == [1, 2] and not refused
    assert [s.vec for s in grid.aot_stage_specs(Stage.INPUT, Target.C)] == [1]
    (item,) = grid.refused_stage_specs(Target.C)
    assert (item.spec.vec, item.refusal.rule, item.target) == (2, "grid_exclude", Target.C)
    assert "exclude[0]: slow here" in item.refusal.message
    for gpu in (Target.CUDA, Target.HIP):
        assert [s.vec for s in grid.aot_stage_specs(Stage.INPUT, gpu)] == [1, 2]
        assert not grid.refused_stage_specs(gpu)
    (wide,) = [s for s in accepted[Stage.INPUT] if s.vec == 2]
    assert grid.spec_targets(wide) == (Target.CUDA, Target.HIP)


def test_accepted_specs_keep_the_hard_limits():
    """The limits DESIGN.md states, checked directly (not through the rule file)."""
    params = rule_book()[0]
    for spec in grid.aot_stage_specs():
        assert 32 <= spec.block <= 1024 and spec.block % 32 == 0, spec.name
        assert getattr(spec, "vec", 1) in VECS  # the fused kernel has no channel vector
        if isinstance(spec, RtFusedSpec):  # the MMA shape and the sm_90 block budget
            budget = FusedBudget.of(spec)
            assert spec.tiles % 16 == 0 and spec.kblock % 8 == 0 and spec.cchunk % 16 == 0
            assert budget.acc_per_thread <= 128 and budget.smem_bytes <= 227 * 1024, spec.name
        if isinstance(spec, RtInputSpec) and spec.path is K2Path.LDS:
            lanes = spec.lds_lanes
            assert lanes > 0 and lanes & (lanes - 1) == 0, spec.name
            assert spec.lds_width >= 1 and spec.block == lanes * spec.lds_width, spec.name
            assert 0 < lds_bytes(spec) <= params["lds_bytes_limit"], spec.name
            assert spec.prescale is not Prescale.FUSED, spec.name
        if isinstance(spec, RtInputSpec):
            # the range guarantee (tests/test_range.py): every K2 scales its tiles, but for fp16
            # io stored in fp32 (fp32's range holds every transformed fp16 tile)
            unscaled_ok = (spec.io, spec.xdtype) == (DType.FP16, DType.FP32)
            assert (spec.prescale is Prescale.NONE) == unscaled_ok, spec.name
            assert spec.xdtype in (spec.io, DType.FP16, DType.FP32), spec.name
            if spec.path is K2Path.REGISTER:
                assert spec.lds_lanes == spec.lds_width == 0, spec.name


@pytest.mark.parametrize("target", [None, *Target], ids=lambda t: getattr(t, "value", "any"))
def test_refused_specs_carry_their_rule(target):
    ids = {r.id for r in rule_book()[1]} | {"grid_exclude"}
    refused = grid.refused_stage_specs(target)
    assert refused, "the grid declares no spec the rules cull: the refusal listing is untested"
    for item in refused:
        assert item.refusal.rule in ids and item.refusal.message
        assert item.target is not None and item.target is (target or item.target)
        assert not grid.in_grid(item.spec, target)
        if item.refusal.rule != "grid_exclude":
            again = grid.spec_refusal(item.spec, item.target)
            assert again is not None and again.rule == item.refusal.rule
        assert item.subgrid in {
            s["name"] for s in config.declared("stages")["stages"][item.spec.stage.short]
        }


# Expansion of a modified grid ----------------------------------------------------------------
@pytest.fixture
def declared_stages(monkeypatch):
    """Expand a modified copy of grids/stages.yaml; the caches are reset before and after."""
    real = config.declared

    def use(data):
        monkeypatch.setattr(
            config, "declared", lambda kind: data if kind == "stages" else real(kind)
        )
        grid.expand.cache_clear()
        grid._names.cache_clear()
        return grid.expand()

    yield use
    monkeypatch.undo()
    grid.expand.cache_clear()
    grid._names.cache_clear()


def _minimal_k2(**axes):
    subgrid = dict(
        name="only",
        tile=["F2x2"],
        io=["fp32"],
        xdtype=["fp32"],
        vec=[1],
        block=[256],
        path=["reg"],
        prescale=["none"],
    )
    subgrid.update(axes)
    return {"format": 1, "stages": {"k2": [subgrid]}}


def test_refused_point_does_not_hide_an_accepted_twin(declared_stages):
    accepted, refused = declared_stages(_minimal_k2(lds_lanes=[16, 0], lds_width=[0]))
    assert [s.name for s in accepted[Stage.INPUT]] == ["k2_f2x2_ifp32_xfp32_v1_b256_reg_pnone"]
    assert [r.refusal.rule for r in refused] == ["reg_with_lds_knobs"]


def test_exclusions_are_listed_as_refused(declared_stages):
    data = _minimal_k2(vec=[1, 2])
    data["exclude"] = [{"stage": "k2", "vec": 2, "reason": "not worth a binary"}]
    accepted, refused = declared_stages(data)
    assert [s.vec for s in accepted[Stage.INPUT]] == [1]
    assert [(r.spec.vec, r.refusal.rule) for r in refused] == [(2, "grid_exclude")]
    assert "exclude[0]: not worth a binary" in refused[0].refusal.message


def test_subgrid_targets_build_on_those_targets_only(declared_stages):
    """A sub-grid's ``targets``: its specs are in those targets' grids and in the union, and
    nowhere else; a sub-grid without it serves every target."""
    data = _minimal_k2()
    data["stages"]["k2"].append(dict(_minimal_k2(vec=[2])["stages"]["k2"][0], name="host"))
    data["stages"]["k2"][1]["targets"] = ["c"]
    accepted, refused = declared_stages(data)
    assert [s.vec for s in accepted[Stage.INPUT]] == [1, 2] and not refused
    assert [s.vec for s in grid.aot_stage_specs(Stage.INPUT, Target.C)] == [1, 2]
    for gpu in (Target.CUDA, Target.HIP):
        assert [s.vec for s in grid.aot_stage_specs(Stage.INPUT, gpu)] == [1]
        assert not grid.refused_stage_specs(gpu)  # not listed there: not refused either
    (wide,) = [s for s in accepted[Stage.INPUT] if s.vec == 2]
    assert grid.spec_targets(wide) == (Target.C,) and not grid.in_grid(wide, Target.CUDA)


def test_a_spec_refused_on_every_listed_target_is_refused(declared_stages):
    """A c-only sub-grid point that a c rule refuses is refused in the union, with that rule
    (not a GPU rule that would have fired had it been listed there)."""
    data = _minimal_k2(vec=[8], tile=["F4x4"], prescale=["split"], block=[64, 2000])
    data["stages"]["k2"][0]["targets"] = ["c"]
    accepted, refused = declared_stages(data)
    assert [s.block for s in accepted[Stage.INPUT]] == [64]  # input_window_registers: GPUs'
    assert [(r.spec.block, r.refusal.rule, r.target) for r in refused] == [
        (2000, "block_too_large", Target.C)
    ]
    assert not grid.refused_stage_specs(Target.CUDA)


def test_unknown_subgrid_target_is_a_schema_error():
    data = copy.deepcopy(config.declared("stages"))
    data["stages"]["k2"][0]["targets"] = ["cpu"]
    where = r"at \$\.stages\.k2\[0\]\.targets\[0\]: .cpu. is not one of"
    with pytest.raises(config.ConfigError, match=where):
        config.validate(data, "stages", "grids/stages.yaml")


def test_duplicate_subgrid_names_are_config_errors(declared_stages):
    data = _minimal_k2()
    data["stages"]["k2"].append(copy.deepcopy(data["stages"]["k2"][0]))
    with pytest.raises(config.ConfigError, match="sub-grid names must be unique"):
        declared_stages(data)


# The default pick ------------------------------------------------------------------------------
def _problem(c: int, k: int = 64, groups: int = 1, dtype: DType = DType.FP16, n: int = 2):
    return Problem(N=n, C=c, K=k, H=10, W=9, pad_h=1, pad_w=1, groups=groups, dtype=dtype)


def _assert_narrowed(problem: Problem, tile, picks, target: Target = Target.C) -> None:
    """The default pick is in the target's grid and narrowed to the problem's channel extents."""
    in_grid = functools.partial(grid.in_grid, target=target)
    assert all(in_grid(s) for s in picks.values()), [s.name for s in picks.values()]
    assert list(picks) == [s for s in STAGES if s in picks]
    k1, k2, k4 = picks[Stage.FILTER], picks[Stage.INPUT], picks[Stage.OUTPUT]
    assert all(s.tile == tile and s.io is problem.dtype for s in picks.values())
    assert problem.Cg % k1.vec == 0 and problem.Cg % k2.vec == 0 and problem.Kg % k4.vec == 0
    assert k1.xdtype is k2.xdtype
    assert (Stage.PRESCALE in picks) == (k2.prescale is Prescale.SPLIT)
    if Stage.PRESCALE in picks:
        assert problem.C % picks[Stage.PRESCALE].vec == 0
    for spec in picks.values():
        stage_launch(spec, problem)
    if k2.path is K2Path.LDS_ROWS:
        _assert_fewest_lanes(problem, k2, in_grid)
        return
    lanes = problem.C // k2.vec
    if k2.prescale is Prescale.NONE:  # fp16 io stored in fp32 (the c target's pick)
        assert (problem.dtype, k2.xdtype) == (DType.FP16, DType.FP32)
    elif k2.prescale is Prescale.FUSED:
        held = [b for b in FUSED_BLOCKS if b >= lanes and in_grid(replace(k2, block=b))]
        assert lanes <= k2.block == min(held)  # the smallest the grid holds (exclude: F6x4)
        assert lanes <= 1024 and not (tile.bins > 36 and lanes > 512)
    else:
        assert k2.prescale is Prescale.SPLIT
        fused = [replace(k2, block=b, prescale=Prescale.FUSED) for b in FUSED_BLOCKS if b >= lanes]
        assert not any(in_grid(s) for s in fused), (
            f"{problem.label()} {tile}: split picked although a fused kernel fits"
        )
    wider = [v for v in VECS if v > k2.vec and problem.Cg % v == 0]
    for v in wider:  # narrowing keeps the widest vec the grid serves
        unscaled = k2.prescale is Prescale.NONE
        wide = replace(k2, vec=v, block=256, prescale=Prescale.NONE if unscaled else Prescale.SPLIT)
        assert not in_grid(wide), (v, k2.name)


def _assert_fewest_lanes(problem: Problem, k2, in_grid) -> None:
    """An LDS-rows pick stages all C (the fused prescale) in the smallest region that holds
    them: the grid's next narrower region (half the lanes, twice the tiles) would not."""
    assert k2.prescale is Prescale.FUSED and problem.C <= k2.lds_lanes * k2.vec
    narrower = replace(k2, lds_lanes=k2.lds_lanes // 2, lds_width=k2.lds_width * 2)
    assert not in_grid(narrower) or problem.C > narrower.lds_lanes * k2.vec, k2.name


@pytest.mark.parametrize("target", [Target.C, Target.CUDA], ids=lambda t: t.value)
@pytest.mark.parametrize("tile", TILES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.short)
def test_default_pick_is_narrowed(tile, dtype, target):
    for c, k, groups in [
        (3, 64, 1),
        (8, 8, 1),
        (12, 20, 2),
        (64, 64, 1),
        (100, 36, 4),
        (256, 256, 1),
        (520, 128, 1),
        (1024, 64, 1),
        (1100, 64, 1),
        (2048, 64, 1),
        (4096, 64, 2),
        (8192, 64, 1),
        (16384, 64, 1),
    ]:
        problem = _problem(c, k, groups, dtype)
        picks = default_stage_specs(problem, tile, target=target)
        assert picks[Stage.INPUT].xdtype is default_xdtype(dtype, target)
        _assert_narrowed(problem, tile, picks, target)


@pytest.mark.parametrize("tile", TILES, ids=str)
def test_default_pick_fused_for_narrow_and_split_for_wide_c(tile):
    """The GPUs' pick (fp16 storage for fp16 inputs; the c target stores fp32, unscaled)."""
    narrow = default_stage_specs(_problem(64), tile, target=Target.CUDA)[Stage.INPUT]
    if tile in (Tile(2, 2), Tile(4, 4)):  # the LDS-rows path, the fewest lanes that hold C
        assert narrow.path is K2Path.LDS_ROWS and narrow.prescale is Prescale.FUSED
        assert narrow.lds_lanes * narrow.vec == 64
    else:
        lanes = 64 // narrow.vec  # the smallest block that holds them (64 at least)
        assert (narrow.prescale, narrow.block) == (Prescale.FUSED, max(64, lanes))
    wide = default_stage_specs(_problem(16384), tile, target=Target.CUDA)  # past 1024 lanes
    assert wide[Stage.INPUT].prescale is Prescale.SPLIT and Stage.PRESCALE in wide


def test_default_pick_dtype_argument_overrides_the_problem():
    problem = _problem(64, dtype=DType.FP32)
    for dtype in DTYPES:
        assert default_stage_specs(problem, TILES[1], dtype) == default_stage_specs(
            replace(problem, dtype=dtype), TILES[1]
        )


def test_default_pick_with_bf16_storage():
    picks = default_stage_specs(_problem(64, dtype=DType.BF16), TILES[1], xdtype=DType.BF16)
    assert picks[Stage.INPUT].prescale is Prescale.FUSED and picks[Stage.INPUT].xdtype is DType.BF16
    assert picks[Stage.FILTER].xdtype is DType.BF16 and all(map(grid.in_grid, picks.values()))


@pytest.mark.parametrize("target", [Target.C, Target.CUDA], ids=lambda t: t.value)
def test_default_pick_for_every_public_layer(public_problems, target):
    served = 0
    for base in public_problems:
        try:
            check_problem(base)
        except Refused:
            continue
        for dtype in DTYPES:
            problem = replace(base, dtype=dtype)
            for tile in TILES:
                picks = default_stage_specs(problem, tile, target=target)
                _assert_narrowed(problem.with_batch(1), tile, picks, target)
                split = largest_split(problem, tile, None, picks[Stage.INPUT].xdtype, DType.FP32)
                for spec in picks.values():  # the first chunk launches within the rules
                    stage_launch(spec, problem.with_batch(split))
                served += 1
    assert served >= 10 * len(TILES) * len(DTYPES)


def test_a_subgrid_expands_in_the_same_order_whatever_its_key_order():
    """A build's stamp of grids/stages.yaml stores each mapping's keys sorted; a process that
    reads the grid from it must expand every sub-grid in the YAML's order (the default pick
    breaks ties by declaration order): the axes run in the spec's field order, then the
    declared axes' order, not the mapping's."""
    from wino.specs import spec_from_fields

    def names(subgrid, stage):
        return [spec_from_fields(stage, p).name for p in grid._points(subgrid, stage)]

    for stage in grid.GRID_STAGES:
        for subgrid in config.declared("stages")["stages"].get(stage.short, []):
            stamped = dict(sorted(subgrid.items()))
            if "axes" in stamped:
                stamped["axes"] = dict(sorted(stamped["axes"].items(), reverse=True))
            assert names(stamped, stage) == names(subgrid, stage), subgrid["name"]


def test_an_unknown_subgrid_key_is_named_by_the_spec_not_a_sort():
    """A key that is neither a field nor a declared axis sorts after them and reaches
    spec_from_fields, whose message names it (not a TypeError from the expansion order)."""
    from wino.specs import spec_from_fields

    subgrid = {"name": "typo", "tile": ["F2x2"], "vecs": [2], "vec": [1]}
    points = list(grid._points(subgrid, Stage.INPUT))
    assert list(points[0]) == ["tile", "vec", "vecs"]
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['vecs'\]"):
        spec_from_fields(Stage.INPUT, points[0])
