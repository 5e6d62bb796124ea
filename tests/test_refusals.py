"""Refusal rules: every rule of grids/refusals.yaml fires on a spec or problem built to break it,
with its id and its message; conditions are a safe, whitelisted expression language."""

from __future__ import annotations

import copy

import pytest

from wino import config, refusals
from wino.config import ConfigError
from wino.launch import stage_launch
from wino.problem import Problem
from wino.refusals import (
    Refused,
    Rule,
    Scope,
    check_problem,
    check_spec,
    problem_namespace,
    rule_book,
    rules,
    spec_namespace,
    spec_refusal,
    spec_refusals,
)
from wino.specs import RtFilterSpec, RtFusedSpec, RtInputSpec, RtOutputSpec, RtPrescaleSpec
from wino.vocab import TILES, DType, Prescale, Target, Tile

LDS = dict(path="lds", lds_lanes=16, lds_width=4, block=64, prescale="split")
# F4x4 fp16, 27 KB, streamed (held, its vec-8 window is past the register budget)
ROWS = dict(path="ldsrow", vec=8, lds_lanes=8, lds_width=8, block=64, extra={"stream": 1})
P = rule_book()[0]  # the file's params: messages quote them

#: spec rule id -> (a spec that breaks that rule and no earlier one, a fragment of the message)
SPEC_BREAKERS = {
    "block_too_large": (
        RtFilterSpec(block=2048),
        f"block 2048 exceeds {P['max_block']} threads, the most one workgroup may hold",
    ),
    "block_not_warp_multiple": (
        RtOutputSpec(block=100),
        f"block 100 is not a positive multiple of the {P['warp']}-thread warp",
    ),
    "filter_rows_below_one": (
        RtFilterSpec(rows=0),
        "filter rows 0 < 1: a K1 workgroup must transform at least one",
    ),
    "block_not_pow2_reduction": (
        RtPrescaleSpec(block=384),
        "block 384 is not a power of two: the workgroup's max reduction",
    ),
    "filter_shared_over_limit": (
        RtFilterSpec(block=256, rows=64),
        f"K1 block 256 x rows 64 holds that many fp32 row maxima in shared memory (the host "
        f"target: on its stack), over the {P['lds_bytes_limit']}-byte limit",
    ),
    "window_registers": (
        RtOutputSpec(tile="F6x6", vec=8),
        "F6x6 at vec 8 holds 64x8 fp32 values per thread, past the "
        f"{P['max_window_floats']}-register budget",
    ),
    "input_window_registers": (
        RtInputSpec(tile="F4x4", vec=8),
        "F4x4 at vec 8: the input window of 36x8 fp32 values per thread "
        f"is past the {P['max_input_window_floats']}-value budget",
    ),
    "transformed_dtype_unsupported": (
        RtInputSpec(io="fp32", xdtype="fp16"),
        "io fp32 with transformed storage fp16 is not supported",
    ),
    "fp16_storage_needs_prescale": (
        RtInputSpec(prescale="none"),
        "fp16 transformed storage without a tile scale can overflow",
    ),
    "reg_with_lds_knobs": (
        RtInputSpec(lds_lanes=16),
        "the register path takes no LDS knobs (lds_lanes 16, lds_width 0)",
    ),
    "lds_lanes_not_pow2": (
        RtInputSpec(**{**LDS, "lds_lanes": 24, "block": 96}),
        "LDS lanes 24 is not a power of two",
    ),
    "lds_zero_width": (RtInputSpec(**{**LDS, "lds_width": 0}), "LDS region width 0 holds no tile"),
    "lds_block_mismatch": (
        RtInputSpec(**{**LDS, "block": 256}),
        "LDS path block 256 must equal lds_lanes x lds_width = 16x4",
    ),
    "lds_bytes_over_limit": (
        RtInputSpec(tile="F6x6", vec=2, **{**LDS, "lds_lanes": 32, "block": 128}),
        "F6x6 LDS region of 4 tiles x 32 lanes x vec 2 needs 53248 bytes, "
        f"over the {P['lds_bytes_limit']}-byte",
    ),
    "lds_with_fused": (
        RtInputSpec(**{**LDS, "prescale": "fused"}),
        "the LDS-region path cannot fuse the prescale",
    ),
    "fused_block_not_pow2": (
        RtInputSpec(block=384),
        "fused prescale with block 384: the max reduction across the tile's channel lanes",
    ),
    "fused_wide_tile": (
        RtInputSpec(tile="F6x6", block=1024),
        "F6x6 has 64 bins: its fused workgroup of 1024 threads runs out of "
        f"registers past {P['fused_wide_block']}",
    ),
    "fused_block_registers": (
        RtInputSpec(tile="F4x4", vec=2, block=512),
        "F4x4 at vec 2: a fused workgroup of 512 threads leaves 36x2 "
        "window values too few registers",
    ),
    "fused_io_fp32": (
        RtFusedSpec(io="fp32", mdtype="fp32", prescale="none"),
        "fp32 io has no fused kernel",
    ),
    "fused_mma_dtype": (
        RtFusedSpec(io="fp16", mdtype="bf16", prescale="none"),
        "io fp16 with MMA operand dtype bf16",
    ),
    "fused_fp16_needs_prescale": (RtFusedSpec(prescale="none"), "use prescale split"),
    "fused_prescale_needs_fp16": (
        RtFusedSpec(io="bf16", mdtype="bf16", prescale="split"),
        "prescale split only serves fp16 MMA operands",
    ),
    "fused_tiles_not_mma_m": (RtFusedSpec(tiles=24), "tiles per block 24"),
    "fused_kblock_not_mma_n": (RtFusedSpec(kblock=12), "channels per block 12"),
    "fused_cchunk_not_mma_k": (RtFusedSpec(cchunk=8), "channel chunk 8"),
    "fused_block_too_large": (RtFusedSpec(warps=33), "33 warps make a block of 1056"),
    "fused_bins_not_even": (RtFusedSpec(warps=7), "its 36 bins do not split evenly over 7 warps"),
    "fused_accumulators": (RtFusedSpec(kblock=64), "192 fp32 accumulators per thread"),
    "fused_shared_memory": (
        RtFusedSpec(tile="F6x6", tiles=32, kblock=8, cchunk=128, warps=16),
        "needs 697216 bytes of shared memory",
    ),
    "fused_stages_unsupported": (RtFusedSpec(stages=3), "pipeline stages 3"),
    "fused_hold_m_range": (
        RtFusedSpec(tile="F6x6", tiles=16, kblock=32, cchunk=32, warps=8, extra={"hold": 192}),
        "M sums up to hold = 192 channels' products of up to 349.1",
    ),
    "fused_hold_not_chunks": (RtFusedSpec(cchunk=32, extra={"hold": 48}), "hold 48: the held"),
    "fused_hold_needs_fp16": (
        RtFusedSpec(io="bf16", mdtype="bf16", prescale="none", cchunk=32, extra={"hold": 64}),
        "(mdtype bf16)",
    ),
    "fused_tcx_needs_hold": (RtFusedSpec(extra={"tcx": 1}), "tcx 1: the transforms on the MMA"),
    "fused_tcx_inexact": (
        RtFusedSpec(
            tile="F6x6",
            io="bf16",
            mdtype="fp16",
            prescale="split",
            tiles=16,
            kblock=32,
            cchunk=32,
            warps=8,
            extra={"hold": 64, "tcx": 1},
        ),
        "(F6x6's input transform in bf16)",
    ),
    "xbits_invalid": (RtFusedSpec(extra={"xbits": 8}), "xbits 8: the input transform"),
    "fused_xbits_needs_scaled_fp16": (
        RtFusedSpec(io="bf16", extra={"xbits": 16}),
        "needs fp16 io (io bf16",
    ),
    "obits_invalid": (RtFusedSpec(extra={"obits": 8}), "obits 8: the output transform"),
    "fused_obits_needs_held_fp16": (
        RtFusedSpec(extra={"obits": 16}),
        "(hold 0, tcx 0: the held kernel's transform on the CUDA cores)",
    ),
    "fused_hold_kblock": (
        RtFusedSpec(kblock=128, cchunk=32, extra={"hold": 64}),
        "kblock 128 is past hold 64",
    ),
    "fused_hold_shape": (RtFusedSpec(extra={"hold": 64}), "(stages 1, cchunk 16)"),
    "fused_chain_needs_held": (
        RtFusedSpec(extra={"chain": 4}),
        "chain 4: the pipelined schedule runs 1 to 64 tile blocks",
    ),
    "fused_kpass_invalid": (
        RtFusedSpec(kblock=64, cchunk=32, extra={"hold": 64, "kpass": 24}),
        "kpass 24: the held schedule's passes",
    ),
    "fused_qsplit_invalid": (
        RtFusedSpec(extra={"qsplit": 2}),
        "qsplit 2: the held schedule's passes run each on its own warp (1) only where",
    ),
    "fused_qsplit_slots": (
        RtFusedSpec(
            tiles=32, kblock=64, cchunk=32, warps=20, extra={"hold": 64, "kpass": 32, "qsplit": 1}
        ),
        "qsplit 1: the 20 warps take the kblock / kpass = 64 / 32 passes",
    ),
    "fused_xstage_invalid": (
        RtFusedSpec(extra={"xstage": 2}),
        "xstage 2: the windows staged in V by async copies (1) serve",
    ),
    "fused_xstage_items": (
        RtFusedSpec(tiles=32, kblock=64, cchunk=32, warps=12, extra={"hold": 64, "xstage": 1}),
        "xstage 1: a thread takes at most one (tile, channel pair) of a 32-channel step, 32 tiles",
    ),
    "fused_wgmma_groups": (
        RtFusedSpec(tiles=32, kblock=64, cchunk=32, warps=20, extra={"hold": 64, "wgmma": 1}),
        "warps must be a multiple of 4 whose quarter divides the 36 bins (20 warps)",
    ),
    "fused_wgmma_invalid": (
        RtFusedSpec(extra={"wgmma": 3}),
        "wgmma 3: the held schedule's MMA is per warp (0: mma.sync) or per warpgroup",
    ),
    "fused_wgmma_needs_held64": (
        RtFusedSpec(
            tiles=32, kblock=64, cchunk=32, warps=16, extra={"hold": 64, "wgmma": 1, "kpass": 32}
        ),
        "(kblock 64, one pass: kpass 0, kpass 32)",
    ),
    "fused_tsfix_range": (
        RtFusedSpec(extra={"tsfix": 1}),
        "tsfix 1: the fixed tile scale is 2^-tsfix with the band [2^(tsfix-12), 2^tsfix)",
    ),
    "fused_tsfix_needs_own_scales": (
        RtFusedSpec(extra={"tsfix": 6}),
        "(prescale fused, hold > 0, tcx 0, chain 0: prescale split, hold 0, tcx 0, chain 0)",
    ),
    "fused_wgmma_not_amd": (  # the HIP grid's held kernel's size (F2x2, 16 tiles, 8 warps)
        RtFusedSpec(
            Tile(2, 2),
            tiles=16,
            kblock=64,
            cchunk=32,
            warps=8,
            prescale=Prescale.SPLIT,
            extra={"hold": 64, "wgmma": 1},
        ),
        "the HIP targets have no such instruction",
    ),
    "fused_lds_over_amd_limit": (
        RtFusedSpec(tiles=32, kblock=64, cchunk=32, warps=18, extra={"hold": 64, "kpass": 32}),
        "needs 166784 bytes of shared memory, over the 65536 bytes of LDS a workgroup may have",
    ),
    "fused_min_blocks_fit": (
        RtFusedSpec(tiles=32, kblock=64, cchunk=32, warps=18, extra={"hold": 64, "min_blocks": 2}),
        "min_blocks 2: at 166784 bytes of shared memory and 576 threads a block, 1 block(s) fit",
    ),
    "stream_not_a_flag": (
        RtInputSpec(vec=4, block=64, extra={"stream": 2}),
        "stream 2: K2's transform either holds the window (0)",
    ),
    "streamed_registers": (
        RtInputSpec(vec=8, block=64, extra={"stream": 1}),
        "F4x4 at vec 8 streamed",
    ),
    "k2_xbits_needs_held_pairs": (
        RtInputSpec(
            vec=4,
            block=128,
            path="ldsrow",
            lds_lanes=64,
            lds_width=4,
            prescale="fused",
            extra={"xbits": 16},
        ),
        "at vec 2 (vec 4: one pair per window position)",
    ),
    "stream_not_on_lds_path": (
        RtInputSpec(
            vec=4,
            block=64,
            path="lds",
            lds_lanes=16,
            lds_width=4,
            prescale="split",
            extra={"stream": 1},
        ),
        "stream 1 with path lds",
    ),
    "m_dtype_unsupported": (
        RtOutputSpec(io="fp32", accdtype="fp16"),
        "M stored in fp16 with io fp32 is not supported",
    ),
    "ldsrow_no_lanes": (
        RtInputSpec(**{**ROWS, "lds_width": 0}),
        "LDS-rows path with 8 lanes x 0 tiles holds no channel or no tile",
    ),
    "ldsrow_items_not_warp_multiple": (
        RtInputSpec(**{**ROWS, "lds_width": 3}),
        "lds_lanes x lds_width = 8x3 items per bin row is not a multiple of the 32-thread warp",
    ),
    "ldsrow_chunk_not_16_bytes": (
        RtInputSpec(**{**ROWS, "vec": 1, "lds_lanes": 4}),
        "a chunk of 4 lanes x vec 1 channels of fp16 is not whole 16-byte copies",
    ),
    "ldsrow_bytes_over_limit": (
        RtInputSpec(**{**ROWS, "lds_lanes": 32}),
        f"F4x4 LDS-rows region of 8 tiles x 32 lanes x vec 8 needs 108936 bytes, over the "
        f"{P['lds_bytes_limit']}-byte",
    ),
}

