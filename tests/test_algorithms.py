"""Dispatch's choice of plan kind (wino.algorithms, grids/algorithms.yaml): algorithm= forces;
else the tuning DB's recorded winner; else the first crossover rule that holds (a rule that
picks fused for a problem the fused kernel does not serve falls back to unfused); explain()
says which and why; a bad rule is rejected when the file is loaded, with its id."""

from __future__ import annotations

import dataclasses

import pytest

from tests import host_cache
from wino import algorithms, config
from wino.algorithms import Algorithm
from wino.pick import default_fused_specs, default_stage_specs
from wino.problem import Problem
from wino.runtime import dispatch, tuning
from wino.runtime.plan import clear_plan_cache
from wino.vocab import DType, Stage, Target, Tile

FP16 = Problem(N=2, C=32, H=14, W=14, K=32, pad_h=1, pad_w=1, dtype=DType.FP16)
FP32 = Problem(N=2, C=32, H=14, W=14, K=32, pad_h=1, pad_w=1, dtype=DType.FP32)
WIDE = Problem(N=2, C=96, H=14, W=14, K=32, pad_h=1, pad_w=1, dtype=DType.FP16)
TILE = Tile(4, 4)

FUSED_BELOW_64 = """format: 1
rules:
  - id: fused_narrow
    when: "C <= 64"
    algorithm: fused
    reason: "measured: fused wins at C {C} <= 64"
  - id: unfused_rest
    when: "True"
    algorithm: unfused
    reason: "measured: unfused wins above 64 channels"
"""


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    folder = tmp_path_factory.mktemp("algorithms")
    specs = set()
    for p in (FP16, WIDE):
        specs |= set(default_stage_specs(p, TILE).values())
        specs |= set(default_fused_specs(p, TILE).values())
    specs |= set(default_stage_specs(FP32, TILE).values())
    host_cache.build(specs, folder)
    return folder


@pytest.fixture
def measured_rules(tmp_path, monkeypatch):
    """grids/algorithms.yaml replaced by FUSED_BELOW_64 (the plan caches cleared around)."""
    path = tmp_path / "algorithms.yaml"
    path.write_text(FUSED_BELOW_64, encoding="utf-8")
    rules = algorithms.load(path)
    monkeypatch.setattr(algorithms, "crossovers", lambda: rules)
    clear_plan_cache()
    yield rules
    clear_plan_cache()


def _kind_line(plan) -> str:
    return plan.explain().splitlines()[1].strip()


def _held_fused_wins(p: Problem) -> bool:
    """Where the held fused kernel was measured faster (docs/FUSED.md; H200 at C = 64, H100 at
    C = 32 and 64): 16-bit io, ungrouped, 16 <= C <= 64 (its fp16 M's error bound below 16, its
    hold above 64), K = 64 with outputs of at least 56x56, or K = 128 with at least 112x112;
    and the 128-channel hold (H100, fp16 and bf16): C = K = 128 with at least 112x112."""
    held64 = 16 <= p.C <= 64 and (
        p.K == 64 and p.Ho * p.Wo >= 56 * 56 or p.K == 128 and p.Ho * p.Wo >= 112 * 112
    )
    held128 = p.C == p.K == 128 and p.Ho * p.Wo >= 112 * 112
    return p.dtype is not DType.FP32 and p.groups == 1 and (held64 or held128)


def test_the_shipped_rules_pick_fused_only_where_it_was_measured_faster(root, public_problems):
    clear_plan_cache()
    plan = dispatch(FP16, target=Target.C, cache_root=root)
    assert plan.kind == "unfused2d_rt"
    assert _kind_line(plan).startswith("unfused2d_rt: rule unfused_default (grids/algorithms.yaml)")
    chosen = 0
    for problem in public_problems:
        for dtype in DType:
            p = dataclasses.replace(problem, dtype=dtype)
            choice = algorithms.choose(p)
            expected = Algorithm.FUSED if _held_fused_wins(p) else Algorithm.UNFUSED
            assert choice.algorithm is expected, (p.label(), choice)
            chosen += expected is Algorithm.FUSED
    k64 = sum(p.C == p.K == 64 and p.H >= 56 for p in public_problems)
    k128 = sum(p.C == 64 and p.K == 128 and p.H >= 112 for p in public_problems)
    c128 = sum(p.C == p.K == 128 and p.H >= 112 for p in public_problems)
    assert chosen == 2 * (k64 + k128 + c128) == 8
    big = dataclasses.replace(FP16, H=56, W=56, C=64, K=64)
    wide = dict(H=112, W=112, K=128)
    for inside in (dict(C=32), dict(C=16), dict(dtype=DType.BF16), wide, {**wide, "C": 16}):
        assert algorithms.choose(dataclasses.replace(big, **inside)).algorithm is Algorithm.FUSED
    outside = (dict(C=3), dict(C=15), dict(C=65), dict(K=128), dict(H=55), {**wide, "H": 111})
    for other in (*outside, dict(dtype=DType.FP32), dict(groups=2)):
        assert algorithms.choose(dataclasses.replace(big, **other)).algorithm is Algorithm.UNFUSED
    c128 = dataclasses.replace(big, C=128, **wide)
    assert algorithms.choose(c128).rule == "fused_held_c128"
    assert algorithms.choose(dataclasses.replace(c128, dtype=DType.BF16)).rule == "fused_held_c128"
    for other in (dict(dtype=DType.FP32), dict(C=96), dict(K=64), dict(H=56, W=56), dict(groups=2)):
        assert algorithms.choose(dataclasses.replace(c128, **other)).algorithm is Algorithm.UNFUSED


