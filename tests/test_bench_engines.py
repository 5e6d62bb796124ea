"""`wino bench --engines` on the host: unfused, fused and baked (and onnxruntime) on the same
operands in one run; every wino row with its K1-per-call and U-cached time; the baked row the
best unfused pipeline's binaries, verified; the winner and speedups over every engine; the
argument checks with messages that say what to do."""

from __future__ import annotations

import pytest

from tests import host_cache
from wino import cli
from wino.bench import results
from wino.bench.candidates import needed_specs
from wino.bench.cli import parse_engines
from wino.bench.host import HostDevice
from wino.bench.modes import Compare, Engine
from wino.bench.sweep import Options, engines_lines
from wino.pick import default_fused_specs
from wino.problem import Problem
from wino.vocab import Target, Tile

CASE = "convfp16 -n 2 -c 16 -H 10 -W 9 -k 16 -p 1 -q 1"
TILE = Tile(2, 2)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    problem = Problem.from_miopen(CASE)
    specs = needed_specs([problem], (TILE,), HostDevice.CANDIDATE_LIMIT)
    specs |= set(default_fused_specs(problem, TILE).values())
    folder = tmp_path_factory.mktemp("engines-cache")
    host_cache.build(specs, folder)
    return folder


def test_every_engine_in_one_run(capsys, root, tmp_path):
    csv_path = tmp_path / "r.csv"
    argv = ["bench", "--cache-root", str(root), "--target", "c", "--miopen-cmd", CASE]
    argv += ["--tile", "F2x2", "--engines", "unfused,fused,baked", "--results", str(csv_path)]
    argv += ["--baked-root", str(tmp_path / "baked")]
    code = cli.main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "engines unfused,fused,baked" in out
    rows = {r["engine"]: r for r in results.read(csv_path)}
    assert set(rows) == {"wino", "fused", "baked"}
    for row in rows.values():
        assert row["verified"] == "yes", row
        assert float(row["cached_us"]) > 0 and float(row["total_us"]) > 0
    assert rows["wino"]["plan_kind"] == rows["baked"]["plan_kind"] == "unfused2d_rt"
    assert rows["fused"]["plan_kind"] == "fused2d_rt" and rows["fused"]["kf"].startswith("kf_")
    columns = ("bound_us", "bound_ratio", "l2_mb", "l2_gbs", "mma_tflops")
    fused = {c: float(rows["fused"][c]) for c in columns}
    assert min(fused.values()) > 0  # the fused roofline, U cached
    assert fused["bound_ratio"] == pytest.approx(
        fused["bound_us"] / float(rows["fused"]["cached_us"]), rel=1e-3
    )
    assert rows["wino"]["l2_mb"] == rows["wino"]["l2_gbs"] == ""  # the unfused roofline's
    assert rows["fused"]["gemm_tflops"] == ""  # its MMA term is the tensor rate, not K3's
    assert float(rows["wino"]["mma_tflops"]) > 0  # for scripts/engine_ceilings.py
    copies = [float(rows["wino"][f"{s}_copy_us"]) for s in ("k2", "k3", "k4")]
    assert min(copies) > 0  # a plain copy of each stage's bytes, timed in the run
    assert {rows["fused"][f"{s}_copy_us"] for s in ("k2", "k3", "k4")} == {""}  # no such stage
    for stage in ("k1", "k2", "k4"):  # the baked engine runs the unfused pick's specs
        assert rows["baked"][stage] == rows["wino"][stage] != ""
    assert rows["baked"]["error"] == rows["wino"]["error"]  # bit-identical outputs
    assert "fastest, U cached: " in out and "fastest, K1 per call: " in out
    assert (tmp_path / "baked").is_dir()


def _row(engine, tile, total, cached, verified="yes"):
    row = {c: "" for c in results.COLUMNS}
    row.update(target="cuda", case="c1", engine=engine, tile=tile, verified=verified)
    row.update(total_us=str(total), cached_us=str(cached), error="0.001")
    return row


def test_the_winner_is_over_every_engine():
    rows = [
        _row("wino", "F4x4", 100, 80),
        _row("fused", "F2x2", 90, 40),
        _row("fused", "F4x4", 20, 10, verified="no"),  # failed: never the winner
        _row("baked", "F4x4", 95, 76),
        _row("cudnn", "", 60, 60),
    ]
    rows[-1]["error"] = ""
    annotated = {(r["engine"], r["tile"]): r for r in results.annotate(rows)}
    assert {r["winner"] for r in annotated.values()} == {"cudnn"}  # K1 per call
    assert {r["cached_winner"] for r in annotated.values()} == {"fused F2x2"}  # U cached
    assert annotated[("fused", "F2x2")]["cached_speedup"] == "1.5"
    assert annotated[("wino", "F4x4")]["speedup"] == "0.6"
    lines = engines_lines(rows)
    assert lines[0] == (
        "  fastest, U cached: fused F2x2 40.0 us (1.9x over baked F4x4, 1.5x over cudnn, "
        "2x over wino F4x4)"
    )
    assert lines[1].startswith("  fastest, K1 per call: cudnn 60.0 us (1.58x over baked F4x4")


def test_compare_joins_the_engines():
    options = Options(compare="onnxruntime")
    assert options.engines == (Engine.UNFUSED, Engine.ONNXRUNTIME)
    assert options.row_engines == ("wino", "onnxruntime")
    options = Options(engines=("fused", "baked"), compare=Compare.ONNXRUNTIME)
    assert options.engines == (Engine.FUSED, Engine.BAKED, Engine.ONNXRUNTIME)
    assert Options(engines=("cudnn", "fused")).compare is Compare.CUDNN
    assert Options().engines == (Engine.UNFUSED,) and Options().compare is None