#: spec rule id -> the change that repairs its breaking spec (and breaks nothing else)
SPEC_REPAIRS = {
    "block_too_large": dict(block=1024),
    "block_not_warp_multiple": dict(block=96),
    "filter_rows_below_one": dict(rows=1),
    "block_not_pow2_reduction": dict(block=512),
    "filter_shared_over_limit": dict(rows=48),
    "window_registers": dict(vec=4),
    "input_window_registers": dict(vec=4),
    "transformed_dtype_unsupported": dict(xdtype="fp32", prescale="none"),
    "fp16_storage_needs_prescale": dict(prescale="split"),
    "reg_with_lds_knobs": dict(lds_lanes=0),
    "lds_lanes_not_pow2": dict(lds_lanes=32, lds_width=3),
    "lds_zero_width": dict(lds_width=4),
    "lds_block_mismatch": dict(block=64),
    "lds_bytes_over_limit": dict(lds_lanes=16, block=64),
    "lds_with_fused": dict(prescale="split"),
    "fused_block_not_pow2": dict(prescale="split"),
    "fused_wide_tile": dict(block=512),
    "fused_block_registers": dict(vec=1),
    "fused_io_fp32": dict(io="fp16", mdtype="fp16", prescale="split"),
    "fused_mma_dtype": dict(mdtype="fp16", prescale="split"),
    "fused_fp16_needs_prescale": dict(prescale="split"),
    "fused_prescale_needs_fp16": dict(prescale="none"),
    "fused_tiles_not_mma_m": dict(tiles=32),
    "fused_kblock_not_mma_n": dict(kblock=16),
    "fused_cchunk_not_mma_k": dict(cchunk=16),
    "fused_block_too_large": dict(warps=12),
    "fused_bins_not_even": dict(warps=12),
    "fused_accumulators": dict(kblock=16),
    "fused_shared_memory": dict(cchunk=16),
    "fused_stages_unsupported": dict(stages=1),
    "fused_hold_m_range": dict(extra={"hold": 64}),
    "fused_hold_not_chunks": dict(extra={"hold": 64}),
    "fused_hold_needs_fp16": dict(mdtype="fp16", prescale="split"),
    "fused_tcx_needs_hold": dict(extra={}),
    "fused_tcx_inexact": dict(io="fp16"),
    "xbits_invalid": dict(extra={"xbits": 16}),
    "fused_xbits_needs_scaled_fp16": dict(io="fp16"),
    "obits_invalid": dict(extra={"obits": 32}),
    "fused_obits_needs_held_fp16": dict(extra={}),
    "fused_hold_kblock": dict(kblock=64),
    "fused_hold_shape": dict(cchunk=32),
    "fused_kpass_invalid": dict(extra={"hold": 64, "kpass": 32}),
    "fused_chain_needs_held": dict(extra={}),
    "fused_min_blocks_fit": dict(tiles=16, warps=9, extra={"hold": 64, "min_blocks": 2}),
    # the HIP grid's held kernel: F2x2, 16 tiles x 64 channels, 8 warps (37312 bytes)
    "fused_qsplit_invalid": dict(extra={}),
    "fused_qsplit_slots": dict(warps=24),
    "fused_xstage_invalid": dict(extra={}),
    "fused_xstage_items": dict(tiles=16),
    "fused_wgmma_groups": dict(warps=16),
    "fused_wgmma_invalid": dict(extra={}),
    "fused_wgmma_needs_held64": dict(extra={"hold": 64, "wgmma": 1}),
    "fused_wgmma_not_amd": dict(extra={"hold": 64}),
    "fused_tsfix_range": dict(extra={}),
    "fused_tsfix_needs_own_scales": dict(extra={}),
    "fused_lds_over_amd_limit": dict(
        tile="F2x2", tiles=16, warps=8, prescale="split", extra={"hold": 64}
    ),
    "m_dtype_unsupported": dict(accdtype="fp32"),
    "stream_not_a_flag": dict(extra={"stream": 1}),
    "streamed_registers": dict(vec=4),
    "stream_not_on_lds_path": dict(extra={}),
    "k2_xbits_needs_held_pairs": dict(vec=2),
    "ldsrow_no_lanes": dict(lds_width=8),
    "ldsrow_items_not_warp_multiple": dict(lds_width=4),
    "ldsrow_chunk_not_16_bytes": dict(lds_lanes=8),
    "ldsrow_bytes_over_limit": dict(lds_lanes=8),
}

