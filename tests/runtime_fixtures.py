"""What the host runtime tests share: their cases, the specs those need, the one host cache
built per session from the union of them (tests/host_cache.py, into a temp folder), and the
run-and-check helper with poisoned buffers.

Every case is declared here, up front, so that one compile pass covers the whole suite.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from wino.grid import aot_stage_specs
from wino.pick import candidates, default_stage_specs
from wino.problem import Problem
from wino.runtime import verify
from wino.runtime.arrays import numpy_dtype
from wino.runtime.plan import default_tile
from wino.specs import RtInputSpec, RtPrescaleSpec, StageSpec
from wino.vocab import TILES, DType, K2Path, Prescale, Stage, Target, Tile

DTYPES = (DType.FP32, DType.FP16, DType.BF16)

#: max|out - ref| / max|ref| bounds the issue sets per tile family, io dtype and transformed
#: storage (N(0,1) data). bf16 with fp16 storage is the default pick for bf16; F6x6 bf16 is
#: ours (measured 1.6e-2 with fp16 storage, 0.11 with bf16 storage at C = 256).
FAMILY = verify.FAMILY  # tile -> family; the bounds below are the issue's own
ISSUE_BOUNDS = {
    Tile(2, 2): {"fp32": 2e-6, "fp16": 2e-3, "bf16/fp16": 1.5e-2, "bf16/bf16": 1.5e-2},
    Tile(4, 2): {"fp32": 1e-5, "fp16": 1e-2, "bf16/fp16": 6e-2, "bf16/bf16": 6e-2},
    Tile(4, 4): {"fp32": 4e-5, "fp16": 3e-2, "bf16/fp16": 2e-2, "bf16/bf16": 0.2},
    Tile(6, 6): {"fp32": 6e-5, "fp16": 4e-2, "bf16/fp16": 4e-2, "bf16/bf16": 0.25},
}


def claimed_bound(tile: Tile, dtype: DType, xdtype: DType) -> float:
    """The bound wino itself claims (wino.runtime.verify.BOUNDS, what `wino run` checks): the
    host suite is held to it, not to the issue's looser table."""
    return verify.bound_for(tile, dtype, xdtype)


def issue_bound(tile: Tile, dtype: DType, xdtype: DType) -> float:
    """The issue's bound; it set none for fp32 storage of 16-bit inputs (the c target's): its
    fp16-storage bound, the looser, holds them."""
    if dtype is not DType.FP32 and xdtype is DType.FP32:
        xdtype = DType.FP16
    key = f"bf16/{xdtype.short}" if dtype is DType.BF16 else dtype.short
    return ISSUE_BOUNDS[FAMILY[tile]][key]


def assert_split_matches(y_split, y_whole, tile: Tile, dtype: DType) -> None:
    """A batch split's output against the unsplit one. Bit-identical where numpy's BLAS rounds
    a GEMM row the same in a call of any row count (``blas_rows_invariant``); elsewhere K3's
    fp32 rounding alone may differ: by at most a quarter of the fp32 bound of the tile (of
    max|y|), plus one ulp of y's dtype per element for 16-bit y (one rounding flipped)."""
    from wino.runtime.host import blas_rows_invariant

    if blas_rows_invariant():
        assert np.array_equal(y_split.view(np.uint8), y_whole.view(np.uint8))
        return
    a, b = y_split.astype(np.float64), y_whole.astype(np.float64)
    assert np.isfinite(a).all() and np.isfinite(b).all()
    allowed = 0.25 * claimed_bound(tile, DType.FP32, DType.FP32) * np.abs(b).max()
    if dtype is not DType.FP32:
        allowed = allowed + np.abs(np.spacing(y_whole.astype(numpy_dtype(dtype)))).astype(
            np.float64
        )
    assert (np.abs(a - b) <= allowed).all(), f"split differs by {np.abs(a - b).max():.3g}"


def with_input(specs: dict, k2: RtInputSpec, problem: Problem) -> dict:
    """``specs`` with K2 swapped for ``k2`` and K2a as its prescale needs: for the split
    prescale the grid's first K2a of the tile and io whose vector divides C, else none; in
    pipeline order."""
    out = {stage: spec for stage, spec in specs.items() if stage is not Stage.PRESCALE}
    out[Stage.INPUT] = k2
    if k2.prescale is Prescale.SPLIT:
        k2a = candidates(Stage.PRESCALE, k2.tile, problem.dtype, k2.xdtype)
        out[Stage.PRESCALE] = next(s for s in k2a if problem.C % s.vec == 0)
    return dict(sorted(out.items(), key=lambda kv: list(Stage).index(kv[0])))


