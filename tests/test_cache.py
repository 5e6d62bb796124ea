"""The cache is a trust boundary (wino.cache): a manifest entry is refused unless its binary
lies inside its cache folder, its symbol and spec name it, and its sha256 matches, all before
any shared object is loaded; manifest errors name the file; a broken manifest of another flavor
never shadows a valid one; `wino cache verify` checks a whole cache."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

from tests import host_cache
from wino import cache
from wino.cli import main
from wino.pick import default_stage_specs
from wino.problem import Problem
from wino.runtime import conv2d_reference, dispatch, loader, relative_error
from wino.vocab import TILES, Target

PROBLEM = Problem(N=1, C=8, H=6, W=6, K=8)
TILE = TILES[0]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("trusted")
    host_cache.build(default_stage_specs(PROBLEM, TILE).values(), root)
    return root


@pytest.fixture()
def root(built, tmp_path) -> Path:
    """A private copy of the built cache, to damage."""
    shutil.copytree(built, tmp_path / "b", symlinks=True)
    return tmp_path / "b"


def _manifest_path(root: Path) -> Path:
    (path,) = cache.manifests(root, [Target.C])
    return path


def _edit(root: Path, change) -> Path:
    path = _manifest_path(root)
    data = json.loads(path.read_text())
    change(data["kernels"])
    path.write_text(json.dumps(data))
    return path


def _first(kernels: dict) -> dict:
    return kernels[sorted(kernels)[0]]


@pytest.fixture()
def loads(monkeypatch) -> list[str]:
    """Every shared object the host backend loads: the paths dlopen sees, and the kernels
    whose checked bytes the loader is given (as "image:<name>")."""
    seen: list[str] = []
    real, real_load = ctypes.CDLL, loader.load_shared_object

    def spy(name, *args, **kwargs):
        seen.append(str(name))
        return real(name, *args, **kwargs)

    def spy_load(image, name):
        seen.append(f"image:{name}")
        return real_load(image, name)

    monkeypatch.setattr(ctypes, "CDLL", spy)
    monkeypatch.setattr(loader, "load_shared_object", spy_load)
    return seen


def _run(root: Path):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 6, 6, 8)).astype(np.float32)
    w = rng.standard_normal((8, 3, 3, 8)).astype(np.float32)
    plan = dispatch(PROBLEM, target="c", tile=TILE, cache_root=root)
    return plan, plan.run(x, w), conv2d_reference(x, w)


def test_intact_cache_runs_and_verifies(root, loads):
    plan, y, ref = _run(root)
    assert relative_error(y, ref) < 1e-5
    images = sorted(p.removeprefix("image:") for p in loads if p.startswith("image:"))
    assert images == sorted(s.name for s in plan.specs.values())
    # Each kernel is dlopened from its sealed memfd; nothing is loaded by a path into the cache.
    # (Other libraries may be dlopened meanwhile, e.g. threadpoolctl's first look at the BLAS.)
    paths = [p for p in loads if not p.startswith("image:")]
    assert sum(p.startswith("/proc/self/fd/") for p in paths) == len(images)
    assert not [p for p in paths if Path(p).resolve().is_relative_to(root.resolve())]
    checked, problems = cache.verify(root)
    assert checked == len(json.loads(_manifest_path(root).read_text())["kernels"]) and not problems


@pytest.mark.parametrize(
    "where",
    ["/tmp/evil.so", "../../../../evil.so", "bin/../../evil.so", "bin/evil-0123456789abcdef.so"],
)
def test_binary_outside_the_cache_or_not_named_by_the_kernel_is_refused(root, where, loads):
    path = _edit(root, lambda k: _first(k).update(binary=where))
    with pytest.raises(cache.CacheError, match="is not bin/") as err:
        _run(root)
    assert str(path) in str(err.value) and "doit compile:c" in str(err.value)
    assert loads == []


def test_symlink_out_of_the_cache_is_refused_before_loading(root, loads, tmp_path):
    manifest = cache.find_manifest(Target.C, root)
    entry = next(iter(manifest.kernels.values()))
    outside = tmp_path / "outside.so"
    shutil.copy(entry.path, outside)
    entry.path.unlink()
    entry.path.symlink_to(outside)
    with pytest.raises(cache.CacheError, match="outside the cache folder"):
        manifest.kernel(entry.name)
    with pytest.raises(cache.CacheError):
        _run(root)
    assert str(outside) not in loads and str(entry.path) not in loads


def test_symbol_must_be_the_kernel_name(root):
    _edit(root, lambda k: _first(k).update(symbol="main"))
    with pytest.raises(cache.CacheError, match="symbol 'main' is not the kernel's name"):
        cache.find_manifest(Target.C, root)


def test_another_kernels_binary_hash_and_symbol_are_refused(root):
    """Entry A carrying B's spec, binary, sha256 and symbol: the spec does not name A."""

    def swap(kernels):
        a, b = sorted(kernels)[:2]
        kernels[a] = dict(kernels[b])

    _edit(root, swap)
    with pytest.raises(cache.CacheError, match="is not the kernel's name|spec names kernel"):
        cache.find_manifest(Target.C, root)


