"""fp4spec.training on a CUDA device (skipped without one): the Linear equals the public-API
reference there too, its quantized operands equal the CPU's bit for bit, the fast path picks
the triton backend and adds no host synchronisation, and a compiled training step runs."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from fp4spec.training import Gemm, Linear, Operand, get_recipe, recipes  # noqa: E402

from .test_linear import reference  # noqa: E402

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

QUANTIZED = [n for n in recipes if n != "bf16"]


def _data(m=256, k=512, n=384, device="cuda"):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(m, k, generator=g) * torch.logspace(-2, 1, k)
    dy = torch.randn(m, n, generator=g) * 1e-3
    return x.to(device, torch.bfloat16), dy.to(device, torch.bfloat16)


def _run(layer, x, dy, records=None):
    layer.on_operand = None if records is None else records.append
    x = x.clone().requires_grad_(True)
    y = layer(x)
    y.backward(dy)
    return y.detach(), x.grad, layer.weight.grad


@pytest.mark.parametrize("name", QUANTIZED)
def test_cuda_equals_the_public_api_reference(name):
    recipe = recipes[name]
    x, dy = _data()
    layer = Linear(512, 384, bias=False, recipe=recipe, name="l", device="cuda")
    rec = []
    y, dx, dw = _run(layer, x, dy, rec)
    ry, rdx, rdw = reference(recipe, x, layer.weight.detach(), dy, layer.layer_seed)
    assert torch.equal(y, ry) and torch.equal(dx, rdx) and torch.equal(dw, rdw.float())
    assert {r.q.backend for r in rec} == {"triton"}, {(r.gemm, r.tensor): r.q.backend for r in rec}


@pytest.mark.parametrize("name", QUANTIZED)
def test_cuda_operands_equal_the_cpu_operands(name):
    """The forward GEMM's operands (RNE in every preset): the same bits on the GPU and the CPU."""
    import copy

    x, dy = _data()
    recs = {}
    cpu = Linear(512, 384, bias=False, recipe=name, name="l")
    for dev in ("cpu", "cuda"):
        layer = copy.deepcopy(cpu).to(dev)
        recs[dev] = []
        layer.on_operand = recs[dev].append
        layer(x.to(dev))
    for a, b in zip(recs["cpu"], recs["cuda"]):
        assert (a.gemm, a.tensor) == (b.gemm, b.tensor)
        assert torch.equal(a.values, b.values.cpu()), (a.gemm, a.tensor)


def _syncs(layer, x, dy):
    import warnings

    _run(layer, x, dy)  # warm: kernels compiled, tables built
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            _run(layer, x, dy)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    # torch's own note that the mode is a prototype ("does not yet detect all synchronizing
    # operations") is not a synchronisation
    return [f"{w.filename}:{w.lineno}" for w in caught
            if "synchroniz" in str(w.message) and "is a prototype feature" not in str(w.message)]


def test_fast_path_without_sr_adds_no_host_sync():
    base = recipes["nvfp4"]
    rne = base.replace(dgrad=Gemm(Operand("nvfp4"), base.dgrad.b), wgrad=Gemm(Operand("nvfp4"), base.wgrad.b, rht="te"))
    x, dy = _data()
    layer = Linear(512, 384, bias=False, recipe=rne, name="l", device="cuda")
    assert _syncs(layer, x, dy) == []


@pytest.mark.parametrize("name", ["nvfp4", "ufp4"])
def test_fast_path_with_sr_adds_no_host_sync(name):
    x, dy = _data()
    layer = Linear(512, 384, bias=False, recipe=name, name="l", device="cuda")
    assert _syncs(layer, x, dy) == []


def test_compiled_training_step_on_cuda(tmp_path):
    from fp4spec.training import pretrain

    argv = ["--out", str(tmp_path / "run"), "--recipe", "nvfp4", "--d-model", "128", "--layers", "2", "--heads", "2",
            "--ffn", "256", "--seq-len", "128", "--batch", "8", "--steps", "20", "--log-every", "10",
            "--eval-every", "0", "--final-eval-tokens", "8192", "--corpus-max-bytes", "2000000",
            "--cache-dir", str(tmp_path / "corpus"), "--compile", "--lr", "3e-3"]
    assert pretrain.main(argv) == 0
    import json

    r = json.loads((tmp_path / "run" / "results.json").read_text())
    assert r["completed"] and r["train_curve"][-1]["train_loss"] < r["train_curve"][0]["train_loss"]
    assert all(v == ["triton"] for v in r["backends"].values()), r["backends"]
    assert get_recipe("nvfp4").backend == "auto"


@pytest.mark.parametrize("name", ["nvfp4", "ufp4", "mxfp4"])
def test_compiled_layers_on_cuda_equal_eager_without_syncs_or_recompiles(name):
    """inductor, fullgraph=True: two linears traced whole equal eager (bias add rounded as eager:
    emulate_precision_casts), three steps without recompiling, and a compiled step adds no host
    synchronisation (the SR counter and seeds stay on the device)."""
    import warnings

    import torch._inductor.config as inductor_config

    from fp4spec.training import convert

    def mlp():
        torch.manual_seed(0)
        return convert(torch.nn.Sequential(torch.nn.Linear(512, 384, bias=False), torch.nn.ReLU(),
                                           torch.nn.Linear(384, 256)), name).cuda()

    model, twin = mlp(), mlp()
    torch._dynamo.reset()
    net = torch.compile(model, fullgraph=True)
    x, _ = _data()
    dy = torch.randn(256, 256, generator=torch.Generator().manual_seed(1)).to("cuda", torch.bfloat16)

    def run(m):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            y = m(x)
        y.backward(dy)
        out = (y.detach(), [p.grad.clone() for p in m.parameters()])
        for p in m.parameters():
            p.grad = None
        return out

    with inductor_config.patch(emulate_precision_casts=True):
        run(net)
        run(twin)
        with torch._dynamo.config.patch(error_on_recompile=True):
            for _ in range(3):
                (a, ga), (b, gb) = run(net), run(twin)
                assert torch.equal(a, b) and all(torch.equal(u, v) for u, v in zip(ga, gb))
            torch.cuda.synchronize()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                torch.cuda.set_sync_debug_mode("warn")
                try:
                    run(net)
                finally:
                    torch.cuda.set_sync_debug_mode("default")
    syncs = [f"{w.filename}:{w.lineno}" for w in caught
             if "synchroniz" in str(w.message) and "is a prototype feature" not in str(w.message)]
    assert syncs == []
