"""K2's LDS-rows path (path ldsrow): a workgroup stages a row of tiles' windows in shared memory
with 16-byte copies and a thread transforms one tile from there, holding its window (stream 0)
or one row of bins at a time (stream 1). On the host
it computes the same sums in the same order as the register path's held window, so V, the tile
scales and y are bit-identical to it (the C target keeps FMA contraction off): fused, split and
no prescale, fp16 and fp32 storage, odd extents, partial rows of tiles and channel chunks,
dilation, groups, an image smaller than a tile, over poisoned buffers with every element of
V, ts and y written; and its refusals."""

from __future__ import annotations

import numpy as np
import pytest

from tests import host_cache
from tests import runtime_fixtures as rf
from wino.codegen.transforms import apply_2d, apply_2d_row_pieces, tile_matrices
from wino.geometry import lds_bytes
from wino.grid import aot_stage_specs
from wino.launch import stage_launch
from wino.pick import default_stage_specs
from wino.problem import Problem
from wino.refusals import Refused, check_spec
from wino.runtime import conv2d_reference, dispatch, relative_error
from wino.runtime.verify import bound_for
from wino.specs import RtInputSpec
from wino.vocab import DType, K2Path, Prescale, Stage, Target, Tile

TILES = (Tile(2, 2), Tile(4, 4), Tile(4, 2), Tile(6, 6))
PROBLEMS = {
    "odd": dict(N=2, C=16, H=9, W=11, K=8, pad_h=1, pad_w=1),
    "dilated": dict(N=1, C=8, H=13, W=12, K=4, pad_h=2, pad_w=1, dil_h=2, dil_w=3),
    "groups": dict(N=1, C=16, H=7, W=10, K=8, pad_h=1, pad_w=0, groups=2),
    # C/G = 80: split chunks of 64 + 16 channels per group; fused stages all 160 channels
    "chunks": dict(N=1, C=160, H=6, W=21, K=8, pad_h=1, pad_w=1, groups=2),
    "tiny": dict(N=2, C=16, H=3, W=2, K=8, pad_h=1, pad_w=1),
}
#: (target whose storage pick is used, prescale): the GPUs store V in fp16 (fused or split),
#: the c target in fp32 (fp16 io without a tile scale, bf16 with one).
MODES = (
    (Target.CUDA, Prescale.FUSED),
    (Target.CUDA, Prescale.SPLIT),
    (Target.C, None),  # the c target's own prescale: none for fp16, fused for bf16
)
#: The LDS-rows transform: 0 holds the tile's window, 1 streams one row of bins at a time.
STREAMS = (0, 1)
CASES = [
    (label, tile, dtype, target, prescale, stream)
    for label in PROBLEMS
    for tile in TILES
    for dtype in ("fp16", "bf16")
    for target, prescale in MODES
    for stream in STREAMS
]


