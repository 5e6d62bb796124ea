"""Stage specs: frozen, hashable, defaulted, coerced, validated; the name is the identity."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from wino.grid import aot_stage_specs, refused_stage_specs
from wino.specs import (
    SPEC_CLASSES,
    RtFilterSpec,
    RtFusedSpec,
    RtInputSpec,
    RtOutputSpec,
    RtPrescaleSpec,
    kernel_name,
    spec_from_fields,
)
from wino.vocab import DType, K2Path, Prescale, Stage, Tile

ALL_CLASSES = (RtFilterSpec, RtPrescaleSpec, RtInputSpec, RtOutputSpec, RtFusedSpec)


@pytest.mark.parametrize("cls", ALL_CLASSES, ids=lambda c: c.__name__)
def test_frozen_and_hashable(cls):
    knob, value, other = ("warps", 8, 4) if cls is RtFusedSpec else ("vec", 1, 2)
    spec = cls()
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(spec, knob, 4)
    twin = cls(**{knob: value})
    assert spec == twin and hash(spec) == hash(twin)
    assert len({spec, twin, cls(**{knob: other})}) == 2
    assert {spec: "x"}[twin] == "x"


def test_defaults():
    assert RtFilterSpec() == RtFilterSpec(Tile(4, 4), DType.FP16, DType.FP16, 1, 256, 1)
    assert RtPrescaleSpec() == RtPrescaleSpec(Tile(4, 4), DType.FP16, 1, 256)
    assert RtInputSpec() == RtInputSpec(
        Tile(4, 4), DType.FP16, DType.FP16, 1, 256, K2Path.REGISTER, 0, 0, Prescale.FUSED
    )
    assert RtOutputSpec() == RtOutputSpec(Tile(4, 4), DType.FP16, DType.FP32, 1, 256)
    assert {cls.stage for cls in ALL_CLASSES} == set(SPEC_CLASSES)


def test_exact_names_are_stable():
    assert RtFilterSpec().name == "k1_f4x4_ifp16_xfp16_v1_b256_r1"
    assert RtPrescaleSpec().name == "k2a_f4x4_ifp16_v1_b256"
    assert RtInputSpec().name == "k2_f4x4_ifp16_xfp16_v1_b256_reg_pfused"
    assert RtOutputSpec().name == "k4_f4x4_ifp16_afp32_v1_b256"
    lds = RtInputSpec("F6x6", "bf16", "fp16", 4, 32, "lds", 16, 2, "split")
    assert lds.name == "k2_f6x6_ibf16_xfp16_v4_b32_lds16w2_psplit"
    assert kernel_name(RtFilterSpec("F2x6", "fp32", "fp32", 8, 512, 4)) == (
        "k1_f2x6_ifp32_xfp32_v8_b512_r4"
    )


def test_strings_are_coerced():
    spec = RtInputSpec(tile="F6x4", io="bfloat16", xdtype="fp16", path="lds", prescale="split")
    assert spec.tile == Tile(6, 4) and spec.io is DType.BF16 and spec.xdtype is DType.FP16
    assert spec.path is K2Path.LDS and spec.prescale is Prescale.SPLIT
    assert spec == RtInputSpec(
        Tile(6, 4), DType.BF16, DType.FP16, path=K2Path.LDS, prescale=Prescale.SPLIT
    )
    assert RtOutputSpec(accdtype="float").accdtype is DType.FP32


@pytest.mark.parametrize(
    "cls, field, value, match",
    [
        (RtInputSpec, "vec", "4", r"RtInputSpec\.vec: expected int"),
        (RtInputSpec, "vec", 3, r"RtInputSpec\.vec: expected one of"),
        (RtFilterSpec, "block", 256.0, r"RtFilterSpec\.block: expected int"),
        (RtFilterSpec, "rows", True, r"RtFilterSpec\.rows: expected int"),
        (RtInputSpec, "tile", "F3x3", r"RtInputSpec\.tile: 'F3x3' is not one of \['F2x2', "),
        (RtInputSpec, "tile", (4, 4), r"RtInputSpec\.tile: expected a Tile or one of"),
        (RtPrescaleSpec, "io", "int8", r"RtPrescaleSpec\.io: "),
        (RtOutputSpec, "accdtype", 32, r"RtOutputSpec\.accdtype: expected a DType or one of"),
        (RtInputSpec, "path", "shared", r"RtInputSpec\.path: "),
        (RtInputSpec, "prescale", "always", r"RtInputSpec\.prescale: "),
        (RtInputSpec, "lds_lanes", None, r"RtInputSpec\.lds_lanes: expected int"),
    ],
)
def test_bad_types_name_the_field(cls, field, value, match):
    with pytest.raises((ValueError, TypeError), match=match):
        cls(**{field: value})


def test_fields_dict_round_trips_through_spec_from_fields():
    for spec in aot_stage_specs():
        values = spec.fields_dict()
        assert all(isinstance(v, (str, int)) for v in values.values())
        assert spec_from_fields(spec.stage, values) == spec
        assert spec_from_fields(spec.stage.short, values) == spec


def test_spec_from_fields_rejects_unknown_fields():
    with pytest.raises(ValueError, match=r"RtOutputSpec: unknown field\(s\) \['xdtype'\]"):
        spec_from_fields("k4", {"xdtype": "fp16"})


def test_names_unique_across_the_grid():
    specs = list(aot_stage_specs()) + [r.spec for r in refused_stage_specs()]
    names = [s.name for s in specs]
    assert len(names) == len(set(names))
    assert len(set(specs)) == len(specs)


_DOMAINS = {
    "tile": ["F2x2", "F6x4"],
    "io": ["fp16", "bf16", "fp32"],
    "xdtype": ["fp16", "fp32"],
    "accdtype": ["fp16", "fp32"],
    "vec": [1, 8],
    "block": [32, 256],
    "rows": [1, 2],
    "path": ["reg", "lds"],
    "lds_lanes": [0, 16],
    "lds_width": [0, 4],
    "prescale": ["none", "fused", "split"],
    "mdtype": ["fp16", "bf16"],
    "tiles": [16, 32],
    "kblock": [8, 16],
    "cchunk": [16, 32],
    "warps": [4, 8],
    "stages": [1, 2],
    "epilogue": ["none", "bias", "relu", "bias_relu"],
    "extra": [()],  # YAML-declared axes: none in the repo's grid (tests/test_axes.py adds one)
}


@pytest.mark.parametrize("cls", ALL_CLASSES, ids=lambda c: c.__name__)
def test_name_is_injective(cls):
    """Distinct specs (accepted or not) never share a name: the name keys caches and dedups."""
    keys = [f.name for f in dataclasses.fields(cls)]
    seen: dict[str, object] = {}
    for values in itertools.product(*(_DOMAINS[k] for k in keys)):
        spec = cls(**dict(zip(keys, values, strict=True)))
        other = seen.setdefault(spec.name, spec)
        assert other == spec, f"{other} and {spec} share the name {spec.name}"


def test_name_is_fixed_by_fields_in_order():
    name = RtInputSpec(vec=8, block=512).name
    assert name.index("_v8") < name.index("_b512") < name.index("_reg") < name.index("_pfused")
    assert name.startswith(Stage.INPUT.short + "_")
