"""The fused kernel (KF, plan kind fused2d_rt) on an H200: build, check, time, sanitize.

    python3 scripts/gpu_fused.py build [PART]  # the CUDA cache this script needs (the KF specs
                                               # named *PART*; PART,PART: either; PART$: the
                                               # name's end), into $WINO_BUILD
    python3 scripts/gpu_fused.py check     # every grid KF spec on CUDA against float64
    python3 scripts/gpu_fused.py time [fp16|bf16] [PART] [E]  # fused (specs named *PART*) vs
                                                  # unfused vs cuDNN on public layers, x times 2^E
    python3 scripts/gpu_fused.py sanitize  # one small fused plan (run under compute-sanitizer)
    python3 scripts/gpu_fused.py profile LAYER SPEC  # one layer's fused plan, twice (for ncu)
    python3 scripts/gpu_fused.py resident [PART]  # pipelined KF specs on a grid of SMs workgroups
    python3 scripts/gpu_fused.py epilogue [fp16|bf16]  # bias + ReLU: dispatch's plan with and
                                                       # without, the chunked kernel, cuDNN

Run from the repository root with CuPy and PyTorch importable (doit is not needed: the build
goes through wino.builder.builder). scripts/gpu_fused.sh runs all four in order.
"""

from __future__ import annotations

import json
import math
import os
import sys
import zlib
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from wino import grid  # noqa: E402
from wino.builder import builder  # noqa: E402
from wino.geometry import TileGrid  # noqa: E402
from wino.launch import spread, stage_launch  # noqa: E402
from wino.pick import default_fused_specs, default_stage_specs, fused_pipeline  # noqa: E402
from wino.problem import Problem  # noqa: E402
from wino.refusals import Refused  # noqa: E402
from wino.runtime import conv2d_reference, dispatch, relative_error  # noqa: E402
from wino.runtime.plan import default_tile  # noqa: E402
from wino.runtime.verify import bound_for  # noqa: E402
from wino.specs import spec_from_fields  # noqa: E402
from wino.vocab import DType, Epilogue, Prescale, Stage, Target, Tile  # noqa: E402

ROOT = Path(os.environ.get("WINO_BUILD", "/tmp/wino-fused-build"))
#: The epilogue-free grid KF specs (the epilogue variants add a bias / ReLU to the same text),
#: then the off-grid ones this script still builds, checks, times and sanitizes: the held fp16
#: two-pass kernels with the output transform on fp16 pairs (axis obits 16), and the held hold 64
#: kernels with their own tile scales on the warpgroup MMA (axis wgmma 1): 32 tiles at 24, 16 and 12
#: warps (one workgroup an SM), 16 tiles at 8 and 4 (two and three).
GRID_FUSED = tuple(s for s in grid.aot_stage_specs(Stage.FUSED) if s.epilogue is Epilogue.NONE)
_TWO_PASS = tuple(
    s
    for s in GRID_FUSED
    if s.hold and s.tcx == 0 and s.kpass and not s.chain and not s.min_blocks and not s.tsfix
)
FUSED = (
    GRID_FUSED
    + tuple(s.replace(obits=16) for s in _TWO_PASS if s.io is DType.FP16)
    + tuple(
        s.replace(tiles=tiles, warps=warps, kpass=0, wgmma=1)
        for s in _TWO_PASS
        if s.hold == 64 and s.tile == Tile(4, 4) and s.prescale is Prescale.FUSED
        for tiles, warps in ((32, 24), (32, 16), (32, 12), (16, 8), (16, 4))
    )
)
#: The held kernels with their own scales at the fixed tile scale 2^-6, checked (axis tsfix 6;
#: the grid has the two-pass ones, hold 64 and 128): the 24- and 16-warp wgmma ones.
FUSED += tuple(
    s.replace(tsfix=6)
    for s in FUSED
    if s.wgmma and s.warps in (24, 16) and s.prescale is Prescale.FUSED and not s.tsfix
)

