"""wino.torch on CPU tensors (the host target, the c cache): the wino::conv2d op against a
float64 reference, its fake implementation (opcheck, torch.compile(fullgraph=True)), the Conv2d
drop-in (torch path in training and with grad, U cached per weight version), the ReLU fused
into the kernel's epilogue (the op's activation, Conv2d(activation=), convert's Conv2d + ReLU
pairs), convert(model) and the errors for inputs wino does not take."""

from __future__ import annotations

import logging

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="wino.torch needs PyTorch (pip install 'wino[torch]')")

from torch import nn  # noqa: E402

import wino.torch as wt  # noqa: E402
from tests import host_cache  # noqa: E402
from tests.runtime_fixtures import issue_bound  # noqa: E402
from wino.pick import default_stage_specs  # noqa: E402
from wino.problem import Problem  # noqa: E402
from wino.runtime import conv2d_reference, dispatch, relative_error  # noqa: E402
from wino.runtime.plan import Plan, default_tile  # noqa: E402
from wino.vocab import Activation, DType, Epilogue  # noqa: E402

#: (in, out, H, W, padding, dilation, groups, bias) of the layers the tests run.
LAYERS = [
    (8, 16, 10, 10, (1, 1), (1, 1), 1, True),
    (16, 16, 9, 11, (2, 0), (2, 1), 4, False),
    (8, 8, 12, 12, (2, 2), (2, 2), 2, True),  # padding="same" at dilation 2
    (16, 8, 6, 7, (0, 1), (1, 1), 1, True),
]
N = 2
TORCH_DTYPES = {DType.FP32: torch.float32, DType.FP16: torch.float16, DType.BF16: torch.bfloat16}


def _problem(layer, dtype: DType = DType.FP32, n: int = N) -> Problem:
    c, k, h, w, (ph, pw), (dh, dw), g, _ = layer
    return Problem(
        N=n, C=c, H=h, W=w, K=k, pad_h=ph, pad_w=pw, dil_h=dh, dil_w=dw, groups=g, dtype=dtype
    )


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """A host cache of the default picks of LAYERS (fp32, and the first layer in fp16, bf16),
    made the default cache ($WINO_BUILD) while these tests run."""
    problems = [_problem(layer) for layer in LAYERS]
    problems += [_problem(LAYERS[0], dtype) for dtype in (DType.FP16, DType.BF16)]
    specs = set()
    for p in problems:
        for epilogue in Epilogue:  # a bias and / or a fused ReLU: the epilogue
            specs.update(default_stage_specs(p, default_tile(p), epilogue=epilogue).values())
    folder = tmp_path_factory.mktemp("torch-cache")
    host_cache.build(specs, folder)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WINO_BUILD", str(folder))
        yield folder


def _conv(layer, dtype=torch.float32) -> nn.Conv2d:
    c, k, _, _, padding, dilation, groups, bias = layer
    torch.manual_seed(sum(layer[:4]))
    conv = nn.Conv2d(c, k, 3, padding=padding, dilation=dilation, groups=groups, bias=bias)
    return conv.to(dtype).eval()


def _input(layer, dtype=torch.float32, n=N) -> torch.Tensor:
    c, _, h, w = layer[:4]
    torch.manual_seed(h * w)
    return torch.randn(n, c, h, w).to(dtype).contiguous(memory_format=torch.channels_last)


def _reference(x, conv) -> np.ndarray:
    """float64 reference in NCHW (bias included)."""
    y = conv2d_reference(
        x.double().permute(0, 2, 3, 1).numpy(),
        conv.weight.detach().double().permute(0, 2, 3, 1).numpy(),
        conv.padding,
        conv.dilation,
        conv.groups,
    )
    if conv.bias is not None:
        y = y + conv.bias.detach().double().numpy()
    return y.transpose(0, 3, 1, 2)


def _bound(layer, dtype: DType) -> float:
    p = _problem(layer, dtype)
    plan = dispatch(p, target="c")
    return issue_bound(plan.tile, dtype, plan.xdtype)


def _error(y, ref) -> float:
    return relative_error(y.detach().double().numpy(), ref)


