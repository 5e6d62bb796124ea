"""The default pick: per stage, among the grid's specs of the problem's tile and dtypes, the
first that fits the problem in the preference order grids/stages.yaml declares (``default_pick``).

An order is a list of axes, most significant first; each axis either lists the values it
allows, best first (values not listed are never picked by default), or says ``descending`` /
``ascending``. So a value added to the grid is picked by default where an order admits it, and a
preference is changed in YAML, not here.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from . import config, grid
from .launch import stage_launch
from .problem import Problem
from .refusals import Refused
from .specs import StageSpec
from .vocab import DType, Prescale, Stage, Tile, coerce

_DIRECTIONS = {"ascending": 1, "descending": -1}


def default_xdtype(dtype: DType) -> DType:
    """fp16 transformed storage for 16-bit inputs (bf16 too: about 8x more accurate than bf16
    storage, made safe by the prescale), fp32 for fp32."""
    return DType.FP32 if dtype is DType.FP32 else DType.FP16


def _rank(order: list[dict], values: dict) -> tuple | None:
    """The sort key of a spec's plain values under ``order``; None when an axis excludes it."""
    key = []
    for axis in order:
        ((name, how),) = axis.items()
        value = values[name]
        if isinstance(how, str):
            key.append(_DIRECTIONS[how] * value)
        elif value in how:
            key.append(how.index(value))
        else:
            return None
    return tuple(key)


@lru_cache(maxsize=256)
def candidates(stage: Stage, tile: Tile, io: DType, xdtype: DType) -> tuple[StageSpec, ...]:
    """The grid's specs of one stage, tile and dtype pair that the declared order admits, best
    first."""
    order = config.declared("stages")["default_pick"][stage.short]
    ranked = []
    for spec in grid.aot_stage_specs(stage):
        if spec.tile != tile or spec.io is not io or getattr(spec, "xdtype", xdtype) is not xdtype:
            continue
        key = _rank(order, spec.fields_dict())
        if key is not None:
            ranked.append((key, spec))
    ranked.sort(key=lambda pair: pair[0])  # stable: declaration order breaks ties
    return tuple(spec for _, spec in ranked)


def _first_fit(stage: Stage, tile: Tile, io: DType, xdtype: DType, problem: Problem) -> StageSpec:
    reasons = []
    for spec in candidates(stage, tile, io, xdtype):
        try:
            stage_launch(spec, problem)
        except Refused as refusal:
            reasons.append(f"{spec.name}: {refusal}")
            continue
        return spec
    tried = "; tried " + "; ".join(reasons) if reasons else ""
    raise Refused(
        "no_spec_in_grid",
        f"no {stage.short} kernel of the grid for {tile.name} {io.short}/{xdtype.short} fits "
        f"this problem{tried}. Add a fitting sub-grid to grids/stages.yaml (and, if it is "
        "outside the order, to default_pick there) and rebuild",
    )


def default_stage_specs(
    problem: Problem, tile: Tile, dtype: DType | None = None, xdtype: DType | None = None
) -> dict[Stage, StageSpec]:
    """The default pick per stage for a problem (its channel extents decide, not the batch);
    ``dtype`` overrides the problem's. Always inside the grid; raises Refused when nothing
    fits."""
    tile = coerce(Tile, tile, "tile")
    dtype = problem.dtype if dtype is None else coerce(DType, dtype, "dtype")
    xdtype = default_xdtype(dtype) if xdtype is None else coerce(DType, xdtype, "xdtype")
    probe = replace(problem, N=1, dtype=dtype)
    k2 = _first_fit(Stage.INPUT, tile, dtype, xdtype, probe)
    stages = [Stage.FILTER, *([Stage.PRESCALE] if k2.prescale is Prescale.SPLIT else [])]
    picks = {stage: _first_fit(stage, tile, dtype, xdtype, probe) for stage in stages}
    picks[Stage.INPUT] = k2
    picks[Stage.OUTPUT] = _first_fit(Stage.OUTPUT, tile, dtype, xdtype, probe)
    return dict(sorted(picks.items(), key=lambda item: grid.GRID_STAGES.index(item[0])))
