"""The vocabulary: enums, tiles and their derived sizes."""

from __future__ import annotations

import pytest

from wino.vocab import TILES, VECS, DType, K2Path, Prescale, Stage, Target, Tile


def test_tiles_are_the_design_tiles_in_order():
    assert [t.name for t in TILES] == [
        "F2x2",
        "F4x4",
        "F6x6",
        "F6x4",
        "F4x6",
        "F6x2",
        "F2x6",
        "F4x2",
        "F2x4",
    ]
    assert len(set(TILES)) == len(TILES)


@pytest.mark.parametrize("tile", TILES, ids=str)
def test_tile_sizes(tile):
    assert (tile.ah, tile.aw) == (tile.mh + 2, tile.mw + 2)
    assert tile.bins == (tile.mh + 2) * (tile.mw + 2)
    assert str(tile) == tile.name == f"F{tile.mh}x{tile.mw}"
    assert Tile.parse(tile.name) == tile
    assert Tile.parse(tile.name.lower()) == tile


@pytest.mark.parametrize(
    "text, match",
    [
        ("F3x3", "not one of the supported tiles"),
        ("F4", "expected 'F<rows>x<cols>'"),
        ("Fax4", "expected 'F<rows>x<cols>'"),
    ],
)
def test_tile_parse_errors(text, match):
    with pytest.raises(ValueError, match=match):
        Tile.parse(text)


def test_dtypes():
    assert [d.itemsize for d in DType] == [2, 2, 4]
    assert DType.FP32.c_storage == "float" and DType.FP16.c_storage == "unsigned short"
    assert DType.parse("half") is DType.FP16 and DType.parse("bfloat16") is DType.BF16
    assert DType.parse("float") is DType.FP32 and DType.parse("fp32") is DType.FP32
    assert DType.FP16.largest_finite == 65504.0
    assert DType.BF16.numpy_name == "bfloat16"
    with pytest.raises(ValueError):
        DType.parse("int8")


def test_short_names_are_unique_per_axis():
    for enum in (Stage, DType, Target, K2Path, Prescale):
        shorts = [member.short for member in enum]
        assert len(set(shorts)) == len(shorts)
        assert all(enum(s).short == s for s in shorts)
    assert [s.short for s in Stage] == ["k1", "k2a", "k2", "k3", "k4", "kf"]
    assert [t.short for t in Target] == ["c", "cuda", "hip"]


def test_vecs():
    assert VECS == (1, 2, 4, 8)
