"""The seen-call path of ``plan.run`` and ``wino.conv2d`` (wino.runtime.backends): a call whose
arrays describe as the plan's last checked call did skips the checks (and they still refuse
any change that matters), the plan's own workspace is allocated once per thread (host), and
``conv2d(reuse_filter=True)`` runs K1 once per weight object and version."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tests import runtime_fixtures as rf
from wino.runtime import Plan, api, backends, conv2d, conv2d_reference, dispatch, relative_error
from wino.runtime.host import HostBackend
from wino.runtime.verify import bound_for

CASE = rf.EXTRA[2]  # fp32 3x16x12x12 -> 8, F4x4


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return rf.host_cache(tmp_path_factory)


@pytest.fixture
def plan(root):
    plan = dispatch(CASE.problem, target="c", tile=CASE.tile, cache_root=root)
    plan.release()
    return plan


@pytest.fixture
def checks(monkeypatch):
    """Count the full checks of a run (Backend.bind) and the workspace allocations."""
    counts = {"bind": 0, "workspace": 0}
    bind, raw = backends.Backend.bind, HostBackend.raw_workspace

    def counting_bind(self, *args):
        counts["bind"] += 1
        return bind(self, *args)

    def counting_raw(self, plan, workspace, ctx=None):
        counts["workspace"] += workspace is None
        return raw(self, plan, workspace, ctx)

    monkeypatch.setattr(backends.Backend, "bind", counting_bind)
    monkeypatch.setattr(HostBackend, "raw_workspace", counting_raw)
    return counts


def _data(seed: int = 0):
    return rf.inputs(CASE.problem, np.random.default_rng(seed))


def _check(y, x, w) -> None:
    p = CASE.problem
    ref = conv2d_reference(x, w, (p.pad_h, p.pad_w))
    assert relative_error(y, ref) < bound_for(CASE.tile, p.dtype, p.dtype)


def test_a_seen_call_skips_the_checks_and_reads_new_data(plan, checks):
    x, w = _data()
    U = plan.transform_filter(w)
    y, ws = rf.poisoned(plan)
    for _ in range(3):
        plan.run(x, U=U, y=y, workspace=ws)
        _check(y, x, w)
    assert checks["bind"] == 1
    x[...] = _data(1)[0]  # new data in the same array: the same call, new results
    y[...] = np.nan
    plan.run(x, U=U, y=y, workspace=ws)
    _check(y, x, w)
    assert checks["bind"] == 1
    x2 = x.copy()  # another array: checked again
    plan.run(x2, U=U, y=y, workspace=ws)
    _check(y, x2, w)
    assert checks["bind"] == 2


def test_layers_sharing_a_plan_are_each_checked_once(plan, checks, monkeypatch):
    """A model's layers of one shape share a plan, each with its arrays: every set is checked
    on its first call only, alternating; past BOUND_SLOTS sets the least recent is checked
    again."""
    layers = []
    for seed in range(3):
        x, w = _data(seed)
        y, ws = rf.poisoned(plan)
        layers.append((x, w, plan.transform_filter(w), y, ws))
    for _ in range(3):
        for x, w, U, y, ws in layers:
            y[...] = np.nan
            plan.run(x, U=U, y=y, workspace=ws)
            _check(y, x, w)
    assert checks["bind"] == 3
    monkeypatch.setattr(backends, "BOUND_SLOTS", 2)
    plan.release()
    for x, _w, U, y, ws in layers + layers[:1]:  # the first set was dropped by the third
        plan.run(x, U=U, y=y, workspace=ws)
    assert checks["bind"] == 3 + 4 and len(plan._bounds) == 2


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda a: {**a, "y": a["y"].astype(np.float16)}, "y: expected shape"),
        (lambda a: {**a, "y": a["y"][:, :, ::-1]}, "C-contiguous"),
        (lambda a: {**a, "x": a["x"][:, :, :, :8]}, "x: expected NHWC shape"),
        (lambda a: {**a, "workspace": a["workspace"][:16]}, "workspace"),
        (lambda a: {**a, "y": a["x"].reshape(-1)[: a["y"].size].reshape(a["y"].shape)}, "overlaps"),
    ],
)
def test_a_seen_plan_still_refuses_a_changed_array(plan, change, match):
    x, w = _data()
    y, ws = rf.poisoned(plan)
    arrays = {"x": x, "U": plan.transform_filter(w), "y": y, "workspace": ws}
    plan.run(**arrays)
    with pytest.raises(ValueError, match=match):
        plan.run(**change(arrays))


def test_a_read_only_y_is_refused_after_a_seen_call(plan):
    x, w = _data()
    y, ws = rf.poisoned(plan)
    plan.run(x, w, y=y, workspace=ws)
    y.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        plan.run(x, w, y=y, workspace=ws)


def test_a_stream_is_refused_on_the_host_after_a_seen_call(plan):
    x, w = _data()
    plan.run(x, w)
    with pytest.raises(ValueError, match="stream"):
        plan.run(x, w, stream=1)


def test_the_plans_own_workspace_is_allocated_once(plan, checks):
    x, w = _data()
    for _ in range(3):
        _check(plan.run(x, w), x, w)
    assert checks["workspace"] == 1 and plan.held_bytes == plan.workspace_bytes


def test_a_plan_keeps_a_bounded_number_of_workspaces(plan, checks):
    """Threads come and go: a plan keeps its own workspace for the OWN_WORKSPACE_SLOTS most
    recent ones, not one per thread that ever ran it (12 threads alive at once here)."""
    x, w = _data()
    threads = backends.OWN_WORKSPACE_SLOTS + 4
    barrier = threading.Barrier(threads)

    def run(_):
        barrier.wait()  # every thread alive at once: 12 distinct thread ids
        return plan.run(x, w)

    with ThreadPoolExecutor(threads) as pool:
        for y in pool.map(run, range(threads)):
            _check(y, x, w)
    assert checks["workspace"] == threads
    assert plan.held_bytes == backends.OWN_WORKSPACE_SLOTS * plan.workspace_bytes


def test_release_drops_what_the_plan_holds(root, plan, checks):
    p = CASE.problem
    x, w = _data()
    conv2d(x, w, (p.pad_h, p.pad_w), tile=CASE.tile, reuse_filter=True, cache_root=root)
    plan.run(x, w)
    assert plan.held_bytes == plan.workspace_bytes and plan._bounds and plan._filters
    binds, allocations = checks["bind"], checks["workspace"]
    plan.release()
    assert plan.held_bytes == 0 and not plan._bounds and not plan._filters
    _check(plan.run(x, w), x, w)  # checked and allocated again
    assert (checks["bind"], checks["workspace"]) == (binds + 1, allocations + 1)


def test_a_large_workspace_is_allocated_per_call(plan, checks, monkeypatch):
    monkeypatch.setattr(backends, "OWN_WORKSPACE_MAX", plan.workspace_bytes - 1)
    x, w = _data()
    for _ in range(3):
        _check(plan.run(x, w), x, w)
    assert checks["workspace"] == 3 and not plan._workspaces


def test_a_copied_operand_is_not_kept(plan, checks):
    """x that the host must copy (not C-contiguous) is checked and copied on every call."""
    x, w = _data()
    strided = np.asfortranarray(x)
    for _ in range(2):
        _check(plan.run(strided, w), x, w)
    assert checks["bind"] == 2 and not plan._bounds


@pytest.fixture
def k1_runs(monkeypatch):
    calls = []
    real = Plan.transform_filter

    def counting(self, w, workspace=None, stream=None):
        calls.append(w)
        return real(self, w, workspace, stream)

    monkeypatch.setattr(Plan, "transform_filter", counting)
    return calls


def test_conv2d_reuse_filter_runs_k1_once_per_weight(root, plan, k1_runs):
    p = CASE.problem
    x, w = _data()
    options = dict(padding=(p.pad_h, p.pad_w), tile=CASE.tile, cache_root=root)
    for _ in range(3):
        _check(conv2d(x, w, reuse_filter=True, **options), x, w)
    assert len(k1_runs) == 1
    w2 = _data(2)[1]
    _check(conv2d(x, w2, reuse_filter=True, **options), x, w2)
    assert len(k1_runs) == 2
    _check(conv2d(x, w, **options), x, w)  # without reuse: K1 inside the run
    assert len(k1_runs) == 2


def test_conv2d_reuse_filter_follows_a_torch_weights_version(root, plan, k1_runs):
    torch = pytest.importorskip("torch")
    p = CASE.problem
    x, w = (torch.from_numpy(a) for a in _data())
    options = dict(padding=(p.pad_h, p.pad_w), tile=CASE.tile, cache_root=root)
    _check(conv2d(x, w, reuse_filter=True, **options).numpy(), x.numpy(), w.numpy())
    w.mul_(-2)  # in place: a new version of the same tensor
    _check(conv2d(x, w, reuse_filter=True, **options).numpy(), x.numpy(), w.numpy())
    assert len(k1_runs) == 2


def test_the_plan_keeps_a_bounded_number_of_filters(root, plan, monkeypatch):
    monkeypatch.setattr(api, "KEPT_FILTERS", 2)
    p = CASE.problem
    options = dict(padding=(p.pad_h, p.pad_w), tile=CASE.tile, cache_root=root)
    x = _data()[0]
    for seed in range(4):
        conv2d(x, _data(seed)[1], reuse_filter=True, **options)
    assert len(plan._filters) == 2


def test_a_new_y_per_call_is_checked_alone(plan, checks, monkeypatch):
    """A framework allocates y per call (wino.torch): the other arrays' checks are kept, y's
    own run (its shape, layout and overlap with what the kernels read)."""
    from wino.runtime import aliasing

    overlaps = []
    real = aliasing.check_extents
    monkeypatch.setattr(
        aliasing, "check_extents", lambda y, spans: overlaps.append(y) or real(y, spans)
    )
    x, w = _data()
    U = plan.transform_filter(w)
    for _ in range(3):
        y = rf.poisoned(plan)[0]
        plan.run(x, U=U, y=y)
        _check(y, x, w)
    assert checks["bind"] == 1 and len(overlaps) == 3
