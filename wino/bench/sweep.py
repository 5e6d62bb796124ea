"""The sweep: for every case and tile, pick each stage's binary by timing (``select``), verify
the assembled pipeline, time the chain; compare with cuDNN; write the rows; print the Best line.

Per tile, each transformed-dtype family gets its pick; the picks are tried fastest first
(sum of their stage times) and the first that verifies is the tile's pipeline (with
``--no-verify``, the fastest, labelled unverified). A case no pipeline fits is reported, not failed.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..problem import Problem
from ..refusals import Refused, check_problem
from ..vocab import TILES, Stage, Tile, coerce
from . import accuracy, results
from .candidates import Candidates, families
from .cases import case_key
from .compare import DirectResult
from .device import CopyShape, Device, Operands
from .modes import Compare, Engine, Timing
from .roofline import bandwidth_gbs, bound_us, fused_bound_us, fused_l2_bytes, stage_traffic
from .runs import TileRun
from .select import Pick, Prober, select

Say = Callable[[str], None]


@dataclass(frozen=True)
class Options:
    tiles: tuple[Tile, ...] = TILES
    timing: Timing = Timing.BLOCK
    verify: bool = False
    compare: Compare | None = None  # the direct engine (compare.ENGINES, by value)
    candidate_limit: int | None = None  # candidates per stage; None: the device's default
    cache_root: Path | None = None
    recheck: bool = False  # time each tile's pipeline twice (wino tune's noise check)
    #: What runs (``--engines``); empty: the unfused pipeline and ``compare`` (as before).
    engines: tuple[Engine, ...] = ()
    baked_root: Path | None = None  # where the baked engine compiles (None: a temp folder)

    def __post_init__(self) -> None:
        """Strings parse to their members ("staged", "cudnn"); a bad one lists the valid values.
        ``compare`` joins the engines; the first direct engine is ``compare``."""
        object.__setattr__(self, "timing", coerce(Timing, self.timing, "timing"))
        if self.compare is not None:
            object.__setattr__(self, "compare", coerce(Compare, self.compare, "compare"))
        engines = [coerce(Engine, e, "engines") for e in self.engines] or [Engine.UNFUSED]
        if self.compare is not None:
            engines.append(Engine(self.compare.value))
        engines = tuple(dict.fromkeys(engines))
        object.__setattr__(self, "engines", engines)
        direct = next((e for e in engines if e.direct), None)
        object.__setattr__(self, "compare", None if direct is None else Compare(direct.value))

    @property
    def directs(self) -> tuple[Engine, ...]:
        return tuple(e for e in self.engines if e.direct)

    @property
    def row_engines(self) -> tuple[str, ...]:
        """The CSV's engine names a complete case has a row of."""
        return tuple(e.row_name for e in self.engines)


@dataclass
class CaseRun:
    problem: Problem
    tiles: list[TileRun] = field(default_factory=list)
    direct: DirectResult | None = None  # the first direct engine's (``compare``)
    refused: Refused | None = None
    fused: list[TileRun] = field(default_factory=list)
    baked: TileRun | None = None
    directs: dict[Engine, DirectResult] = field(default_factory=dict)


# Planning ------------------------------------------------------------------------------------
def plan_tiles(
    problem: Problem, device: Device, options: Options, say: Say
) -> dict[Tile, list[Candidates]]:
    """The tiles that can run (their candidate families); refusals and gaps are printed."""
    limit = options.candidate_limit
    if limit is None:
        limit = device.CANDIDATE_LIMIT
    out = {}
    for tile in options.tiles:
        try:
            check_problem(problem, tile)
        except Refused as refusal:
            say(f"  {tile}: refused [{refusal.rule}] {refusal.message}")
            continue
        found = families(problem, tile, device.kernel_names, limit, device.target)
        if found:
            out[tile] = found
        else:
            say(f"  {tile}: no binary in the cache fits every stage")
    return out


# One case ------------------------------------------------------------------------------------
def bench_case(problem: Problem, device: Device, options: Options, say: Say) -> CaseRun:
    """Measure one case (every tile that fits, and cuDNN when asked)."""
    try:
        check_problem(problem)
    except Refused as refusal:
        say(f"skip {problem.label()}: refused [{refusal.rule}] {refusal.message}")
        return CaseRun(problem, refused=refusal)
    say(f"case {problem.label()}")
    unfused = {Engine.UNFUSED, Engine.BAKED} & set(options.engines)  # baked mirrors unfused
    tiles = plan_tiles(problem, device, options, say) if unfused else {}
    run = CaseRun(problem)
    if not tiles and set(options.engines) <= {Engine.UNFUSED, Engine.BAKED}:
        say("  no pipeline fits this case")
        return run
    operands = device.operands(problem)
    ref = device.reference(problem, operands) if options.verify else None
    for found in tiles.values():
        tile_run = bench_tile(problem, found, device, operands, ref, options, say)
        if tile_run is not None:
            run.tiles.append(tile_run)
            say(tile_line(problem, tile_run))
    bench_engines(run, device, operands, ref, options, say)
    return run