#: The default held kernels at the fixed tile scale with each pass of a bin on its own warp (axis
#: qsplit 1): 24 warps at 80 registers, no M parked (hold 128: grid specs since stop 46; hold 64:
#: off the grid, 2-3% slower).
FUSED = tuple(
    dict.fromkeys(  # the hold 128 ones are grid specs since stop 46: each once
        FUSED
        + tuple(
            s.replace(warps=24, qsplit=1) for s in FUSED if s.tsfix and s.kpass and s.warps == 18
        )
    )
)

#: The default held kernels at the fixed tile scale (hold 64 and 128, 18 warps, and the hold 128
#: qsplit picks) with every step's windows staged in V by async copies (axis xstage 1, off the
#: grid).
FUSED += tuple(
    s.replace(xstage=1)
    for s in FUSED
    if s.tsfix and s.kpass and not s.wgmma and (s.warps == 18 or (s.qsplit and s.hold == 128))
)

#: The 16-tile two-pass kernels at two workgroups an SM (min_blocks 2) at the fixed tile scale,
#: with and without the staged windows: one workgroup's copies and transforms can overlap the
#: other's MMA.
FUSED += tuple(
    s.replace(tsfix=6, xstage=xstage)
    for s in GRID_FUSED
    if s.min_blocks == 2 and s.prescale is Prescale.FUSED and (s.xbits == 16 or s.io is DType.BF16)
    for xstage in (0, 1)
)

#: The host tests' shapes (tests/test_fused.py): odd extents, C/G % 8 == 0 (async U copies),
#: dilation, groups, no padding.
SHAPES = [
    ("odd", {}),
    ("c48_k40", {"C": 48, "K": 40, "H": 9, "W": 10}),
    ("dil2x3", {"C": 19, "K": 11, "H": 17, "W": 19, "dil_h": 2, "dil_w": 3, "pad_h": 2}),
    ("g3_odd", {"C": 27, "K": 15, "groups": 3}),
    ("g2_c32", {"C": 64, "K": 40, "H": 7, "W": 9, "groups": 2}),
    ("pad0", {"N": 1, "C": 33, "K": 17, "H": 10, "W": 8, "pad_h": 0, "pad_w": 0}),
    ("wide", {"N": 2, "C": 256, "K": 96, "H": 30, "W": 30}),
    ("c64_k136", {"N": 2, "C": 64, "K": 136, "H": 30, "W": 29}),
]

#: Public layers (fp16, NHWC): VGG-16 conv1_2, ResNet conv2_x, a 64-channel 112x112 layer
#: (between the two: where the fused / unfused crossover lies), VGG-16 conv2_2, a 128-channel
#: 56x56 layer (VGG-16 conv3 width at ResNet's 56x56), VGG-16 conv3_2; then the first layer of
#: VGG-16 (C = 3: RGB in) and a 32-channel one (C/G under the held kernel's 64); then three
#: more public layers: C 64 -> K 128 at 112x112, C = K = 128 at 28x28 (N 64), C 128 -> K 256
#: at 56x56.
LAYERS = [
    ("vgg16_conv1_2", dict(N=16, C=64, H=224, W=224, K=64)),
    ("resnet_conv2_x", dict(N=32, C=64, H=56, W=56, K=64)),
    ("c64_112x112", dict(N=16, C=64, H=112, W=112, K=64)),
    ("vgg16_conv2_2", dict(N=16, C=128, H=112, W=112, K=128)),
    ("c128_56x56", dict(N=32, C=128, H=56, W=56, K=128)),
    ("vgg16_conv3_2", dict(N=16, C=256, H=56, W=56, K=256)),
    ("vgg16_conv1_1", dict(N=16, C=3, H=224, W=224, K=64)),
    ("c32_112x112", dict(N=16, C=32, H=112, W=112, K=64)),
    ("c64_112x112_k128", dict(N=16, C=64, H=112, W=112, K=128)),
    ("n64_c128_28x28", dict(N=64, C=128, H=28, W=28, K=128)),
    ("c128_56x56_k256", dict(N=16, C=128, H=56, W=56, K=256)),
]

if os.environ.get("WINO_LAYERS"):  # a comma list of labels: build and time those only
    LAYERS = [(label, f) for label, f in LAYERS if label in os.environ["WINO_LAYERS"].split(",")]

