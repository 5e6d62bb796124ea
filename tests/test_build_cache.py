"""The cache the build writes (wino.cache format): a full c build of the grid in a temporary
build folder, content-addressed binaries, manifests that list exactly the grid, no warnings;
samples through nvcc and clang where present."""

from __future__ import annotations

import ctypes
import json
import shutil

import pytest

from wino import cache
from wino.builder import builder
from wino.builder.cache_writer import KernelBinary
from wino.builder.plan import plan
from wino.grid import GRID_STAGES, aot_stage_specs
from wino.vocab import Target


@pytest.fixture(scope="module")
def build_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("build-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WINO_BUILD", str(root))
        yield root


@pytest.fixture(scope="module")
def c_build(build_root):
    """The whole grid for the c target (about a minute on two cores)."""
    return builder.build(None, [Target.C], root=build_root, jobs=2)


def _sample():
    """One spec per stage and K2 path/prescale kind."""
    seen, out = set(), []
    for spec in aot_stage_specs():
        key = (spec.stage, getattr(spec, "path", None), getattr(spec, "prescale", None))
        if key not in seen:
            seen.add(key)
            out.append(spec)
    return out


def test_c_manifest_lists_exactly_the_grid(c_build, build_root):
    (flavor,) = c_build.manifests
    manifest = cache.find_manifest(Target.C, build_root, flavor)
    assert sorted(manifest.kernels) == sorted(s.name for s in aot_stage_specs(target=Target.C))
    for spec in aot_stage_specs(target=Target.C):
        entry = manifest.kernel(spec.name)  # verifies the checksum
        assert entry.spec == spec and entry.symbol == spec.name
        assert entry.path.name.startswith(f"{spec.name}-") and entry.path.suffix == ".so"


def test_c_kernels_compile_without_warnings(c_build, build_root):
    (flavor,) = c_build.manifests
    reports = sorted((build_root / "cache").glob(f"v*/c/{flavor}/bin/*.json"))
    assert len(reports) >= len(aot_stage_specs(target=Target.C))
    noisy = {}
    for path in reports:
        log = json.loads(path.read_text())["log"]
        if log.strip():
            noisy[path.stem] = log
    assert not noisy, f"{len(noisy)} c kernels warn at -Wall, e.g. {next(iter(noisy.items()))}"


def test_c_binaries_export_their_symbol(c_build, build_root):
    manifest = cache.find_manifest(Target.C, build_root)
    for spec in _sample():
        lib = ctypes.CDLL(str(manifest.kernel(spec.name).path))
        assert hasattr(lib, spec.name)


def test_second_build_compiles_nothing(c_build, build_root):
    again = builder.build(None, [Target.C], root=build_root, jobs=2)
    assert again.compiled == []
    assert {f: p.read_bytes() for f, p in again.manifests.items()} == {
        f: p.read_bytes() for f, p in c_build.manifests.items()
    }


def test_binary_names_are_content_addresses(c_build, build_root):
    (p,) = plan([Target.C], _sample(), str(build_root), quiet=True)
    for job in p.jobs:
        (kb,) = job.binaries
        assert kb.binary.is_file() and kb.report.is_file()
        assert kb.binary.name == f"{job.name}-{kb.digest}.so"
        moved = KernelBinary(kb.name, kb.toolchain, kb.source_sha256, "/elsewhere")
        assert moved.digest == kb.digest


def test_manifest_keeps_only_what_it_is_given(c_build, build_root, tmp_path):
    """A subset build publishes a manifest of exactly that subset (binaries are shared)."""
    subset = _sample()
    result = builder.build(subset, [Target.C], root=build_root, jobs=2)
    assert result.compiled == []
    (path,) = result.manifests.values()
    assert sorted(cache.read_manifest(path).kernels) == sorted(s.name for s in subset)
    builder.build(None, [Target.C], root=build_root, jobs=2)  # restore the full manifest


def test_sample_covers_every_stage():
    assert {s.stage for s in _sample()} == set(GRID_STAGES)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc absent: CUDA sources not compiled")
def test_cuda_sample_compiles_with_a_register_report(build_root):
    result = builder.build(_sample(), [Target.CUDA], root=build_root, jobs=2)
    (path,) = result.manifests.values()
    manifest = cache.read_manifest(path)
    raw = json.loads(path.read_text())
    for spec in _sample():
        entry = manifest.kernel(spec.name)
        assert entry.path.suffix == ".cubin" and entry.registers and entry.spills is not None
        extra = raw["kernels"][spec.name]["extra"]
        ptx = manifest.directory / extra["ptx"]
        assert (
            ptx.read_text().lstrip().startswith("//")
            and cache.sha256_file(ptx) == extra["ptx_sha256"]
        )
        assert {"stack_bytes", "spill_store_bytes", "spill_load_bytes"} <= set(extra)


@pytest.mark.skipif(
    shutil.which("clang-19") is None,
    reason="clang-19 absent (apt-get install clang-19 lld-19): HIP sources not compiled",
)
def test_hip_sample_compiles_for_every_known_arch(build_root):
    sample = _sample()[:3]
    result = builder.build(sample, [Target.HIP], root=build_root, jobs=2)
    assert result.manifests, result.messages
    for path in result.manifests.values():
        manifest = cache.read_manifest(path)
        raw = json.loads(path.read_text())
        for spec in sample:
            entry = manifest.kernel(spec.name)
            ll = (manifest.directory / raw["kernels"][spec.name]["extra"]["ll"]).read_text()
            assert str(build_root) not in ll, "the IR names the build folder"
            if entry.path.suffix == ".hsaco":
                assert entry.path.read_bytes()[:4] == b"\x7fELF"