#: problem rule id -> (a problem that breaks it, a fragment of the message)
PROBLEM_BREAKERS = {
    "not_3x3": (Problem(H=8, W=8, R=1, S=1), "filter 1x1 is not 3x3"),
    "stride_not_1": (Problem(H=9, W=9, stride_h=2, stride_w=2), "stride 2x2: these kernels"),
    "groups_not_dividing_c": (
        Problem(H=4, W=4, C=6, K=8, groups=4),
        "groups 4 does not divide C = 6",
    ),
    "groups_not_dividing_k": (
        Problem(H=4, W=4, C=8, K=6, groups=4),
        "groups 4 does not divide K = 6",
    ),
    "not_forward": (Problem(H=4, W=4, direction=2), "direction -F 2 asks for no forward pass"),
    "index_past_31_bits": (
        Problem(N=1, C=64, H=8192, W=8192, K=64, pad_h=1, pad_w=1),
        "elements in one buffer, past the 31-bit index limit even at a batch split of 1",
    ),
}

_FIT = dict(N=2, C=16, H=8, W=8, K=16, pad_h=1, pad_w=1, dtype=DType.FP16)
#: fit rule id -> (spec, problem, a fragment of the message), through stage_launch
FIT_BREAKERS = {
    "io_dtype_mismatch": (
        RtInputSpec(),
        Problem(**{**_FIT, "dtype": DType.FP32}),
        "kernel io dtype fp16 does not match the problem's fp32",
    ),
    "vec_not_dividing_cg": (
        RtInputSpec(tile="F2x2", vec=8),
        Problem(**{**_FIT, "C": 12}),
        "vec 8 does not divide the channels per group C/G = 12",
    ),
    "vec_not_dividing_c": (
        RtPrescaleSpec(vec=8),
        Problem(**{**_FIT, "C": 12}),
        "vec 8 does not divide C = 12",
    ),
    "vec_not_dividing_kg": (
        RtOutputSpec(vec=4),
        Problem(**{**_FIT, "K": 16, "groups": 8}),
        "vec 4 does not divide the output channels per group K/G = 2",
    ),
    "fp16_m_range": (
        RtOutputSpec(accdtype="fp16"),
        Problem(**{**_FIT, "C": 656, "K": 8}),
        "F4x4 M stored in fp16 with C/G = 656 (tile scales: 1)",
    ),
    "fp16_m_few_channels": (
        RtOutputSpec(accdtype="fp16"),
        Problem(**{**_FIT, "C": 3}),
        "M stored in fp16 with C/G = 3 < 16",
    ),
    "fused_lanes_exceed_block": (
        RtInputSpec(vec=2, block=256),
        Problem(**{**_FIT, "C": 1024}),
        "fused prescale needs all C/vec = 512 channel lanes",
    ),
    "ldsrow_fused_channels": (
        RtInputSpec(**ROWS),
        Problem(**{**_FIT, "C": 128}),
        "stages all C = 128 channels of a tile in one workgroup, more than its 8 lanes x vec 8",
    ),
    "ldsrow_cg_not_16_bytes": (
        RtInputSpec(**{**ROWS, "vec": 4, "lds_lanes": 16}),
        Problem(**{**_FIT, "C": 12, "K": 12, "groups": 3}),
        "C/G = 4 channels of fp16 are not whole units",
    ),
    "index_past_31_bits_chunk": (
        RtOutputSpec(),
        Problem(**{**_FIT, "N": 4096, "H": 256, "W": 256, "C": 8, "K": 64}),
        "a batch chunk of 4096 images needs",
    ),
    "grid_y_too_large": (
        RtInputSpec(vec=4, **LDS),
        Problem(
            **{**_FIT, "N": 1, "H": 3, "W": 3, "pad_h": 0, "pad_w": 0, "C": 64 * 65536 + 64, "K": 1}
        ),
        "the LDS path needs 65537 channel-chunk workgroups along y",
    ),
    "fused_grid_y_too_large": (
        RtFusedSpec(tile="F2x2", tiles=16, kblock=8, cchunk=16, warps=1),
        Problem(**{**_FIT, "N": 1, "H": 3, "W": 3, "C": 65536, "K": 65536, "groups": 65536}),
        "the fused kernel needs 65536 (group, channel block) workgroups along y",
    ),
    "fused_hold_few_channels": (
        RtFusedSpec(tiles=32, kblock=64, cchunk=32, warps=12, extra={"hold": 64}),
        Problem(**{**_FIT, "C": 3}),
        "stores M in fp16: with C/G = 3 < 16 an output sums too few products",
    ),
    "fused_hold_channels": (
        RtFusedSpec(tiles=32, kblock=64, cchunk=32, warps=12, extra={"hold": 64}),
        Problem(**{**_FIT, "C": 96}),
        "keeps V of at most 64 channels in shared memory; C/G = 96 is past it",
    ),
}

