"""The pure parts of scripts/cudnn_engines.py: a plan's notes from the cuDNN frontend's log, the
Winograd flag and tile, the fastest engine of a kind and the table line."""

from __future__ import annotations

import pytest

from wino.problem import Problem

#: Two plans as the frontend logs them (its ExecutionPlan describe(): tag, notes, a trailing
#: comma inside the brackets) and a line of another descriptor that names no notes.
LOG = """\
[cudnn_frontend] CUDNN_BACKEND_ENGINECFG_DESCRIPTOR : Number of knobs: 4
[cudnn_frontend] CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR : ConvFwd_eng15_k5=1_k6=0_k7=1_k10=1, \
numeric_notes:[CUDNN_NUMERICAL_NOTE_WINOGRAD,CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4,] \
behavior_notes:[] workSpaceSize: 895504
[cudnn_frontend] CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR : ConvFwd_eng0_k2=3, \
numeric_notes:[CUDNN_NUMERICAL_NOTE_TENSOR_CORE,] behavior_notes:[] workSpaceSize: 0
"""


@pytest.fixture(scope="module")
def ce(load_script):
    return load_script("cudnn_engines")


def test_the_log_gives_each_plan_its_notes(ce):
    notes = ce.plan_notes(LOG)
    assert notes == {
        "ConvFwd_eng15_k5=1_k6=0_k7=1_k10=1": (
            "CUDNN_NUMERICAL_NOTE_WINOGRAD",
            "CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4",
        ),
        "ConvFwd_eng0_k2=3": ("CUDNN_NUMERICAL_NOTE_TENSOR_CORE",),
    }
    # the plan's own name (get_plan_name_at_index) lacks the graph's tag
    assert (
        ce.notes_for("eng15_k5=1_k6=0_k7=1_k10=1", notes)
        == notes["ConvFwd_eng15_k5=1_k6=0_k7=1_k10=1"]
    )
    assert ce.notes_for("ConvFwd_eng0_k2=3", notes) == ("CUDNN_NUMERICAL_NOTE_TENSOR_CORE",)
    assert ce.notes_for("eng7_k2=1", notes) is None
    assert ce.plan_notes("no plans here") == {}


def test_an_ambiguous_suffix_names_no_plan(ce):
    notes = {"A_eng1": ("x",), "B_eng1": ("y",)}
    assert ce.notes_for("eng1", notes) is None


def test_winograd_and_tile_come_from_the_notes(ce):
    notes = ce.plan_notes(LOG)
    wino = ce.Engine("eng15", notes["ConvFwd_eng15_k5=1_k6=0_k7=1_k10=1"], 10.0)
    gemm = ce.Engine("eng0", notes["ConvFwd_eng0_k2=3"], 5.0)
    assert wino.winograd and wino.tile == "4x4"
    assert not gemm.winograd and gemm.tile == ""


def test_fastest_takes_the_kind_and_skips_plans_that_did_not_run(ce):
    w = ("CUDNN_NUMERICAL_NOTE_WINOGRAD", "CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6")
    engines = [
        ce.Engine("a", (), 9.0),
        ce.Engine("b", w, 12.0),
        ce.Engine("c", w, None, why="build: not supported"),
        ce.Engine("d", (), 7.5),
        ce.Engine("e", w, 11.0),
    ]
    assert ce.fastest(engines).name == "d"
    assert ce.fastest(engines, winograd=True).name == "e"
    assert ce.fastest(engines, winograd=False).name == "d"
    assert ce.fastest([ce.Engine("c", w, None)]) is None


def test_the_table_line_gives_the_ratio_or_says_none_ran(ce):
    w = ("CUDNN_NUMERICAL_NOTE_WINOGRAD", "CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4")
    line = ce.table_line("L", "fp16", 20.0, [ce.Engine("g", (), 10.0), ce.Engine("w", w, 25.0)])
    assert line == "| L | fp16 | 2 (1) | 20.0 | 10.0 (g) | 25.0 (4x4) | 2.50x |"
    line = ce.table_line("L", "bf16", 20.0, [ce.Engine("g", (), 10.0)])
    assert line == "| L | bf16 | 1 (0) | 20.0 | 10.0 (g) | none ran | - |"
    assert ce.HEADER.count("|") // 2 == line.count("|")  # header and separator rows: same width


def test_the_bench_s_operand_sets_which_the_census_rotates_fill_twice_the_l2():
    from wino.bench.cuda import L2_BYTES, operand_sets

    small = Problem.from_miopen("convfp16 -n 16 -c 512 -H 14 -W 14 -k 512 -y 3 -x 3 -p 1 -q 1")
    big = Problem.from_miopen("convfp16 -n 16 -c 64 -H 224 -W 224 -k 64 -y 3 -x 3 -p 1 -q 1")
    per_set = 2 * (2 * 16 * 14 * 14 * 512 + 512 * 9 * 512)  # x, y and w in fp16
    assert operand_sets(small) == -(-2 * L2_BYTES // per_set)
    assert operand_sets(small) * per_set >= 2 * L2_BYTES
    assert operand_sets(big) == 1


def test_a_plan_past_slow_times_the_fastest_is_not_timed(ce):
    timed = [ce.Engine("a", (), 10.0), ce.Engine("b", (), None, why="build: declined")]
    assert not ce.too_slow(ce.SLOW * 10.0, timed)
    assert ce.too_slow(ce.SLOW * 10.0 + 0.1, timed)
    assert not ce.too_slow(1e9, [])  # the first plan is always timed
    assert not ce.too_slow(1e9, [ce.Engine("b", (), None)])


def test_the_listing_says_winograd_unknown_notes_or_why_untimed(ce):
    w = ("CUDNN_NUMERICAL_NOTE_WINOGRAD", "CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6")
    assert ce.engine_line(ce.Engine("w", w, 12.25, 1e-3)).split()[-2:] == ["Winograd", "6x6"]
    assert ce.engine_line(ce.Engine("g", (), 12.25, 1e-3)).endswith("12.2 us, error 1.0e-03")
    unknown = ce.engine_line(ce.Engine("u", None, None, why="budget"))
    assert unknown.split()[1:] == ["budget", "notes", "?"]
    assert not ce.Engine("u", None, None).winograd and ce.Engine("u", None, None).tile == ""
