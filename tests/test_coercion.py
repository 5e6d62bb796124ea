"""API coercion: enum members or their string values everywhere (else a TypeError), numpy
integers as extents, invalid names listed with the valid ones, empty environment variables
treated as unset."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from wino import cache
from wino.pick import default_stage_specs
from wino.problem import Problem
from wino.runtime import dispatch
from wino.runtime.api import problem_of
from wino.specs import RtInputSpec
from wino.vocab import DType, Prescale, Target, Tile, coerce

P = Problem(N=1, C=16, H=8, W=8, K=16, pad_h=1, pad_w=1)


@pytest.mark.parametrize(
    "cls, text, member",
    [
        (DType, "fp32", DType.FP32),
        (DType, "float16", DType.FP16),
        (Target, "cuda", Target.CUDA),
        (Prescale, "split", Prescale.SPLIT),
        (Tile, "F4x4", Tile(4, 4)),
        (Tile, "f6x2", Tile(6, 2)),
    ],
)
def test_members_and_their_strings_are_one(cls, text, member):
    assert coerce(cls, text, "arg") is member or coerce(cls, text, "arg") == member
    assert coerce(cls, member, "arg") is member


@pytest.mark.parametrize("cls", [DType, Target, Tile])
def test_other_types_are_a_type_error(cls):
    with pytest.raises(TypeError, match=f"arg: expected a {cls.__name__} or one of"):
        coerce(cls, 3, "arg")


def test_default_stage_specs_takes_strings_like_members():
    """A string dtype once picked an fp32-io / fp16-storage spec outside the grid."""
    fp16 = Problem(**{**P.__dict__, "dtype": DType.FP16})
    by_member = default_stage_specs(fp16, Tile(4, 4), DType.FP32)
    assert default_stage_specs(fp16, "F4x4", "fp32") == by_member
    assert all(s.io is DType.FP32 for s in by_member.values())
    assert by_member[next(iter(by_member))].xdtype is DType.FP32
    with pytest.raises(TypeError, match="dtype: expected a DType"):
        default_stage_specs(P, Tile(4, 4), 32)


def test_an_unknown_target_lists_the_valid_ones(tmp_path):
    with pytest.raises(ValueError, match=r"target: 'rocm' is not one of \['c', 'cuda', 'hip'\]"):
        dispatch(P, target="rocm", cache_root=tmp_path)
    with pytest.raises(ValueError, match=r"tile: 'F3x3' is not one of \['F2x2'"):
        dispatch(P, target="c", tile="F3x3", cache_root=tmp_path)


def test_numpy_integers_are_extents():
    p = Problem(N=np.int64(2), C=np.int32(16), H=np.uint16(8), W=8, K=16, groups=np.int8(2))
    assert p == Problem(N=2, C=16, H=8, W=8, K=16, groups=2)
    assert all(type(getattr(p, f)) is int for f in ("N", "C", "H", "groups"))
    assert RtInputSpec(vec=np.int64(4), block=np.int32(512)) == RtInputSpec(vec=4, block=512)
    x, w = np.zeros((1, 8, 8, 16), np.float32), np.zeros((16, 3, 3, 8), np.float32)
    assert problem_of(x, w, padding=np.int64(1), groups=np.int64(2)).groups == 2
    for bad in (True, np.bool_(True), 2.0):
        with pytest.raises(ValueError, match="Problem.N: expected an integer"):
            Problem(N=bad, C=16, H=8, W=8, K=16)


def test_empty_environment_variables_are_unset(monkeypatch, tmp_path):
    monkeypatch.setenv("WINO_BUILD", "")
    assert cache.build_folder() != Path("")
    assert cache.build_folder().is_absolute()
    env = {**os.environ, "WINO_ROOT": "", "WINO_BUILD": ""}
    code = "from wino import config, cache; print(config.ROOT); print(cache.build_folder())"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    root, build = out.stdout.split()
    assert Path(root) == Path(__file__).resolve().parents[1] and Path(build) == Path(root) / "build"