BREAKERS = {"spec": SPEC_BREAKERS, "problem": PROBLEM_BREAKERS, "fit": FIT_BREAKERS}


def _yaml_rule_ids(scope: str) -> list[str]:
    return [entry["id"] for entry in config.declared("refusals")[f"{scope}_rules"]]


@pytest.mark.parametrize(
    "scope, rule_id", [(scope, rule_id) for scope in BREAKERS for rule_id in _yaml_rule_ids(scope)]
)
def test_every_rule_in_the_yaml_has_a_breaking_case(scope, rule_id):
    assert rule_id in BREAKERS[scope], (
        f"{scope} rule {rule_id!r} of grids/refusals.yaml has no breaking case in "
        f"tests/test_refusals.py; add one to {scope.upper()}_BREAKERS"
    )


@pytest.mark.parametrize("scope", BREAKERS)
def test_no_breaker_for_a_rule_that_is_gone(scope):
    assert set(BREAKERS[scope]) <= set(_yaml_rule_ids(scope))


@pytest.mark.parametrize("rule_id", SPEC_BREAKERS)
def test_spec_rule_fires(rule_id):
    spec, text = SPEC_BREAKERS[rule_id]
    refusal = spec_refusal(spec)
    assert refusal is not None, f"{spec.name} was not refused"
    assert refusal.rule == rule_id, refusal
    assert text in refusal.message
    with pytest.raises(Refused) as info:
        check_spec(spec)
    assert info.value.rule == rule_id and str(info.value) == f"[{rule_id}] {refusal.message}"


