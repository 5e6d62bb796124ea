"""Host cost of the runtime: the manifest parsed once per process (again only when the file
changes), plans cached by everything that decides them, one backend per manifest, the launches
prepared once per plan; a run's checks come before any kernel; the host graph replays."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests import runtime_fixtures as rf
from wino import cache, grid, pick
from wino.runtime import conv2d_reference, dispatch, relative_error, tuning
from wino.runtime import plan as plan_module
from wino.runtime.host import HostBackend
from wino.runtime.program import KernelOp
from wino.vocab import Target


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """A copy of the session's host cache: these tests republish its manifest and tuning DB."""
    import shutil

    src = rf.host_cache(tmp_path_factory)
    dst = tmp_path_factory.mktemp("cache-copy") / "build"
    shutil.copytree(src, dst)
    return dst


@pytest.fixture
def parses(monkeypatch):
    """Count manifest parses (the JSON read and the schema validation)."""
    calls = []
    real = cache.parse_manifest

    def counting(path, source=None):
        calls.append(path)
        return real(path, source)

    monkeypatch.setattr(cache, "parse_manifest", counting)
    cache._MANIFESTS.clear()
    plan_module.clear_plan_cache()
    return calls


def _republish(root) -> None:
    """Publish the same manifest again (a new file renamed into place, as a build does)."""
    path, _ = cache.manifest_state(Target.C, root)
    cache.write_manifest(path.parent, json.loads(path.read_text()))


def test_manifest_is_parsed_once_across_many_dispatches(root, parses):
    cases = rf.EXTRA[:5]
    for _ in range(20):
        for case in cases:
            dispatch(case.problem, target="c", tile=case.tile, cache_root=root)
    assert len(parses) == 1


def test_the_first_dispatch_does_not_expand_the_grid(root, parses, monkeypatch):
    """The default pick ranks the manifest's kernels: the grid (YAML, schema and rules over
    every spec) is expanded only to name a missing kernel."""
    expansions = []
    real = grid.aot_stage_specs
    monkeypatch.setattr(grid, "aot_stage_specs", lambda *a: expansions.append(a) or real(*a))
    for case in rf.EXTRA[:5]:
        pick.candidates.cache_clear()
        plan = dispatch(case.problem, target="c", cache_root=root)
        assert not expansions and plan.source == "default pick"
        assert plan.specs == pick.default_stage_specs(case.problem, plan.tile)  # the oracle
        assert expansions
        expansions.clear()


def test_a_republished_manifest_is_read_again(root, parses):
    case = rf.EXTRA[2]
    first = dispatch(case.problem, target="c", cache_root=root)
    _republish(root)
    second = dispatch(case.problem, target="c", cache_root=root)
    assert len(parses) == 2
    assert second is not first and second.manifest is not first.manifest
    assert dispatch(case.problem, target="c", cache_root=root) is second
    assert len(parses) == 2


def test_a_manifest_replaced_by_another_process_is_noticed_after_revalidate_s(
    root, parses, monkeypatch
):
    """A seen dispatch trusts the files for REVALIDATE_S; a copy renamed into place outside
    ``cache.atomic_write`` (as another process's build does) is read once that has passed."""
    import os
    import time

    monkeypatch.setattr(plan_module, "REVALIDATE_S", 0.2)
    case = rf.EXTRA[2]
    first = dispatch(case.problem, target="c", cache_root=root)
    path, _ = cache.manifest_state(Target.C, root)
    tmp = path.with_name(".other-process.json")
    tmp.write_text(path.read_text())
    os.replace(tmp, path)
    assert dispatch(case.problem, target="c", cache_root=root) is first
    assert len(parses) == 1
    time.sleep(0.25)
    second = dispatch(case.problem, target="c", cache_root=root)
    assert second is not first and len(parses) == 2


def test_a_seen_problem_returns_the_same_plan(root, parses):
    case = rf.EXTRA[2]
    plan = dispatch(case.problem, target="c", cache_root=root)
    assert dispatch(case.problem, target=Target.C, cache_root=root) is plan
    assert dispatch(case.problem, target="c", tile=case.tile, cache_root=root) is not plan
    assert dispatch(case.problem, target="c", batch_split=1, cache_root=root) is not plan
    assert dispatch(case.problem.with_batch(2), target="c", cache_root=root) is not plan
    assert dispatch(case.problem, target="c", cache_root=root) is plan


