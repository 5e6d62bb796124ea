"""wino.pick: the default pick follows the order grids/stages.yaml declares (default_pick), not a
list in Python: changing the YAML order changes the pick, and values the order leaves out are
never picked by default."""

from __future__ import annotations

import copy
import random
from dataclasses import replace

import pytest

from wino import config, grid, pick
from wino.problem import Problem
from wino.vocab import TILES, DType, K2Path, Prescale, Stage, Target, Tile

PROBLEM = Problem(N=1, C=64, H=14, W=14, K=64, pad_h=1, pad_w=1, dtype="fp16")
GPU = Target.CUDA  # fp16 storage for fp16 inputs: the prescale modes are in play


def _declare(monkeypatch, patched: str, data: dict) -> None:
    """Make ``data`` grids/<patched>.yaml's, whole and by part (the pick reads its order
    alone: wino.config.declared_part)."""
    real, real_part = config.declared, config.declared_part
    monkeypatch.setattr(config, "declared", lambda kind: data if kind == patched else real(kind))
    monkeypatch.setattr(
        config,
        "declared_part",
        lambda kind, key: data.get(key) if kind == patched else real_part(kind, key),
    )


@pytest.fixture
def declared_order(monkeypatch):
    """Replace the declared default_pick of one stage (a deep copy of grids/stages.yaml)."""
    data = copy.deepcopy(config.declared("stages"))

    def patched(stage: str, order: list[dict]) -> None:
        data["default_pick"][stage] = order
        _declare(monkeypatch, "stages", data)
        pick.candidates.cache_clear()

    yield patched
    pick.candidates.cache_clear()


def test_the_declared_order_decides(declared_order):
    k2 = pick.default_stage_specs(PROBLEM, Tile(4, 4), target=GPU)[Stage.INPUT]
    # the LDS-rows path first, with the fewest lanes that hold C
    assert (k2.path, k2.lds_lanes * k2.vec, k2.prescale) == (K2Path.LDS_ROWS, 64, Prescale.FUSED)
    declared_order(
        "k2",
        [{"vec": "descending"}, {"prescale": ["fused"]}, {"path": ["reg"]}, {"block": "ascending"}],
    )
    k2 = pick.default_stage_specs(PROBLEM, Tile(4, 4), target=GPU)[Stage.INPUT]
    # the register path's smallest fused block that holds the lanes first
    assert (k2.path, k2.block, k2.prescale) == (K2Path.REGISTER, 64, Prescale.FUSED)
    declared_order(
        "k2",
        [{"vec": "ascending"}, {"path": ["reg"]}, {"prescale": ["split"]}, {"block": "descending"}],
    )
    k2 = pick.default_stage_specs(PROBLEM, Tile(4, 4), target=GPU)[Stage.INPUT]
    assert (k2.vec, k2.block, k2.prescale) == (1, 256, Prescale.SPLIT)
    assert Stage.PRESCALE in pick.default_stage_specs(PROBLEM, Tile(4, 4), target=GPU)


def test_values_the_order_leaves_out_are_never_picked(declared_order):
    declared_order("k2", [{"vec": "descending"}, {"path": ["lds"]}])
    k2 = pick.default_stage_specs(PROBLEM, Tile(4, 4), DType.FP32)[Stage.INPUT]
    assert k2.path is K2Path.LDS
    declared_order("k2", [{"vec": "descending"}, {"path": ["reg"]}, {"block": [32]}])
    with pytest.raises(pick.Refused) as refusal:
        pick.default_stage_specs(PROBLEM, Tile(4, 4), target=GPU)
    assert refusal.value.rule == "no_spec_in_grid"
    assert "no k2 kernel of the grid for F4x4 fp16/fp16" in refusal.value.message


@pytest.mark.parametrize(
    "change, rule",
    [(dict(R=1, S=1, pad_h=0, pad_w=0), "not_3x3"), (dict(stride_h=2, stride_w=2), "stride_not_1")],
)
def test_a_problem_no_kernel_serves_is_refused_by_its_own_rule(change, rule):
    """Not no_spec_in_grid listing every spec's identical reason: the problem rule, once."""
    problem = replace(PROBLEM, **change)
    with pytest.raises(pick.Refused) as refusal:
        pick.default_stage_specs(problem, Tile(4, 4), target=GPU)
    assert refusal.value.rule == rule
    assert "tried" not in refusal.value.message


