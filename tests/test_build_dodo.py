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
axes:  # the repo's: its refusals.yaml (copied below) reads stream, hold, kpass, qsplit, tcx,
  # xbits, obits, chain, wgmma, tsfix, min_blocks, xstage
  - {name: stream, stages: [k2], type: int, ctype: int, suffix: "s{}", default: 0}
  - {name: hold, stages: [kf], type: int, ctype: int, suffix: "h{}", default: 0}
  - {name: kpass, stages: [kf], type: int, ctype: int, suffix: "q{}", default: 0}
  - {name: qsplit, stages: [kf], type: int, ctype: int, suffix: "n{}", default: 0}
  - {name: xstage, stages: [kf], type: int, ctype: int, suffix: "a{}", default: 0}
  - {name: tcx, stages: [kf], type: int, ctype: int, suffix: "t{}", default: 0}
  - {name: xbits, stages: [kf, k2], type: int, ctype: int, suffix: "x{}", default: 32}
  - {name: obits, stages: [kf], type: int, ctype: int, suffix: "o{}", default: 32}
  - {name: chain, stages: [kf], type: int, ctype: int, suffix: "l{}", default: 0}
  - {name: wgmma, stages: [kf], type: int, ctype: int, suffix: "g{}", default: 0}
  - {name: tsfix, stages: [kf], type: int, ctype: int, suffix: "z{}", default: 0}
  - {name: min_blocks, stages: [kf], type: int, ctype: int, suffix: "b{}", default: 0}
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


def test_validate_rejects_a_bad_rule_with_its_id_and_line(project):
    refusals = project / "grids" / "refusals.yaml"
    good = refusals.read_text()
    planted = '  - id: planted\n    when: "H > Hx"\n    message: "a message long enough"\n'
    refusals.write_text(good.replace("problem_rules:\n", "problem_rules:\n" + planted, 1))
    line = refusals.read_text().splitlines().index("  - id: planted") + 1
    try:
        done = doit(project, "validate")
        out = done.stdout + done.stderr
        assert done.returncode != 0 and f"refusals.yaml:{line}: rule planted:" in out
        assert "unknown name(s) ['Hx']" in out
    finally:
        refusals.write_text(good)


def _with_grid(project: Path, text: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    stages = project / "grids" / "stages.yaml"
    good = stages.read_text()
    stages.write_text(text)
    try:
        with pytest.MonkeyPatch.context() as mp:
            for key, value in env.items():
                mp.setenv(key, value)
            return doit(project, *args)
    finally:
        stages.write_text(good)


def test_a_bad_grid_is_one_line_and_the_traceback_on_request(project):
    bad = STAGES.replace("rows: [1]", "rowz: [1]")
    done = _with_grid(project, bad, "compile")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith("wino: error: ") and "stages.yaml: at $.stages.k1[0]" in lines[0]
    assert "'rowz' was unexpected" in lines[0] and "WINO_TRACEBACK=1" in lines[0]
    done = _with_grid(project, bad, "compile", WINO_TRACEBACK="1")
    assert done.returncode != 0 and "Traceback" in done.stderr


def test_an_empty_grid_is_refused(project):
    empty = STAGES.replace("block: [256]", "block: [100]")  # every point breaks a rule
    done = _with_grid(project, empty, "compile")
    assert done.returncode == 2 and "the grid accepts no spec" in done.stderr, done.stderr
    assert not (project / "build" / "cache" / "v1" / "c" / "empty").exists()


def test_a_killed_builds_scratch_is_swept_and_a_live_ones_kept(project):
    ran(doit(project, "compile:c"))
    (bin_dir,) = (project / "build" / "cache").glob("v*/c/*/bin")
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    ).stdout.strip()
    dead = [
        bin_dir / f".k1_x-{gone}-abc123",
        bin_dir / f".k1_x.json.{gone}.tmp",
        bin_dir.parent / f".manifest.json-{gone}-zz9.tmp",
    ]
    live = [bin_dir / f".k1_x-{os.getpid()}-abc123"]
    dead[0].mkdir()
    live[0].mkdir()
    for path in dead[1:]:
        path.write_text("partial")
    ran(doit(project, "compile:c"))
    assert not [p for p in dead if p.exists()] and all(p.exists() for p in live)
    live[0].rmdir()


def test_planned_kernel_tasks_are_the_grid(tmp_path, monkeypatch):
    """The real grid: one compile_<target>:<name> task per accepted spec, named by kernel name."""
    monkeypatch.setenv("WINO_BUILD", str(tmp_path))
    (p,) = plan([Target.C], quiet=True)
    names = [t["name"] for t in tasks.kernel_tasks(p) if t["name"]]
    assert names == [s.name for s in aot_stage_specs(target=Target.C)]
    assert tasks.compile_task(p)["task_dep"] == ["manifest:c"]
    assert tasks.manifest_task(p)["task_dep"] == ["compile_c"]


# The build repairs what the runtime refuses -----------------------------------------------------
def _binary(project: Path, kernel: str) -> Path:
    from wino import cache

    return cache.find_manifest(Target.C, project / "build").kernels[kernel].path


@pytest.mark.parametrize(
    "damage",
    [
        lambda p: p.write_bytes(
            p.read_bytes()[:100] + bytes([p.read_bytes()[100] ^ 1]) + p.read_bytes()[101:]
        ),
        lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
        lambda p: p.unlink(),
    ],
    ids=["flipped-byte", "truncated", "deleted"],
)
def test_compile_repairs_a_damaged_binary(project, damage):
    from wino import cache

    assert ran(doit(project, "compile:c")) == []
    kernel = K4[1].split(":")[1]
    path = _binary(project, kernel)
    good = path.read_bytes()
    damage(path)
    manifest = cache.find_manifest(Target.C, project / "build")
    with pytest.raises(cache.CacheError, match="doit compile:c"):
        manifest.kernel(kernel)
    assert cache.verify(project / "build")[1]
    done = ran(doit(project, "compile:c"))
    assert f"compile_c:{kernel}" in done and len([d for d in done if "k1_" in d]) == 0
    assert path.read_bytes() == good  # the same content at the same address
    assert cache.verify(project / "build") == (len(manifest.kernels), [])
    assert ran(doit(project, "compile:c")) == []


def test_lost_or_truncated_doit_db_costs_a_check_not_a_rebuild(project):
    ran(doit(project, "compile:c"))
    binaries = project / "build" / "cache"
    before = {p: p.stat().st_mtime_ns for p in binaries.glob("v*/c/*/bin/*.so")}
    for db in (project / "build").glob(".doit.db*"):
        db.write_bytes(b"")
        break
    else:
        pytest.fail("no doit database")
    ran(doit(project, "compile:c"))  # the tasks run, finding every binary intact
    assert {p: p.stat().st_mtime_ns for p in before} == before


def test_clean_removes_the_grid_binaries_and_manifest(project):
    """`doit clean` (the default task and what it depends on) removes the binaries the grid
    addresses and the manifest; stale binaries of other flags stay (docs/BUILD.md)."""
    from wino import cache

    ran(doit(project, "compile:c"))
    manifest = cache.find_manifest(Target.C, project / "build")
    current = [k.path for k in manifest.kernels.values()]
    stale = set(manifest.directory.glob("bin/*.so")) - set(current)
    done = doit(project, "clean")
    assert done.returncode == 0, done.stdout + done.stderr
    assert not [p for p in current if p.exists() or p.with_suffix(".json").exists()]
    assert not manifest.path.exists()
    assert {p for p in stale if p.exists()} == stale
    ran(doit(project, "compile:c"))
    assert cache.verify(project / "build") == (len(current), [])
