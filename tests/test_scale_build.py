"""wino.scale.build: the grid's compiles as Dask tasks on a LocalCluster give the serial build's
cache byte for byte (binaries, IR, manifests, sources); the report files differ only in the
compiler's log (ptxas prints its own compile time), which no manifest holds."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_build_dodo import REPO, STAGES, TARGETS, doit
from wino import cache, cli
from wino.builder import builder
from wino.builder.toolchains import CompileError, resolve
from wino.grid import aot_stage_specs
from wino.vocab import Stage, Target

pytest.importorskip("distributed", reason="the dask extra is not installed")

from wino.scale import DaskUnavailable, require_distributed  # noqa: E402
from wino.scale import build as scale_build  # noqa: E402
from wino.scale.cluster import cpu_cluster  # noqa: E402


def subset(per_stage: int = 2) -> list:
    """A few specs of every stage, from both ends of each stage's grid."""
    out = []
    for stage in (Stage.FILTER, Stage.PRESCALE, Stage.INPUT, Stage.OUTPUT):
        specs = aot_stage_specs(stage)
        out += [specs[0], specs[-1]][:per_stage]
    return out


def tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (doit's database aside); a report's log is dropped, and so are
    a runtime index's file states (``_without_file_states``)."""
    files = {}
    for path in sorted(root.rglob("*")):
        if not path.is_file() or path.name.startswith(".doit"):
            continue
        data = path.read_bytes()
        if path.parent.name == "bin" and path.suffix == ".json":
            report = json.loads(data)
            assert report.pop("log") is not None
            data = json.dumps(report, sort_keys=True).encode()
        if path.name == "manifest.index.jsonl":
            data = _without_file_states(data)
        files[path.relative_to(root).as_posix()] = data
    return files


def _without_file_states(index: bytes) -> bytes:
    """A runtime index without the file states it records (the published manifest's, the
    schemas' and the declared files': sizes, times and inodes, which differ between any two
    builds by design; a copied cache is hashed instead) and the section ends they shift."""
    head, *lines = index.decode("utf-8").splitlines()
    header = json.loads(head)
    assert len(header.pop("manifest_state")) == 4
    header.pop("schema_state"), header.pop("ends")
    stamps = {f"declared {kind}" for kind in cache.STAMPED}  # not their data's sections
    out = [json.dumps(header, sort_keys=True)]
    for key, line in zip(header["sections"], lines, strict=True):
        section = json.loads(line)
        if key in stamps:
            section.pop("state"), section.pop("schema_state")
        out.append(json.dumps(section, sort_keys=True))
    return "\n".join(out).encode("utf-8")


@pytest.fixture(scope="module")
def client():
    distributed = require_distributed()
    with cpu_cluster(2) as cluster, distributed.Client(cluster) as client:
        client.wait_for_workers(2)
        yield client


def _same_build(client, tmp_path, target: Target, specs: list) -> scale_build.BuildResult:
    serial, dask = tmp_path / "serial", tmp_path / "dask"
    builder.build(specs, [target], root=serial, jobs=2)
    result = scale_build.build(client, specs, [target], root=dask)
    assert sorted(result.compiled) == sorted(
        (tc.flavor, s.name) for tc in resolve(target, dask).toolchains for s in specs
    )
    a, b = tree(serial), tree(dask)
    assert sorted(a) == sorted(b)
    assert [name for name in a if a[name] != b[name]] == []
    manifest = json.loads(result.manifests[next(iter(result.manifests))].read_text())
    assert sorted(manifest["kernels"]) == sorted(s.name for s in specs)
    return result


def test_a_grid_subset_built_through_dask_is_the_serial_build(client, tmp_path):
    result = _same_build(client, tmp_path, Target.C, subset())
    binaries = list((tmp_path / "dask").rglob("bin/*.so"))
    assert len(binaries) == len(subset())
    # content-addressed: a second build through Dask compiles nothing and republishes the same
    before = next(iter(result.manifests.values())).read_bytes()
    again = scale_build.build(client, subset(), [Target.C], root=tmp_path / "dask")
    assert again.compiled == []
    assert next(iter(again.manifests.values())).read_bytes() == before


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
def test_cuda_binaries_and_ptx_through_dask_are_the_serial_ones(client, tmp_path):
    _same_build(client, tmp_path, Target.CUDA, subset(1))  # one per stage: nvcc is slow here
    assert len(list((tmp_path / "dask").rglob("bin/*.ptx"))) == len(subset(1))


def test_a_worker_refuses_another_compiler_version():
    tc = resolve(Target.C).toolchains[0]
    other = dataclasses.replace(tc, identity="cc (Imaginary) 0.1")
    with pytest.raises(CompileError, match=r"client planned 'cc \(Imaginary\) 0.1'"):
        scale_build.worker_toolchain(other)
    missing = dataclasses.replace(tc, compiler="no-such-cc-wino")
    with pytest.raises(CompileError, match="`no-such-cc-wino` not found on PATH"):
        scale_build.worker_toolchain(missing)


def test_a_failed_compile_says_the_command_and_the_error():
    tc = resolve(Target.C).toolchains[0]
    with pytest.raises(CompileError, match="broken.c"):
        scale_build.compile_remote(tc, "broken", "this is not C;\n")


def test_wino_build_dask_cli(capsys, client, tmp_path):
    address = client.scheduler.address
    argv = ["build", "--target", "c", "--kernel", "k4_f2x2_ifp32", "--cache-root", str(tmp_path)]
    assert cli.main([*argv, "--dask", address]) == 0
    out = capsys.readouterr().out
    assert f"compiled on the Dask cluster {address}, 0 already built" in out
    assert cli.main(argv) == 0  # the process-pool build finds everything there
    assert "0 compiled here" in capsys.readouterr().out


def test_without_the_extra_the_error_names_it(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(DaskUnavailable, match=r"pip install 'wino\[dask\]'"):
        require_distributed()
    assert cli.main(["build", "--kernel", "k4_f2x2_ifp32", "--dask", "local"]) == 2
    assert "wino[dask]" in capsys.readouterr().err


def test_doit_compile_and_wino_build_dask_write_the_same_cache(client, tmp_path):
    """doit (the default build) on a small grid, then `wino build --dask` on the same grid in
    another build folder: the same files, byte for byte (reports' logs aside)."""
    for folder in ("grids", "schema", "templates"):
        shutil.copytree(REPO / folder, tmp_path / folder)
    (tmp_path / "grids" / "stages.yaml").write_text(STAGES)
    (tmp_path / "grids" / "targets.yaml").write_text(TARGETS)
    done = doit(tmp_path, "-n", "2", "compile:c")
    assert done.returncode == 0, done.stderr
    env = {
        **os.environ,
        "WINO_ROOT": str(tmp_path),
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    argv = ["-m", "wino.cli", "build", "--dask", client.scheduler.address]
    argv += ["--cache-root", str(tmp_path / "dask")]
    done = subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    manifests = list((tmp_path / "build").rglob("manifest.json"))
    kernels = len(json.loads(manifests[0].read_text())["kernels"])
    assert len(manifests) == 1 and kernels >= 4
    assert f"{kernels} compiled on the Dask cluster" in done.stdout
    a, b = tree(tmp_path / "build" / "cache"), tree(tmp_path / "dask" / "cache")
    assert sum(name.endswith(".so") for name in a) == kernels and a == b


def test_the_core_and_the_command_line_do_not_import_dask():
    code = (
        "import sys, wino, wino.cli, wino.runtime, wino.scale, wino.scale.cli; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
