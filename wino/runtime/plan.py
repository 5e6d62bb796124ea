"""``dispatch(problem)``: the unfused2d_rt or fused2d_rt plan assembled from the cache.

unfused2d_rt runs K1, (K2a,) K2, K3 and K4 with V and M in the workspace; fused2d_rt runs K1,
(K2a,) and the fused kernel KF, which keeps V and M on chip (docs/FUSED.md). A plan names its
AOT binaries and their launches per batch chunk, the GEMM extents, the workspace size and the
batch split. It runs on the backend of its target (host C or CUDA).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import algorithms, cache
from ..grid import GRID_STAGES
from ..launch import (
    Launch,
    TileGrid,
    batch_chunks,
    largest_split,
    stage_launch,
    workspace_bytes,
    workspace_layout,
)
from ..pick import (
    Ranking,
    default_fused_specs,
    default_stage_specs,
    m_storable,
    output_with_epilogue,
)
from ..problem import Problem
from ..refusals import Refused, check_problem
from ..specs import RtInputSpec, StageSpec
from ..vocab import DType, Epilogue, Prescale, Stage, Target, Tile, coerce
from . import registry, tuning

#: ``dispatch(algorithm=...)``: None (dispatch chooses), "unfused" (alias "winograd_aot", the
#: original name) or "fused".
ALGORITHMS = ("unfused", "fused", "winograd_aot")
KIND_OF = {"unfused": "unfused2d_rt", "winograd_aot": "unfused2d_rt", "fused": "fused2d_rt"}


@dataclass(frozen=True)
class KernelStep:
    """One kernel launch: the AOT binary's name, its grid, block and kernargs."""

    stage: Stage
    name: str
    launch: Launch


@dataclass(frozen=True)
class GemmStep:
    """K3: per (bin, group) M[P x K/G] = V[P x C/G] . U[K/G x C/G]^T, fp32 accumulate."""

    batch: int  # A * G
    m: int  # P (tiles of the chunk)
    n: int  # K/G
    k: int  # C/G
    xdtype: DType
    accdtype: DType
    stage: Stage = Stage.GEMM

    @property
    def name(self) -> str:
        return (
            f"k3_gemm_{self.xdtype.short}_{self.accdtype.short}"
            f"_b{self.batch}_m{self.m}_n{self.n}_k{self.k}"
        )

    @property
    def flops(self) -> int:
        return 2 * self.batch * self.m * self.n * self.k


Step = KernelStep | GemmStep


