"""`wino plot CSV --table`: one Markdown line per case; TFLOPS keep their significant digits."""

from __future__ import annotations

from wino.bench import results
from wino.bench.table import HEADER, engines_summary, markdown


def test_host_tflops_are_not_rounded_to_zero(tmp_path):
    row = {c: "" for c in results.COLUMNS}
    row.update(
        target="c",
        case="conv -n 1",
        label="fp32 N1 C8 10x10 K8 3x3 p1x1 s1x1",
        dtype="fp32",
        engine="wino",
        tile="F2x2",
        total_us="812.5",
        tflops="0.004123",
        bound_us="20.5",
        bound_ratio="0.02523",
        verified="yes",
        error="1e-6",
    )
    text = markdown(results.write(tmp_path / "r.csv", [row]))
    lines = text.splitlines()
    assert "\n".join(lines[:2]) == HEADER
    cells = [c.strip() for c in lines[2].strip("|").split("|")]
    assert cells[:5] == ["N1 C8 10x10 K8 3x3 p1x1 s1x1", "fp32", "F2x2", "812.5", "0.00412"]
    assert cells[5:8] == ["20.5", "0.03", "1/1"]


def _engine_row(case, shape, engine, cached, tile="F4x4"):
    """One engines-table row of a case: shape (C, K, H) at N 16, 3x3, pad 1, fp16."""
    c, k, h = shape
    row = {col: "" for col in results.COLUMNS}
    row.update(target="cuda", case=case, label=f"fp16 N16 C{c} {h}x{h} K{k}", dtype="fp16")
    row.update(N="16", C=str(c), K=str(k), H=str(h), W=str(h), pad_h="1", pad_w="1")
    row.update(dil_h="1", dil_w="1", groups="1")
    row.update(engine=engine, tile="" if engine == "cudnn" else tile)
    row.update(cached_us=str(cached), total_us=str(cached + 1), verified="yes", error="0.01")
    return row


def test_the_engines_summary_reports_each_layer_class():
    """Over every case; over the 256/512-channel ones (best AOT engine); and the fused engine
    over the 64-128-channel ones at 56x56 and more (a 64-channel 28x28 layer stays out: its
    output is under 56x56; a 256-channel 56x56 one too: over 128 input channels)."""
    rows = []
    cases = {  # case -> (shape, direct us, unfused us, fused us)
        "a": ((64, 64, 56), 60.0, 80.0, 40.0),  # fused 1.5x, best AOT (the fused one) 1.5x
        "b": ((128, 128, 112), 90.0, 180.0, 360.0),  # fused 0.25x, best AOT 0.5x
        "c": ((256, 256, 56), 80.0, 100.0, 400.0),  # best AOT 0.8x (wide; fused not counted)
        "d": ((512, 512, 14), 30.0, 15.0, 120.0),  # best AOT 2x (wide)
        "e": ((64, 64, 28), 10.0, 20.0, 5.0),  # fused 2x (best AOT too), outputs 28x28: not counted
    }
    for case, (shape, direct, unfused, fused) in cases.items():
        rows += [
            _engine_row(case, shape, "cudnn", direct),
            _engine_row(case, shape, "wino", unfused),
            _engine_row(case, shape, "fused", fused, tile="F2x2"),
        ]
    lines = engines_summary(rows)
    best = "fp16: best wino engine (U cached) vs the direct engine: "
    assert lines[0] == best + "1.19x geomean over 5 layers (min 0.5x, max 2x)"
    assert lines[1] == best + "1.26x geomean over 2 layers with C, K >= 256 (min 0.8x, max 2x)"
    assert lines[2] == (
        "fp16: the fused engine (U cached) vs the direct engine: 0.612x geomean over 2 layers "
        "with 64 <= C <= 128 and outputs of 56x56 or more (min 0.25x, max 1.5x)"
    )
    assert len(lines) == 3  # no baked rows: no shape-generic line
    for row in rows:
        row["C"] = ""  # a hand-made CSV without extents: the classes cover nothing
    assert engines_summary(rows) == lines[:1]


def test_the_engines_summary_reports_k2_against_both_copies():
    """K2 of each case's best unfused row: its bandwidth over the large copy's, and a plain copy
    of its bytes over its time; the median, the range and the layers at 85% or more. A row
    without the plain copy (a CSV from before the column) counts only in the first line."""
    rows = []
    k2 = {  # case -> (k2_gbs, k2_us, k2_copy_us): at copy 3000 GB/s
        "a": (2700.0, 10.0, 9.0),  # 90% of the copy rate, 90% of its plain copy
        "b": (1500.0, 8.0, 7.6),  # 50%, 95%: a small layer
        "c": (2400.0, 20.0, 16.0),  # 80%, 80%
        "d": (2550.0, 30.0, ""),  # 85%, no plain copy timed
    }
    for case, (gbs, us, copy_us) in k2.items():
        row = _engine_row(case, (64, 64, 56), "wino", 50.0)
        row.update(k2_gbs=str(gbs), k2_us=str(us), k2_copy_us=str(copy_us), copy_gbs="3000")
        rows += [_engine_row(case, (64, 64, 56), "cudnn", 40.0), row]
    lines = [line for line in engines_summary(rows) if "K2" in line]
    assert lines == [
        "fp16: unfused K2 at 82% of the copy bandwidth (median over 4 layers, 50%-90%; "
        ">= 85% on 2)",
        "fp16: unfused K2 at 90% of a plain copy of its bytes (median over 3 layers, 80%-95%; "
        ">= 85% on 2)",
    ]
