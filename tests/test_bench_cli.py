"""`wino bench` on the host target, end to end: the public must-show command and its resume,
refusals, verification and exit codes, --limit, shards, timing modes, the progress bar.

The c cache is built once for exactly the specs these sweeps may time (tests/host_cache.py)."""

from __future__ import annotations

import re
import time
from dataclasses import replace

import pytest

from tests import host_cache
from tests.conftest import PUBLIC_CASES, case_lines
from wino import cli
from wino.bench import accuracy, results
from wino.bench.candidates import needed_specs
from wino.bench.host import HostDevice
from wino.bench.modes import Compare, Timing
from wino.bench.sweep import Options
from wino.problem import Problem, read_miopen_file
from wino.vocab import TILES, DType, Target, Tile

SMALL = "conv -n 2 -c 8 -H 10 -W 10 -k 8 -p 1 -q 1"
OTHER = "conv -n 1 -c 16 -H 7 -W 9 -k 8 -p 1 -q 0"
SMALL_TILES = (Tile(2, 2), Tile(4, 4))
BEST = re.compile(
    r"^Best: \d[\d.e+-]* TFLOPS — .+ F\dx\d \[k1_\S+ (k2a_\S+ )?k2_\S+ k4_\S+\]"
    r"( \(unverified\))?$"
)


def _public_fp32(count: int) -> list[Problem]:
    return [replace(p, dtype=DType.FP32) for p in read_miopen_file(str(PUBLIC_CASES))[:count]]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    limit = HostDevice.CANDIDATE_LIMIT
    small = [replace(Problem.from_miopen(line), dtype=d) for line in (SMALL, OTHER) for d in DType]
    specs = needed_specs(_public_fp32(2), TILES, limit) | needed_specs(small, SMALL_TILES, limit)
    root = tmp_path_factory.mktemp("bench-cache")
    host_cache.build(specs, root)
    return root


