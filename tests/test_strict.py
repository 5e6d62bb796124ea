"""WINO_STRICT_TOOLS=1 turns a skip into a failure, except the GPU skips."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import pytest

def test_tool_missing():
    pytest.skip("clang-19 not found")

@pytest.mark.skipif(True, reason="needs CuPy and a CUDA device")
def test_gpu():
    pass
"""


def _run(tmp_path: Path, strict: str) -> str:
    (tmp_path / "test_probe.py").write_text(PROBE)
    (tmp_path / "conftest.py").write_text((ROOT / "tests" / "conftest.py").read_text())
    env = {**os.environ, "WINO_STRICT_TOOLS": strict}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    return done.stdout.splitlines()[-1]


def test_strict_fails_tool_skips_but_not_gpu_skips(tmp_path):
    assert "1 failed, 1 skipped" in _run(tmp_path, "1")
    assert "2 skipped" in _run(tmp_path, "")