# Cases -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """A problem, its tile, and the stage specs forced through dispatch(specs=...) (empty: the
    default pick)."""

    problem: Problem
    tile: Tile
    forced: tuple[StageSpec, ...] = ()
    label: str = ""

    @property
    def specs(self) -> dict[Stage, StageSpec]:
        if self.forced:
            return {spec.stage: spec for spec in self.forced}
        return default_stage_specs(self.problem, self.tile)

    @property
    def id(self) -> str:
        p = self.problem
        text = (
            f"{self.tile.name}-{p.dtype.short}-n{p.N}c{p.C}k{p.K}-{p.H}x{p.W}"
            f"-p{p.pad_h}{p.pad_w}-d{p.dil_h}{p.dil_w}-g{p.groups}"
        )
        return f"{text}-{self.label}" if self.label else text

    def dispatch_specs(self) -> dict[Stage, StageSpec] | None:
        return self.specs if self.forced else None


def problem(dtype: DType | str = DType.FP32, **fields) -> Problem:
    base = dict(N=1, C=16, H=9, W=9, K=16, pad_h=1, pad_w=1)
    return Problem(
        **{**base, **fields, "dtype": DType.parse(dtype) if isinstance(dtype, str) else dtype}
    )


def pipeline(problem_: Problem, k2: RtInputSpec, vec: int | None = None) -> tuple[StageSpec, ...]:
    """A whole pipeline around a forced K2 spec: K1 storing in K2's dtype, K2a when K2 splits,
    K4; at ``vec`` (or the default pick's)."""
    picks = default_stage_specs(problem_, k2.tile, xdtype=k2.xdtype)
    k1, k4 = picks[Stage.FILTER], picks[Stage.OUTPUT]
    if vec is not None:
        k1, k4 = k1.replace(vec=vec), k4.replace(vec=vec)
    specs: list[StageSpec] = [k1]
    if k2.prescale is Prescale.SPLIT:
        k2a_vec = vec if vec is not None else (8 if problem_.C % 8 == 0 else 1)
        specs.append(RtPrescaleSpec(k2.tile, k2.io, k2a_vec, 256))
    return (*specs, k2, k4)


def gpu_pick(p: Problem, tile: Tile, label: str) -> Case:
    """The case with the GPUs' default pick forced (16-bit inputs: fp16 storage, prescaled),
    which the c target's own pick (fp32 storage) no longer runs."""
    return Case(p, tile, tuple(default_stage_specs(p, tile, target=Target.CUDA).values()), label)


#: Every tile x every dtype at C = 256 (representative errors), a partial last tile in both
#: dimensions, the c target's default picks (16-bit inputs: fp32 storage); plus, forced, the
#: GPUs' fp16 storage for fp16 and bf16 and bf16 storage for bf16, on every tile.
def numerics_cases() -> list[Case]:
    cases = []
    for tile in TILES:
        for dtype in DTYPES:
            p = problem(dtype, C=256, H=13, W=11, K=64)
            cases.append(Case(p, tile))
            if dtype is not DType.FP32:
                cases.append(gpu_pick(p, tile, "xfp16"))
        p = problem(DType.BF16, C=256, H=13, W=11, K=64)
        k2 = default_stage_specs(p, tile, xdtype=DType.BF16)[Stage.INPUT]
        cases.append(Case(p, tile, pipeline(p, k2), "xbf16"))
    return cases


def _cycle(items, index):
    return items[index % len(items)]


def coverage_cases() -> list[Case]:
    """Shapes: dilation, groups, odd extents, padding, odd C, wide C (default picks)."""
    specs: list[tuple[str, dict]] = [
        # dilation (2, 3, mixed)
        ("dil2", dict(N=2, C=16, H=17, W=15, K=24, pad_h=2, pad_w=2, dil_h=2, dil_w=2)),
        ("dil3", dict(C=24, H=20, W=20, K=16, pad_h=3, pad_w=3, dil_h=3, dil_w=3)),
        ("dil2x3", dict(C=16, H=21, W=19, K=8, pad_h=2, pad_w=3, dil_h=2, dil_w=3)),
        ("dil3x1", dict(C=8, H=23, W=11, K=16, pad_h=1, pad_w=0, dil_h=3, dil_w=1)),
        ("dil1x2", dict(C=32, H=9, W=22, K=8, pad_h=0, pad_w=2, dil_h=1, dil_w=2)),
        # groups
        ("g2", dict(C=32, H=10, W=10, K=48, groups=2)),
        ("g4", dict(C=64, H=11, W=9, K=32, groups=4)),
        ("g4dil", dict(N=2, C=48, H=12, W=13, K=24, groups=4, dil_h=2, dil_w=2, pad_h=2)),
        ("depthwise", dict(C=16, H=12, W=12, K=16, groups=16)),
        ("depthwise-x2", dict(C=8, H=14, W=9, K=16, groups=8)),
        # padding
        ("pad0", dict(C=16, H=9, W=10, K=16, pad_h=0, pad_w=0)),
        ("pad2", dict(C=16, H=8, W=7, K=16, pad_h=2, pad_w=2)),
        ("pad3", dict(C=16, H=6, W=9, K=8, pad_h=3, pad_w=3)),
        ("pad0x2", dict(C=8, H=11, W=5, K=8, pad_h=0, pad_w=2)),
        ("pad3x1", dict(C=8, H=4, W=13, K=8, pad_h=3, pad_w=1)),
        # C not a multiple of 8
        ("c3", dict(C=3, H=23, W=17, K=16)),
        ("c5", dict(C=5, H=13, W=13, K=8)),
        ("c6", dict(C=6, H=15, W=10, K=12)),
        ("c12", dict(N=2, C=12, H=9, W=14, K=20)),
    ]
    cases = []
    for i, (label, fields) in enumerate(specs):
        for j, tile in enumerate((None, _cycle(TILES, i + 3))):
            p = problem(_cycle(DTYPES, i + j), **fields)
            cases.append(Case(p, tile or default_tile(p), label=label))
    return cases


#: Odd extents: H, W across 1..23 (outputs not a multiple of the tile, images smaller than it).
EXTENTS = [
    (1, 1, 1, 1),
    (2, 3, 1, 1),
    (3, 3, 0, 1),
    (4, 1, 1, 1),
    (5, 23, 1, 0),
    (7, 2, 1, 1),
    (8, 8, 1, 1),
    (11, 6, 0, 1),
    (13, 17, 1, 1),
    (16, 3, 1, 2),
    (19, 21, 0, 0),
    (22, 9, 1, 1),
    (23, 23, 1, 1),
    (6, 14, 2, 0),
]


def extent_cases() -> list[Case]:
    cases = []
    for i, (h, w, ph, pw) in enumerate(EXTENTS):
        for j in range(2):
            tile = _cycle(TILES, 2 * i + j)
            p = problem(_cycle(DTYPES, i + j), C=8 + 4 * (i % 3), H=h, W=w, K=8, pad_h=ph, pad_w=pw)
            cases.append(Case(p, tile, label="extent"))
    return cases


#: Wide C: the default K2 mode per (C, tile) for 16-bit inputs. The fused prescale needs all
#: C/vec lanes of a tile in one workgroup; blocks past 256 also need bins x vec x block within
#: the register budget (grids/refusals.yaml fused_block_registers, fused_wide_tile), which
#: only narrow vecs meet, so wide C mostly takes the split prescale (K2a).
WIDE = [
    # (C, tile, prescale, block, vec): the smallest fused block (64 up) that holds the lanes
    (256, "F4x4", "fused", 64, 4),
    (256, "F2x2", "fused", 64, 8),
    (256, "F6x6", "fused", 128, 2),
    (301, "F4x4", "fused", 512, 1),  # odd C: vec 1, 301 lanes
    (301, "F6x6", "fused", 512, 1),  # 64 bins x 512 = the budget exactly
    (515, "F2x2", "fused", 1024, 1),  # 515 lanes
    (515, "F4x4", "split", 64, 1),  # 36 bins x 1024 past the budget
    (1028, "F2x2", "fused", 512, 4),  # 257 lanes at vec 4
    (2048, "F2x2", "fused", 256, 8),  # 256 lanes at vec 8
    (2048, "F4x4", "split", 64, 4),  # 512 lanes at vec 4 (vec 8 breaks the K2 window budget)
    (2048, "F6x2", "split", 64, 4),
    (4096, "F2x2", "split", 64, 8),
    (4096, "F4x4", "split", 64, 4),
    (4096, "F6x6", "split", 64, 2),
]


def wide_cases() -> list[Case]:
    """Each WIDE row with the GPUs' pick forced (its K2 mode); fp32 storage at wide C, the c
    target's pick for every dtype."""
    cases = []
    for i, (c, tile, *_rest) in enumerate(WIDE):
        dtype = (DType.FP16, DType.BF16)[i % 2]
        side = 6 if c < 1024 else 3
        p = problem(dtype, C=c, H=side, W=side + 1, K=8)
        cases.append(gpu_pick(p, Tile.parse(tile), f"wide{c}"))
    for c, dtype in ((256, DType.FP32), (2048, DType.FP32), (4096, DType.FP32), (2048, DType.FP16)):
        cases.append(Case(problem(dtype, C=c, H=3, W=4, K=8), Tile(4, 4), label=f"wide{c}"))
    cases.append(Case(problem(DType.BF16, C=4096, H=3, W=4, K=8), Tile(6, 6), label="wide4096"))
    return cases


def wide_mode_cases() -> list[Case]:
    """Each WIDE row at fp16, bf16 and fp32 (dispatched, not run, by the mode test)."""
    return [
        Case(problem(dtype, C=c, H=3, W=4, K=8), Tile.parse(tile))
        for c, tile, *_rest in WIDE
        for dtype in DTYPES
    ]


def lds_specs() -> list[RtInputSpec]:
    return [s for s in aot_stage_specs(Stage.INPUT) if s.path is K2Path.LDS]


#: Every LDS spec of the grid, over problems that leave a partial channel chunk (C/G not a
#: multiple of lanes x vec = 64), a partial region (tiles per row not a multiple of the width),
#: groups, dilation in both dimensions, and an image smaller than one tile.
LDS_SHAPES = [
    dict(C=80, H=11, W=26, K=16),
    dict(C=64, H=9, W=13, K=32, groups=2),
    dict(N=2, C=12, H=14, W=15, K=8, dil_h=2, dil_w=3, pad_h=2, pad_w=3),
    dict(N=2, C=16, H=3, W=2, K=8, pad_h=1, pad_w=1),
]


def forced_cases() -> list[Case]:
    cases = []
    for i, k2 in enumerate(lds_specs()):
        p = problem(k2.io, **_cycle(LDS_SHAPES, i))
        cases.append(Case(p, k2.tile, pipeline(p, k2), "lds"))
    # vec 1 everywhere, cycling the K2 modes
    for i, tile in enumerate(TILES):
        dtype = _cycle(DTYPES, i)
        modes = {
            DType.FP32: [(DType.FP32, Prescale.FUSED), (DType.FP32, Prescale.SPLIT)],
            DType.FP16: [(DType.FP16, Prescale.FUSED), (DType.FP16, Prescale.SPLIT)],
            DType.BF16: [
                (DType.FP16, Prescale.SPLIT),
                (DType.BF16, Prescale.SPLIT),
                (DType.FP16, Prescale.FUSED),
            ],
        }[dtype]
        xdtype, mode = _cycle(modes, i // 3)
        p = problem(dtype, C=24, H=11, W=10, K=16, pad_h=1, pad_w=2)
        k2 = RtInputSpec(tile, dtype, xdtype, 1, 256, K2Path.REGISTER, 0, 0, mode)
        cases.append(Case(p, tile, pipeline(p, k2, vec=1), "vec1"))
    # split prescale where the default would fuse (K2a at vec 8, K2 at vec 4 and 8)
    for tile, dtype, vec in (
        (Tile(4, 4), DType.FP16, 4),
        (Tile(2, 2), DType.BF16, 8),
        (Tile(6, 2), DType.FP16, 4),
    ):
        p = problem(dtype, C=64, H=13, W=12, K=16)
        k2 = RtInputSpec(tile, dtype, DType.FP16, vec, 256, K2Path.REGISTER, 0, 0, Prescale.SPLIT)
        cases.append(Case(p, tile, pipeline(p, k2), "split"))
    # wide fused workgroups on narrow C: many tiles (slots) per workgroup
    for tile, dtype, vec, block in (
        (Tile(2, 2), DType.FP16, 2, 1024),
        (Tile(4, 4), DType.BF16, 1, 512),
        (Tile(2, 4), DType.FP16, 1, 1024),
    ):
        p = problem(dtype, C=40, H=10, W=9, K=8)
        k2 = RtInputSpec(tile, dtype, DType.FP16, vec, block, K2Path.REGISTER, 0, 0, Prescale.FUSED)
        cases.append(Case(p, tile, pipeline(p, k2), f"fused{block}"))
    return cases


#: Problems the plan / api / verify tests dispatch (default picks).
EXTRA = [
    Case(problem(DType.FP16, N=5, C=32, H=9, W=9, K=16), Tile(4, 4), label="split"),
    Case(problem(DType.FP16, N=7, C=32, H=9, W=9, K=16), Tile(4, 4), label="split"),
    Case(problem(DType.FP32, N=3, C=16, H=12, W=12, K=8), Tile(4, 4)),
    Case(problem(DType.FP32, N=3, C=16, H=12, W=12, K=8), Tile(2, 2)),
    Case(problem(DType.FP16, N=2, C=64, H=14, W=14, K=64), Tile(4, 4)),
    Case(problem(DType.BF16, N=1, C=16, H=10, W=10, K=16), Tile(4, 4)),
    Case(problem(DType.FP32, N=1, C=8, H=5, W=5, K=8), Tile(2, 2)),
]


def all_cases() -> list[Case]:
    return (
        numerics_cases()
        + coverage_cases()
        + extent_cases()
        + wide_cases()
        + wide_mode_cases()
        + forced_cases()
        + EXTRA
    )


def needed_specs() -> set[StageSpec]:
    specs: set[StageSpec] = set()
    for case in all_cases():
        specs.update(case.specs.values())
    # the default picks of every dtype of the api / verify problems
    for case in EXTRA:
        for dtype in DTYPES:
            p = replace(case.problem, dtype=dtype)
            specs.update(default_stage_specs(p, default_tile(p)).values())
    return specs


# The session cache -----------------------------------------------------------------------------
_ROOT: list[Path] = []


def host_cache(tmp_path_factory) -> Path:
    """The build folder of the one host cache of the session (built on first use)."""
    if not _ROOT:
        from tests import host_cache as builder

        root = tmp_path_factory.mktemp("host-cache")
        builder.build(needed_specs(), root)
        _ROOT.append(root)
    return _ROOT[0]


# Running with poisoned buffers -----------------------------------------------------------------
def inputs(p: Problem, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """N(0,1) x (NHWC) and w (KRSC) in the problem's dtype."""
    dtype = numpy_dtype(p.dtype)
    x = rng.standard_normal((p.N, p.H, p.W, p.C)).astype(dtype)
    w = rng.standard_normal((p.K, p.R, p.S, p.Cg)).astype(dtype)
    return x, w


def poisoned(plan) -> tuple[np.ndarray, np.ndarray]:
    """y full of NaN and a workspace of 0xFF bytes (NaN in every fp16, bf16 and fp32 view)."""
    p = plan.problem
    y = np.full((p.N, p.Ho, p.Wo, p.K), np.nan, dtype=numpy_dtype(p.dtype))
    workspace = np.full(plan.workspace_bytes, 0xFF, dtype=np.uint8)
    return y, workspace


def unwritten(plan, workspace: np.ndarray) -> dict[str, int]:
    """Per workspace buffer the plan uses, how many elements still hold the poison (NaN).
    Checks the largest chunk's views: the first chunk wrote all of them."""
    views = plan.backend().workspace(plan, workspace, plan.batch_split)
    return {
        name: int(np.count_nonzero(~np.isfinite(view.astype(np.float32))))
        for name, view in views.items()
    }


def written_run(plan, x, w) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The plan run over poisoned buffers, every element of y and the workspace asserted
    written: (y's bits, V's bytes, the tile scales)."""
    y, workspace = poisoned(plan)
    plan.run(x, w, y=y, workspace=workspace)
    assert not any(unwritten(plan, workspace).values())
    views = plan.backend().workspace(plan, workspace, plan.batch_split)
    return y.view(np.uint16), views["V"].view(np.uint8), views["ts"].copy()


def expected_buffers(plan) -> set[str]:
    names = {"U", "fs", "V", "M"}
    if plan.prescale is not Prescale.NONE:
        names.add("ts")
    return names
