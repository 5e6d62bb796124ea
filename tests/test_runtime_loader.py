"""The window between the sha256 check and the load is closed (wino.runtime.loader,
``Manifest.image``): a binary's bytes are read once, hashed, and exactly those bytes are
loaded, so a file swapped in the cache after the check is not what runs (host shared objects
through a sealed memfd, CUDA modules through cuModuleLoadData)."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tests import host_cache
from wino import cache
from wino.pick import default_stage_specs
from wino.problem import Problem
from wino.runtime import conv2d_reference, dispatch, loader, relative_error
from wino.runtime.cuda import CudaBackend
from wino.vocab import TILES, Stage, Target

PROBLEM = Problem(N=1, C=8, H=6, W=6, K=8)
TILE = TILES[0]
SPECS = default_stage_specs(PROBLEM, TILE)

EVIL = r"""
#include <stdio.h>
__attribute__((constructor)) static void evil_ran(void) {
  FILE* f = fopen(MARK, "w"); if (f) { fputs("ran", f); fclose(f); }
}
void %(symbol)s(const void* args, float* a, float* b, float* c, float* d,
                unsigned gx, unsigned gy) { (void)args; (void)a; (void)b; (void)c; (void)d; }
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("loader")
    host_cache.build(SPECS.values(), root)
    return root


@pytest.fixture()
def root(built, tmp_path) -> Path:
    shutil.copytree(built, tmp_path / "b", symlinks=True)
    return tmp_path / "b"


def _evil(tmp_path: Path, symbol: str) -> tuple[Path, Path]:
    """A shared object exporting ``symbol`` that does nothing but whose constructor writes a
    mark file when it is loaded."""
    mark, src, so = tmp_path / "evil-ran", tmp_path / "evil.c", tmp_path / "evil.so"
    src.write_text(EVIL % {"symbol": symbol})
    cmd = ["cc", "-shared", "-fPIC", f'-DMARK="{mark}"', "-o", str(so), str(src)]
    subprocess.run(cmd, check=True, capture_output=True)
    return so, mark


def _run(root: Path):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 6, 6, 8)).astype(np.float32)
    w = rng.standard_normal((8, 3, 3, 8)).astype(np.float32)
    plan = dispatch(PROBLEM, target="c", tile=TILE, cache_root=root)
    return plan.run(x, w), conv2d_reference(x, w)


def test_a_binary_swapped_between_check_and_load_is_not_what_runs(root, tmp_path, monkeypatch):
    """The hook runs after the bytes were read and hashed, before they are loaded: it swaps the
    K4 binary for one whose constructor leaves a mark and whose kernel writes nothing. The
    checked bytes run (the output is right), the swapped file never loads."""
    manifest = cache.find_manifest(Target.C, root)
    victim = manifest.kernels[SPECS[Stage.OUTPUT].name]
    evil, mark = _evil(tmp_path, victim.symbol)
    real = loader.load_shared_object
    swapped = []

    def swap_then_load(image: bytes, name: str):
        if name == victim.name:
            shutil.copy(evil, victim.path)
            swapped.append(name)
        return real(image, name)

    monkeypatch.setattr(loader, "load_shared_object", swap_then_load)
    y, ref = _run(root)
    assert swapped == [victim.name]
    assert relative_error(y, ref) < 1e-5
    assert not mark.exists()
    ctypes.CDLL(str(victim.path))  # control: loading the swapped file by path runs it
    assert mark.read_text() == "ran"


def test_loaded_images_are_sealed_memory_files(root):
    _run(root)
    fd = next(h for h, _ in reversed(loader._LOADED) if isinstance(h, int))
    assert os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:wino-")
    with pytest.raises(OSError):
        os.write(fd, b"x")


def test_without_memfd_a_private_file_holds_the_checked_bytes(root, monkeypatch):
    def no_memfd(*args):
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(os, "memfd_create", no_memfd)
    before = len(loader._LOADED)
    y, ref = _run(root)
    assert relative_error(y, ref) < 1e-5
    paths = [h for h, _ in loader._LOADED[before:]]
    assert paths and all(isinstance(p, str) for p in paths)
    for path in paths:
        assert os.stat(os.path.dirname(path)).st_mode & 0o077 == 0


def test_without_memfd_or_a_temporary_folder_the_error_says_what_to_do(monkeypatch):
    def fail(*args, **kwargs):
        raise OSError(13, "Permission denied")

    monkeypatch.setattr(os, "memfd_create", fail)
    monkeypatch.setattr(loader.tempfile, "mkdtemp", fail)
    with pytest.raises(loader.LoaderError, match="memfd_create is unavailable.*TMPDIR"):
        loader.load_shared_object(b"\x7fELF", "k_demo")


class _Module:
    """CuPy's Module as far as the CUDA backend uses it: records what it is given."""

    loaded: list[bytes] = []

    def load(self, image: bytes) -> None:
        self.loaded.append(image)

    def load_file(self, path: str) -> None:
        raise AssertionError(f"loaded by path: {path}")

    def get_function(self, symbol: str) -> str:
        return symbol


def test_cuda_modules_load_the_checked_bytes(root):
    """The CUDA backend hands cuModuleLoadData the bytes it hashed (a fake CuPy stands in;
    any manifest serves, here the host one): a later swap of the file changes nothing, a
    corrupted file is refused before anything loads."""
    manifest = cache.find_manifest(Target.C, root)
    backend = object.__new__(CudaBackend)
    backend.manifest = manifest
    backend.cupy = SimpleNamespace(cuda=SimpleNamespace(function=SimpleNamespace(Module=_Module)))
    backend._functions = {}
    name = SPECS[Stage.INPUT].name
    entry = manifest.kernels[name]
    original = entry.path.read_bytes()
    _Module.loaded.clear()
    assert backend.function(name) == entry.symbol
    assert _Module.loaded == [original]
    other = manifest.kernels[SPECS[Stage.OUTPUT].name]
    other.path.write_bytes(other.path.read_bytes()[:-1])
    with pytest.raises(cache.CacheError, match="sha256 does not match"):
        backend.function(other.name)
    assert _Module.loaded == [original]
