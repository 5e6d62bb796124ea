"""The `wino` command line: `wino grid` and its modes, error handling, the support matrix."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from wino import cli, grid
from wino.refusals import rule_book
from wino.vocab import TILES, Target

ROOT = Path(__file__).resolve().parents[1]
PUBLIC_LINE = "convfp16 -n 64 -c 256 -H 14 -W 14 -k 256 -y 3 -x 3 -p 1 -q 1"


def _run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_grid_lists_every_accepted_spec(capsys):
    code, out, err = _run(capsys, "grid")
    assert code == 0 and not err
    lines = out.splitlines()
    assert lines[0] == "targets: c, cuda, hip"
    names = [line.strip() for line in lines if line.startswith("  ")]
    assert names == [s.name for s in grid.aot_stage_specs()]
    assert lines[-1] == f"total: {len(names)} specs"
    for stage in grid.GRID_STAGES:
        assert f"{stage.short}: {len(grid.aot_stage_specs(stage))} specs" in lines


def test_grid_stage_filter(capsys):
    code, out, _ = _run(capsys, "grid", "--stage", "k2")
    specs = grid.aot_stage_specs(grid.Stage.INPUT)
    names = [line.strip() for line in out.splitlines() if line.startswith("  ")]
    assert code == 0 and names == [s.name for s in specs]
    assert out.splitlines()[-1] == f"total: {len(specs)} specs"


def test_grid_target_lists_that_targets_grid(capsys):
    """--target: the target's own grid (c holds the vec-8 windows the GPUs' rule refuses)."""
    for target in (Target.C, Target.CUDA):
        code, out, _ = _run(capsys, "grid", "--stage", "k2", "--target", target.value)
        names = [line.strip() for line in out.splitlines() if line.startswith("  ")]
        assert code == 0 and out.splitlines()[0] == f"targets: {target.value}"
        assert names == [s.name for s in grid.aot_stage_specs(grid.Stage.INPUT, target)]
    code, out, _ = _run(capsys, "grid", "--refused", "--target", "cuda")
    assert "k2_f4x4_ifp32_xfp32_v8_b256_reg_psplit  [input_window_registers]" in out
    code, out, _ = _run(capsys, "grid", "--refused", "--target", "c")
    assert "[input_window_registers]" not in out and "[window_registers]" not in out


def test_grid_refused(capsys):
    code, out, _ = _run(capsys, "grid", "--refused")
    refused = grid.refused_stage_specs()
    rows = [line.strip() for line in out.splitlines() if line.startswith("  ")]
    assert code == 0 and len(rows) == len(refused)
    ids = {r.id for r in rule_book()[1]} | {"grid_exclude"}
    for row in rows:
        name, rest = row.split("  ", 1)
        assert rest.startswith("[") and rest[1 : rest.index("]")] in ids, row
    assert out.splitlines()[-1] == f"total: {len(refused)} refused"


def test_explain_a_served_problem(capsys):
    code, out, err = _run(capsys, "grid", "--explain", PUBLIC_LINE)
    assert code == 0 and not err
    assert out.splitlines()[0] == "problem: fp16 N64 C256 14x14 K256 3x3 p1x1 s1x1"
    for tile in TILES:
        assert f"\n{tile}: batch split " in out
    stage_lines = [line for line in out.splitlines() if line.startswith("  k")]
    assert len(stage_lines) >= 3 * len(TILES)
    assert all(" grid (" in line and " block (" in line for line in stage_lines)
    names = {s.name for s in grid.aot_stage_specs()}
    assert all(line.split()[1] in names for line in stage_lines)


def test_explain_a_refused_problem(capsys):
    code, out, err = _run(capsys, "grid", "--explain", "conv -n 4 -c 8 -H 9 -W 9 -k 8 -u 2 -v 2")
    assert code == cli.EXIT_ERROR and out == ""
    assert err.count("\n") == 1 and err.startswith("wino: refused [stride_not_1]: stride 2x2")


def test_explain_refused_for_some_tiles_only(capsys):
    line = "conv -n 1 -c 768 -H 1024 -W 1024 -k 768 -p 1 -q 1"  # V of F2x2 passes 31 bits
    code, out, _ = _run(capsys, "grid", "--explain", line)
    assert code == 0
    assert "F2x2: refused [index_past_31_bits]" in out and "F6x6: batch split 1" in out


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (
            ["grid", "--explain", "conv -Z 1"],
            "wino: error: MIOpenDriver line 'conv -Z 1': unknown flag -Z",
        ),
        (["grid", "--explain", "conv -n 0"], "wino: error: Problem.N: must be >= 1"),
        (["grid", "-o", "x.md"], "wino: error: wino grid: -o/--output only goes with --matrix"),
    ],
)
def test_errors_are_one_line_and_exit_2(capsys, argv, fragment):
    code, out, err = _run(capsys, *argv)
    assert code == cli.EXIT_ERROR and out == ""
    assert err.startswith(fragment) and err.count("\n") == 1


def test_config_errors_are_reported(capsys, monkeypatch):
    def broken(_args):
        raise cli.config.ConfigError("grids/stages.yaml: at $.stages.k2[0]: bad")

    monkeypatch.setitem(cli.COMMANDS, "grid", cli.Command("x", lambda p: None, broken))
    code, _, err = _run(capsys, "grid")
    assert code == 2 and err == "wino: error: grids/stages.yaml: at $.stages.k2[0]: bad\n"


def test_usage_errors_exit_2(capsys):
    assert _run(capsys, "grid", "--stage", "k9")[0] == 2
    assert _run(capsys, "frobnicate")[0] == 2
    assert _run(capsys)[0] == 2
    assert _run(capsys, "grid", "--refused", "--matrix")[0] == 2
    code, out, _ = _run(capsys, "--help")
    assert code == 0 and "grid" in out


def test_subcommands_are_registered_in_one_table(monkeypatch, capsys):
    """Another subcommand is one entry of COMMANDS: its arguments, its handler."""

    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--times", type=int, default=1)

    def handler(args: argparse.Namespace) -> int:
        print("hello " * args.times)
        return 7

    monkeypatch.setitem(cli.COMMANDS, "hello", cli.Command("say hello", add_arguments, handler))
    code, out, _ = _run(capsys, "hello", "--times", "2")
    assert code == 7 and out.strip() == "hello hello"


# Support matrix -------------------------------------------------------------------------------
def test_matrix_banner_and_sections():
    text = cli.support_matrix()
    first = text.splitlines()[0]
    assert "Generated by `wino grid --matrix" in first and "do not edit by hand" in first
    for heading in ("## Targets", "## Specs per stage", "## Tiles and dtypes", "## Problems"):
        assert f"\n{heading}\n" in text
    for tile in TILES:
        assert f"| {tile.name} | fp16/fp16 |" in text
    per_target = " | ".join(str(len(grid.aot_stage_specs(target=t))) for t in Target)
    total, refused = len(grid.aot_stage_specs()), len(grid.refused_stage_specs())
    assert f"| total | {total} | {per_target} | {refused} |" in text
    assert text == cli.support_matrix()  # deterministic


def test_matrix_counts_add_up():
    """The per-tile K2 columns sum to the accepted K2 specs."""
    lines = cli.support_matrix().splitlines()
    start = lines.index("## Tiles and dtypes")
    header = next(line for line in lines[start:] if line.startswith("| tile |"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    k2 = [i for i, c in enumerate(columns) if c.startswith("k2 ")]
    total = 0
    for line in lines[lines.index(header) + 2 :]:
        if not line.startswith("| F"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        total += sum(int(cells[i]) for i in k2 if cells[i] != "-")
    assert total == len(grid.aot_stage_specs(grid.Stage.INPUT))


def test_matrix_to_stdout_and_file(capsys, tmp_path):
    code, out, _ = _run(capsys, "grid", "--matrix")
    assert code == 0 and out == cli.support_matrix()
    path = tmp_path / "docs" / "matrix.md"
    code, out, _ = _run(capsys, "grid", "--matrix", "-o", str(path))
    assert code == 0 and path.read_text(encoding="utf-8") == cli.support_matrix()
    assert out == f"wrote {path}\n"


def test_committed_support_matrix_is_current():
    committed = ROOT / cli.MATRIX_PATH
    assert committed.is_file(), f"{cli.MATRIX_PATH} is missing"
    assert committed.read_text(encoding="utf-8") == cli.support_matrix(), (
        f"{cli.MATRIX_PATH} is stale: run `wino grid --matrix -o {cli.MATRIX_PATH}` and commit it"
    )


def test_explain_marks_the_tile_dispatch_picks(capsys, monkeypatch, tmp_path):
    from wino.pick import default_stage_specs
    from wino.problem import Problem
    from wino.runtime import tuning
    from wino.vocab import Target, Tile

    monkeypatch.setenv("WINO_BUILD", str(tmp_path))  # no tuning DB yet
    code, out, _ = _run(capsys, "grid", "--explain", PUBLIC_LINE)
    marked = [line for line in out.splitlines() if "<- dispatch's pick" in line]
    assert code == 0 and len(marked) == 1
    assert marked[0].startswith("F4x4: ") and "(c, cuda: default rule, F4x4 unless" in marked[0]

    problem = Problem.from_miopen(PUBLIC_LINE)
    specs = default_stage_specs(problem, Tile(2, 2))
    tuning.record(problem, Target.C, Tile(2, 2), specs, 1.0, tmp_path)
    _, out, _ = _run(capsys, "grid", "--explain", PUBLIC_LINE)
    marks = {line.split(":")[0]: line for line in out.splitlines() if "<- dispatch" in line}
    assert set(marks) == {"F2x2", "F4x4"}
    assert marks["F2x2"].endswith("(c: tuning DB)") and "(cuda: default rule" in marks["F4x4"]


def test_explain_reads_the_tuning_db_beside_the_cache_dispatch_finds(capsys, monkeypatch, tmp_path):
    """No $WINO_BUILD: dispatch finds ./build's cache (before the checkout's build folder,
    where a build writes) and follows the tuning DB beside it; so does --explain."""
    from wino import cache
    from wino.pick import default_stage_specs
    from wino.problem import Problem
    from wino.runtime import tuning
    from wino.vocab import Target, Tile

    monkeypatch.delenv("WINO_BUILD", raising=False)
    monkeypatch.chdir(tmp_path)
    here = tmp_path / "build"
    flavor = cache.flavor_dir(Target.C, "gcc-0", here)
    flavor.mkdir(parents=True)
    (flavor / cache.MANIFEST).write_text("{}")  # found by the search (nothing reads it here)
    if cache.build_folder() == here:
        pytest.skip("not a checkout: the build folder is ./build, the one the search finds")
    problem = Problem.from_miopen(PUBLIC_LINE)
    specs = default_stage_specs(problem, Tile(2, 2))
    tuning.record(problem, Target.C, Tile(2, 2), specs, 1.0, here)  # beside ./build's cache
    assert tuning.followed(Target.C) == tuning.db_path(Target.C, here)
    _, out, _ = _run(capsys, "grid", "--explain", PUBLIC_LINE)
    marks = {line.split(":")[0]: line for line in out.splitlines() if "<- dispatch" in line}
    assert marks["F2x2"].endswith("(c: tuning DB)")
