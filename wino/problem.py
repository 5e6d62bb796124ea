"""A 2-D forward convolution problem (NHWC input, KRSC filter, NHWK output).

``Problem.from_miopen`` reads MIOpenDriver ``conv`` / ``convfp16`` / ``convbfp16`` command lines
with MIOpenDriver's own defaults for the flags a line leaves out.
"""

from __future__ import annotations

import numbers
import shlex
from dataclasses import dataclass, fields, replace
from enum import Enum

from .vocab import DType, coerce

#: MIOpenDriver's conv flags: short, long, Problem field, default (MIOpenDriver's own).
MIOPEN_FLAGS: tuple[tuple[str, str, str, int], ...] = (
    ("-n", "--batchsize", "N", 100),
    ("-c", "--in_channels", "C", 3),
    ("-H", "--in_h", "H", 32),
    ("-W", "--in_w", "W", 32),
    ("-k", "--out_channels", "K", 32),
    ("-y", "--fil_h", "R", 3),
    ("-x", "--fil_w", "S", 3),
    ("-p", "--pad_h", "pad_h", 0),
    ("-q", "--pad_w", "pad_w", 0),
    ("-u", "--conv_stride_h", "stride_h", 1),
    ("-v", "--conv_stride_w", "stride_w", 1),
    ("-l", "--dilation_h", "dil_h", 1),
    ("-j", "--dilation_w", "dil_w", 1),
    ("-g", "--group_count", "groups", 1),
    ("-F", "--forw", "direction", 0),
)
#: Flags MIOpenDriver takes that do not change the problem (timing, verification, layouts...).
MIOPEN_IGNORED = {
    "-t",
    "--time",
    "-V",
    "--verify",
    "-i",
    "--iter",
    "-s",
    "--search",
    "-w",
    "--wall",
    "-b",
    "--bias",
    "-m",
    "--mode",
    "-z",
    "--pad_mode",
    "-P",
    "--printconv",
    "-S",
    "--solution",
    "-I",
    "--in_layout",
    "-O",
    "--out_layout",
    "-f",
    "--fil_layout",
    "-_",
    "--spatial_dim",
    "-a",
    "--in_data",
    "-e",
    "--weights",
    "-o",
    "--dump_output",
    "-r",
    "--pad_val",
    "-A",
    "--in_d",
    "-B",
    "--fil_d",
}
MIOPEN_COMMANDS = {"conv": DType.FP32, "convfp16": DType.FP16, "convbfp16": DType.BF16}


class Direction(Enum):
    """One convolution direction and its MIOpenDriver -F value (a line's -F 0 means all)."""

    FWD = 1
    BWD = 2
    WRW = 4

    @classmethod
    def parse(cls, text: str) -> Direction:
        try:
            return cls[text.strip().upper()]
        except KeyError:
            raise ValueError(
                f"direction {text!r}: expected one of {', '.join(d.name.lower() for d in cls)}"
            ) from None


def forward_only(problems: list[Problem], direction: Direction | None) -> list[Problem]:
    """``--direction``: fwd sets every case's -F to forward (1); the backward directions are
    refused, since wino implements the forward convolution only; None keeps the lines' -F."""
    if direction is None:
        return problems
    if direction is not Direction.FWD:
        raise ValueError(
            f"--direction {direction.name.lower()}: wino implements the forward convolution only "
            "(MIOpenDriver -F 1); backward data (bwd) and weight gradients (wrw) are not served: "
            "pass --direction fwd, or leave it out to follow each line's -F"
        )
    return [replace(p, direction=Direction.FWD.value) for p in problems]