def _bench(capsys, root, *argv):
    code = cli.main(["bench", "--target", "c", "--cache-root", str(root), *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_public_command_writes_rows_and_the_best_line(capsys, root, tmp_path):
    csv_path = tmp_path / "r.csv"
    start = time.perf_counter()
    code, out, err = _bench(
        capsys,
        root,
        "--miopen-file",
        str(PUBLIC_CASES),
        "--dtype",
        "fp32",
        "--limit",
        "2",
        "--results",
        str(csv_path),
        "--no-verify",
    )
    elapsed = time.perf_counter() - start
    assert code == 0, err
    assert BEST.match(out.splitlines()[-1]), out.splitlines()[-1]
    assert out.splitlines()[-1].endswith(" (unverified)")
    assert "NOT verified (--no-verify)" in out.splitlines()[0]
    tile_lines = [line for line in out.splitlines() if " TFLOPS" in line and "Best" not in line]
    assert tile_lines and all("  unverified  " in line for line in tile_lines)
    rows = results.read(csv_path)
    assert len(rows) == 2 * len(TILES)  # case x engine x tile: both cases serve every tile
    assert {r["engine"] for r in rows} == {"wino"} and {r["dtype"] for r in rows} == {"fp32"}
    for row in rows:
        for column in (
            "k1",
            "k2",
            "k4",
            "k1_us",
            "k2_us",
            "k3_us",
            "k4_us",
            "total_us",
            "tflops",
            "k1_gbs",
            "k2_gbs",
            "k4_gbs",
            "copy_gbs",
            "gemm_tflops",
            "bound_us",
            "bound_ratio",
        ):
            assert row[column], (column, row)
        assert row["verified"] == "unverified" and row["error"] == ""  # --no-verify
        assert float(row["bound_ratio"]) == pytest.approx(
            float(row["bound_us"]) / float(row["total_us"]), rel=1e-3
        )
    print(f"host bench, 2 public cases x {len(TILES)} tiles: {elapsed:.1f} s")

    before = csv_path.read_text()
    code, again, _ = _bench(
        capsys,
        root,
        "--miopen-file",
        str(PUBLIC_CASES),
        "--dtype",
        "fp32",
        "--limit",
        "2",
        "--results",
        str(csv_path),
        "--skip-measured",
        "--no-verify",
    )
    assert code == 0
    assert "\ncase " not in again and again.count(": measured in") == 2
    assert csv_path.read_text() == before  # nothing new ran
    assert again.splitlines()[-1] == out.splitlines()[-1]  # Best read back from the CSV


def test_refused_public_lines_are_skipped_with_their_rule(capsys, root, tmp_path):
    one_by_one, strided = case_lines(PUBLIC_CASES)[-2:]
    code, out, _ = _bench(
        capsys,
        root,
        "--miopen-cmd",
        one_by_one,
        "--miopen-cmd",
        strided,
        "--results",
        str(tmp_path / "r.csv"),
    )
    assert code == 0
    assert "refused [not_3x3]" in out and "refused [stride_not_1]" in out
    assert out.splitlines()[-1] == "Best: 0 TFLOPS — none (no verified wino pipeline)"
    assert results.read(tmp_path / "r.csv") == []


def test_verified_sweep_over_dtypes(capsys, root, tmp_path):
    csv_path = tmp_path / "r.csv"
    code, out, err = _bench(
        capsys,
        root,
        "--miopen-cmd",
        SMALL,
        "--dtype",
        "fp32,fp16",
        "--dtype",
        "bf16",
        "--tile",
        "F2x2,F4x4",
        "--verify",
        "--results",
        str(csv_path),
    )
    assert code == 0, out + err
    rows = results.read(csv_path)
    assert [(r["dtype"], r["tile"]) for r in rows] == [
        (d, t) for d in ("fp32", "fp16", "bf16") for t in ("F2x2", "F4x4")
    ]
    for row in rows:
        assert row["verified"] == "yes" and float(row["error"]) <= float(row["tolerance"])
        assert float(row["tolerance"]) == accuracy.tolerance(  # the c target's storage (fp32)
            Tile.parse(row["tile"]), DType(row["dtype"]), Target.C
        )
    assert BEST.match(out.splitlines()[-1]) and "(unverified)" not in out.splitlines()[-1]


def test_exit_one_when_every_pipeline_of_a_case_fails(capsys, root, monkeypatch):
    monkeypatch.setattr(accuracy, "tolerance", lambda tile, dtype, target=None: 0.0)
    code, out, _ = _bench(capsys, root, "--miopen-cmd", SMALL, "--tile", "F4x4", "--verify")
    assert code == 1
    assert "FAIL" in out
    assert out.splitlines()[-1] == "Best: 0 TFLOPS — none (no verified wino pipeline)"


def test_limit_and_shards(capsys, root, tmp_path):
    base = ["--miopen-cmd", SMALL, "--miopen-cmd", OTHER, "--tile", "F2x2"]
    code, out, _ = _bench(capsys, root, *base, "--limit", "1")
    assert code == 0 and out.count("\ncase ") == 1 and "N2 C8 10x10" in out
    keys = []
    for i in (1, 2):
        path = tmp_path / f"shard{i}.csv"
        assert _bench(capsys, root, *base, "--shard", f"{i}/2", "--results", str(path))[0] == 0
        keys.append({r["case"] for r in results.read(path)})
    assert len(keys[0]) == len(keys[1]) == 1 and not keys[0] & keys[1]


def test_staged_timing_sums_the_stages(capsys, root, tmp_path):
    csv_path = tmp_path / "r.csv"
    code, _, _ = _bench(
        capsys,
        root,
        "-n",
        "2",
        "-c",
        "8",
        "-H",
        "10",
        "-W",
        "10",
        "-k",
        "8",
        "-p",
        "1",
        "-q",
        "1",
        "--tile",
        "F4x4",
        "--timing",
        "staged",
        "--results",
        str(csv_path),
    )
    assert code == 0
    (row,) = results.read(csv_path)
    assert row["label"].startswith("fp32 N2 C8 10x10 K8") and row["timing"] == "staged"
    stages = sum(float(row[f"{s}_us"]) for s in results.STAGE_COLUMNS if row[f"{s}_us"])
    assert float(row["total_us"]) == pytest.approx(stages, rel=1e-3)


def test_the_default_cache_root_is_the_build_folder(capsys, root, monkeypatch):
    monkeypatch.setenv("WINO_BUILD", str(root))  # what build/ would be for `doit compile:c`
    code = cli.main(["bench", "--target", "c", "--miopen-cmd", SMALL, "--tile", "F2x2"])
    out, _ = capsys.readouterr()
    assert code == 0 and BEST.match(out.splitlines()[-1])


def test_progress_bar_on_request(capsys, root):
    code, out, err = _bench(capsys, root, "--miopen-cmd", SMALL, "--tile", "F2x2", "--progress")
    assert code == 0
    assert "[" in err and "0/1 fp32 N2 C8 10x10" in err and err.endswith("\r\x1b[K")
    assert "\x1b" not in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--compare", "cudnn", "--miopen-cmd", SMALL], "needs the cuda target"),
        (["--skip-measured", "--miopen-cmd", SMALL], "needs --results"),
        ([], "no cases"),
    ],
)
def test_usage_errors(capsys, root, argv, message):
    code, _, err = _bench(capsys, root, *argv)
    assert code == 2 and message in err


