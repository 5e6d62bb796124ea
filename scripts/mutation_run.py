"""A small mutation run: plant one bug at a time in a copy of the repository and run the tests
that should catch it (host only). Prints one line per mutant (CAUGHT / MISSED) and a summary;
docs/TESTING.md records a run. Usage, from the repo root in its venv:

    python scripts/mutation_run.py            # every mutant
    python scripts/mutation_run.py scale-one  # one, by name
    python scripts/mutation_run.py control    # the same tests on the unmutated copy: must pass
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 240

#: name -> (file, text, planted text, tests that should catch it)
MUTANTS = {
    "skip-checksum": (
        "wino/cache.py",
        "        if verify:",
        "        if False:",
        ["tests/test_cache.py"],
    ),
    "load-by-path": (
        "wino/runtime/host.py",
        "library = loader.load_shared_object(image, name)",
        "library = ctypes.CDLL(str(self.manifest.kernels[name].path))",
        ["tests/test_runtime_loader.py", "-k", "swapped"],
    ),
    "skip-symbol-check": (
        "wino/cache.py",
        'if fields["symbol"] != name:',
        "if False:",
        ["tests/test_cache.py"],
    ),
    "scale-one": (
        "templates/common.j2",
        "  if (bits == 0u || e == 0xffu) return 1.0f;",
        "  return 1.0f;",
        ["tests/test_extremes.py"],
    ),
    "bf16-truncate": (
        "templates/common.j2",
        "  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);",
        "  return (unsigned short)(u >> 16);",
        ["tests/test_bf16_rounding.py"],
    ),
    "reduce-skips-last-step": (
        "templates/common.j2",
        "{%- for step in range(1, block.bit_length()) %}",
        "{%- for step in range(1, block.bit_length() - 1) %}",
        ["tests/test_extremes.py"],
    ),
    "no-aliasing-check": (
        "wino/runtime/plan.py",
        "        aliasing.check_output(y, x=x, w=w, U=U, workspace=workspace)",
        "        pass",
        ["tests/test_aliasing.py"],
    ),
    "launch-skips-problem-rules": (
        "wino/launch.py",
        "    check_problem(problem, spec.tile)",
        "    pass",
        ["tests/test_launch.py", "-k", "problem_rules"],
    ),
    "unbounded-exponent": (
        "wino/refusals.py",
        "not 0 <= b <= EXPONENT_LIMIT",
        "b is None",
        ["tests/test_refusals.py", "-k", "attacks"],
    ),
    "build-trusts-doit-db": (
        "wino/builder/tasks.py",
        "    return all(kb.done() for kb in binaries)",
        "    return True",
        ["tests/test_build_dodo.py"],
    ),
}


def copy_repo(into: Path) -> Path:
    """The repository's files (no venv, no build folder, no caches) in a temporary folder."""
    skip = shutil.ignore_patterns(
        ".venv*", ".git", "*.egg-info", "__pycache__", ".pytest_cache", ".ruff_cache", ".hypothesis"
    )

    def ignore(folder: str, names: list[str]) -> set[str]:
        top = {"build"} if Path(folder) == ROOT else set()  # only the top build/
        return set(skip(folder, names)) | (top & set(names))

    shutil.copytree(ROOT, into, ignore=ignore)
    return into


def run(name: str) -> bool:
    """True when the mutant is caught (its tests fail); for "control", when the tests fail on
    the unmutated copy (which must not happen)."""
    if name == "control":
        files = sorted({m[3][0] for m in MUTANTS.values()})
        path, text, planted, tests = "wino/cache.py", "", "", files
    else:
        path, text, planted, tests = MUTANTS[name]
    with tempfile.TemporaryDirectory(prefix=f"wino-mutant-{name}-") as tmp:
        repo = copy_repo(Path(tmp) / "repo")
        target = repo / path
        source = target.read_text()
        if name != "control" and source.count(text) != 1:
            raise SystemExit(f"{name}: {path} holds {source.count(text)} copies of the text")
        if name != "control":
            target.write_text(source.replace(text, planted))
        env = {**os.environ, "PYTHONPATH": str(repo), "WINO_BUILD": str(Path(tmp) / "build")}
        env.pop("WINO_ROOT", None)
        try:
            done = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests],
                cwd=repo,
                env=env,
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:  # a hang (an unbounded evaluation) is caught too
            print(f"CAUGHT {name}: {' '.join(tests)} -> hung past {TIMEOUT_S} s", flush=True)
            return True
        tail = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-200:]
    caught = done.returncode != 0
    verdict = ("FAILED" if caught else "PASSED") if name == "control" else None
    verdict = verdict or ("CAUGHT" if caught else "MISSED")
    print(f"{verdict} {name}: {' '.join(tests)} -> {tail}", flush=True)
    return caught


def main(names: list[str]) -> int:
    if names == ["control"]:
        return 1 if run("control") else 0
    names = names or list(MUTANTS)
    caught = sum(run(name) for name in names)
    print(f"mutation run: {caught} of {len(names)} mutants caught")
    return 0 if caught == len(names) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
