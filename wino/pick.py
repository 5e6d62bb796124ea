"""The default pick: per stage, among the grid's specs of the problem's tile and dtypes, the
first that fits the problem in the preference order grids/stages.yaml declares (``default_pick``),
or, for a stage a target orders its own way, the order grids/targets.yaml declares for that
target (``default_pick`` under the target: the c target's K4 takes the widest vector first).

An order is a list of axes, most significant first; each axis either lists the values it
allows, best first (values not listed are never picked by default), or says ``descending`` /
``ascending``. So a value added to the grid is picked by default where an order admits it, and a
preference is changed in YAML, not here.

The runtime ranks the kernels its manifest holds (``Ranking``, on the records' plain values)
with the same order, so its first dispatch reads grids/stages.yaml's order but never expands
the grid: the grid's order has no ties, so the manifest's best fit is the grid's whenever the
manifest holds it (tests/test_pick.py checks that over a sweep of problems, tiles and dtypes).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from functools import lru_cache

from . import axes, config, grid
from .launch import stage_launch
from .problem import Problem
from .refusals import Refused, check_problem
from .specs import StageSpec
from .vocab import DType, Epilogue, Prescale, Stage, Target, Tile, coerce

_DIRECTIONS = {"ascending": 1, "descending": -1}


def default_xdtype(dtype: DType, target: Target | None = None) -> DType:
    """The default pick's transformed storage (V and U) for io ``dtype`` on ``target``: the
    target's ``xdtype`` table in grids/targets.yaml where it names ``dtype`` (the c target: fp32,
    for its fp32-only BLAS), else fp32 for fp32 and fp16 for 16-bit inputs (bf16 too: about 8x
    more accurate than bf16 storage, made safe by the prescale)."""
    if target is not None:
        declared = config.declared_part("targets", "targets").get(target.value, {})
        value = declared.get("xdtype", {}).get(dtype.short)
        if value is not None:
            return DType.parse(value)
    return DType.FP32 if dtype is DType.FP32 else DType.FP16


def declared_order(stage: Stage, target: Target | None = None) -> list[dict]:
    """The default pick's order of ``stage`` on ``target``: the target's own where
    grids/targets.yaml declares one for the stage (``default_pick`` under the target), else
    grids/stages.yaml's ``default_pick`` (also for ``target`` None)."""
    if target is not None:
        declared = config.declared_part("targets", "targets").get(target.value, {})
        own = declared.get("default_pick", {}).get(stage.short)
        if own is not None:
            return own
    return config.declared_part("stages", "default_pick")[stage.short]


class _NoFit(Exception):
    """None of a Ranking's specs of a stage fits the problem."""


def _rank(order: list[tuple[str, str | list]], values: dict, defaults: dict) -> tuple | None:
    """The sort key of a spec's plain values under ``order``, (axis, how) pairs (a declared
    axis a spec leaves out has its default); None when an axis excludes it."""
    key = []
    for name, how in order:
        value = values[name] if name in values else defaults[name]
        if isinstance(how, str):
            key.append(_DIRECTIONS[how] * value)
        elif value in how:
            key.append(how.index(value))
        else:
            return None
    return tuple(key)


def _ranked(
    specs: Iterable[StageSpec],
    stage: Stage,
    tile: Tile,
    io: DType,
    xdtype: DType,
    epilogue: Epilogue = Epilogue.NONE,
    target: Target | None = None,
) -> tuple[StageSpec, ...]:
    """The specs of one stage, tile and dtype pair (and, for K4 and KF, epilogue) that the
    declared order (``target``'s, ``declared_order``) admits, best first; ties keep the order
    of ``specs``."""
    entries = ((spec.fields_dict(), spec) for spec in specs if spec.stage is stage)
    return tuple(_ranked_entries(entries, stage, tile, io, xdtype, epilogue, target))


