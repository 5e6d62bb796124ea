"""cuDNN's own engines, one by one, on issue 9's layers: which of them are Winograd engines,
how fast the fastest Winograd engine is against cuDNN's fastest engine and against the engine
PyTorch's ``cudnn.benchmark`` runs.

Issue 9 asks wino's Winograd engines to beat cuDNN. cuDNN has Winograd engines of its own
(numerical note ``CUDNN_NUMERICAL_NOTE_WINOGRAD``); this census says whether cuDNN offers
them for these fp16 / bf16 NHWC layers on this GPU and what they cost, next to the implicit-GEMM
engines it picks. Per layer and dtype, every plan of cuDNN's heuristics (modes A and FALLBACK,
through the cuDNN frontend's Python graph API) is built, run on the same NHWC / KRSC tensors as
``wino bench``'s cuDNN engine (fp32 compute), checked against a float32 torch convolution and
timed as a CUDA-graph replay over operand sets that fill twice the L2 (``gpu_chain_time.graph_us``,
the other GPU scripts' timer). A plan's numerical notes come from the frontend's log
(``CUDNN_FRONTEND_LOG_INFO``), which names each execution plan with its notes.

Run on a GPU machine from the repository root, with ``nvidia-cudnn-frontend`` importable (it
loads the cuDNN that PyTorch ships):
    python3 scripts/cudnn_engines.py [--dtype fp16,bf16] [--budget 300] [MIOPEN_LINE ...]

Without lines: the public layers with C, K >= 64, 3x3 stride 1 (``scripts/gpu_engines.sh``'s).
The pure parts (the log's notes, the table) run anywhere (``tests/test_cudnn_engines.py``).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

#: One execution plan in the frontend's log: its name (tag) and its numerical notes.
PLAN_LINE = re.compile(r"EXECUTION_PLAN_DESCRIPTOR\s*:\s*(\S+?),\s*numeric_notes:\s*\[([^\]]*)\]")
WINOGRAD = "CUDNN_NUMERICAL_NOTE_WINOGRAD"
BATCHES, REPLAYS = 10, 10  # per plan: the median of 10 batches of 10 graph replays
SLOW = 5.0  # a plan whose one eager call takes this many times the fastest plan's is not timed


@dataclass(frozen=True)
class Engine:
    """One cuDNN plan on one layer: its name, notes (None: the log names none), time (None: it
    did not build, run or pass, or was too slow to time: ``why`` says which) and error against
    the float32 reference."""

    name: str
    notes: tuple[str, ...] | None
    us: float | None
    error: float | None = None
    why: str = ""

    @property
    def winograd(self) -> bool:
        return WINOGRAD in (self.notes or ())

    @property
    def tile(self) -> str:
        prefix = WINOGRAD + "_TILE_"
        tiles = [n.removeprefix(prefix) for n in self.notes or () if n.startswith(prefix)]
        return ",".join(tiles)


def plan_notes(log: str) -> dict[str, tuple[str, ...]]:
    """Plan name -> its numerical notes, from the frontend's log text (the last line a name
    has wins; notes without the ``CUDNN_NUMERICAL_NOTE_`` prefix are given it)."""
    notes = {}
    for name, text in PLAN_LINE.findall(log):
        items = (n.strip() for n in text.split(","))
        notes[name] = tuple(
            n if n.startswith("CUDNN_NUMERICAL_NOTE_") else "CUDNN_NUMERICAL_NOTE_" + n
            for n in items
            if n
        )
    return notes


def notes_for(name: str, notes: dict[str, tuple[str, ...]]) -> tuple[str, ...] | None:
    """The notes of plan ``name``: the log's entry of that name, else the one entry whose name
    ends with it (the log prefixes the operation graph's tag); None when there is none."""
    if name in notes:
        return notes[name]
    ends = [v for k, v in notes.items() if k.endswith(name)]
    return ends[0] if len(ends) == 1 else None


def too_slow(eager_us: float, engines: list[Engine]) -> bool:
    """Whether a plan whose one eager call took ``eager_us`` is past ``SLOW`` times the fastest
    plan timed so far (the census skips its timing: it is not the fastest of anything)."""
    best = fastest(engines)
    return best is not None and eager_us > SLOW * best.us


def fastest(engines: list[Engine], winograd: bool | None = None) -> Engine | None:
    """The fastest engine that ran (within the error check), of one kind (Winograd or not) or
    of any (``winograd`` None)."""
    ran = [e for e in engines if e.us is not None and (winograd is None or e.winograd == winograd)]
    return min(ran, key=lambda e: e.us) if ran else None


HEADER = (
    "| layer | dtype | plans (Winograd) | torch's cuDNN us | fastest engine us | "
    "fastest Winograd engine us (tile) | Winograd / fastest |\n"
    "|---|---|---:|---:|---:|---:|---:|"
)


def table_line(label: str, dtype: str, torch_us: float, engines: list[Engine]) -> str:
    best, wino = fastest(engines), fastest(engines, winograd=True)
    count = f"{len(engines)} ({sum(e.winograd for e in engines)})"
    best_text = f"{best.us:.1f} ({best.name})" if best else "-"
    if wino is None:
        wino_text, ratio = "none ran", "-"
    else:
        wino_text = f"{wino.us:.1f} ({wino.tile or '?'})"
        ratio = f"{wino.us / best.us:.2f}x"
    return f"| {label} | {dtype} | {count} | {torch_us:.1f} | {best_text} | {wino_text} | {ratio} |"


def engine_line(e: Engine) -> str:
    """One plan's line of the listing: name, time and error (or why it has none), its kind."""
    state = f"{e.us:8.1f} us, error {e.error:.1e}" if e.us is not None else e.why
    kind = f"Winograd {e.tile}" if e.winograd else ("notes ?" if e.notes is None else "")
    return f"    {e.name:60} {state:32} {kind}".rstrip()


def census(p, budget_s: float, log_path: Path) -> tuple[float, list[Engine]]:
    """(torch's cuDNN us, every plan's Engine) of one layer, on the GPU."""
    import cudnn
    import torch
    from gpu_chain_time import graph_us

    from wino.bench.cuda import operand_sets  # the bench's rule: sets filling twice the L2

    dt = {"fp16": torch.float16, "bf16": torch.bfloat16}[p.dtype.short]
    cdt = {"fp16": cudnn.data_type.HALF, "bf16": cudnn.data_type.BFLOAT16}[p.dtype.short]
    sets = operand_sets(p)
    xs = [torch.randn(p.N, p.H, p.W, p.C, device="cuda").to(dt) for _ in range(sets)]
    ys = [torch.empty(p.N, p.Ho, p.Wo, p.K, device="cuda", dtype=dt) for _ in range(sets)]
    w = torch.randn(p.K, p.R, p.S, p.C, device="cuda").to(dt)
    xc = [x.permute(0, 3, 1, 2) for x in xs]
    wc = w.permute(0, 3, 1, 2)
    pad, dil, stride = (p.pad_h, p.pad_w), (p.dil_h, p.dil_w), (p.stride_h, p.stride_w)
    conv = torch.nn.functional.conv2d
    torch.backends.cudnn.benchmark = True
    torch_us = graph_us([lambda s=s: conv(xc[s], wc, None, stride, pad, dil) for s in range(sets)])
    ref = conv(xc[0].float(), wc.float(), None, stride, pad, dil)

    handle = cudnn.create_handle()
    graph = cudnn.pygraph(
        io_data_type=cdt,
        intermediate_data_type=cudnn.data_type.FLOAT,
        compute_data_type=cudnn.data_type.FLOAT,
        handle=handle,
    )
    X = graph.tensor(name="X", dim=list(xc[0].shape), stride=list(xc[0].stride()), data_type=cdt)
    W = graph.tensor(name="W", dim=list(wc.shape), stride=list(wc.stride()), data_type=cdt)
    Y = graph.conv_fprop(
        image=X,
        weight=W,
        pre_padding=list(pad),
        post_padding=list(pad),
        stride=list(stride),
        dilation=list(dil),
        compute_data_type=cudnn.data_type.FLOAT,
    )
    yc = ys[0].permute(0, 3, 1, 2)
    Y.set_output(True).set_dim(list(yc.shape)).set_stride(list(yc.stride())).set_data_type(cdt)
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    graph.check_support()
    deadline = time.monotonic() + budget_s
    built, engines = [], []
    for index in range(graph.get_execution_plan_count()):
        name = graph.get_plan_name_at_index(index)
        if time.monotonic() > deadline:
            engines.append(Engine(name, None, None, why="budget"))
            continue
        try:
            graph.build_plan_at_index(index)
        except Exception as err:  # noqa: BLE001  (a plan the backend declines: record why)
            engines.append(Engine(name, None, None, why=f"build: {str(err).splitlines()[0][:60]}"))
            continue
        built.append((index, name))
    notes = plan_notes(log_path.read_text(errors="replace")) if log_path.exists() else {}
    for index, name in built:
        operands = (xs, wc, ys, ref)
        engines.append(run_plan(graph, handle, (X, W, Y), (index, name), notes, operands, engines))
    return torch_us, engines


def run_plan(graph, handle, tensors, plan, notes, operands, timed: list[Engine]) -> Engine:
    """One built plan run on every operand set: its error on the first, its time per call
    (not timed where one eager call is past ``SLOW`` times the fastest of ``timed``)."""
    import cudnn
    import torch
    from gpu_chain_time import graph_us

    X, W, Y = tensors
    xs, w, ys, ref = operands
    index, name = plan
    plan_notes_ = notes_for(name, notes)
    size = graph.get_workspace_size_plan_at_index(index)
    ws = torch.empty(max(size, 1), device="cuda", dtype=torch.uint8)

    def call(s: int) -> None:
        cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
        pack = {X: xs[s].permute(0, 3, 1, 2), W: w, Y: ys[s].permute(0, 3, 1, 2)}
        graph.execute_plan_at_index(pack, ws, index, handle)

    try:
        call(0)
        torch.cuda.synchronize()
        y = ys[0].permute(0, 3, 1, 2).float()
        error = ((y - ref).abs().max() / ref.abs().max()).item()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call(0)
        end.record()
        end.synchronize()
        eager_us = start.elapsed_time(end) * 1e3
        if too_slow(eager_us, timed):
            why = f"slow: {eager_us:.0f} us eager, over {SLOW:g}x the fastest"
            return Engine(name, plan_notes_, None, error, why=why)
        us = graph_us([lambda s=s: call(s) for s in range(len(xs))], BATCHES, REPLAYS)
    except Exception as err:  # noqa: BLE001  (a plan that cannot run or be captured)
        return Engine(name, plan_notes_, None, why=f"run: {str(err).splitlines()[0][:60]}")
    if not math.isfinite(error) or error > 0.05:
        return Engine(name, plan_notes_, None, error, why=f"error {error:.2e}")
    return Engine(name, plan_notes_, us, error)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtype", default="fp16,bf16")
    parser.add_argument("--budget", type=float, default=20.0, help="seconds of plan builds a layer")
    parser.add_argument("lines", nargs="*")
    args = parser.parse_args(argv)
    # the frontend reads its log settings once, at its first message: one log for the run
    log = Path(tempfile.mkdtemp(prefix="cudnn_fe_")) / "frontend.log"
    os.environ["CUDNN_FRONTEND_LOG_INFO"] = "1"
    os.environ["CUDNN_FRONTEND_LOG_FILE"] = str(log)

    import torch
    from gpu_l2_split import public_problems

    from wino.bench.cases import parse_dtypes, with_dtypes
    from wino.problem import Problem

    base = [Problem.from_miopen(line) for line in args.lines] or public_problems()
    print(f"{torch.cuda.get_device_name()}, cuDNN {torch.backends.cudnn.version()}")
    lines, skipped = [HEADER], []
    for dtype in parse_dtypes(args.dtype.split(",")):
        for p in with_dtypes(base, [dtype]):
            torch_us, engines = census(p, args.budget, log)
            lines.append(table_line(p.label(), dtype.short, torch_us, engines))
            print(lines[-1], flush=True)
            for e in sorted(engines, key=lambda e: (e.us is None, e.us or 0)):
                print(engine_line(e))
            skipped += [e for e in engines if e.us is None]
    text = log.read_text(errors="replace") if log.exists() else ""
    if not plan_notes(text):
        print(f"no plan notes in the frontend's log {log}; its first lines:")
        print("\n".join(text.splitlines()[:20]))
    print("\n".join(lines))
    print(
        f"{len(skipped)} plan(s) not timed (each layer lists why: build, run, error, slow, budget)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
