"""The candidates of a case and tile: per stage, the accepted grid specs with the tile and the
problem's io dtype that the cache holds and that fit the problem (``stage_launch`` passes for
every batch chunk), grouped by transformed dtype (K1 and K2 must agree on it).

Within a family: K2a only where a K2 takes the split prescale, and K4 checked with the tile
scale that family's K2 prescale implies. The default pick comes first, then wider vectors first
(grid order among equals); ``limit`` keeps the first few per stage (the host's smaller set).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..grid import aot_stage_specs
from ..launch import batch_chunks, largest_split, stage_launch
from ..pick import default_stage_specs, default_xdtype
from ..problem import Problem
from ..refusals import Refused
from ..specs import StageSpec
from ..vocab import DType, Epilogue, Prescale, Stage, Target, Tile

STAGES = (Stage.FILTER, Stage.PRESCALE, Stage.INPUT, Stage.OUTPUT)


@dataclass(frozen=True)
class Candidates:
    """One transformed-dtype family of a (problem, tile): the fitting specs per stage."""

    tile: Tile
    xdtype: DType
    by_stage: dict[Stage, tuple[StageSpec, ...]]

    @property
    def complete(self) -> bool:
        """Every stage the pipeline needs has a candidate."""
        return all(self.by_stage[s] for s in (Stage.FILTER, Stage.INPUT, Stage.OUTPUT))

    @property
    def scaled(self) -> bool:
        """Whether this family's K2 writes or reads tile scales (then K4 divides by them)."""
        return any(k2.prescale is not Prescale.NONE for k2 in self.by_stage[Stage.INPUT])

    def specs(self) -> set[StageSpec]:
        return {spec for specs in self.by_stage.values() for spec in specs}


def chunk_problems(problem: Problem, tile: Tile, xdtype: DType) -> list[Problem]:
    """The batch chunks dispatch will launch (the split that keeps indices in 31 bits)."""
    split = largest_split(problem, tile, None, xdtype, DType.FP32)
    return [problem.with_batch(n) for n in sorted({n for _, n in batch_chunks(problem.N, split)})]


def fits(spec: StageSpec, chunks: list[Problem], tile_scale: bool = True) -> bool:
    try:
        for chunk in chunks:
            stage_launch(spec, chunk, tile_scale=tile_scale)
    except Refused:
        return False
    return True


def _ordered(specs: Iterable[StageSpec], first: StageSpec | None) -> list[StageSpec]:
    ranked = sorted(specs, key=lambda s: -s.vec)  # stable: grid order among equal vectors
    if first in ranked:
        ranked.remove(first)
        ranked.insert(0, first)
    return ranked


def _default(
    problem: Problem, tile: Tile, xdtype: DType, target: Target | None = None
) -> dict[Stage, StageSpec]:
    """``target``'s default pick (the c target's when None) at transformed dtype ``xdtype``."""
    try:
        target = Target.C if target is None else target
        return default_stage_specs(problem, tile, xdtype=xdtype, target=target)
    except Refused:
        return {}


def _grid(
    stage: Stage, problem: Problem, tile: Tile, names: set[str] | None, target: Target | None
):
    for spec in aot_stage_specs(stage, target):  # the target's grid (None: any target's)
        if spec.tile != tile or spec.io is not problem.dtype:
            continue
        if getattr(spec, "epilogue", Epilogue.NONE) is not Epilogue.NONE:
            continue  # the bench times the plain convolution
        if names is None or spec.name in names:
            yield spec


def family(
    problem: Problem,
    tile: Tile,
    xdtype: DType,
    names: set[str] | None = None,
    limit: int | None = None,
    target: Target | None = None,
) -> Candidates:
    """The candidates of one transformed dtype (``names``: the cache's kernels; None: the
    grid), ``target``'s default pick first (the c target's when None)."""
    chunks = chunk_problems(problem, tile, xdtype)
    default = _default(problem, tile, xdtype, target)
    k2 = [
        s
        for s in _grid(Stage.INPUT, problem, tile, names, target)
        if s.xdtype is xdtype and fits(s, chunks)
    ]
    k2 = _ordered(k2, default.get(Stage.INPUT))[:limit]
    scaled = any(s.prescale is not Prescale.NONE for s in k2)
    k2a = []
    if any(s.prescale is Prescale.SPLIT for s in k2):
        k2a = [s for s in _grid(Stage.PRESCALE, problem, tile, names, target) if fits(s, chunks)]
        k2a = _ordered(k2a, default.get(Stage.PRESCALE))[:limit]
    if not k2a:
        k2 = [s for s in k2 if s.prescale is not Prescale.SPLIT]
    k1 = [
        s
        for s in _grid(Stage.FILTER, problem, tile, names, target)
        if s.xdtype is xdtype and fits(s, chunks)
    ]
    k4 = [s for s in _grid(Stage.OUTPUT, problem, tile, names, target) if fits(s, chunks, scaled)]
    by_stage = {
        Stage.FILTER: tuple(_ordered(k1, default.get(Stage.FILTER))[:limit]),
        Stage.PRESCALE: tuple(k2a),
        Stage.INPUT: tuple(k2),
        Stage.OUTPUT: tuple(_ordered(k4, default.get(Stage.OUTPUT))[:limit]),
    }
    return Candidates(tile, xdtype, by_stage)


def xdtypes(problem: Problem, tile: Tile, target: Target | None = None) -> list[DType]:
    """The transformed dtypes the grid has K2 binaries for, ``target``'s default first."""
    found = {
        s.xdtype
        for s in aot_stage_specs(Stage.INPUT, target)
        if s.tile == tile and s.io is problem.dtype
    }
    first = default_xdtype(problem.dtype, target)
    return sorted(found, key=lambda d: (d is not first, d.value))


def families(
    problem: Problem,
    tile: Tile,
    names: set[str] | None = None,
    limit: int | None = None,
    target: Target | None = None,
) -> list[Candidates]:
    """Every complete family of a (problem, tile), ``target``'s default transformed dtype first."""
    out = [family(problem, tile, xd, names, limit, target) for xd in xdtypes(problem, tile, target)]
    return [c for c in out if c.complete]


def needed_specs(
    problems: Iterable[Problem], tiles: Iterable[Tile], limit: int | None = None
) -> set[StageSpec]:
    """Every spec a sweep over these problems and tiles may time (to build a cache for it)."""
    from ..refusals import check_problem

    needed: set[StageSpec] = set()
    for problem in problems:
        for tile in tiles:
            try:
                check_problem(problem, tile)
            except Refused:
                continue
            for candidates in families(problem, tile, None, limit):
                needed |= candidates.specs()
    return needed