@dataclass
class Plan:
    """What ``dispatch`` returns: run it with ``plan.run(x, w)``."""

    problem: Problem
    target: Target
    tile: Tile
    specs: dict[Stage, StageSpec]
    manifest: cache.Manifest
    batch_split: int
    chunks: list[tuple[int, int]]  # (first image, images)
    chunk_steps: dict[int, list[Step]]  # images in a chunk -> its steps
    workspace_bytes: int
    source: str  # "tuning DB" or "default pick"
    kind: str = "unfused2d_rt"
    reason: str = ""  # why this plan kind (plan.explain says it)
    _backend: Any = field(default=None, repr=False)
    _program: Any = field(default=None, repr=False)  # the backend's prepared launches
    _bounds: dict = field(default_factory=dict, repr=False)  # checked calls' arrays (backends)
    _workspaces: dict = field(default_factory=dict, repr=False)  # its own, per stream/thread
    _filters: dict = field(default_factory=dict, repr=False)  # conv2d(reuse_filter=True)
    _graphs: Any = field(default=None, repr=False)  # CUDA: runs as graphs (graphs.RunGraphs)

    @property
    def steps(self) -> list[Step]:
        """The steps of the first (largest) chunk."""
        return self.chunk_steps[self.chunks[0][1]]

    @property
    def fused(self) -> bool:
        return Stage.FUSED in self.specs

    @property
    def xdtype(self) -> DType:
        """U's (and V's, or the MMA operands') dtype."""
        return self.specs[Stage.FILTER].xdtype

    @property
    def accdtype(self) -> DType:
        return DType.FP32 if self.fused else self.specs[Stage.OUTPUT].accdtype

    @property
    def epilogue(self) -> Epilogue:
        """What the last kernel (K4 or KF) applies before y's store."""
        return self.specs[Stage.FUSED if self.fused else Stage.OUTPUT].epilogue

    @property
    def prescale(self) -> Prescale:
        return self.specs[Stage.FUSED if self.fused else Stage.INPUT].prescale

    def layout(self) -> dict[str, tuple[tuple[int, ...], DType]]:
        return plan_layout(self.problem, self.tile, self.specs, self.batch_split)

    def explain(self) -> str:
        lines = [
            f"plan {self.kind} for {self.problem.label()} on {self.target.value} "
            f"({self.manifest.flavor}), tile {self.tile.name}, specs from {self.source}",
            f"  {self.kind}: {self.reason}",
            f"  cache {self.manifest.origin()}",
            f"  batch split {self.batch_split}: chunks {self.chunks}",
            f"  workspace {self.workspace_bytes} bytes: "
            + ", ".join(
                f"{k} {list(shape)} {dt.short}" for k, (shape, dt) in self.layout().items()
            ),
        ]
        for images, steps in self.chunk_steps.items():
            lines.append(f"  chunk of {images} image(s):")
            for step in steps:
                if isinstance(step, GemmStep):
                    lines.append(f"    {step.stage.short:4} {step.name}")
                else:
                    lines.append(
                        f"    {step.stage.short:4} {step.name} grid={step.launch.grid}"
                        f" block={step.launch.block}"
                    )
                    lines += [f"         {text}" for text in kernargs_text(step.launch.kernargs)]
        return "\n".join(lines)

    # Running ---------------------------------------------------------------------------------
    @property
    def held_bytes(self) -> int:
        """Bytes of the plan's own workspaces held now (``run`` without ``workspace=``: one per
        stream on CUDA, per thread on the host, up to OWN_WORKSPACE_SLOTS)."""
        return sum(int(raw.nbytes) for raw in list(self._workspaces.values()))  # numpy, CuPy, torch

    def release(self) -> None:
        """Drop what the plan holds between runs: its own workspaces, the checked calls'
        arrays, ``conv2d(reuse_filter=True)``'s filters and its runs' CUDA graphs. Safe at
        any time: on CUDA a workspace was allocated on the one stream it serves, and its runs
        (a run graph's launch included) went on that stream, so the framework's allocator
        reuses it in order after that stream's work. The next run checks its arrays and
        allocates again."""
        self._workspaces.clear()
        self._bounds.clear()
        self._filters.clear()
        if self._graphs is not None:
            self._graphs.clear()

    def backend(self):
        if self._backend is None:
            self._backend = registry.backend_for(self.target, self.manifest)
        return self._backend

    def transform_filter(self, w, workspace=None, stream=None):
        """K1 alone: returns (U, fs) for this plan; pass it as ``U=`` to later runs."""
        return self.backend().transform_filter(self, w, workspace, stream)

    def run(self, x, w=None, y=None, workspace=None, U=None, stream=None, bias=None):
        """y = conv(x, w). ``U`` (from transform_filter) skips K1; ``workspace`` (bytes or an
        array of at least ``workspace_bytes``) and ``y`` may be passed in to avoid allocation.
        ``bias`` ([K], the io dtype, on x's device): required when the plan's epilogue adds
        one (``dispatch(..., epilogue=...)``), refused otherwise.

        On CUDA the launches (and the cuBLAS GEMM) go on ``stream``: a torch.cuda.Stream, a
        CuPy stream or a raw ``cudaStream_t`` int; None is the caller's current stream
        (PyTorch's for torch tensors, CuPy's for CuPy arrays). With ``y`` and ``workspace``
        given, a run allocates nothing, synchronizes nothing and reads nothing back, so CUDA
        graph capture (``torch.cuda.graph``, CuPy stream capture) records it."""
        return self.backend().run(self, x, w, y, workspace, U, stream, bias)

    def graph(self, x, w=None, y=None, workspace=None, U=None, bias=None):
        """Capture ``run(x, w or U, y, workspace, bias)`` once (one eager run first: module
        loads, cuBLAS handle) and return a ``PlanGraph`` whose ``replay()`` re-issues it on the
        same arrays; fill x (and w, bias) in place between replays. ``y`` and ``workspace``
        are required: a replay writes where the capture did."""
        from .graphs import capture

        return capture(self, x, w, y, workspace, U, bias)