def test_every_candidate_is_in_the_grid_and_the_order_is_total():
    for tile in (Tile(2, 2), Tile(6, 4)):
        for stage in (Stage.FILTER, Stage.PRESCALE, Stage.INPUT, Stage.OUTPUT):
            ranked = pick.candidates(stage, tile, DType.FP16, DType.FP16)
            assert ranked, (stage, tile)
            assert len({s.name for s in ranked}) == len(ranked)
            # vec is the first axis of K1 and K2a; K2 is led by the path (LDS rows, then the
            # register path) and the held window before the streamed one, then vec; K4 by the M
            # dtype (fp16 first), then vec 2, 4, 8, 1
            order, paths = [2, 4, 8, 1], [K2Path.LDS_ROWS, K2Path.REGISTER]
            keys = [
                (s.accdtype is not DType.FP16, order.index(s.vec))
                if stage is Stage.OUTPUT
                else (paths.index(s.path), s.stream, -s.vec)
                if stage is Stage.INPUT
                else -s.vec
                for s in ranked
            ]
            assert keys == sorted(keys)


def _sweep():
    """Problems x tiles x dtypes: channel extents that decide vec, blocks and the prescale
    mode (wide C takes the split prescale), groups and dilation."""
    shapes = [(1, 1, 1), (3, 5, 1), (4, 8, 1), (8, 8, 2), (16, 32, 1), (64, 64, 1), (96, 48, 3)]
    shapes += [(256, 128, 1), (512, 512, 1), (1024, 256, 1), (2048, 64, 1), (4096, 64, 4)]
    for c, k, g in shapes:
        for dtype in (DType.FP16, DType.BF16, DType.FP32):
            problem = Problem(N=2, C=c, H=9, W=11, K=k, groups=g, dil_h=2, dtype=dtype)
            for tile in TILES:
                yield problem, tile


def _grid_pick(problem, tile, target):
    try:
        return pick.default_stage_specs(problem, tile, target=target)
    except pick.Refused as refusal:
        return refusal.rule


@pytest.mark.parametrize("target", [Target.C, Target.CUDA])
def test_a_manifest_ranking_picks_what_the_grid_picks(target):
    """The runtime's pick (among the kernels a full manifest holds, in any order) equals the
    grid's pick, the oracle, over the sweep (a target's manifest holds that target's grid)."""
    held = list(grid.aot_stage_specs(target=target))
    random.Random(7).shuffle(held)
    ranking = pick.Ranking(held)
    compared = 0
    for problem, tile in _sweep():
        expected = _grid_pick(problem, tile, target)
        try:
            got = pick.default_stage_specs(problem, tile, ranking=ranking, target=target)
        except pick.Refused as refusal:
            got = refusal.rule
        assert got == expected, (problem, tile)
        compared += isinstance(expected, dict)
    assert compared > 100  # most of the sweep is served, not refused


def test_a_manifest_ranking_picks_the_best_it_holds_else_the_grid_names_the_kernel():
    full = pick.default_stage_specs(PROBLEM, Tile(4, 4), target=Target.CUDA)
    k2 = full[Stage.INPUT]
    second = next(
        s
        for s in pick.candidates(Stage.INPUT, Tile(4, 4), DType.FP16, DType.FP16)
        if s != k2 and s.prescale is Prescale.FUSED and s.vec <= k2.vec
    )
    others = [s for s in full.values() if s is not k2]
    ranking = pick.Ranking([*others, second])
    got = pick.default_stage_specs(PROBLEM, Tile(4, 4), ranking=ranking, target=Target.CUDA)
    assert got[Stage.INPUT] == second
    lacking = pick.Ranking(others)  # no k2 at all: the grid's pick, which names the missing k2
    assert pick.default_stage_specs(PROBLEM, Tile(4, 4), ranking=lacking, target="cuda") == full


#: The GPUs' pick before the c target's storage table (grids/targets.yaml): 16-bit inputs store
#: fp16 with a prescale (fused where one workgroup holds C/vec lanes, else split).
def _gpu_pick_of_old(problem, tile):
    xdtype = DType.FP32 if problem.dtype is DType.FP32 else DType.FP16
    # hip declares neither a storage table nor an order of its own: grids/stages.yaml's order
    return pick.default_stage_specs(problem, tile, xdtype=xdtype, target=Target.HIP)


def test_cuda_picks_are_unchanged_and_prescale_16bit_storage():
    compared = 0
    for problem, tile in _sweep():
        try:
            expected = _gpu_pick_of_old(problem, tile)
        except pick.Refused as refusal:
            assert _grid_pick(problem, tile, Target.CUDA) == refusal.rule
            continue
        got = pick.default_stage_specs(problem, tile, target=Target.CUDA)
        assert got == expected, (problem, tile)
        if problem.dtype is not DType.FP32:
            assert got[Stage.INPUT].xdtype is DType.FP16
            assert got[Stage.INPUT].prescale is not Prescale.NONE
        compared += 1
    assert compared > 100


