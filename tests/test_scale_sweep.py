"""wino.scale.sweep: ``wino bench`` / ``wino tune`` shards as Dask tasks on a LocalCluster give
the serial run's content (rows, in order, and tuning-DB winners; timings and the error on fresh
random operands aside), and a shard that fails once, or whose worker dies, is run again.

Kept small for the 2-core machine: two fp32 cases, one candidate per stage (the binaries a run
picks then do not depend on timing), the cache built once for the module."""

from __future__ import annotations

import os
import shutil
from functools import partial
from pathlib import Path

import pytest

from tests import host_cache
from wino import cli
from wino.bench import results
from wino.bench.candidates import needed_specs
from wino.bench.sweep import Options
from wino.problem import Problem
from wino.runtime import tuning
from wino.vocab import Target, Tile

pytest.importorskip("distributed", reason="the dask extra is not installed")

from wino.scale import require_distributed  # noqa: E402
from wino.scale import sweep as scale_sweep  # noqa: E402
from wino.scale.cluster import GPU, cpu_cluster, gpu_cluster, slots, visible_gpus  # noqa: E402

CASES = ("conv -n 1 -c 8 -H 8 -W 8 -k 8 -p 1 -q 1", "conv -n 2 -c 16 -H 6 -W 7 -k 8 -p 1 -q 0")
TILES = (Tile(2, 2), Tile(4, 4))
PROBLEMS = [Problem.from_miopen(line) for line in CASES]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("scale-cache")
    host_cache.build(needed_specs(PROBLEMS, TILES, 1), root)
    return root


@pytest.fixture
def root(compiled, tmp_path) -> Path:
    """A copy of the cache per test (each its own tuning DB)."""
    return Path(shutil.copytree(compiled, tmp_path / "build"))


@pytest.fixture(scope="module")
def client():
    distributed = require_distributed()
    with cpu_cluster(2) as cluster, distributed.Client(cluster) as client:
        client.wait_for_workers(2)
        yield client


def _argv(command: str, root: Path, *extra: str) -> list[str]:
    argv = [command, "--target", "c", "--cache-root", str(root), "--candidates", "1", *extra]
    for line in CASES:
        argv += ["--miopen-cmd", line]
    return argv


