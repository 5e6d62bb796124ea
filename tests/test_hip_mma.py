"""The HIP target's MMA primitives on gfx11's WMMA and gfx942's MFMA (compile-only: no AMD GPU
runs them here).

The fused kernel's accumulators follow mma.sync's layout (lane 4 g + t owns rows g, g + 8 and
columns 2 t, 2 t + 1 of each 16 x 8 tile).

gfx11's WMMA leaves lane l with column l % 16 and rows 2 v + l / 16 of a 16 x 16 block.
``wino_wmma_add`` moves each element from the one layout to the other by the C expressions
``WMMA_SRC_LANE`` / ``WMMA_SRC_SLOT``, which are also Python: these tests evaluate that very
text against both layouts.

gfx942's ``v_mfma_f32_4x4x4_16b_{f16,bf16}`` (CDNA3) is sixteen independent 4 x 4 x 4 products
over the wave64 (``_mfma``, the layout AMD's matrix instruction calculator gives). Which row of
A and column of B a lane supplies, and where each result register lands in mma.sync's
fragments, are the renderer's C expressions ``MFMA_A_ROW``, ``MFMA_B_COL`` and
``MFMA_D_INDEX``, also Python: these tests run the helpers' loops over that very text on the
emulated instruction, with the two 32-lane warps of a wave multiplying different tiles, and
check every accumulator against the exact product.

Then what the HIP source says and (with clang-19) what it compiles to."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from wino import grid
from wino.codegen.render import render
from wino.codegen.renderers import (
    MFMA_A_ROW,
    MFMA_B_COL,
    MFMA_D_INDEX,
    WMMA_SRC_LANE,
    WMMA_SRC_SLOT,
    HipRenderer,
)
from wino.vocab import DType, Epilogue, Stage, Target

FUSED = tuple(
    s for s in grid.aot_stage_specs(Stage.FUSED, Target.HIP) if s.epilogue is Epilogue.NONE
)
CHUNKED = next(s for s in FUSED if not s.hold and s.mdtype is DType.FP16)
CHUNKED_BF16 = next(s for s in FUSED if not s.hold and s.mdtype is DType.BF16)
HELD = next(s for s in FUSED if s.hold and not s.tcx)

#: The renderer's arch branches of a HIP MMA helper (``_by_arch``): the line that opens each
#: and the text that ends it.
BRANCHES = {
    "gfx11": ("#if defined(__GFX11__)\n", "#elif defined(__gfx942__)\n"),
    "gfx942": ("#elif defined(__gfx942__)\n", "#else\n"),
    "scalar": ("#else\n", "\n#endif"),
}
#: The wave size of each arch with a matrix instruction.
WAVES = {"gfx11": 32, "gfx942": 64}


def _branch(text: str, arch: str) -> str:
    """The arch's branch of the (first) HIP MMA helper in ``text``."""
    opens, closes = BRANCHES[arch]
    return text.split(opens, 1)[1].split(closes, 1)[0]


def _ev(expr: str, **names: int) -> int:
    return eval(expr, {}, names)  # noqa: S307  (the renderer's own C text, also Python)


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
    return _ev(WMMA_SRC_LANE, **names), _ev(WMMA_SRC_SLOT, **names)


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
    gfx11, scalar = _branch(hip, "gfx11"), _branch(hip, "scalar")
    kind = "bf16" if spec.mdtype is DType.BF16 else "f16"
    assert f"__builtin_amdgcn_wmma_f32_16x16x16_{kind}_w32" in gfx11
    assert "__builtin_amdgcn_ds_bpermute" in gfx11
    assert "__builtin_amdgcn_wmma" not in scalar
    assert "for (int q = 0; q < 32; ++q)" in scalar or "for (int k = 0; k < 16; ++k)" in scalar
    for target in ("cuda", "c"):
        assert "wmma" not in render(spec, target)


