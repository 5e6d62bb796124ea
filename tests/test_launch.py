"""Launch geometry: kernargs carry every extent and magic pair, and each stage's grid writes
every workspace and output element exactly once.

The emulations below mirror the kernels' thread -> work mappings (wino/launch.py's module
docstring): one function per stage kind computes what one thread writes, dividing by run-time
extents through the magic pairs of the kernargs exactly as the kernels do. A K1 or K2 thread
writes its element for every bin a of U or V, so the bins are not enumerated here."""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import replace

import pytest

from wino.fused import FusedBudget
from wino.grid import aot_stage_specs
from wino.kinds import BY_KIND, KINDS, Kind, kind_of
from wino.launch import (
    TileGrid,
    batch_chunks,
    largest_split,
    stage_launch,
    workspace_bytes,
    workspace_layout,
)
from wino.magic import INDEX_LIMIT, magic_apply, magic_div
from wino.pick import default_stage_specs
from wino.problem import Problem
from wino.refusals import Refused, check_spec
from wino.specs import RtFilterSpec, RtInputSpec, RtOutputSpec, RtPrescaleSpec
from wino.vocab import TILES, DType, K2Path, Prescale, Stage, Tile


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _div(n: int, ka: dict[str, int], name: str) -> int:
    """n // ka[name] as the kernel computes it: umulhi with the host's magic pair."""
    return magic_apply(n, ka[f"m_{name}"], ka[f"s_{name}"])


def _divmod(n: int, ka: dict[str, int], name: str) -> tuple[int, int]:
    q = _div(n, ka, name)
    return q, n - q * ka[name]


def _threads(launch):
    """(bx, by, tid) of every thread of a launch (grid z and block y, z are 1)."""
    (gx, gy, gz), (bx_, by_, bz_) = launch.grid, launch.block
    assert gz == by_ == bz_ == 1
    return itertools.product(range(gx), range(gy), range(bx_))


def _decode_tile(p: int, ka: dict[str, int]) -> tuple[int, int, int, int, int]:
    """Tile p -> (n, ph, i, pw, j), the numbering every stage shares."""
    q, tc = _divmod(p, ka, "TW")
    n, tr = _divmod(q, ka, "TH")
    ph, i = _divmod(tr, ka, "thp")
    pw, j = _divmod(tc, ka, "twp")
    return n, ph, i, pw, j


# One thread's writes, per stage kind --------------------------------------------------------
def _k1(spec, ka, bx, by, tid, block):
    """U[a][k][l*vec .. +vec] for all a, rows k of this block, lanes l = tid, tid+block, ..."""
    for k in range(bx * spec.rows, min(bx * spec.rows + spec.rows, ka["K"])):
        for lane in range(tid, ka["lanes"], block):
            yield from ((k, c) for c in range(lane * spec.vec, lane * spec.vec + spec.vec))


def _k2a(spec, ka, bx, by, tid, block):
    """ts[p]: a workgroup holds `slots` tiles of `span` threads; a tile's first thread stores."""
    slot, l0 = _divmod(tid, ka, "span")
    p = bx * ka["slots"] + slot
    if slot < ka["slots"] and p < ka["P"] and l0 == 0:
        yield (p,)


def _v_writes(spec, ka, p, lane):
    c = lane * spec.vec
    g, cl = _divmod(c, ka, "Cg")
    assert cl + spec.vec <= ka["Cg"], "a channel vector straddles two groups"
    yield from ((g, p, cc) for cc in range(cl, cl + spec.vec))


def _k2_reg(spec, ka, bx, by, tid, block):
    gid = bx * block + tid
    if gid < ka["total"]:
        p, lane = _divmod(gid, ka, "lanes")
        yield from _v_writes(spec, ka, p, lane)


def _k2_fused(spec, ka, bx, by, tid, block):
    slot, lane = _divmod(tid, ka, "lanes")
    p = bx * ka["slots"] + slot
    if slot < ka["slots"] and p < ka["P"]:
        yield from _v_writes(spec, ka, p, lane)


