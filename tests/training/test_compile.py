"""fp4spec.training.Linear traced whole by torch.compile: a small GPT converted to the nvfp4,
ufp4 and mxfp4 recipes compiles to one graph (``fullgraph=True``), its forward and backward
equal eager bit for bit over several steps without recompiling (the SR counter lives in a
tensor), and a run resumed from a checkpoint continues with the same bits. CPU tensors, the
``aot_eager`` backend (inductor's C++ compile on one recipe); the GPU twin is in
``test_gpu_training.py``."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from fp4spec.training import convert, counters, quantized_layers, random_bits, set_counters  # noqa: E402
from fp4spec.training.gpt import GPT, GPTConfig  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

CFG = GPTConfig(vocab=64, d_model=32, layers=1, heads=2, ffn=64, seq_len=16)
RECIPES = ["nvfp4", "ufp4", "mxfp4"]


def _mlp(recipe):
    """A small model: two linears (the second with a bias), its loss a function of x and y."""
    torch.manual_seed(0)
    body = torch.nn.Sequential(torch.nn.Linear(32, 64, bias=False), torch.nn.ReLU(), torch.nn.Linear(64, 32))
    return convert(Regression(body), recipe)


class Regression(torch.nn.Module):
    def __init__(self, body):
        super().__init__()
        self.body = body

    def forward(self, x, y):
        return (self.body(x).float() - y).square().mean()


def _model(recipe):
    torch.manual_seed(0)
    return convert(GPT(CFG), recipe, skip=("lm_head",))


def _batch(step, model):
    g = torch.Generator().manual_seed(100 + step)
    if isinstance(model, GPT):
        return torch.randint(0, CFG.vocab, (2, CFG.seq_len), generator=g), \
            torch.randint(0, CFG.vocab, (2, CFG.seq_len), generator=g)
    return torch.randn(2, 24, 32, generator=g), torch.randn(2, 24, 32, generator=g)


def _step(model, net, opt, step):
    """One training step: (loss, every parameter's gradient); bf16 autocast as fp4spec train."""
    x, y = _batch(step, model)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = net(x, y)
    loss.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.detach(), grads


def _optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.05)


def _assert_same(a, b, what):
    (la, ga), (lb, gb) = a, b
    assert torch.equal(la, lb), what
    for i, (u, v) in enumerate(zip(ga, gb)):
        assert torch.equal(u, v), (what, i)


def _compiled(model, backend="aot_eager"):
    torch._dynamo.reset()
    return torch.compile(model, fullgraph=True, backend=backend)


@pytest.mark.parametrize("recipe", RECIPES)
def test_compiled_steps_equal_eager_without_recompiling_and_resume(recipe):
    """fullgraph=True (no graph break); one graph for every step, eager's bits at each step;
    a checkpoint (parameters, optimizer, counters) restored after step 3 replays steps 2 and 3
    bit for bit, still without recompiling."""
    model, twin = _mlp(recipe), _mlp(recipe)
    net = _compiled(model)
    opt, twin_opt = _optimizer(model), _optimizer(twin)
    torch._dynamo.utils.counters.clear()
    _assert_same(_step(model, net, opt, 0), _step(twin, twin, twin_opt, 0), (recipe, 0))
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    assert graphs >= 1
    with torch._dynamo.config.patch(error_on_recompile=True):
        _assert_same(_step(model, net, opt, 1), _step(twin, twin, twin_opt, 1), (recipe, 1))
        ckpt = copy.deepcopy({"model": model.state_dict(), "opt": opt.state_dict(), "counters": counters(model)})
        straight = [_step(model, net, opt, step) for step in (2, 3)]
        for step, got in zip((2, 3), straight):
            _assert_same(got, _step(twin, twin, twin_opt, step), (recipe, step))
        assert counters(model) == counters(twin) == {n: 4 for n in quantized_layers(model)}
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["opt"])
        set_counters(model, ckpt["counters"])
        for step, want in zip((2, 3), straight):
            _assert_same(_step(model, net, opt, step), want, (recipe, "resumed", step))
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs  # nothing traced after step 0
    assert not torch._dynamo.utils.counters["graph_break"]


