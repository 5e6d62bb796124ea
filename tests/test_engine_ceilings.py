"""scripts/engine_ceilings.py: per layer of an engines CSV, the Winograd MMA work at the run's
GEMM rate and x + y at its copy rate, and the direct engine's time over the larger of the two."""

from __future__ import annotations

import pytest

from wino.bench import results


@pytest.fixture(scope="module")
def ceilings(load_script):
    return load_script("engine_ceilings")


def _row(engine, cached, **extra):
    """fp16 N2 C64 16x16 K128, pad 1: F4x4 has 2 x 4 x 4 = 32 tiles."""
    row = {c: "" for c in results.COLUMNS}
    row.update(target="cuda", case="c", label="fp16 N2 C64 16x16 K128", dtype="fp16")
    row.update(N="2", C="64", H="16", W="16", K="128", pad_h="1", pad_w="1")
    row.update(dil_h="1", dil_w="1", groups="1", engine=engine, verified="yes")
    row.update(cached_us=str(cached), total_us=str(cached), **extra)
    return row


def test_the_ceiling_is_the_direct_time_over_the_larger_floor(ceilings):
    unfused = _row("wino", 20.0, tile="F4x4", mma_tflops="0.1", gemm_tflops="9", copy_gbs="100")
    rows = [_row("cudnn", 10.0), unfused]
    # MMA: 2 x 36 bins x 32 tiles x 128 x 64 FLOPs = 18874368 at 0.1 TFLOP/s = 188.7 us;
    # memory: 2 bytes x 2 images x (16 x 16 x 64 + 16 x 16 x 128) = 196608 B at 100 GB/s = 2.0 us
    assert ceilings.floors(unfused) == pytest.approx((188.74368, 1.96608))
    line = ceilings.markdown(rows).splitlines()[2]
    assert line == "| N2 C64 16x16 K128 | fp16 | F4x4 | 10.0 | 0.50x | 188.7 | 2.0 | 0.05x |"
    assert ceilings.markdown(rows, "bf16").count("\n") == 1  # the header only


def test_a_row_without_the_run_s_rates_has_no_line(ceilings):
    rows = [_row("cudnn", 10.0), _row("wino", 20.0, tile="F4x4", copy_gbs="100")]
    assert ceilings.case_line(rows) is None  # no tensor rate: K3's gemm_tflops is no stand-in
    assert ceilings.floors(rows[1], mma=0.1) == pytest.approx((188.74368, 1.96608))
