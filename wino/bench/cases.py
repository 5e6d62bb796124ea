"""Case inputs of ``wino bench`` / ``wino tune``: MIOpenDriver files and command lines, or one
case from MIOpenDriver-style shape flags; a dtype sweep, ``--limit`` and ``--shard i/n``.

Order: the lines in the order given (files first, then ``--miopen-cmd``, then the shape flags),
and per line the dtypes in the order given (line-major); then the first N (``--limit``); then
shard i of n takes every n-th case from the i-th (1-based), so shards partition the cases.
"""

from __future__ import annotations

from dataclasses import replace

from ..problem import MIOPEN_FLAGS, BadLine, Problem, read_miopen_cases
from ..vocab import DType

#: MIOpenDriver shape flags a case can be built from (short flag -> Problem field).
SHAPE_FLAGS: dict[str, str] = {
    short: field for short, _, field, _ in MIOPEN_FLAGS if field != "direction"
}


def problems_from(
    files=(), commands=(), shape: dict[str, int] | None = None
) -> tuple[list[Problem], list[BadLine]]:
    """The problems of the inputs, in order: each file's lines, each command, the shape case;
    and the files' lines that do not parse (skipped, each with its file:line). A bad command
    or shape flag raises ValueError."""
    problems: list[Problem] = []
    bad: list[BadLine] = []
    for path in files:
        read, wrong = read_miopen_cases(str(path))
        problems += read
        bad += wrong
    problems += [Problem.from_miopen(line) for line in commands]
    if shape:
        problems.append(shape_problem(shape))
    return problems, bad


def shape_problem(shape: dict[str, int]) -> Problem:
    """One case from shape flags (``{"-n": 64, "-c": 64, ...}``), MIOpenDriver's defaults for
    the rest, fp32 unless a dtype is given with ``--dtype``."""
    unknown = set(shape) - set(SHAPE_FLAGS)
    if unknown:
        raise ValueError(
            f"shape flags {sorted(unknown)} are not MIOpenDriver conv flags; "
            f"known: {' '.join(SHAPE_FLAGS)}"
        )
    words = ["conv"] + [f"{flag} {value}" for flag, value in shape.items()]
    return Problem.from_miopen(" ".join(words))


def parse_dtypes(values) -> list[DType]:
    """``--dtype`` values (repeatable, each a comma list) -> dtypes, first occurrence first."""
    out: list[DType] = []
    for value in values or ():
        for text in value.split(","):
            if text.strip():
                dtype = DType.parse(text.strip())
                if dtype not in out:
                    out.append(dtype)
    return out


def with_dtypes(problems: list[Problem], dtypes: list[DType]) -> list[Problem]:
    """Each problem in each dtype (line-major); the line's own dtype when none is given.
    Duplicates are dropped (first kept)."""
    out: list[Problem] = []
    for problem in problems:
        for dtype in dtypes or [problem.dtype]:
            case = replace(problem, dtype=dtype)
            if case not in out:
                out.append(case)
    return out


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """``"i/n"`` (1 <= i <= n) -> (i, n); None stays None."""
    if text is None:
        return None
    try:
        i, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard {text!r}: expected i/n, like 1/4") from None
    if not 1 <= i <= n:
        raise ValueError(f"--shard {text!r}: expected 1 <= i <= n")
    return i, n


def select_cases(
    cases: list[Problem], limit: int | None = None, shard: tuple[int, int] | None = None
) -> list[Problem]:
    """The first ``limit`` cases, then shard i of n (every n-th, from the i-th)."""
    if limit is not None:
        if limit < 0:
            raise ValueError(f"--limit {limit}: expected a count >= 0")
        cases = cases[:limit]
    if shard is not None:
        i, n = shard
        cases = cases[i - 1 :: n]
    return cases


def case_key(problem: Problem) -> str:
    """The case's key in the results CSV and the tuning DB: the canonical MIOpenDriver line
    (dtype, batch and dilation included, each flag once)."""
    from ..runtime.tuning import problem_key

    return problem_key(problem)