# The op ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("layer", LAYERS, ids=lambda v: f"c{v[0]}k{v[1]}p{v[4]}d{v[5]}g{v[6]}")
def test_op_within_bound_and_channels_last(root, layer):
    conv, x = _conv(layer), _input(layer)
    y = torch.ops.wino.conv2d(
        x, conv.weight, conv.bias, list(conv.padding), list(conv.dilation), conv.groups
    )
    p = _problem(layer)
    assert tuple(y.shape) == (p.N, p.K, p.Ho, p.Wo)
    assert y.is_contiguous(memory_format=torch.channels_last)
    assert _error(y, _reference(x, conv)) <= _bound(layer, DType.FP32)


@pytest.mark.parametrize("dtype", [DType.FP16, DType.BF16], ids=lambda d: d.short)
def test_op_in_16_bit(root, dtype):
    layer = LAYERS[0]
    conv, x = _conv(layer, TORCH_DTYPES[dtype]), _input(layer, TORCH_DTYPES[dtype])
    with torch.inference_mode():
        y = wt.Conv2d.from_conv(conv)(x)
    assert y.dtype == TORCH_DTYPES[dtype]
    assert _error(y, _reference(x, conv)) <= _bound(layer, dtype)


def test_opcheck(root):
    layer = LAYERS[0]
    conv, x = _conv(layer), _input(layer)
    args = (x, conv.weight.detach(), conv.bias.detach(), [1, 1], [1, 1], 1)
    torch.library.opcheck(torch.ops.wino.conv2d.default, args)


# The module ------------------------------------------------------------------------------------
def test_module_runs_wino_in_inference_and_torch_otherwise(root):
    layer = LAYERS[0]
    conv, x = _conv(layer), _input(layer)
    module = wt.Conv2d.from_conv(conv)
    assert module.weight is conv.weight and module.bias is conv.bias  # shared, not copied
    expect = nn.functional.conv2d(x, conv.weight, conv.bias, 1, conv.padding)
    with torch.inference_mode():
        y = module(x)
    assert not torch.equal(y, expect)  # wino's rounding, not torch's
    assert _error(y, _reference(x, conv)) <= _bound(layer, DType.FP32)
    assert torch.equal(module(x), expect)  # grad enabled, weight requires grad: torch
    module.train()
    with torch.no_grad():
        assert torch.equal(module(x), expect)  # training mode: torch


def test_eager_module_calls_the_implementation_and_a_trace_the_op(root, monkeypatch):
    """Eager, on plain tensors, the module calls ops.run itself (the op's dispatcher wrapping
    cost 30-45 us a call); a trace (fake tensors under torch.compile) goes through the registered
    op, whose fake implementation it records."""
    from wino.torch import ops

    layer = LAYERS[0]
    conv, x = _conv(layer), _input(layer)
    module = wt.Conv2d.from_conv(conv)
    with torch.inference_mode():
        expect = module(x)
    entered = []
    op = ops.conv2d
    monkeypatch.setattr(ops, "conv2d", lambda *a: entered.append(a) or op(*a))
    with torch.inference_mode():
        assert torch.equal(module(x), expect) and not entered
    torch._dynamo.reset()
    with torch.inference_mode():
        traced = torch.compile(module, fullgraph=True, backend="eager")(x)
    assert entered  # the fake tensors went to the op, as a trace needs
    assert torch.equal(traced, expect)


def test_module_bias_goes_through_the_epilogue(root, monkeypatch):
    """Conv2d(bias=True) hands its bias to the kernel's epilogue (no add after the kernel)."""
    layer = LAYERS[0]
    conv, x = _conv(layer), _input(layer)
    runs = []
    real = Plan.run

    def spying(self, *args, **kwargs):
        runs.append((self.epilogue, kwargs.get("bias")))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Plan, "run", spying)
    monkeypatch.setattr(torch.Tensor, "add_", lambda *a, **k: pytest.fail("bias added after"))
    with torch.inference_mode():
        y = wt.Conv2d.from_conv(conv)(x)
    ((epilogue, bias),) = runs
    assert epilogue is Epilogue.BIAS and torch.equal(bias, conv.bias)
    assert _error(y, _reference(x, conv)) <= _bound(layer, DType.FP32)


# The fused ReLU -----------------------------------------------------------------------------------
def _relu_reference(x, conv) -> np.ndarray:
    return np.maximum(_reference(x, conv), 0.0)


