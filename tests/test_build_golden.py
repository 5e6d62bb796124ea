"""The golden shard: rendered sources, PTX and LLVM IR hashes must not change unless re-recorded
(`doit golden_record`, docs/BUILD.md)."""

from __future__ import annotations

import pytest

from wino.builder import golden
from wino.grid import GRID_STAGES, in_grid
from wino.specs import RtInputSpec
from wino.vocab import DType, Epilogue, K2Path, Prescale, Stage, Target

HOW = "re-record with `doit golden_record` if the change is intended, and say so in the commit"


@pytest.fixture(autouse=True)
def _build_in_tmp(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("WINO_BUILD", str(tmp_path_factory.getbasetemp() / "golden-build"))


def test_shard_is_representative():
    specs = [k.spec for k in golden.SHARD]
    assert 12 <= len(golden.SHARD) <= 21
    assert {s.stage for s in specs} == set(GRID_STAGES)
    k2 = [s for s in specs if isinstance(s, RtInputSpec)]
    assert {s.path for s in k2} == set(K2Path)
    assert {s.prescale for s in k2} == set(Prescale) - {Prescale.NONE}  # every grid K2 scales
    assert {s.prescale for s in specs if hasattr(s, "prescale")} == set(Prescale)
    assert {s.io for s in specs} == set(DType)
    assert len({s.tile for s in specs}) >= 4
    last = [s for s in specs if s.stage in (Stage.OUTPUT, Stage.FUSED)]  # with and without
    assert {(s.stage, s.epilogue is Epilogue.NONE) for s in last} == {
        (stage, plain) for stage in (Stage.OUTPUT, Stage.FUSED) for plain in (True, False)
    }
    assert any(k.baked for k in golden.SHARD)
    assert {s.hold for s in specs if s.stage is Stage.FUSED} == {0, 64}  # both KF schedules
    held = [s for s in specs if s.stage is Stage.FUSED and s.hold]
    assert {s.tcx for s in held} == {0, 1}  # the held transforms on both units
    assert {s.xbits for s in held} == {16, 32}  # the input transform on fp16 pairs and in fp32
    assert {s.chain > 0 for s in held} == {False, True}  # one tile block a workgroup, or several
    assert {s.xbits for s in specs if s.stage is Stage.INPUT} == {16, 32}  # K2's too
    assert len({k.label for k in golden.SHARD}) == len(golden.SHARD)
    assert all(in_grid(k.spec) for k in golden.SHARD), "shard specs should be grid kernels"


def test_rendered_sources_match_golden():
    mismatches = golden.check_sources()
    assert not mismatches, "\n".join(mismatches) + "\n" + HOW


def _ir_toolchains(target: Target):
    chains = [tc for tc in golden.ir_toolchains() if tc.target is target]
    if not chains:
        pytest.skip(f"no {target.value} compiler here; its IR golden hashes are not checked")
    present = [tc for tc in chains if golden.ir_file(tc).is_file()]
    if not present:
        names = ", ".join(golden.ir_file(tc).name for tc in chains)
        pytest.skip(f"no golden file for this toolchain ({names}); `doit golden_record` adds it")
    return present


def test_ptx_matches_golden():
    for tc in _ir_toolchains(Target.CUDA):
        mismatches = golden.check_ir(tc)
        assert not mismatches, "\n".join(mismatches) + "\n" + HOW


def test_llvm_ir_matches_golden():
    for tc in _ir_toolchains(Target.HIP):
        mismatches = golden.check_ir(tc)
        assert not mismatches, "\n".join(mismatches) + "\n" + HOW


def test_compare_names_every_kind_of_difference():
    lines = golden.compare({"a": "1" * 64, "b": "2" * 64}, {"a": "3" * 64, "c": "4" * 64}, "x")
    assert any("a changed" in line for line in lines)
    assert any("b is recorded but no longer" in line for line in lines)
    assert any("c is in the shard but not recorded" in line for line in lines)


def test_record_round_trips(tmp_path):
    written = golden.record(tmp_path, toolchains=[])
    assert [p.name for p in written] == ["sources.json"]
    assert golden.check_sources(tmp_path) == []