def test_a_rule_with_targets_refuses_on_those_targets_only():
    """``targets`` on a spec rule: input_window_registers (the GPUs' register budget) refuses
    F4x4 at vec 8 on cuda and hip, not on c; with no target every rule applies."""
    (rule,) = [r for r in rules("spec", "k2") if r.id == "input_window_registers"]
    assert rule.targets == (Target.CUDA, Target.HIP)
    assert rule.applies_to(None) and not rule.applies_to(Target.C)
    spec = RtInputSpec(tile=Tile(4, 4), io=DType.FP32, xdtype=DType.FP32, vec=8, block=256)
    spec = spec.replace(prescale=Prescale.SPLIT)
    for target in (None, Target.CUDA, Target.HIP):
        assert spec_refusal(spec, target).rule == "input_window_registers"
        with pytest.raises(Refused, match=r"^\[input_window_registers\]"):
            check_spec(spec, target)
    assert spec_refusal(spec, Target.C) is None
    check_spec(spec, Target.C)
    both = spec_refusals(spec.replace(block=2048), (Target.C, Target.CUDA))
    assert both[Target.C].rule == both[Target.CUDA].rule == "block_too_large"  # first rule


@pytest.mark.parametrize(
    "section, targets",
    [("spec_rules", ["cpu"]), ("spec_rules", []), ("problem_rules", ["c"]), ("fit_rules", ["c"])],
)
def test_rule_targets_are_validated(section, targets):
    """Only spec rules take ``targets`` (fit and problem rules run at dispatch, where the
    plan's target has no say), each a declared target, at least one."""
    data = copy.deepcopy(config.declared("refusals"))
    data[section][0]["targets"] = targets
    with pytest.raises(ConfigError, match=rf"at \$\.{section}\[0\]"):
        config.validate(data, "refusals", "grids/refusals.yaml")


def _rule_targets(rule_id: str) -> tuple[Target, ...]:
    """The targets a spec rule refuses on (every target where it names none)."""
    (rule,) = [r for r in rules("spec") if r.id == rule_id]
    return rule.targets or tuple(Target)


def _accepted_somewhere(spec, targets=tuple(Target)) -> bool:
    return any(spec_refusal(spec, t) is None for t in targets)


@pytest.mark.parametrize("rule_id", SPEC_BREAKERS)
def test_spec_rule_stops_firing_when_repaired(rule_id):
    """The breaking spec differs from an accepted one in the broken knob only (accepted on a
    target the rule applies to: a 64 KiB LDS spec on hip, an sm_90-sized one on cuda)."""
    spec, _ = SPEC_BREAKERS[rule_id]
    repaired = spec.replace(**SPEC_REPAIRS[rule_id])
    assert _accepted_somewhere(repaired, _rule_targets(rule_id))


@pytest.mark.parametrize("rule_id", PROBLEM_BREAKERS)
def test_problem_rule_fires(rule_id):
    problem, text = PROBLEM_BREAKERS[rule_id]
    with pytest.raises(Refused) as info:
        check_problem(problem)
    assert info.value.rule == rule_id and text in info.value.message


@pytest.mark.parametrize("rule_id", FIT_BREAKERS)
def test_fit_rule_fires_through_stage_launch(rule_id):
    spec, problem, text = FIT_BREAKERS[rule_id]
    assert _accepted_somewhere(spec)  # a sound spec: the refusal is about the fit
    check_problem(problem, spec.tile)
    with pytest.raises(Refused) as info:
        stage_launch(spec, problem)
    assert info.value.rule == rule_id and text in info.value.message