@dataclass(frozen=True)
class Problem:
    """Shape and dtype of one convolution. Extents are validated; Winograd fitness is not
    (that is the refusal rules' job, so an unfit problem can still be described and refused)."""

    N: int = 1
    C: int = 1
    H: int = 1
    W: int = 1
    K: int = 1
    R: int = 3
    S: int = 3
    pad_h: int = 0
    pad_w: int = 0
    stride_h: int = 1
    stride_w: int = 1
    dil_h: int = 1
    dil_w: int = 1
    groups: int = 1
    dtype: DType = DType.FP32
    direction: int = 0  # MIOpenDriver -F: 0 all directions, 1 forward, 2 backward data, 4 weights
    layout: str = "NHWC"
    filter_layout: str = "KRSC"

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", coerce(DType, self.dtype, "Problem.dtype"))
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type != "int":
                continue
            if not isinstance(value, numbers.Integral) or isinstance(value, bool):
                raise ValueError(f"Problem.{f.name}: expected an integer, got {value!r}")
            object.__setattr__(self, f.name, int(value))  # numpy integers become ints
        for name in (
            "N",
            "C",
            "H",
            "W",
            "K",
            "R",
            "S",
            "stride_h",
            "stride_w",
            "dil_h",
            "dil_w",
            "groups",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"Problem.{name}: must be >= 1, got {getattr(self, name)}")
        for name in ("pad_h", "pad_w"):
            if getattr(self, name) < 0:
                raise ValueError(f"Problem.{name}: must be >= 0, got {getattr(self, name)}")
        if self.layout != "NHWC" or self.filter_layout != "KRSC":
            raise ValueError(
                f"Problem layout {self.layout}/{self.filter_layout}: only NHWC input with KRSC "
                "filters is supported; transpose the arrays first"
            )
        if self.Ho < 1 or self.Wo < 1:
            raise ValueError(
                f"Problem: output extent {self.Ho}x{self.Wo} is empty; the padded input "
                f"{self.H}+2*{self.pad_h} x {self.W}+2*{self.pad_w} is smaller than the dilated "
                "filter"
            )

    # Derived extents -------------------------------------------------------------------------
    @property
    def Ho(self) -> int:
        return (self.H + 2 * self.pad_h - self.dil_h * (self.R - 1) - 1) // self.stride_h + 1

    @property
    def Wo(self) -> int:
        return (self.W + 2 * self.pad_w - self.dil_w * (self.S - 1) - 1) // self.stride_w + 1

    @property
    def Cg(self) -> int:
        """Input channels per group (C / groups; floor when groups does not divide C)."""
        return self.C // self.groups

    @property
    def Kg(self) -> int:
        return self.K // self.groups

    @property
    def flops(self) -> int:
        """Direct-convolution work: 2 * N * K * Ho * Wo * Cg * R * S."""
        return 2 * self.N * self.K * self.Ho * self.Wo * self.Cg * self.R * self.S

    def with_batch(self, n: int) -> Problem:
        return self if n == self.N else replace(self, N=n)

    def label(self) -> str:
        extra = ""
        if self.groups > 1:
            extra += f" g{self.groups}"
        if self.dil_h > 1 or self.dil_w > 1:
            extra += f" d{self.dil_h}x{self.dil_w}"
        return (
            f"{self.dtype.short} N{self.N} C{self.C} {self.H}x{self.W} K{self.K} "
            f"{self.R}x{self.S} p{self.pad_h}x{self.pad_w} s{self.stride_h}x{self.stride_w}"
            f"{extra}"
        )

    def to_miopen(self) -> str:
        command = {v: k for k, v in MIOPEN_COMMANDS.items()}[self.dtype]
        parts = [command]
        for short, _, field, default in MIOPEN_FLAGS:
            if field != "direction" or self.direction != default:  # -F only when it says more
                parts += [short, str(getattr(self, field))]
        return " ".join(parts)

    # MIOpenDriver ----------------------------------------------------------------------------
    @classmethod
    def from_miopen(cls, cmd: str) -> Problem:
        """Parse one MIOpenDriver command line (``[MIOpenDriver] conv[fp16|bfp16] -n ...``)."""
        words = shlex.split(cmd, comments=True)
        if words and words[0].endswith("MIOpenDriver"):
            words = words[1:]
        if not words or words[0] not in MIOPEN_COMMANDS:
            raise ValueError(
                f"MIOpenDriver line {cmd!r}: expected it to start with one of "
                f"{sorted(MIOPEN_COMMANDS)}"
            )
        values = {field: default for _, _, field, default in MIOPEN_FLAGS}
        by_flag = {}
        for short, long, field, _ in MIOPEN_FLAGS:
            by_flag[short] = by_flag[long] = field
        rest = words[1:]
        i = 0
        while i < len(rest):
            flag = rest[i]
            if i + 1 >= len(rest):
                raise ValueError(f"MIOpenDriver line {cmd!r}: flag {flag} has no value")
            value = rest[i + 1]
            if flag in by_flag:
                try:
                    values[by_flag[flag]] = int(value)
                except ValueError:
                    raise ValueError(
                        f"MIOpenDriver line {cmd!r}: flag {flag} expects an integer, got {value!r}"
                    ) from None
            elif flag not in MIOPEN_IGNORED:
                raise ValueError(
                    f"MIOpenDriver line {cmd!r}: unknown flag {flag}; known: "
                    + " ".join(s for s, *_ in MIOPEN_FLAGS)
                )
            i += 2
        return cls(dtype=MIOPEN_COMMANDS[words[0]], **values)


@dataclass(frozen=True)
class BadLine:
    """A line of a cases file that is not a MIOpenDriver conv line: where, and why."""

    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


def read_miopen_cases(path: str) -> tuple[list[Problem], list[BadLine]]:
    """Every command line of a file (blank lines and '#' comments skipped), and the lines that
    do not parse (each with its file:line and why); a bad line does not stop the reading."""
    problems, bad = [], []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.split("#", 1)[0].strip():
                continue
            try:
                problems.append(Problem.from_miopen(line.strip()))
            except ValueError as err:
                bad.append(BadLine(str(path), number, str(err)))
    return problems, bad


def read_miopen_file(path: str) -> list[Problem]:
    """Every command line of a file; raises ValueError at the first bad line (file:line)."""
    problems, bad = read_miopen_cases(path)
    if bad:
        raise ValueError(str(bad[0]))
    return problems


def canonical_line(line: str) -> str:
    """The one spelling of a case: ``Problem.from_miopen(line).to_miopen()`` (every flag once,
    in MIOPEN_FLAGS order); a line that does not parse is returned as given."""
    try:
        return Problem.from_miopen(line).to_miopen()
    except ValueError:
        return line