def bench_engines(run: CaseRun, device: Device, operands: Operands, ref, options, say) -> None:
    """The fused and baked engines and the direct ones, on the case's operands."""
    from . import engines
    from .compare import compare

    problem = run.problem
    if Engine.FUSED in options.engines:
        for tile in options.tiles:
            fused = engines.fused_tile(problem, tile, device, operands, ref, options)
            if fused is not None:
                run.fused.append(fused)
                say(tile_line(problem, fused, "fused"))
    best = engines.best_of(run.tiles)
    if Engine.BAKED in options.engines and best is not None:
        try:
            run.baked = engines.baked_run(best, device, operands, ref, options)
            say(tile_line(problem, run.baked, "baked"))
        except ValueError as why:  # BakeUnsupported: unequal batch chunks
            say(f"  baked: skipped: {why}")
    if Engine.UNFUSED not in options.engines:
        run.tiles.clear()  # timed for the baked engine only: no rows
    for engine in options.directs:
        run.directs[engine] = compare(engine.value, problem, device, operands, ref)
        say(direct_line(problem, engine.value, run.directs[engine]))
    run.direct = run.directs.get(Engine(options.compare.value)) if options.compare else None


def bench_tile(
    problem: Problem,
    found: list[Candidates],
    device: Device,
    operands: Operands,
    ref,
    options: Options,
    say: Say,
) -> TileRun | None:
    """The tile's pipeline: each family's pick, the fastest that verifies, its times."""
    picks = [select(c, Prober(device, problem, operands, options.cache_root)) for c in found]
    picks = sorted((p for p in picks if p is not None), key=lambda p: p.staged_us)
    if not picks:
        return None
    bound = accuracy.tolerance(picks[0].plan.tile, problem.dtype, device.target)
    chosen, error = picks[0], None
    if ref is not None:
        chosen, error = first_verified(picks, bound, device, operands, ref, say)
    stage_us, total = time_pick(chosen, device, operands, options.timing)
    check = time_pick(chosen, device, operands, options.timing)[1] if options.recheck else None
    cached = cached_us(chosen, device, operands, options.timing, stage_us)
    for pick in picks:  # the plans stay; the workspaces go
        pick.prober.release()
    return TileRun(chosen, stage_us, total, error, bound, check, cached)


def cached_us(pick: Pick, device: Device, operands: Operands, timing: Timing, stage_us) -> float:
    """The chain with U cached: timed whole (block), or the stage times less K1 (staged)."""
    if timing is Timing.STAGED:
        return sum(us for stage, us in stage_us.items() if stage is not Stage.FILTER)
    from .engines import chain_us

    return chain_us(pick.plan, device, operands, pick.prober.workspace(pick.plan), True)


def first_verified(
    picks: list[Pick], bound: float, device: Device, operands: Operands, ref, say: Say
) -> tuple[Pick, float]:
    """The first pick within the bound and its error; the first, failed, when none is."""
    errors = []
    for pick in picks:
        errors.append(verify(pick, device, operands, ref))
        if accuracy.passes(errors[-1], bound):
            return pick, errors[-1]
        say(
            f"  {pick.plan.tile} with {pick.plan.xdtype.short} storage: error "
            f"{errors[-1]:.3g} over the bound {bound:.3g}"
        )
    return picks[0], errors[0]


def verify(pick: Pick, device: Device, operands: Operands, ref) -> float:
    """Run the whole chain once on a poisoned output and return its error against ``ref``."""
    x, w, y = operands.arrays[0]
    device.poison(y)
    device.backend.run(pick.plan, x, w, y, pick.prober.workspace(pick.plan), None)
    device.synchronize()
    return device.error(y, ref)


