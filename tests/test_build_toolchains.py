"""wino.builder.toolchains: identity, flavors, skip messages, HIP arch probes, compiler reports."""

from __future__ import annotations

import re
import shutil

import pytest

from wino.builder import toolchains
from wino.builder.cache_writer import KernelBinary, binary_digest
from wino.builder.toolchains import Toolchain, family_version, parse_hip_resources, parse_ptxas
from wino.vocab import Target

FLAVOR = re.compile(r"^[A-Za-z0-9_.+-]+$")


@pytest.fixture(autouse=True)
def _build_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("WINO_BUILD", str(tmp_path / "build"))


def _declared_with(monkeypatch, target: Target, **changes):
    real = toolchains.config.declared("targets")
    entry = {**real["targets"].get(target.value, {}), **changes}
    fake = {**real, "targets": {**real["targets"], target.value: entry}}
    monkeypatch.setattr(toolchains.config, "declared", lambda kind: fake)


@pytest.mark.parametrize(
    ("target", "line", "expected"),
    [
        (Target.C, "cc (Debian 12.2.0-14+deb12u1) 12.2.0", ("gcc", "12.2.0")),
        (Target.C, "Ubuntu clang version 18.1.3 (1ubuntu1)", ("clang", "18.1.3")),
        (Target.CUDA, "Cuda compilation tools, release 13.0, V13.0.88", ("nvcc", "13.0")),
        (Target.HIP, "Debian clang version 19.1.7 (3~deb12u1)", ("clang", "19.1.7")),
    ],
)
def test_family_version(target, line, expected):
    assert family_version(target, line) == expected


def test_flavor_names():
    def tc(target, family, version, arch):
        return Toolchain(target, "x", "/x", "line", family, version, (), arch)

    assert tc(Target.C, "gcc", "12.2.0", "host").flavor == "gcc-12.2.0"
    assert tc(Target.CUDA, "nvcc", "13.0", "sm_90").flavor == "nvcc-13.0-sm_90"
    assert tc(Target.HIP, "clang", "19.1.7", "gfx1100").flavor == "clang-19.1.7-gfx1100"
    assert tc(Target.C, "gcc", "12 (odd)", "host").flavor == "gcc-12__odd_"


@pytest.mark.parametrize("target", list(Target))
def test_present_toolchains_have_clean_flavors(target):
    resolved = toolchains.resolve(target)
    if not resolved.toolchains:
        pytest.skip("; ".join(resolved.messages))
    for tc in resolved.toolchains:
        assert FLAVOR.match(tc.flavor), tc.flavor
        assert tc.identity and tc.version != "unknown"
        assert tc.flavor.startswith(tc.family + "-" + tc.version)


@pytest.mark.parametrize("target", list(Target))
def test_missing_compiler_skips_the_target_and_says_how_to_get_it(monkeypatch, target):
    _declared_with(monkeypatch, target, compiler="wino-no-such-compiler-19")
    resolved = toolchains.resolve(target)
    assert resolved.toolchains == ()
    (message,) = resolved.messages
    assert "wino-no-such-compiler-19" in message and f"target {target.value}" in message
    assert toolchains.KITS[target].how_to_get in message


def test_hip_how_to_names_the_debian_packages():
    assert "apt-get install clang-19 lld-19" in toolchains.KITS[Target.HIP].how_to_get


@pytest.mark.skipif(
    shutil.which("clang-19") is None, reason="clang-19 absent (apt-get install clang-19 lld-19)"
)
def test_unknown_hip_arch_is_skipped_and_probes_are_cached(monkeypatch, tmp_path):
    _declared_with(monkeypatch, Target.HIP, archs=["gfx1100", "gfx9999"])
    resolved = toolchains.resolve(Target.HIP)
    assert [tc.arch for tc in resolved.toolchains] == ["gfx1100"]
    assert any("gfx9999" in m and "does not know it" in m for m in resolved.messages)
    cache = tmp_path / "build" / "toolchains.json"
    assert cache.is_file()
    calls = []
    monkeypatch.setattr(toolchains, "_hip_compiles", lambda *a, **k: calls.append(a) or True)
    assert [tc.arch for tc in toolchains.resolve(Target.HIP).toolchains] == ["gfx1100"]
    assert calls == [], "a cached probe ran clang again"


PTXAS = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k2_x' for 'sm_90'
ptxas info    : Function properties for k2_x
    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 80 registers, used 1 barriers, 8 bytes cumulative stack size, 1024 bytes smem
"""


def test_parse_ptxas():
    report = parse_ptxas(PTXAS)
    assert report["registers"] == 80 and report["spills"] == 16
    assert report["extra"] == {
        "barriers": 1,
        "smem_bytes": 1024,
        "stack_bytes": 8,
        "spill_store_bytes": 4,
        "spill_load_bytes": 12,
    }
    assert parse_ptxas("") == {"registers": None, "spills": None, "extra": {}}


def test_parse_hip_resources():
    log = "x.hip:1:1: remark:     VGPRs: 28 [-Rpass]\nx.hip:1:1: remark:     VGPRs Spill: 2 [x]\n"
    assert parse_hip_resources(log)["extra"]["amdgpu"] == {"vgprs": 28, "vgpr_spills": 2}


def test_binary_address_hashes_contents_not_paths():
    tc = Toolchain(
        Target.CUDA,
        "nvcc",
        "/usr/local/bin/nvcc",
        "release 13.0",
        "nvcc",
        "13.0",
        ("-O3",),
        "sm_90",
    )
    moved = Toolchain(
        Target.CUDA, "nvcc", "/opt/cuda/bin/nvcc", "release 13.0", "nvcc", "13.0", ("-O3",), "sm_90"
    )
    base = binary_digest("ab" * 32, tc)
    assert binary_digest("ab" * 32, moved) == base
    assert (
        KernelBinary("k", tc, "ab" * 32, "/a").digest
        == KernelBinary("k", tc, "ab" * 32, "/b").digest
    )
    for changed in (
        Toolchain(Target.CUDA, "nvcc", "/x", "release 13.1", "nvcc", "13.1", ("-O3",), "sm_90"),
        Toolchain(Target.CUDA, "nvcc", "/x", "release 13.0", "nvcc", "13.0", ("-O2",), "sm_90"),
        Toolchain(Target.CUDA, "nvcc", "/x", "release 13.0", "nvcc", "13.0", ("-O3",), "sm_100"),
    ):
        assert binary_digest("ab" * 32, changed) != base
    assert binary_digest("cd" * 32, tc) != base
    assert re.fullmatch(r"[0-9a-f]{16}", base)
