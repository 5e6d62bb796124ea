"""dodo.py through doit itself, on a small grid in a temporary project root (WINO_ROOT) and build
folder (WINO_BUILD): the first run compiles, a second executes nothing, a grid edit rebuilds only
the specs it changed, a flag edit rebuilds the target; parallel mode works; a target without its
compiler is skipped with a message."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from wino.builder import tasks
from wino.builder.plan import plan
from wino.grid import aot_stage_specs
from wino.vocab import Target

REPO = Path(__file__).resolve().parents[1]
DODO = REPO / "dodo.py"

STAGES = """\
format: 1
stages:
  k1:
    - name: filter
      tile: [F2x2]
      combos: [{io: fp32, xdtype: fp32}]
      vec: [1]
      block: [256]
      rows: [1]
  k4:
    - name: output
      tile: [F2x2, F4x4]
      io: [fp32]
      accdtype: [fp32]
      vec: [1, 4]
      block: [256]
default_pick:
  {k1: [vec: descending], k2a: [vec: descending], k2: [vec: descending], k4: [vec: descending]}
exclude: []
"""
TARGETS = """\
format: 1
targets:
  c:
    compiler: cc
    flags: [-std=c11, -O2, -fopenmp, -fPIC, -shared, -fno-strict-aliasing, -Wall]
    archs: [host]
  hip:
    compiler: wino-no-such-clang
    flags: []
    archs: [gfx1100]
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("project")
    for folder in ("grids", "schema", "templates"):
        shutil.copytree(REPO / folder, root / folder)
    (root / "grids" / "stages.yaml").write_text(STAGES)
    (root / "grids" / "targets.yaml").write_text(TARGETS)
    return root


def doit(project: Path, *args: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "WINO_ROOT": str(project),
        "WINO_BUILD": str(project / "build"),
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, "-m", "doit", "-f", str(DODO), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=project,
    )


def ran(done: subprocess.CompletedProcess) -> list[str]:
    assert done.returncode == 0, done.stdout + done.stderr
    return sorted(line[3:] for line in done.stdout.splitlines() if line.startswith(".  "))


def summary(done: subprocess.CompletedProcess) -> tuple[int, int]:
    """(tasks that ran, tasks up to date) from the build's last line."""
    match = re.fullmatch(
        r"wino build: (\d+) task\(s\) ran, (\d+) up to date", done.stdout.splitlines()[-1]
    )
    assert match, done.stdout
    return int(match[1]), int(match[2])


K1 = "compile_c:k1_f2x2_ifp32_xfp32_v1_b256_r1"
K4 = [f"compile_c:k4_{t}_ifp32_afp32_v{v}_b256" for t in ("f2x2", "f4x4") for v in (1, 4)]


def test_first_build_compiles_each_kernel_once_in_parallel(project):
    done = doit(project, "-n", "2", "compile")
    assert ran(done) == sorted([K1, *K4, "manifest:c"])
    assert "wino-no-such-clang" in done.stderr and "apt-get install clang-19" in done.stderr
    manifests = list((project / "build" / "cache").glob("v*/c/*/manifest.json"))
    assert len(manifests) == 1


def test_second_build_executes_nothing(project):
    done = doit(project, "compile")
    assert ran(done) == []
    assert summary(done) == (0, len([K1, *K4, "manifest:c"]))
    assert done.stdout.count("\n") == 1  # a no-op build is one line
    assert "wino-no-such-clang" in done.stderr  # every target was asked for: hip says why


def test_a_c_only_build_is_quiet_about_other_targets(project):
    done = doit(project, "compile:c")
    assert done.stdout.splitlines() == ["wino build: 0 task(s) ran, 6 up to date"]
    assert "hip" not in done.stderr and "skipping" not in done.stderr
    hip = doit(project, "compile:hip")
    assert hip.returncode == 0 and "wino-no-such-clang" in hip.stderr
    assert "compile:hip" not in hip.stdout  # the notice is the output


def test_grid_edit_rebuilds_only_the_changed_specs(project):
    stages = project / "grids" / "stages.yaml"
    stages.write_text(STAGES.replace("vec: [1, 4]", "vec: [1, 2, 4]"))
    new = [f"compile_c:k4_{t}_ifp32_afp32_v2_b256" for t in ("f2x2", "f4x4")]
    assert ran(doit(project, "-n", "2", "compile")) == sorted([*new, "manifest:c"])
    assert ran(doit(project, "compile")) == []


def test_flag_edit_rebuilds_the_target(project):
    binaries = project / "build" / "cache"
    before = {p: p.stat().st_mtime_ns for p in binaries.glob("v*/c/*/bin/*.so")}
    targets = project / "grids" / "targets.yaml"
    targets.write_text(TARGETS.replace("-Wall]", "-Wall, -DWINO_TEST_KNOB=1]"))
    done = ran(doit(project, "compile:c"))
    assert K1 in done and "manifest:c" in done and len(done) == 1 + 6 + 1
    assert len(list(binaries.glob("v*/c/*/bin/*.so"))) == 2 * len(before)
    targets.write_text(TARGETS)
    # the tasks run again (their config changed back) but compile nothing: the binaries of the
    # old flags are still at their content addresses
    assert len(ran(doit(project, "compile:c"))) == 8
    assert {p: p.stat().st_mtime_ns for p in before} == before
    assert ran(doit(project, "compile:c")) == []


def test_missing_compiler_gives_no_kernel_tasks(project):
    done = doit(project, "list", "--all")
    assert done.returncode == 0, done.stderr
    names = [line.split()[0] for line in done.stdout.splitlines() if line.strip()]
    assert "compile_c" in names and "compile:hip" in names
    assert not [n for n in names if n.startswith(("compile_hip", "manifest:hip"))]
    assert re.search(r"compile:hip\s+skipped: .*wino-no-such-clang", done.stdout)


def test_list_is_the_help(project):
    done = doit(project, "list")
    for task in (
        "compile",
        "compile_c",
        "manifest",
        "golden",
        "golden_record",
        "validate",
        "wheel",
    ):
        assert re.search(rf"^{task}\s+\S", done.stdout, re.M), f"{task} has no docstring"


def test_validate_names_the_bad_field(project):
    assert doit(project, "validate").returncode == 0
    stages = project / "grids" / "stages.yaml"
    good = stages.read_text()
    stages.write_text(good.replace("rows: [1]", "rowz: [1]"))
    try:
        done = doit(project, "validate")
        assert done.returncode != 0 and "rowz" in done.stdout + done.stderr
    finally:
        stages.write_text(good)


def test_planned_kernel_tasks_are_the_grid(tmp_path, monkeypatch):
    """The real grid: one compile_<target>:<name> task per accepted spec, named by kernel name."""
    monkeypatch.setenv("WINO_BUILD", str(tmp_path))
    (p,) = plan([Target.C], quiet=True)
    names = [t["name"] for t in tasks.kernel_tasks(p) if t["name"]]
    assert names == [s.name for s in aot_stage_specs()]
    assert tasks.compile_task(p)["task_dep"] == ["manifest:c"]
    assert tasks.manifest_task(p)["task_dep"] == ["compile_c"]