def test_checkpoint_resumes_in_a_fresh_model():
    """The counters and parameters of a compiled run, loaded into a new model compiled anew."""
    model = _mlp("nvfp4")
    net, opt = _compiled(model), _optimizer(model)
    _step(model, net, opt, 0)
    ckpt = copy.deepcopy({"model": model.state_dict(), "opt": opt.state_dict(), "counters": counters(model)})
    want = _step(model, net, opt, 1)
    resumed = _mlp("nvfp4")
    resumed.load_state_dict(ckpt["model"])
    ropt = _optimizer(resumed)
    ropt.load_state_dict(ckpt["opt"])
    set_counters(resumed, ckpt["counters"])
    _assert_same(_step(resumed, _compiled(resumed), ropt, 1), want, "fresh")


@pytest.mark.slow
def test_the_gpt_compiles_to_one_graph_equal_to_eager():
    """The benchmark's model (fp4spec.training.gpt, tiny): fullgraph=True, two steps equal eager."""
    model, twin = _model("nvfp4"), _model("nvfp4")
    net = _compiled(model)
    opt, twin_opt = _optimizer(model), _optimizer(twin)
    for step in (0, 1):
        _assert_same(_step(model, net, opt, step), _step(twin, twin, twin_opt, step), step)


def test_sr_bits_follow_the_documented_derivation():
    """Step 3 of random_bits on the device equals the numpy Philox definition, and the layer's
    SR operands use those bits (its records replay from call_seed)."""
    key = random_bits.operand_key(random_bits.derive(0, "body.2"), "wgrad", "dy")
    for call in (0, 1, 2**31, 2**40 + 3):
        t = random_bits.call_seed_tensor(key, torch.tensor(call))
        assert int(t) == random_bits.call_seed(random_bits.derive(0, "body.2"), call, "wgrad", "dy")
        assert 0 <= int(t) < 2**63
    model = _mlp("mxfp4")
    layer = quantized_layers(model)["body.2"]
    set_counters(model, {"body.2": 5})
    records = []
    layer.on_operand = records.append
    x, y = _batch(0, model)
    model(x, y).backward()
    sr = [r for r in records if r.rbits is not None]
    assert {(r.gemm, r.tensor) for r in sr} == {("dgrad", "dy"), ("wgrad", "dy")}
    for r in sr:
        seed = random_bits.call_seed(layer.layer_seed, 5, r.gemm, r.tensor)
        assert torch.equal(r.rbits, random_bits.draw(seed, r.source.shape, 8, "cpu"))
    assert int(layer.calls) == 6


def test_evaluation_under_compile_does_not_advance_the_counter():
    model = _mlp("nvfp4")
    net = _compiled(model)
    x, y = _batch(0, model)
    with torch.no_grad():
        net(x, y)
    assert set(counters(model).values()) == {0}
    net(x, y).backward()
    assert set(counters(model).values()) == {1}


def test_counter_moves_with_the_module():
    model = _mlp("ufp4")
    model.to(torch.float64)
    layer = next(iter(quantized_layers(model).values()))
    assert layer.calls.dtype == torch.int64 and layer.calls.device == layer.weight.device
    assert "calls" not in "".join(model.state_dict())  # the state dict is torch.nn.Linear's
    with torch.device("meta"):
        meta = _mlp("ufp4")
    meta.to_empty(device="cpu")
    assert counters(meta) == {"body.0": 0, "body.2": 0}


@pytest.mark.slow
def test_inductor_on_the_cpu_equals_eager():
    """inductor (C++ code on the CPU) of the ufp4 recipe: one graph, eager's output and
    gradients for a given output gradient, two steps (the loss is left out: inductor reduces a
    mean in another order than eager). Inductor keeps fused bf16 arithmetic (the bias add) in
    float32 unless told to round where eager rounds: ``emulate_precision_casts``."""
    import torch._inductor.config as inductor_config

    model, twin = _mlp("ufp4").body, _mlp("ufp4").body
    net = _compiled(model, backend="inductor")
    with inductor_config.patch(emulate_precision_casts=True):
        _inductor_steps(net, model, twin)


def _inductor_steps(net, model, twin):
    for step in (0, 1):
        x, dy = _batch(step, model)
        outs = []
        for m in (net, twin):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = m(x)
            out.backward(dy.to(out.dtype))
            outs.append((out.detach(), [p.grad.clone() for p in m.parameters()]))
        _assert_same(outs[0], outs[1], step)
    assert counters(model) == counters(twin)