@pytest.mark.parametrize("layer", LAYERS[:2], ids=["bias", "no_bias"])
def test_op_applies_the_relu_in_the_epilogue(root, layer, monkeypatch):
    """activation="relu": relu(conv + bias) within the bound, no torch op after the kernel
    (the plan's epilogue has the ReLU), every output clamped to exactly 0 where the
    reference is clearly negative."""
    conv, x = _conv(layer), _input(layer)
    runs = []
    real = Plan.run
    monkeypatch.setattr(Plan, "run", lambda self, *a, **k: runs.append(self) or real(self, *a, **k))
    monkeypatch.setattr(torch.Tensor, "relu_", lambda *a: pytest.fail("ReLU applied after"))
    args = (x, conv.weight, conv.bias, list(conv.padding), list(conv.dilation), conv.groups)
    y = torch.ops.wino.conv2d(*args, "relu")
    ((plan,),) = [runs]
    assert plan.epilogue is Epilogue.of(conv.bias is not None, Activation.RELU)
    ref = _relu_reference(x, conv)
    bound = _bound(layer, DType.FP32)
    assert _error(y, ref) <= bound
    pre = _reference(x, conv)
    clearly = pre < -2 * bound * np.abs(pre).max()
    assert clearly.any() and (y.detach().numpy()[clearly] == 0).all() and (y >= 0).all()


def test_relu_follows_the_plain_plan_where_the_cache_has_no_relu_kernel(root, tmp_path):
    """A cache without the ReLU epilogue kernels (built before them): the plain plan, then
    torch's in-place ReLU (and bias add) on its output; the same values within the bound."""
    layer = LAYERS[0]
    conv, x = _conv(layer), _input(layer)
    p = _problem(layer)
    plain = set()
    for epilogue in (Epilogue.NONE, Epilogue.BIAS):
        plain.update(default_stage_specs(p, default_tile(p), epilogue=epilogue).values())
    host_cache.build(plain, tmp_path)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WINO_BUILD", str(tmp_path))
        with torch.inference_mode():
            y = wt.Conv2d.from_conv(conv, activation="relu")(x)
    assert _error(y, _relu_reference(x, conv)) <= _bound(layer, DType.FP32)
    assert (y >= 0).all()


def test_module_activation_in_inference_and_with_torch(root):
    """Conv2d(activation="relu") fuses the ReLU in inference; in training mode it runs
    torch's conv then torch's ReLU; a bad activation names the argument."""
    layer = LAYERS[0]
    conv, x = _conv(layer), _input(layer)
    module = wt.Conv2d.from_conv(conv, activation="relu")
    assert "activation=relu" in repr(module) and module.weight is conv.weight
    with torch.inference_mode():
        y = module(x)
    assert _error(y, _relu_reference(x, conv)) <= _bound(layer, DType.FP32)
    expect = torch.relu(nn.functional.conv2d(x, conv.weight, conv.bias, 1, conv.padding))
    module.train()
    with torch.no_grad():
        assert torch.equal(module(x), expect)
    built = wt.Conv2d(8, 16, 3, padding=1, activation="relu")
    assert built.activation == "relu"
    with pytest.raises(ValueError, match=r"activation: 'gelu' is not one of \['none', 'relu'\]"):
        wt.Conv2d(8, 16, 3, activation="gelu")
    with pytest.raises(ValueError, match="activation: 'tanh' is not one of"):
        torch.ops.wino.conv2d(x, conv.weight, conv.bias, [1, 1], [1, 1], 1, "tanh")


def test_opcheck_with_the_relu(root):
    layer = LAYERS[0]
    conv, x = _conv(layer), _input(layer)
    args = (x, conv.weight.detach(), conv.bias.detach(), [1, 1], [1, 1], 1, "relu")
    torch.library.opcheck(torch.ops.wino.conv2d.default, args)


class ReluNet(nn.Module):
    """VGG's pattern (Conv2d, ReLU in a Sequential), a conv a ReLU follows but that another
    path reuses, and a stride-2 conv before a ReLU (left to torch)."""

    def __init__(self):
        super().__init__()
        self.head = nn.Conv2d(8, 16, 3, padding=1)
        self.shared = nn.Conv2d(16, 16, 3, padding=1)
        self.features = nn.Sequential(
            nn.Conv2d(8, 16, 3, padding=1),
            nn.ReLU(inplace=True),
            self.shared,
            nn.ReLU(),
            nn.Conv2d(16, 16, 3, stride=2, padding=1),
            nn.ReLU(),
        )

    def forward(self, x):
        return self.features(x) + self.shared(self.head(x))[:, :, ::2, ::2]


