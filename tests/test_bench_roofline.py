"""Roofline arithmetic on a case checked by hand, and the rates the host measures."""

from __future__ import annotations

import pytest

from tests import host_cache
from wino.bench.device import CopyShape
from wino.bench.roofline import (
    Traffic,
    bandwidth_gbs,
    bound_us,
    fused_bound_us,
    fused_flops,
    fused_hbm_bytes,
    fused_l2_bytes,
    gemm_flops,
    stage_bytes,
    stage_traffic,
)
from wino.pick import default_fused_specs, default_stage_specs
from wino.problem import Problem
from wino.runtime import dispatch
from wino.vocab import DType, Stage, Target, Tile

# N=2 C=8 6x6 K=16 pad 1, fp16, F2x2: Ho = Wo = 6, 3 x 3 tiles per image, P = 18, A = 16.
PROBLEM = Problem(N=2, C=8, H=6, W=6, K=16, pad_h=1, pad_w=1, dtype=DType.FP16)
TILE = Tile(2, 2)
X, Y, W = 2 * 6 * 6 * 8 * 2, 2 * 6 * 6 * 16 * 2, 16 * 9 * 8 * 2  # 1152, 2304, 2304 bytes
U, FS = 16 * 16 * 8 * 2, 16 * 4  # 4096, 64 (fp16 storage, fp32 filter scales)
V, TS, M = 16 * 18 * 8 * 2, 18 * 4, 16 * 18 * 16 * 4  # 4608, 72, 18432 (fp32 accumulators)
#: fp16 storage with the fused prescale (the GPUs' pick; the c target's own stores fp32), forced.
SPECS = default_stage_specs(PROBLEM, TILE, target=Target.CUDA)


#: The fused plans: PROBLEM's (F2x2 p32 k32 with K2a's scales: one tile block, one channel
#: block) and a held one with its own scales, (N=2 C=16 18x18 K=80, F4x4 p32 k64): 5 x 5 tiles an
#: image, P = 50 in two tile blocks, K = 80 in two channel blocks of 64.
FUSED = default_fused_specs(PROBLEM, TILE)
HELD_PROBLEM = Problem(N=2, C=16, H=18, W=18, K=80, pad_h=1, pad_w=1, dtype=DType.FP16)
HELD = default_fused_specs(HELD_PROBLEM, Tile(4, 4))


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("roofline-cache")
    host_cache.build({*SPECS.values(), *FUSED.values(), *HELD.values()}, root)
    return root


def test_bytes_per_stage_by_hand(root):
    plan = dispatch(PROBLEM, target="c", tile=TILE, cache_root=root, specs=SPECS)
    assert plan.xdtype is DType.FP16 and Stage.PRESCALE not in plan.specs  # fused prescale
    assert stage_bytes(plan) == {
        Stage.FILTER: W + U + FS,  # 6464
        Stage.INPUT: X + V + TS,  # 5832
        Stage.GEMM: V + U + M,  # 27136
        Stage.OUTPUT: M + Y + FS + TS,  # 20872
    }
    assert gemm_flops(plan) == 2 * 16 * 18 * 16 * 8 == 73728


def test_reads_and_writes_per_stage_by_hand(root):
    """The fused prescale's K2 writes the tile scales; K4 reads them with M and fs."""
    plan = dispatch(PROBLEM, target="c", tile=TILE, cache_root=root, specs=SPECS)
    traffic = stage_traffic(plan)
    assert traffic == {
        Stage.FILTER: Traffic(W, U + FS),
        Stage.INPUT: Traffic(X, V + TS),
        Stage.GEMM: Traffic(V + U, M),
        Stage.OUTPUT: Traffic(M + FS + TS, Y),
    }
    assert {s: t.total for s, t in traffic.items()} == stage_bytes(plan)


def test_batch_chunks_read_u_once_per_chunk(root):
    plan = dispatch(PROBLEM, target="c", tile=TILE, cache_root=root, batch_split=1, specs=SPECS)
    assert plan.chunks == [(0, 1), (1, 1)]
    moved = stage_bytes(plan)
    assert moved[Stage.GEMM] == V + 2 * U + M  # U and fs are read by every chunk
    assert moved[Stage.INPUT] == X + V + TS and moved[Stage.OUTPUT] == M + Y + 2 * FS + TS
    assert gemm_flops(plan) == 73728