def _ranked_entries(entries, stage, tile, io, xdtype, epilogue, target) -> list:
    """The items of ``entries`` ((plain field values, item) pairs of one stage: a spec's
    ``fields_dict`` or a manifest record's spec fields, which are the same) that the declared
    order admits for the tile and dtypes, best first; ties keep the order of ``entries``."""
    order = []
    for axis in declared_order(stage, target):
        ((name, how),) = axis.items()  # one axis per entry
        order.append((name, how))
    defaults = {name: axis.default for name, axis in axes.of_stage(stage.short).items()}
    tile_name, io_value, x_value, e_value = tile.name, io.value, xdtype.value, epilogue.value
    fp32 = DType.FP32.value
    ranked = []
    for values, item in entries:  # the records' plain values: no enum made per record
        if values.get("tile") != tile_name or values.get("io") != io_value:
            continue
        if values.get("xdtype", x_value) != x_value:
            continue
        if values.get("epilogue", e_value) != e_value:
            continue
        accdtype = values.get("accdtype", fp32)
        if accdtype != fp32 and not m_storable(DType(accdtype), xdtype):
            continue  # fp16 M only after fp16 V: fp32 storage (the c target's) keeps fp32 M
        key = _rank(order, values, defaults)
        if key is not None:
            ranked.append((key, item))
    ranked.sort(key=lambda pair: pair[0])  # stable
    return [item for _, item in ranked]


def m_storable(accdtype: DType, xdtype: DType) -> bool:
    """Whether K3 can write M as ``accdtype`` from V and U stored as ``xdtype``: M in fp32
    always; fp16 M only from fp16 operands (cuBLAS writes no fp16 from fp32 or bf16 inputs)."""
    return accdtype is DType.FP32 or accdtype is xdtype is DType.FP16


@lru_cache(maxsize=256)
def candidates(
    stage: Stage,
    tile: Tile,
    io: DType,
    xdtype: DType,
    epilogue: Epilogue = Epilogue.NONE,
    target: Target | None = None,
) -> tuple[StageSpec, ...]:
    """``target``'s grid specs (None: any target's) of one stage, tile and dtype pair (and
    epilogue) that its declared order (None: grids/stages.yaml's) admits, best first
    (declaration order breaks ties)."""
    specs = grid.aot_stage_specs(stage, target)  # the target's grid (None: any target's)
    return _ranked(specs, stage, tile, io, xdtype, epilogue, target)


class Ranking:
    """The declared order over a given set of specs (a manifest's), per stage, tile and dtype
    pair, computed on first use; ties are broken by kernel name. ``records(stage, tile, io,
    xdtype, epilogue)``, when given instead of ``specs``, yields (name, spec fields) of the
    kernels of one stage, tile and io dtype on first use (it may leave out those of another
    xdtype or epilogue), and ``make(name)`` the spec of one: the order is computed on the
    records' plain values, and a spec is made only when the pick reaches it
    (``cache.Manifest.records_of`` and ``spec``: a dispatch makes the few specs it tries)."""

    def __init__(self, specs: Iterable[StageSpec] = (), records=None, make=None):
        self._specs = tuple(sorted(specs, key=lambda spec: spec.name))
        self._records, self._make = records, make
        self._memo: dict[tuple, Sequence[StageSpec]] = {}

    def candidates(
        self,
        stage: Stage,
        tile: Tile,
        io: DType,
        xdtype: DType,
        epilogue=Epilogue.NONE,
        target: Target | None = None,
    ) -> Sequence[StageSpec]:
        key = (stage, tile, io, xdtype, epilogue, target)
        ranked = self._memo.get(key)  # one lookup: the key's hash is not kept
        if ranked is None:
            if self._records is None:
                ranked = _ranked(self._specs, stage, tile, io, xdtype, epilogue, target)
            else:
                found = sorted(self._records(stage, tile, io, xdtype, epilogue))
                entries = ((fields, name) for name, fields in found)
                names = _ranked_entries(entries, stage, tile, io, xdtype, epilogue, target)
                ranked = _MadeOnUse(tuple(names), self._make)
            self._memo[key] = ranked
        return ranked


class _MadeOnUse(Sequence):
    """Specs by name, each made (``make(name)``) when it is first read."""

    def __init__(self, names: tuple[str, ...], make):
        self._names, self._make = names, make

    def __len__(self) -> int:
        return len(self._names)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self._make(name) for name in self._names[index]]
        return self._make(self._names[index])


def epilogue_refusal(stage: Stage, tile: Tile, io: DType, epilogue: Epilogue) -> Refused:
    """The refusal of an epilogue the grid has no kernel of for this stage, tile and io,
    naming the tiles that have it."""
    tiles = sorted(
        {s.tile.name for s in grid.aot_stage_specs(stage) if (s.io, s.epilogue) == (io, epilogue)}
    )
    return Refused(
        "epilogue_not_in_grid",
        f"the grid has no {stage.short} kernel with epilogue {epilogue.short} for tile "
        f"{tile.name}, io {io.short}; {stage.short} tiles with it: {', '.join(tiles) or 'none'}. "
        "Pass one of those tiles (or none: dispatch then takes one), apply the bias / "
        "activation yourself, or add the tile to `epilogues` in grids/stages.yaml and rebuild",
    )


