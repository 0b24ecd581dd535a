"""fp4spec.training.Linear against a reference written with the public quantize / dequantize /
matmul calls, bit for bit, for every preset; SR replay; autocast; torch.compile; convert."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import fp4spec  # noqa: E402
from fp4spec.training import (Gemm, Linear, Operand, Recipe, convert, counters, get_recipe, recipes,  # noqa: E402
                              set_counters)
from fp4spec.training import random_bits  # noqa: E402

BF16 = torch.bfloat16


def _ref_values(op, t, axis, rht, seed, call, gemm, tensor):
    """One operand as the reference sees it: quantize -> dequantize -> bf16 (public API only)."""
    if op.scheme is None:
        return t.to(BF16)
    rb = None
    if op.rounding == "sr":
        rb = random_bits.draw(random_bits.call_seed(seed, call, gemm, tensor), t.shape, op.sr_bits, t.device)
    q = fp4spec.quantize(t, op.resolved, axis=axis, rounding=op.rounding, rbits=rb, sr_bits=op.sr_bits, pad=True,
                         rht=rht)
    return fp4spec.dequantize(q).to(BF16)


def reference(recipe: Recipe, x2, w, dy, seed: int, call: int = 0):
    """y = x w^T, dx = dy w, dw = dy^T x, each operand quantized along its GEMM's reduction axis."""
    f, d, g = recipe.fprop, recipe.dgrad, recipe.wgrad
    y = _ref_values(f.a, x2, -1, f.rht, seed, call, "fprop", "x") @ \
        _ref_values(f.b, w, -1, f.rht, seed, call, "fprop", "w").T
    dx = _ref_values(d.a, dy, -1, d.rht, seed, call, "dgrad", "dy") @ \
        _ref_values(d.b, w, 0, d.rht, seed, call, "dgrad", "w")
    dw = _ref_values(g.a, dy, 0, g.rht, seed, call, "wgrad", "dy").T @ \
        _ref_values(g.b, x2, 0, g.rht, seed, call, "wgrad", "x")
    return y, dx, dw


def _run(layer, x, dy):
    x = x.clone().requires_grad_(True)
    y = layer(x)
    y.backward(dy)
    return y.detach(), x.grad, layer.weight.grad


def _data(m=48, k=64, n=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g) * torch.logspace(-2, 1, k)  # uneven columns: blocks with different scales
    dy = torch.randn(m, n, generator=g) * 1e-3
    return x, dy


@pytest.mark.parametrize("name", [n for n in recipes if n != "bf16"])
def test_forward_backward_equal_the_public_api_reference(name):
    recipe = recipes[name]
    x, dy = _data()
    layer = Linear(64, 32, bias=False, recipe=recipe, name="blocks.0.fc")
    y, dx, dw = _run(layer, x, dy)
    ry, rdx, rdw = reference(recipe, x, layer.weight.detach(), dy, layer.layer_seed)
    assert y.dtype == torch.float32 and dx.dtype == torch.float32 and dw.dtype == torch.float32
    assert torch.equal(y, ry.float())
    assert torch.equal(dx, rdx.float())
    assert torch.equal(dw, rdw.float())


def test_three_dimensional_input_and_bias():
    recipe = recipes["ufp4"]
    g = torch.Generator().manual_seed(3)
    x3 = torch.randn(2, 24, 64, generator=g)
    dy3 = torch.randn(2, 24, 32, generator=g)
    layer = Linear(64, 32, recipe=recipe, name="l")
    x = x3.clone().requires_grad_(True)
    y = layer(x)
    y.backward(dy3)
    ry, rdx, rdw = reference(recipe, x3.reshape(-1, 64), layer.weight.detach(), dy3.reshape(-1, 32), layer.layer_seed)
    assert y.shape == (2, 24, 32)
    assert torch.equal(y.detach(), (ry.float() + layer.bias.detach()).reshape(2, 24, 32))
    assert torch.equal(x.grad, rdx.float().reshape(2, 24, 64))
    assert torch.equal(layer.weight.grad, rdw.float())
    assert torch.equal(layer.bias.grad, dy3.reshape(-1, 32).sum(0))


