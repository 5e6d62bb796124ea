"""Problem: MIOpenDriver command lines, defaults, derived extents and validation."""

from __future__ import annotations

from dataclasses import replace

import pytest

from wino.problem import (
    MIOPEN_FLAGS,
    Direction,
    Problem,
    canonical_line,
    forward_only,
    read_miopen_cases,
    read_miopen_file,
)
from wino.vocab import DType


@pytest.mark.parametrize(
    "command, dtype", [("conv", DType.FP32), ("convfp16", DType.FP16), ("convbfp16", DType.BF16)]
)
def test_command_sets_dtype(command, dtype):
    assert Problem.from_miopen(f"{command} -n 2 -c 8").dtype is dtype
    assert Problem.from_miopen(f"./bin/MIOpenDriver {command} -n 2").dtype is dtype


def test_miopendriver_defaults_when_flags_are_omitted():
    p = Problem.from_miopen("conv")
    assert (p.N, p.C, p.H, p.W, p.K, p.R, p.S) == (100, 3, 32, 32, 32, 3, 3)
    assert (p.pad_h, p.pad_w, p.stride_h, p.stride_w) == (0, 0, 1, 1)
    assert (p.dil_h, p.dil_w, p.groups, p.direction) == (1, 1, 1, 0)
    assert (p.Ho, p.Wo) == (30, 30)


def test_short_flags():
    p = Problem.from_miopen(
        "convfp16 -n 64 -c 256 -H 14 -W 15 -k 128 -y 3 -x 3 -p 1 -q 2 -u 1 -v 1 -l 2 -j 1 -g 4 -F 1"
    )
    assert (p.N, p.C, p.H, p.W, p.K) == (64, 256, 14, 15, 128)
    assert (p.pad_h, p.pad_w, p.dil_h, p.dil_w, p.groups, p.direction) == (1, 2, 2, 1, 4, 1)
    assert (p.Cg, p.Kg) == (64, 32)


def test_long_flags():
    p = Problem.from_miopen(
        "conv --batchsize 2 --in_channels 16 --in_h 9 --in_w 7 --out_channels 24 --fil_h 3 "
        "--fil_w 3 --pad_h 1 --pad_w 0 --conv_stride_h 1 --conv_stride_w 1 --dilation_h 1 "
        "--dilation_w 2 --group_count 2 --forw 1"
    )
    assert (p.N, p.C, p.H, p.W, p.K, p.pad_h, p.pad_w) == (2, 16, 9, 7, 24, 1, 0)
    assert (p.dil_h, p.dil_w, p.groups, p.direction) == (1, 2, 2, 1)


def test_every_flag_has_a_long_form():
    shorts = [s for s, *_ in MIOPEN_FLAGS]
    longs = [long for _, long, *_ in MIOPEN_FLAGS]
    assert len(set(shorts)) == len(shorts) and len(set(longs)) == len(longs)
    assert all(s.startswith("-") and not s.startswith("--") for s in shorts)
    assert all(long.startswith("--") for long in longs)


def test_ignored_flags_change_nothing():
    plain = Problem.from_miopen("conv -n 4 -c 8 -H 10 -W 10 -k 8 -p 1 -q 1")
    noisy = Problem.from_miopen(
        "conv -n 4 -c 8 -t 1 -H 10 -V 0 -W 10 -i 5 -k 8 -p 1 -q 1 -s 0 -w 1 -b 0 -m conv"
    )
    assert noisy == plain
    assert Problem.from_miopen("conv -F 1 -n 4").direction == 1


def test_comments_are_dropped():
    assert Problem.from_miopen("conv -n 3 -c 4  # trailing comment -k 999") == Problem.from_miopen(
        "conv -n 3 -c 4"
    )


def test_unknown_flag_error_names_the_flag():
    with pytest.raises(ValueError, match=r"unknown flag -Z\b"):
        Problem.from_miopen("conv -n 2 -Z 3")
    with pytest.raises(ValueError, match="unknown flag --frobnicate"):
        Problem.from_miopen("conv --frobnicate 1")


@pytest.mark.parametrize(
    "line, match",
    [
        ("conv -n", "flag -n has no value"),
        ("conv -n two", "flag -n expects an integer, got 'two'"),
        ("deconv -n 2", "expected it to start with one of"),
        ("", "expected it to start with one of"),
        ("conv -n 0", r"Problem\.N: must be >= 1"),
        ("conv -p -1", r"Problem\.pad_h: must be >= 0"),
        ("conv -H 2 -W 8", "output extent 0x6 is empty"),
    ],
)
def test_bad_lines_say_what_is_wrong(line, match):
    with pytest.raises(ValueError, match=match):
        Problem.from_miopen(line)


@pytest.mark.parametrize(
    "h, pad, dil, ho",
    [
        (32, 0, 1, 30),
        (32, 1, 1, 32),
        (32, 2, 1, 34),
        (32, 0, 2, 28),
        (32, 1, 2, 30),
        (7, 2, 3, 5),
        (5, 0, 2, 1),
        (1, 1, 1, 1),
    ],
)
def test_output_extent_with_pad_and_dilation(h, pad, dil, ho):
    """Ho = H + 2*pad - 2*dil for a 3x3 stride-1 filter (and likewise Wo)."""
    p = Problem(H=h, W=h + 3, pad_h=pad, pad_w=pad, dil_h=dil, dil_w=dil)
    assert ho == h + 2 * pad - 2 * dil
    assert (p.Ho, p.Wo) == (ho, ho + 3)