def time_pick(
    pick: Pick, device: Device, operands: Operands, timing: Timing
) -> tuple[dict[Stage, float], float]:
    """(stage times, total): staged re-times each stage alone; block times the whole chain
    (K1 included) and keeps the selection's stage times."""
    plan, prober = pick.plan, pick.prober
    if timing is Timing.STAGED:
        stage_us = {stage: prober.time_stage(plan, stage, final=True) for stage in pick.stage_us}
        return stage_us, sum(stage_us.values())
    workspace, backend = prober.workspace(plan), device.backend

    def chain(s: int) -> None:
        x, w, y = operands.arrays[s]
        backend.run(plan, x, w, y, workspace, None, device.launch_stream())

    return dict(pick.stage_us), device.timer(final=True).time_us(chain, operands.sets)


# Printing ------------------------------------------------------------------------------------
def tflops(problem: Problem, time_us: float) -> float:
    """Direct-convolution work over the time (TFLOP/s)."""
    return problem.flops / (time_us * 1e-6) / 1e12 if time_us > 0 else 0.0


def plan_text(pick: Pick) -> str:
    names = " ".join(spec.name for spec in pick.specs.values())
    return f"{pick.plan.tile} [{names}]"


def tile_line(problem: Problem, run: TileRun, engine: str = "") -> str:
    check = "  unverified"
    if run.error is not None:
        check = f"  err {run.error:.2g} {'ok' if run.verified else 'FAIL'}"
    cached = "" if run.cached_us is None else f" ({run.cached_us:.1f} us U cached)"
    head = f"{engine} " if engine else ""
    return (
        f"  {head}{run.pick.plan.tile.name:5} {run.total_us:12.1f} us "
        f"{tflops(problem, run.total_us):9.3f} TFLOPS{cached}{check}  {plan_text(run.pick)}"
    )


def direct_line(problem: Problem, engine: str, direct: DirectResult) -> str:
    check = "  unverified" if direct.error is None else f"  err {direct.error:.2g}"
    return (
        f"  {engine} {direct.time_us:12.1f} us {tflops(problem, direct.time_us):9.3f} TFLOPS{check}"
    )


# Rows ----------------------------------------------------------------------------------------
def case_columns(problem: Problem, target: str) -> results.Row:
    row = {
        "target": target,
        "case": case_key(problem),
        "label": problem.label(),
        "dtype": problem.dtype.short,
    }
    row.update({name: str(getattr(problem, name)) for name in results.SHAPE})
    return row


def tile_row(
    problem: Problem, run: TileRun, device: Device, timing: Timing, engine: str = "wino"
) -> results.Row:
    plan = run.pick.plan
    row = case_columns(problem, device.target.value)
    row.update(
        engine=engine,
        plan_kind=plan.kind,
        tile=plan.tile.name,
        timing=timing.value,
        xdtype=plan.xdtype.short,
        batch_split=str(plan.batch_split),
    )
    for stage, spec in plan.specs.items():
        row[stage.short] = spec.name
    if plan.fused:
        row.update(fused_roofline_columns(plan, run, device))
    else:  # the unfused pipeline's roofline
        moved = stage_traffic(plan)
        for stage, us in run.stage_us.items():
            row[f"{stage.short}_us"] = results.fmt(us, 6)
            if stage is not Stage.GEMM:
                row[f"{stage.short}_gbs"] = results.fmt(bandwidth_gbs(moved[stage].total, us))
        row.update(stage_copy_columns(problem, moved, run.stage_us, device))
        copy, gemm = device.copy_gbs(), device.gemm_tflops(plan.xdtype, plan.accdtype)
        bound = bound_us(plan, copy, gemm)
        row.update(
            copy_gbs=results.fmt(copy),
            gemm_tflops=results.fmt(gemm),
            mma_tflops=results.fmt(device.mma_tflops(plan.xdtype, plan.accdtype)),
            bound_us=results.fmt(bound),
            bound_ratio=results.fmt(bound / run.total_us),
        )
    row.update(
        total_us=results.fmt(run.total_us, 6),
        tflops=results.fmt(tflops(problem, run.total_us), 6),
        cached_us=results.fmt(run.cached_us, 6),
        cached_tflops=results.fmt(
            tflops(problem, run.cached_us) if run.cached_us is not None else None, 6
        ),
        error=results.fmt(run.error, 3),
        tolerance=results.fmt(run.tolerance, 3),
        verified=verified_cell(run.error, run.verified),
    )
    return row


#: The stages timed against a plain copy of their own bytes (issue 9's "K2 at >= 85% of the
#: copy bandwidth" where a layer is too small for any kernel to reach the large copy's rate),
#: and the side of each that holds the caller's tensor (x, y: rotated through the operand sets
#: as the stage's are; the other side is the shared workspace; K3's sides are both workspace).
COPIED_STAGES = {Stage.INPUT: "read", Stage.GEMM: None, Stage.OUTPUT: "write"}