@pytest.mark.parametrize("direction", [0, 1, 3])
def test_forward_directions_pass(direction):
    check_problem(Problem(H=4, W=4, direction=direction))


def test_index_limit_is_per_tile():
    """A problem only the largest tiles cannot index is refused for those tiles only."""
    problem = Problem(N=1, C=768, K=768, H=1024, W=1024, pad_h=1, pad_w=1)
    check_problem(problem, Tile(6, 6))  # V: 64 bins x 171^2 tiles x 768 < 2^31
    with pytest.raises(Refused, match="index_past_31_bits"):
        check_problem(problem, Tile(2, 2))  # V: 16 bins x 512^2 tiles x 768 >= 2^31
    with pytest.raises(Refused, match="index_past_31_bits"):
        check_problem(problem)  # no tile: the largest of all tiles


def test_filter_transform_size_counts_for_the_index_limit():
    """U[A][K][C/G] does not shrink with the batch split, so a problem whose U alone passes
    31 bits must be refused as a problem, not sent to a split that cannot help."""
    problem = Problem(N=1, C=8192, K=8192, H=3, W=3, pad_h=1, pad_w=1)
    with pytest.raises(Refused) as info:
        check_problem(problem, Tile(6, 6))
    assert info.value.rule == "index_past_31_bits"
    check_problem(problem, Tile(2, 2))  # 16 bins x 8192 x 8192 = 2^30 fits


def test_problem_shape_rules_come_first():
    problem = Problem(N=1, C=64, H=8192, W=8192, K=64, R=1, S=1)
    with pytest.raises(Refused) as info:
        check_problem(problem)
    assert info.value.rule == "not_3x3"


def test_public_layers(public_problems):
    refused = {}
    for problem in public_problems:
        try:
            check_problem(problem)
        except Refused as refusal:
            refused[problem.to_miopen()] = refusal.rule
    assert sorted(refused.values()) == ["not_3x3", "stride_not_1"]


# Rule conditions and messages -------------------------------------------------------------
_STAGE_SPECS = {
    "k1": RtFilterSpec(),
    "k2a": RtPrescaleSpec(),
    "k2": RtInputSpec(),
    "k4": RtOutputSpec(),
    "kf": RtFusedSpec(),
}


@pytest.mark.parametrize("rule", rule_book()[1], ids=lambda r: r.id)
def test_every_rule_evaluates_and_formats(rule):
    """Conditions use only defined names and messages only fill defined fields."""
    problem = Problem(N=2, C=16, H=8, W=8, K=16, pad_h=1, pad_w=1, dtype=DType.FP16)
    if rule.scope is Scope.PROBLEM:
        namespaces = [problem_namespace(problem)]
    else:
        namespaces = [spec_namespace(_STAGE_SPECS[stage]) for stage in rule.stages]
    if rule.scope is Scope.FIT:
        derived = dict(
            lanes=4,
            total=8,
            slots=2,
            RW=1,
            CH=1,
            grid_y=1,
            max_elems_chunk=1,
            max_threads_chunk=1,
            tile_scale=1,
        )
        namespaces = [
            {**problem_namespace(problem, Tile(4, 4)), **ns, **derived} for ns in namespaces
        ]
    for ns in namespaces:
        assert isinstance(rule.fires(ns), bool)
        assert rule.refusal(ns).rule == rule.id


def test_rules_by_scope_and_stage():
    assert {r.id for r in rules("spec", "k1")} >= {"block_too_large", "filter_rows_below_one"}
    assert "filter_rows_below_one" not in {r.id for r in rules("spec", "k2")}
    assert all(r.scope is Scope.PROBLEM for r in rules("problem"))
    assert rules(Scope.FIT) and all(r.scope is Scope.FIT for r in rules(Scope.FIT))
    with pytest.raises(ValueError, match=r"'probem' is not one of \['spec', 'problem', 'fit'\]"):
        Rule("typo", "probem", ("k1",), "block > 1", "a message long enough")
    params, book = rule_book()
    assert params["max_block"] == 1024 and len({r.id for r in book}) == len(book)


@pytest.mark.parametrize(
    "condition, match",
    [
        ("block.real > 10", "Attribute is not allowed"),
        ("block.bit_length() > 10", "may be called"),
        ("open('x') is None", "may be called"),
        ("__import__('os')", "may be called"),
        ("len(tile) > 3", "may be called"),
        ("(lambda: 1)() == 1", "may be called"),
        ("tile[0] == 'F'", "Subscript is not allowed"),
        ("max(block, key=abs) > 1", "keyword is not allowed"),
        ("[b for b in (1, 2)]", "ListComp is not allowed"),
        ("block if vec else rows", "IfExp is not allowed"),
        ("block >", "bad condition"),
    ],
)
def test_forbidden_condition_constructs(condition, match):
    rule = Rule("bad_rule", "spec", ("k1",), condition, "a message long enough")
    with pytest.raises(ConfigError, match=f"rule bad_rule: .*{match}"):
        rule.code  # noqa: B018 - compiling is what refuses
    with pytest.raises(ConfigError, match=f"rule bad_rule: .*{match}"):
        rule.fires(spec_namespace(RtFilterSpec()))


def test_unknown_name_and_message_field_are_config_errors():
    ns = spec_namespace(RtFilterSpec())
    with pytest.raises(ConfigError, match=r"unknown name\(s\) \['blok'\]"):
        Rule("typo", "spec", ("k1",), "blok > 1", "a message long enough").fires(ns)
    with pytest.raises(ConfigError, match="message names 'blok'"):
        Rule("typo", "spec", ("k1",), "block > 1", "block {blok} is bad").refusal(ns)


