"""The AOT grid: grids/stages.yaml expanded into stage specs, split into accepted and refused.

``aot_stage_specs()`` is the accepted grid (what the build compiles and the runtime may pick);
``refused_stage_specs()`` lists the rest with the rule that refused each.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from . import config
from .refusals import Refused, spec_refusal
from .specs import SPEC_CLASSES, StageSpec, spec_from_fields
from .vocab import Stage

GRID_STAGES = (Stage.FILTER, Stage.PRESCALE, Stage.INPUT, Stage.OUTPUT, Stage.FUSED)
_NOT_AXES = {"name", "description", "combos", "axes"}


@dataclass(frozen=True)
class RefusedSpec:
    spec: StageSpec
    subgrid: str
    refusal: Refused


def _points(subgrid: dict[str, Any]):
    axes = {k: v for k, v in subgrid.items() if k not in _NOT_AXES}
    axes.update(subgrid.get("axes", {}))  # values of YAML-declared axes (wino.axes)
    combos = subgrid.get("combos", [{}])
    keys = list(axes)
    for combo in combos:
        for values in itertools.product(*(axes[k] for k in keys)):
            point = dict(zip(keys, values, strict=True))
            point.update(combo)
            yield point


def _excluded(stage: str, fields: dict[str, Any], exclusions: list[dict]) -> Refused | None:
    for index, rule in enumerate(exclusions):
        if rule["stage"] != stage:
            continue
        match = {k: v for k, v in rule.items() if k not in ("stage", "reason")}
        if all(fields.get(k) == v for k, v in match.items()):
            return Refused(
                "grid_exclude", f"excluded by grids/stages.yaml exclude[{index}]: {rule['reason']}"
            )
    return None


def _admit(spec: StageSpec, subgrid: str, accepted: dict, refused: dict, data: dict) -> None:
    """File ``spec`` under accepted or refused (with its reason); a seen name is skipped."""
    name = spec.name
    if name in accepted or name in refused:
        return
    why = _excluded(spec.stage.short, spec.fields_dict(), data.get("exclude", []))
    why = why or spec_refusal(spec)
    if why is None:
        accepted[name] = spec
    else:
        refused[name] = RefusedSpec(spec, subgrid, why)


def _epilogue_variants(stage: Stage, specs: tuple[StageSpec, ...], variants: dict | None):
    """The ``epilogues`` section's variants of one stage: each accepted spec whose fields
    match ``where`` again with each of ``values`` as its epilogue."""
    if not variants:
        return
    where = variants["where"]
    for spec in specs:
        fields = spec.fields_dict()
        unknown = sorted(set(where) - set(fields))
        if unknown:
            raise config.ConfigError(
                f"grids/stages.yaml: epilogues.{stage.short}.where: {unknown} are not "
                f"{stage.short} spec fields; known: {sorted(fields)}"
            )
        if fields.get("epilogue") != "none" or any(fields[k] not in v for k, v in where.items()):
            continue
        for value in variants["values"]:
            yield spec.replace(epilogue=value)


@lru_cache(maxsize=1)
def expand() -> tuple[dict[Stage, tuple[StageSpec, ...]], tuple[RefusedSpec, ...]]:
    """Expand the declared grid once: accepted specs per stage (in declaration order,
    de-duplicated by name) and the refused ones with their reasons."""
    data = config.declared("stages")
    accepted: dict[Stage, dict[str, StageSpec]] = {stage: {} for stage in GRID_STAGES}
    refused: dict[str, RefusedSpec] = {}
    for stage in GRID_STAGES:
        subgrids = data["stages"].get(stage.short, [])
        names = [s["name"] for s in subgrids]
        if len(set(names)) != len(names):
            raise config.ConfigError(
                f"grids/stages.yaml: stages.{stage.short}: sub-grid names "
                f"must be unique, got {names}"
            )
        for subgrid in subgrids:
            for point in _points(subgrid):
                try:
                    spec = spec_from_fields(stage, point)
                except (ValueError, TypeError) as err:
                    raise config.ConfigError(
                        f"grids/stages.yaml: stages.{stage.short}[{subgrid['name']}]: {err}"
                    ) from None
                _admit(spec, subgrid["name"], accepted[stage], refused, data)
        variants = data.get("epilogues", {}).get(stage.short)
        for spec in _epilogue_variants(stage, tuple(accepted[stage].values()), variants):
            _admit(spec, f"epilogues.{stage.short}", accepted[stage], refused, data)
    frozen = {stage: tuple(specs.values()) for stage, specs in accepted.items()}
    if not any(frozen.values()):
        raise config.ConfigError(
            f"{config.GRIDS / 'stages.yaml'}: the grid accepts no spec ({len(refused)} refused; "
            "`wino grid --refused` says why): add a sub-grid under `stages:` or fix the "
            "refused points; an empty cache serves nothing"
        )
    return frozen, tuple(refused.values())


def aot_stage_specs(stage: Stage | None = None) -> tuple[StageSpec, ...]:
    """The accepted grid: every spec of one stage, or of all stages."""
    accepted, _ = expand()
    if stage is not None:
        return accepted[stage]
    return tuple(itertools.chain.from_iterable(accepted.values()))


def refused_stage_specs() -> tuple[RefusedSpec, ...]:
    return expand()[1]


@lru_cache(maxsize=1)
def _names() -> frozenset[str]:
    return frozenset(spec.name for spec in aot_stage_specs())


def in_grid(spec: StageSpec) -> bool:
    return spec.name in _names()


def spec_by_name(name: str) -> StageSpec:
    for spec in aot_stage_specs():
        if spec.name == name:
            return spec
    raise KeyError(f"no kernel named {name!r} in the grid; `wino grid` lists them")


assert set(SPEC_CLASSES) == set(GRID_STAGES)
