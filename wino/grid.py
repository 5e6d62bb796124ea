"""The AOT grid: grids/stages.yaml expanded into stage specs, split into accepted and refused.

``aot_stage_specs(target=)`` is the accepted grid of a target (what its build compiles and its
runtime may pick); ``refused_stage_specs(target=)`` lists the rest with the rule that refused
each. A sub-grid may name the targets that build it and a spec rule the targets it refuses on
(``targets`` in grids/stages.yaml and grids/refusals.yaml), so the grids differ per target; with
no target, the grid is every spec some target builds.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from functools import lru_cache
from typing import Any

from . import axes as declared_axes
from . import config
from .refusals import Refused, spec_refusal, spec_refusals  # noqa: F401 (grid.spec_refusal)
from .specs import SPEC_CLASSES, StageSpec, spec_from_fields
from .vocab import Stage, Target

GRID_STAGES = (Stage.FILTER, Stage.PRESCALE, Stage.INPUT, Stage.OUTPUT, Stage.FUSED)
_NOT_AXES = {"name", "description", "combos", "axes", "targets"}


@dataclass(frozen=True)
class RefusedSpec:
    spec: StageSpec
    subgrid: str
    refusal: Refused
    target: Target | None = None  # the target it was refused on (the first one, in the union)


def _points(subgrid: dict[str, Any], stage: Stage):
    """A sub-grid's points: its axes multiplied out (the last varying fastest), then each
    combo applied. The axes run in the spec's field order, then the declared axes' order,
    whatever order the mapping holds its keys in (a build's stamp of the YAML stores them
    sorted), so a process that reads the grid from a stamp expands it in the same order."""
    axes = {k: v for k, v in subgrid.items() if k not in _NOT_AXES}
    axes.update(subgrid.get("axes", {}))  # values of YAML-declared axes (wino.axes)
    combos = subgrid.get("combos", [{}])
    keys = sorted(axes, key=_axis_order(stage))  # unknown keys last (spec_from_fields refuses)
    for combo in combos:
        for values in itertools.product(*(axes[k] for k in keys)):
            point = dict(zip(keys, values, strict=True))
            point.update(combo)
            yield point


def _axis_order(stage: Stage) -> Callable[[str], int]:
    """A sort key: the position of a field or declared axis of the stage's spec, in expansion
    order; any other name after them all."""
    names = [f.name for f in fields(SPEC_CLASSES[stage]) if f.name != "extra"]
    names += list(declared_axes.of_stage(stage.short))
    rank = {name: i for i, name in enumerate(names)}
    return lambda key: rank.get(key, len(rank))


def _excluded(
    stage: str, fields: dict[str, Any], exclusions: list[dict], target: Target
) -> Refused | None:
    """The first ``exclude`` entry of ``stage`` (on ``target``: its ``targets``, default all)
    that matches the spec's fields."""
    for index, rule in enumerate(exclusions):
        if rule["stage"] != stage or target.value not in rule.get("targets", [target.value]):
            continue
        match = {k: v for k, v in rule.items() if k not in ("stage", "reason", "targets")}
        if all(fields.get(k) == v for k, v in match.items()):
            return Refused(
                "grid_exclude", f"excluded by grids/stages.yaml exclude[{index}]: {rule['reason']}"
            )
    return None


def _subgrid_targets(subgrid: dict[str, Any]) -> tuple[Target, ...]:
    """The targets that build a sub-grid's specs (its ``targets``; every target by default)."""
    return tuple(Target(t) for t in subgrid.get("targets", [t.value for t in Target]))


