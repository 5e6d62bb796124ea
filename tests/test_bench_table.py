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