def test_convert_fuses_a_conv_and_the_relu_after_it(net_cache):
    torch.manual_seed(3)
    net = ReluNet().eval()
    x = _net_input()
    with torch.inference_mode():
        expect = net(x)
    wt.convert(net)
    first, relu = net.features[0], net.features[1]
    assert isinstance(first, wt.Conv2d) and first.activation == "relu"
    assert type(relu) is nn.Identity
    # shared: reached by two paths, so its ReLU stays; stride 2: torch's conv, its ReLU stays
    assert isinstance(net.shared, wt.Conv2d) and net.shared.activation == "none"
    assert net.features[2] is net.shared and type(net.features[3]) is nn.ReLU
    assert type(net.features[4]) is nn.Conv2d and type(net.features[5]) is nn.ReLU
    with torch.inference_mode():
        y = net(x)
    assert (y - expect).abs().max().item() / expect.abs().max().item() < 1e-4
    torch.manual_seed(3)
    kept = wt.convert(ReluNet().eval(), fuse_relu=False)
    assert type(kept.features[1]) is nn.ReLU and kept.features[0].activation == "none"


def test_module_constructor_refuses_with_the_rule():
    with pytest.raises(wt_refused(), match="stride_not_1"):
        wt.Conv2d(8, 8, 3, stride=2)
    with pytest.raises(wt_refused(), match="not_3x3"):
        wt.Conv2d(8, 8, 5)
    assert wt.refusal(nn.Conv2d(8, 8, 3, padding="same", dilation=3)) is None


def wt_refused():
    from wino import Refused

    return Refused


def test_U_is_cached_per_weight_version(root, monkeypatch):
    layer = LAYERS[3]
    conv, x = _conv(layer), _input(layer)
    module = wt.Conv2d.from_conv(conv)
    calls = []
    real = Plan.transform_filter

    def counting(self, w, workspace=None, stream=None):
        calls.append(w)
        return real(self, w, workspace, stream)

    monkeypatch.setattr(Plan, "transform_filter", counting)
    with torch.inference_mode():
        first = module(x)
        assert torch.equal(module(x), first)
        assert len(calls) == 1
    with torch.no_grad():
        conv.weight.mul_(-2.0)  # an in-place update: a new version
    with torch.inference_mode():
        second = module(x)
    assert len(calls) == 2
    assert _error(second, _reference(x, conv)) <= _bound(layer, DType.FP32)


def test_weights_made_under_inference_mode_transform_every_call(root, monkeypatch, caplog):
    """A weight that is an inference tensor (the model copied under torch.inference_mode)
    tracks no version: the filter is transformed on every call (so an in-place update is
    seen), logged once; the output within the bound."""
    layer = LAYERS[0]
    x = _input(layer)
    with torch.inference_mode():
        conv = _conv(layer)
        conv.weight = nn.Parameter(conv.weight.detach().clone(), requires_grad=False)
    assert conv.weight.is_inference()
    module = wt.Conv2d.from_conv(conv)
    calls = []
    real = Plan.transform_filter
    monkeypatch.setattr(
        Plan, "transform_filter", lambda self, *a, **k: calls.append(1) or real(self, *a, **k)
    )
    with caplog.at_level(logging.WARNING, logger="wino.torch"), torch.inference_mode():
        first = module(x)
        conv.weight.mul_(-1.0)  # in place, in inference mode: no version to see it by
        second = module(x)
    assert len(calls) == 2
    assert sum("inference tensor" in r.getMessage() for r in caplog.records) <= 1
    assert _error(first, _reference(x, conv)) > 0.5  # the weight changed sign since
    assert _error(second, _reference(x, conv)) <= _bound(layer, DType.FP32)


# convert ---------------------------------------------------------------------------------------
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(8, 16, 3, padding=1)
        self.body = nn.Sequential(
            nn.ReLU(),
            nn.Conv2d(16, 16, 3, padding=(2, 0), dilation=(2, 1), groups=4, bias=False),
            nn.Conv2d(16, 16, 3, stride=2, padding=1),  # stride 2: left to torch
            nn.Conv2d(16, 16, 1),  # 1x1: left to torch
        )
        self.shared = nn.Conv2d(16, 16, 5, padding=2)  # used twice, named once
        self.again = self.shared

    def forward(self, x):
        return self.again(self.shared(self.body(self.stem(x))))


