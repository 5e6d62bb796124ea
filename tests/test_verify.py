"""wino.runtime.verify and `wino run`: the bound table, run_cases (verified, refused, error),
format_results, and the command end to end on a temp host cache."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests import runtime_fixtures as rf
from wino.cli import main
from wino.problem import Problem
from wino.runtime import verify
from wino.vocab import TILES, DType, Target, Tile

#: In the temp cache (rf.EXTRA's default picks for every dtype).
LINES = [
    "conv -n 3 -c 16 -H 12 -W 12 -k 8 -y 3 -x 3 -p 1 -q 1",
    "convfp16 -n 2 -c 64 -H 14 -W 14 -k 64 -y 3 -x 3 -p 1 -q 1",
    "convbfp16 -n 1 -c 16 -H 10 -W 10 -k 16 -p 1 -q 1",
]
REFUSED = [
    ("conv -n 1 -c 256 -H 14 -W 14 -k 64 -y 1 -x 1", "not_3x3"),
    ("convfp16 -n 1 -c 64 -H 14 -W 14 -k 64 -y 3 -x 3 -p 1 -q 1 -u 2 -v 2", "stride_not_1"),
]


@pytest.fixture(scope="session")
def root(tmp_path_factory):
    return rf.host_cache(tmp_path_factory)


# Bounds ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("tile", TILES, ids=lambda t: t.name)
def test_bounds_are_at_least_as_tight_as_the_issue(tile):
    pairs = [
        (DType.FP32, DType.FP32),
        (DType.FP16, DType.FP16),
        (DType.BF16, DType.FP16),
        (DType.BF16, DType.BF16),
    ]
    for dtype, xdtype in pairs:
        assert verify.bound_for(tile, dtype, xdtype) <= rf.issue_bound(tile, dtype, xdtype)
    assert verify.bound_for(tile, DType.BF16) == verify.bound_for(tile, "bf16", "fp16")
    assert verify.bound_for(tile.name, "fp32") == verify.bound_for(tile, DType.FP32, DType.FP32)


def test_bounds_of_the_issue_are_kept():
    assert verify.bound_for("F2x2", "fp32") == 2e-6
    assert verify.bound_for("F6x2", "fp16") == 1e-2
    assert verify.bound_for("F4x6", "bf16", "fp16") == 2e-2
    assert verify.bound_for("F6x4", "bf16", "bf16") == 0.2
    assert verify.bound_for("F6x6", "fp32") == 6e-5


def test_no_bound_for_unsupported_storage():
    with pytest.raises(ValueError, match="no error bound"):
        verify.bound_for("F4x4", "fp16", "bf16")


# run_cases -------------------------------------------------------------------------------------
def test_run_cases_verifies_times_and_reports_refusals(root):
    problems = [Problem.from_miopen(line) for line in LINES + [r for r, _ in REFUSED]]
    results = verify.run_cases(problems, "c", cache_root=root, repeats=2)
    assert [r.status for r in results] == [verify.PASS] * 3 + [verify.REFUSED] * 2
    for result in results[:3]:
        assert result.ok and result.target is Target.C and result.tile == Tile(4, 4)
        assert 0 <= result.error <= result.bound
        assert result.bound == verify.bound_for(result.tile, result.problem.dtype, result.xdtype)
        assert result.time_s > 0 and len(result.kernels) == 4
    assert results[2].xdtype == "fp32"  # bf16's storage on the c target
    assert [r.rule for r in results[3:]] == [rule for _, rule in REFUSED]
    assert all(r.ok and r.error is None for r in results[3:])
    again = verify.run_cases(problems[:1], "c", cache_root=root, repeats=1)
    assert again[0].error == results[0].error  # the seed fixes the inputs
    other = verify.run_cases(problems[:1], "c", seed=5, cache_root=root, repeats=1)
    assert other[0].error != results[0].error


def test_run_cases_reports_missing_kernels_and_caches(root, tmp_path):
    odd = Problem(N=1, C=7, H=9, W=9, K=7, pad_h=1, pad_w=1)  # its pick is not built
    (missing,) = verify.run_cases([odd], "c", cache_root=root)
    assert missing.status is verify.ERROR and not missing.ok and "doit compile:c" in missing.message
    (nocache,) = verify.run_cases([odd], "c", cache_root=tmp_path)
    assert nocache.status is verify.ERROR and "doit compile:c" in nocache.message


def test_failing_bound_is_a_fail(root, monkeypatch):
    monkeypatch.setitem(verify.BOUNDS, (Tile(4, 4), DType.FP32, DType.FP32), 1e-12)
    (result,) = verify.run_cases([Problem.from_miopen(LINES[0])], "c", cache_root=root, repeats=1)
    assert result.status is verify.FAIL and not result.ok and result.error > 1e-12


def test_format_results():
    p = Problem.from_miopen(LINES[1])
    results = [
        verify.CaseResult(p, "PASS", "c", "F4x4", "fp16", 1.5e-3, 3e-2, 0.0021),
        verify.CaseResult(p, "FAIL", "c", "F4x4", "fp16", 5e-2, 3e-2, 1.5),
        verify.CaseResult(p, "REFUSED", rule="stride_not_1", message="stride 2x2: ..."),
        verify.CaseResult(p, "ERROR", message="kernel k2_x is not in the c cache"),
    ]
    lines = verify.format_results(results).splitlines()
    assert lines[0].startswith("PASS") and p.label() in lines[0]
    assert "F4x4 xfp16 on c" in lines[0] and "err 1.50e-03 <= bound 3.0e-02" in lines[0]
    assert "2.100 ms" in lines[0] and "1.500 s" in lines[1] and "> bound" in lines[1]
    assert "[stride_not_1] stride 2x2" in lines[2] and lines[3].startswith("ERROR")
    assert "not in the c cache" in lines[3]
    assert lines[4] == "4 case(s): 1 passed, 1 failed, 1 error(s), 1 refused (skipped)"


def test_case_result_parses_strings():
    p = Problem.from_miopen(LINES[1])
    result = verify.CaseResult(p, "REFUSED", "cuda", "f6x4")
    assert (result.status, result.target, result.tile) == (verify.REFUSED, Target.CUDA, Tile(6, 4))
    with pytest.raises(ValueError, match=r"'PASSED' is not one of \['PASS', 'FAIL', 'REFUSED'"):
        verify.CaseResult(p, "PASSED")


# `wino run` ------------------------------------------------------------------------------------
def _cli(root, *args):
    return main(["run", "--target", "c", "--cache-root", str(root), "--repeats", "1", *args])


def test_wino_run_passes_and_skips_refusals(root, capsys):
    args = []
    for line in LINES[:2] + [REFUSED[1][0]]:
        args += ["--miopen-cmd", line]
    assert _cli(root, *args) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in out[:3]] == ["PASS", "PASS", "REFUSED"]
    assert "[stride_not_1]" in out[2] and "bound" in out[0] and " ms" in out[0]
    assert out[-1] == "3 case(s): 2 passed, 0 failed, 0 error(s), 1 refused (skipped)"


def test_wino_run_reads_files_and_forces_a_tile(root, tmp_path, capsys):
    cases = tmp_path / "cases.txt"
    cases.write_text("# comment\n" + LINES[0] + "\n\n" + REFUSED[0][0] + "  # 1x1\n")
    assert _cli(root, "--miopen-file", str(cases), "--tile", "F2x2") == 0
    out = capsys.readouterr().out
    assert "F2x2 xfp32 on c" in out and "[not_3x3]" in out


def test_wino_run_fails_with_exit_1(root, monkeypatch, capsys):
    monkeypatch.setitem(verify.BOUNDS, (Tile(4, 4), DType.FP16, DType.FP32), 1e-9)
    assert _cli(root, "--miopen-cmd", LINES[1]) == 1
    assert capsys.readouterr().out.startswith("FAIL")
    odd = "conv -n 1 -c 7 -H 9 -W 9 -k 7 -p 1 -q 1"  # not in the cache: ERROR, exit 1
    assert _cli(root, "--miopen-cmd", odd) == 1


def test_wino_run_argument_errors(root, capsys):
    assert _cli(root) == 2
    assert "--miopen-cmd" in capsys.readouterr().err
    assert _cli(root, "--miopen-cmd", "conv -n 1 -c 8 --bogus 3") == 2
    assert "unknown flag --bogus" in capsys.readouterr().err
    assert _cli(root, "--miopen-cmd", LINES[0], "--tile", "F3x3") == 2


def test_wino_run_as_a_process(root):
    command = [
        sys.executable,
        "-m",
        "wino.cli",
        "run",
        "--target",
        "c",
        "--cache-root",
        str(root),
        "--repeats",
        "1",
        "--miopen-cmd",
        LINES[2],
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("PASS") and "bf16 N1 C16 10x10 K16" in done.stdout


def test_wino_run_skips_a_bad_file_line_and_exits_1(root, tmp_path, capsys):
    cases = tmp_path / "cases.txt"
    cases.write_text(f"{LINES[0]}\nconv -n 1 -y\n{LINES[1]}\n")
    assert _cli(root, "--miopen-file", str(cases)) == 1
    out, err = capsys.readouterr()
    assert f"wino: skipping {cases}:2: MIOpenDriver line 'conv -n 1 -y': flag -y has no" in err
    assert out.splitlines()[-1].startswith("2 case(s): 2 passed")


def test_wino_run_direction(root, capsys):
    assert _cli(root, "--miopen-cmd", LINES[0], "--direction", "fwd") == 0
    assert capsys.readouterr().out.startswith("PASS")
    assert _cli(root, "--miopen-cmd", LINES[0], "--direction", "wrw") == 2
    assert "--direction wrw: wino implements the forward convolution only" in (
        capsys.readouterr().err
    )
