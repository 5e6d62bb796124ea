"""Spills: the default CUDA picks for the public layers must not spill (ptxas -v report), and
wino.builder.report lists the grid kernels that do (`wino grid --spills`)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from wino import cache
from wino.builder import builder
from wino.builder.report import format_spill_report, spill_report
from wino.kinds import kind_of
from wino.pick import default_stage_specs
from wino.problem import Problem
from wino.refusals import Refused
from wino.specs import RtFilterSpec
from wino.vocab import TILES, DType, Target

PUBLIC = Path(__file__).resolve().parents[1] / "cases" / "public.txt"


def _manifest(spills: dict[str, int | None]) -> cache.Manifest:
    spec = RtFilterSpec()
    abi = cache.KernelAbi.from_record(kind_of(spec).abi_record(spec))
    kernels = {
        name: cache.CachedKernel(name, spec, name, Path(name), "0" * 64, 64, value, abi)
        for name, value in spills.items()
    }
    return cache.Manifest(Target.CUDA, "nvcc-13.0-sm_90", Path("."), {}, kernels)


def test_spill_report_lists_spilling_kernels_most_first():
    manifest = _manifest({"a": 0, "b": 8, "c": None, "d": 96})
    assert [k.name for k in spill_report(manifest)] == ["d", "b"]
    text = format_spill_report(manifest)
    assert "2 of 4 kernels spill" in text and text.index("d ") < text.index("b ")
    assert "no kernel of 1 spills" in format_spill_report(_manifest({"a": 0}))


def _public_problems() -> list[Problem]:
    lines = [ln.strip() for ln in PUBLIC.read_text().splitlines() if ln.split("#", 1)[0].strip()]
    return [Problem.from_miopen(line) for line in lines]


def default_picks(problems: list[Problem]) -> dict[str, list[str]]:
    """{kernel name: the (layer, tile, dtype) cases that pick it}, every tile and dtype."""
    picks: dict[str, list[str]] = {}
    specs = {}
    for problem in problems:
        for tile in TILES:
            for dtype in DType:
                try:
                    chosen = default_stage_specs(problem, tile, dtype, target=Target.CUDA).values()
                except Refused:
                    continue
                for spec in chosen:
                    specs[spec.name] = spec
                    picks.setdefault(spec.name, []).append(
                        f"{problem.to_miopen()} {tile.name} {dtype.value}"
                    )
    return specs, picks


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc absent: no ptxas spill report")
def test_default_cuda_picks_do_not_spill(tmp_path, monkeypatch):
    monkeypatch.setenv("WINO_BUILD", str(tmp_path))
    specs, cases = default_picks(_public_problems())
    result = builder.build(specs.values(), [Target.CUDA], root=tmp_path, jobs=2)
    (path,) = result.manifests.values()
    spilled = spill_report(cache.read_manifest(path))
    assert all(k.spills is not None for k in cache.read_manifest(path).kernels.values())
    assert not spilled, "default picks that spill:\n" + "\n".join(
        f"{k.name}: {k.spills} bytes, {k.registers} registers; picked by {cases[k.name][0]}"
        for k in spilled
    )