def _lds_rows(
    tile: Tile, problem: Problem, k2: RtInputSpec, prescale: Prescale, vec: int, stream: int
):
    """The LDS-rows spec of the case: 8 tiles along a row (4 past 4 output columns), enough
    lanes for all C when fused, 64-channel chunks otherwise."""
    width = 8 if tile.mw <= 4 else 4
    lanes = 64 // vec
    if prescale is Prescale.FUSED:
        while lanes * vec < problem.C:
            lanes, width = lanes * 2, max(width // 2, 1)
    return k2.replace(
        vec=vec,
        block=64 if vec == 8 else 128,
        path=K2Path.LDS_ROWS,
        lds_lanes=lanes,
        lds_width=width,
        prescale=prescale,
        extra={"stream": stream} if stream else {},
    )


def _specs(case, path: K2Path) -> dict:
    label, tile, dtype, target, prescale, stream = case
    problem = Problem(**PROBLEMS[label], dtype=dtype)
    specs = default_stage_specs(problem, tile, target=target)
    k2 = specs[Stage.INPUT]
    prescale = k2.prescale if prescale is None else prescale
    if path is K2Path.LDS_ROWS:  # vec 8 and vec 4 in turn
        vec = 8 if (len(label) + tile.bins) % 2 else 4
        k2 = _lds_rows(tile, problem, k2, prescale, vec, stream)
    else:  # the held window at the widest vector its registers allow
        vec = next(v for v in (4, 2, 1) if tile.bins * v <= 144 and problem.Cg % v == 0)
        k2 = k2.replace(
            vec=vec, block=256, path=K2Path.REGISTER, lds_lanes=0, lds_width=0, prescale=prescale
        )
    return rf.with_input(specs, k2, problem)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("k2-lds-rows")
    specs = set()
    for case in CASES:
        for path in (K2Path.REGISTER, K2Path.LDS_ROWS):
            specs |= set(_specs(case, path).values())
    host_cache.build(specs, root)
    return root


@pytest.mark.parametrize(
    "case", CASES, ids=lambda c: "-".join(str(getattr(v, "value", v)) for v in c)
)
def test_lds_rows_k2_is_bit_identical_to_the_held_window(root, case):
    label, tile, dtype = case[:3]
    problem = Problem(**PROBLEMS[label], dtype=dtype)
    x, w = rf.inputs(problem, np.random.default_rng(len(label) + tile.bins))
    x[0, 0, 0, 0] *= 1000  # one tile's max far above its neighbours' (halo columns shared)
    _assert_paths_agree(root, case, x, w)


@pytest.mark.parametrize("prescale", [Prescale.FUSED, Prescale.SPLIT])
def test_fp16_scale_after_the_transform_changes_no_bit(root, prescale):
    """fp16 io on the streamed LDS-rows path scales the bins, the held window scales the
    window: equal bit for bit even where the tile scales are largest (mostly fp16 subnormals:
    scales of 2^18 and up) and next to a tile of 2000 (scale 2^-11)."""
    case = ("odd", Tile(4, 4), "fp16", Target.CUDA, prescale, 1)
    problem = Problem(**PROBLEMS["odd"], dtype="fp16")
    x, w = rf.inputs(problem, np.random.default_rng(7))
    x = (x.astype(np.float32) * 2.0**-20).astype(np.float16)  # mostly fp16 subnormals
    x[1, 4, 5, 3] = np.float16(2000.0)  # y stays finite (C = 16 N(0,1) weights)
    assert (np.abs(x) < np.finfo(np.float16).tiny).mean() > 0.5
    _assert_paths_agree(root, case, x, w)


def _assert_paths_agree(root, case, x, w):
    """y, V and the tile scales of the held-window K2 and the LDS-rows K2 of the case, over
    poisoned buffers (every element written), are bit-identical."""
    label, tile, dtype = case[:3]
    problem = Problem(**PROBLEMS[label], dtype=dtype)
    outs = []
    for path in (K2Path.REGISTER, K2Path.LDS_ROWS):
        specs = _specs(case, path)
        plan = dispatch(problem, target="c", tile=tile, cache_root=root, specs=specs)
        assert plan.specs[Stage.INPUT].path is path
        y, workspace = rf.poisoned(plan)
        plan.run(x, w, y=y, workspace=workspace)
        assert not any(rf.unwritten(plan, workspace).values())
        assert np.isfinite(y.astype(np.float32)).all()
        views = plan.backend().workspace(plan, workspace, plan.batch_split)
        ts = views["ts"].copy() if plan.prescale is not Prescale.NONE else None
        outs.append((y.view(np.uint16), views["V"].view(np.uint8), ts))
    for held, rows in zip(*outs, strict=True):
        assert (held is None and rows is None) or np.array_equal(held, rows)


def test_row_pieces_are_the_held_transform():
    """apply_2d_row_pieces is apply_2d's sums, one source column in and one bin out at a time:
    the same expressions (tmp and dst renamed), and each row names the window rows it reads."""
    for mh, mw in ((2, 2), (4, 4), (6, 4)):
        left, right = tile_matrices(mh, mw)["input"]
        held = apply_2d(left, right, lambda a, b: f"w[{a}][{b}]", lambda i, j: f"o{i}_{j}", "t")
        pieces = apply_2d_row_pieces(
            left,
            right,
            lambda a, b: f"w[{a}][{b}]",
            lambda i, b: f"t{i}_{b}",
            lambda i, j: f"o{i}_{j}",
        )
        lines = [f"const float {line}" for _, firsts, _ in pieces for line in firsts]
        lines += [line for _, _, seconds in pieces for line in seconds]
        assert sorted(lines) == sorted(held)
        for i, (used, _, _) in enumerate(pieces):
            assert used == tuple(a for a in range(len(left[0])) if left[i][a] != 0)


def test_grid_lds_rows_specs_fit_their_budget():
    """Every grid LDS-rows spec: under the static shared-memory limit, items a warp multiple,
    and launched over a problem with every tile of every row covered once."""
    specs = [s for s in aot_stage_specs(Stage.INPUT) if s.path is K2Path.LDS_ROWS]
    assert specs
    for spec in specs:
        check_spec(spec)
        assert lds_bytes(spec) <= 49152
        assert (spec.lds_lanes * spec.lds_width) % 32 == 0
        p = Problem(N=3, C=min(spec.lds_lanes * spec.vec, 512), H=30, W=37, K=8, dtype=spec.io)
        launch = stage_launch(spec, p)
        regions = launch.kernargs["RW"]
        assert regions * spec.lds_width >= launch.kernargs["twp"] > (regions - 1) * spec.lds_width
        assert launch.grid[0] == p.N * launch.kernargs["TH"] * regions
        assert launch.shared_bytes == lds_bytes(spec)


BASE = RtInputSpec(
    Tile(4, 4), DType.FP16, DType.FP16, 8, 64, K2Path.LDS_ROWS, 8, 8, extra={"stream": 1}
)


@pytest.mark.parametrize(
    "change, rule",
    [
        (dict(lds_lanes=0), "ldsrow_no_lanes"),
        (dict(lds_width=3), "ldsrow_items_not_warp_multiple"),
        (dict(vec=1, lds_lanes=4, lds_width=8), "ldsrow_chunk_not_16_bytes"),
        (dict(lds_lanes=32, lds_width=8), "ldsrow_bytes_over_limit"),
        (dict(extra={}), "input_window_registers"),  # held: 36 bins x vec 8 past 144 values
    ],
)
def test_lds_rows_spec_refusals(change, rule):
    check_spec(BASE)
    with pytest.raises(Refused) as info:
        check_spec(BASE.replace(**change))
    assert info.value.rule == rule


@pytest.mark.parametrize(
    "problem, rule",
    [
        (dict(C=128), "ldsrow_fused_channels"),
        (dict(C=3), "vec_not_dividing_cg"),
        (dict(C=12, groups=3), "ldsrow_cg_not_16_bytes"),
    ],
)
def test_lds_rows_fit_refusals(problem, rule):
    spec = BASE if rule != "ldsrow_cg_not_16_bytes" else BASE.replace(vec=4, lds_lanes=16)
    p = Problem(**{"N": 1, "H": 8, "W": 8, "K": 12, **problem}, dtype="fp16")
    with pytest.raises(Refused) as info:
        stage_launch(spec, p)
    assert info.value.rule == rule


# xbits 16: the held window's transform on fp16 pairs ------------------------------------------
X16_CASES = [
    (label, tile, prescale)
    for label in PROBLEMS
    for tile in (Tile(2, 2), Tile(4, 4))
    for prescale in (Prescale.FUSED, Prescale.SPLIT)
]


def _x16_specs(case, xbits: int) -> dict:
    """The case's GPU pipeline (fp16, V in fp16) with the LDS-rows K2 at vec 2, stream 0."""
    label, tile, prescale = case
    problem = Problem(**PROBLEMS[label], dtype="fp16")
    specs = default_stage_specs(problem, tile, target=Target.CUDA)
    k2 = _lds_rows(tile, problem, specs[Stage.INPUT], prescale, 2, 0)
    return rf.with_input(specs, k2.replace(extra={"xbits": xbits}), problem)


@pytest.fixture(scope="module")
def x16_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("k2-x16")
    host_cache.build(
        {s for c in X16_CASES for x in (16, 32) for s in _x16_specs(c, x).values()}, root
    )
    return root


@pytest.mark.parametrize("case", X16_CASES, ids=lambda c: f"{c[0]}-{c[1].name}-{c[2].value}")
def test_fp16_pair_transform_k2_within_the_bound(x16_root, case):
    """K2 at xbits 16 in the fp16 pipeline: every output and V element written over poisoned
    buffers, y within the tile's fp16 bound of float64 on N(0,1) data and on data whose tiles
    lie mostly in fp16's subnormals (scales 2^18 and up: fp32 products, then one rounding) next
    to a value of 60000 (scale 2^-16: a subnormal fp16 factor); V differs from xbits 32's
    (the pairs round each operation; F4x4 on N(0,1) data) by at most 8 fp16 units of the
    bin's largest |V| over the tiles."""
    label, tile, _ = case
    problem = Problem(**PROBLEMS[label], dtype="fp16")
    x, w = rf.inputs(problem, np.random.default_rng(len(label) + tile.bins))
    small = (x.astype(np.float32) * 2.0**-20).astype(np.float16)
    small[0, problem.H // 2, 1, 1] = np.float16(60000.0)
    w = (w.astype(np.float32) * 2.0**-6).astype(np.float16)
    for data in (x, small):
        vs = []
        for xbits in (16, 32):
            specs = _x16_specs(case, xbits)
            assert specs[Stage.INPUT].xbits == xbits and check_spec(specs[Stage.INPUT]) is None
            plan = dispatch(problem, target="c", tile=tile, cache_root=x16_root, specs=specs)
            y, workspace = rf.poisoned(plan)
            plan.run(data, w, y=y, workspace=workspace)
            assert not any(rf.unwritten(plan, workspace).values())
            ref = conv2d_reference(
                data,
                w,
                (problem.pad_h, problem.pad_w),
                (problem.dil_h, problem.dil_w),
                problem.groups,
            )
            assert relative_error(y, ref) <= bound_for(tile, "fp16", "fp16"), xbits
            views = plan.backend().workspace(plan, workspace, plan.batch_split)
            vs.append(views["V"].astype(np.float64))
        pairs, fp32 = vs
        if data is x and tile == Tile(4, 4):  # (subnormal data has too few bits to round)
            assert not np.array_equal(pairs, fp32)
        scale = np.abs(fp32).max(axis=tuple(range(1, fp32.ndim)), keepdims=True)
        assert (np.abs(pairs - fp32) <= 8 * 2.0**-11 * np.maximum(scale, 1e-30)).all()


# 256-thread workgroups (sub-grid lds_rows_fused_held_b256) -----------------------------------
#: The grid's 256-thread LDS-rows K2 kernels: a workgroup's items (lanes x width x bin rows) over
#: twice the threads, so each thread takes half as many.
B256 = [
    s
    for s in aot_stage_specs(Stage.INPUT)
    if s.path is K2Path.LDS_ROWS and s.block == 256 and s.stream == 0
]
#: Few tiles and all C staged (C from half the region's channels to all of them, odd): a 7x7
#: image (2x2 F4x4 tiles, as N64 C512 7x7) and an odd one with a partial row of regions.
B256_SHAPES = [dict(N=2, H=7, W=7, K=8), dict(N=1, H=9, W=13, K=5, pad_h=0)]


def _b256_specs(k2: RtInputSpec, problem: Problem) -> dict:
    specs = default_stage_specs(problem, k2.tile, target=Target.CUDA)
    return rf.with_input(specs, k2, problem)


def _b256_problems(k2: RtInputSpec) -> list[Problem]:
    region = k2.lds_lanes * k2.vec
    return [
        Problem(**shape, C=c, pad_w=1, **({} if "pad_h" in shape else {"pad_h": 1}), dtype=k2.io)
        for shape, c in zip(B256_SHAPES, (region, region // 2 + 8), strict=True)
    ]


@pytest.fixture(scope="module")
def b256_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("k2-b256")
    specs = set()
    for k2 in B256:
        for problem in _b256_problems(k2):
            for spec in (k2, k2.replace(block=128)):
                specs |= set(_b256_specs(spec, problem).values())
    host_cache.build(specs, root)
    return root


def test_b256_grid_is_the_wide_regions():
    assert {(s.tile, s.lds_lanes, s.lds_width) for s in B256} == {
        (Tile(4, 4), 128, 2),
        (Tile(4, 4), 256, 1),
    }
    assert {(s.io, s.xbits) for s in B256} == {
        (DType.FP16, 32),
        (DType.FP16, 16),
        (DType.BF16, 32),
    }


@pytest.mark.parametrize("k2", B256, ids=lambda s: s.name)
def test_b256_gives_the_128_thread_bits(b256_root, k2):
    """Over poisoned buffers (every element of V, ts and y written) the 256-thread kernel's V,
    tile scales and y are its 128-thread twin's bit for bit (the same items, each thread taking
    half as many), and y is within the tile's bound of float64."""
    for problem in _b256_problems(k2):
        x, w = rf.inputs(problem, np.random.default_rng(problem.C))
        outs = []
        for spec in (k2, k2.replace(block=128)):
            specs = _b256_specs(spec, problem)
            plan = dispatch(problem, target="c", cache_root=b256_root, specs=specs)
            assert plan.specs[Stage.INPUT] == spec
            outs.append(rf.written_run(plan, x, w))
        for wide, narrow in zip(*outs, strict=True):
            assert np.array_equal(wide, narrow)
        y = outs[0][0].view(x.dtype)
        ref = conv2d_reference(x, w, (problem.pad_h, problem.pad_w), (1, 1), 1)
        assert 0 < relative_error(y, ref) <= bound_for(k2.tile, k2.io, k2.xdtype)
