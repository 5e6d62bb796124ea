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


def test_block_timing_holds_the_whole_chain(tmp_path, capsys):
    problem = Problem.from_miopen(CASE)
    specs = default_stage_specs(problem, Tile(4, 4), target=Target.CUDA)
    cuda_cache.build(specs.values(), tmp_path / "b")
    results = tmp_path / "r.csv"
    argv = ["bench", "--target", "cuda", "--cache-root", str(tmp_path / "b"), "--tile", "F4x4"]
    code = main([*argv, "--candidates", "1", "--results", str(results), "--miopen-cmd", CASE])
    assert code == 0, capsys.readouterr()
    (row,) = list(csv.DictReader(results.open()))
    stages = sum(float(row[f"{s}_us"]) for s in ("k2", "k3", "k4") if row[f"{s}_us"])
    total = float(row["total_us"])
    # the stages were timed alone on the timer's stream; the chain is at least most of them
    assert total >= 0.5 * stages, f"chain {total:.1f} us against stages {stages:.1f} us: {row}"