def _net_input():
    torch.manual_seed(0)
    return torch.randn(N, 8, 10, 10).contiguous(memory_format=torch.channels_last)


@pytest.fixture(scope="module")
def net_cache(root):
    stem = Problem(N=N, C=8, H=10, W=10, K=16, pad_h=1, pad_w=1)
    body = Problem(N=N, C=16, H=10, W=10, K=16, pad_h=2, pad_w=0, dil_h=2, groups=4)
    specs = set()
    for p in (stem, body):
        for epilogue in Epilogue:
            specs.update(default_stage_specs(p, default_tile(p), epilogue=epilogue).values())
    host_cache.build(specs, root)
    return root


def test_convert_swaps_the_eligible_layers_and_names_the_rest_once(net_cache, caplog):
    torch.manual_seed(1)
    net = Net().eval()
    x = _net_input()
    with torch.inference_mode():
        expect = net(x)
    with caplog.at_level(logging.WARNING, logger="wino.torch"):
        assert wt.convert(net) is net
    assert isinstance(net.stem, wt.Conv2d) and isinstance(net.body[1], wt.Conv2d)
    assert type(net.body[2]) is nn.Conv2d and type(net.body[3]) is nn.Conv2d
    assert net.shared is net.again and type(net.shared) is nn.Conv2d
    left = [r.getMessage() for r in caplog.records]
    assert len(left) == 3, left
    assert any("body.2" in m and "stride_not_1" in m for m in left)
    assert any("body.3" in m and "not_3x3" in m for m in left)
    assert any("shared" in m and "not_3x3" in m for m in left)
    with torch.inference_mode():
        y = net(x)
    scale = expect.abs().max().item()
    assert (y - expect).abs().max().item() / scale < 1e-4


def test_compile_fullgraph_traces_the_op(net_cache):
    torch.manual_seed(2)
    net = wt.convert(Net().eval())
    x = _net_input()
    seen = []

    def backend(gm, example_inputs):
        seen.extend(node.target for node in gm.graph.nodes)
        return gm.forward

    with torch.inference_mode():
        eager = net(x)
        compiled = torch.compile(net, fullgraph=True, backend=backend)
        assert torch.equal(compiled(x), eager)
        assert torch.equal(torch.compile(net, fullgraph=True, backend="aot_eager")(x), eager)
    assert seen.count(torch.ops.wino.conv2d.default) == 2


# Bad input -------------------------------------------------------------------------------------
def test_bad_inputs_name_the_argument(root):
    layer = LAYERS[0]
    conv, x = _conv(layer), _input(layer)
    args = (conv.weight, conv.bias, [1, 1], [1, 1], 1)
    op = torch.ops.wino.conv2d
    with pytest.raises(ValueError, match="x: wino reads NCHW tensors in channels_last"):
        op(x.contiguous(), *args)
    with pytest.raises(ValueError, match="x: torch.float64 is not served"):
        op(x.double(), conv.weight.double(), conv.bias.double(), *args[2:])
    with pytest.raises(ValueError, match="weight: on meta"):  # the op sends meta to the fake
        wt.ops.check(x, conv.weight.to("meta"), conv.bias, 1)
    with pytest.raises(ValueError, match="bias: torch.float16"):
        op(x, conv.weight, conv.bias.half(), *args[2:])
    with pytest.raises(ValueError, match="weight: 8 input channels per group"):
        op(x, conv.weight, conv.bias, [1, 1], [1, 1], 2)


def test_plan_run_on_cpu_tensors_writes_y_in_place(root):
    """The host target takes CPU tensors as numpy views: y is written where it lies."""
    p = _problem(LAYERS[0])
    plan = dispatch(p, target="c")
    x = torch.randn(p.N, p.H, p.W, p.C)
    w = torch.randn(p.K, 3, 3, p.Cg)
    y = torch.full((p.N, p.Ho, p.Wo, p.K), float("nan"))
    assert plan.run(x, w, y=y) is y
    ref = conv2d_reference(x.double().numpy(), w.double().numpy(), (1, 1), (1, 1), 1)
    assert relative_error(y.double().numpy(), ref) <= issue_bound(plan.tile, p.dtype, plan.xdtype)
    with pytest.raises(ValueError, match="y: must be a writeable, C-contiguous"):
        plan.run(x, w, y=torch.empty(p.N, p.K, p.Ho, p.Wo).permute(0, 2, 3, 1))