COPY_BYTES_PER_S = 4.27e12  # measured on the H200 (DESIGN.md)
MMA_FLOPS_PER_S = 790e12  # dense bf16 GEMM as measured; mma.sync reaches less
L2_BYTES_PER_S = 8.5e12


def _named(spec, contains: str) -> bool:
    """Whether the spec's name holds one of the comma-separated parts of ``contains`` (a part
    ending in ``$``: the name ends with it)."""
    return any(
        spec.name.endswith(part[:-1]) if part.endswith("$") else part in spec.name
        for part in contains.split(",")
    )


def _problem(dtype: DType, **fields) -> Problem:
    base = dict(N=2, C=37, H=13, W=11, K=21, pad_h=1, pad_w=1)
    return Problem(**{**base, **fields}, dtype=dtype)


def _layer(fields: dict, dtype: DType = DType.FP16) -> Problem:
    return Problem(**fields, pad_h=1, pad_w=1, dtype=dtype)


def _fits(spec, problem: Problem) -> bool:
    """Whether the spec's fit rules take the problem (a held kernel: C/G up to its hold)."""
    try:
        _pipeline(spec, problem)
        stage_launch(spec, problem)
    except Refused:
        return False
    return True


def _pipeline(spec, problem: Problem) -> dict:
    return fused_pipeline(problem, spec)


def _cached_specs() -> set:
    """The specs of the CUDA cache under ROOT (its manifest names only the last build's
    kernels, so a later build keeps the earlier ones by building them again: a cache hit)."""
    specs = set()
    for manifest in ROOT.glob("cache/v2/cuda/*/manifest.json"):
        for entry in json.loads(manifest.read_text())["kernels"].values():
            specs.add(spec_from_fields(entry["stage"], entry["spec"]))
    return specs


def build(contains: str = "") -> None:
    """The kernels of every grid KF spec whose name holds ``contains``, with the K1 / K2a they
    go with, and the unfused default picks of the public layers; the cache's earlier kernels
    stay."""
    specs = _cached_specs()
    for spec in (s for s in FUSED if _named(s, contains)):
        for _, fields in SHAPES:
            problem = _problem(spec.io, **fields)
            if _fits(spec, problem):
                specs.update(_pipeline(spec, problem).values())
    for _, fields in LAYERS:
        for dtype in (DType.FP16, DType.BF16):
            problem = _layer(fields, dtype)
            picks = default_stage_specs(problem, default_tile(problem), target=Target.CUDA)
            specs.update(picks.values())
            for spec in (s for s in FUSED if _named(s, contains)):
                if spec.io is dtype and _fits(spec, problem):
                    specs.update(_pipeline(spec, problem).values())
    for _, fields in LAYERS[:3]:  # the C = K = 64 layers: the epilogue step's plans
        for dtype in (DType.FP16, DType.BF16):
            problem = _layer(fields, dtype)
            tile = default_tile(problem)
            for epilogue in Epilogue:
                picks = dict(epilogue=epilogue, target=Target.CUDA)
                specs.update(default_fused_specs(problem, tile, **picks).values())
                specs.update(default_stage_specs(problem, tile, **picks).values())
            specs.update(_pipeline(_chunked_bias_relu(problem), problem).values())
    sanitized = _problem(DType.FP16, C=48, K=39, H=9, W=10)
    for spec in FUSED:
        if spec.hold and spec.io is DType.FP16 and _fits(spec, sanitized):
            relu = spec.replace(epilogue=Epilogue.BIAS_RELU)  # the tcx 1 ones: off the grid
            specs.update(_pipeline(relu, sanitized).values())
    specs.update(default_fused_specs(_prefetched_problem(), Tile(4, 4)).values())
    for spec in (s for s in FUSED if s.hold > 64 and _named(s, contains)):
        specs.update(_pipeline(spec, _past_64_channels(spec)).values())
    result = builder.build(
        sorted(specs, key=lambda s: s.name), [Target.CUDA], root=ROOT, jobs=os.cpu_count() or 4
    )
    print(f"built {len(specs)} kernels into {ROOT}: {result.messages or 'ok'}")


