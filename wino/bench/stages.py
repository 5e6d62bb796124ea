"""One stage's launches alone, as the backends' ``run`` issues them (same buffers, same order
over the batch chunks), so a stage can be timed by itself.

``issuers(plan, backend, x, w, y, workspace)`` takes the backend's raw operands (numpy arrays on
the host, CuPy views on CUDA) and returns one callable per stage of the plan: K1 (filter), K2a
(prescale, split only), K2 (input), K3 (GEMM) and K4 (output).
"""

from __future__ import annotations

from collections.abc import Callable

from ..runtime.plan import GemmStep, Plan
from ..vocab import Stage


def _chunk_call(plan: Plan, backend, stage: Stage, x, y, workspace, U, fs):
    """The launches of one stage over every batch chunk (the backend's own chunk steps)."""
    calls = []
    for start, images in plan.chunks:
        views = backend.workspace(plan, workspace, images)
        chunk = slice(start, start + images)
        launches = backend.chunk_launches(plan, images, x[chunk], y[chunk], views, U, fs)
        calls += [launch for kind, launch in launches if kind is stage]

    def issue() -> None:
        for launch in calls:
            launch()

    return issue


def issuers(plan: Plan, backend, x, w, y, workspace) -> dict[Stage, Callable[[], None]]:
    """Stage -> a callable issuing that stage's launches (raw operands, the plan's workspace)."""
    first = backend.workspace(plan, workspace, plan.batch_split)
    U, fs = first["U"], first["fs"]
    k1 = next(s for s in plan.steps if s.stage is Stage.FILTER)
    out: dict[Stage, Callable[[], None]] = {
        Stage.FILTER: lambda: backend.launch(plan, k1, {"w": w, "U": U, "fs": fs})
    }
    present = {step.stage for step in plan.steps}
    for stage in (Stage.PRESCALE, Stage.INPUT, Stage.GEMM, Stage.OUTPUT):
        if stage in present:
            out[stage] = _chunk_call(plan, backend, stage, x, y, workspace, U, fs)
    return out


def before(issuers: dict[Stage, Callable[[], None]], stage: Stage) -> list[Callable[[], None]]:
    """The issuers of the stages that run before ``stage`` (``issuers`` is in pipeline order)."""
    order = list(issuers)
    return [issuers[s] for s in order[: order.index(stage)]] if stage in issuers else []


def load(plan: Plan, backend) -> None:
    """Load every binary of the plan (module loads stay out of the timings)."""
    for step in plan.steps:
        if not isinstance(step, GemmStep):
            backend.function(step.name)
