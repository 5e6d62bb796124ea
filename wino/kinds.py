"""The stage-kind table: every fact about one kernel kind in one frozen descriptor.

A kind is a kernel with its own argument list: the spec class it is built from (whose
``name_format`` is the name grammar), the template that renders it, its buffer parameters in
calling order, its kernarg fields (with the magic pairs of the divisions it makes) and its launch
geometry. Naming, rendering, the kernarg structs (kernel source, the manifest's ABI record, the
generated C header, the runtime's packed structs), buffer binding and listings all read this table.
A new kernel is one entry here, its spec class, its sub-grid in grids/stages.yaml and a template.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .fused import FusedBudget
from .geometry import TileGrid, ceil_div, lds_bytes
from .specs import (
    RtFilterSpec,
    RtFusedSpec,
    RtInputSpec,
    RtOutputSpec,
    RtPrescaleSpec,
    StageSpec,
)
from .vocab import DType, K2Path, Prescale


class Kind(enum.Enum):
    """A kernel kind: one argument list, one geometry."""

    K1 = "k1"
    K2A = "k2a"
    K2_REG = "k2_reg"
    K2_FUSED = "k2_fused"
    K2_LDS = "k2_lds"
    K2_LDS_ROWS = "k2_ldsrow"
    K4 = "k4"
    KF = "kf"  # the fused kernel (plan kind fused2d_rt, docs/FUSED.md)


class Access(enum.Enum):
    """How a kernel uses a buffer parameter (READ ones are ``const``)."""

    READ = "read"
    WRITE = "write"
    READ_WRITE = "read_write"


class Role(enum.Enum):
    """Who owns a buffer: the caller's operands and result, or the plan's workspace."""

    OPERAND = "operand"  # x, w or bias
    RESULT = "result"  # y
    WORKSPACE = "workspace"  # U, fs, V, ts, M (wino.launch.workspace_layout)


@dataclass(frozen=True)
class Buffer:
    """One buffer parameter. ``dtype``: the spec field naming its dtype, or a fixed DType."""

    name: str
    role: Role
    dtype: str | DType
    access: Access

    def dtype_of(self, spec: StageSpec) -> DType:
        return self.dtype if isinstance(self.dtype, DType) else getattr(spec, self.dtype)

    def ctype(self, spec: StageSpec) -> str:
        const = "const " if self.access is Access.READ else ""
        return f"{const}{self.dtype_of(spec).c_storage}*"


#: The C type of a kernarg: magic pairs (m_X, s_X) are unsigned, every other field is int.
#: This is the one place the rule is written.
def kernarg_ctype(name: str) -> str:
    return "unsigned" if name.startswith(("m_", "s_")) else "int"


Geometry = Callable[[Any, Any, TileGrid, int], tuple[tuple, dict[str, int]]]


@dataclass(frozen=True)
class StageKind:
    kind: Kind
    spec_class: type
    when: tuple[tuple[str, Any], ...]  # spec field values that select this kind (first match)
    template: str
    buffers: tuple[Buffer, ...]
    fields: tuple[str, ...]  # kernarg fields in ABI order (all 32-bit)
    magics: tuple[str, ...]  # divisors, appended as m_X, s_X pairs
    geometry: Geometry  # (spec, problem, tiles, lanes) -> ((grid, block, shared), derived)
    dynamic_shared: bool = False  # its shared memory is sized at launch (over 48 KB allowed)

    @property
    def kernarg_names(self) -> tuple[str, ...]:
        return self.fields + tuple(f"{p}_{d}" for d in self.magics for p in ("m", "s"))

    @property
    def kernargs(self) -> tuple[tuple[str, str], ...]:
        """(C type, name) per kernarg, in ABI order."""
        return tuple((kernarg_ctype(n), n) for n in self.kernarg_names)

    def params(self, spec: StageSpec) -> list[tuple[str, str]]:
        """(C type, name) per buffer parameter, in calling order (after the kernarg struct)."""
        return [(b.ctype(spec), b.name) for b in self.buffers]

    def abi_record(self, spec: StageSpec) -> dict[str, Any]:
        """The manifest's ``abi`` record of one kernel of this kind (wino.cache.KernelAbi)."""
        return {
            "kind": self.kind.value,
            "kernargs": [{"ctype": c, "name": n} for c, n in self.kernargs],
            "buffers": [
                {
                    "ctype": b.ctype(spec),
                    "name": b.name,
                    "role": b.role.value,
                    "dtype": b.dtype_of(spec).short,
                    "access": b.access.value,
                }
                for b in self.buffers
            ],
        }

    def matches(self, spec: StageSpec) -> bool:
        return type(spec) is self.spec_class and all(getattr(spec, f) == v for f, v in self.when)