def _mfma(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """v_mfma_f32_4x4x4_16b on 64 lanes: a, b [64][4] (k values), c [64][4] (registers).
    Block q of lanes 4 q .. 4 q + 3: lane 4 q + m holds row m of the block's A, lane 4 q + n
    column n of its B, and column n of its D (row m in register m)."""
    d = c.copy()
    for block in range(16):
        lanes = slice(4 * block, 4 * block + 4)
        product = a[lanes] @ b[lanes].T  # [row m][column n]
        d[lanes] += product.T  # lane n: column n, rows in its registers
    return d


def _warp_mma(mt: int, nt: int, k: int, a: np.ndarray, b: np.ndarray, d: np.ndarray) -> None:
    """The gfx942 helpers' loops for both warps w of a wave: a[w] (16 mt x k), b[w] ([8 nt][k]),
    d[w][lane] (4 mt nt accumulators in mma.sync's layout), in steps of 4 k values."""
    for i0 in range(0, mt, 2):
        i1 = min(i0 + 1, mt - 1)
        for j in range(nt):
            for par in range(2):
                ops_a, ops_b, acc = np.zeros((64, k)), np.zeros((64, k)), np.zeros((64, 4))
                index = {}
                for hw in range(64):
                    w, lane = hw >> 5, hw & 31
                    at = {"g": lane >> 2, "t": lane & 3, "i0": i0, "i1": i1, "j": j, "par": par}
                    ops_a[hw] = a[w][_ev(MFMA_A_ROW, **at)]
                    ops_b[hw] = b[w][_ev(MFMA_B_COL, **at)]
                    for m in range(4):
                        index[hw, m] = _ev(MFMA_D_INDEX, m=m, nt=nt, **at)
                        acc[hw, m] = d[w][lane][index[hw, m]]
                for s in range(0, k, 4):
                    acc = _mfma(ops_a[:, s : s + 4], ops_b[:, s : s + 4], acc)
                for hw in range(64):
                    for m in range(4 if i1 > i0 else 2):
                        d[hw >> 5][hw & 31][index[hw, m]] = acc[hw, m]


@pytest.mark.parametrize("k", [16, 32], ids=["k16", "k32"])
@pytest.mark.parametrize("mt", [1, 2, 3])
@pytest.mark.parametrize("nt", [1, 2, 3])
def test_both_warps_of_a_wave_get_their_own_product_in_mma_sync_s_layout(mt, nt, k):
    rng = np.random.default_rng(100 * mt + 10 * nt + k)
    a = rng.integers(-8, 9, (2, 16 * mt, k)).astype(np.float64)
    b = rng.integers(-8, 9, (2, 8 * nt, k)).astype(np.float64)
    d0 = rng.integers(-64, 65, (2, 32, 4 * mt * nt)).astype(np.float64)
    d = d0.copy()
    _warp_mma(mt, nt, k, a, b, d)
    for w in range(2):
        want = a[w] @ b[w].T
        for lane in range(32):
            g, t = lane >> 2, lane & 3
            for i in range(mt):
                for j in range(nt):
                    for e in range(4):
                        slot = 4 * (i * nt + j) + e
                        row, col = 16 * i + g + 8 * (e >> 1), 8 * j + 2 * t + (e & 1)
                        assert d[w][lane][slot] == d0[w][lane][slot] + want[row, col], (
                            w,
                            lane,
                            i,
                            j,
                            e,
                        )


def test_every_lane_supplies_a_row_and_a_column_its_block_needs():
    """Block g's four A rows are rows g and g + 8 of tiles i0 and i1, and its four B columns
    the columns of one parity of tile j: the rows its D registers land in and the columns its
    lanes keep."""
    for i0, i1 in ((0, 1), (2, 2)):
        for g in range(8):
            rows = [_ev(MFMA_A_ROW, g=g, t=t, i0=i0, i1=i1) for t in range(4)]
            assert rows == [16 * i0 + g, 16 * i0 + g + 8, 16 * i1 + g, 16 * i1 + g + 8]
            for par in range(2):
                cols = [_ev(MFMA_B_COL, g=g, t=t, j=1, par=par) for t in range(4)]
                assert cols == [8 + 2 * t + par for t in range(4)]


def _helper_expr(text: str, name: str) -> str:
    return re.search(rf"{name}\(int \w\)\n{{\n  return (.+);\n}}", text).group(1)


def test_the_held_step_pairs_u_s_channel_c_with_a_s_column_kcol_c():
    """The gfx942 held helper runs k over U's channels c against A's column wino_kcol(c), where
    the other forms run it over A's columns q against U's channel wino_kchan(q): the same sum iff
    wino_kcol inverts wino_kchan on the 32 columns of a step."""
    text = HipRenderer().held_layout_helpers()
    kchan, kcol = _helper_expr(text, "wino_kchan"), _helper_expr(text, "wino_kcol")
    assert sorted(_ev(kchan, q=q) for q in range(32)) == list(range(32))
    assert all(_ev(kcol, c=_ev(kchan, q=q)) == q for q in range(32))


@pytest.mark.parametrize("spec", [CHUNKED, CHUNKED_BF16, HELD], ids=lambda s: s.name)
def test_hip_renders_mfma_for_gfx942_only(spec):
    hip = render(spec, "hip")
    mfma = _branch(hip, "gfx942")
    name = "4x4x4bf16_1k" if spec.mdtype is DType.BF16 else "4x4x4f16"
    assert f"__builtin_amdgcn_mfma_f32_{name}(af[s], bf[s], c, 0, 0, 0)" in mfma
    for expr in (MFMA_A_ROW, MFMA_B_COL, MFMA_D_INDEX):
        assert expr in mfma
    assert ("wino_kcol(c)" in mfma) == bool(spec.hold)
    assert hip.count("__builtin_amdgcn_mfma") == hip.count("#elif defined(__gfx942__)")
    for target in ("cuda", "c"):
        assert "mfma" not in render(spec, target)


LOCKSTEP = Path(__file__).parent / "native" / "mma_lockstep.cpp"


@pytest.mark.parametrize("arch", sorted(WAVES))
@pytest.mark.parametrize("dtype", [DType.FP16, DType.BF16], ids=lambda d: d.short)
@pytest.mark.parametrize("mt, nt", [(1, 2), (2, 3), (3, 1)])
@pytest.mark.parametrize("form", ["chunked", "held", "held_bounds"])
def test_the_rendered_helper_run_in_lockstep_on_the_host(arch, dtype, mt, nt, form, tmp_path):
    """The helper's C text itself (not the expressions alone), built for the host with clang and
    run by one thread per lane of a wave against the emulated instructions
    (tests/native/mma_lockstep.cpp): every warp's accumulators equal the exact sums, the held
    step's too where its output and input channels end inside the step (``held_bounds``: rows
    8 nt - 3, cols 21, c0 32)."""
    clang = shutil.which("clang++-19")
    if clang is None:
        pytest.skip("clang++-19 is not installed")
    held = form != "chunked"
    r = HipRenderer()
    helper = r.mma_global_b_helper(dtype, mt, nt) if held else r.mma_helper(dtype, mt, nt)
    text = _branch(helper, arch)
    if held:
        text = r.held_layout_helpers() + "\n" + text
    (tmp_path / "helper.inc").write_text(text, encoding="utf-8")
    rows, cols, c0 = (8 * nt - 3, 21, 32) if form == "held_bounds" else (8 * nt, 32, 0)
    macros = {"WAVE": WAVES[arch], "MT": mt, "NT": nt, "HELD": int(held)}
    macros |= {"BF16": int(dtype is DType.BF16), "K": c0 + 32 if held else 16}
    macros |= {"ROWS": rows, "COLS": cols, "C0": c0}
    binary = tmp_path / "lockstep"
    subprocess.run(
        [clang, "-std=c++20", "-O1", "-w", "-pthread", f"-I{tmp_path}"]
        + [f"-D{k}={v}" for k, v in macros.items()]
        + ["-o", binary, LOCKSTEP],
        check=True,
        capture_output=True,
    )
    run = subprocess.run([binary], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stdout


def _asm(spec, arch: str, tmp_path: Path) -> str:
    """clang-19's assembly of the spec's HIP source for arch."""
    clang = shutil.which("clang-19")
    if clang is None:
        pytest.skip("clang-19 is not installed (the HIP target's compiler)")
    source = tmp_path / f"{spec.name}.hip"
    source.write_text(render(spec, "hip"), encoding="utf-8")
    out = tmp_path / f"{arch}.s"
    flags = ["-x", "hip", "-nogpulib", "-nogpuinc", "--cuda-device-only", "-O3", "-std=c++17"]
    subprocess.run(
        [clang, *flags, f"--offload-arch={arch}", "-S", "-o", out, source],
        check=True,
        capture_output=True,
    )
    return out.read_text(encoding="utf-8")


@pytest.mark.parametrize("spec", [CHUNKED, CHUNKED_BF16, HELD], ids=lambda s: s.name)
def test_gfx1100_compiles_to_wmma_and_gfx942_to_the_4x4x4_mfma(spec, tmp_path: Path):
    """And the held kernel's loops unroll on gfx942: its accumulators indexed at compile time, it
    needs no private (scratch) memory (the scalar form: 144 bytes; rolled MFMA loops: the same)."""
    kind = "bf16" if spec.mdtype is DType.BF16 else "f16"
    gfx1100, gfx942 = _asm(spec, "gfx1100", tmp_path), _asm(spec, "gfx942", tmp_path)
    assert "v_wmma_f32_16x16x16" in gfx1100 and "v_mfma" not in gfx1100
    assert f"v_mfma_f32_4x4x4_16b_{kind}" in gfx942 and "v_wmma" not in gfx942
    if spec.hold:
        assert ".private_segment_fixed_size: 0" in gfx942
