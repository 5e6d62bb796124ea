"""torchvision ResNet-50 and VGG-16 (random weights) in fp16 on CUDA, converted with
``wino.torch.convert``: the error against the unconverted (cuDNN) model, end-to-end time
against cuDNN (eager, CUDA graphs, and torch.compile with --compile) and per-layer speedups.

Needs an NVIDIA GPU, PyTorch with torchvision, CuPy and the cuda cache (``doit compile:cuda``).

    python examples/torch_resnet.py --batch 32 --models resnet50,vgg16 --compile --json out.json
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import traceback

import torch
import torch.nn.functional as F
import torchvision

import wino.torch as wt
from wino.runtime.verify import bound_for

MODELS = {"resnet50": torchvision.models.resnet50, "vgg16": torchvision.models.vgg16}


def gpu_ms(fn, warmup: int = 5, iters: int = 20, repeats: int = 5) -> float:
    """Median over repeats of the mean time of ``iters`` calls (CUDA events)."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / iters)
    return statistics.median(samples)


def graphed(fn, static_input):
    """``fn(static_input)`` captured once as a CUDA graph: returns (replay, output)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn(static_input)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(static_input)
    return graph.replay, out


def rel_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).abs().max() / b.float().abs().max()).item()


def layer_inputs(model):
    """Each converted layer and the input it saw in one forward pass."""
    seen: dict[str, tuple[wt.Conv2d, torch.Tensor]] = {}
    hooks = []
    for name, module in model.named_modules():
        if isinstance(module, wt.Conv2d):

            def hook(mod, args, name=name):
                seen.setdefault(name, (mod, args[0].detach().clone()))

            hooks.append(module.register_forward_pre_hook(hook))
    return seen, hooks


def per_layer(model, x) -> list[dict]:
    seen, hooks = layer_inputs(model)
    model(x)
    for h in hooks:
        h.remove()
    rows = []
    for name, (mod, inp) in seen.items():

        def cudnn(t, mod=mod):  # the layer as torch runs it: the conv, then its ReLU if fused
            y = F.conv2d(t, mod.weight, mod.bias, 1, mod.padding, mod.dilation, mod.groups)
            return F.relu(y) if mod.activation == "relu" else y

        replay_c, out_c = graphed(cudnn, inp)
        replay_w, out_w = graphed(mod, inp)
        ms_c, ms_w = gpu_ms(replay_c), gpu_ms(replay_w)
        rows.append(
            {
                "layer": name,
                "shape": f"N{inp.shape[0]} C{inp.shape[1]} {inp.shape[2]}x{inp.shape[3]} "
                f"K{mod.out_channels} d{mod.dilation[0]} g{mod.groups}",
                "cudnn_ms": ms_c,
                "wino_ms": ms_w,
                "speedup": ms_c / ms_w,
                "rel_error": rel_error(out_w, out_c),
            }
        )
    return rows


def end_to_end(model, wmodel, x, compile_: bool) -> dict:
    times = {"cudnn eager": gpu_ms(lambda: model(x)), "wino eager": gpu_ms(lambda: wmodel(x))}
    for label, m in (("cudnn", model), ("wino", wmodel)):
        replay, _ = graphed(m, x.clone())
        times[f"{label} graph"] = gpu_ms(replay)
    if compile_:
        for label, m in (("cudnn", model), ("wino", wmodel)):
            try:
                compiled = torch.compile(m, fullgraph=label == "wino")
                compiled(x)
                times[f"{label} compile"] = gpu_ms(lambda c=compiled: c(x))
                replay, _ = graphed(compiled, x.clone())
                times[f"{label} compile+graph"] = gpu_ms(replay)
            except Exception as err:  # noqa: BLE001 - report, keep the other figures
                times[f"{label} compile"] = f"failed: {type(err).__name__}: {err}"[:200]
    return times


def relu_after(plain, x) -> dict:
    """``plain``, the model converted with each ReLU left as torch's own pass
    (convert(fuse_relu=False)), eager and graphed: what fusing the ReLUs into the epilogue
    saves."""
    replay, _ = graphed(plain, x.clone())
    return {
        "wino eager, ReLU after": gpu_ms(lambda: plain(x)),
        "wino graph, ReLU after": gpu_ms(replay),
    }


def run_model(name: str, batch: int, compile_: bool, compare_relu: bool = False) -> dict:
    torch.manual_seed(0)
    model = MODELS[name](weights=None).cuda().half().eval()
    model = model.to(memory_format=torch.channels_last)
    x = torch.randn(batch, 3, 224, 224, device="cuda").half()
    x = x.contiguous(memory_format=torch.channels_last)
    wmodel = wt.convert(copy.deepcopy(model))
    plain = wt.convert(copy.deepcopy(model), fuse_relu=False) if compare_relu else None
    converted = sum(isinstance(m, wt.Conv2d) for m in wmodel.modules())
    fused = sum(isinstance(m, wt.Conv2d) and m.activation == "relu" for m in wmodel.modules())
    total = sum(isinstance(m, torch.nn.Conv2d) for m in wmodel.modules())
    with torch.inference_mode():
        ref = model(x)
        out = wmodel(x)
        layers = per_layer(wmodel, x)
        times = end_to_end(model, wmodel, x, compile_)
        if compare_relu:
            times.update(relu_after(plain, x))
    return {
        "model": name,
        "batch": batch,
        "converted": f"{converted} of {total} convolutions ({fused} with their ReLU fused)",
        "rel_error": rel_error(out, ref),
        "layer_bound_fp16_F4x4": bound_for("F4x4", "fp16"),
        "top1_agree": (out.argmax(1) == ref.argmax(1)).float().mean().item(),
        "times_ms": times,
        "layers": layers,
    }


def report(result: dict) -> str:
    lines = [
        f"== {result['model']} fp16, batch {result['batch']}: {result['converted']} run by wino",
        f"max|wino - cuDNN| / max|cuDNN| (logits) {result['rel_error']:.3g}; top-1 agreement "
        f"{result['top1_agree']:.3f}; per-layer fp16 F4x4 bound {result['layer_bound_fp16_F4x4']}",
        "end to end (ms per batch):",
    ]
    for label, t in result["times_ms"].items():
        lines.append(f"  {label:22} {t if isinstance(t, str) else f'{t:8.3f}'}")
    lines.append(f"  {'layer':28} {'shape':34} {'cuDNN ms':>9} {'wino ms':>9} {'speedup':>8} err")
    for r in result["layers"]:
        lines.append(
            f"  {r['layer']:28} {r['shape']:34} {r['cudnn_ms']:9.4f} {r['wino_ms']:9.4f} "
            f"{r['speedup']:8.2f} {r['rel_error']:.2g}"
        )
    speedups = [r["speedup"] for r in result["layers"]]
    if speedups:
        geo = statistics.geometric_mean(speedups)
        lines.append(f"  per-layer speedup geomean {geo:.3f} over {len(speedups)} layers")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--models", default="resnet50,vgg16")
    parser.add_argument("--compile", action="store_true", help="also time torch.compile")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument(
        "--compare-relu",
        action="store_true",
        help="also time the converted model with its ReLUs left to torch (fuse_relu=False)",
    )
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    results, failed = [], False
    for name in args.models.split(","):
        try:
            results.append(run_model(name, args.batch, args.compile, args.compare_relu))
        except Exception:  # noqa: BLE001 - report it, run the next model
            traceback.print_exc()
            failed = True
            continue
        print(report(results[-1]), flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=1)
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
