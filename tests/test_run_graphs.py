"""plan.run's graphs of seen pointers (wino.runtime.graphs.RunGraphs): when a run is captured,
which pointer sets are kept, and what a plan's release drops. The GPU side (a replay equals
the launches it stands for) is tests/test_runtime_streams.py."""

from __future__ import annotations

from wino.runtime.graphs import RunGraphs


def test_a_pointer_set_is_captured_on_its_second_sighting_then_replayed():
    graphs = RunGraphs(after=2)
    assert graphs.find((1, 2)) == (None, False)  # first: issue every launch
    assert graphs.find((1, 2)) == (None, True)  # second: capture now
    graphs.keep((1, 2), "graph")
    assert graphs.find((1, 2)) == ("graph", False)
    assert graphs.find((1, 3)) == (None, False)  # other pointers: their own count
    assert graphs.graphs() == 1


def test_pointers_that_never_come_back_are_never_captured():
    graphs = RunGraphs(after=2, slots=4)
    for y in range(100):  # a fresh y at a new address per call
        assert graphs.find((1, y)) == (None, False)
    assert graphs.graphs() == 0 and len(graphs._entries) == 4


def test_the_least_recently_used_set_goes_first():
    graphs = RunGraphs(after=1, slots=2)
    for key in ((1,), (2,)):
        assert graphs.find(key) == (None, True)
        graphs.keep(key, f"g{key[0]}")
    assert graphs.find((1,)) == ("g1", False)  # (1,) is now the most recent
    graphs.find((3,))
    graphs.keep((3,), "g3")
    assert graphs.find((1,)) == ("g1", False)
    assert graphs.find((2,)) == (None, True)  # dropped: counted afresh


def test_release_drops_the_plans_graphs():
    from wino.runtime.plan import Plan

    plan = Plan.__new__(Plan)
    for name, value in (("_workspaces", {}), ("_bounds", {}), ("_filters", {})):
        object.__setattr__(plan, name, value)
    graphs = RunGraphs(after=1)
    graphs.find((1,))
    graphs.keep((1,), "g")
    object.__setattr__(plan, "_graphs", graphs)
    plan.release()
    assert graphs.graphs() == 0 and graphs.find((1,)) == (None, True)