def test_flipped_byte_is_refused_on_the_runtime_path(root, loads):
    manifest = cache.find_manifest(Target.C, root)
    entry = manifest.kernels[default_stage_specs(PROBLEM, TILE)[next(iter(_stages()))].name]
    data = bytearray(entry.path.read_bytes())
    data[len(data) // 2] ^= 0x01
    entry.path.write_bytes(bytes(data))
    with pytest.raises(cache.CacheError, match="sha256 does not match") as err:
        _run(root)
    assert "`doit compile:c`" in str(err.value)
    assert str(entry.path) not in loads


def _stages():
    return default_stage_specs(PROBLEM, TILE).keys()


def test_a_binary_replaced_after_its_first_check_is_checked_again(root):
    manifest = cache.find_manifest(Target.C, root)
    entry = next(iter(manifest.kernels.values()))
    manifest.kernel(entry.name)
    data = entry.path.read_bytes()
    entry.path.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))
    os.utime(entry.path, ns=(1, 1))  # even with an old timestamp
    with pytest.raises(cache.CacheError):
        manifest.kernel(entry.name)


def test_manifest_not_json_names_the_file(root):
    path = _manifest_path(root)
    path.write_text("{ not json")
    with pytest.raises(cache.CacheError, match="not JSON") as err:
        cache.find_manifest(Target.C, root)
    assert str(path) in str(err.value)


def test_manifest_schema_error_names_the_file_and_field(root):
    path = _edit(root, lambda k: _first(k).update(sha256="xyz"))
    with pytest.raises(cache.CacheError) as err:
        cache.find_manifest(Target.C, root)
    assert str(path) in str(err.value) and "sha256" in str(err.value)


def test_manifest_in_another_flavor_folder_is_refused(root):
    path = _manifest_path(root)
    other = path.parent.parent / "gcc-0.0.0"
    shutil.copytree(path.parent, other)
    with pytest.raises(cache.CacheError, match="found in the c/gcc-0.0.0 folder"):
        cache.read_manifest(other / cache.MANIFEST)


def test_broken_sibling_flavor_never_shadows_a_valid_one(root):
    good = _manifest_path(root)
    sibling = good.parent.parent / "clang-99.0.0"
    sibling.mkdir()
    (sibling / cache.MANIFEST).write_text("garbage")
    os.utime(sibling / cache.MANIFEST, (good.stat().st_mtime + 100,) * 2)
    with pytest.warns(cache.CacheWarning, match="clang-99.0.0"):
        manifest = cache.find_manifest(Target.C, root)
    assert manifest.path == good
    with pytest.raises(cache.CacheError, match="not JSON"):
        cache.find_manifest(Target.C, root, flavor="clang-99.0.0")


def test_cli_cache_verify(root, capsys):
    assert main(["cache", "verify", "--cache-root", str(root)]) == 0
    assert "intact" in capsys.readouterr().out
    entry = next(iter(cache.find_manifest(Target.C, root).kernels.values()))
    entry.path.write_bytes(b"")
    assert main(["cache", "verify", "--target", "c", "--cache-root", str(root)]) == 1
    out = capsys.readouterr().out
    assert f"kernel {entry.name}" in out and "1 problem(s)" in out and "doit compile:c" in out
    assert main(["cache", "verify", "--target", "cuda", "--cache-root", str(root)]) == 1
    assert "no manifest" in capsys.readouterr().out


def test_cli_names_a_broken_manifest_in_one_line(root, capsys):
    _manifest_path(root).write_text("[]")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main(["cache", "verify", "--cache-root", str(root)]) == 1
    assert "manifest.json" in capsys.readouterr().out
