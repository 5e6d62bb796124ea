"""The chain per tile on the 256/512-channel public layers: each tile's default pick, U cached,
timed as scripts/gpu_chain_time.py times it (CUDA-graph replay), with cuDNN in the same run and
the error against the tile's bound. Run on a GPU machine from the repository root:

    python3 scripts/gpu_tiles.py [fp16|bf16]        # builds the picks into $WINO_BUILD/tiles
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpu_chain_time import DTYPES, graph_us  # noqa: E402

import wino  # noqa: E402
from wino.builder import builder  # noqa: E402
from wino.pick import default_stage_specs  # noqa: E402
from wino.refusals import Refused  # noqa: E402
from wino.runtime.plan import dispatch  # noqa: E402
from wino.runtime.verify import bound_for  # noqa: E402
from wino.vocab import DType, Target, Tile  # noqa: E402

LINES = (
    "conv -n 16 -c 256 -H 56 -W 56 -k 256 -y 3 -x 3 -p 1 -q 1",
    "conv -n 16 -c 256 -H 28 -W 28 -k 512 -y 3 -x 3 -p 1 -q 1",
    "conv -n 16 -c 512 -H 28 -W 28 -k 512 -y 3 -x 3 -p 1 -q 1",
    "conv -n 16 -c 512 -H 14 -W 14 -k 512 -y 3 -x 3 -p 1 -q 1",
    "conv -n 64 -c 256 -H 14 -W 14 -k 256 -y 3 -x 3 -p 1 -q 1",
    "conv -n 16 -c 128 -H 56 -W 56 -k 256 -y 3 -x 3 -p 1 -q 1",
)
TILES = (Tile(4, 4), Tile(6, 6), Tile(6, 4), Tile(4, 6))
ROOT = Path(os.environ.get("WINO_BUILD", "/tmp/wino-tiles")) / "tiles"
PREFIX = {"fp16": "convfp16 ", "bf16": "convbfp16 "}  # MIOpenDriver's names


def picks(problems) -> dict:
    out = {}
    for p in problems:
        for tile in TILES:
            try:
                out[(p, tile)] = default_stage_specs(p, tile, target=Target.CUDA)
            except Refused as err:
                print(f"{p.label()} {tile}: no pick ({err.rule})")
    return out


def tile_cell(problem, tile, specs, tensors, cudnn_us: float) -> str:
    x, w, y, ref = tensors
    plan = dispatch(problem, target="cuda", tile=tile, cache_root=ROOT, specs=specs)
    U = plan.transform_filter(w)
    backend = plan.backend()
    ws = backend.raw_workspace(plan, None, backend.context(x, None))
    us = graph_us([lambda: plan.run(x, U=U, y=y, workspace=ws)])
    err = (y.permute(0, 3, 1, 2).float() - ref).abs().max().item() / ref.abs().max().item()
    bound = bound_for(tile, problem.dtype)
    return f"{tile} {us:6.1f} us x{cudnn_us / us:.3f} err {err:.1e}/{bound:.0e}"


def layer(problem, chosen: dict, dt) -> str:
    p = problem
    x = torch.randn(p.N, p.H, p.W, p.C, device="cuda").to(dt)
    w = torch.randn(p.K, 3, 3, p.Cg, device="cuda").to(dt)
    y = torch.empty(p.N, p.Ho, p.Wo, p.K, device="cuda", dtype=dt)
    xc = x.permute(0, 3, 1, 2)
    wc = w.permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)
    ref = torch.nn.functional.conv2d(xc.float(), wc.float(), padding=(p.pad_h, p.pad_w))
    torch.backends.cudnn.benchmark = True
    cudnn_us = graph_us([lambda: torch.nn.functional.conv2d(xc, wc, padding=(p.pad_h, p.pad_w))])
    cells = [f"{p.label():40} cuDNN {cudnn_us:6.1f}"]
    for tile in TILES:
        if (p, tile) in chosen:
            cells.append(tile_cell(p, tile, chosen[(p, tile)], (x, w, y, ref), cudnn_us))
    return " | ".join(cells)


def main() -> None:
    dtype = DType(sys.argv[1] if len(sys.argv) > 1 else "fp16")
    problems = [
        wino.Problem.from_miopen(line.replace("conv ", PREFIX[dtype.value], 1)) for line in LINES
    ]
    chosen = picks(problems)
    specs = sorted({s for v in chosen.values() for s in v.values()}, key=lambda s: s.name)
    builder.build(specs, [Target.CUDA], root=ROOT, jobs=os.cpu_count())
    for p in problems:
        print(layer(p, chosen, DTYPES[dtype.value]), flush=True)


if __name__ == "__main__":
    main()
