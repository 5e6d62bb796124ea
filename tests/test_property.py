"""Property: for random valid problems and random grid picks (the binaries of the session's
host cache), the host target matches the float64 reference within the bound wino claims.
Deterministic (derandomized, no example database); a failure prints a reproduction line."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, note, settings
from hypothesis import strategies as st

from tests import runtime_fixtures as rf
from wino import cache
from wino.launch import stage_launch
from wino.pick import m_storable
from wino.problem import Problem
from wino.refusals import Refused
from wino.runtime import conv2d_reference, dispatch, relative_error
from wino.runtime.verify import bound_for
from wino.vocab import Prescale, Stage, Target


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    """The session host cache and its specs per stage."""
    root = rf.host_cache(tmp_path_factory)
    specs = [k.spec for k in cache.find_manifest(Target.C, root).kernels.values()]
    by_stage = {
        stage: sorted((s for s in specs if s.stage is stage), key=lambda s: s.name)
        for stage in (Stage.FILTER, Stage.PRESCALE, Stage.INPUT, Stage.OUTPUT)
    }
    return root, by_stage


@st.composite
def picks(draw, by_stage):
    """A K2 from the cache, K1 / K2a / K4 that go with it, and a problem they all fit."""
    k2 = draw(st.sampled_from(by_stage[Stage.INPUT]))
    same = lambda s: s.tile == k2.tile and s.io is k2.io  # noqa: E731
    k1s = [s for s in by_stage[Stage.FILTER] if same(s) and s.xdtype is k2.xdtype]
    k4s = [s for s in by_stage[Stage.OUTPUT] if same(s) and m_storable(s.accdtype, k2.xdtype)]
    assume(k1s and k4s)
    specs = {Stage.FILTER: draw(st.sampled_from(k1s))}
    if k2.prescale is Prescale.SPLIT:
        k2as = [s for s in by_stage[Stage.PRESCALE] if same(s)]
        assume(k2as)
        specs[Stage.PRESCALE] = draw(st.sampled_from(k2as))
    specs[Stage.INPUT], specs[Stage.OUTPUT] = k2, draw(st.sampled_from(k4s))
    groups = draw(st.sampled_from((1, 1, 2)))
    cvec = max(s.vec for s in specs.values() if s.stage is not Stage.OUTPUT)
    cg = cvec * draw(st.integers(1, 6))
    kg = specs[Stage.OUTPUT].vec * draw(st.integers(1, 4))
    dil, dil_w = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    problem = Problem(
        N=draw(st.integers(1, 3)),
        C=cg * groups,
        K=kg * groups,
        H=draw(st.integers(2 * dil + 1, 14)),
        W=draw(st.integers(2 * dil_w + 1, 14)),  # an output column at any padding
        pad_h=draw(st.integers(0, 2)),
        pad_w=draw(st.integers(0, 2)),
        dil_h=dil,
        dil_w=dil_w,
        groups=groups,
        dtype=k2.io,
    )
    try:
        for spec in specs.values():
            stage_launch(spec, problem)
    except (Refused, ValueError):
        assume(False)
    return problem, specs, draw(st.integers(0, 2**32 - 1))


@settings(
    max_examples=30,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(data=st.data())
def test_random_problems_and_picks_match_the_reference(pool, data):
    root, by_stage = pool
    problem, specs, seed = data.draw(picks(by_stage))
    names = {stage.short: spec.name for stage, spec in specs.items()}
    note(
        f"reproduce: plan = dispatch({problem!r}, target='c', specs=<{names}>); "
        f"x, w = tests.runtime_fixtures.inputs(problem, np.random.default_rng({seed}))"
    )
    plan = dispatch(problem, target="c", cache_root=root, specs=specs)
    x, w = rf.inputs(problem, np.random.default_rng(seed))
    y = plan.run(x, w)
    p = problem
    ref = conv2d_reference(x, w, (p.pad_h, p.pad_w), (p.dil_h, p.dil_w), p.groups)
    bound = bound_for(p_tile := specs[Stage.INPUT].tile, p.dtype, specs[Stage.INPUT].xdtype)
    error = relative_error(y, ref)
    assert error <= bound, f"{p_tile} {p.dtype.short}: error {error:.3e} > bound {bound:.1e}"
