"""`wino plot CSV --table`: one Markdown line per case; TFLOPS keep their significant digits."""

from __future__ import annotations

from wino.bench import results
from wino.bench.table import HEADER, markdown


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
