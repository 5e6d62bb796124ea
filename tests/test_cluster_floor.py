"""scripts/cluster_floor.py's host side: the 6-CTA cluster geometry of a layer, the bytes its
skeleton moves, and the per-CTA checksum its reads of the copied bytes must give."""

from __future__ import annotations

import numpy as np
import pytest

from wino.problem import Problem
from wino.vocab import DType


@pytest.fixture(scope="module")
def floor(load_script):
    return load_script("cluster_floor")


def _layer(n, c, hw, k):
    return Problem(N=n, C=c, H=hw, W=hw, K=k, pad_h=1, pad_w=1, dtype=DType.FP16)


def test_a_large_image_is_blocked_by_whole_tile_rows_with_their_halo(floor):
    g = floor.geometry(_layer(16, 256, 56, 256), tiles=56, kb=128)
    assert (g.tiles, g.kb, g.channel_blocks) == (56, 128, 2)  # 4 tile rows of 14
    assert g.tile_blocks == 16 * 4  # 14 tile rows an image: 4 blocks, the last half full
    assert g.region == (4 * 4 + 2) * 56 * 2  # 18 input rows of 56 fp16 values
    assert g.ctas == 6 * 64 * 2
    assert (g.chunk, g.stages) == (8, 4)  # 4 slots of 16 channels (232.5 KiB) do not fit
    assert g.shared <= floor.SHARED_LIMIT < floor.Geometry(**{**vars(g), "chunk": 16}).shared
    assert g.part == 8 * 2016 // 6  # 2688: each CTA multicasts a sixth of a chunk's region
    assert g.accumulators == 6 * 56 * 128 // 256


def test_small_images_are_blocked_whole(floor):
    g = floor.geometry(_layer(64, 512, 7, 512), tiles=64, kb=64)
    assert (g.images, g.tiles, g.tile_blocks) == (16, 64, 4)  # 2 x 2 tiles an image
    assert g.region == 16 * 7 * 7 * 2  # 1568: a multiple of 16, the bulk copy's unit
    g = floor.geometry(_layer(3, 256, 14, 256), tiles=64, kb=64)
    assert (g.images, g.tile_blocks) == (4, 1)  # 3 images: one block, its fourth image empty


def test_what_does_not_fit_is_refused_with_the_reason(floor):
    with pytest.raises(ValueError, match="kb 96 does not divide K 256"):
        floor.geometry(_layer(16, 256, 56, 256), tiles=56, kb=96)
    with pytest.raises(ValueError, match="hold no whole tile row"):
        floor.geometry(_layer(1, 256, 224, 256), tiles=32, kb=64)  # 56 tiles a row
    with pytest.raises(ValueError, match="no chunk"):
        floor.geometry(_layer(1, 256, 224, 256), tiles=1000, kb=256)


def test_the_traffic_counts_every_copy_and_read(floor):
    g = floor.geometry(_layer(16, 256, 56, 256), tiles=56, kb=128)
    chunk = 2 * (8 * 2016 + 6 * 8 * 128 * 2 + 6 * 56 * 8 * 2)  # written and read once
    assert floor.shared_traffic(g) == 768 * (32 * chunk + 2 * 4 * 56 * 128 * 4)
    region_once_a_cluster = 128 * 256 * 2016
    u_once_a_cta = 768 * 6 * 256 * 128 * 2
    assert floor.l2_traffic(g) == region_once_a_cluster + u_once_a_cta + 768 * g.y_bytes
    # 36 bins x 56 tiles x 64 blocks x 256 x 256 multiply-adds at 1 TFLOP/s
    assert floor.mma_floor_us(g, 1.0) == pytest.approx(2 * 36 * 56 * 64 * 256 * 256 / 1e6)


def test_the_expected_checksum_is_each_cta_s_region_and_u_column(floor):
    g = floor.geometry(_layer(2, 256, 14, 128), tiles=16, kb=64)  # 2 blocks x 2 channel blocks
    rng = np.random.default_rng(3)
    xr = rng.integers(0, 2**32, g.tile_blocks * 256 * g.region // 4, dtype=np.uint64)
    u = rng.integers(0, 2**32, 2 * 36 * 256 * 64 // 2, dtype=np.uint64)
    xr, u = xr.astype(np.uint32), u.astype(np.uint32)
    seen = floor.expected_seen(g, xr, u)
    assert seen.shape == (g.ctas,)
    regions = xr.reshape(g.tile_blocks, -1)
    columns = u.reshape(g.channel_blocks, 6, 256, 6, 64 // 2)  # [kb][j][C][i][Kb] 16-bit pairs
    for cta in range(g.ctas):
        cluster, me = divmod(cta, 6)
        tb, kb = divmod(cluster, g.channel_blocks)
        words = np.concatenate([regions[tb], columns[kb, me].ravel()])
        assert seen[cta] == np.bitwise_xor.reduce(words)


def test_the_kernel_source_carries_the_geometry(floor):
    g = floor.geometry(_layer(16, 256, 56, 256), tiles=56, kb=128)
    text = floor.source(g)
    assert "#define REGION 2016" in text and "#define CHUNKS 32" in text
    assert "__cluster_dims__(CL, 1, 1)" in text and ".multicast::cluster" in text


def test_an_ablation_copies_and_checks_only_its_parts(floor):
    g = floor.geometry(_layer(2, 256, 14, 128), tiles=16, kb=64)
    xr = np.arange(g.tile_blocks * 256 * g.region // 4, dtype=np.uint32)
    u = np.arange(2 * 36 * 256 * 64 // 2, dtype=np.uint32) * 7
    no_region = floor.expected_seen(g, xr, u, floor.ALL & ~floor.REGION)
    no_u = floor.expected_seen(g, xr, u, floor.ALL & ~floor.U)
    assert (no_region ^ no_u == floor.expected_seen(g, xr, u)).all()
    assert not floor.expected_seen(g, xr, u, floor.V | floor.FOLD_Y).any()
    text = floor.source(g, floor.ABLATIONS["no V"])
    assert "#define PARTS 11 " in text