@pytest.mark.parametrize("model", ["fp32", "sm100-mxf4nvf4", "exact"])
def test_accumulator_model_equals_fp4spec_matmul(model):
    """compute=<model>: fp4spec.matmul of the operands laid out rows x K, bit for bit."""
    base = recipes["nvfp4"]
    recipe = base.replace(fprop=Gemm(base.fprop.a, base.fprop.b, compute=model),
                          dgrad=Gemm(base.dgrad.a, base.dgrad.b, compute=model),
                          wgrad=Gemm(base.wgrad.a, base.wgrad.b, rht="te", compute=model))
    x, dy = _data(m=64, n=64)  # K = 64 for every GEMM: a multiple of sm100's step
    layer = Linear(64, 64, bias=False, recipe=recipe, name="l")
    y, dx, dw = _run(layer, x, dy)
    w = layer.weight.detach()
    s = layer.layer_seed

    def q(op, t, gemm, tensor, rht=None):
        rb = None
        if op.rounding == "sr":
            rb = random_bits.draw(random_bits.call_seed(s, 0, gemm, tensor), t.shape, op.sr_bits, "cpu")
        return fp4spec.quantize(t.contiguous(), op.resolved, rounding=op.rounding, rbits=rb, pad=True, rht=rht)

    def mm(a, b):
        return torch.from_numpy(fp4spec.matmul(a.to_numpy(), b.to_numpy(), accumulator=model))

    r = recipe
    assert torch.equal(y, mm(q(r.fprop.a, x, "fprop", "x"), q(r.fprop.b, w, "fprop", "w")))
    # dgrad's B is w^T and wgrad's operands dy^T, x^T: their SR bits are drawn in the stored layout
    rb = random_bits.draw(random_bits.call_seed(s, 0, "dgrad", "dy"), dy.shape, 8, "cpu")
    qdy = fp4spec.quantize(dy, "nvfp4", rounding="sr", rbits=rb, pad=True)
    assert torch.equal(dx, mm(qdy, q(r.dgrad.b, w.T, "dgrad", "w")))
    rb = random_bits.draw(random_bits.call_seed(s, 0, "wgrad", "dy"), dy.shape, 8, "cpu")
    qdyt = fp4spec.quantize(dy.T.contiguous(), "nvfp4", rounding="sr", rbits=rb.T, pad=True, rht="te")
    assert torch.equal(dw, mm(qdyt, q(r.wgrad.b, x.T, "wgrad", "x", rht="te")))


def test_quantization_is_applied_and_recorded():
    """Every quantized operand reaches the GEMM as dequantize(quantize(...)): at most 8
    magnitudes per 16-block (E2M1), and the records name the right axis."""
    records = []
    layer = Linear(64, 32, bias=False, recipe="nvfp4", name="l")
    layer.on_operand = records.append
    x, dy = _data()
    _run(layer, x, dy)
    # dgrad reuses fprop's weight values (16x16 tiles: weight_reusable)
    assert [(r.gemm, r.tensor, r.axis) for r in records] == [
        ("fprop", "w", 1), ("fprop", "x", 1), ("dgrad", "dy", 1), ("wgrad", "dy", 0), ("wgrad", "x", 0)]
    for r in records:
        v = r.values.float().movedim(r.axis, -1)
        blocks = v.reshape(*v.shape[:-1], -1, 16).abs()
        distinct = max(len(torch.unique(b)) for b in blocks.reshape(-1, 16))
        assert distinct <= 8, (r.gemm, r.tensor, distinct)
        assert torch.equal(r.values, fp4spec.dequantize(r.q).to(BF16))