def test_bound_is_bytes_at_the_copy_rate_plus_flops_at_the_gemm_rate(root):
    plan = dispatch(PROBLEM, target="c", tile=TILE, cache_root=root, specs=SPECS)
    total = 6464 + 5832 + 27136 + 20872  # 60304 bytes
    # 60304 B at 100 GB/s = 0.60304 us; 73728 FLOP at 1 TFLOP/s = 0.073728 us
    assert bound_us(plan, 100.0, 1.0) == pytest.approx(0.60304 + 0.073728, rel=1e-12)
    assert total / 100e9 * 1e6 == pytest.approx(0.60304)


def test_bandwidth():
    assert bandwidth_gbs(4_000, 2.0) == pytest.approx(2.0)  # 4 kB in 2 us = 2 GB/s
    assert bandwidth_gbs(1, 0.0) == 0.0


def test_host_rates_are_measured_once(root):
    from wino.bench.device import open_device

    device = open_device(Target.C, root)
    copy = device.copy_gbs()
    assert copy > 0 and device.copy_gbs() == copy  # cached: the same number
    l2 = device.l2_gbs()
    assert l2 > 0 and device.l2_gbs() == l2
    rate = device.gemm_tflops(DType.FP32, DType.FP32)
    assert rate > 0 and device.gemm_tflops(DType.FP32, DType.FP32) == rate
    mma = device.mma_tflops(DType.FP32, DType.FP32)
    assert mma > 0 and device.mma_tflops(DType.FP32, DType.FP32) == mma
    shape = CopyShape(1 << 20, 3 << 20, "read")
    copy_us = device.stage_copy_us(shape)
    assert copy_us > 0 and device.stage_copy_us(shape) == copy_us
    assert device.stage_copy_us(CopyShape(3 << 20, 1 << 20, "write")) > 0  # reads past writes
    assert device.stage_copy_us(CopyShape(2 << 20, 1 << 20, None)) > 0  # K3's: no operand side


def test_a_copy_shape_names_its_rotating_side():
    with pytest.raises(ValueError, match=r"rotating: 'x', expected 'read', 'write' or None"):
        CopyShape(16, 16, "x")
    with pytest.raises(ValueError, match=r"sets: 4 with no rotating side, expected 1"):
        CopyShape(16, 16, None, 4)


def test_fused_roofline_by_hand(root):
    """x, U, fs, y once through memory (and x, ts twice more where K2a runs); U through the L2
    once per tile block and every tile's window once per channel block; the largest time wins."""
    plan = dispatch(PROBLEM, target="c", tile=TILE, cache_root=root, specs=FUSED)
    kf = plan.specs[Stage.FUSED]
    assert (kf.tiles, kf.kblock, Stage.PRESCALE in plan.specs) == (32, 32, True)
    assert fused_hbm_bytes(plan) == X + U + FS + Y + X + 2 * TS == 8912
    assert fused_l2_bytes(plan) == U + 18 * 16 * 8 * 2 == 8704  # one tile block, one k block
    assert fused_flops(plan) == 73728

    held = dispatch(HELD_PROBLEM, target="c", cache_root=root, specs=HELD)
    kf = held.specs[Stage.FUSED]
    assert (kf.tiles, kf.kblock, kf.hold, Stage.PRESCALE in held.specs) == (32, 64, 64, False)
    u = 36 * 80 * 16 * 2  # 92160
    x, y, fs = 2 * 18 * 18 * 16 * 2, 2 * 18 * 18 * 80 * 2, 80 * 4  # 20736, 103680, 320
    assert fused_hbm_bytes(held) == x + u + fs + y == 216896
    assert fused_l2_bytes(held) == 2 * u + 50 * 36 * 16 * 2 * 2 == 299520
    assert fused_flops(held) == 2 * 36 * 50 * 80 * 16 == 4608000
    # 216896 B at 100 GB/s = 2.16896 us; 4.608 MFLOP at 1 TFLOP/s = 4.608 us; 299520 B at
    # 200 GB/s = 1.4976 us: each term the largest in turn
    assert fused_bound_us(held, 100.0, 1.0, 200.0) == pytest.approx(4.608)
    assert fused_bound_us(held, 10.0, 1.0, 200.0) == pytest.approx(21.6896)
    assert fused_bound_us(held, 100.0, 10.0, 20.0) == pytest.approx(14.976)
