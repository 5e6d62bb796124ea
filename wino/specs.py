"""Stage specs: the compile-time knobs of one kernel, one frozen dataclass per stage.

Every field is defaulted. ``__post_init__`` checks types and vocabulary (naming the field);
whether a well-typed spec is *sensible* is the refusal rules' job (grids/refusals.yaml), so a spec
that breaks a rule can still be built, named and refused with its reason.

A kernel's name is its identity: ``kernel_name`` builds it from the stage and the spec fields in a
fixed order, and that one string keys the cache, the manifest, the doit task, the plan step and
the tuning DB.
"""

from __future__ import annotations

import dataclasses
import functools
import numbers
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from . import axes
from .vocab import VECS, DType, Epilogue, K2Path, Prescale, Stage, Tile, coerce

_VOCAB = {
    "Tile": Tile,
    "DType": DType,
    "K2Path": K2Path,
    "Prescale": Prescale,
    "Epilogue": Epilogue,
}


@functools.cache
def _field_kinds(cls: type) -> tuple[tuple[str, type | None], ...]:
    """(name, its vocabulary Enum or Tile, None for an int) of a spec class's fields but
    ``extra``, in order: what ``__post_init__`` checks."""
    return tuple((f.name, _VOCAB.get(f.type)) for f in fields(cls) if f.name != "extra")


class _Spec:
    """Shared behaviour of the stage specs (field coercion, checks, naming, dict views)."""

    stage: ClassVar[Stage]
    name_format: ClassVar[str]  # the name grammar: fields (short forms) in a fixed order

    def __post_init__(self) -> None:
        for name, vocab in _field_kinds(type(self)):
            value = getattr(self, name)
            if vocab is not None:  # the member or its string value; lists the valid ones
                if not isinstance(value, vocab):
                    label = f"{type(self).__name__}.{name}"
                    object.__setattr__(self, name, coerce(vocab, value, label))
            elif type(value) is not int:
                if not isinstance(value, numbers.Integral) or isinstance(value, bool):
                    raise ValueError(f"{type(self).__name__}.{name}: expected int, got {value!r}")
                object.__setattr__(self, name, int(value))  # numpy integers become ints
        if getattr(self, "vec", 1) not in VECS:
            raise ValueError(f"{type(self).__name__}.vec: expected one of {VECS}, got {self.vec}")
        object.__setattr__(self, "extra", self._checked_extra())

    def _checked_extra(self) -> tuple[tuple[str, int], ...]:
        """The YAML-declared axis values: known names, checked types, defaults dropped, in
        declaration order (so equal specs compare, hash and name equal)."""
        if not self.extra:
            return ()
        declared = axes.of_stage(self.stage.short)
        given = dict(self.extra)
        unknown = set(given) - set(declared)
        if unknown:
            raise ValueError(
                f"{type(self).__name__}: unknown axis(es) {sorted(unknown)}; declared for "
                f"{self.stage.short}: {sorted(declared)} (grids/stages.yaml axes)"
            )
        owner = type(self).__name__
        return tuple(
            (name, axis.check(owner, given[name]))
            for name, axis in declared.items()
            if name in given and given[name] != axis.default
        )

    def __getattr__(self, name: str) -> Any:
        """A declared axis's value (its default when the spec does not set it)."""
        axis = None if name.startswith("__") else axes.of_stage(self.stage.short).get(name)
        if axis is None:
            raise AttributeError(f"{type(self).__name__} has no field or axis {name!r}")
        return dict(self.extra).get(name, axis.default)

    def axis_values(self) -> list[tuple[str, str, int]]:
        """(C type, name, value) of every declared axis of the stage (defaults included)."""
        return [(a.ctype, n, getattr(self, n)) for n, a in axes.of_stage(self.stage.short).items()]

    @functools.cached_property
    def name(self) -> str:
        """``kernel_name`` of this spec (computed once: a spec is immutable)."""
        return kernel_name(self)

    def fields_dict(self) -> dict[str, Any]:
        """Plain values (strings and ints): the manifest's and the refusal rules' view."""
        out: dict[str, Any] = {}
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            out[f.name] = value.name if isinstance(value, Tile) else getattr(value, "value", value)
        del out["extra"]
        out.update(self.extra)  # declared axes, non-default values only
        return out

    def replace(self, **changes: Any):
        """A copy with ``changes``: fields by name, and declared axes (grids/stages.yaml) by
        name too (``spec.replace(obits=16)``), merged into ``extra``."""
        declared = axes.of_stage(self.stage.short)
        named = {k: changes.pop(k) for k in list(changes) if k in declared}
        if named:
            changes["extra"] = {**dict(changes.get("extra", self.extra)), **named}
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class RtFilterSpec(_Spec):
    """K1: U[A][G][K/G][C/G] = s_k * G g Gt, and the per-k power-of-two filter scale s_k.
    A workgroup of ``block`` threads transforms ``rows`` filter rows (output channels)."""

    stage: ClassVar[Stage] = Stage.FILTER
    name_format: ClassVar[str] = "{stage}_{tile}_i{io}_x{xdtype}_v{vec}_b{block}_r{rows}"
    tile: Tile = Tile(4, 4)
    io: DType = DType.FP16
    xdtype: DType = DType.FP16
    vec: int = 1
    block: int = 256
    rows: int = 1
    extra: tuple[tuple[str, int], ...] = ()  # YAML-declared axes (wino.axes)