# Check -------------------------------------------------------------------------------------------
def _device_inputs(problem: Problem, seed: str):
    """N(0,1) x and w in the problem's dtype: numpy copies (for the reference) and torch CUDA
    tensors with the same values (CuPy has no bfloat16)."""
    import ml_dtypes  # noqa: F401 - numpy's bfloat16
    import torch

    rng = np.random.default_rng(zlib.crc32(seed.encode()))
    np_dtype = np.float16 if problem.dtype is DType.FP16 else np.dtype("bfloat16")
    x = rng.standard_normal((problem.N, problem.H, problem.W, problem.C)).astype(np_dtype)
    w = rng.standard_normal((problem.K, 3, 3, problem.Cg)).astype(np_dtype)
    dtype = _torch_dtype(problem.dtype)
    return (x, w, *(torch.from_numpy(a.astype(np.float32)).cuda().to(dtype) for a in (x, w)))


def _torch_dtype(dtype: DType):
    import torch

    return torch.float16 if dtype is DType.FP16 else torch.bfloat16


def _run_poisoned(plan, xt, wt, bias=None):
    """y all NaN and the workspace all 0xFF bytes before the run; returns y."""
    import cupy
    import torch

    p = plan.problem
    y = torch.full((p.N, p.Ho, p.Wo, p.K), float("nan"), dtype=xt.dtype, device=xt.device)
    workspace = cupy.full(plan.workspace_bytes, 0xFF, dtype=cupy.uint8)
    return plan.run(xt, wt, y=y, workspace=workspace, bias=bias)


def _band_redo_matches(spec, problem: Problem, xt, wt, shape_id: str, scale: float) -> bool:
    """A tsfix kernel on x times ``scale`` outside its band (2^7 for fp16, 2^14 for bf16: every
    tile past 2^6, where the fixed scale's y would differ; 2^-12: under 2^-6): every block
    takes the own scales from its maxima, so y is the tsfix 0 twin's bit for bit."""
    import torch

    twin = spec.replace(tsfix=0)
    xs = (xt.float() * scale).to(xt.dtype)
    ys = [
        _run_poisoned(
            dispatch(problem, target="cuda", cache_root=ROOT, specs=_pipeline(s, problem)), xs, wt
        ).view(torch.int16)
        for s in (spec, twin)
    ]
    same = bool(torch.equal(*ys))
    print(f"{'PASS' if same else 'FAIL'} {spec.name} {shape_id}: x {scale:g}, the bits of the twin")
    return same


def check(contains: str = "") -> int:
    """Every grid KF spec (whose name contains ``contains``) x the shapes: all outputs written,
    error within the bound; a tsfix spec also on x past and under its band (the twin's bits)."""
    import ml_dtypes  # noqa: F401

    failures = cases = 0
    chosen = [s for s in FUSED if _named(s, contains)]
    for spec in chosen:
        for shape_id, fields in SHAPES:
            problem = _problem(spec.io, **fields)
            if not _fits(spec, problem):
                continue
            cases += 1
            plan = dispatch(problem, target="cuda", cache_root=ROOT, specs=_pipeline(spec, problem))
            x, w, xt, wt = _device_inputs(problem, spec.name + shape_id)
            y = _run_poisoned(plan, xt, wt).float().cpu().numpy()
            unwritten = int(np.count_nonzero(~np.isfinite(y.astype(np.float32))))
            ref = conv2d_reference(
                x, w, (problem.pad_h, problem.pad_w), (problem.dil_h, problem.dil_w), problem.groups
            )
            error = relative_error(y, ref)
            bound = bound_for(spec.tile, spec.io, spec.mdtype)
            ok = unwritten == 0 and error <= bound
            failures += not ok
            print(
                f"{'PASS' if ok else 'FAIL'} {spec.name} {shape_id}: error {error:.2e} "
                f"(bound {bound:.0e}), unwritten {unwritten}"
            )
            past = 2.0 ** (7 if spec.io is DType.FP16 else 14)  # as tests/test_fused.py's
            for scale in (past, 2.0**-12) if spec.tsfix else ():
                cases += 1
                failures += not _band_redo_matches(spec, problem, xt, wt, shape_id, scale)
    print(f"check: {failures} failure(s) over {cases} cases")
    return failures