def _first_fit(
    stage: Stage,
    tile: Tile,
    io: DType,
    xdtype: DType,
    problem: Problem,
    among,
    epilogue: Epilogue = Epilogue.NONE,
    tile_scale: bool = True,
    target: Target | None = None,
) -> StageSpec:
    """The first of ``among``'s specs that fits, in ``target``'s order; ``tile_scale``: whether
    K2 writes tile scales (K4's fp16 M needs them: the fp16_m_range rule)."""
    reasons = []
    ranked = among(stage, tile, io, xdtype, epilogue, target)
    if not ranked and epilogue is not Epilogue.NONE and among is candidates:
        raise epilogue_refusal(stage, tile, io, epilogue)
    for spec in ranked:
        try:
            stage_launch(spec, problem, tile_scale=tile_scale)
        except Refused as refusal:
            reasons.append(f"{spec.name}: {refusal}")
            continue
        return spec
    tried = "; tried " + "; ".join(reasons) if reasons else ""
    if among is not candidates:
        raise _NoFit(stage)
    raise Refused(
        "no_spec_in_grid",
        f"no {stage.short} kernel of the grid for {tile.name} {io.short}/{xdtype.short} fits "
        f"this problem{tried}. Add a fitting sub-grid to grids/stages.yaml (and, if it is "
        "outside the order, to default_pick there) and rebuild",
    )


def default_stage_specs(
    problem: Problem,
    tile: Tile,
    dtype: DType | None = None,
    xdtype: DType | None = None,
    ranking: Ranking | None = None,
    target: Target = Target.C,
    epilogue: Epilogue = Epilogue.NONE,
) -> dict[Stage, StageSpec]:
    """The default pick per stage for a problem on ``target`` (the c target unless given; its
    channel extents decide, not the batch); ``dtype`` overrides the problem's; ``xdtype``
    defaults to the target's storage for it (``default_xdtype``: 16-bit inputs store fp32 on
    the host, fp16 on the GPUs); K4 with ``epilogue``. Without ``ranking``: among the grid's
    specs, always inside the grid, Refused when nothing fits (``epilogue_not_in_grid`` when no
    K4 of the tile has the epilogue). With ``ranking`` (a manifest's specs): among those, and
    the grid's pick (which names what is missing) when none of them fits. A problem that
    breaks a problem rule (a 1x1 filter, stride 2) raises that rule's refusal."""
    tile = coerce(Tile, tile, "tile")
    dtype = problem.dtype if dtype is None else coerce(DType, dtype, "dtype")
    target = coerce(Target, target, "target")
    if xdtype is None:
        xdtype = default_xdtype(dtype, target)
    else:
        xdtype = coerce(DType, xdtype, "xdtype")
    epilogue = coerce(Epilogue, epilogue, "epilogue")
    probe = _probe(problem, dtype)
    check_problem(probe, tile)  # a problem no kernel serves: its own rule, not every spec's
    if ranking is None:
        return _pick(tile, dtype, xdtype, probe, candidates, epilogue, target)
    try:
        return _pick(tile, dtype, xdtype, probe, ranking.candidates, epilogue, target)
    except _NoFit:
        return _pick(tile, dtype, xdtype, probe, candidates, epilogue, target)


def _probe(problem: Problem, dtype: DType) -> Problem:
    """The one-image problem of ``dtype`` the pick fits specs to: the problem itself when it
    is that (no copy made and checked again)."""
    one = problem.with_batch(1)
    return one if one.dtype is dtype else replace(one, dtype=dtype)


def _pick(
    tile: Tile,
    dtype: DType,
    xdtype: DType,
    probe: Problem,
    among,
    epilogue: Epilogue,
    target: Target,
):
    def first(stage: Stage, **kwargs) -> StageSpec:
        return _first_fit(stage, tile, dtype, xdtype, probe, among, target=target, **kwargs)

    k2 = first(Stage.INPUT)
    stages = [Stage.FILTER, *([Stage.PRESCALE] if k2.prescale is Prescale.SPLIT else [])]
    picks = {stage: first(stage) for stage in stages}
    picks[Stage.INPUT] = k2
    scaled = k2.prescale is not Prescale.NONE
    picks[Stage.OUTPUT] = first(Stage.OUTPUT, epilogue=epilogue, tile_scale=scaled)
    return dict(sorted(picks.items(), key=lambda item: grid.GRID_STAGES.index(item[0])))