@dataclass(frozen=True)
class RtPrescaleSpec(_Spec):
    """K2a: one workgroup per tile writes the tile's power-of-two scale from max|x| over its
    input window and all C channels (split prescale)."""

    stage: ClassVar[Stage] = Stage.PRESCALE
    name_format: ClassVar[str] = "{stage}_{tile}_i{io}_v{vec}_b{block}"
    tile: Tile = Tile(4, 4)
    io: DType = DType.FP16
    vec: int = 1
    block: int = 256
    extra: tuple[tuple[str, int], ...] = ()  # YAML-declared axes (wino.axes)


@dataclass(frozen=True)
class RtInputSpec(_Spec):
    """K2: V[A][G][P][C/G] = s_p * Bt d B. ``path`` register or LDS region (lds_lanes channel
    lanes x lds_width tiles per workgroup); ``prescale`` none, fused or split."""

    stage: ClassVar[Stage] = Stage.INPUT
    name_format: ClassVar[str] = (
        "{stage}_{tile}_i{io}_x{xdtype}_v{vec}_b{block}_{path_tag}_p{prescale}"
    )
    tile: Tile = Tile(4, 4)
    io: DType = DType.FP16
    xdtype: DType = DType.FP16
    vec: int = 1
    block: int = 256
    path: K2Path = K2Path.REGISTER
    lds_lanes: int = 0
    lds_width: int = 0
    prescale: Prescale = Prescale.FUSED
    extra: tuple[tuple[str, int], ...] = ()  # YAML-declared axes (wino.axes)

    @property
    def path_tag(self) -> str:
        """reg, or lds<lanes>w<width> (reg with LDS knobs set: refused, but named distinctly)."""
        if self.path is K2Path.REGISTER and self.lds_lanes == self.lds_width == 0:
            return "reg"
        return f"{self.path.short}{self.lds_lanes}w{self.lds_width}"


@dataclass(frozen=True)
class RtOutputSpec(_Spec):
    """K4: y = act(At M A / (s_p * s_k) + bias[k]), written masked to NHWK; ``epilogue``
    says which of bias and activation (none: the plain output transform)."""

    stage: ClassVar[Stage] = Stage.OUTPUT
    name_format: ClassVar[str] = "{stage}_{tile}_i{io}_a{accdtype}_v{vec}_b{block}{epilogue_tag}"
    tile: Tile = Tile(4, 4)
    io: DType = DType.FP16
    accdtype: DType = DType.FP32
    vec: int = 1
    block: int = 256
    epilogue: Epilogue = Epilogue.NONE
    extra: tuple[tuple[str, int], ...] = ()  # YAML-declared axes (wino.axes)


