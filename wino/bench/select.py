"""Each stage's binary by timing, for one transformed-dtype family of a (problem, tile).

Stages are chosen in pipeline order, so every stage reads data its predecessor really wrote
(no timing on uninitialised or zero buffers): K1 among its candidates; K2a (when a K2 takes the
split prescale); K2, a split one costing its K2a too; K3 and K4 together (per M dtype). A
candidate is timed alone, inside a probe pipeline that is the choices so far plus the
candidate, dispatched with ``specs=`` over one workspace shared by the family (its layout is
the same for every probe of a family). Where a probe needs a larger workspace (K3 and K4 with
fp32 M after fp16 M's), the new one is filled by the probe's earlier stages before its stage
is timed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from ..pick import m_storable
from ..problem import Problem
from ..refusals import Refused
from ..runtime.plan import Plan, dispatch
from ..specs import StageSpec
from ..vocab import Prescale, Stage
from . import stages
from .candidates import Candidates
from .device import Device, Operands


class Prober:
    """Dispatches probe pipelines of one family and times one stage of them."""

    def __init__(self, device: Device, problem: Problem, operands: Operands, cache_root=None):
        self.device, self.problem, self.operands = device, problem, operands
        self.cache_root = cache_root
        self._workspace, self._bytes = None, -1
        self._fresh = False  # a workspace no stage has written yet

    def plan(self, specs: dict[Stage, StageSpec]) -> Plan:
        return dispatch(
            self.problem, target=self.device.target, specs=specs, cache_root=self.cache_root
        )

    def workspace(self, plan: Plan):
        if plan.workspace_bytes > self._bytes:
            self._workspace = self.device.workspace(plan.workspace_bytes)
            self._bytes = plan.workspace_bytes
            self._fresh = True
        return self._workspace

    def release(self) -> None:
        """Drop the workspace (a tile's measurements are done; the plans stay)."""
        self._workspace, self._bytes = None, -1

    def time_stage(self, plan: Plan, stage: Stage, final: bool = False) -> float:
        backend, ws = self.device.backend, self.workspace(plan)
        stages.load(plan, backend)
        issuers = [stages.issuers(plan, backend, *raw, ws) for raw in self.operands.raw]
        if self._fresh:  # a new workspace: the stages before this one write what it reads
            self._fresh = False
            for earlier in stages.before(issuers[-1], stage):
                earlier()
        calls = [issue[stage] for issue in issuers]
        return self.device.timer(final).time_us(lambda s: calls[s](), self.operands.sets)

    def time(self, specs: dict[Stage, StageSpec], stage: Stage) -> float:
        """The stage's median time in the probe pipeline ``specs`` (inf: it does not dispatch)."""
        try:
            plan = self.plan(specs)
        except (Refused, KeyError):
            return math.inf
        return self.time_stage(plan, stage)


@dataclass
class Pick:
    """The chosen binaries of one family, their stage times (us) and the assembled plan."""

    candidates: Candidates
    specs: dict[Stage, StageSpec]
    stage_us: dict[Stage, float]
    plan: Plan
    prober: Prober

    @property
    def staged_us(self) -> float:
        return sum(self.stage_us.values())


def assemble(base: dict[Stage, StageSpec], **changes: StageSpec) -> dict[Stage, StageSpec]:
    """``base`` with stages replaced (keys: stage short names), K2a kept only for a split K2."""
    specs = dict(base)
    for short, spec in changes.items():
        specs[Stage(short)] = spec
    if specs[Stage.INPUT].prescale is not Prescale.SPLIT:
        specs.pop(Stage.PRESCALE, None)
    return specs


def fastest(specs, cost: Callable[[StageSpec], float]) -> tuple[StageSpec | None, float]:
    """The candidate of least cost (first on ties) and its cost; (None, inf) if none runs."""
    best, best_cost = None, math.inf
    for spec in specs:
        value = cost(spec)
        if value < best_cost:
            best, best_cost = spec, value
    return best, best_cost


def select(candidates: Candidates, prober: Prober) -> Pick | None:
    """The fastest binary per stage of one family, or None when a stage has none that runs."""
    c = candidates.by_stage
    base = {
        Stage.FILTER: c[Stage.FILTER][0],
        Stage.INPUT: c[Stage.INPUT][0],
        Stage.OUTPUT: c[Stage.OUTPUT][0],
    }
    if base[Stage.INPUT].prescale is Prescale.SPLIT:  # candidates() keeps K2a for a split K2
        base[Stage.PRESCALE] = c[Stage.PRESCALE][0]
    t: dict[Stage, float] = {}
    k1, t[Stage.FILTER] = fastest(
        c[Stage.FILTER], lambda s: prober.time(assemble(base, k1=s), Stage.FILTER)
    )
    if k1 is None:
        return None
    base[Stage.FILTER] = k1
    k2a, t_k2a = None, 0.0
    split = [s for s in c[Stage.INPUT] if s.prescale is Prescale.SPLIT]
    if split:
        k2a, t_k2a = fastest(
            c[Stage.PRESCALE],
            lambda s: prober.time(assemble(base, k2=split[0], k2a=s), Stage.PRESCALE),
        )
    k2, cost = fastest(c[Stage.INPUT], lambda s: _k2_cost(prober, base, s, k2a, t_k2a))
    if k2 is None:
        return None
    base[Stage.INPUT] = k2
    if k2.prescale is Prescale.SPLIT:
        base[Stage.PRESCALE] = k2a
        t[Stage.PRESCALE], t[Stage.INPUT] = t_k2a, cost - t_k2a
    else:
        t[Stage.INPUT] = cost
    k4, t[Stage.GEMM], t[Stage.OUTPUT] = _gemm_and_output(prober, base, c[Stage.OUTPUT])
    if k4 is None or math.isinf(t[Stage.GEMM]):
        return None
    specs = assemble(base, k4=k4)
    return Pick(candidates, specs, _in_order(t), prober.plan(specs), prober)


def _k2_cost(prober: Prober, base, k2: StageSpec, k2a: StageSpec | None, t_k2a: float) -> float:
    if k2.prescale is Prescale.SPLIT:
        if k2a is None:
            return math.inf
        return prober.time(assemble(base, k2=k2, k2a=k2a), Stage.INPUT) + t_k2a
    return prober.time(assemble(base, k2=k2), Stage.INPUT)


def _in_order(times: dict[Stage, float]) -> dict[Stage, float]:
    return {stage: times[stage] for stage in Stage if stage in times}


def _gemm_and_output(prober: Prober, base, k4s) -> tuple[StageSpec | None, float, float]:
    """K4 and K3 together: K3 writes M in K4's accdtype, so per accdtype (fp16 or fp32 M) K3 is
    timed once and its fastest K4 added; the accdtype of least K3 + K4 time wins."""
    best: tuple[StageSpec | None, float, float] = (None, math.inf, math.inf)
    xdtype = base[Stage.INPUT].xdtype  # fp16 M only after fp16 V (pick.m_storable)
    k4s = [s for s in k4s if m_storable(s.accdtype, xdtype)]
    for acc in dict.fromkeys(s.accdtype for s in k4s):  # first-seen order: the default first
        group = [s for s in k4s if s.accdtype is acc]
        t_gemm = prober.time(assemble(base, k4=group[0]), Stage.GEMM)
        k4, t_k4 = fastest(group, lambda s: prober.time(assemble(base, k4=s), Stage.OUTPUT))
        if k4 is not None and t_gemm + t_k4 < best[1] + best[2]:
            best = (k4, t_gemm, t_k4)
    return best
