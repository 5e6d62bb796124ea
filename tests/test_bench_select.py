"""Candidates per stage (grid specs of the tile and io dtype that fit, K1/K2 storage agreeing,
K2a only with a split K2, K4 checked with its tile scale) and the pick by timing."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from wino.bench import candidates as cands
from wino.bench.select import assemble, fastest, select
from wino.grid import in_grid
from wino.launch import stage_launch
from wino.pick import default_stage_specs
from wino.problem import Problem
from wino.vocab import TILES, DType, Prescale, Stage, Target, Tile

SMALL = Problem(N=2, C=16, H=10, W=10, K=8, pad_h=1, pad_w=1)


def _with(dtype: DType) -> Problem:
    return replace(SMALL, dtype=dtype)


@pytest.mark.parametrize("dtype", list(DType))
@pytest.mark.parametrize("tile", [Tile(2, 2), Tile(4, 4), Tile(6, 2)])
def test_candidates_fit_and_keep_one_storage(dtype, tile):
    problem = _with(dtype)
    for family in cands.families(problem, tile):
        by = family.by_stage
        for specs in by.values():
            for spec in specs:
                assert in_grid(spec) and spec.tile == tile and spec.io is dtype
                stage_launch(spec, problem, tile_scale=family.scaled)  # fits (no Refused)
        assert {s.xdtype for s in by[Stage.FILTER] + by[Stage.INPUT]} == {family.xdtype}
        assert {s.prescale is Prescale.NONE for s in by[Stage.INPUT]} == {not family.scaled}
        split = any(s.prescale is Prescale.SPLIT for s in by[Stage.INPUT])
        assert bool(by[Stage.PRESCALE]) == split


def test_storage_families_per_dtype():
    assert [f.xdtype for f in cands.families(_with(DType.FP32), Tile(4, 4))] == [DType.FP32]
    fp16 = [f.xdtype for f in cands.families(_with(DType.FP16), Tile(4, 4), target=Target.CUDA)]
    assert fp16 == [DType.FP16, DType.FP32]  # the target's default storage first
    fp16 = [f.xdtype for f in cands.families(_with(DType.FP16), Tile(4, 4), target=Target.C)]
    assert fp16 == [DType.FP32, DType.FP16]
    bf16 = [f.xdtype for f in cands.families(_with(DType.BF16), Tile(4, 4), target=Target.CUDA)]
    assert bf16 == [DType.FP16, DType.BF16, DType.FP32]
    bf16 = [f.xdtype for f in cands.families(_with(DType.BF16), Tile(4, 4), target=Target.C)]
    assert bf16 == [DType.FP32, DType.BF16, DType.FP16]


@pytest.mark.parametrize("target", [Target.C, Target.CUDA], ids=lambda t: t.value)
@pytest.mark.parametrize("dtype", list(DType))
def test_the_default_pick_comes_first_and_limit_keeps_it(dtype, target):
    problem = _with(dtype)
    for tile in TILES:
        default = default_stage_specs(problem, tile, target=target)
        family = cands.families(problem, tile, limit=2, target=target)[0]
        for stage, spec in default.items():
            assert family.by_stage[stage][0] == spec
            assert len(family.by_stage[stage]) <= 2


def test_only_cached_kernels_are_candidates():
    problem = _with(DType.FP32)
    default = default_stage_specs(problem, Tile(4, 4))
    names = {spec.name for spec in default.values()}
    (family,) = cands.families(problem, Tile(4, 4), names)
    assert family.specs() == set(default.values())
    assert cands.families(problem, Tile(2, 2), names) == []


def test_needed_specs_cover_every_family():
    problems = [_with(d) for d in DType]
    needed = cands.needed_specs(problems, [Tile(2, 2), Tile(4, 4)], limit=2)
    for problem in problems:
        for tile in (Tile(2, 2), Tile(4, 4)):
            assert set(default_stage_specs(problem, tile).values()) <= needed
    one_by_one = cands.needed_specs(problems, [Tile(2, 2), Tile(4, 4)], limit=1)
    assert one_by_one < needed


def test_refused_problems_need_nothing():
    strided = replace(SMALL, stride_h=2, stride_w=2)
    assert cands.needed_specs([strided], TILES) == set()


# Selection by timing, with a fake prober ------------------------------------------------------
class FakeProber:
    """Times a probe's stage from a table keyed by the stage's spec name (1.0 when absent);
    records what it was asked."""

    def __init__(self, times: dict[str, float]):
        self.times, self.asked = times, []

    def time(self, specs, stage):
        self.asked.append((stage, {s.short: spec.name for s, spec in specs.items()}))
        if stage is Stage.GEMM:
            return 5.0
        return self.times.get(specs[stage].name, 1.0)

    def plan(self, specs):
        return ("plan", tuple(spec.name for spec in specs.values()))


def _family(dtype=DType.FP16):
    return cands.family(_with(dtype), Tile(4, 4), cands.default_xdtype(dtype))


def test_select_takes_the_fastest_of_each_stage():
    family = _family(DType.FP32)
    k1, k2, k4 = (family.by_stage[s][-1] for s in (Stage.FILTER, Stage.INPUT, Stage.OUTPUT))
    prober = FakeProber({k1.name: 0.5, k2.name: 0.25, k4.name: 0.125})
    pick = select(family, prober)
    assert pick.specs == {Stage.FILTER: k1, Stage.INPUT: k2, Stage.OUTPUT: k4}
    assert pick.stage_us == {
        Stage.FILTER: 0.5,
        Stage.INPUT: 0.25,
        Stage.GEMM: 5.0,
        Stage.OUTPUT: 0.125,
    }
    assert pick.staged_us == 5.875
    assert pick.plan == ("plan", (k1.name, k2.name, k4.name))


class MDtypeProber(FakeProber):
    """K3 costs what its M dtype (the probe's K4's accdtype) says."""

    def __init__(self, times, gemm):
        super().__init__(times)
        self.gemm = gemm

    def time(self, specs, stage):
        if stage is Stage.GEMM:
            self.asked.append((stage, {s.short: spec.name for s, spec in specs.items()}))
            return self.gemm[specs[Stage.OUTPUT].accdtype]
        return super().time(specs, stage)


@pytest.mark.parametrize("fp16_gemm, expected", [(3.0, DType.FP16), (4.9, DType.FP32)])
def test_k3_and_k4_are_chosen_together_per_m_dtype(fp16_gemm, expected):
    """fp16 M's K4 alone is 0.5 slower here; it wins when its K3 saves more than that."""
    family = _family(DType.FP16)
    k4s = family.by_stage[Stage.OUTPUT]
    assert {s.accdtype for s in k4s} == {DType.FP16, DType.FP32}
    times = {s.name: 1.5 if s.accdtype is DType.FP16 else 1.0 for s in k4s}
    prober = MDtypeProber(times, {DType.FP16: fp16_gemm, DType.FP32: 5.0})
    pick = select(family, prober)
    assert pick.specs[Stage.OUTPUT].accdtype is expected
    assert pick.stage_us[Stage.GEMM] == prober.gemm[expected]


