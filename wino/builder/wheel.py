"""A wheel that carries the built caches, so that a machine without a compiler runs wino.

``build_wheel`` stages a copy of the project in a temporary folder (pyproject.toml, README.md,
the ``wino`` package) with the package data under ``wino/packaged/`` (config.PACKAGED):
grids/, schema/ and templates/, and for each target the published manifest of the build
folder plus exactly the files it names (each binary with its IR and report beside it; stale
binaries stay behind). It then runs ``python -m build --wheel`` there and tags the wheel for
this platform (it holds host shared objects): ``py3-none-linux_x86_64`` on this machine.
An installed wheel finds its cache last on the runtime's search path (wino.cache.search_path).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from .. import cache, config
from ..launch import FORMAT
from ..vocab import Target

#: The targets a wheel can carry: binaries that run somewhere (HIP is compile-only).
WHEEL_TARGETS = (Target.C, Target.CUDA)
#: What the runtime and the build read besides the code.
DECLARED = ("grids", "schema", "templates")
#: Project files the wheel's metadata needs.
PROJECT_FILES = ("pyproject.toml", "README.md")


def platform_tag() -> str:
    """This machine's wheel platform tag, e.g. ``linux_x86_64``."""
    return sysconfig.get_platform().replace("-", "_").replace(".", "_")


def available_manifests(root: Path | str | None = None) -> list[cache.Manifest]:
    """The manifests of WHEEL_TARGETS published in the build folder (missing targets skipped)."""
    folder = cache.build_folder(root)
    found = []
    for target in WHEEL_TARGETS:
        try:
            found.append(cache.find_manifest(target, folder))
        except FileNotFoundError:
            continue
    return found


def copy_cache(manifest: cache.Manifest, into: Path) -> int:
    """Copy one published manifest (with the files beside it: the C header) and every file
    beside its binaries into the build folder ``into``; returns the bytes copied. Contents
    only: the copies get this process's default mode, so a cache written 0600 is still
    readable by everyone once installed."""
    dest = into / "cache" / f"v{FORMAT}" / manifest.target.value / manifest.flavor
    (dest / "bin").mkdir(parents=True, exist_ok=True)
    beside = [p for p in manifest.directory.iterdir() if p.is_file() and p.name[0] != "."]
    copied = [shutil.copyfile(path, dest / path.name) for path in sorted(beside)]  # + header
    for kernel in manifest.kernels.values():
        for path in sorted(kernel.path.parent.glob(f"{kernel.path.stem}.*")):
            copied.append(shutil.copyfile(path, dest / "bin" / path.name))
    return sum(Path(p).stat().st_size for p in copied)


def stage_project(into: Path, manifests: list[cache.Manifest]) -> Path:
    """A minimal project at ``into`` whose package carries ``manifests``; returns its data dir."""
    for name in PROJECT_FILES:
        shutil.copyfile(config.ROOT / name, into / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", config.PACKAGED.name)
    copy = shutil.copyfile  # contents, not modes
    shutil.copytree(config.PACKAGE, into / "wino", ignore=ignore, copy_function=copy)
    data = into / "wino" / config.PACKAGED.name
    for name in DECLARED:
        shutil.copytree(config.ROOT / name, data / name, copy_function=copy)
    for manifest in manifests:
        copy_cache(manifest, data / "build")
    return data


def build_wheel(
    outdir: Path | str, root: Path | str | None = None, *, isolation: bool = True
) -> Path:
    """Build the wheel into ``outdir`` from the caches in the build folder ``root`` (default:
    wino.cache.build_folder()); returns its path. Needs the ``build`` and ``wheel`` packages
    (the ``dist`` extra). ``isolation=False`` uses this environment's setuptools."""
    if not config.IS_CHECKOUT:
        raise RuntimeError("wino: build the wheel from a source checkout (grids/ and dodo.py)")
    manifests = available_manifests(root)
    if not manifests:
        raise FileNotFoundError(
            f"no c or cuda cache in {cache.build_folder(root)}: run `doit compile:c` "
            "(and `doit compile:cuda` where nvcc is) first"
        )
    outdir = Path(outdir).resolve()
    with tempfile.TemporaryDirectory(prefix="wino-wheel-") as tmp:
        stage_project(Path(tmp), manifests)
        command = [sys.executable, "-m", "build", "--wheel", "--outdir", str(tmp), tmp]
        _run(command + ([] if isolation else ["--no-isolation"]))
        (built,) = Path(tmp).glob("*.whl")
        _run(
            [sys.executable, "-m", "wheel", "tags", "--remove"]
            + ["--platform-tag", platform_tag(), str(built)]
        )
        (tagged,) = Path(tmp).glob("*.whl")
        outdir.mkdir(parents=True, exist_ok=True)
        return Path(shutil.copy2(tagged, outdir / tagged.name))


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(
            f"wino wheel: `{' '.join(command)}` failed ({done.returncode}):\n"
            + (done.stdout + done.stderr)[-4000:]
        )


def describe(wheel: Path, manifests: list[cache.Manifest]) -> str:
    """One line per carried cache and the wheel's size."""
    lines = [f"{wheel} ({wheel.stat().st_size / 2**20:.1f} MiB)"]
    for manifest in manifests:
        lines.append(
            f"  {manifest.target.value} {manifest.flavor}: {len(manifest.kernels)} kernels"
        )
    return "\n".join(lines)


# The doit task (dodo.py's task_wheel) ---------------------------------------------------------
def wheel_task(target_plans) -> dict:
    """wheel: dist/wino-*.whl with the c and cuda caches, after compiling those of them whose
    compiler is present (a target skipped here is carried if its cache was built elsewhere)."""
    built = [p.target.value for p in target_plans if p.target in WHEEL_TARGETS and p.toolchains]
    return {
        "actions": [(wheel_action, (str(config.ROOT / "dist"),))],
        "task_dep": [f"compile:{target}" for target in built],
        "uptodate": [False],
        "verbosity": 2,
    }


def wheel_action(outdir: str) -> None:
    path = build_wheel(outdir)
    print(describe(path, available_manifests()))