def test_allowed_helpers_work():
    ns = spec_namespace(RtInputSpec(**LDS))
    rule = Rule(
        "ok",
        "spec",
        ("k2",),
        "is_pow2(lds_lanes) and ceil_div(block, 3) == 22 and "
        "max(vec, 2) == 2 and min(-vec, 0) < 0 and abs(-1) == 1",
        "fine message",
    )
    assert rule.fires(ns) is True


def test_refused_carries_rule_and_message():
    refusal = Refused("some_rule", "what is wrong; what to do")
    assert refusal.rule == "some_rule" and refusal.message == "what is wrong; what to do"
    assert str(refusal) == "[some_rule] what is wrong; what to do"


@pytest.mark.parametrize("tile", TILES, ids=str)
def test_spec_namespace_sizes(tile):
    ns = spec_namespace(RtInputSpec(tile=tile, vec=4, **LDS))
    assert (ns["bins"], ns["mh"], ns["mw"]) == (tile.bins, tile.mh, tile.mw)
    assert ns["lds_bytes"] == tile.ah * (4 * tile.mw + 2) * 16 * 4 * 4
    assert ns["tile"] == tile.name and ns["stage"] == "k2"


# A bounded expression language ----------------------------------------------------------------
@pytest.mark.parametrize(
    "condition, match",
    [
        ("2 ** 2 ** 100 > 1", "exponent"),
        ("block ** 100000000 > 1", "exponent"),
        ("9 ** 64 ** 64 > 1", "past 2\\*\\*256"),
        ("block * 10**60 * 10**60 * 10**60 * 10**60 * 10**60 > 1", "past 2\\*\\*256"),
        ("(block * 10**60) ** 64 > 1", "past 2\\*\\*256"),
        ("'a' * 100000000 == ''", "takes numbers"),
        ("'ab' + 'cd' == 'abcd'", "takes numbers"),
        ("block // 0 > 1", "division"),
        ("1" + "0" * 100 + " > block", "out of bounds"),
        ("block > 1 and " * 40 + "True", "characters, over"),
    ],
)
def test_attacks_on_conditions_fail_fast_and_clearly(condition, match):
    import time

    rule = Rule("attack", "spec", ("k1",), condition, "a message long enough", "refusals.yaml:7")
    start = time.perf_counter()
    with pytest.raises(ConfigError, match=f"refusals.yaml:7: rule attack: .*{match}"):
        rule.fires(spec_namespace(RtFilterSpec()))
    assert time.perf_counter() - start < 0.5


@pytest.mark.parametrize(
    "message, match",
    [
        ("block {block:999999999}", "width 999999999 is over 99"),
        ("block {block:>1000000}", "width 1000000 is over 99"),
        ("block {block:.100000f}", "prec 100000 is over 99"),
        ("block {block:{block}}", "format"),
        ("leak {block.__class__}", "plain name"),
        ("leak {block[0]}", "plain name"),
        ("leak {block!a}", "format"),
        ("unbalanced {block", "not a format string"),
    ],
)
def test_attacks_on_messages_fail_fast_and_clearly(message, match):
    rule = Rule("attack", "spec", ("k1",), "block > 1", message, "refusals.yaml:9")
    with pytest.raises(ConfigError, match=f"refusals.yaml:9: rule attack: .*{match}"):
        rule.refusal(spec_namespace(RtFilterSpec()))


def test_bounded_arithmetic_keeps_the_real_range():
    ns = {**spec_namespace(RtFilterSpec()), "n": 2**31 - 1}
    assert Rule("ok", "spec", ("k1",), "n * n * n * n * n > 2 ** 64", "m").fires(ns) is True
    assert Rule("ok", "spec", ("k1",), "block in (256, 512) and -n < 0", "m").fires(ns) is True


def _book_with(monkeypatch, tmp_path, scope: str, entry: str):
    """rule_book() over a copy of grids/ whose refusals.yaml gains one rule at its scope."""
    import shutil

    from wino import refusals

    grids = tmp_path / "grids"
    shutil.copytree(config.GRIDS, grids)
    text = (grids / "refusals.yaml").read_text()
    text = text.replace(f"{scope}_rules:\n", f"{scope}_rules:\n{entry}", 1)
    (grids / "refusals.yaml").write_text(text)
    monkeypatch.setattr(config, "GRIDS", grids)
    config.declared.cache_clear()
    refusals.rule_book.cache_clear()
    return grids / "refusals.yaml"


@pytest.fixture()
def restore_book():
    """Clear what caches the declared files before and after (the grid's expansion too)."""
    from wino import grid, refusals

    caches = (config.declared, refusals.rule_book, grid.expand, grid._names)
    for cached in caches:
        cached.cache_clear()
    yield
    for cached in caches:
        cached.cache_clear()


@pytest.mark.parametrize(
    "scope, when, message, match",
    [
        ("problem", "Hx > 3", "a message long enough {H}", r"unknown name\(s\) \['Hx'\]"),
        ("fit", "vec > blok", "a message long enough", r"unknown name\(s\) \['blok'\]"),
        ("spec", "block >", "a message long enough", "bad condition"),
        ("problem", "H > 3", "a message long enough {Hx}", "message names 'Hx'"),
        ("fit", "span > 3", "a message long enough", r"unknown name\(s\) \['span'\]"),
    ],
)
def test_a_bad_rule_fails_at_load_with_id_and_line(
    monkeypatch, tmp_path, restore_book, scope, when, message, match
):
    stages = "" if scope == "problem" else "    stages: [k1, k2]\n"
    entry = f'  - id: planted\n{stages}    when: "{when}"\n    message: "{message}"\n'
    path = _book_with(monkeypatch, tmp_path, scope, entry)
    line = path.read_text().splitlines().index("  - id: planted") + 1
    with pytest.raises(ConfigError, match=f"{path}:{line}: rule planted: .*{match}"):
        rule_book()
    from wino.cli import main

    assert main(["grid"]) == 2