def test_options_parse_timing_and_compare_strings():
    options = Options(timing="staged", compare="onnxruntime")
    assert (options.timing, options.compare) == (Timing.STAGED, Compare.ONNXRUNTIME)
    assert (Options().timing, Options().compare) == (Timing.BLOCK, None)
    with pytest.raises(ValueError, match=r"timing: 'blocked' is not one of \['block', 'staged'\]"):
        Options(timing="blocked")
    with pytest.raises(ValueError, match=r"compare: 'cudn' is not one of \['cudnn', 'onnxruntime'"):
        Options(compare="cudn")


def test_a_broken_case_is_reported_and_the_sweep_goes_on(capsys, root, monkeypatch):
    from wino.bench import sweep

    real = sweep.bench_case

    def flaky(problem, *args):
        if problem.N == 1:
            raise RuntimeError("boom")
        return real(problem, *args)

    monkeypatch.setattr(sweep, "bench_case", flaky)
    code, out, err = _bench(
        capsys, root, "--miopen-cmd", OTHER, "--miopen-cmd", SMALL, "--tile", "F2x2"
    )
    assert code == 1
    assert "error fp32 N1 C16 7x9 K8" in out and "RuntimeError: boom" in out
    assert "Traceback" in err
    assert "case fp32 N2 C8 10x10" in out and BEST.match(out.splitlines()[-1])


def test_bench_verifies_by_default(capsys, root, tmp_path):
    code, out, err = _bench(
        capsys, root, "--miopen-cmd", SMALL, "--tile", "F2x2", "--results", str(tmp_path / "r.csv")
    )
    assert code == 0, err
    (row,) = results.read(tmp_path / "r.csv")
    assert row["verified"] == "yes" and float(row["error"]) <= float(row["tolerance"])
    assert " err " in out and "unverified" not in out and "NOT verified" not in out


def test_a_bad_line_is_reported_with_file_and_line_and_the_run_goes_on(capsys, root, tmp_path):
    cases = tmp_path / "cases.txt"
    cases.write_text(f"# two good lines and a bad one\n{SMALL}\nconv -n 2 -c eight\n{OTHER}\n")
    code, out, err = _bench(capsys, root, "--miopen-file", str(cases), "--tile", "F2x2")
    assert code == 1
    assert f"wino: skipping {cases}:3: MIOpenDriver line 'conv -n 2 -c eight'" in err
    assert "\\n" not in err  # the line is quoted without its newline
    assert f"were skipped: {cases}:3" in err.splitlines()[-1]
    assert out.count("\ncase ") == 2 and BEST.match(out.splitlines()[-1])


def test_direction_forward_is_accepted_and_the_others_refused(capsys, root, tmp_path):
    csv_path = tmp_path / "r.csv"
    argv = ("--miopen-cmd", SMALL, "--tile", "F2x2", "--results", str(csv_path))
    code, _, err = _bench(capsys, root, *argv, "--direction", "fwd")
    assert code == 0, err
    (row,) = results.read(csv_path)
    assert row["case"] == replace(Problem.from_miopen(SMALL), direction=1).to_miopen()
    assert row["case"].endswith(" -F 1")
    for other in ("bwd", "wrw"):
        code, _, err = _bench(capsys, root, *argv, "--direction", other)
        assert code == 2 and f"--direction {other}: wino implements the forward" in err
    code, _, err = _bench(capsys, root, *argv, "--direction", "sideways")
    assert code == 2 and "expected one of fwd, bwd, wrw" in err