def kernargs_text(kernargs: dict[str, int]) -> list[str]:
    """The kernel arguments for people: the extents by name, then each magic pair (the
    ``m_X``, ``s_X`` fields, wino.launch.KERNARG_MAGICS) as the division by X it stands for."""
    extents = {k: v for k, v in kernargs.items() if not k.startswith(("m_", "s_"))}
    divisors = [k[2:] for k in kernargs if k.startswith("m_")]
    lines = ["args " + " ".join(f"{k}={v}" for k, v in extents.items())]
    if divisors:
        pairs = (f"/{d} ({kernargs[f'm_{d}']:#x}, >>{kernargs[f's_{d}']})" for d in divisors)
        lines.append("magic pairs " + ", ".join(pairs))
    return lines


def plan_layout(problem: Problem, tile: Tile, specs: dict[Stage, StageSpec], chunk: int):
    """The workspace buffers: U, fs, (ts,) V, M; the fused plan keeps V and M on chip."""
    fused = Stage.FUSED in specs
    main = specs[Stage.FUSED if fused else Stage.INPUT]
    acc = DType.FP32 if fused else specs[Stage.OUTPUT].accdtype
    layout = workspace_layout(problem, tile, specs[Stage.FILTER].xdtype, acc, chunk)
    if main.prescale is Prescale.NONE or (fused and main.prescale is Prescale.FUSED):
        del layout["ts"]  # no tile scales, or KF's own (on chip)
    if fused:
        del layout["V"], layout["M"]
    return layout