def _main(capsys, argv) -> tuple[int, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    assert code == 0, out + err
    return code, out


def test_a_c_sweep_through_dask_has_the_serial_content(capsys, client, root, tmp_path):
    serial_csv, dask_csv = tmp_path / "serial.csv", tmp_path / "dask.csv"
    bench = _argv("bench", root, "--tile", "F2x2,F4x4", "--verify")
    _, out = _main(capsys, [*bench, "--results", str(serial_csv)])
    assert out.splitlines()[-1].startswith("Best: ")
    address = client.scheduler.address
    _, out = _main(capsys, [*bench, "--results", str(dask_csv), "--dask", address])
    assert "through Dask (2 shard(s), 2 worker slot(s))" in out
    assert "shard 1/2 (1 case(s)) on cpu" in out and "shard 2/2 (1 case(s)) on cpu" in out
    assert out.splitlines()[-1].startswith("Best: ")
    serial, dask = results.read(serial_csv), results.read(dask_csv)
    assert len(serial) == len(CASES) * len(TILES)
    assert all(row["verified"] == "yes" for row in serial + dask)
    assert results.content(dask) == results.content(serial)  # same rows, same order
    assert all(results.num(row, "total_us") > 0 for row in dask)

    # resume: every case is in the CSV, so no shard runs and the rows stay
    _, out = _main(
        capsys, [*bench, "--results", str(dask_csv), "--dask", address, "--skip-measured"]
    )
    assert out.count("skip ") == len(CASES) and "0 shard(s)" in out
    assert results.read(dask_csv) == dask


def _entries(root: Path) -> dict:
    entries = tuning.load(Target.C, root)["entries"]
    assert set(entries) == {tuning.problem_key(p) for p in PROBLEMS}
    for entry in entries.values():
        assert entry.pop("time_us") > 0
    return entries


def test_tune_through_dask_writes_the_serial_winners(capsys, client, compiled, tmp_path):
    serial = Path(shutil.copytree(compiled, tmp_path / "serial"))
    dask = Path(shutil.copytree(compiled, tmp_path / "dask"))
    quiet = ("--tile", "F2x2", "--noise", "1e9")  # content, not timings: the noise check off
    _, out = _main(capsys, _argv("tune", serial, *quiet))
    _, out = _main(capsys, [*_argv("tune", dask, *quiet), "--dask", client.scheduler.address])
    assert out.count("tuned ") == len(CASES)
    assert _entries(dask) == _entries(serial)


def _shards(cache_root: Path | None = None) -> list[scale_sweep.Shard]:
    options = Options(tiles=(Tile(2, 2),), verify=True, candidate_limit=1, cache_root=cache_root)
    return scale_sweep.make_shards(PROBLEMS, 2, target=Target.C, options=options)


def fail_once(marker: Path, shard: scale_sweep.Shard) -> scale_sweep.ShardResult:
    """Raise the first time any shard runs (the marker remembers), then run it."""
    if not marker.exists():
        marker.touch()
        raise RuntimeError("injected failure")
    return scale_sweep.run_shard(shard)


def die_once(marker: Path, shard: scale_sweep.Shard) -> scale_sweep.ShardResult:
    """Kill the worker process the first time any shard runs, then run it."""
    if not marker.exists():
        marker.touch()
        os._exit(1)
    return scale_sweep.run_shard(shard)


def _rows(done: list[scale_sweep.ShardResult]) -> list[results.Row]:
    return results.content(scale_sweep.merged_rows(PROBLEMS, done))


@pytest.mark.parametrize("fault", [fail_once, die_once], ids=["raises", "worker dies"])
def test_a_shard_that_fails_once_is_run_again(client, compiled, tmp_path, fault):
    shards = _shards(compiled)
    workers = set(client.nthreads())
    marker = tmp_path / "failed-once"
    done = scale_sweep.run_shards(client, shards, fn=partial(fault, marker))
    assert marker.exists()
    if fault is die_once:  # a worker process was lost (its nanny starts a new one)
        assert set(client.nthreads()) != workers
    assert [d.shard.index for d in done] == [1, 2]
    assert _rows(done) == _rows([scale_sweep.run_shard(s) for s in shards])
    assert len(_rows(done)) == len(PROBLEMS)


def always_fails(shard: scale_sweep.Shard) -> scale_sweep.ShardResult:
    raise RuntimeError(f"injected failure of shard {shard.label}")


def test_a_shard_that_keeps_failing_breaks_its_cases_not_the_run(client):
    done = scale_sweep.run_shards(client, _shards(), fn=always_fails)
    assert [d.errors for d in done] == [[PROBLEMS[0].label()], [PROBLEMS[1].label()]]
    assert done[0].lines == ["shard 1/2 failed: RuntimeError: injected failure of shard 1/2"]
    assert scale_sweep.merged_rows(PROBLEMS, done) == []


def test_shards_partition_the_cases_in_order():
    cases = [Problem.from_miopen(f"conv -n {n} -c 8 -H 8 -W 8 -k 8") for n in range(1, 6)]
    shards = scale_sweep.make_shards(cases, 3, target=Target.C, options=Options())
    assert [[p.N for p in s.cases] for s in shards] == [[1, 4], [2, 5], [3]]
    assert [s.label for s in shards] == ["1/3", "2/3", "3/3"]
    assert len(scale_sweep.make_shards(cases[:1], 3, target=Target.C, options=Options())) == 1
    with pytest.raises(ValueError, match="--dask-shards 0: expected N >= 1"):
        scale_sweep.make_shards(cases, 0, target=Target.C, options=Options())


def test_cuda_shards_need_workers_with_a_gpu(capsys, client, root):
    argv = ["bench", "--target", "cuda", "--miopen-cmd", CASES[0], "--cache-root", str(root)]
    assert cli.main([*argv, "--dask", client.scheduler.address]) == 2
    assert "no worker offers the resource GPU" in capsys.readouterr().err


def where(shard: scale_sweep.Shard) -> scale_sweep.ShardResult:
    """A stand-in shard: says which GPU its worker sees."""
    return scale_sweep.ShardResult(shard, [], [os.environ["CUDA_VISIBLE_DEVICES"]], [])


def test_cuda_shards_run_one_per_gpu_worker():
    """A local GPU cluster (two pretend GPUs): one worker per GPU, each seeing only its own and
    offering GPU=1; cuda shards ask for it, so they land on those workers."""
    distributed = require_distributed()
    with gpu_cluster(["0", "1"]) as cluster, distributed.Client(cluster) as client:
        client.wait_for_workers(2)
        assert slots(client, GPU) == 2 and slots(client) == 2
        seen = client.run(lambda: os.environ["CUDA_VISIBLE_DEVICES"])
        assert sorted(seen.values()) == ["0", "1"]
        shards = scale_sweep.make_shards(PROBLEMS * 2, 4, target=Target.CUDA, options=Options())
        done = scale_sweep.run_shards(client, shards, fn=where)
    assert [d.shard.index for d in done] == [1, 2, 3, 4]
    assert {d.lines[0] for d in done} <= {"0", "1"}


def test_visible_gpus(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2, 3")
    assert visible_gpus() == ["2", "3"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert visible_gpus() == []
    with pytest.raises(ValueError, match="no GPU is visible"):
        gpu_cluster(visible_gpus())