def output_with_epilogue(
    problem: Problem,
    specs: dict[Stage, StageSpec],
    epilogue: Epilogue,
    ranking: Ranking | None = None,
    target: Target | None = None,
) -> dict[Stage, StageSpec]:
    """Unfused specs (a tuning DB's) with K4 swapped for its ``epilogue`` variant: the same
    spec with that epilogue where ``ranking`` (else the grid) holds it, else the first fit of
    ``target``'s declared order; Refused (``epilogue_not_in_grid``) when the grid has none."""
    k4 = specs[Stage.OUTPUT]
    wanted = k4.replace(epilogue=epilogue)
    probe, fp32 = problem.with_batch(1), DType.FP32  # K4 has no xdtype: any passes
    for among in ([ranking.candidates] if ranking else []) + [candidates]:
        try:
            if wanted not in among(Stage.OUTPUT, k4.tile, k4.io, fp32, epilogue, target):
                wanted = _first_fit(
                    Stage.OUTPUT, k4.tile, k4.io, fp32, probe, among, epilogue, target=target
                )
        except _NoFit:
            continue
        return {**specs, Stage.OUTPUT: wanted}
    raise AssertionError("unreachable: the grid's _first_fit raises Refused")


def default_fused_specs(
    problem: Problem,
    tile: Tile,
    dtype: DType | None = None,
    mdtype: DType | None = None,
    epilogue: Epilogue = Epilogue.NONE,
    target: Target | None = None,
) -> dict[Stage, StageSpec]:
    """The default fused2d_rt pick: K1 (U in the MMA dtype), K2a when the kernel reads tile
    scales (fp16 MMA operands), and the first grid KF spec of the tile, dtypes and epilogue
    that fits in the declared order. MMA operands default to fp16 (for bf16 io too: about 8x
    more accurate than bf16 operands, as K2's storage). Among ``target``'s grid (None: any
    target's). Raises Refused when nothing fits."""
    dtype = dtype or problem.dtype
    if dtype is DType.FP32:
        raise Refused(
            "fused_io_fp32",
            "the fused kernel multiplies on fp16/bf16 tensor cores; fp32 io has no fused "
            "kernel: use the unfused plan (algorithm='unfused')",
        )
    mdtype = mdtype or DType.FP16
    epilogue = coerce(Epilogue, epilogue, "epilogue")
    held = candidates(Stage.FUSED, tile, dtype, mdtype, target=target)
    if held and not candidates(Stage.FUSED, tile, dtype, mdtype, epilogue, target):
        raise epilogue_refusal(Stage.FUSED, tile, dtype, epilogue)
    if not held:
        tiles = sorted({s.tile.name for s in grid.aot_stage_specs(Stage.FUSED) if s.io is dtype})
        raise Refused(
            "fused_no_kernel",
            f"the grid has no fused kernel for tile {tile.name}, io {dtype.short}, MMA "
            f"dtype {mdtype.short}; fused tiles for io {dtype.short}: "
            f"{', '.join(tiles) or 'none'}. Pass one of those tiles, algorithm='unfused', or "
            "add a kf sub-grid to grids/stages.yaml and rebuild",
        )
    probe = _probe(problem, dtype)

    def first(stage: Stage, epilogue: Epilogue = Epilogue.NONE) -> StageSpec:
        return _first_fit(stage, tile, dtype, mdtype, probe, candidates, epilogue, target=target)

    return _around(first(Stage.FUSED, epilogue), first)


def fused_pipeline(
    problem: Problem, kf: StageSpec, target: Target | None = None
) -> dict[Stage, StageSpec]:
    """The fused2d_rt pipeline around a given KF spec: the default K1 (U in kf's MMA dtype),
    the default K2a when kf reads K2a's tile scales (prescale split), then kf. Raises Refused
    when no K1 or K2a of the grid fits."""
    probe = _probe(problem, kf.io)

    def first(stage: Stage) -> StageSpec:
        return _first_fit(stage, kf.tile, kf.io, kf.mdtype, probe, candidates, target=target)

    return _around(kf, first)


def _around(kf: StageSpec, first) -> dict[Stage, StageSpec]:
    """K1, K2a where kf takes the split prescale, kf (``first(stage)``: that stage's pick)."""
    picks = {Stage.FILTER: first(Stage.FILTER)}
    if kf.prescale is Prescale.SPLIT:
        picks[Stage.PRESCALE] = first(Stage.PRESCALE)
    picks[Stage.FUSED] = kf
    return picks