def default_tile(problem: Problem) -> Tile:
    """F4x4 unless the output is too small for it to pay (then F2x2)."""
    small = min(-(-problem.Ho // problem.dil_h), -(-problem.Wo // problem.dil_w)) < 8
    return Tile(2, 2) if small else Tile(4, 4)


def _steps(problem: Problem, specs: dict[Stage, StageSpec], images: int) -> list[Step]:
    chunk = problem.with_batch(images)
    if Stage.FUSED in specs:  # K1, (K2a,) KF
        return [KernelStep(st, sp.name, stage_launch(sp, chunk)) for st, sp in specs.items()]
    k2: RtInputSpec = specs[Stage.INPUT]
    steps: list[Step] = []
    for stage, spec in specs.items():
        if stage is Stage.OUTPUT:
            tg = TileGrid.of(chunk, spec.tile)
            steps.append(
                GemmStep(
                    spec.tile.bins * problem.groups,
                    tg.P,
                    problem.Kg,
                    problem.Cg,
                    k2.xdtype,
                    spec.accdtype,
                )
            )
        launch = stage_launch(spec, chunk, tile_scale=k2.prescale is not Prescale.NONE)
        steps.append(KernelStep(stage, spec.name, launch))
    return steps


def _specs_tile(specs: dict[Stage, StageSpec], tile: Tile | None) -> Tile:
    """The one tile of caller-given specs (``tile``, when given too, must be it)."""
    tiles = {spec.tile for spec in specs.values()}
    if len(tiles) != 1:
        raise ValueError(
            f"dispatch: specs mix tiles {sorted(t.name for t in tiles)}; pass one tile's specs"
        )
    (only,) = tiles
    if tile is not None and tile != only:
        raise ValueError(f"dispatch: tile {tile.name} but the specs are {only.name}")
    return only


def _ordered(specs: dict[Stage, StageSpec]) -> dict[Stage, StageSpec]:
    """The specs in pipeline order (K1, K2a, K2, K4 or K1, K2a, KF), checked to make one
    pipeline: each under its own stage, K2a exactly when K2 (or KF) takes the split prescale,
    and K1 storing U in K2's transformed dtype (KF's MMA dtype)."""
    for stage, spec in specs.items():
        if not isinstance(stage, Stage) or spec.stage is not stage:
            raise ValueError(
                f"dispatch: specs[{stage!r}] is a {spec.stage.short} spec "
                f"({spec.name}); key each spec by its own Stage"
            )
    fused = Stage.FUSED in specs
    need = {Stage.FILTER, Stage.FUSED} if fused else {Stage.FILTER, Stage.INPUT, Stage.OUTPUT}
    k2 = specs.get(Stage.FUSED if fused else Stage.INPUT)
    if k2 is not None and k2.prescale is Prescale.SPLIT:
        need.add(Stage.PRESCALE)
    if set(specs) != need:
        raise ValueError(
            f"dispatch: specs for stages {sorted(s.short for s in specs)}; this "
            f"pipeline needs exactly {sorted(s.short for s in need)} (k2a goes "
            "with prescale split only; kf replaces k2 and k4)"
        )
    k1 = specs[Stage.FILTER]
    if k1.xdtype is not k2.xdtype:
        raise ValueError(
            f"dispatch: K1 {k1.name} stores U as {k1.xdtype.short} but K2 "
            f"{k2.name} stores V as {k2.xdtype.short}; the GEMM needs one dtype"
        )
    k4 = specs.get(Stage.OUTPUT)
    if k4 is not None and not m_storable(k4.accdtype, k2.xdtype):
        raise ValueError(
            f"dispatch: K4 {k4.name} reads M as {k4.accdtype.short} but K2 {k2.name} stores V "
            f"as {k2.xdtype.short}; the GEMM writes fp16 M only from fp16 V and U: use a K4 "
            "with accdtype fp32, or fp16 storage for K1 and K2"
        )
    return {stage: specs[stage] for stage in GRID_STAGES if stage in specs}


def _pick_target(target: Target | str | None, cache_root=None) -> Target:
    """The target given, else what the cache holds: cuda where a cuda cache is on the search
    path and CUDA is usable (CuPy is imported only then), else c."""
    if target is not None:
        return coerce(Target, target, "target")
    try:
        cache.manifest_location(Target.CUDA, cache_root)
    except FileNotFoundError:
        return Target.C
    return Target.CUDA if registry.cuda_available() else Target.C


#: Plans by everything that decides one: key -> (cache state, plan), oldest first.
_PLANS: dict[tuple, tuple[tuple, Plan]] = {}
PLAN_CACHE_SIZE = 4096

#: How long a seen dispatch trusts the cache files it last looked at (seconds): a manifest or
#: tuning DB published by another process is noticed within this time; one published by this
#: process (``wino.cache.atomic_write``, ``tuning.record``) or after ``invalidate()`` at once.
REVALIDATE_S = 0.05

#: Seen calls by their arguments as given: key -> (trusted until, publications, plan).
_SEEN: dict[tuple, tuple[float, int, Plan]] = {}


def _cwd(cache_root, env: str | None) -> str | None:
    """The working directory when the cache search depends on it (./build is looked at, or
    the cache root or $WINO_BUILD is relative), else None: a seen call's key holds it."""
    chosen = cache_root if cache_root is not None else env
    absolute = _ABSOLUTE.get(chosen)
    if absolute is None:
        if len(_ABSOLUTE) >= 64:
            _ABSOLUTE.clear()
        absolute = _ABSOLUTE[chosen] = bool(chosen) and os.path.isabs(chosen)
    return None if absolute else os.getcwd()


#: Whether a cache root (or $WINO_BUILD) is an absolute path, by its value.
_ABSOLUTE: dict = {}


def clear_plan_cache() -> None:
    """Forget every cached plan (the manifest and tuning-DB caches check the files anyway)."""
    _PLANS.clear()
    _SEEN.clear()


def invalidate() -> None:
    """Make the next dispatch of every seen problem look at the cache files again (for a
    manifest or tuning DB that another process published less than REVALIDATE_S ago)."""
    _SEEN.clear()


def _pick_algorithm(
    algorithm: str | None,
    specs,
    problem: Problem | None = None,
    recorded: tuple[str, str] | None = None,
) -> tuple[str, str]:
    """(plan kind, why): the caller's algorithm (or specs, whose stages decide it); else the
    tuning DB's recorded winner for the problem (``recorded``: tuning.kind_of); else
    grids/algorithms.yaml's first rule that holds (wino.algorithms)."""
    if algorithm is not None and algorithm not in ALGORITHMS:
        raise ValueError(
            f"algorithm {algorithm!r}: expected one of {ALGORITHMS} or None (dispatch chooses)"
        )
    if specs is not None and algorithm is None:
        if Stage.FUSED in specs:
            return "fused2d_rt", "the caller's specs include a fused (kf) kernel"
        return "unfused2d_rt", "the caller's specs are the unfused stages"
    if algorithm is not None:
        return KIND_OF[algorithm], f"forced by algorithm={algorithm!r}"
    if problem is None:
        return "unfused2d_rt", "no problem given: the unfused pipeline"
    if recorded is not None:
        return recorded
    choice = algorithms.choose(problem)
    return choice.algorithm.plan_kind, choice.explain()


def dispatch(
    problem: Problem,
    *,
    algorithm: str | None = None,
    target: Target | str | None = None,
    tile: Tile | str | None = None,
    batch_split: int | None = None,
    workspace_limit: int | None = None,
    cache_root: Path | None = None,
    specs: dict[Stage, StageSpec] | None = None,
    epilogue: Epilogue | str = Epilogue.NONE,
) -> Plan:
    """Assemble the plan for ``problem`` from the cache (no compiler involved).

    Plans are cached per process by every argument and by the state (path, mtime, size,
    inode) of the manifest and tuning DB they were made from. A seen call is one dict lookup
    and returns the same Plan object, whose backend, kernel handles and packed kernargs are
    then reused; it looks at the files again (a few stat calls) once REVALIDATE_S has passed,
    after this process published a manifest or tuning DB, or after ``invalidate()``.
    ``algorithm``: None (dispatch chooses: the tuning DB's recorded winner, else the first
    rule of grids/algorithms.yaml that holds; ``plan.explain()`` says which), "unfused" or
    "fused" (docs/FUSED.md). ``epilogue`` (an Epilogue or its value: "bias",
    "relu", "bias_relu"): the last kernel adds the bias and / or applies ReLU before y's
    store (``plan.run(..., bias=)``); without a ``tile``, a tuning DB's tile that has no such
    kernel gives way to the default tile. Raises Refused (with the rule id) for problems wino
    does not serve (``epilogue_not_in_grid``: no kernel of the tile has the epilogue),
    KeyError naming a missing kernel and the command that builds it,
    FileNotFoundError when no cache exists."""
    seen = None
    if specs is None:
        env = os.environ.get("WINO_BUILD") or None
        seen = (problem, algorithm, target, tile, batch_split, workspace_limit, cache_root, env)
        seen += (_cwd(cache_root, env), epilogue)
        hit = _SEEN.get(seen)
        if hit is not None and time.monotonic() < hit[0] and hit[1] == cache.publications:
            return hit[2]
    publications = cache.publications
    epilogue = coerce(Epilogue, epilogue, "epilogue")
    plan = _dispatch(
        problem, algorithm, target, tile, batch_split, workspace_limit, cache_root, specs, epilogue
    )
    if seen is not None:
        if len(_SEEN) >= PLAN_CACHE_SIZE:
            _SEEN.pop(next(iter(_SEEN)))  # the oldest
        _SEEN[seen] = (time.monotonic() + REVALIDATE_S, publications, plan)
    return plan


def _dispatch(
    problem, algorithm, target, tile, batch_split, workspace_limit, cache_root, specs, epilogue
):
    """``dispatch`` with the cache files looked at (the plan cache checked against them)."""
    target = _pick_target(target, cache_root)
    tile = coerce(Tile, tile, "tile") if tile is not None else None
    frozen = None if specs is None else tuple(sorted(specs.items(), key=lambda kv: kv[0].value))
    try:  # the manifest along the search path (./build, the checkout, an installed wheel)
        found = cache.manifest_location(target, cache_root)
    except FileNotFoundError:  # no cache: a refusal still says what is wrong with the problem
        kind = (*_pick_algorithm(algorithm, specs, problem), algorithm, epilogue)
        tuned = None if specs is not None else tuning.entry(problem, target, cache_root)
        args = (problem, target, tile, batch_split, workspace_limit, cache_root, specs)
        _assemble(*args, None, kind, tuned)
        raise
    db = tuning.beside(found[0])  # the tuning DB of the cache found, not of the write folder
    # first (once per file version): its index stamps the declared files the rules read
    manifest = cache.read_manifest(*found)
    db_key = cache._file_key(db)  # the DB is read once a call, as of this state
    tuned = None if specs is not None else tuning.entry_at(problem, target, db, db_key)
    # (plan kind, why, as asked, epilogue)
    picked = _pick_algorithm(algorithm, specs, problem, tuning.kind_of(tuned, db))
    kind = (*picked, algorithm, epilogue)
    key = (problem, target, tile, batch_split, workspace_limit, cache_root, frozen, kind)
    state = (found, (db, db_key))
    hit = _PLANS.get(key)
    if hit is not None and hit[0] == state:
        return hit[1]
    args = (problem, target, tile, batch_split, workspace_limit, cache_root, specs)
    plan = _assemble(*args, manifest, kind, tuned)
    if len(_PLANS) >= PLAN_CACHE_SIZE:
        _PLANS.pop(next(iter(_PLANS)))  # the oldest
    _PLANS[key] = (state, plan)
    return plan


def _tuned_with_epilogue(problem, specs, epilogue, manifest, caller_tile):
    """A tuning DB's unfused specs with K4 swapped for its epilogue variant (the tuned K4 with
    the epilogue where the manifest holds it, else the first fit); None when the tuned tile
    has no K4 with the epilogue and the caller left the tile to dispatch."""
    try:
        ranking = _ranking(manifest)
        return output_with_epilogue(problem, specs, epilogue, ranking, manifest.target)
    except Refused:
        if caller_tile is not None:
            raise
        return None


#: Default-pick rankings by manifest: id -> (manifest, ranking of the kernels it holds).
_RANKINGS: dict[int, tuple[cache.Manifest, Ranking]] = {}


def _ranking(manifest: cache.Manifest) -> Ranking:
    """The default-pick order over the kernels a manifest holds (one per parsed manifest)."""
    hit = _RANKINGS.get(id(manifest))
    if hit is None or hit[0] is not manifest:
        if len(_RANKINGS) >= 16:
            _RANKINGS.pop(next(iter(_RANKINGS)))  # the oldest
        hit = _RANKINGS[id(manifest)] = (
            manifest,
            Ranking(records=manifest.records_of, make=manifest.spec),
        )
    return hit[1]


def _assemble(
    problem: Problem,
    target: Target,
    tile: Tile | None,
    batch_split: int | None,
    workspace_limit: int | None,
    cache_root: Path | None,
    specs: dict[Stage, StageSpec] | None,
    manifest: cache.Manifest | None,
    kind: tuple[str, str, str | None],
    tuned: dict | None,
) -> Plan:
    """The plan from the manifest ``_dispatch`` read (None: no cache was found; the problem is
    checked, then FileNotFoundError says where the runtime looked) and the problem's tuning DB
    entry (``tuned``: None without one, or with the caller's specs)."""
    plan_kind, reason, algorithm, epilogue = kind
    fused = plan_kind == "fused2d_rt"
    caller_tile = tile
    use_db = tuned is not None and tuning.plan_kind(tuned) == plan_kind  # the DB's winner
    if specs is not None:
        tile = _specs_tile(specs, tile)
    else:
        best = tuning.tile_of(tuned) if use_db else None
        tile = tile or best or default_tile(problem)
    check_problem(problem, tile)  # the index rule against the tile that will run
    if manifest is None:
        manifest = cache.find_manifest(target, cache_root)  # raises FileNotFoundError
    source = "caller"
    if specs is None and use_db:
        specs, source = tuning.specs_of(tuned, tile), "tuning DB"
        if specs is not None and epilogue is not Epilogue.NONE and fused:
            specs = None  # a recorded kf without the epilogue: the default fused pick has it
        if specs is not None and epilogue is not Epilogue.NONE:
            specs = _tuned_with_epilogue(problem, specs, epilogue, manifest, caller_tile)
            if specs is None:  # the tuned tile has no such K4: the default tile's pick
                tile = default_tile(problem)
                check_problem(problem, tile)
    if specs is None and fused and algorithm is None:  # a rule chose fused: may it serve?
        try:
            default_fused_specs(problem, tile, epilogue=epilogue, target=target)
        except Refused as refusal:
            fused, plan_kind = False, "unfused2d_rt"
            reason += f"; but the fused kernel does not serve it ({refusal}): unfused2d_rt"
    if specs is None:
        if fused:
            specs = default_fused_specs(problem, tile, epilogue=epilogue, target=target)
        else:
            specs = default_stage_specs(
                problem, tile, ranking=_ranking(manifest), target=target, epilogue=epilogue
            )
        source = "default pick"
    specs = _ordered(specs)
    last = specs[Stage.FUSED if Stage.FUSED in specs else Stage.OUTPUT]
    if epilogue is not Epilogue.NONE and last.epilogue is not epilogue:
        raise ValueError(
            f"dispatch: epilogue={epilogue.value!r} but the caller's specs end in {last.name} "
            f"(epilogue {last.epilogue.value}); pass specs whose last kernel has it, or no specs"
        )
    if (Stage.FUSED in specs) != fused:
        raise ValueError(
            f"dispatch: algorithm={algorithm!r} asks for {plan_kind} but the specs "
            f"{[s.name for s in specs.values()]} make the other plan kind"
        )
    for spec in specs.values():
        manifest.kernel(spec.name, verify=False)
    acc = DType.FP32 if fused else specs[Stage.OUTPUT].accdtype
    # the fused workspace (U, fs, ts) hardly grows with the chunk: no workspace bisection
    limit_split = largest_split(
        problem,
        tile,
        None if fused else workspace_limit,
        specs[Stage.FILTER].xdtype,
        acc,
    )
    split = limit_split if batch_split is None else batch_split
    chunks = batch_chunks(problem.N, split)
    split = chunks[0][1]
    chunk_steps = {images: _steps(problem, specs, images) for images in {c for _, c in chunks}}
    ws = workspace_bytes(plan_layout(problem, tile, specs, split))
    if workspace_limit is not None and ws > workspace_limit:
        raise Refused(
            "workspace_over_limit",
            f"the workspace of {ws} bytes for a batch split of {split} exceeds the "
            f"limit of {workspace_limit} bytes; raise the limit or lower the split",
        )
    return Plan(
        problem,
        target,
        tile,
        specs,
        manifest,
        split,
        chunks,
        chunk_steps,
        ws,
        source,
        plan_kind,
        reason,
    )