# Time --------------------------------------------------------------------------------------------
def _l2_bytes(spec, problem: Problem) -> float:
    """U re-read once per tile block, x windows once per channel block (the kernel's reads)."""
    tg = TileGrid.of(problem, spec.tile)
    tile_blocks = math.ceil(tg.P / spec.tiles)
    k_blocks = problem.groups * math.ceil(problem.Kg / spec.kblock)
    u = spec.tile.bins * problem.K * problem.Cg * 2
    x = tg.P * spec.tile.bins * problem.C * 2 / problem.groups * k_blocks
    return tile_blocks * u + x


def _roofline_us(spec, problem: Problem) -> float:
    tg = TileGrid.of(problem, spec.tile)
    hbm = 2 * (
        problem.N * problem.H * problem.W * problem.C
        + problem.N * problem.Ho * problem.Wo * problem.K
        + spec.tile.bins * problem.K * problem.Cg
    )
    mma = 2 * spec.tile.bins * tg.P * problem.K * problem.Cg
    return 1e6 * max(
        hbm / COPY_BYTES_PER_S, mma / MMA_FLOPS_PER_S, _l2_bytes(spec, problem) / L2_BYTES_PER_S
    )


def _timed_plan(plan, xt, wt, timer, bias=None):
    """(median us per call with U cached, the output)."""
    import cupy
    import torch

    p = plan.problem
    y = torch.empty((p.N, p.Ho, p.Wo, p.K), dtype=xt.dtype, device=xt.device)
    workspace = cupy.empty(plan.workspace_bytes, dtype=cupy.uint8)
    u = plan.transform_filter(wt, workspace)  # U cached: the inference case
    # torch tensors launch on torch's current stream unless told: the timer's capture stream
    # must be named, or the graph it captures is empty (1-2 us per "call").
    stream = timer.stream
    return timer.time_us(
        lambda s: plan.run(xt, y=y, workspace=workspace, U=u, bias=bias, stream=stream)
    ), y


def _max_relative_error(y, ref) -> float:
    """max |y - ref| / max |ref| (torch tensors, y in a 16-bit dtype)."""
    return float((y.float() - ref).abs().max() / ref.abs().max())


def _cudnn_issue(torch, xt, wt):
    """conv2d on channels_last NCHW views of the NHWC / KRSC tensors (cuDNN's NHWC kernels)."""
    xc, wc = xt.permute(0, 3, 1, 2), wt.permute(0, 3, 1, 2)
    return lambda s: torch.nn.functional.conv2d(xc, wc, None, 1, 1)


def time_layers(dtype_name: str = "fp16", contains: str = "", exponent: str = "0") -> None:
    """Every grid KF spec of the io dtype per layer whose name holds ``contains`` (the best is
    reported), the unfused default plan and cuDNN, U cached, in one run on the same tensors
    (N(0,1) x times 2^``exponent``: 7 puts every tile past a tsfix 6 kernel's band, so each of
    its blocks redoes the input transform); a layer no such spec fits is skipped."""
    import cupy
    import torch

    from wino.bench.compare import configure
    from wino.bench.timing import CupyGraphTimer, Settings, TorchGraphTimer

    configure(torch)
    settings = Settings(warmup=5, repeats=20)
    timer, ttimer = CupyGraphTimer(settings), TorchGraphTimer(settings)
    print(
        "layer | fused us (spec) | unfused us | cudnn us | cudnn/fused | cudnn/unfused | "
        "fused err | fused roofline us | L2 MB"
    )
    for label, fields in LAYERS:
        problem = _layer(fields, DType(dtype_name))
        specs = [s for s in FUSED if s.io is problem.dtype and _named(s, contains)]
        specs = [s for s in specs if _fits(s, problem)]
        if not specs:
            print(f"# {label}: no KF spec with {contains!r} in its name fits")
            continue
        _, _, xt, wt = _device_inputs(problem, label)
        xt = (xt.float() * 2.0 ** int(exponent)).to(xt.dtype)
        ref = torch.nn.functional.conv2d(
            xt.permute(0, 3, 1, 2).float(), wt.permute(0, 3, 1, 2).float(), None, 1, 1
        )
        ref = ref.permute(0, 2, 3, 1)
        best = None
        for spec in specs:
            plan = dispatch(problem, target="cuda", cache_root=ROOT, specs=_pipeline(spec, problem))
            t, y = _timed_plan(plan, xt, wt, timer)
            err = _max_relative_error(y, ref)
            print(f"#   {label} {spec.name}: {t:.1f} us, error {err:.1e}")
            if best is None or t < best[0]:
                best = (t, spec, err)
        unfused = dispatch(problem, target="cuda", cache_root=ROOT, algorithm="unfused")
        t_unfused, _ = _timed_plan(unfused, xt, wt, timer)
        t_cudnn = ttimer.time_us(_cudnn_issue(torch, xt, wt))
        t_fused, spec, err = best
        print(
            f"{label} {problem.label()} | {t_fused:.1f} ({spec.name}) | {t_unfused:.1f} | "
            f"{t_cudnn:.1f} | {t_cudnn / t_fused:.2f}x | {t_cudnn / t_unfused:.2f}x | "
            f"{err:.1e} (bound {bound_for(spec.tile, spec.io, spec.mdtype):.0e}) | "
            f"{_roofline_us(spec, problem):.1f} | {_l2_bytes(spec, problem) / 1e6:.0f}"
        )
        del xt, wt, ref
        cupy.get_default_memory_pool().free_all_blocks()


