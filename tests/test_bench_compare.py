"""`wino bench --target c --compare onnxruntime` on a tiny case: both engines timed on the same
operands, the onnxruntime row verified against the float64 reference, the speedup and winner
columns; and the message (exit 2) when the onnx extra is absent."""

from __future__ import annotations

import builtins

import numpy as np
import pytest

from tests import host_cache
from wino import cli
from wino.bench import compare, results
from wino.bench.candidates import needed_specs
from wino.bench.host import HostDevice
from wino.problem import Problem
from wino.vocab import DType, Tile

TINY = "conv -n 2 -c 8 -H 10 -W 10 -k 8 -p 1 -q 1"
GROUPED = "conv -n 1 -c 8 -H 9 -W 7 -k 8 -p 1 -q 0 -l 2 -j 1 -g 2"


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    problems = [Problem.from_miopen(TINY), Problem.from_miopen(GROUPED)]
    specs = needed_specs(problems, (Tile(2, 2),), HostDevice.CANDIDATE_LIMIT)
    root = tmp_path_factory.mktemp("compare-cache")
    host_cache.build(specs, root)
    return root


def _bench(capsys, root, *argv):
    code = cli.main(["bench", "--cache-root", str(root), *argv])
    return code, *capsys.readouterr()


@pytest.mark.parametrize("line", [TINY, GROUPED])
def test_onnxruntime_conv_matches_the_reference(line):
    pytest.importorskip("onnxruntime")
    problem = Problem.from_miopen(line)
    device = HostDevice.__new__(HostDevice)  # only operands, reference and error are used
    device.final_settings = HostDevice.FINAL
    operands = device.operands(problem)
    ref = device.reference(problem, operands)
    result = compare.onnxruntime(problem, device, operands, ref)
    assert result.time_us > 0
    assert result.error is not None and result.error < 1e-6  # fp32 direct convolution


def test_bench_compare_writes_both_rows(capsys, root, tmp_path):
    pytest.importorskip("onnxruntime")
    csv_path = tmp_path / "r.csv"
    code, out, err = _bench(
        capsys,
        root,
        "--target",
        "c",
        "--miopen-cmd",
        TINY,
        "--tile",
        "F2x2",
        "--verify",
        "--compare",
        "onnxruntime",
        "--results",
        str(csv_path),
    )
    assert code == 0, err
    assert "  onnxruntime " in out and "x onnxruntime's speed" in out
    rows = results.read(csv_path)
    by_engine = {r["engine"]: r for r in rows}
    assert set(by_engine) == {"wino", "onnxruntime"}
    ort, wino = by_engine["onnxruntime"], by_engine["wino"]
    assert ort["verified"] == "yes" and float(ort["error"]) < 1e-6
    assert float(wino["speedup"]) == pytest.approx(
        float(ort["total_us"]) / float(wino["total_us"]), rel=1e-3
    )
    assert wino["winner"] == ort["winner"] in ("onnxruntime", "wino F2x2")


def test_compare_onnxruntime_needs_the_c_target(capsys, root):
    code, _, err = _bench(
        capsys, root, "--target", "cuda", "--compare", "onnxruntime", "--miopen-cmd", TINY
    )
    assert code == 2 and "--compare onnxruntime needs the c target" in err


def test_missing_onnxruntime_is_skipped_with_the_install_hint(capsys, root, monkeypatch):
    real_import = builtins.__import__

    def no_onnx(name, *args, **kwargs):
        if name.split(".")[0] in ("onnx", "onnxruntime"):
            raise ImportError(f"No module named {name!r}", name=name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_onnx)
    code, out, err = _bench(
        capsys, root, "--target", "c", "--miopen-cmd", TINY, "--compare", "onnxruntime"
    )
    assert code == 2 and out == ""
    assert "skipped: --compare onnxruntime needs onnx and onnxruntime" in err
    assert "wino[onnx]" in err


def test_16_bit_cases_compare_against_fp32_onnxruntime():
    pytest.importorskip("onnxruntime")
    problem = Problem.from_miopen(TINY.replace("conv", "convfp16"))
    assert problem.dtype is DType.FP16
    device = HostDevice.__new__(HostDevice)
    device.final_settings = HostDevice.FINAL
    operands = device.operands(problem)
    ref = device.reference(problem, operands)
    result = compare.onnxruntime(problem, device, operands, ref)
    assert result.error is not None and result.error < 1e-6  # same fp16 values, fp32 math
    assert np.isfinite(result.time_us)