def test_output_extent_general_formula():
    p = Problem(H=56, W=56, R=1, S=1, stride_h=2, stride_w=2)
    assert (p.Ho, p.Wo) == (28, 28)


@pytest.mark.parametrize(
    "field, value, match",
    [
        ("N", 2.0, r"Problem\.N: expected an integer"),
        ("C", True, r"Problem\.C: expected an integer"),
        ("groups", 0, r"Problem\.groups: must be >= 1"),
        ("dil_w", 0, r"Problem\.dil_w: must be >= 1"),
        ("dtype", "int8", "int8"),
        ("layout", "NCHW", "only NHWC input"),
    ],
)
def test_constructor_validates_fields(field, value, match):
    with pytest.raises(ValueError, match=match):
        Problem(**{field: value})


def test_dtype_strings_are_coerced():
    assert Problem(H=3, W=3, dtype="half").dtype is DType.FP16
    assert Problem(H=3, W=3, dtype="bf16").dtype is DType.BF16


def test_derived_sizes_and_labels():
    p = Problem(N=2, C=8, H=6, W=6, K=12, pad_h=1, pad_w=1, groups=4, dtype=DType.FP16)
    assert (p.Cg, p.Kg) == (2, 3)
    assert p.flops == 2 * 2 * 12 * 6 * 6 * 2 * 9
    assert p.with_batch(5).N == 5 and p.with_batch(5).C == 8
    assert p.label() == "fp16 N2 C8 6x6 K12 3x3 p1x1 s1x1 g4"


def test_to_miopen_round_trips():
    p = Problem(N=3, C=6, H=9, W=11, K=4, pad_h=2, pad_w=1, dil_h=2, groups=2, dtype="bf16")
    line = p.to_miopen()
    assert line.startswith("convbfp16 ") and "-F" not in line
    assert Problem.from_miopen(line) == p
    for direction in (1, 2, 4):  # -F is kept when it is not MIOpenDriver's default
        q = replace(p, direction=direction)
        assert Problem.from_miopen(q.to_miopen()) == q


def test_every_public_line_parses(public_lines, public_problems):
    assert len(public_problems) == len(public_lines) >= 10
    for line, p in zip(public_lines, public_problems, strict=True):
        assert p.to_miopen().split()[0] == line.split()[0]
        assert Problem.from_miopen(p.to_miopen()) == p
        assert p.Ho >= 1 and p.Wo >= 1


def test_read_miopen_file(tmp_path):
    path = tmp_path / "cases.txt"
    path.write_text("# a comment\n\nconv -n 2 -c 4\n  convfp16 -n 1 # trailing\n", "utf-8")
    assert [p.N for p in read_miopen_file(str(path))] == [2, 1]


def test_read_miopen_cases_keeps_going_past_bad_lines(tmp_path):
    path = tmp_path / "cases.txt"
    path.write_text("conv -n 2 -c 8\n# note\nconvfp8 -n 1\nconv -n 1 -c 4 -k\n")
    problems, bad = read_miopen_cases(str(path))
    assert [p.N for p in problems] == [2]
    assert [(b.line, str(b)) for b in bad] == [
        (
            3,
            f"{path}:3: MIOpenDriver line 'convfp8 -n 1': expected it to start with one of "
            "['conv', 'convbfp16', 'convfp16']",
        ),
        (4, f"{path}:4: MIOpenDriver line 'conv -n 1 -c 4 -k': flag -k has no value"),
    ]
    with pytest.raises(ValueError, match=f"^{path}:3: "):
        read_miopen_file(str(path))


def test_canonical_line_spells_each_flag_once():
    line = "conv -n 2 -c 8 -H 9 -W 9 -k 8 -l 2 -j 1"
    canonical = canonical_line(line + " -l 2 -j 1")  # the old, doubled spelling
    assert canonical == Problem.from_miopen(line).to_miopen() == canonical_line(canonical)
    assert canonical.count(" -l ") == 1 and canonical.count(" -j ") == 1
    assert canonical_line("not a line") == "not a line"


def test_direction_forward_only():
    problems = [Problem.from_miopen("conv -n 1 -c 8 -F 0")]
    assert forward_only(problems, None) == problems
    assert forward_only(problems, Direction.parse("FWD"))[0].direction == 1
    with pytest.raises(ValueError, match="--direction bwd: wino implements the forward"):
        forward_only(problems, Direction.BWD)
    with pytest.raises(ValueError, match="expected one of fwd, bwd, wrw"):
        Direction.parse("up")


def test_vars_hold_the_fields_only():
    """Callers rebuild a problem from ``vars(p)`` (``Problem(**{**vars(p), "dtype": ...})``): the
    derived extents (Ho, Wo) must not land in its __dict__ once read."""
    p = Problem(N=1, C=8, H=9, W=7, K=4, pad_h=1, pad_w=1)
    assert (p.Ho, p.Wo) == (9, 7)
    assert Problem(**vars(p)) == p
