"""Where a dispatch looks, per call: the working directory is part of a seen call's key when
the cache search depends on it; target=None takes what the cache holds (CuPy is asked only
where a cuda cache exists); the tuning DB followed is the one beside the cache found."""

from __future__ import annotations

import shutil

import pytest

from tests import runtime_fixtures as rf
from tests.test_cache_search import _publish
from wino import cache, config
from wino.runtime import dispatch, registry, tuning
from wino.vocab import Stage, Target

CASE = rf.EXTRA[2]


@pytest.fixture
def places(tmp_path, tmp_path_factory, monkeypatch):
    """Two working directories each holding a copy of the session's host cache in ./build,
    no $WINO_BUILD and a checkout without a cache."""
    src = rf.host_cache(tmp_path_factory)
    dirs = []
    for name in ("a", "b"):
        shutil.copytree(src, tmp_path / name / "build")
        dirs.append(tmp_path / name)
    (tmp_path / "checkout").mkdir()
    monkeypatch.delenv("WINO_BUILD", raising=False)
    monkeypatch.setattr(config, "ROOT", tmp_path / "checkout")
    monkeypatch.setattr(config, "IS_CHECKOUT", True)
    monkeypatch.setattr(config, "PACKAGED", tmp_path / "packaged")
    return dirs


def test_a_chdir_is_seen_at_once(places, monkeypatch):
    a, b = places
    monkeypatch.chdir(a)
    first = dispatch(CASE.problem, target="c", tile=CASE.tile)
    monkeypatch.chdir(b)
    second = dispatch(CASE.problem, target="c", tile=CASE.tile)  # within REVALIDATE_S
    assert first.manifest.directory.is_relative_to(a.resolve())
    assert second.manifest.directory.is_relative_to(b.resolve())


def test_a_relative_wino_build_follows_the_working_directory(places, monkeypatch):
    a, b = places
    monkeypatch.setenv("WINO_BUILD", "build")
    monkeypatch.chdir(a)
    first = dispatch(CASE.problem, target="c")
    monkeypatch.chdir(b)
    second = dispatch(CASE.problem, target="c")  # within REVALIDATE_S: b's manifest file
    assert second is not first and second.manifest is not first.manifest
    assert second.manifest.path.stat().st_ino == (b / second.manifest.path).stat().st_ino


def test_the_tuning_db_beside_the_cache_found_is_followed(places, monkeypatch):
    """The cache is found in ./build (not the write folder, the checkout's build/): its DB
    decides the tile and specs."""
    a, _ = places
    monkeypatch.chdir(a)
    tile, specs = rf.EXTRA[3].tile, rf.EXTRA[3].specs  # F2x2 for the same problem
    tuning.record(CASE.problem, Target.C, tile, specs, 1.0, root=a / "build")
    assert tuning.db_path(Target.C) != tuning.db_path(Target.C, a / "build")  # not written there
    plan = dispatch(CASE.problem, target="c")
    assert plan.source == "tuning DB" and plan.tile == tile
    assert plan.specs[Stage.INPUT] == specs[Stage.INPUT]


def test_target_none_asks_cuda_only_where_a_cuda_cache_is(places, monkeypatch):
    a, _ = places
    monkeypatch.chdir(a)

    def no_import():
        raise AssertionError("cuda_available called without a cuda cache")

    monkeypatch.setattr(registry, "cuda_available", no_import)
    assert dispatch(CASE.problem).target is Target.C
    _publish(a / "build", Target.CUDA, "nvcc-test")  # an (empty) cuda cache appears
    monkeypatch.setattr(registry, "cuda_available", lambda: False)
    cache._CANDIDATES.clear()
    assert dispatch(CASE.problem, tile=CASE.tile, batch_split=1).target is Target.C
    monkeypatch.setattr(registry, "cuda_available", lambda: True)
    with pytest.raises(KeyError, match="not in the cuda cache"):  # cuda picked; it is empty
        dispatch(CASE.problem, tile=CASE.tile, batch_split=2)
