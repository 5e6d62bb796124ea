"""`wino tune`: the fastest verified pipeline per problem goes into the tuning DB, and dispatch
follows it (source "tuning DB"); an untuned problem keeps the default pick."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from tests import host_cache
from wino import cli
from wino.bench import accuracy
from wino.bench.candidates import needed_specs
from wino.bench.host import HostDevice
from wino.pick import default_stage_specs
from wino.problem import Problem
from wino.runtime import dispatch, tuning
from wino.runtime.plan import default_tile
from wino.vocab import DType, Target, Tile

TUNED = "conv -n 2 -c 8 -H 10 -W 10 -k 8 -p 1 -q 1"
UNTUNED = "conv -n 1 -c 16 -H 7 -W 9 -k 8 -p 1 -q 0"
TILES = (Tile(2, 2), Tile(4, 4))


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    problems = [Problem.from_miopen(line) for line in (TUNED, UNTUNED)]
    problems += [replace(p, dtype=DType.BF16) for p in problems]
    root = tmp_path_factory.mktemp("tune-cache")
    host_cache.build(needed_specs(problems, TILES, HostDevice.CANDIDATE_LIMIT), root)
    return root


@pytest.fixture
def root(compiled, tmp_path):
    """A copy of the compiled cache per test, so each starts with no tuning DB."""
    return Path(shutil.copytree(compiled, tmp_path / "build"))


def _tune(capsys, root, *argv, noise="1e9"):
    """``wino tune`` on the c cache; the noise check is off unless a test sets it (this
    machine is shared: its timings of one pipeline can differ by more than the default)."""
    code = cli.main(
        ["tune", "--target", "c", "--cache-root", str(root), "--tile", "F2x2,F4x4"]
        + ["--noise", noise, *argv]
    )
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_tuned_problems_dispatch_from_the_db(capsys, root, dtype):
    code, out, err = _tune(capsys, root, "--miopen-cmd", TUNED, "--dtype", dtype)
    assert code == 0, out + err
    problem = replace(Problem.from_miopen(TUNED), dtype=DType(dtype))
    entry = tuning.load(Target.C, root)["entries"][tuning.problem_key(problem)]
    assert f"tuned {problem.label()}: {entry['tile']}" in out
    assert out.splitlines()[-1].startswith("Best: ")
    plan = dispatch(problem, target="c", cache_root=root)
    assert plan.source == "tuning DB" and plan.tile.name == entry["tile"]
    assert {s.short: spec.fields_dict() for s, spec in plan.specs.items()} == entry["specs"]
    assert entry["time_us"] > 0

    untuned = Problem.from_miopen(UNTUNED)
    plan = dispatch(untuned, target="c", cache_root=root)
    assert plan.source == "default pick"
    assert plan.specs == default_stage_specs(untuned, default_tile(untuned))


def test_the_db_keeps_every_tuned_problem(capsys, root):
    code, out, err = _tune(capsys, root, "--miopen-cmd", TUNED, "--miopen-cmd", UNTUNED)
    assert code == 0, out + err
    path = tuning.db_path(Target.C, root)
    entries = json.loads(path.read_text())["entries"]
    assert set(entries) == {
        tuning.problem_key(Problem.from_miopen(line)) for line in (TUNED, UNTUNED)
    }
    for line in (TUNED, UNTUNED):
        assert dispatch(Problem.from_miopen(line), target="c", cache_root=root).source == (
            "tuning DB"
        )


def test_nothing_is_recorded_without_a_verified_pipeline(capsys, root, monkeypatch):
    monkeypatch.setattr(accuracy, "tolerance", lambda tile, dtype, target=None: 0.0)
    code, out, _ = _tune(capsys, root, "--miopen-cmd", TUNED)
    assert code == 1 and "not tuned" in out
    assert not tuning.db_path(Target.C, root).exists()


def test_refused_cases_are_skipped(capsys, root):
    code, out, _ = _tune(capsys, root, "--miopen-cmd", "conv -n 1 -c 8 -k 8 -y 1 -x 1")
    assert code == 0 and "refused [not_3x3]" in out and "tuned" not in out


def test_winners_whose_timings_disagree_are_not_recorded(capsys, root):
    code, out, _ = _tune(capsys, root, "--miopen-cmd", TUNED, noise="1e-9")
    label = Problem.from_miopen(TUNED).label()
    assert code == 1
    assert f"not tuned {label}: two timings of the winner disagree by" in out
    assert "threshold 0%" in out and "taskset" in out and "OMP_NUM_THREADS" in out
    assert not tuning.db_path(Target.C, root).exists()


def test_unpinned_host_threads_get_advice(capsys, root, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    _, _, err = _tune(capsys, root, "--miopen-cmd", TUNED)
    assert "OMP_NUM_THREADS is unset" in err and "taskset -c 0-" in err
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    _, _, err = _tune(capsys, root, "--miopen-cmd", TUNED)
    assert "OMP_NUM_THREADS" not in err


def test_noise_must_be_positive(capsys, root):
    assert _tune(capsys, root, "--miopen-cmd", TUNED, noise="0")[0] == cli.EXIT_ERROR