def stage_copy_columns(problem: Problem, moved, stage_us, device: Device) -> results.Row:
    """``<stage>_copy_us`` per copied stage the run timed: the plain copy of its bytes."""
    sets = device.operand_sets(problem)
    return {
        f"{stage.short}_copy_us": results.fmt(
            device.stage_copy_us(
                CopyShape(moved[stage].read, moved[stage].write, side, sets if side else 1)
            ),
            6,
        )
        for stage, side in COPIED_STAGES.items()
        if stage in stage_us
    }


def fused_roofline_columns(plan, run: TileRun, device: Device) -> results.Row:
    """A fused row's roofline, U cached: the largest of its memory, MMA and L2 times at the
    rates measured in the run, and its ratio to the U-cached time."""
    copy, mma, l2 = (
        device.copy_gbs(),
        device.mma_tflops(plan.xdtype, plan.accdtype),
        device.l2_gbs(),
    )
    bound = fused_bound_us(plan, copy, mma, l2)
    return {
        "copy_gbs": results.fmt(copy),
        "mma_tflops": results.fmt(mma),
        "l2_gbs": results.fmt(l2),
        "l2_mb": results.fmt(fused_l2_bytes(plan) / 1e6),
        "bound_us": results.fmt(bound),
        "bound_ratio": results.fmt(bound / run.cached_us if run.cached_us else None),
    }


def verified_cell(error: float | None, ok: bool) -> str:
    """The CSV's ``verified``: yes, no (out of bounds) or unverified (not checked)."""
    if error is None:
        return results.UNVERIFIED
    return "yes" if ok else "no"


def direct_row(problem: Problem, engine: str, direct: DirectResult, device: Device) -> results.Row:
    row = case_columns(problem, device.target.value)
    bound = accuracy.tolerance(None, problem.dtype)
    ok = direct.error is not None and accuracy.passes(direct.error, bound)
    row.update(
        engine=engine,
        timing="block",
        total_us=results.fmt(direct.time_us, 6),
        tflops=results.fmt(tflops(problem, direct.time_us), 6),
        cached_us=results.fmt(direct.time_us, 6),  # no filter transform to cache
        cached_tflops=results.fmt(tflops(problem, direct.time_us), 6),
        error=results.fmt(direct.error, 3),
        tolerance=results.fmt(bound, 3),
        verified=verified_cell(direct.error, ok),
    )
    return row


def case_rows(
    run: CaseRun, device: Device, timing: Timing, engine: Compare | None = None
) -> list[results.Row]:
    """The case's rows: unfused (``wino``) and fused per tile, baked, the direct engines."""
    p = run.problem
    rows = [tile_row(p, t, device, timing) for t in run.tiles]
    rows += [tile_row(p, t, device, Timing.BLOCK, Engine.FUSED.row_name) for t in run.fused]
    if run.baked is not None:
        rows.append(tile_row(p, run.baked, device, Timing.BLOCK, Engine.BAKED.row_name))
    directs = dict(run.directs)
    if run.direct is not None and engine is not None:
        directs.setdefault(Engine(engine.value), run.direct)
    rows += [direct_row(p, e.value, d, device) for e, d in directs.items()]
    return results.annotate(rows)


# Summary -------------------------------------------------------------------------------------
def best_line(rows: list[results.Row]) -> str:
    """``Best: <TFLOPS> TFLOPS — <case> <plan>``: the AOT wino plan (unfused or fused) with the
    most TFLOPS over all cases that verified (or, when nothing was checked, over all, marked
    unverified)."""
    usable = [
        r
        for r in rows
        if r.get("engine") in results.AOT_ENGINES  # the baked engine is the JIT yardstick
        and not results.failed(r)
        and results.num(r, "tflops")
    ]
    verified = [r for r in usable if r.get("verified") == "yes"]
    pool = verified or usable
    best = max(pool, key=lambda r: results.num(r, "tflops")) if pool else None
    if best is None:
        return "Best: 0 TFLOPS — none (no verified wino pipeline)"
    names = " ".join(best[s] for s in ("k1", "k2a", "k2", "k4", "kf") if best.get(s))
    tag = "" if best.get("verified") == "yes" else " (unverified)"
    engine = "" if best["engine"] == "wino" else f" ({best['engine']})"
    return (
        f"Best: {float(best['tflops']):.4g} TFLOPS — {best['label']} {best['tile']} "
        f"[{names}]{engine}{tag}"
    )


