"""The results CSV (merge, atomic write, resume), the winner and speedup per case, the Best line
and the exit code."""

from __future__ import annotations

import csv
import re

import pytest

from wino.bench import results, sweep
from wino.problem import canonical_line

#: A case string as the sweep writes it (the canonical MIOpenDriver line).
CASE = canonical_line("conv -n 1")


def _row(case=CASE, engine="wino", tile="F4x4", total="100", **extra):
    row = {c: "" for c in results.COLUMNS}
    row.update(
        target="c",
        case=case,
        label=f"fp32 {case}",
        dtype="fp32",
        engine=engine,
        tile=tile,
        total_us=total,
        tflops=str(1e6 / float(total) / 1e6),
        **extra,
    )
    return row


def test_write_then_read_round_trips(tmp_path):
    rows = [_row(), _row(tile="F2x2", total="50", error="1e-06", verified="yes")]
    path = results.write(tmp_path / "sub" / "r.csv", rows)
    assert results.read(path) == rows
    assert [p.name for p in path.parent.iterdir()] == ["r.csv"]  # no temp file left
    with open(path, newline="") as handle:
        assert next(csv.reader(handle)) == list(results.COLUMNS)


def test_case_strings_are_read_canonically(tmp_path):
    doubled = CASE + " -l 1 -j 1"  # how older versions spelled a case: -l/-j twice
    path = results.write(tmp_path / "r.csv", [_row(case=doubled), _row(case="not a line")])
    assert [r["case"] for r in results.read(path)] == [CASE, "not a line"]


def test_reading_a_missing_file_gives_no_rows(tmp_path):
    assert results.read(tmp_path / "none.csv") == []


def test_reading_a_foreign_csv_is_an_error(tmp_path):
    path = tmp_path / "other.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not a wino results CSV"):
        results.read(path)


def test_merge_replaces_by_key_in_place_and_appends_the_rest():
    old = [_row(tile="F2x2", total="9"), _row(tile="F4x4", total="8"), _row(case="conv -n 2")]
    new = [_row(tile="F4x4", total="7"), _row(case="conv -n 3")]
    merged = results.merge(old, new)
    assert [(r["case"], r["tile"], r["total_us"]) for r in merged] == [
        (CASE, "F2x2", "9"),
        (CASE, "F4x4", "7"),
        ("conv -n 2", "F4x4", "100"),
        ("conv -n 3", "F4x4", "100"),
    ]


def test_an_interrupted_write_keeps_the_old_file(tmp_path, monkeypatch):
    path = results.write(tmp_path / "r.csv", [_row()])
    before = path.read_text()

    def boom(self, row):
        raise KeyboardInterrupt

    monkeypatch.setattr(csv.DictWriter, "writerow", boom)
    with pytest.raises(KeyboardInterrupt):
        results.write(path, [_row(total="1")])
    assert path.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["r.csv"]


def test_update_merges_into_the_file(tmp_path):
    path = tmp_path / "r.csv"
    results.update(path, [_row(tile="F2x2")])
    rows = results.update(path, [_row(tile="F4x4")])
    assert [r["tile"] for r in rows] == ["F2x2", "F4x4"] == [r["tile"] for r in results.read(path)]


def test_measured_cases_need_every_engine():
    rows = [_row(case="a"), _row(case="b"), _row(case="b", engine="cudnn", tile="")]
    assert results.measured_cases(rows, "c", ["wino"]) == {"a", "b"}
    assert results.measured_cases(rows, "c", ["wino", "cudnn"]) == {"b"}
    assert results.measured_cases(rows, "cuda", ["wino"]) == set()


def test_winner_and_speedup_per_case():
    rows = [
        _row(tile="F2x2", total="50"),
        _row(tile="F4x4", total="40"),
        _row(engine="cudnn", tile="", total="80"),
        _row(case="slow", total="200"),
        _row(case="slow", engine="cudnn", tile="", total="100"),
    ]
    results.annotate(rows)
    assert [r["speedup"] for r in rows] == ["1.6", "2", "", "0.5", ""]
    assert [r["winner"] for r in rows] == ["wino F4x4"] * 3 + ["cudnn"] * 2


def test_failed_rows_neither_win_nor_count_as_best():
    rows = [
        _row(tile="F2x2", total="10", error="0.5", verified="no"),
        _row(tile="F4x4", total="40", error="1e-06", verified="yes"),
        _row(engine="cudnn", tile="", total="20"),
    ]
    results.annotate(rows)
    assert rows[0]["winner"] == "cudnn"
    assert results.best_wino(rows)["tile"] == "F4x4"


BEST = re.compile(r"^Best: (\d[\d.e+-]*) TFLOPS — (.+) (F\dx\d) \[(.+)\]( \(unverified\))?$")


def test_best_line_prefers_verified_pipelines():
    rows = [
        _row(tile="F2x2", total="10", k1="k1_a", k2="k2_b", k4="k4_c"),
        _row(
            tile="F4x4",
            total="40",
            k1="k1_d",
            k2a="k2a_e",
            k2="k2_f",
            k4="k4_g",
            error="1e-06",
            verified="yes",
        ),
    ]
    line = sweep.best_line(rows)
    match = BEST.match(line)
    assert match, line
    assert match.group(3) == "F4x4" and match.group(4) == "k1_d k2a_e k2_f k4_g"
    assert match.group(5) is None
    unchecked = sweep.best_line(rows[:1])
    assert BEST.match(unchecked).group(5) == " (unverified)"


def test_best_line_is_the_most_tflops_across_cases():
    """A big case's slower pipeline can beat a small case's faster one in TFLOPS."""
    small = _row(case="conv -n 1", tile="F2x2", total="10", k2="k2_small", verified="yes")
    big = _row(case="conv -n 64", tile="F4x4", total="40", k2="k2_big", verified="yes")
    small["tflops"], big["tflops"] = "100", "500"
    match = BEST.match(sweep.best_line([small, big]))
    assert match and match.group(1) == "500" and match.group(4) == "k2_big"


def test_best_line_with_nothing_measured():
    assert sweep.best_line([]) == "Best: 0 TFLOPS — none (no verified wino pipeline)"


def test_exit_code_is_one_only_when_a_case_has_no_verified_pipeline():
    ok = _row(case="a", error="1e-6", verified="yes")
    bad = _row(case="a", tile="F2x2", error="0.5", verified="no")
    unchecked = _row(case="b")
    assert sweep.exit_code([ok, bad, unchecked]) == 0
    assert sweep.exit_code([bad, unchecked]) == 1
    assert sweep.exit_code([]) == 0


@pytest.mark.parametrize(
    ("value", "text"), [(None, ""), (3, "3"), (1.23456789, "1.235"), (float("inf"), "inf")]
)
def test_fmt(value, text):
    assert results.fmt(value) == text