def _k2_lds(spec, ka, bx, by, tid, block):
    q, rw = _divmod(bx, ka, "RW")
    q, pw = _divmod(q, ka, "dil_w")
    n, tr = _divmod(q, ka, "TH")
    g, ch = _divmod(by, ka, "CH")
    shift = spec.lds_lanes.bit_length() - 1  # lanes are a power of two: shift and mask
    t, lane = tid >> shift, tid & (spec.lds_lanes - 1)
    j = rw * spec.lds_width + t
    cl = ch * spec.lds_lanes * spec.vec + lane * spec.vec
    if j < ka["twp"] and cl < ka["Cg"]:
        p = (n * ka["TH"] + tr) * ka["TW"] + pw * ka["twp"] + j
        assert _decode_tile(p, ka) == (n, *_divmod(tr, ka, "thp"), pw, j)
        assert cl + spec.vec <= ka["Cg"]
        yield from ((g, p, cc) for cc in range(cl, cl + spec.vec))


def _k2_ldsrow(spec, ka, bx, by, tid, block):
    """The last phase of templates/k2_input.j2's LDS-rows path: items e = tid, tid + block, ...
    of width x lanes are (tile t = e // lanes, lane e % lanes) of the workgroup's row and
    channel chunk (all C for the fused prescale)."""
    q, rw = _divmod(bx, ka, "RW")
    q, pw = _divmod(q, ka, "dil_w")
    n, tr = _divmod(q, ka, "TH")
    g, ch = _divmod(by, ka, "CH")
    chunk = spec.lds_lanes * spec.vec
    if spec.prescale is Prescale.FUSED:
        c_base, c_count = 0, ka["C"]
    else:
        c_base, c_count = g * ka["Cg"] + ch * chunk, min(chunk, ka["Cg"] - ch * chunk)
    for e in range(tid, spec.lds_width * spec.lds_lanes, block):
        t, lane = divmod(e, spec.lds_lanes)
        j = rw * spec.lds_width + t
        if j < ka["twp"] and lane * spec.vec < c_count:
            p = (n * ka["TH"] + tr) * ka["TW"] + pw * ka["twp"] + j
            assert _decode_tile(p, ka) == (n, *_divmod(tr, ka, "thp"), pw, j)
            gg, cl = _divmod(c_base + lane * spec.vec, ka, "Cg")
            assert cl + spec.vec <= ka["Cg"]
            yield from ((gg, p, cc) for cc in range(cl, cl + spec.vec))


def _k4(spec, ka, bx, by, tid, block):
    gid = bx * block + tid
    if gid >= ka["total"]:
        return
    p, lane = _divmod(gid, ka, "lanes")
    k = lane * spec.vec
    _, kl = _divmod(k, ka, "Kg")
    assert kl + spec.vec <= ka["Kg"], "an output vector straddles two groups"
    n, ph, i, pw, j = _decode_tile(p, ka)
    tile = spec.tile
    for r, s in itertools.product(range(tile.mh), range(tile.mw)):
        oh = ph + ka["dil_h"] * (i * tile.mh + r)
        ow = pw + ka["dil_w"] * (j * tile.mw + s)
        if oh < ka["Ho"] and ow < ka["Wo"]:
            yield from ((n, oh, ow, kk) for kk in range(k, k + spec.vec))