@pytest.mark.parametrize("shape", [(32, 64), (40, 72), (17, 100)])
@pytest.mark.parametrize("rounding", ["rne", "rtz"])
def test_square_tiles_read_either_way_give_the_same_values(shape, rounding):
    """Why dgrad may reuse fprop's weight (weight_reusable): a 16x16 tile quantized along
    either axis gives the same values, padding included."""
    from fp4spec.training.linear import weight_reusable

    w = torch.randn(*shape, generator=torch.Generator().manual_seed(1)) * torch.logspace(-3, 2, shape[1])
    along_k = fp4spec.dequantize(fp4spec.quantize(w, "nvfp4_2d", axis=1, rounding=rounding, pad=True))
    along_n = fp4spec.dequantize(fp4spec.quantize(w, "nvfp4_2d", axis=0, rounding=rounding, pad=True))
    assert torch.equal(along_k, along_n)
    assert weight_reusable(recipes["nvfp4"])
    assert not any(weight_reusable(recipes[n]) for n in ("mxfp4", "ufp4", "nvfp4_full_rht", "bf16"))


def test_sr_bits_replay_from_the_seed():
    x, dy = _data()
    a = Linear(64, 32, bias=False, recipe="nvfp4", name="blocks.1.mlp")
    b = Linear(64, 32, bias=False, recipe="nvfp4", name="blocks.1.mlp")
    b.weight.data.copy_(a.weight.data)
    rec = []
    a.on_operand = rec.append
    first = _run(a, x, dy)
    assert torch.equal(first[2], _run(b, x, dy)[2])  # same seed, name, call: same bits
    sr = [r for r in rec if r.rbits is not None]
    assert [(r.gemm, r.tensor) for r in sr] == [("dgrad", "dy"), ("wgrad", "dy")]
    for r in sr:
        want = random_bits.draw(random_bits.call_seed(a.layer_seed, 0, r.gemm, r.tensor), r.source.shape, 8, "cpu")
        assert torch.equal(r.rbits, want)
        assert r.rbits.unique().numel() > 100  # not all zero: bits really vary
    a.weight.grad = None
    second = _run(a, x, dy)  # call 1: new bits, other gradient
    assert not torch.equal(first[2], second[2])
    state = counters(a)
    assert state == {"blocks.1.mlp": 2}
    set_counters(a, {"blocks.1.mlp": 1})
    a.weight.grad = None
    assert torch.equal(_run(a, x, dy)[2], second[2])  # resumed counter: the same bits again
    other = Linear(64, 32, bias=False, recipe=get_recipe("nvfp4", seed=1), name="blocks.1.mlp")
    other.weight.data.copy_(a.weight.data)
    assert not torch.equal(_run(other, x, dy)[2], first[2])


def test_autocast_bf16():
    recipe = recipes["nvfp4"]
    x, dy = _data()
    layer = Linear(64, 32, bias=False, recipe=recipe, name="l")
    xx = x.clone().requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = layer(xx)
    assert y.dtype == torch.bfloat16
    y.backward(dy.to(BF16))
    ry, rdx, rdw = reference(recipe, x, layer.weight.detach(), dy.to(BF16), layer.layer_seed)
    assert torch.equal(y.detach(), ry)
    assert xx.grad.dtype == torch.float32 and layer.weight.grad.dtype == torch.float32
    assert torch.equal(xx.grad, rdx.float())
    assert torch.equal(layer.weight.grad, rdw.float())


