"""The HIP target's MMA primitives on gfx11's WMMA (compile-only: no AMD GPU runs them here).

The fused kernel's accumulators follow mma.sync's layout (lane 4 g + t owns rows g, g + 8 and
columns 2 t, 2 t + 1 of each 16 x 8 tile); gfx11's WMMA leaves lane l with column l % 16 and rows
2 v + l / 16 of a 16 x 16 block. ``wino_wmma_add`` moves each element from the one layout to
the other by the C expressions ``WMMA_SRC_LANE`` / ``WMMA_SRC_SLOT``, which are also Python:
these tests evaluate that very text against both layouts, then check what the HIP source says
and (with clang-19) what it compiles to."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from wino import grid
from wino.codegen.render import render
from wino.codegen.renderers import WMMA_SRC_LANE, WMMA_SRC_SLOT
from wino.vocab import DType, Epilogue, Stage, Target

FUSED = tuple(
    s for s in grid.aot_stage_specs(Stage.FUSED, Target.HIP) if s.epilogue is Epilogue.NONE
)
CHUNKED = next(s for s in FUSED if not s.hold and s.mdtype is DType.FP16)
CHUNKED_BF16 = next(s for s in FUSED if not s.hold and s.mdtype is DType.BF16)
HELD = next(s for s in FUSED if s.hold and not s.tcx)


def _mma_element(lane: int, jj: int, e: int) -> tuple[int, int]:
    """mma.sync: (row, column) within a 16 x 16 block of accumulator element e of 8-column
    tile jj that lane holds."""
    g, t = lane >> 2, lane & 3
    return g + 8 * (e >> 1), 8 * jj + 2 * t + (e & 1)


def _wmma_element(lane: int, v: int) -> tuple[int, int]:
    """gfx11 WMMA (wave32, f32 result): (row, column) of element v that lane holds."""
    return 2 * v + lane // 16, lane % 16


def _source(lane: int, jj: int, e: int) -> tuple[int, int]:
    """The renderer's C expressions, evaluated: where wino_wmma_add fetches the element."""
    names = {"g": lane >> 2, "t": lane & 3, "jj": jj, "e": e}
    return eval(WMMA_SRC_LANE, {}, names), eval(WMMA_SRC_SLOT, {}, names)  # noqa: S307


def test_every_element_comes_from_the_wmma_lane_that_holds_it():
    for lane in range(32):
        for jj in range(2):
            for e in range(4):
                src, slot = _source(lane, jj, e)
                assert 0 <= src < 32 and 0 <= slot < 8
                assert _wmma_element(src, slot) == _mma_element(lane, jj, e), (lane, jj, e)


def test_the_fetch_is_a_permutation_of_the_block():
    """Each of the 256 WMMA elements lands in exactly one (lane, tile, element) slot."""
    fetched = [_source(lane, jj, e) for lane in range(32) for jj in range(2) for e in range(4)]
    assert sorted(fetched) == [(s, v) for s in range(32) for v in range(8)]


def test_the_candidates_the_text_reads_hold_the_element():
    """The C text reads element 4 (e / 2) + k from the source lane for k < 4 (the same register
    in every lane, as ds_bpermute needs) and keeps k == slot % 4: so slot / 4 must be e / 2."""
    for lane in range(32):
        for jj in range(2):
            for e in range(4):
                _, slot = _source(lane, jj, e)
                assert slot >> 2 == e >> 1 and (slot & 3) == lane >> 3


@pytest.mark.parametrize("spec", [CHUNKED, CHUNKED_BF16, HELD], ids=lambda s: s.name)
def test_hip_renders_wmma_for_gfx11_and_the_scalar_form_elsewhere(spec):
    hip = render(spec, "hip")
    gfx11, rest = hip.split("#if defined(__GFX11__)\n", 1)[1].split(
        "#elif defined(__gfx942__)\n", 1
    )
    scalar = rest.split("#else\n", 1)[1]
    kind = "bf16" if spec.mdtype is DType.BF16 else "f16"
    assert f"__builtin_amdgcn_wmma_f32_16x16x16_{kind}_w32" in gfx11
    assert "__builtin_amdgcn_ds_bpermute" in gfx11
    assert "__builtin_amdgcn_wmma" not in scalar.split("#endif", 1)[0]
    assert "for (int q = 0; q < 32; ++q)" in scalar or "for (int k = 0; k < 16; ++k)" in scalar
    for target in ("cuda", "c"):
        assert "wmma" not in render(spec, target)


def _clang() -> str:
    path = shutil.which("clang-19")
    if path is None:
        pytest.skip("clang-19 is not installed (the HIP target's compiler)")
    return path


@pytest.mark.parametrize("spec", [CHUNKED, HELD], ids=lambda s: s.name)
def test_gfx1100_compiles_to_wmma_and_gfx942_does_not(spec, tmp_path: Path):
    clang = _clang()
    source = tmp_path / f"{spec.name}.hip"
    source.write_text(render(spec, "hip"), encoding="utf-8")
    counts = {}
    for arch in ("gfx1100", "gfx942"):
        out = tmp_path / f"{arch}.s"
        flags = ["-x", "hip", "-nogpulib", "-nogpuinc", "--cuda-device-only", "-O3"]
        subprocess.run(
            [clang, *flags, "-std=c++17", f"--offload-arch={arch}", "-S", "-o", out, source],
            check=True,
            capture_output=True,
        )
        counts[arch] = out.read_text(encoding="utf-8").count("v_wmma_f32_16x16x16")
    assert counts["gfx1100"] > 0 and counts["gfx942"] == 0, counts