# Geometry per kind ------------------------------------------------------------------------------
def _per_lane(spec, problem, tg, lanes):
    total = tg.P * lanes
    return ((ceil_div(total, spec.block), 1, 1), (spec.block, 1, 1), 0), {"total": total}


def _k1(spec, problem, tg, lanes):
    return ((ceil_div(problem.K, spec.rows), 1, 1), (spec.block, 1, 1), 0), {}


def _k2a(spec, problem, tg, lanes):
    span = max(min(lanes, spec.block), 1)  # lanes is 0 when vec > C: the fit rules refuse it
    slots = spec.block // span
    return ((ceil_div(tg.P, slots), 1, 1), (spec.block, 1, 1), 0), {"span": span, "slots": slots}


def _k2_fused(spec, problem, tg, lanes):
    slots = max(spec.block // max(lanes, 1), 1)
    return ((ceil_div(tg.P, slots), 1, 1), (spec.block, 1, 1), 0), {"slots": slots}


def _k2_lds(spec, problem, tg, lanes):
    regions = ceil_div(tg.twp, spec.lds_width)
    chunks = ceil_div(problem.Cg, spec.lds_lanes * spec.vec)
    grid_x = problem.N * tg.TH * problem.dil_w * regions
    geometry = ((grid_x, problem.groups * chunks, 1), (spec.block, 1, 1), lds_bytes(spec))
    return geometry, {"RW": regions, "CH": chunks, "grid_y": problem.groups * chunks}


def _k2_lds_rows(spec, problem, tg, lanes):
    """A workgroup per (image, tile row, column phase, run of lds_width tiles) and, but for
    the fused prescale (one chunk of all C channels), per (group, chunk of lanes*vec channels)."""
    regions = ceil_div(tg.twp, spec.lds_width)
    fused = spec.prescale is Prescale.FUSED
    chunks = 1 if fused else ceil_div(problem.Cg, spec.lds_lanes * spec.vec)
    grid_y = 1 if fused else problem.groups * chunks
    grid_x = problem.N * tg.TH * problem.dil_w * regions
    geometry = ((grid_x, grid_y, 1), (spec.block, 1, 1), lds_bytes(spec))
    return geometry, {"RW": regions, "CH": chunks, "grid_y": grid_y}


def _kf(spec, problem, tg, lanes):
    """One workgroup per tile block, or with ``chain`` N per N tile blocks (GX = the grid's
    x extent: workgroup bx runs tile blocks bx, bx + GX, ...)."""
    kblocks = ceil_div(problem.Kg, spec.kblock)
    budget = FusedBudget.of(spec)
    grid_x = ceil_div(ceil_div(tg.P, spec.tiles), max(budget.chain, 1))
    grid_dims = (grid_x, problem.groups * kblocks, 1)
    geometry = (grid_dims, (spec.block, 1, 1), budget.smem_bytes)
    return geometry, {"KB": kblocks, "GX": grid_x, "grid_y": grid_dims[1]}


# The table --------------------------------------------------------------------------------------
_TILE_DECODE = ("TH", "TW", "thp", "twp")
_WINDOW = ("H", "W", "pad_h", "pad_w", "dil_h", "dil_w")
_IO, _XD, _ACC, _F32 = "io", "xdtype", "accdtype", DType.FP32
_R, _W, _RW = Access.READ, Access.WRITE, Access.READ_WRITE
_OP, _RES, _WS = Role.OPERAND, Role.RESULT, Role.WORKSPACE
_K2_BUFFERS = (Buffer("x", _OP, _IO, _R), Buffer("V", _WS, _XD, _W), Buffer("ts", _WS, _F32, _RW))
#: The epilogue's per-channel bias [K], in the io dtype (nn.Conv2d's and cuDNN's bias dtype: the
#: caller's array is bound as it is); null when the spec's epilogue adds none.
_BIAS = Buffer("bias", _OP, _IO, _R)

KINDS: tuple[StageKind, ...] = (
    StageKind(
        Kind.K1,
        RtFilterSpec,
        (),
        "k1_filter.j2",
        (Buffer("w", _OP, _IO, _R), Buffer("U", _WS, _XD, _W), Buffer("fs", _WS, _F32, _W)),
        ("K", "Cg", "lanes"),
        (),
        _k1,
    ),
    StageKind(
        Kind.K2A,
        RtPrescaleSpec,
        (),
        "k2a_prescale.j2",
        (Buffer("x", _OP, _IO, _R), Buffer("ts", _WS, _F32, _W)),
        ("P", "C", "lanes", "span", "slots", *_WINDOW, *_TILE_DECODE),
        ("span", *_TILE_DECODE),
        _k2a,
    ),
    StageKind(
        Kind.K2_LDS,
        RtInputSpec,
        (("path", K2Path.LDS),),
        "k2_input.j2",
        _K2_BUFFERS,
        ("P", "C", "Cg", "G", "N", *_WINDOW, *_TILE_DECODE, "RW", "CH"),
        ("RW", "dil_w", *_TILE_DECODE, "CH"),
        _k2_lds,
    ),
    StageKind(
        Kind.K2_LDS_ROWS,
        RtInputSpec,
        (("path", K2Path.LDS_ROWS),),
        "k2_input.j2",
        _K2_BUFFERS,
        ("P", "C", "Cg", "G", "N", *_WINDOW, *_TILE_DECODE, "RW", "CH"),
        ("RW", "dil_w", *_TILE_DECODE, "CH", "Cg"),
        _k2_lds_rows,
    ),
    StageKind(
        Kind.K2_FUSED,
        RtInputSpec,
        (("path", K2Path.REGISTER), ("prescale", Prescale.FUSED)),
        "k2_input.j2",
        _K2_BUFFERS,
        ("P", "C", "lanes", "slots", "Cg", "G", *_WINDOW, *_TILE_DECODE),
        ("lanes", "Cg", *_TILE_DECODE),
        _k2_fused,
    ),
    StageKind(
        Kind.K2_REG,
        RtInputSpec,
        (("path", K2Path.REGISTER),),
        "k2_input.j2",
        _K2_BUFFERS,
        ("P", "C", "lanes", "Cg", "G", "total", *_WINDOW, *_TILE_DECODE),
        ("lanes", "Cg", *_TILE_DECODE),
        _per_lane,
    ),
    StageKind(
        Kind.K4,
        RtOutputSpec,
        (),
        "k4_output.j2",
        (
            Buffer("M", _WS, _ACC, _R),
            Buffer("fs", _WS, _F32, _R),
            Buffer("ts", _WS, _F32, _R),
            _BIAS,
            Buffer("y", _RES, _IO, _W),
        ),
        ("P", "K", "lanes", "Kg", "G", "total", "Ho", "Wo", "dil_h", "dil_w", *_TILE_DECODE)
        + ("has_tile_scale",),
        ("lanes", "Kg", *_TILE_DECODE),
        _per_lane,
    ),
    StageKind(
        Kind.KF,
        RtFusedSpec,
        (),
        "fused2d.j2",
        (
            Buffer("x", _OP, _IO, _R),
            Buffer("U", _WS, "mdtype", _R),
            Buffer("fs", _WS, _F32, _R),
            Buffer("ts", _WS, _F32, _R),
            _BIAS,
            Buffer("y", _RES, _IO, _W),
        ),
        ("P", "C", "K", "Cg", "Kg", "G", "KB", "GX", *_WINDOW, "Ho", "Wo", *_TILE_DECODE),
        ("KB", *_TILE_DECODE),
        _kf,
        dynamic_shared=True,
    ),
)
BY_KIND: dict[Kind, StageKind] = {k.kind: k for k in KINDS}


def kind_of(spec: StageSpec) -> StageKind:
    """The descriptor of a spec's kernel (the first table entry that matches it)."""
    for entry in KINDS:
        if entry.matches(spec):
            return entry
    raise TypeError(f"no kernel kind for {spec!r}; add its entry to wino.kinds.KINDS")
