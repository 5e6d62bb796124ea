"""wino.cache's search path: an explicit root, else $WINO_BUILD (empty means unset), else
./build, the checkout's build/ and the packaged cache, the first holding the target winning."""

from __future__ import annotations

from pathlib import Path

import pytest

from wino import cache, config
from wino.cache import CacheSource
from wino.launch import FORMAT
from wino.vocab import Target


def _publish(build: Path, target: Target, flavor: str) -> Path:
    """An empty but valid manifest for ``target`` in the build folder ``build``."""
    manifest = {
        "format": FORMAT,
        "target": target.value,
        "flavor": flavor,
        "toolchain": {"compiler": "cc", "version": "test", "flags": [], "arch": "host"},
        "kernels": {},
    }
    return cache.write_manifest(build / "cache" / f"v{FORMAT}" / target.value / flavor, manifest)


@pytest.fixture
def places(tmp_path, monkeypatch):
    """A working directory, a checkout and a package-data folder, all without caches."""
    cwd, checkout, packaged = tmp_path / "cwd", tmp_path / "checkout", tmp_path / "packaged"
    for path in (cwd, checkout, packaged):
        path.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.delenv("WINO_BUILD", raising=False)
    monkeypatch.setattr(config, "ROOT", checkout)
    monkeypatch.setattr(config, "IS_CHECKOUT", True)
    monkeypatch.setattr(config, "PACKAGED", packaged)
    return cwd / "build", checkout / "build", packaged / "build"


def test_search_order_without_a_choice(places):
    cwd, checkout, packaged = places
    assert [(f.path, f.source) for f in cache.search_path()] == [
        (cwd, CacheSource.CWD),
        (checkout, CacheSource.CHECKOUT),
        (packaged, CacheSource.PACKAGED),
    ]


def test_an_installed_wheel_has_no_checkout_entry(places, monkeypatch):
    monkeypatch.setattr(config, "IS_CHECKOUT", False)
    sources = [f.source for f in cache.search_path()]
    assert sources == [CacheSource.CWD, CacheSource.PACKAGED]
    assert cache.build_folder() == places[0]  # the build writes ./build, never the package


def test_first_folder_holding_the_target_wins_per_target(places):
    cwd, checkout, packaged = places
    _publish(packaged, Target.C, "packaged-c")
    _publish(packaged, Target.CUDA, "packaged-cuda")
    assert cache.find_manifest(Target.C).source is CacheSource.PACKAGED
    _publish(checkout, Target.C, "checkout-c")
    assert cache.find_manifest(Target.C).flavor == "checkout-c"
    _publish(cwd, Target.C, "cwd-c")
    found = cache.find_manifest(Target.C)
    assert (found.flavor, found.source) == ("cwd-c", CacheSource.CWD)
    assert found.origin() == f"{found.directory} (./build)"
    # ./build holds no cuda cache: the packaged one still serves cuda
    assert cache.find_manifest(Target.CUDA).source is CacheSource.PACKAGED


def test_wino_build_is_the_only_place_looked_at(places, tmp_path, monkeypatch):
    _publish(places[2], Target.C, "packaged-c")
    chosen = tmp_path / "chosen"
    monkeypatch.setenv("WINO_BUILD", str(chosen))
    assert [(f.path, f.source) for f in cache.search_path()] == [(chosen, CacheSource.ENV)]
    with pytest.raises(FileNotFoundError, match=r"no c cache in .*chosen.*\(\$WINO_BUILD\)"):
        cache.find_manifest(Target.C)
    _publish(chosen, Target.C, "chosen-c")
    assert cache.find_manifest(Target.C).source is CacheSource.ENV
    assert cache.build_folder() == chosen


def test_empty_wino_build_means_unset(places, monkeypatch):
    monkeypatch.setenv("WINO_BUILD", "")
    assert cache.search_path()[0].source is CacheSource.CWD
    assert cache.build_folder() == config.ROOT / "build"


def test_explicit_root_beats_wino_build(places, tmp_path, monkeypatch):
    monkeypatch.setenv("WINO_BUILD", str(tmp_path / "env"))
    given = tmp_path / "given"
    _publish(given, Target.C, "given-c")
    assert [f.source for f in cache.search_path(given)] == [CacheSource.ROOT]
    assert cache.find_manifest(Target.C, given).origin().endswith("(the cache root given)")


def test_missing_everywhere_names_every_place_and_the_fix(places):
    with pytest.raises(FileNotFoundError) as error:
        cache.find_manifest(Target.CUDA)
    text = str(error.value)
    for folder in places:
        assert str(folder / "cache" / f"v{FORMAT}" / "cuda") in text
    assert "doit compile:cuda" in text and "wheel" in text


def test_a_folder_reached_twice_is_named_once(places, monkeypatch):
    """./build is the checkout's: the search path lists it once, a miss names it once, and a
    hit there is found as ./build (the first place it is reached)."""
    cwd, _, packaged = places
    monkeypatch.setattr(config, "ROOT", cwd.parent)
    assert [f.source for f in cache.search_path()] == [CacheSource.CWD, CacheSource.PACKAGED]
    with pytest.raises(FileNotFoundError) as error:
        cache.find_manifest(Target.C)
    assert str(error.value).count(str(cwd / "cache")) == 1
    assert str(packaged / "cache") in str(error.value)
    _publish(cwd, Target.C, "cwd-c")
    assert cache.find_manifest(Target.C).source is CacheSource.CWD
