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
import numbers
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from .vocab import VECS, DType, K2Path, Prescale, Stage, Tile, coerce

_VOCAB = {"Tile": Tile, "DType": DType, "K2Path": K2Path, "Prescale": Prescale}


class _Spec:
    """Shared behaviour of the stage specs (field coercion, checks, naming, dict views)."""

    stage: ClassVar[Stage]

    def __post_init__(self) -> None:
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            label = f"{type(self).__name__}.{f.name}"
            if f.type in _VOCAB:  # the member or its string value; lists the valid ones
                object.__setattr__(self, f.name, coerce(_VOCAB[f.type], value, label))
            elif not isinstance(value, numbers.Integral) or isinstance(value, bool):
                raise ValueError(f"{label}: expected int, got {value!r}")
            else:
                object.__setattr__(self, f.name, int(value))  # numpy integers become ints
        if getattr(self, "vec", 1) not in VECS:
            raise ValueError(f"{type(self).__name__}.vec: expected one of {VECS}, got {self.vec}")

    @property
    def name(self) -> str:
        return kernel_name(self)

    def fields_dict(self) -> dict[str, Any]:
        """Plain values (strings and ints): the manifest's and the refusal rules' view."""
        out: dict[str, Any] = {}
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            out[f.name] = value.name if isinstance(value, Tile) else getattr(value, "value", value)
        return out

    def replace(self, **changes: Any):
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class RtFilterSpec(_Spec):
    """K1: U[A][G][K/G][C/G] = s_k * G g Gt, and the per-k power-of-two filter scale s_k.
    A workgroup of ``block`` threads transforms ``rows`` filter rows (output channels)."""

    stage: ClassVar[Stage] = Stage.FILTER
    tile: Tile = Tile(4, 4)
    io: DType = DType.FP16
    xdtype: DType = DType.FP16
    vec: int = 1
    block: int = 256
    rows: int = 1


@dataclass(frozen=True)
class RtPrescaleSpec(_Spec):
    """K2a: one workgroup per tile writes the tile's power-of-two scale from max|x| over its
    input window and all C channels (split prescale)."""

    stage: ClassVar[Stage] = Stage.PRESCALE
    tile: Tile = Tile(4, 4)
    io: DType = DType.FP16
    vec: int = 1
    block: int = 256


@dataclass(frozen=True)
class RtInputSpec(_Spec):
    """K2: V[A][G][P][C/G] = s_p * Bt d B. ``path`` register or LDS region (lds_lanes channel
    lanes x lds_width tiles per workgroup); ``prescale`` none, fused or split."""

    stage: ClassVar[Stage] = Stage.INPUT
    tile: Tile = Tile(4, 4)
    io: DType = DType.FP16
    xdtype: DType = DType.FP16
    vec: int = 1
    block: int = 256
    path: K2Path = K2Path.REGISTER
    lds_lanes: int = 0
    lds_width: int = 0
    prescale: Prescale = Prescale.FUSED


@dataclass(frozen=True)
class RtOutputSpec(_Spec):
    """K4: y = At M A / (s_p * s_k), written masked to NHWK."""

    stage: ClassVar[Stage] = Stage.OUTPUT
    tile: Tile = Tile(4, 4)
    io: DType = DType.FP16
    accdtype: DType = DType.FP32
    vec: int = 1
    block: int = 256


SPEC_CLASSES: dict[Stage, type] = {
    Stage.FILTER: RtFilterSpec,
    Stage.PRESCALE: RtPrescaleSpec,
    Stage.INPUT: RtInputSpec,
    Stage.OUTPUT: RtOutputSpec,
}
StageSpec = RtFilterSpec | RtPrescaleSpec | RtInputSpec | RtOutputSpec


def kernel_name(spec: StageSpec) -> str:
    """The one naming function: stage, tile, dtypes, vec, block, then stage-specific knobs."""
    s = spec
    head = f"{s.stage.short}_{s.tile.name.lower()}_i{s.io.short}"
    if isinstance(s, RtFilterSpec):
        return f"{head}_x{s.xdtype.short}_v{s.vec}_b{s.block}_r{s.rows}"
    if isinstance(s, RtPrescaleSpec):
        return f"{head}_v{s.vec}_b{s.block}"
    if isinstance(s, RtInputSpec):
        knobs = f"{s.lds_lanes}w{s.lds_width}"
        if s.path is K2Path.REGISTER:  # knobs only when set (refused there, but kept distinct)
            path = "reg" if s.lds_lanes == s.lds_width == 0 else f"reg{knobs}"
        else:
            path = f"lds{knobs}"
        return f"{head}_x{s.xdtype.short}_v{s.vec}_b{s.block}_{path}_p{s.prescale.short}"
    if isinstance(s, RtOutputSpec):
        return f"{head}_a{s.accdtype.short}_v{s.vec}_b{s.block}"
    raise TypeError(f"kernel_name: not a stage spec: {spec!r}")


def spec_from_fields(stage: Stage | str, values: dict[str, Any]) -> StageSpec:
    """Build a stage's spec from plain values (a grid point or a manifest entry)."""
    stage = Stage(stage) if isinstance(stage, str) else stage
    cls = SPEC_CLASSES[stage]
    known = {f.name for f in fields(cls)}
    unknown = set(values) - known
    if unknown:
        raise ValueError(
            f"{cls.__name__}: unknown field(s) {sorted(unknown)}; known: {sorted(known)}"
        )
    return cls(**values)