def _chunked_bias_relu(problem: Problem):
    """The chunked (hold 0) bias + ReLU KF the default fused pick took on the C = K = 64
    layers before the held kernel had the epilogue."""
    tile = default_tile(problem)
    return next(
        s
        for s in grid.aot_stage_specs(Stage.FUSED, Target.CUDA)
        if s.epilogue is Epilogue.BIAS_RELU
        and not s.hold
        and s.tile == tile
        and s.io is problem.dtype
        and _fits(s, problem)
    )


def epilogue(dtype_name: str = "fp16") -> None:
    """Bias + ReLU on the C = K = 64 layers, U cached, in one run on the same tensors:
    dispatch's plan (grids/algorithms.yaml's choice) without and with the epilogue, the chunked
    bias + ReLU kernel the fused pick took before the held kernel had it, the unfused plan
    with the epilogue, and torch (cuDNN's convolution with the bias, then ReLU); every wino
    output checked against torch's fp32 conv + bias + ReLU."""
    import torch

    from wino.bench.compare import configure
    from wino.bench.timing import CupyGraphTimer, Settings, TorchGraphTimer

    configure(torch)
    settings = Settings(warmup=5, repeats=20)
    timer, ttimer = CupyGraphTimer(settings), TorchGraphTimer(settings)
    print("layer | plan | us | error (bound) | kernel")
    for label, fields in LAYERS[:3]:
        problem = _layer(fields, DType(dtype_name))
        _, _, xt, wt = _device_inputs(problem, label)
        bias = torch.randn(problem.K, device="cuda").to(xt.dtype)
        xc, wc = xt.permute(0, 3, 1, 2), wt.permute(0, 3, 1, 2)
        ref = torch.relu(torch.nn.functional.conv2d(xc.float(), wc.float(), bias.float(), 1, 1))
        ref = ref.permute(0, 2, 3, 1)
        bound = bound_for(default_tile(problem), problem.dtype)
        chunked = _pipeline(_chunked_bias_relu(problem), problem)
        plans = [
            ("dispatch, no epilogue", dispatch(problem, target="cuda", cache_root=ROOT), None),
            ("dispatch, bias_relu", dispatch(problem, target="cuda", cache_root=ROOT,
                                             epilogue="bias_relu"), bias),
            ("chunked fused, bias_relu", dispatch(problem, target="cuda", cache_root=ROOT,
                                                  specs=chunked), bias),
            ("unfused, bias_relu", dispatch(problem, target="cuda", cache_root=ROOT,
                                            algorithm="unfused", epilogue="bias_relu"), bias),
        ]  # fmt: skip
        for name, plan, b in plans:
            t, y = _timed_plan(plan, xt, wt, timer, bias=b)
            err = f"{_max_relative_error(y, ref):.1e} ({bound:.0e})" if b is not None else "-"
            print(f"{label} {problem.label()} | {name} | {t:.1f} | {err} | {plan.steps[-1].name}")
        t = ttimer.time_us(
            lambda s, xc=xc, wc=wc, b=bias: torch.relu(torch.nn.functional.conv2d(xc, wc, b, 1, 1))
        )
        print(f"{label} {problem.label()} | torch conv2d(bias) + relu (cuDNN) | {t:.1f} | - | -")