def test_a_problem_verdict_is_kept_and_raised_anew_each_time():
    """check_problem keeps its verdict per problem and tile: each call raises a new Refused
    with the rule id and message of the first rule the problem breaks, and a problem that
    passes stays passing."""
    bad = Problem(N=1, C=8, H=8, W=8, K=8, R=5, S=5)
    raised = []
    for _ in range(2):
        with pytest.raises(Refused) as info:
            refusals.check_problem(bad)
        raised.append(info.value)
    assert raised[0] is not raised[1]
    assert raised[0].rule == raised[1].rule and raised[0].message == raised[1].message
    assert refusals.check_problem(Problem(N=1, C=8, H=8, W=8, K=8, pad_h=1, pad_w=1)) is None


def test_a_rule_names_its_file_and_line_when_a_message_shows_it():
    _, book = refusals.rule_book()
    rule = book[3]
    path, line = str(rule.where).rsplit(":", 1)
    text = (config.GRIDS / "refusals.yaml").read_text(encoding="utf-8").splitlines()
    assert path.endswith("refusals.yaml") and f"id: {rule.id}" in text[int(line) - 1]


def test_a_verdict_is_kept_per_the_values_and_types_the_condition_reads(monkeypatch):
    """A condition met again with the same values of the names it reads (by any rule of that
    text) is not evaluated again; other values are; names it does not read do not matter; a
    bool is not the int it equals (arithmetic refuses it), and a condition that raises or
    reads an unhashable value keeps nothing."""
    calls = []
    real = refusals.evaluate
    monkeypatch.setattr(refusals, "evaluate", lambda code, ns: calls.append(1) or real(code, ns))
    monkeypatch.setattr(refusals, "_CONDITION_VERDICTS", {})
    rule = Rule("kept", "spec", ("k1",), "block * 2 > limit", "a message long enough")
    assert rule.fires({"block": 3, "limit": 5}) is True
    assert rule.fires({"block": 3, "limit": 5, "vec": 8}) is True and len(calls) == 1
    twin = Rule("twin", "fit", ("k2",), "block * 2 > limit", "another message")  # same text
    assert twin.fires({"block": 3, "limit": 5}) is True and len(calls) == 1
    assert rule.fires({"block": 2, "limit": 5}) is False and len(calls) == 2
    for _ in range(2):
        with pytest.raises(ConfigError, match="takes numbers"):
            rule.fires({"block": True, "limit": 5})
    assert len(calls) == 4
    listed = Rule("listed", "spec", ("k1",), "block in sizes", "a message long enough")
    for _ in range(2):
        assert listed.fires({"block": 1, "sizes": [1, 2]}) is True
    assert len(calls) == 6


def test_kept_namespaces_and_rules_are_made_again_for_a_reloaded_rule_book(
    monkeypatch, tmp_path, restore_book
):
    """Spec namespaces and the rules of each scope are kept per rule book (and, the spec's,
    per declared axes): a reloaded book's new rule refuses at once, and a declared axis is in
    the namespace; the kept namespace is never the caller's copy."""
    from wino import axes

    spec = RtFilterSpec()
    kept = refusals._kept_spec_ns(spec)
    assert refusals._kept_spec_ns(RtFilterSpec()) is kept
    spec_namespace(spec)["block"] = -1  # a copy
    assert refusals._kept_spec_ns(spec)["block"] == 256
    problem = Problem(N=1, C=8, H=8, W=8, K=8, pad_h=1, pad_w=1)
    check_problem(problem)
    entry = '  - id: planted\n    when: "H == 8"\n    message: "a message long enough {H}"\n'
    _book_with(monkeypatch, tmp_path, "problem", entry)
    with pytest.raises(Refused, match="planted"):
        check_problem(problem)
    again = refusals._kept_spec_ns(spec)
    assert again is not kept and again == kept
    axis = axes.Axis("out_scale", ("k1",), int, "int", "os{}", 1)
    monkeypatch.setattr(axes, "declared", lambda: (axis,))
    assert "out_scale" not in kept and spec_namespace(spec)["out_scale"] == 1


def test_tile_scale_is_kept_apart_only_where_it_can_change_the_launch(
    monkeypatch, tmp_path, restore_book
):
    """K1 and K2 launch alike with and without tile scales (no kernarg or fit rule of theirs
    reads it): one Launch serves the pick's and the steps'. K4 passes has_tile_scale, and a
    fit rule that reads tile_scale parts them too (once the rule book is reloaded)."""
    from wino.pick import default_stage_specs
    from wino.vocab import Stage

    problem = Problem(N=1, C=64, H=8, W=8, K=64, pad_h=1, pad_w=1)
    specs = default_stage_specs(problem, Tile(4, 4))
    k1, k2, k4 = specs[Stage.FILTER], specs[Stage.INPUT], specs[Stage.OUTPUT]
    for spec in (k1, k2):
        assert stage_launch(spec, problem, tile_scale=False) is stage_launch(spec, problem)
    scaled, plain = stage_launch(k4, problem), stage_launch(k4, problem, tile_scale=False)
    assert (scaled.kernargs["has_tile_scale"], plain.kernargs["has_tile_scale"]) == (1, 0)
    entry = '  - id: planted\n    stages: [k2]\n    when: "tile_scale < 0"\n'
    _book_with(monkeypatch, tmp_path, "fit", entry + '    message: "a message long enough"\n')
    assert stage_launch(k2, problem, tile_scale=False) is not stage_launch(k2, problem)
