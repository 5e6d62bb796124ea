"""The baked-extent engine (wino.builder.baked, wino.bench.baked) on the host: the same specs
rendered with one launch's kernargs as constants, compiled into their own cache, run by the same
plan. Its output is bit-identical to the AOT plan's (odd extents, dilation, groups, the split
prescale, the LDS K2 path, the fused kernel); the baked source reads no kernarg (text), and the
baked binaries give the same bits when the plan passes them all-zero kernargs (behaviour)."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from tests import host_cache
from wino import grid
from wino.bench.baked import BakeUnsupported, baked_kernels, baked_plan
from wino.builder.baked import BakedKernel, bake, bake_key, toolchain
from wino.codegen.render import render
from wino.launch import stage_launch
from wino.magic import magic_div
from wino.pick import default_fused_specs, default_stage_specs
from wino.problem import Problem
from wino.refusals import Refused
from wino.runtime import dispatch
from wino.runtime.arrays import numpy_dtype
from wino.runtime.plan import KernelStep
from wino.vocab import DType, K2Path, Prescale, Stage, Target, Tile


def _fits(spec, problem: Problem) -> bool:
    try:
        stage_launch(spec, problem)
    except Refused:
        return False
    return True


def _k2_with(problem: Problem, tile: Tile, **fields):
    """The first grid K2 of the tile and io with these field values that fits the problem."""
    for spec in grid.aot_stage_specs(Stage.INPUT):
        if spec.tile == tile and spec.io is problem.dtype and _fits(spec, problem):
            if all(getattr(spec, f) == v for f, v in fields.items()):
                return spec
    raise LookupError(f"no grid K2 {fields} for {problem.label()} {tile.name}")


def _unfused(problem: Problem, tile: Tile, **k2_fields) -> dict:
    specs = default_stage_specs(problem, tile)
    if k2_fields:
        k2 = _k2_with(problem, tile, **k2_fields)
        specs = default_stage_specs(problem, tile, xdtype=k2.xdtype)
        specs[Stage.INPUT] = k2
        specs.pop(Stage.PRESCALE, None)
        if k2.prescale is Prescale.SPLIT:
            picks = [s for s in grid.aot_stage_specs(Stage.PRESCALE) if s.tile == tile]
            specs[Stage.PRESCALE] = next(
                s for s in picks if s.io is problem.dtype and _fits(s, problem)
            )
    return specs


def _p(dtype: DType, **fields) -> Problem:
    base = dict(N=2, C=37, H=13, W=11, K=21, pad_h=1, pad_w=1)
    return Problem(**{**base, **fields}, dtype=dtype)


#: (id, problem, specs): odd extents, dilation, groups, split prescale, the LDS path, fused.
CASES = [
    ("fp32_odd_f4x4", _p(DType.FP32), lambda p: _unfused(p, Tile(4, 4))),
    (
        "fp16_dil2x3_f2x2",
        _p(DType.FP16, C=19, K=11, H=17, W=19, dil_h=2, dil_w=3, pad_h=2),
        lambda p: _unfused(p, Tile(2, 2)),
    ),
    (
        "bf16_groups3_f6x4",
        _p(DType.BF16, N=3, C=27, K=15, H=10, W=9, groups=3),
        lambda p: _unfused(p, Tile(6, 4)),
    ),
    (
        "fp16_split_f4x4",
        _p(DType.FP16, N=1, C=72, K=8, H=6, W=7),
        lambda p: _unfused(p, Tile(4, 4), prescale=Prescale.SPLIT),
    ),
    (
        "fp32_lds_f2x2",
        _p(DType.FP32, C=32, K=9, H=12, W=15),
        lambda p: _unfused(p, Tile(2, 2), path=K2Path.LDS),
    ),
    ("fp16_fused_f4x4", _p(DType.FP16), lambda p: default_fused_specs(p, Tile(4, 4))),
]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """The AOT host cache of every case's specs."""
    folder = tmp_path_factory.mktemp("baked-aot")
    specs = {s for _, p, make in CASES for s in make(p).values()}
    host_cache.build(specs, folder)
    return folder


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return tmp_path_factory.mktemp("baked")


def _inputs(p: Problem, seed: int):
    rng = np.random.default_rng(seed)
    dt = numpy_dtype(p.dtype)
    x = rng.standard_normal((p.N, p.H, p.W, p.C)).astype(dt)
    w = rng.standard_normal((p.K, 3, 3, p.Cg)).astype(dt)
    return x, w


def _zeroed(plan):
    """The plan with every kernel step's kernargs set to 0 (a baked kernel must not care)."""

    def zero(step):
        if not isinstance(step, KernelStep):
            return step
        launch = dataclasses.replace(step.launch, kernargs=dict.fromkeys(step.launch.kernargs, 0))
        return dataclasses.replace(step, launch=launch)

    steps = {n: [zero(s) for s in steps] for n, steps in plan.chunk_steps.items()}
    return dataclasses.replace(plan, chunk_steps=steps, _program=None, _backend=None)


