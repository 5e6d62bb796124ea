"""``wino bench`` on the GPU times what it claims to: the block timing's CUDA graph holds the
whole chain. The operands are torch tensors, which launch on torch's current stream unless the
timed chain names the timer's stream; a capture on another stream records nothing and a case
then "runs" in a microsecond or two (seen on the H200 after the runtime learned the caller's
stream). Skipped with a reason where CuPy, PyTorch with CUDA or nvcc is missing."""

from __future__ import annotations

import csv
import shutil

import pytest

from tests import cuda_cache
from wino.cli import main
from wino.pick import default_stage_specs
from wino.problem import Problem
from wino.runtime.registry import cuda_available
from wino.vocab import Target, Tile

torch = pytest.importorskip("torch", reason="the bench's operands and reference use PyTorch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not cuda_available(), reason="needs CuPy and a CUDA device"),
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs PyTorch with CUDA"),
    pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc to build the cubins"),
]

CASE = "convfp16 -n 16 -c 64 -H 56 -W 56 -k 64 -y 3 -x 3 -p 1 -q 1"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A CUDA cache of CASE's default F4x4 pipeline."""
    problem = Problem.from_miopen(CASE)
    specs = default_stage_specs(problem, Tile(4, 4), target=Target.CUDA)
    root = tmp_path_factory.mktemp("bench-cuda")
    cuda_cache.build(specs.values(), root)
    return root


def test_block_timing_holds_the_whole_chain(built, tmp_path, capsys):
    results = tmp_path / "r.csv"
    argv = ["bench", "--target", "cuda", "--cache-root", str(built), "--tile", "F4x4"]
    code = main([*argv, "--candidates", "1", "--results", str(results), "--miopen-cmd", CASE])
    assert code == 0, capsys.readouterr()
    (row,) = list(csv.DictReader(results.open()))
    stages = sum(float(row[f"{s}_us"]) for s in ("k2", "k3", "k4") if row[f"{s}_us"])
    total = float(row["total_us"])
    # the stages were timed alone on the timer's stream; the chain is at least most of them
    assert total >= 0.5 * stages, f"chain {total:.1f} us against stages {stages:.1f} us: {row}"


def test_the_l2_probe_reads_faster_than_memory_copies(built):
    """The fused roofline's L2 rate is the L2's: well above the copy bandwidth (HBM) on a GPU
    whose L2 holds the probe's 16 MiB (H100: 7.9 against 3.0 TB/s). Stop 40's probe, an
    elementwise copy between two L2-resident buffers, read 1.5 TB/s there, half the copy rate,
    and every fused bound it gave lay past the kernel's own time."""
    from wino.bench.device import open_device

    device = open_device(Target.CUDA, built)
    l2, copy = device.l2_gbs(), device.copy_gbs()
    assert l2 > 1.5 * copy, f"L2 {l2:.0f} GB/s against copies at {copy:.0f} GB/s"


def test_a_plain_copy_of_a_large_stage_runs_at_the_copy_rate(built):
    """The stage copy is the K2 and K4 columns' floor: moving 512 MiB (no L2 reuse) it must run
    near the large device-to-device copy's rate, else its small-layer times mean nothing."""
    from wino.bench.device import CopyShape, open_device

    device = open_device(Target.CUDA, built)
    shape = CopyShape(256 << 20, 256 << 20, "read")
    rate = (shape.read + shape.write) / (device.stage_copy_us(shape) * 1e-6) / 1e9
    copy = device.copy_gbs()
    assert 0.8 * copy < rate < 1.25 * copy, f"stage copy {rate:.0f} GB/s, copies {copy:.0f}"


def test_the_tensor_rate_outruns_k3_s_rate(built):
    """The fused roofline's MMA term and the ceilings take a GEMM bound by its multiply-adds;
    K3's shape (V and M through memory) runs well under it (H100 fp16: 314 TFLOP/s)."""
    from wino.bench.device import open_device
    from wino.vocab import DType

    device = open_device(Target.CUDA, built)
    mma, k3 = device.mma_tflops(DType.FP16, DType.FP32), device.gemm_tflops(DType.FP16, DType.FP16)
    assert mma > 1.3 * k3, f"tensor rate {mma:.0f} TFLOP/s against K3's {k3:.0f}"