@dataclass(frozen=True)
class RtFusedSpec(_Spec):
    """KF (fused2d_rt): a block of ``warps`` warps owns ``tiles`` output tiles x ``kblock``
    output channels of one group and loops over C/G in chunks of ``cchunk``: input windows ->
    input transform (fp32) -> ``mdtype`` operands in shared memory -> per bin an m16n8k16
    tensor-core MMA against the U chunk (fp32 accumulators) -> output transform -> y.
    ``prescale`` split reads the tile scales K2a wrote; ``stages`` is the pipeline depth;
    ``epilogue`` the bias / activation applied before y's store (docs/FUSED.md)."""

    stage: ClassVar[Stage] = Stage.FUSED
    name_format: ClassVar[str] = (
        "{stage}_{tile}_i{io}_m{mdtype}_p{tiles}_k{kblock}_c{cchunk}_w{warps}_s{stages}_p{prescale}"
        "{epilogue_tag}"
    )
    tile: Tile = Tile(4, 4)
    io: DType = DType.FP16
    mdtype: DType = DType.FP16
    tiles: int = 32
    kblock: int = 16
    cchunk: int = 16
    warps: int = 12
    stages: int = 1
    prescale: Prescale = Prescale.SPLIT
    epilogue: Epilogue = Epilogue.NONE
    extra: tuple[tuple[str, int], ...] = ()  # YAML-declared axes (wino.axes)

    @property
    def block(self) -> int:
        return self.warps * 32

    @property
    def xdtype(self) -> DType:
        """U's storage dtype (K1's xdtype): the MMA operand dtype."""
        return self.mdtype


SPEC_CLASSES: dict[Stage, type] = {
    Stage.FILTER: RtFilterSpec,
    Stage.PRESCALE: RtPrescaleSpec,
    Stage.INPUT: RtInputSpec,
    Stage.OUTPUT: RtOutputSpec,
    Stage.FUSED: RtFusedSpec,
}
StageSpec = RtFilterSpec | RtPrescaleSpec | RtInputSpec | RtOutputSpec | RtFusedSpec


def _short(value: Any) -> str:
    return value.name.lower() if isinstance(value, Tile) else str(getattr(value, "short", value))


def kernel_name(spec: StageSpec) -> str:
    """The one naming function: the spec class's ``name_format`` over its fields' short forms."""
    values = {f.name: _short(getattr(spec, f.name)) for f in fields(spec)}  # type: ignore[arg-type]
    path_tag = getattr(spec, "path_tag", "")
    epilogue_tag = getattr(spec, "epilogue", Epilogue.NONE).tag  # "" for none: names kept
    values.pop("epilogue", None)
    name = spec.name_format.format(
        stage=spec.stage.short, path_tag=path_tag, epilogue_tag=epilogue_tag, **values
    )
    declared = axes.of_stage(spec.stage.short)
    return name + "".join(f"_{declared[n].suffix.format(v)}" for n, v in spec.extra)


def spec_from_fields(stage: Stage | str, values: dict[str, Any]) -> StageSpec:
    """Build a stage's spec from plain values (a grid point or a manifest entry)."""
    stage = Stage(stage) if isinstance(stage, str) else stage
    cls = SPEC_CLASSES[stage]
    known = {name for name, _ in _field_kinds(cls)}
    declared = axes.of_stage(stage.short)
    unknown = set(values) - known - set(declared)
    if unknown:
        raise ValueError(
            f"{cls.__name__}: unknown field(s) {sorted(unknown)}; known: {sorted(known)}"
            + (f", declared axes: {sorted(declared)}" if declared else "")
        )
    extra = tuple((n, values[n]) for n in declared if n in values)
    return cls(**{k: v for k, v in values.items() if k in known}, extra=extra)