@dataclass
class _Expansion:
    """The grid of every target (key a Target) and of any target (key None: the union, in
    declaration order; refused there: the specs no target accepts)."""

    data: dict
    accepted: dict[Target | None, dict[Stage, dict[str, StageSpec]]] = field(default_factory=dict)
    refused: dict[Target | None, dict[str, RefusedSpec]] = field(default_factory=dict)
    #: spec name -> its refusal per target (None: accepted there)
    memo: dict[str, dict[Target, Refused | None]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for key in (None, *Target):
            self.accepted[key] = {stage: {} for stage in GRID_STAGES}
            self.refused[key] = {}

    def reasons(self, spec: StageSpec) -> dict[Target, Refused | None]:
        name = spec.name
        if name not in self.memo:
            fields, exclusions = spec.fields_dict(), self.data.get("exclude", [])
            per = spec_refusals(spec, tuple(Target))
            for target in Target:
                why = _excluded(spec.stage.short, fields, exclusions, target)
                per[target] = why or per[target]
            self.memo[name] = per
        return self.memo[name]

    def admit(self, spec: StageSpec, subgrid: str, targets: tuple[Target, ...]) -> None:
        """File ``spec`` under accepted or refused (with its reason) on each of ``targets``
        and in the union; a name a target has seen is skipped there."""
        name, stage = spec.name, spec.stage
        per = self.reasons(spec)
        for target in targets:
            if name in self.accepted[target][stage] or name in self.refused[target]:
                continue
            if per[target] is None:
                self.accepted[target][stage][name] = spec
                self.accepted[None][stage].setdefault(name, spec)
                self.refused[None].pop(name, None)
            else:
                refused = RefusedSpec(spec, subgrid, per[target], target)
                self.refused[target][name] = refused
                if name not in self.accepted[None][stage]:
                    self.refused[None].setdefault(name, refused)


def _epilogue_variants(stage: Stage, specs: tuple[StageSpec, ...], variants: dict | None):
    """The ``epilogues`` section's variants of one stage: each accepted spec that matches one
    of the ``where`` entries (an entry: its fields and declared axes, defaults included, each
    among the listed values) again with each of ``values`` as its epilogue."""
    if not variants:
        return
    where = variants["where"]
    entries = where if isinstance(where, list) else [where]
    for spec in specs:
        fields = {name: value for _, name, value in spec.axis_values()} | spec.fields_dict()
        unknown = sorted({k for entry in entries for k in entry} - set(fields))
        if unknown:
            raise config.ConfigError(
                f"grids/stages.yaml: epilogues.{stage.short}.where: {unknown} are not "
                f"{stage.short} spec fields; known: {sorted(fields)}"
            )
        if fields.get("epilogue") != "none" or not any(
            all(fields[k] in v for k, v in entry.items()) for entry in entries
        ):
            continue
        for value in variants["values"]:
            yield spec.replace(epilogue=value)


@lru_cache(maxsize=1)
def _expanded() -> _Expansion:
    """Expand the declared grid once, for every target: each sub-grid's points on the targets
    it lists (``targets``, default all), each refused by the first spec rule that applies on
    that target (rules list their ``targets`` too) or by an ``exclude`` entry."""
    data = config.declared("stages")
    out = _Expansion(data)
    for stage in GRID_STAGES:
        subgrids = data["stages"].get(stage.short, [])
        names = [s["name"] for s in subgrids]
        if len(set(names)) != len(names):
            raise config.ConfigError(
                f"grids/stages.yaml: stages.{stage.short}: sub-grid names "
                f"must be unique, got {names}"
            )
        for subgrid in subgrids:
            targets = _subgrid_targets(subgrid)
            for point in _points(subgrid, stage):
                try:
                    spec = spec_from_fields(stage, point)
                except (ValueError, TypeError) as err:
                    raise config.ConfigError(
                        f"grids/stages.yaml: stages.{stage.short}[{subgrid['name']}]: {err}"
                    ) from None
                out.admit(spec, subgrid["name"], targets)
        variants = data.get("epilogues", {}).get(stage.short)
        for target in Target:
            specs = tuple(out.accepted[target][stage].values())
            for spec in _epilogue_variants(stage, specs, variants):
                out.admit(spec, f"epilogues.{stage.short}", (target,))
    if not any(out.accepted[None].values()):
        raise config.ConfigError(
            f"{config.GRIDS / 'stages.yaml'}: the grid accepts no spec "
            f"({len(out.refused[None])} refused; `wino grid --refused` says why): add a "
            "sub-grid under `stages:` or fix the refused points; an empty cache serves nothing"
        )
    return out


def expand(
    target: Target | None = None,
) -> tuple[dict[Stage, tuple[StageSpec, ...]], tuple[RefusedSpec, ...]]:
    """The accepted specs per stage (in declaration order, de-duplicated by name) and the
    refused ones with their reasons, on ``target``; None: every spec some target builds, and
    those none does (each with its refusal on the first target that refused it)."""
    out = _expanded()
    accepted = {stage: tuple(specs.values()) for stage, specs in out.accepted[target].items()}
    return accepted, tuple(out.refused[target].values())


expand.cache_clear = _expanded.cache_clear  # type: ignore[attr-defined]  # tests reset it


def aot_stage_specs(
    stage: Stage | None = None, target: Target | None = None
) -> tuple[StageSpec, ...]:
    """The accepted grid on ``target`` (None: of any target): every spec of one stage, or of
    all stages."""
    specs = _expanded().accepted[target]
    if stage is not None:
        return tuple(specs[stage].values())
    return tuple(itertools.chain.from_iterable(s.values() for s in specs.values()))


def refused_stage_specs(target: Target | None = None) -> tuple[RefusedSpec, ...]:
    """The refused specs on ``target`` (None: those no target builds)."""
    return tuple(_expanded().refused[target].values())


def spec_targets(spec: StageSpec) -> tuple[Target, ...]:
    """The targets whose grid holds ``spec`` (none: outside the grid)."""
    accepted = _expanded().accepted
    return tuple(t for t in Target if spec.name in accepted[t][spec.stage])


@lru_cache(maxsize=4)
def _names(target: Target | None = None) -> frozenset[str]:
    return frozenset(spec.name for spec in aot_stage_specs(target=target))


def in_grid(spec: StageSpec, target: Target | None = None) -> bool:
    """Whether ``target``'s grid (None: any target's) holds ``spec``."""
    return spec.name in _names(target)


def spec_by_name(name: str) -> StageSpec:
    for spec in aot_stage_specs():
        if spec.name == name:
            return spec
    raise KeyError(f"no kernel named {name!r} in the grid; `wino grid` lists them")


assert set(SPEC_CLASSES) == set(GRID_STAGES)