def test_engine_arguments_are_checked():
    with pytest.raises(ValueError, match="--engines cudnn runs on the cuda target, not c"):
        parse_engines("unfused,cudnn", Target.C)
    with pytest.raises(ValueError, match="'direct'.*fused"):
        parse_engines("direct", Target.C)
    with pytest.raises(ValueError, match="name at least one engine"):
        parse_engines(",", Target.C)
    assert parse_engines(None, Target.C) == ()
    available = parse_engines("available", Target.C)
    assert available[:3] == (Engine.UNFUSED, Engine.FUSED, Engine.BAKED)  # cc is here
    assert Engine.CUDNN not in available


def test_fused_alone_writes_only_fused_rows(capsys, root, tmp_path):
    csv_path = tmp_path / "r.csv"
    argv = ["bench", "--cache-root", str(root), "--target", "c", "--miopen-cmd", CASE]
    argv += ["--tile", "F2x2", "--engines", "fused", "--results", str(csv_path)]
    code = cli.main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert {r["engine"] for r in results.read(csv_path)} == {"fused"}
    assert "Best: " in out and "(fused)" in out


def test_tune_records_a_fused_winner_when_it_is_faster():
    from wino.bench.sweep import CaseRun, TileRun
    from wino.bench.tune import winner

    unfused = TileRun(None, {}, 10.0, error=0.001, tolerance=0.01)
    fused = TileRun(None, {}, 5.0, error=0.001, tolerance=0.01)
    failed = TileRun(None, {}, 1.0, error=0.5, tolerance=0.01)
    run = CaseRun(Problem.from_miopen(CASE), tiles=[unfused], fused=[fused, failed])
    assert winner(run) is fused
    assert winner(CaseRun(run.problem, tiles=[unfused])) is unfused


def test_tune_takes_only_plan_kinds(capsys, root):
    argv = ["tune", "--cache-root", str(root), "--target", "c", "--miopen-cmd", CASE]
    assert cli.main([*argv, "--engines", "unfused,baked"]) == 2
    assert "wino tune records unfused and fused plans only" in capsys.readouterr().err


def test_the_baked_engine_runs_the_baked_binaries(root, tmp_path):
    """The bench runs a plan on its own cache's backend: the baked plan given all-zero
    kernargs still verifies (the AOT binaries, which read them, would not)."""
    from tests.test_baked import _zeroed
    from wino.bench import engines
    from wino.bench.baked import baked_plan
    from wino.bench.device import open_device
    from wino.runtime import dispatch

    device = open_device(Target.C, root)
    problem = Problem.from_miopen(CASE)
    operands = device.operands(problem)
    ref = device.reference(problem, operands)
    aot = dispatch(problem, target=Target.C, tile=TILE, cache_root=root)
    baked = _zeroed(baked_plan(aot, tmp_path))
    workspace = device.workspace(aot.workspace_bytes)
    want = engines.plan_error(aot, device, operands, workspace, ref)
    assert engines.plan_error(baked, device, operands, workspace, ref) == want
    assert engines.plan_error(_zeroed(aot), device, operands, workspace, ref) != want
    assert engines.chain_us(baked, device, operands, workspace, cached=True) > 0


def test_fused_pipelines_carry_k2a_exactly_for_the_split_prescale():
    """Every fused pipeline the bench times has K2a exactly when its KF reads K2a's scales,
    whatever the default pick's prescale (the held F4x4 default finds its own: a pipeline built
    by swapping the KF into the default one lost K2a, and the bench failed those layers)."""
    from wino.bench.engines import fused_pipelines
    from wino.grid import aot_stage_specs
    from wino.vocab import DType, Prescale, Stage

    problem = Problem(N=2, C=64, H=56, W=56, K=64, pad_h=1, pad_w=1, dtype=DType.FP16)
    names = {s.name for stage in Stage if stage is not Stage.GEMM for s in aot_stage_specs(stage)}
    pipelines = fused_pipelines(problem, Tile(4, 4), names, None)
    kinds = {p[Stage.FUSED].prescale for p in pipelines}
    assert {Prescale.SPLIT, Prescale.FUSED} <= kinds
    for p in pipelines:
        assert (Stage.PRESCALE in p) == (p[Stage.FUSED].prescale is Prescale.SPLIT), p


def test_a_new_workspace_is_filled_before_a_stage_is_timed(root):
    """The prober's workspace grows for a probe that needs more (K3 and K4 with fp32 M after
    fp16 M's): the stages before the timed one run once into the new workspace first, so K3
    reads the V and U that K2 and K1 wrote, not the new allocation's bytes (here fp16 infinity
    in every half-word: without the fill, M comes out inf / NaN)."""
    import numpy as np

    from wino.bench.device import open_device
    from wino.bench.select import Prober
    from wino.runtime import dispatch
    from wino.vocab import Stage

    device = open_device(Target.C, root)
    problem = Problem.from_miopen(CASE)
    poisoned = device.workspace

    def inf_filled(nbytes):
        ws = poisoned(nbytes)
        ws.view(np.uint8)[...] = 0
        ws.view(np.uint8)[1::2] = 0x7C  # 0x7C00: fp16 +inf
        return ws

    device.workspace = inf_filled
    prober = Prober(device, problem, device.operands(problem), root)
    plan = dispatch(problem, target=Target.C, tile=TILE, cache_root=root)
    assert prober.time_stage(plan, Stage.GEMM) > 0
    m = device.backend.workspace(plan, prober.workspace(plan), plan.batch_split)["M"]
    assert np.isfinite(m.astype(np.float32)).all()