def _prefetched_problem() -> Problem:
    """Past the held kernel's L2 gate (x and y over 50 MB: its blocks prefetch the next block's
    x rows), with odd C and K and dilation 2 (rows clipped at both image edges)."""
    return _problem(DType.FP16, N=3, C=37, K=21, H=400, W=400, pad_h=2, pad_w=2, dil_h=2, dil_w=2)


def _past_64_channels(spec) -> Problem:
    """For a held kernel whose hold passes 64: C/G = 100 (four 32-channel steps, the last
    partial) and K = 130 (two 128-channel blocks, the second of 2 channels, its pair odd)."""
    return _problem(spec.io, C=100, K=130, H=9, W=10)


def sanitize(contains: str = "") -> None:
    """One small fused plan per MMA dtype pairing and per held schedule variant (one pass with
    K2a's scales, two passes with the kernel's own, two blocks per SM), each with its transforms
    on the CUDA cores in fp32 and on fp16 pairs and on the MMA (tcx 0, xbits 16 with obits 32
    and 16, tcx 1) where FUSED has it; and the held kernels' bias + ReLU (on the CUDA cores:
    the grid's fp16 ones; on the MMA: tcx 1, off the grid) at an odd K, so the last channel
    pair has one channel; each pipelined held kernel on four tile blocks; each held kernel
    whose hold passes 64 at C = 100, K = 130; those whose name holds ``contains``
    (compute-sanitizer runs this)."""
    chunked = (FUSED[0], next(s for s in FUSED if s.mdtype is DType.BF16))
    held = []
    for tcx, xbits, obits in ((0, 32, 32), (0, 16, 32), (0, 16, 16), (1, 32, 32)):
        of = [
            s
            for s in FUSED
            if s.hold and s.io is DType.FP16 and (s.tcx, s.xbits, s.obits) == (tcx, xbits, obits)
        ]
        picks = (
            lambda s: not s.kpass and s.prescale is Prescale.SPLIT,
            lambda s: s.kpass and not s.min_blocks and s.prescale is Prescale.FUSED,
            lambda s: s.min_blocks and s.prescale is Prescale.FUSED,
        )
        held += [s for s in (next(filter(pick, of), None) for pick in picks) if s is not None]
    epilogue = [
        s
        for s in grid.aot_stage_specs(Stage.FUSED, Target.CUDA)
        if s.hold and s.io is DType.FP16 and s.epilogue is Epilogue.BIAS_RELU
    ]
    epilogue.append(next(s for s in held if s.tcx).replace(epilogue=Epilogue.BIAS_RELU))
    plans = [
        (s, _problem(s.io, C=48, K=39 if s.epilogue.bias else 40, H=9, W=10))
        for s in (*chunked, *held, *epilogue)
    ]
    wide = _prefetched_problem()
    plans.append((default_fused_specs(wide, Tile(4, 4))[Stage.FUSED], wide))
    # the pipelined held kernels: 4 tile blocks, so chain 2 runs two a workgroup
    plans += [(s, _problem(s.io, C=48, K=40, H=30, W=29)) for s in FUSED if s.chain]
    plans += [(s, _past_64_channels(s)) for s in FUSED if s.hold > 64]
    plans += [(s, _problem(s.io, C=48, K=39, H=9, W=10)) for s in FUSED if s.wgmma]
    plans += [(s, _problem(s.io, C=64, K=40, H=30, W=29)) for s in FUSED if s.tsfix]
    for spec, problem in ((s, p) for s, p in plans if _named(s, contains)):
        plan = dispatch(problem, target="cuda", cache_root=ROOT, specs=_pipeline(spec, problem))
        _, _, xt, wt = _device_inputs(problem, "sanitize")
        import torch

        bias = torch.randn(problem.K, device="cuda").to(xt.dtype) if spec.epilogue.bias else None
        _run_poisoned(plan, xt, wt, bias)
        if spec.tsfix:  # the band's redo: every tile past 2^6
            _run_poisoned(plan, (xt.float() * 2.0**7).to(xt.dtype), wt, bias)
        torch.cuda.synchronize()
        print(f"sanitize: ran {spec.name} on {problem.label()}")