def _kf(spec, ka, bx, by, tid, block):
    """y through the fused kernel's output phase: per slice sl of ``cols`` channels (the
    budget's Ms width), element e = tid, tid + block, ... of tiles x cols is (tile
    p0 + e // cols, channel k0 + cols sl + e % cols)."""
    g, kb = _divmod(by, ka, "KB")
    cols = FusedBudget.of(spec).ms_cols
    for sl in range(spec.kblock // cols):
        for e in range(tid, spec.tiles * cols, block):
            p, kl = bx * spec.tiles + e // cols, kb * spec.kblock + sl * cols + e % cols
            if p >= ka["P"] or kl >= ka["Kg"]:
                continue
            n, ph, i, pw, j = _decode_tile(p, ka)
            for r, s in itertools.product(range(spec.tile.mh), range(spec.tile.mw)):
                oh = ph + ka["dil_h"] * (i * spec.tile.mh + r)
                ow = pw + ka["dil_w"] * (j * spec.tile.mw + s)
                if oh < ka["Ho"] and ow < ka["Wo"]:
                    yield (n, oh, ow, g * ka["Kg"] + kl)


EMULATIONS = {
    "k1": _k1,
    "k2a": _k2a,
    "k2_reg": _k2_reg,
    "k2_fused": _k2_fused,
    "k2_lds": _k2_lds,
    "k2_ldsrow": _k2_ldsrow,
    "k4": _k4,
    "kf": _kf,
}


def _expected(kind: str, problem: Problem, tg: TileGrid):
    """Every element the stage must write: U (k, c), ts (p), V (g, p, c) or y (n, oh, ow, k)."""
    p = problem
    if kind == "k1":
        return itertools.product(range(p.K), range(p.Cg))
    if kind == "k2a":
        return ((q,) for q in range(tg.P))
    if kind in ("k4", "kf"):
        return itertools.product(range(p.N), range(p.Ho), range(p.Wo), range(p.K))
    return itertools.product(range(p.groups), range(tg.P), range(p.Cg))


def _writes(spec, problem, launch=None) -> Counter:
    launch = launch or stage_launch(spec, problem)
    emulate = EMULATIONS[kind_of(spec).kind.value]
    block = launch.block[0]
    counts: Counter = Counter()
    for bx, by, tid in _threads(launch):
        counts.update(emulate(spec, launch.kernargs, bx, by, tid, block))
    return counts


def _assert_exactly_once(spec, problem, launch=None) -> None:
    counts = _writes(spec, problem, launch)
    expected = set(_expected(kind_of(spec).kind.value, problem, TileGrid.of(problem, spec.tile)))
    twice = [e for e, n in counts.items() if n > 1]
    assert not twice, f"{spec.name} on {problem.label()}: written twice: {twice[:5]}"
    missing = expected - set(counts)
    assert not missing, f"{spec.name} on {problem.label()}: never written: {sorted(missing)[:5]}"
    extra = set(counts) - expected
    assert not extra, f"{spec.name} on {problem.label()}: out of range: {sorted(extra)[:5]}"


# Small problems -------------------------------------------------------------------------------
def _small_problems() -> list[Problem]:
    out = []
    for n, h, w, pad, dil, groups in itertools.product(
        (1, 2), (1, 2, 5, 9), (1, 3, 8), (0, 1, 2), ((1, 1), (2, 2), (1, 2)), (1, 2)
    ):
        if h + 2 * pad - 2 * dil[0] < 1 or w + 2 * pad - 2 * dil[1] < 1:
            continue
        c, k = (8, 12) if groups == 2 else (4, 8)
        out.append(
            Problem(
                N=n,
                C=c,
                H=h,
                W=w,
                K=k,
                pad_h=pad,
                pad_w=max(pad - 1, 0) if w > 3 else pad,
                dil_h=dil[0],
                dil_w=dil[1],
                groups=groups,
                dtype=DType.FP32,
            )
        )
    return out


SMALL = _small_problems()
STRIDE = 5  # each tile sees every STRIDE-th problem, offset by the tile: all are covered


def _problems_for(tile_index: int) -> list[Problem]:
    return SMALL[tile_index % STRIDE :: STRIDE]


def _specs(tile: Tile, vec: int) -> list:
    fp32 = dict(tile=tile, io="fp32", vec=vec)
    fp16 = dict(tile=tile, io="fp16", vec=vec)
    specs = [
        RtFilterSpec(xdtype="fp32", block=32, rows=3, **fp32),
        RtFilterSpec(xdtype="fp32", block=256, rows=1, **fp32),
        RtPrescaleSpec(block=256, **fp16),
        RtInputSpec(xdtype="fp32", block=32, prescale="none", **fp32),
        RtInputSpec(xdtype="fp16", block=32, prescale="split", **fp16),
        RtInputSpec(xdtype="fp16", block=32, prescale="fused", **fp16),
        RtInputSpec(xdtype="fp16", block=256, prescale="fused", **fp16),
        RtOutputSpec(block=32, **fp32),
    ]
    for lanes, width in ((4, 8), (16, 2), (2, 16)):
        specs.append(
            RtInputSpec(
                xdtype="fp32",
                block=lanes * width,
                path="lds",
                lds_lanes=lanes,
                lds_width=width,
                prescale="none",
                **fp32,
            )
        )
    return specs


@pytest.mark.parametrize("spec", aot_stage_specs(Stage.FUSED), ids=lambda s: s.name)
def test_fused_output_written_exactly_once(spec):
    """Every grid KF spec over the small problems, K and C widened past one channel block."""
    for problem in SMALL[:: 3 if spec.tiles == 16 else 7]:
        c, k = problem.C * 5, problem.K * 5  # several 8-channel slices and channel blocks
        _assert_exactly_once(spec, replace(problem, C=c, K=k, dtype=spec.io))


def _mapping_cases():
    for index, tile in enumerate(TILES):
        for vec in (1, 2, 4):
            yield pytest.param(index, tile, vec, id=f"{tile}-v{vec}")


@pytest.mark.parametrize("tile_index, tile, vec", list(_mapping_cases()))
def test_every_element_written_exactly_once(tile_index, tile, vec):
    checked = 0
    for spec in _specs(tile, vec):
        for problem in _problems_for(tile_index):
            problem = replace(problem, dtype=spec.io)
            channels = (
                problem.C
                if spec.stage is Stage.PRESCALE
                else (problem.Kg if spec.stage is Stage.OUTPUT else problem.Cg)
            )
            if channels % vec:
                with pytest.raises(Refused, match="vec_not_dividing"):
                    stage_launch(spec, problem)
                continue
            if (
                spec.stage is Stage.INPUT
                and spec.prescale.value == "fused"
                and (problem.C // vec > spec.block)
            ):
                continue
            _assert_exactly_once(spec, problem)
            checked += 1
    assert checked >= 20


_LDS_ROWS = [
    RtInputSpec(
        Tile(4, 4),
        DType.FP16,
        DType.FP16,
        8,
        64,
        K2Path.LDS_ROWS,
        8,
        8,
        Prescale.SPLIT,
        {"stream": 1},
    ),
    RtInputSpec(Tile(2, 4), DType.FP32, DType.FP32, 4, 32, K2Path.LDS_ROWS, 4, 8, Prescale.NONE),
    RtInputSpec(Tile(6, 2), DType.FP16, DType.FP16, 2, 64, K2Path.LDS_ROWS, 32, 2, Prescale.FUSED),
]


@pytest.mark.parametrize(
    "spec",
    _LDS_ROWS + [s for s in aot_stage_specs(Stage.INPUT) if s.path is K2Path.LDS_ROWS][::5],
    ids=lambda s: s.name,
)
def test_lds_rows_written_exactly_once(spec):
    """LDS-rows K2 over the small problems, C/G widened to 16-byte units: 16 channels (a
    partial chunk, fused lanes left idle) and 80 (split: chunks of 64 + 16 per group)."""
    check_spec(spec)
    for index, problem in enumerate(SMALL[::2]):
        cg = 80 if spec.prescale is not Prescale.FUSED and index % 2 else 16
        problem = replace(problem, C=problem.groups * cg, dtype=spec.io)
        if spec.prescale is Prescale.FUSED and problem.C > spec.lds_lanes * spec.vec:
            with pytest.raises(Refused, match="ldsrow_fused_channels"):
                stage_launch(spec, problem)
            continue
        _assert_exactly_once(spec, problem)


def test_small_problems_span_the_axes():
    assert len(SMALL) >= 60
    for attr, values in [
        ("N", {1, 2}),
        ("pad_h", {0, 1, 2}),
        ("dil_h", {1, 2}),
        ("dil_w", {1, 2}),
        ("groups", {1, 2}),
    ]:
        assert {getattr(p, attr) for p in SMALL} == values
    assert {p.H for p in SMALL} >= {1, 2, 5, 9} and {p.W for p in SMALL} >= {1, 3, 8}
    assert any(p.Ho < p.dil_h for p in SMALL)  # a phase with no outputs at all


def test_lds_specs_of_the_test_are_sound():
    for spec in _specs(Tile(2, 2), 1):
        if spec.stage is Stage.INPUT and spec.path.value == "lds":
            check_spec(spec)


@pytest.mark.parametrize("kind, shrink", [("k4", "grid"), ("k2_reg", "grid"), ("k1", "grid")])
def test_a_short_grid_is_caught(kind, shrink):
    """The coverage check can fail: one block fewer leaves elements unwritten."""
    problem = Problem(N=2, C=8, H=9, W=9, K=8, pad_h=1, pad_w=1, dtype=DType.FP32)
    spec = {
        "k4": RtOutputSpec(io="fp32", block=32),
        "k2_reg": RtInputSpec(io="fp32", xdtype="fp32", prescale="none", block=32),
        "k1": RtFilterSpec(io="fp32", xdtype="fp32", block=32),
    }[kind]
    launch = stage_launch(spec, problem)
    short = replace(launch, grid=(launch.grid[0] - 1, *launch.grid[1:]))
    with pytest.raises(AssertionError, match="never written"):
        _assert_exactly_once(spec, problem, short)


def test_the_default_pick_covers_a_public_sized_layer():
    problem = Problem(N=2, C=64, H=14, W=14, K=64, pad_h=1, pad_w=1, dtype=DType.FP16)
    for tile in (Tile(2, 2), Tile(6, 6), Tile(4, 2)):
        for spec in default_stage_specs(problem, tile).values():
            _assert_exactly_once(spec, problem)


# Kernargs -------------------------------------------------------------------------------------
def _reference_extents(spec, problem: Problem) -> dict[str, int]:
    """Every extent a kernel may take, computed here from DESIGN.md's formulas."""
    p, t = problem, spec.tile
    thp = _ceil(_ceil(p.Ho, p.dil_h), t.mh)
    twp = _ceil(_ceil(p.Wo, p.dil_w), t.mw)
    TH, TW = p.dil_h * thp, p.dil_w * twp
    P = p.N * TH * TW
    lanes = {Stage.FILTER: p.Cg, Stage.PRESCALE: p.C, Stage.INPUT: p.C, Stage.OUTPUT: p.K}[
        spec.stage
    ] // spec.vec
    ref = dict(
        P=P,
        C=p.C,
        K=p.K,
        Cg=p.Cg,
        Kg=p.Kg,
        G=p.groups,
        N=p.N,
        H=p.H,
        W=p.W,
        pad_h=p.pad_h,
        pad_w=p.pad_w,
        dil_h=p.dil_h,
        dil_w=p.dil_w,
        Ho=p.Ho,
        Wo=p.Wo,
        TH=TH,
        TW=TW,
        thp=thp,
        twp=twp,
        lanes=lanes,
        total=P * lanes,
        span=min(lanes, spec.block),
        slots=spec.block // min(lanes, spec.block),
        has_tile_scale=1,
    )
    if isinstance(spec, RtInputSpec) and spec.lds_width:
        ref.update(RW=_ceil(twp, spec.lds_width), CH=_ceil(p.Cg, spec.lds_lanes * spec.vec))
    return ref


_KERNARG_SPECS = [
    RtFilterSpec(io="fp32", xdtype="fp32", vec=4, rows=2),
    RtPrescaleSpec(io="fp16", vec=2),
    RtInputSpec(io="fp32", xdtype="fp32", vec=2, prescale="none"),
    RtInputSpec(io="fp16", vec=2, block=512),
    RtInputSpec(
        io="fp32",
        xdtype="fp32",
        vec=4,
        block=64,
        path="lds",
        lds_lanes=16,
        lds_width=4,
        prescale="none",
    ),
    RtOutputSpec(io="fp16", vec=4),
]


@pytest.mark.parametrize("spec", _KERNARG_SPECS, ids=lambda s: s.name)
@pytest.mark.parametrize("tile", [Tile(2, 2), Tile(6, 4), Tile(4, 6)], ids=str)
def test_kernargs_carry_every_extent_and_magic_pair(spec, tile):
    spec = replace(spec, tile=tile)
    problem = Problem(
        N=3, C=96, H=23, W=17, K=48, pad_h=2, pad_w=1, dil_h=2, dil_w=3, groups=4, dtype=spec.io
    )
    launch = stage_launch(spec, problem)
    kind = kind_of(spec).kind.value
    ka = launch.kernargs
    assert tuple(ka) == BY_KIND[Kind(kind)].kernarg_names
    ref = _reference_extents(spec, problem)
    for name in BY_KIND[Kind(kind)].fields:
        assert ka[name] == ref[name], name
    for name in BY_KIND[Kind(kind)].magics:
        assert (ka[f"m_{name}"], ka[f"s_{name}"]) == magic_div(ref[name]), name
    assert all(isinstance(v, int) and 0 <= v < 1 << 32 for v in ka.values())


def test_kernarg_tables_are_consistent():
    for entry in KINDS:
        fields, kind = entry.fields, entry.kind
        assert len(set(fields)) == len(fields), kind
        assert set(entry.magics) <= set(fields), f"{kind}: a divisor is not an argument"
        names = entry.kernarg_names
        assert len(set(names)) == len(names) and names[: len(fields)] == fields
        assert [c for c, _ in entry.kernargs] == [
            "unsigned" if n.startswith(("m_", "s_")) else "int" for n in names
        ]
    assert set(EMULATIONS) == {k.value for k in Kind} == {k.kind.value for k in KINDS}


@pytest.mark.parametrize(
    "spec, kind, grid_x",
    [
        (RtFilterSpec(io="fp32", xdtype="fp32", rows=3, block=64), "k1", _ceil(40, 3)),
        (RtPrescaleSpec(io="fp16", block=64), "k2a", 32 // 2),  # 32 lanes: 2 tiles each
        (
            RtInputSpec(io="fp32", xdtype="fp32", prescale="none", vec=2, block=64),
            "k2_reg",
            _ceil(32 * 16, 64),
        ),
        (RtInputSpec(io="fp16", vec=1, block=64), "k2_fused", 32 // 2),  # 32 lanes: 2 tiles each
        (RtOutputSpec(io="fp32", vec=8, block=64), "k4", _ceil(32 * 5, 64)),
    ],
)
def test_grid_and_block(spec, kind, grid_x):
    """C = 32, K = 40 and 2 x 4 x 4 = 32 tiles of F4x4."""
    problem = Problem(N=2, C=32, H=14, W=14, K=40, pad_h=1, pad_w=1, dtype=spec.io)
    assert kind_of(spec).kind.value == kind
    launch = stage_launch(spec, problem)
    assert (launch.grid, launch.block, launch.shared_bytes) == ((grid_x, 1, 1), (64, 1, 1), 0)


def test_lds_launch_geometry():
    spec = RtInputSpec(
        io="fp32",
        xdtype="fp32",
        vec=4,
        block=64,
        path="lds",
        lds_lanes=16,
        lds_width=4,
        prescale="none",
    )
    problem = Problem(
        N=2, C=160, H=14, W=30, K=8, pad_h=1, pad_w=1, dil_w=2, groups=2, dtype=DType.FP32
    )
    launch = stage_launch(spec, problem)
    tg = TileGrid.of(problem, spec.tile)
    regions, chunks = _ceil(tg.twp, 4), _ceil(80, 64)
    assert launch.grid == (2 * tg.TH * 2 * regions, 2 * chunks, 1)
    assert launch.shared_bytes == spec.tile.ah * (4 * spec.tile.mw + 2) * 16 * 4 * 4


# Batch split and workspace --------------------------------------------------------------------
@pytest.mark.parametrize(
    "n, split, chunks",
    [
        (7, 3, [(0, 3), (3, 3), (6, 1)]),
        (6, 3, [(0, 3), (3, 3)]),
        (5, 1, [(i, 1) for i in range(5)]),
        (4, 100, [(0, 4)]),
        (1, 1, [(0, 1)]),
    ],
)
def test_batch_chunks(n, split, chunks):
    assert batch_chunks(n, split) == chunks
    assert sum(size for _, size in chunks) == n


@pytest.mark.parametrize("split", [0, -1, 1.5, True, False, None, "2"])
def test_batch_split_must_be_a_positive_integer(split):
    with pytest.raises(Refused) as info:
        batch_chunks(8, split)
    assert info.value.rule == "batch_split_not_positive"
    assert repr(split) in info.value.message and "positive integer" in info.value.message


def test_workspace_layout_shapes():
    problem = Problem(N=8, C=12, H=10, W=9, K=20, pad_h=1, pad_w=1, groups=4, dtype=DType.FP16)
    tile = Tile(4, 2)
    layout = workspace_layout(problem, tile, DType.FP16, DType.FP32, chunk=3)
    P = TileGrid.of(problem.with_batch(3), tile).P
    assert P == 3 * _ceil(10, 4) * _ceil(9, 2)
    assert layout == {
        "U": ((24, 20, 3), DType.FP16),
        "fs": ((20,), DType.FP32),
        "V": ((24, 4, P, 3), DType.FP16),
        "ts": ((P,), DType.FP32),
        "M": ((24, 4, P, 5), DType.FP32),
    }


def test_workspace_bytes():
    problem = Problem(N=4, C=64, H=16, W=16, K=32, pad_h=1, pad_w=1, dtype=DType.FP16)
    layout = workspace_layout(problem, Tile(4, 4), DType.FP16, DType.FP32, chunk=4)
    raw = 0
    for shape, dtype in layout.values():
        count = 1
        for extent in shape:
            count *= extent
        raw += count * dtype.itemsize
    total = workspace_bytes(layout)
    assert total % 256 == 0 and raw <= total < raw + 256 * len(layout)
    smaller = workspace_bytes(workspace_layout(problem, Tile(4, 4), DType.FP16, DType.FP32, 2))
    assert smaller < total
    assert workspace_bytes({"a": ((1,), DType.FP16)}) == 256


def test_largest_split_keeps_indices_in_31_bits():
    problem = Problem(N=4096, C=64, H=256, W=256, K=64, pad_h=1, pad_w=1, dtype=DType.FP16)
    tile = Tile(2, 2)
    split = largest_split(problem, tile, None, DType.FP16, DType.FP32)
    assert 1 <= split < problem.N
    picks = default_stage_specs(problem, tile)
    for spec in picks.values():
        stage_launch(spec, problem.with_batch(split))
    with pytest.raises(Refused, match="index_past_31_bits_chunk"):
        stage_launch(picks[Stage.INPUT], problem.with_batch(2 * split + 2))
    small = Problem(N=3, C=8, H=8, W=8, K=8, pad_h=1, pad_w=1)
    assert largest_split(small, tile, None, DType.FP32, DType.FP32) == 3


@pytest.mark.parametrize("limit_mb", [1, 3, 10, 40])
def test_largest_split_is_the_largest_that_fits_the_workspace(limit_mb):
    problem = Problem(N=100, C=64, H=32, W=32, K=64, pad_h=1, pad_w=1, dtype=DType.FP16)
    tile, limit = Tile(4, 4), limit_mb << 20

    def size(chunk):
        return workspace_bytes(workspace_layout(problem, tile, DType.FP16, DType.FP32, chunk))

    split = largest_split(problem, tile, limit, DType.FP16, DType.FP32)
    assert split == 1 or size(split) <= limit
    assert split == problem.N or size(split + 1) > limit


def test_index_limit_matches_magic_range():
    assert INDEX_LIMIT == 1 << 31


def test_k4_tile_scale_flag():
    problem = Problem(N=1, C=8, H=6, W=6, K=8, dtype=DType.FP32)
    spec = RtOutputSpec(io="fp32")
    assert stage_launch(spec, problem).kernargs["has_tile_scale"] == 1
    assert stage_launch(spec, problem, tile_scale=False).kernargs["has_tile_scale"] == 0


@pytest.mark.parametrize(
    "fields, rule",
    [
        (dict(R=5, S=5), "not_3x3"),
        (dict(R=1, S=3), "not_3x3"),
        (dict(stride_h=2, stride_w=2), "stride_not_1"),
        (dict(C=12, groups=8, K=16), "groups_not_dividing_c"),
        (dict(C=16, groups=8, K=12), "groups_not_dividing_k"),
        (dict(C=2**16, K=2**16, H=8, W=8), "index_past_31_bits"),
    ],
)
@pytest.mark.parametrize("spec", _KERNARG_SPECS, ids=lambda s: s.name)
def test_stage_launch_refuses_the_problem_rules(spec, fields, rule):
    problem = Problem(**{**dict(N=1, C=16, H=12, W=12, K=16, dtype=spec.io), **fields})
    with pytest.raises(Refused) as err:
        stage_launch(spec, problem)
    assert err.value.rule == rule


def test_a_launch_that_fits_is_kept_per_spec_problem_and_rule_book():
    """The pick and the plan's steps launch the same specs: the second call returns the same
    Launch; another batch is computed anew, and so is every call after the rule book is
    reloaded; a spec that does not fit raises each time."""
    from wino import refusals

    problem = Problem(N=1, C=64, H=8, W=8, K=64, pad_h=1, pad_w=1)
    spec = default_stage_specs(problem, Tile(4, 4))[Stage.INPUT]
    first = stage_launch(spec, problem)
    assert stage_launch(spec, problem) is first
    bigger = stage_launch(spec, problem.with_batch(4))
    assert bigger is not first and bigger.grid != first.grid
    refusals.rule_book.cache_clear()
    again = stage_launch(spec, problem)
    assert again is not first and again == first
    odd = Problem(N=1, C=6, H=8, W=8, K=8, pad_h=1, pad_w=1)  # C not a multiple of vec
    wide = replace(spec, vec=8)
    for _ in range(2):
        with pytest.raises(Refused):
            stage_launch(wide, odd)


def test_a_tile_grids_counts_are_its_fields():
    """``TileGrid.counts`` (what a launch's kernargs read) is ``dataclasses.asdict``'s view."""
    from dataclasses import asdict

    problem = Problem(N=3, C=8, H=13, W=9, K=8, pad_h=1, pad_w=1, dil_h=2)
    for tile in TILES:
        tg = TileGrid.of(problem, tile)
        assert tg.counts() == asdict(tg)