def exit_code(rows: list[results.Row]) -> int:
    """1 when some case has wino rows and every one of them failed verification, else 0."""
    by_case: dict[str, list[results.Row]] = {}
    for row in rows:
        if row.get("engine") == "wino":
            by_case.setdefault(row["case"], []).append(row)
    return int(any(all(results.failed(r) for r in group) for group in by_case.values()))


def winner_line(rows: list[results.Row]) -> str | None:
    if not rows or not rows[0].get("winner"):
        return None
    best = results.best_wino(rows)
    if best is None or not best.get("speedup"):
        return f"  winner: {rows[0]['winner']}"
    engine = next(r["engine"] for r in rows if r["engine"] in results.DIRECT_ENGINES)
    name = {"cudnn": "cuDNN"}.get(engine, engine)
    return (
        f"  winner: {rows[0]['winner']} (best wino, {best['tile']}: "
        f"{float(best['speedup']):.3g}x {name}'s speed)"
    )


def engines_lines(rows: list[results.Row]) -> list[str]:
    """With two engines or more: per timing (U cached, K1 per call), the fastest engine and
    its speedup over each other engine (their time / its time)."""
    out = []
    for time, what in (("cached_us", "U cached"), ("total_us", "K1 per call")):
        best = results.engine_times(rows, time)
        if len(best) < 2:
            continue
        label, fastest = min(best.values(), key=lambda lt: lt[1])
        others = ", ".join(
            f"{t / fastest:.3g}x over {name}" for name, t in sorted(best.values()) if name != label
        )
        out.append(f"  fastest, {what}: {label} {fastest:.1f} us ({others})")
    return out


# The sweep -----------------------------------------------------------------------------------
@dataclass
class Sweep:
    """A run over cases: rows (merged into the results CSV after every case), Best, exit."""

    device: Device
    options: Options
    results_path: Path | None = None
    skip_measured: bool = False
    rows: list[results.Row] = field(default_factory=list)
    runs: list[CaseRun] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # cases that broke (the sweep went on)

    @property
    def engines(self) -> tuple[str, ...]:
        return self.options.row_engines

    def run(self, cases: list[Problem], progress) -> int:
        """Measure the cases, print the Best line (last); returns the exit code."""
        self.measure_all(cases, progress)
        line, code = self.summary(cases)
        print(line, flush=True)
        return code

    def measure_all(self, cases: list[Problem], progress) -> None:
        target = self.device.target.value
        if self.results_path is not None:
            self.rows = results.read(self.results_path)
        done = set()
        if self.skip_measured:
            done = results.measured_cases(self.rows, target, self.engines)
        for problem in cases:
            progress.show(problem.label())
            if case_key(problem) in done:
                progress.say(f"skip {problem.label()}: measured in {self.results_path}")
            else:
                self.measure_or_report(problem, progress.say)
            progress.advance()
        progress.clear()

    def summary(self, cases: list[Problem]) -> tuple[str, int]:
        """The Best line and the exit code over these cases' rows."""
        mine = self.case_rows(cases)
        return best_line(mine), max(exit_code(mine), int(bool(self.errors)))

    def measure_or_report(self, problem: Problem, say: Say) -> None:
        """Measure one case; an unexpected error is reported (traceback on stderr), the sweep
        goes on with the next case and the exit code becomes 1."""
        try:
            self.measure(problem, say)
        except Exception as err:  # noqa: BLE001 - one broken case must not end a long sweep
            traceback.print_exc()
            self.errors.append(problem.label())
            say(f"error {problem.label()}: {type(err).__name__}: {err}")

    def measure(self, problem: Problem, say: Say) -> None:
        run = bench_case(problem, self.device, self.options, say)
        self.runs.append(run)
        new = case_rows(run, self.device, self.options.timing, self.options.compare)
        line = winner_line(new)
        if line:
            say(line)
        for line in engines_lines(new):
            say(line)
        if self.results_path is not None:
            self.rows = results.update(self.results_path, new)
        else:
            self.rows = results.annotate(results.merge(self.rows, new))

    def case_rows(self, cases: list[Problem]) -> list[results.Row]:
        """The rows (new or read back) of these cases on this target."""
        keys = {case_key(p) for p in cases}
        target = self.device.target.value
        return [r for r in self.rows if r["target"] == target and r["case"] in keys]
