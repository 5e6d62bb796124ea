"""Shared fixtures: the repository root and the public MIOpenDriver cases; strict mode.

WINO_STRICT_TOOLS=1 (set by .ci/run) turns every skip into a failure except the GPU ones
(``GPU_SKIPS``): in CI a missing clang-19, matplotlib, golden file or case list must fail,
not pass as a skip."""

from __future__ import annotations

import importlib.util
import os
import sys
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


@pytest.fixture(scope="session")
def load_script():
    """``load_script(name)``: scripts/<name>.py imported as a module (the scripts folder is no
    package), for tests of the scripts' pure parts."""

    def load(name: str):
        spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up while they are built
        spec.loader.exec_module(module)
        return module

    return load


#: Skip reasons that stay skips in strict mode: the GPU tests off the GPU machine.
GPU_SKIPS = ("needs CuPy and a CUDA device", "this machine has CuPy and a GPU")


def strict_tools() -> bool:
    return os.environ.get("WINO_STRICT_TOOLS", "") not in ("", "0")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not (report.skipped and strict_tools()) or hasattr(report, "wasxfail"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if not any(allowed in reason for allowed in GPU_SKIPS):
        report.outcome = "failed"
        report.longrepr = (
            f"WINO_STRICT_TOOLS=1: this test skipped ({reason}); in strict mode a missing "
            "tool, extra or file is a failure: install or add it (GPU skips excepted)"
        )