def test_torch_compile_with_a_hook_breaks_the_graph_and_is_exact():
    """With an on_operand hook the quantized GEMMs run eagerly inside a compiled model
    (fullgraph=False); the result equals eager, bit for bit (test_compile.py: without hooks the
    layer is traced whole)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64, bias=False), torch.nn.ReLU(),
                                torch.nn.Linear(64, 32, bias=False))
    twin = torch.nn.Sequential(torch.nn.Linear(32, 64, bias=False), torch.nn.ReLU(),
                               torch.nn.Linear(64, 32, bias=False))
    twin.load_state_dict(model.state_dict())
    convert(model, "ufp4")
    convert(twin, "ufp4")
    records = []
    model[0].on_operand = records.append
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=False, backend="aot_eager")
    x = torch.randn(16, 32)
    y1 = compiled(x)
    y1.square().sum().backward()
    y2 = twin(x)
    y2.square().sum().backward()
    assert torch.equal(y1, y2)
    assert torch.equal(model[0].weight.grad, twin[0].weight.grad)
    assert torch.equal(model[2].weight.grad, twin[2].weight.grad)
    assert [(r.gemm, r.tensor) for r in records] == [("fprop", "x"), ("fprop", "w"), ("wgrad", "dy"), ("wgrad", "x")]


def test_convert_swaps_linears_and_shares_parameters():
    model = torch.nn.ModuleDict({"body": torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Linear(32, 16)),
                                 "lm_head": torch.nn.Linear(16, 8)})
    w = model["body"][0].weight
    convert(model, get_recipe("nvfp4", keep_high_precision=("body.1",)), skip=("lm_head",))
    assert isinstance(model["body"][0], Linear) and model["body"][0].weight is w
    assert model["body"][0].name == "body.0"
    assert type(model["body"][1]) is torch.nn.Linear and type(model["lm_head"]) is torch.nn.Linear
    plain = torch.nn.Sequential(torch.nn.Linear(16, 16))
    assert type(convert(plain, "bf16")[0]) is torch.nn.Linear
    assert set(model.state_dict()) == {"body.0.weight", "body.0.bias", "body.1.weight", "body.1.bias",
                                       "lm_head.weight", "lm_head.bias"}


def test_user_defined_schemes_and_overrides():
    own = fp4spec.get_scheme("ufp4", block_size=32)
    recipe = Recipe("own", fprop=Gemm(Operand(own), Operand("nvfp4", overrides={"scale_rule": "4over6"})),
                    dgrad=Gemm(Operand("nvint4", "sr"), Operand()), wgrad=Gemm())
    x, dy = _data()
    layer = Linear(64, 32, bias=False, recipe=recipe, name="l")
    y, dx, dw = _run(layer, x, dy)
    ry, rdx, rdw = reference(recipe, x, layer.weight.detach(), dy, layer.layer_seed)
    assert torch.equal(y, ry.float()) and torch.equal(dx, rdx.float()) and torch.equal(dw, rdw.float())
    assert recipe.fprop.b.resolved.scale_rule == "4over6"


@pytest.mark.parametrize("kwargs, match", [
    ({"scheme": "nvfp5"}, "scheme"),
    ({"scheme": "nvfp4", "rounding": "stochastic"}, "rounding"),
    ({"scheme": "nvfp4", "overrides": {"blok_size": 32}}, "blok_size"),
    ({"scheme": None, "rounding": "sr"}, "scheme"),
    ({"scheme": "nvfp4", "sr_bits": 0}, "sr_bits"),
])
def test_operand_errors_name_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Operand(**kwargs)


def test_gemm_and_recipe_errors_name_the_argument():
    with pytest.raises(ValueError, match="rht"):
        Gemm(Operand("nvfp4"), Operand(), rht="te")
    with pytest.raises(ValueError, match="compute"):
        Gemm(Operand("nvfp4"), Operand("nvfp4"), compute="tf32")
    with pytest.raises(ValueError, match="compute"):
        Gemm(Operand("nvfp4"), Operand(), compute="fp32")
    with pytest.raises(ValueError, match="scope"):
        Recipe("x", scope="rank")
    with pytest.raises(ValueError, match="recipe"):
        get_recipe("nvfp8")
    with pytest.raises(ValueError, match="state"):
        set_counters(torch.nn.Linear(2, 2), {"nope": 1})


def test_calls_without_autograd_do_not_count():
    layer = Linear(64, 32, bias=False, recipe="nvfp4", name="l")
    x = torch.randn(16, 64)
    with torch.no_grad():
        layer(x)
    assert layer.calls == 0
    layer(x)
    assert layer.calls == 1
