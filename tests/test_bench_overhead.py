"""``wino bench --overhead`` on the host target: every row measured and printed."""

from __future__ import annotations

import pytest

from tests import runtime_fixtures as rf
from wino.bench import overhead
from wino.vocab import Target


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return rf.host_cache(tmp_path_factory)


def test_rows_and_report(root):
    problem = rf.EXTRA[2].problem
    rows, splits = overhead.measure(problem, Target.C, root, loops=3, repeats=2)
    names = [r.name for r in rows]
    assert names == [
        "import runtime",
        "first dispatch",
        "dispatch (seen)",
        "plan.run",
        "wino.conv2d",
        "conv2d reuse U",
        "graph replay",
        "torch conv2d",
    ]
    assert all(r.us is None or r.us > 0 for r in rows)
    assert all(r.us is not None for r in rows[:-1])
    text = overhead.report(problem, Target.C, rows, splits)
    assert text.splitlines()[0].startswith("wino bench --overhead: fp32 N3 C16")
    for name in names:
        assert name in text
    assert "<= 5 us" in text and "<= 2x torch" in text


def test_the_first_call_split_adds_up_in_the_order_paid(root):
    """On the host: the import, dispatch's four parts (their sum, a little over one dispatch:
    the first dispatch row times one alone), then the first run's parts; each part measured
    (> 0) in a new process."""
    problem = rf.EXTRA[2].problem
    ((label, phases),) = overhead.first_call_splits(problem, Target.C, root)
    assert label == "new process"
    names = [name for name, _ in phases]
    assert names == ["import", *overhead.DISPATCH_PHASES, "backend", "module loads", "first run"]
    assert all(us > 0 for _, us in phases)
    dispatch_us = overhead.first_dispatch_us(phases)
    assert dispatch_us == pytest.approx(sum(us for _, us in phases[1:5]))
    text = "\n".join(overhead.split_report([(label, phases)]))
    assert f"{dispatch_us:15.1f}" in text and "= dispatch" in text


def test_the_first_dispatch_is_timed_alone_in_new_processes(root):
    problem = rf.EXTRA[2].problem
    us = overhead.first_dispatch_alone(problem, Target.C, root, runs=2)
    assert 0 < us < 10e6  # one call after the import, microseconds


def test_per_call_rows_are_timed_in_interleaved_rounds():
    """One warm-up call each, then per round every row's loop once, each loop synchronized:
    a drift of the machine's speed falls on every row alike."""
    events = []
    calls = {name: (lambda name=name: events.append(name)) for name in ("wino", "torch")}
    us = overhead.interleaved_us(calls, lambda: events.append("sync"), loops=2, repeats=3)
    loop = lambda name: [name, name, "sync"]  # noqa: E731
    assert events == ["wino", "torch", "sync"] + (loop("wino") + loop("torch")) * 3
    assert set(us) == {"wino", "torch"} and all(t > 0 for t in us.values())
