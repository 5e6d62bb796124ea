"""K2's streamed transform (axis stream = 1): one row of bins at a time from only the window
rows it reads. On the host it computes the same sums in the same order as the held-window
transform, so V, the tile scales and y are bit-identical (the C target keeps FMA contraction
off), for the fused and split prescales, odd extents, dilation and groups, over poisoned
buffers; the rules keep it to the register path, vec <= 4 and tiles of at most 4 rows."""

from __future__ import annotations

import numpy as np
import pytest

from tests import host_cache
from tests import runtime_fixtures as rf
from wino.codegen.transforms import apply_2d, apply_2d_rows, tile_matrices
from wino.pick import default_stage_specs
from wino.problem import Problem
from wino.refusals import Refused, check_spec
from wino.runtime import dispatch
from wino.specs import RtInputSpec
from wino.vocab import K2Path, Prescale, Stage, Tile

TILES = (Tile(2, 2), Tile(4, 4), Tile(4, 2), Tile(2, 4))
PROBLEMS = {
    "odd": dict(N=2, C=16, H=9, W=11, K=8, pad_h=1, pad_w=1),
    "dilated": dict(N=1, C=8, H=13, W=12, K=4, pad_h=2, pad_w=1, dil_h=2, dil_w=3),
    "groups": dict(N=1, C=16, H=7, W=10, K=8, pad_h=1, pad_w=0, groups=2),
}
CASES = [
    (label, tile, dtype, prescale)
    for label in PROBLEMS
    for tile in TILES
    for dtype in ("fp16", "bf16")
    for prescale in (Prescale.FUSED, Prescale.SPLIT)
]


def _specs(label: str, tile: Tile, dtype: str, prescale: Prescale, stream: int) -> dict:
    problem = Problem(**PROBLEMS[label], dtype=dtype)
    specs = default_stage_specs(problem, tile)
    k2 = specs[Stage.INPUT].replace(
        vec=4, block=64, prescale=prescale, extra={"stream": 1} if stream else {}
    )
    return rf.with_input(specs, k2, problem)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("k2-stream")
    specs = set()
    for case in CASES:
        for stream in (0, 1):
            specs |= set(_specs(*case, stream).values())
    host_cache.build(specs, root)
    return root


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_streamed_k2_is_bit_identical_to_the_held_window(root, case):
    label, tile, dtype, prescale = case
    problem = Problem(**PROBLEMS[label], dtype=dtype)
    x, w = rf.inputs(problem, np.random.default_rng(len(label) + tile.bins))
    outs = []
    for stream in (0, 1):
        specs = _specs(*case, stream)
        plan = dispatch(problem, target="c", tile=tile, cache_root=root, specs=specs)
        assert plan.specs[Stage.INPUT].stream == stream
        outs.append(rf.written_run(plan, x, w))
    for held, streamed in zip(*outs, strict=True):
        assert np.array_equal(held, streamed)


def test_rows_split_the_held_transform():
    """apply_2d_rows is apply_2d's statements regrouped per row of bins (same sums, same
    order), and each row names exactly the window rows its Bt row reads."""
    left, right = tile_matrices(4, 4)["input"]

    def src(a, b):
        return f"w[{a}][{b}]"

    rows = apply_2d_rows(left, right, src, lambda i, j: f"o[{i}][{j}]", "t")
    held = apply_2d(left, right, src, lambda i, j: f"o[{i}][{j}]", "t")
    assert sorted(line for _, lines in rows for line in lines) == sorted(held)
    assert [used for used, _ in rows] == [(0, 2, 4), *[(1, 2, 3, 4)] * 4, (1, 3, 5)]


@pytest.mark.parametrize(
    "change, rule",
    [
        (dict(tile=Tile(6, 4)), "streamed_registers"),
        (dict(vec=8), "streamed_registers"),
        (dict(path=K2Path.LDS, lds_lanes=16, lds_width=4, block=64), "stream_not_on_lds_path"),
    ],
)
def test_streamed_refusals(change, rule):
    base = RtInputSpec(vec=4, block=64, prescale=Prescale.FUSED, extra={"stream": 1})
    check_spec(base)
    spec = base.replace(**change)
    if spec.path is K2Path.LDS:
        spec = spec.replace(prescale=Prescale.SPLIT)
    with pytest.raises(Refused) as info:
        check_spec(spec)
    assert info.value.rule == rule
