"""The plan kind dispatch runs when the caller does not say (grids/algorithms.yaml): crossover
rules over the problem, in the bounded condition language of the refusal rules
(wino.refusals), each with the algorithm it picks and a reason for ``plan.explain()``.

Order of the choice (wino.runtime.plan): ``algorithm=`` forces; else the tuning DB's recorded
winner for the problem; else the first rule here whose condition holds.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from . import config
from .problem import Problem
from .refusals import Rule, RuleSite, Scope, probe, problem_namespace, repeated, rule_book

FILE = "algorithms"


class Algorithm(enum.Enum):
    """A plan kind by the name ``dispatch(algorithm=...)`` takes."""

    UNFUSED = "unfused"
    FUSED = "fused"

    @property
    def plan_kind(self) -> str:
        return {"unfused": "unfused2d_rt", "fused": "fused2d_rt"}[self.value]


@dataclass(frozen=True)
class Crossover:
    """One rule: when its condition holds, ``algorithm`` runs, for ``reason``."""

    rule: Rule  # the condition (Rule.when) and the reason (Rule.message), checked as a rule's
    algorithm: Algorithm

    @property
    def id(self) -> str:
        return self.rule.id


@dataclass(frozen=True)
class Choice:
    """What the rules chose for a problem: the rule's id, the algorithm and the reason."""

    rule: str
    algorithm: Algorithm
    reason: str

    def explain(self) -> str:
        return f"rule {self.rule} (grids/algorithms.yaml): {self.reason}"


def load(path: Path) -> tuple[Crossover, ...]:
    """The rules of an algorithms file, validated by its schema and each evaluated against
    probe problems: a bad rule is a ConfigError naming its id and file:line."""
    return from_data(config.load_file(path, FILE), path)


def from_data(data: dict, path: Path, probing: bool = True) -> tuple[Crossover, ...]:
    """The rules of validated algorithms data (each probed unless told not to)."""
    params = rule_book()[0]
    out = []
    for entry in data["rules"]:
        where = RuleSite(path, entry["id"])
        rule = Rule(
            entry["id"], Scope.PROBLEM, (), entry["when"], entry["reason"], where, not probing
        )
        if probing:
            probe(rule, params)
        out.append(Crossover(rule, Algorithm(entry["algorithm"])))
    dupes = repeated([c.id for c in out])
    if dupes:
        raise config.ConfigError(f"{path}: rule ids must be unique; repeated: {dupes}")
    return tuple(out)


@lru_cache(maxsize=1)
def crossovers() -> tuple[Crossover, ...]:
    """grids/algorithms.yaml's rules (loaded once per process; content a build stamped as
    validated, its rules probed, is taken as it is: wino.config.declared)."""
    data = config.declared(FILE)
    return from_data(data, config.GRIDS / f"{FILE}.yaml", probing=not config.stamped(FILE))


def choose(problem: Problem, rules: tuple[Crossover, ...] | None = None) -> Choice:
    """The first rule whose condition holds for ``problem`` (unfused when none does); one
    evaluation per (problem, rules) and process (the namespace costs milliseconds)."""
    return _choose(problem, crossovers() if rules is None else tuple(rules))


@lru_cache(maxsize=4096)
def _choose(problem: Problem, rules: tuple[Crossover, ...]) -> Choice:
    ns = problem_namespace(problem)
    for crossover in rules:
        if crossover.rule.fires(ns):
            reason = crossover.rule.refusal(ns).message
            return Choice(crossover.id, crossover.algorithm, reason)
    return Choice("none", Algorithm.UNFUSED, "no rule of grids/algorithms.yaml holds")
