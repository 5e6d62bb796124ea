"""Shared fixtures: the repository root and the public MIOpenDriver cases."""

from __future__ import annotations

from pathlib import Path

import pytest

from wino.problem import Problem

ROOT = Path(__file__).resolve().parents[1]
#: The repository's public case list (MIOpenDriver command lines of real layers).
PUBLIC_CASES = ROOT / "cases" / "public.txt"


def case_lines(path: Path) -> list[str]:
    """The command lines of a cases file (blank lines and '#' comments dropped)."""
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.split("#", 1)[0].strip():
            lines.append(line.strip())
    return lines


@pytest.fixture(scope="session")
def public_lines() -> list[str]:
    lines = case_lines(PUBLIC_CASES)
    assert lines, f"{PUBLIC_CASES} holds no command lines"
    return lines


@pytest.fixture(scope="session")
def public_problems(public_lines) -> list[Problem]:
    return [Problem.from_miopen(line) for line in public_lines]