@pytest.mark.parametrize(("case", "problem", "make"), CASES, ids=[c[0] for c in CASES])
def test_baked_plan_is_bit_identical(case, problem, make, root, base):
    aot = dispatch(problem, target=Target.C, specs=make(problem), cache_root=root)
    baked = baked_plan(aot, base)
    assert baked.manifest.directory != aot.manifest.directory
    assert [s.name for s in baked.steps] == [s.name for s in aot.steps]
    assert baked.workspace_bytes == aot.workspace_bytes
    x, w = _inputs(problem, 7)
    want = aot.run(x, w)
    assert np.isfinite(want.astype(np.float32)).all()
    y = np.full_like(want, np.nan)
    baked.run(x, w, y=y)
    np.testing.assert_array_equal(y.view(np.uint8), want.view(np.uint8))
    y.fill(np.nan)
    _zeroed(baked).run(x, w, y=y)  # the kernargs passed are not read
    np.testing.assert_array_equal(y.view(np.uint8), want.view(np.uint8))


@pytest.mark.filterwarnings("ignore:.*encountered in matmul:RuntimeWarning")  # garbage V, U
def test_zeroed_kernargs_break_the_aot_plan(root):
    """The control of the test above: the AOT binaries do read their kernargs."""
    problem = CASES[0][1]
    aot = dispatch(problem, target=Target.C, specs=CASES[0][2](problem), cache_root=root)
    x, w = _inputs(problem, 3)
    want = aot.run(x, w)
    y = np.full_like(want, np.nan)
    _zeroed(aot).run(x, w, y=y)
    assert not np.array_equal(y.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("target", [Target.C, Target.CUDA, Target.HIP])
@pytest.mark.parametrize(("case", "problem", "make"), CASES, ids=[c[0] for c in CASES])
def test_baked_source_reads_no_kernarg(case, problem, make, target):
    for spec in make(problem).values():
        kernargs = stage_launch(spec, problem, tile_scale=True).kernargs
        text = render(spec, target, constants=kernargs)
        aot = render(spec, target)
        assert "A_in;" in aot or "*A_in;" in aot  # the AOT kernel copies its struct
        # the local struct A is a literal; the passed struct A_in is never dereferenced
        init = re.search(r"const struct wino_args A = \{([0-9u, ]+)\}", text)
        assert init is not None, spec.name
        values = [int(v.rstrip("u")) for v in init.group(1).split(", ")]
        names = list(kernargs)
        assert len(values) == len(names)
        for name, value in zip(names, values, strict=True):
            if name.startswith("m_"):  # a magic pair holds (divisor, 0): n / divisor
                assert value == kernargs[name[2:]], name
            elif name.startswith("s_"):
                assert value == 0, name
            else:
                assert value == kernargs[name], name
        assert "A_in;" not in text and "*A_in" not in text
        assert re.search(r"\bA_in\b\s*[.\-[]", text) is None
        assert "umulhi" not in text.split("wino_udiv", 1)[1].split("}", 1)[0]
        assert f"void {spec.name}(" in text or f"{spec.name}(const struct" in text


def test_baked_values_check_the_magic_pairs():
    problem = CASES[0][1]
    spec = CASES[0][2](problem)[Stage.INPUT]
    kernargs = stage_launch(spec, problem).kernargs
    assert magic_div(kernargs["Cg"]) == (kernargs["m_Cg"], kernargs["s_Cg"])
    with pytest.raises(ValueError, match="not the magic pair of Cg = 37"):
        render(spec, Target.C, constants={**kernargs, "m_Cg": kernargs["m_Cg"] + 1})
    with pytest.raises(ValueError, match="not both"):
        render(spec, Target.C, problem, constants=kernargs)


def test_bake_is_keyed_by_extents_and_reuses_binaries(root, base):
    problem = CASES[0][1]
    aot = dispatch(problem, target=Target.C, specs=CASES[0][2](problem), cache_root=root)
    kernels = baked_kernels(aot)
    first = bake(kernels, Target.C, base)
    stamp = {p: p.stat().st_mtime_ns for p in first.rglob("bin/*.so")}
    assert bake(kernels, Target.C, base) == first  # nothing recompiled
    assert {p: p.stat().st_mtime_ns for p in first.rglob("bin/*.so")} == stamp
    other = dispatch(problem.with_batch(1), target=Target.C, specs=aot.specs, cache_root=root)
    assert bake_key(toolchain(Target.C), baked_kernels(other)) != first.name
    with pytest.raises(ValueError, match="given twice"):
        bake([*kernels, BakedKernel.of(kernels[0].spec, {})], Target.C, base)


def test_unequal_batch_chunks_are_refused(root):
    problem = CASES[0][1].with_batch(3)
    aot = dispatch(
        problem, target=Target.C, specs=CASES[0][2](problem), batch_split=2, cache_root=root
    )
    with pytest.raises(BakeUnsupported, match=r"batch chunks of \[1, 2\] images"):
        baked_kernels(aot)