def test_a_rule_chooses_and_explain_says_which_and_why(root, measured_rules):
    plan = dispatch(FP16, target=Target.C, cache_root=root)
    assert plan.kind == "fused2d_rt" and Stage.FUSED in plan.specs
    assert _kind_line(plan) == (
        "fused2d_rt: rule fused_narrow (grids/algorithms.yaml): measured: fused wins at C 32 <= 64"
    )
    wide = dispatch(WIDE, target=Target.C, cache_root=root)
    assert wide.kind == "unfused2d_rt"
    assert "rule unfused_rest" in _kind_line(wide)


def test_a_rule_for_fused_falls_back_where_fused_cannot_serve(root, measured_rules):
    plan = dispatch(FP32, target=Target.C, cache_root=root)
    assert plan.kind == "unfused2d_rt" and Stage.FUSED not in plan.specs
    assert "rule fused_narrow" in _kind_line(plan)
    assert "does not serve it ([fused_io_fp32]" in _kind_line(plan)


def test_algorithm_forces_over_the_rule(root, measured_rules):
    plan = dispatch(FP16, target=Target.C, cache_root=root, algorithm="unfused")
    assert plan.kind == "unfused2d_rt"
    assert _kind_line(plan) == "unfused2d_rt: forced by algorithm='unfused'"
    plan = dispatch(WIDE, target=Target.C, cache_root=root, algorithm="fused")
    assert plan.kind == "fused2d_rt"


def test_the_tuning_db_beats_the_rule(tmp_path, root, measured_rules):
    import shutil

    db_root = tmp_path / "with-db"
    shutil.copytree(root, db_root)
    unfused = default_stage_specs(FP16, TILE)
    tuning.record(FP16, Target.C, TILE, unfused, 12.5, db_root)
    fused = default_fused_specs(WIDE, TILE)
    tuning.record(WIDE, Target.C, TILE, fused, 7.25, db_root)
    clear_plan_cache()
    plan = dispatch(FP16, target=Target.C, cache_root=db_root)  # the rule says fused
    assert plan.kind == "unfused2d_rt" and plan.source == "tuning DB"
    assert "the tuning DB's recorded winner for this problem (F4x4, 12.5 us" in _kind_line(plan)
    plan = dispatch(WIDE, target=Target.C, cache_root=db_root)  # the rule says unfused
    assert plan.kind == "fused2d_rt" and plan.source == "tuning DB"
    assert plan.specs[Stage.FUSED] == fused[Stage.FUSED]
    assert "7.25 us" in _kind_line(plan)
    forced = dispatch(WIDE, target=Target.C, cache_root=db_root, algorithm="unfused")
    assert forced.kind == "unfused2d_rt" and forced.source == "default pick"


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (
            FUSED_BELOW_64.replace('"C <= 64"', '"C <= banana"'),
            r"algorithms.yaml:3: rule fused_narrow: condition uses unknown name\(s\) \['banana'\]",
        ),
        (
            FUSED_BELOW_64.replace('"C <= 64"', '"__import__(1)"'),
            r"rule fused_narrow: only .* may be called",
        ),
        (
            FUSED_BELOW_64.replace("{C}", "{channels}"),
            r"rule fused_narrow: message names 'channels'",
        ),
        (
            FUSED_BELOW_64.replace("algorithm: fused", "algorithm: direct"),
            r"at \$\.rules\[0\]\.algorithm: 'direct' is not one of",
        ),
        (FUSED_BELOW_64.replace("unfused_rest", "fused_narrow"), r"repeated: \['fused_narrow'\]"),
    ],
    ids=["unknown_name", "call", "reason_field", "schema", "duplicate_id"],
)
def test_a_bad_rule_is_rejected_at_load(tmp_path, text, match):
    path = tmp_path / "algorithms.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(config.ConfigError, match=match):
        algorithms.load(path)


def test_no_rule_holding_means_unfused():
    choice = algorithms.choose(FP16, rules=())
    assert (choice.rule, choice.algorithm) == ("none", Algorithm.UNFUSED)