def test_stages_are_chosen_in_pipeline_order():
    prober = FakeProber({})
    select(_family(DType.FP32), prober)
    order = [stage for stage, _ in prober.asked]
    firsts = [order.index(s) for s in (Stage.FILTER, Stage.INPUT, Stage.GEMM, Stage.OUTPUT)]
    assert firsts == sorted(firsts)


def test_a_split_k2_pays_for_its_k2a():
    family = _family(DType.FP16)
    by = family.by_stage
    split = [s for s in by[Stage.INPUT] if s.prescale is Prescale.SPLIT]
    fused = [s for s in by[Stage.INPUT] if s.prescale is Prescale.FUSED]
    assert split and fused and by[Stage.PRESCALE]
    k2a = by[Stage.PRESCALE][0]
    # split K2 alone is faster, but with its K2a it is slower than the fused one
    prober = FakeProber({split[0].name: 0.5, k2a.name: 0.75, fused[0].name: 1.0})
    for spec in by[Stage.PRESCALE][1:]:
        prober.times[spec.name] = 2.0
    pick = select(family, prober)
    assert pick.specs[Stage.INPUT] in fused and Stage.PRESCALE not in pick.specs
    prober = FakeProber({split[0].name: 0.125, k2a.name: 0.25, fused[0].name: 1.0})
    for spec in by[Stage.PRESCALE][1:]:
        prober.times[spec.name] = 2.0
    pick = select(family, prober)
    assert pick.specs[Stage.INPUT] == split[0] and pick.specs[Stage.PRESCALE] == k2a
    assert pick.stage_us[Stage.PRESCALE] == 0.25 and pick.stage_us[Stage.INPUT] == 0.125
    for _, probe in prober.asked:  # every probe is a valid pipeline
        assert ("k2a" in probe) == probe["k2"].endswith("psplit")


def test_nothing_runs_means_no_pick():
    family = _family(DType.FP32)
    prober = FakeProber({s.name: math.inf for s in family.by_stage[Stage.OUTPUT]})
    assert select(family, prober) is None


def test_assemble_drops_k2a_with_an_unsplit_k2():
    by = _family(DType.FP16).by_stage
    split = next(s for s in by[Stage.INPUT] if s.prescale is Prescale.SPLIT)
    fused = next(s for s in by[Stage.INPUT] if s.prescale is Prescale.FUSED)
    base = {
        Stage.FILTER: by[Stage.FILTER][0],
        Stage.INPUT: split,
        Stage.PRESCALE: by[Stage.PRESCALE][0],
        Stage.OUTPUT: by[Stage.OUTPUT][0],
    }
    assert Stage.PRESCALE not in assemble(base, k2=fused)
    assert assemble(base, k2=split)[Stage.PRESCALE] == by[Stage.PRESCALE][0]


def test_fastest_keeps_the_first_on_ties():
    assert fastest(["a", "b", "c"], {"a": 2, "b": 1, "c": 1}.get) == ("b", 1)
    assert fastest([], len) == (None, math.inf)


@pytest.mark.parametrize("dtype", list(DType))
def test_three_channel_inputs_have_candidates(dtype):
    """VGG-16's first layer (C = 3): wide-vector specs are refused, not crashed on."""
    problem = replace(SMALL, C=3, dtype=dtype)
    for tile in TILES:
        found = cands.families(problem, tile)
        assert found, tile
        for family in found:
            assert all(spec.vec == 1 for spec in family.by_stage[Stage.INPUT])
