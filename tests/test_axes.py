"""A new axis is YAML plus a template, no Python: a temporary project declares an axis for K4 in
grids/stages.yaml, lists a value in a sub-grid, and its copy of k4_output.j2 multiplies the
output by the constant; the kernel builds, is named with the axis's suffix and runs. Also: the
repo's grid declares no axis, so no kernel name or source changes (the golden shard says so)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from wino import axes
from wino.specs import RtFusedSpec, RtOutputSpec, spec_from_fields

REPO = Path(__file__).resolve().parents[1]
AXIS = {
    "name": "out_scale",
    "description": "multiply the output by this (a test axis)",
    "stages": ["k4"],
    "type": "int",
    "ctype": "int",
    "suffix": "os{}",
    "default": 1,
}
SUBGRID = {
    "name": "output_scaled",
    "tile": ["F2x2"],
    "io": ["fp32"],
    "accdtype": ["fp32"],
    "vec": [1],
    "block": [256],
    "axes": {"out_scale": [3]},
}
SCRIPT = """
from pathlib import Path

import numpy as np
from tests import host_cache
from wino import grid
from wino.pick import default_stage_specs
from wino.problem import Problem
from wino.runtime import dispatch
from wino.vocab import Stage, Tile

root = Path("build").resolve()
p = Problem(N=2, C=8, H=9, W=7, K=8, pad_h=1, pad_w=1, dtype="fp32")
specs = default_stage_specs(p, Tile(2, 2))
scaled = specs[Stage.OUTPUT].replace(vec=1, extra={"out_scale": 3})
assert scaled.out_scale == 3 and scaled.name.endswith("_os3"), scaled.name
assert scaled in grid.aot_stage_specs(Stage.OUTPUT), "the sub-grid's axis value is in the grid"
plain = specs[Stage.OUTPUT].replace(vec=1)
host_cache.build([*specs.values(), plain, scaled], root)
rng = np.random.default_rng(1)
x = rng.standard_normal((2, 9, 7, 8)).astype(np.float32)
w = rng.standard_normal((8, 3, 3, 8)).astype(np.float32)
y1 = dispatch(p, specs={**specs, Stage.OUTPUT: plain}, cache_root=root).run(x, w)
y3 = dispatch(p, specs={**specs, Stage.OUTPUT: scaled}, cache_root=root).run(x, w)
assert np.abs(y1).max() > 0
np.testing.assert_allclose(y3, 3 * y1, rtol=1e-6, atol=0)
print("axis ok", scaled.name)
"""


def _project(root: Path) -> None:
    for folder in ("grids", "schema", "templates"):
        shutil.copytree(REPO / folder, root / folder)
    stages = root / "grids" / "stages.yaml"
    data = yaml.safe_load(stages.read_text(encoding="utf-8"))
    data["axes"] = [*data.get("axes", []), AXIS]  # the repo's own (K2's stream) stay
    data["stages"]["k4"].append(SUBGRID)
    stages.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    k4 = root / "templates" / "k4_output.j2"
    text = k4.read_text(encoding="utf-8")
    store = '* f1[v]", "v")'  # the value K4's epilogue macro wraps at the y store
    assert text.count(store) == 1
    scaled = store.replace("f1[v]", "f1[v] * (float)wino_out_scale")
    k4.write_text(text.replace(store, scaled), "utf-8")


def test_a_yaml_axis_builds_and_runs(tmp_path):
    _project(tmp_path)
    env = {
        **os.environ,
        "WINO_ROOT": str(tmp_path),
        "WINO_BUILD": str(tmp_path / "build"),
        "PYTHONPATH": str(REPO),
    }
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "axis ok k4_f2x2_ifp32_afp32_v1_b256_os3" in done.stdout


def test_the_repo_declares_its_axes_and_rejects_unknown():
    assert [(a.name, a.stages, a.default) for a in axes.declared()] == [
        ("stream", ("k2",), 0),
        ("hold", ("kf",), 0),
        ("kpass", ("kf",), 0),
        ("qsplit", ("kf",), 0),
        ("xstage", ("kf",), 0),
        ("tcx", ("kf",), 0),
        ("xbits", ("kf", "k2"), 32),
        ("obits", ("kf",), 32),
        ("chain", ("kf",), 0),
        ("wgmma", ("kf",), 0),
        ("tsfix", ("kf",), 0),
        ("min_blocks", ("kf",), 0),
    ]
    with pytest.raises(ValueError, match=r"unknown axis\(es\) \['out_scale'\]"):
        RtOutputSpec(extra={"out_scale": 3})
    with pytest.raises(ValueError, match="unknown field"):
        spec_from_fields("k4", {"out_scale": 3})


def test_replace_takes_declared_axes_by_name():
    """``replace(axis=value)`` merges into ``extra`` (defaults dropped, other axes kept), beside
    the fields; an axis another stage declares is no field of this one."""
    held = RtFusedSpec(extra={"hold": 64, "xbits": 16})
    spec = held.replace(obits=16, warps=18)
    assert spec.extra == (("hold", 64), ("xbits", 16), ("obits", 16)) and spec.warps == 18
    assert spec.replace(obits=32) == held.replace(warps=18)  # the default: not in extra
    assert held.replace(extra={"hold": 32}, obits=16).extra == (("hold", 32), ("obits", 16))
    with pytest.raises(TypeError, match="stream"):
        held.replace(stream=1)  # K2's axis