def test_c_picks_fp32_storage_for_every_dtype_unscaled_only_for_fp16():
    compared = 0
    for problem, tile in _sweep():
        try:
            got = pick.default_stage_specs(problem, tile)  # the c target, the default
        except pick.Refused:
            continue
        assert got == pick.default_stage_specs(problem, tile, target="c")
        assert {s.xdtype for s in got.values() if hasattr(s, "xdtype")} == {DType.FP32}
        unscaled = got[Stage.INPUT].prescale is Prescale.NONE
        assert unscaled == (problem.dtype is DType.FP16)  # fp32's range needs the scale for bf16
        assert unscaled <= (Stage.PRESCALE not in got)
        assert all(s.io is problem.dtype for s in got.values())  # x read, y written in io
        compared += 1
    assert compared > 100


def test_default_xdtype_follows_the_declared_target_table():
    assert [pick.default_xdtype(d, Target.C) for d in DType] == [DType.FP32] * 3
    cuda = [pick.default_xdtype(d, Target.CUDA) for d in DType]
    assert cuda == [DType.FP32 if d is DType.FP32 else DType.FP16 for d in DType]
    assert [pick.default_xdtype(d, Target.HIP) for d in DType] == cuda  # undeclared: the GPUs'


def test_a_target_orders_a_stage_its_own_way_where_it_declares_one():
    """grids/targets.yaml's default_pick under c replaces grids/stages.yaml's K4 order there
    (the widest vector first), and only there: K1 and K2 follow stages.yaml's order on every
    target (over that target's grid), and cuda's K4 keeps vec 2 first."""
    declared = config.declared("targets")["targets"]
    assert set(declared["c"]["default_pick"]) == {"k4"}
    assert "default_pick" not in declared["cuda"]
    for stage in Stage:
        if stage.short in config.declared("stages")["default_pick"]:
            stages_order = config.declared("stages")["default_pick"][stage.short]
            assert pick.declared_order(stage, Target.CUDA) == stages_order
            assert pick.declared_order(stage, None) == stages_order
    problem = Problem(N=8, C=64, H=56, W=56, K=64, pad_h=1, pad_w=1, dtype="fp32")
    c = pick.default_stage_specs(problem, Tile(4, 4), target=Target.C)
    cuda = pick.default_stage_specs(problem, Tile(4, 4), target=Target.CUDA)
    assert (c[Stage.OUTPUT].vec, cuda[Stage.OUTPUT].vec) == (8, 2)
    assert c[Stage.FILTER] == cuda[Stage.FILTER]
    # K2: the same order, over each target's grid: the c grid holds F4x4's vec-8 window (the
    # GPUs' input_window_registers rule refuses it there)
    assert (c[Stage.INPUT].vec, cuda[Stage.INPUT].vec) == (8, 4)
    assert c[Stage.INPUT] == cuda[Stage.INPUT].replace(vec=8)
    narrow = Problem(N=1, C=64, H=9, W=9, K=12, pad_h=1, pad_w=1, dtype="fp32")
    # 8 does not divide K = 12: the next of the order
    assert pick.default_stage_specs(narrow, Tile(4, 4))[Stage.OUTPUT].vec == 4


def test_every_c_k4_candidate_ranks_the_widest_vector_first():
    for tile in (Tile(2, 2), Tile(4, 4), Tile(6, 6)):
        for io in DType:
            ranked = pick.candidates(Stage.OUTPUT, tile, io, DType.FP32, target=Target.C)
            assert ranked
            order = [8, 4, 2, 1]
            keys = [(s.accdtype is not DType.FP16, order.index(s.vec)) for s in ranked]
            assert keys == sorted(keys)
            assert ranked[0].vec == max(s.vec for s in ranked)


def test_a_declared_target_order_is_data(monkeypatch):
    """An order declared for a target in grids/targets.yaml changes that target's pick and no
    other's (here hip's K2 made to prefer the split prescale)."""
    data = copy.deepcopy(config.declared("targets"))
    data["targets"]["hip"]["default_pick"] = {
        "k2": [{"vec": "descending"}, {"path": ["reg"]}, {"prescale": ["split"]}]
    }
    _declare(monkeypatch, "targets", data)
    config.validate(data, "targets", "patched targets.yaml")  # the schema admits it
    pick.candidates.cache_clear()
    try:
        hip = pick.default_stage_specs(PROBLEM, Tile(4, 4), target=Target.HIP)
        cuda = pick.default_stage_specs(PROBLEM, Tile(4, 4), target=Target.CUDA)
    finally:
        pick.candidates.cache_clear()  # no patched ranking outlives the test
    assert hip[Stage.INPUT].prescale is Prescale.SPLIT and Stage.PRESCALE in hip
    assert cuda[Stage.INPUT].prescale is Prescale.FUSED and Stage.PRESCALE not in cuda
    data["targets"]["hip"]["default_pick"] = {"k9": []}
    with pytest.raises(config.ConfigError, match="default_pick"):
        config.validate(data, "targets", "patched targets.yaml")
