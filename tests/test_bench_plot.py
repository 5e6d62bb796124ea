"""`wino plot`: one picture per dtype from a results CSV; without matplotlib, exit 2 with the
install hint."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from wino import cli
from wino.bench import results
from wino.bench.plot import INSTALL, output_paths

HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None
needs_matplotlib = pytest.mark.skipif(
    not HAS_MATPLOTLIB, reason=f"matplotlib is not installed ({INSTALL})"
)


def _rows() -> list[results.Row]:
    rows = []
    for dtype in ("fp16", "fp32"):
        for n, (wino_us, cudnn_us) in enumerate([(40.0, 50.0), (90.0, 60.0)]):
            case = f"conv{dtype} -n {n + 1}"
            base = {c: "" for c in results.COLUMNS}
            base.update(
                target="cuda",
                case=case,
                dtype=dtype,
                label=f"{dtype} N{n + 1} C64 56x56 K64 3x3 p1x1 s1x1",
            )
            rows.append(
                {
                    **base,
                    "engine": "wino",
                    "tile": "F4x4",
                    "total_us": str(wino_us),
                    "bound_us": str(wino_us / 2),
                    "verified": "yes",
                    "error": "1e-3",
                }
            )
            rows.append({**base, "engine": "cudnn", "total_us": str(cudnn_us)})
    return results.annotate(rows)


def test_one_file_per_dtype_when_several():
    out = Path("plots/speedup.png")
    assert output_paths(out, ["fp16"]) == {"fp16": out}
    assert output_paths(out, ["fp16", "bf16"]) == {
        "fp16": Path("plots/speedup_fp16.png"),
        "bf16": Path("plots/speedup_bf16.png"),
    }


@needs_matplotlib
def test_plot_writes_a_picture_per_dtype(tmp_path, capsys):
    csv_path = results.write(tmp_path / "r.csv", _rows())
    code = cli.main(["plot", str(csv_path), "-o", str(tmp_path / "speedup.png")])
    out, _ = capsys.readouterr()
    assert code == 0
    for dtype in ("fp16", "fp32"):
        picture = tmp_path / f"speedup_{dtype}.png"
        assert f"wrote {picture}" in out
        assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@needs_matplotlib
def test_one_dtype_writes_the_named_file(tmp_path, capsys):
    rows = [r for r in _rows() if r["dtype"] == "fp32"]
    csv_path = results.write(tmp_path / "r.csv", rows)
    assert cli.main(["plot", str(csv_path), "-o", str(tmp_path / "s.png")]) == 0
    assert (tmp_path / "s.png").is_file()


def test_without_matplotlib_exit_2_with_the_install_hint(tmp_path, capsys, monkeypatch):
    csv_path = results.write(tmp_path / "r.csv", _rows())
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    code = cli.main(["plot", str(csv_path), "-o", str(tmp_path / "s.png")])
    _, err = capsys.readouterr()
    assert code == 2 and "pip install 'wino[plot]'" in err


def test_an_empty_csv_is_an_error(tmp_path, capsys):
    csv_path = results.write(tmp_path / "r.csv", [])
    assert cli.main(["plot", str(csv_path)]) == 2
    assert "no rows" in capsys.readouterr().err


def _host_rows() -> list[results.Row]:
    return [{**r, "target": "c"} for r in _rows() if r["engine"] == "wino"]


def test_engines_without_data_are_left_out():
    from wino.bench.plot import engines_with_data, layers

    assert engines_with_data(layers(_rows(), "fp16")) == ["wino", "cudnn"]
    assert engines_with_data(layers(_host_rows(), "fp16")) == ["wino"]


@needs_matplotlib
def test_a_host_csv_draws_no_cudnn_panel(tmp_path):
    from wino.bench.plot import figure, layers, pyplot

    plt = pyplot()
    fig = figure(plt, "fp16", layers(_host_rows(), "fp16"))
    (axes,) = fig.axes
    assert [t.get_text() for t in axes.get_legend().get_texts()] == ["wino time / bound"]
    assert "cuDNN" not in axes.get_title()
    plt.close(fig)
    fig = figure(plt, "fp16", layers(_rows(), "fp16"))
    assert len(fig.axes) == 2 and "vs cuDNN" in fig.axes[0].get_title()
    plt.close(fig)


def _engine_rows() -> list[results.Row]:
    """One fp16 case: cuDNN 100 us (110 with K1, as the CSV carries it), the unfused engine at
    F4x4 50 / 60 us verified and at F2x2 40 / 45 us out of its bound, the fused one 80 / 90,
    no baked row; a second case without a direct engine."""
    base = {c: "" for c in results.COLUMNS}
    case = dict(base, target="cuda", dtype="fp16", case="convfp16 -n 1")
    case["label"] = "fp16 N1 C64 56x56 K64 3x3 p1x1 s1x1"

    def row(engine, tile, cached, total, verified="yes", error="1e-3"):
        return {
            **case,
            "engine": engine,
            "tile": tile,
            "cached_us": str(cached),
            "total_us": str(total),
            "verified": verified,
            "error": error,
        }

    rows = [
        row("cudnn", "", 100.0, 110.0, verified="", error=""),
        row("wino", "F4x4", 50.0, 60.0),
        row("wino", "F2x2", 40.0, 45.0, verified="no", error="0.5"),
        {**row("fused", "F4x4", 80.0, 90.0), "bound_us": "40", "l2_mb": "123.4"},
    ]
    other = {**rows[1], "case": "convfp16 -n 2", "label": "fp16 N2 C64 56x56 K64 3x3 p1x1 s1x1"}
    return [*rows, other]


def test_engine_speedups_take_each_engines_fastest_verified_tile():
    from wino.bench.plot import engine_speedups

    (case,) = engine_speedups(_engine_rows(), "fp16")  # the case without cuDNN is left out
    assert case["label"] == "N1 C64 56x56 K64" and case["direct"] == "cudnn"
    assert case["cached_us"] == {"wino": 2.0, "fused": 1.25}  # F2x2 failed its bound; no baked
    assert case["total_us"] == pytest.approx({"wino": 110 / 60, "fused": 110 / 90})
    assert engine_speedups(_engine_rows(), "bf16") == []


def test_engines_table_gives_the_fused_roofline(tmp_path):
    """The fused engine's roofline (U cached) with its time over it, and its L2 reads; blank
    where a case has no fused row."""
    from wino.bench.table import engines_markdown

    lines = engines_markdown(results.write(tmp_path / "e.csv", _engine_rows())).splitlines()
    assert "| fused roofline us (x its time) | fused L2 MB |" in lines[0]
    assert "| F4x4 | 80.0 / 90.0 | 40.0 (2.00x) | 123 |" in lines[2]
    assert "| 50.0 / 60.0 |  |  |  |  |" in lines[3]  # no fused, no baked row
    assert len(lines[0].split("|")) == len(lines[1].split("|")) == len(lines[2].split("|"))


@needs_matplotlib
def test_engines_draw_only_with_an_output(tmp_path, capsys):
    csv_path = results.write(tmp_path / "e.csv", _engine_rows())
    assert cli.main(["plot", str(csv_path), "--engines"]) == 0
    out, _ = capsys.readouterr()
    assert out.startswith("| layer |") and "wrote" not in out
    assert not list(tmp_path.glob("*.png"))
    picture = tmp_path / "engines.png"
    assert cli.main(["plot", str(csv_path), "--engines", "-o", str(picture)]) == 0
    out, _ = capsys.readouterr()
    assert out.startswith("| layer |") and f"wrote {picture}" in out
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