def _resized(plan, workgroups: int):
    """The plan with each pipelined KF launch re-sized to min(tile blocks, workgroups)
    workgroups (``wino.launch.spread``): what a grid sized at run time would run."""
    for steps in plan.chunk_steps.values():
        for i, step in enumerate(steps):
            spec = plan.specs.get(step.stage)
            if getattr(spec, "chain", 0):
                steps[i] = replace(step, launch=spread(step.launch, spec, workgroups))
    return plan


def resident(contains: str = "_l12") -> None:
    """Each pipelined KF spec whose name holds ``contains`` with its grid re-sized to the
    device's SMs and to twice that (one workgroup an SM fits), against its one-block twin and
    cuDNN, U cached, per layer it fits, fp16 and bf16 (the experiment behind docs/FUSED.md's
    "a grid sized at run time")."""
    import cupy
    import torch

    from wino.bench.compare import configure
    from wino.bench.timing import CupyGraphTimer, Settings, TorchGraphTimer
    from wino.runtime.plan import clear_plan_cache

    configure(torch)
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    print(f"resident: {torch.cuda.get_device_name()}, {sms} SMs")
    settings = Settings(warmup=5, repeats=20)
    timer, ttimer = CupyGraphTimer(settings), TorchGraphTimer(settings)
    for spec in (s for s in FUSED if s.chain and _named(s, contains)):
        twin = spec.replace(chain=0)
        for label, fields in LAYERS:
            problem = _layer(fields, spec.io)
            if not _fits(spec, problem):
                continue
            _, _, xt, wt = _device_inputs(problem, label)
            row = []
            for s, workgroups in ((twin, 0), (spec, sms), (spec, 2 * sms)):
                clear_plan_cache()  # a fresh plan: its launches are re-sized below
                plan = dispatch(
                    problem, target="cuda", cache_root=ROOT, specs=_pipeline(s, problem)
                )
                t, _ = _timed_plan(
                    _resized(plan, workgroups) if workgroups else plan, xt, wt, timer
                )
                row.append(f"{'one-block' if not workgroups else f'GX <= {workgroups}'} {t:.1f}")
            t_cudnn = ttimer.time_us(_cudnn_issue(torch, xt, wt))
            print(f"{spec.io.short} {label}: " + " | ".join(row) + f" | cudnn {t_cudnn:.1f}")
            del xt, wt
            cupy.get_default_memory_pool().free_all_blocks()


def profile(layer: str, spec_name: str) -> None:
    """The layer's fused plan with the named KF spec, U cached, run twice (ncu profiles one
    launch: ``ncu -k regex:kf_ --launch-skip 1 -c 1``)."""
    import cupy
    import torch

    spec = next(s for s in FUSED if s.name == spec_name)
    problem = _layer(dict(LAYERS)[layer], spec.io)
    plan = dispatch(problem, target="cuda", cache_root=ROOT, specs=_pipeline(spec, problem))
    _, _, xt, wt = _device_inputs(problem, layer)
    workspace = cupy.empty(plan.workspace_bytes, dtype=cupy.uint8)
    u = plan.transform_filter(wt, workspace)
    for _ in range(2):
        plan.run(xt, U=u, workspace=workspace)
    torch.cuda.synchronize()
    print(f"profile: ran {spec.name} twice on {problem.label()}")


if __name__ == "__main__":
    step = sys.argv[1] if len(sys.argv) > 1 else ""
    steps = {
        "build": build,
        "check": check,
        "time": time_layers,
        "sanitize": sanitize,
        "resident": resident,
        "profile": profile,
        "epilogue": epilogue,
    }
    if step not in steps:
        sys.exit(f"usage: gpu_fused.py {{{'|'.join(steps)}}} [args]")
    sys.exit(1 if steps[step](*sys.argv[2:]) else 0)
