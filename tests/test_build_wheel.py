"""The wheel carries its cache: a small c cache is packed into a wheel (wino.builder.wheel), the
wheel is installed into a fresh folder with ``pip install --no-deps --target``, and a fresh
interpreter whose import path starts there, in a folder with no build/ and without
$WINO_BUILD, runs ``wino.conv2d`` from the packaged cache within the float64 bound."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests import host_cache
from wino.builder import wheel
from wino.launch import FORMAT
from wino.pick import default_stage_specs
from wino.problem import Problem
from wino.runtime.plan import default_tile
from wino.vocab import DType

pytest.importorskip("build", reason="the wheel needs the `dist` extra: pip install -e '.[dist]'")

PROBLEM = Problem(N=2, C=8, H=9, W=11, K=12, pad_h=1, pad_w=1, dtype=DType.FP32)

#: Run in the fresh interpreter: prints one JSON line with what it saw.
SCRIPT = """
import json, sys
import numpy as np
import wino
from wino.runtime import conv2d_reference, relative_error
from wino.runtime.verify import bound_for
rng = np.random.default_rng(7)
x = rng.standard_normal((2, 9, 11, 8)).astype(np.float32)
w = rng.standard_normal((12, 3, 3, 8)).astype(np.float32)
y = wino.conv2d(x, w, padding=1)
plan = wino.dispatch(wino.Problem.from_miopen(sys.argv[1]), target="c")
error = relative_error(y, conv2d_reference(x, w, (1, 1)))
print(json.dumps({"file": wino.__file__, "explain": plan.explain(), "error": error,
                  "bound": bound_for(plan.tile, "fp32")}))
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(the wheel, the manifest it carries)."""
    tmp = tmp_path_factory.mktemp("wheel")
    specs = default_stage_specs(PROBLEM, default_tile(PROBLEM)).values()
    manifest = host_cache.build(specs, tmp / "build")
    (manifest.directory / "manifest.json").chmod(0o600)  # as older wino versions wrote it
    return wheel.build_wheel(tmp / "dist", tmp / "build"), manifest


def test_wheel_carries_the_manifest_its_binaries_and_the_declared_files(built):
    path, manifest = built
    assert path.name.endswith(f"-py3-none-{wheel.platform_tag()}.whl")
    names = set(zipfile.ZipFile(path).namelist())
    data = f"wino/packaged/build/cache/v{FORMAT}/c/{manifest.flavor}"
    carried = json.loads(zipfile.ZipFile(path).read(f"{data}/manifest.json"))
    assert set(carried["kernels"]) == set(manifest.kernels)
    for kernel in manifest.kernels.values():
        assert f"{data}/bin/{kernel.path.name}" in names
    assert f"{data}/wino_kernels.h" in names  # the cache's C header travels with it
    for declared in ("grids/stages.yaml", "grids/refusals.yaml", "schema/manifest.schema.json"):
        assert f"wino/packaged/{declared}" in names
    assert not any("__pycache__" in name for name in names)
    for info in zipfile.ZipFile(path).infolist():  # readable by all once installed
        assert (info.external_attr >> 16) & 0o444 == 0o444, info.filename


def test_installed_wheel_runs_conv2d_from_its_packaged_cache(built, tmp_path):
    path, _ = built
    site, elsewhere = tmp_path / "site", tmp_path / "elsewhere"
    elsewhere.mkdir()
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site)]
    subprocess.run([*pip, str(path)], check=True, capture_output=True)
    env = {k: v for k, v in os.environ.items() if k not in ("WINO_BUILD", "WINO_ROOT")}
    env["PYTHONPATH"] = str(site)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, PROBLEM.to_miopen()],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert Path(seen["file"]).is_relative_to(site)
    cache_line = seen["explain"].splitlines()[1]
    assert str(site / "wino" / "packaged" / "build") in cache_line
    assert cache_line.endswith("(the installed package)")
    assert seen["error"] <= seen["bound"]
    assert not (elsewhere / "build").exists()