def test_a_changed_tuning_db_makes_a_new_plan(root, parses):
    case = next(c for c in rf.EXTRA if c.tile.name == "F2x2" and c.problem.N == 3)
    before = dispatch(case.problem, target="c", cache_root=root)
    assert before.source == "default pick" and before.tile.name == "F4x4"
    tuning.record(case.problem, Target.C, case.tile, case.specs, 3.0, root)
    after = dispatch(case.problem, target="c", cache_root=root)
    assert after.source == "tuning DB" and after.tile == case.tile
    assert dispatch(case.problem, target="c", cache_root=root) is after
    tuning.db_path(Target.C, root).unlink()  # not a publication: noticed after REVALIDATE_S
    assert dispatch(case.problem, target="c", cache_root=root) is after
    plan_module.invalidate()
    again = dispatch(case.problem, target="c", cache_root=root)
    assert again.source == "default pick" and again is not after
    assert len(parses) == 1  # the manifest did not change


def test_one_backend_per_manifest_and_launches_prepared_once(root, parses, monkeypatch):
    prepared = []
    real = HostBackend.prepare
    monkeypatch.setattr(
        HostBackend,
        "prepare",
        lambda self, plan, step: prepared.append(step) or real(self, plan, step),
    )
    a = dispatch(rf.EXTRA[0].problem, target="c", tile=rf.EXTRA[0].tile, cache_root=root)
    b = dispatch(rf.EXTRA[2].problem, target="c", cache_root=root)
    assert a.backend() is b.backend()
    x, w = rf.inputs(a.problem, np.random.default_rng(1))
    for _ in range(3):
        a.run(x, w)
    kernel_ops = [op for ops in a._program.chunks for op in ops if isinstance(op, KernelOp)]
    assert len(prepared) == 1 + len(kernel_ops)  # K1 and each chunk's kernels, once
    assert a._program is a.backend().program(a)


def test_run_equals_the_reference_with_U_workspace_and_y_given(root):
    case = rf.EXTRA[1]  # N = 7 in chunks
    plan = dispatch(case.problem, target="c", tile=case.tile, cache_root=root, batch_split=3)
    x, w = rf.inputs(case.problem, np.random.default_rng(2))
    y, workspace = rf.poisoned(plan)
    U = plan.transform_filter(w)
    plan.run(x, U=U, y=y, workspace=workspace)
    p = case.problem
    ref = conv2d_reference(
        x.astype(np.float64), w.astype(np.float64), (p.pad_h, p.pad_w), (1, 1), 1
    )
    assert relative_error(y, ref) <= rf.issue_bound(case.tile, p.dtype, plan.xdtype)


def test_host_graph_replays_the_run(root):
    case = rf.EXTRA[2]
    plan = dispatch(case.problem, target="c", cache_root=root)
    x, w = rf.inputs(case.problem, np.random.default_rng(3))
    y, workspace = rf.poisoned(plan)
    graph = plan.graph(x, w, y=y, workspace=workspace)
    expect = y.copy()
    x[...] = rf.inputs(case.problem, np.random.default_rng(4))[0]
    graph.replay()
    assert not np.array_equal(y, expect)
    assert np.array_equal(y, plan.run(x, w))
    with pytest.raises(ValueError, match="y: plan.graph needs"):
        plan.graph(x, w, workspace=workspace)
    with pytest.raises(ValueError, match="workspace: plan.graph needs"):
        plan.graph(x, w, y=y)


def test_host_refuses_a_stream_and_device_arrays(root):
    plan = dispatch(rf.EXTRA[2].problem, target="c", cache_root=root)
    x, w = rf.inputs(plan.problem, np.random.default_rng(5))
    with pytest.raises(ValueError, match="stream: the c"):
        plan.run(x, w, stream=7)
    with pytest.raises(ValueError, match="x: expected a numpy array"):
        plan.run(x.tolist(), w)


def test_a_bad_U_writes_nothing(root):
    """Every argument is checked before the first kernel: y keeps its poison."""
    plan = dispatch(rf.EXTRA[2].problem, target="c", cache_root=root)
    x, w = rf.inputs(plan.problem, np.random.default_rng(6))
    y, workspace = rf.poisoned(plan)
    U, fs = plan.transform_filter(w)
    with pytest.raises(ValueError, match="U: fs must be"):
        plan.run(x, U=(U, fs[:-1]), y=y, workspace=workspace)
    assert np.isnan(y).all()
    assert (workspace == 0xFF).all()
