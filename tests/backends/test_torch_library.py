"""``fp4spec.quantize`` / ``dequantize`` under ``torch.compile``: the custom operators of
:mod:`fp4spec.api.torch_library` pass torch's ``opcheck`` (schema, fake functions, no
aliasing), a compiled function that quantizes is one graph (``fullgraph=True``), and its
results equal the eager calls bit for bit. CPU tensors, the ``aot_eager`` backend (no C++
compile); the GPU twin (inductor, CUDA graphs) is ``test_gpu_capture.py``."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import fp4spec  # noqa: E402
from fp4spec.api import torch_library  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

# (scheme, kwargs of quantize)
CASES = [
    ("nvfp4", {}),
    ("mxfp4", {"axis": 0}),
    ("mxfp4:scale_rule=rceil", {}),
    ("nvfp4", {"pad": True}),
    ("nvfp4_2d", {}),
    ("ufp4", {"rounding": "sr"}),
    ("nvint4", {}),
    ("mxfp8_e4m3", {}),
    ("nvfp4", {"rht": "te"}),
]
IDS = [f"{s}-{'-'.join(f'{k}={v}' for k, v in kw.items())}" for s, kw in CASES]


def _inputs(kw, seed=0):
    g = torch.Generator().manual_seed(seed)
    shape = (32, 56) if kw.get("pad") else (32, 64)
    x = torch.randn(shape, generator=g) * 4
    rb = torch.randint(0, 256, shape, generator=g) if kw.get("rounding") == "sr" else None
    return x, rb


def _same(a, b):
    assert a.equals(b)
    assert a.axis == b.axis and a.shape == b.shape and a.scheme == b.scheme


@pytest.mark.parametrize("scheme,kw", CASES, ids=IDS)
def test_compiled_quantize_is_one_graph_and_equal(scheme, kw):
    x, rb = _inputs(kw)

    def f(x, rb):
        q = fp4spec.quantize(x, scheme, rbits=rb, **kw)
        return q, fp4spec.dequantize(q)

    torch._dynamo.reset()
    q, v = torch.compile(f, fullgraph=True, backend="aot_eager")(x, rb)
    q0, v0 = f(x, rb)
    _same(q, q0)
    assert torch.equal(v, v0)


@pytest.mark.parametrize("scheme,kw", CASES, ids=IDS)
def test_opcheck(scheme, kw):
    x, rb = _inputs(kw, seed=1)
    args = (x, scheme, kw.get("axis", -1), kw.get("rounding", "rne"), rb, 8, kw.get("pad", False), kw.get("rht"), "auto")
    torch.library.opcheck(torch.ops.fp4spec.quantize.default, args)
    torch.library.opcheck(torch.ops.fp4spec.fake_quantize.default, args)
    data, scales, g = torch.ops.fp4spec.quantize(*args)
    q = fp4spec.quantize(x, scheme, rbits=rb, **kw)
    shape = tuple(x.shape)
    ax = q.axis
    moved = list(shape[:ax] + shape[ax + 1:] + (shape[ax],))
    torch.library.opcheck(torch.ops.fp4spec.dequantize.default, (data, scales, g, scheme, moved, "auto"))


def test_fake_quantize_equals_the_public_calls():
    x, _ = _inputs({})
    v = torch_library.fake_quantize(x, "nvfp4", axis=0)
    assert torch.equal(v, fp4spec.dequantize(fp4spec.quantize(x, "nvfp4", axis=0)))

    def layer(x, w):
        a = torch_library.fake_quantize(x, "nvfp4").to(torch.bfloat16)
        b = torch_library.fake_quantize(w, "nvfp4").to(torch.bfloat16)
        return a @ b.T

    w = torch.randn(16, 64)
    torch._dynamo.reset()
    assert torch.equal(torch.compile(layer, fullgraph=True, backend="aot_eager")(x, w), layer(x, w))


def test_hif4_takes_the_eager_path():
    x, _ = _inputs({})
    with pytest.raises(ValueError, match="HiF4"):
        torch_library.quantize_fields(x, "hif4")
    torch._dynamo.reset()
    q = torch.compile(lambda t: fp4spec.quantize(t, "hif4"), backend="aot_eager")(x)  # a graph break, same bits
    _same(q, fp4spec.quantize(x, "hif4"))


# -- seed= (a one-element int64 tensor) and RHT objects through the operators --------------------

def test_rht_text_round_trips():
    from fp4spec.rht import RHT

    for r in (RHT.te(), RHT.from_seed(7), RHT.from_seed(3, size=32, out_dtype="float32"), RHT.te(arith="float64")):
        text = torch_library.rht_text(r)
        assert torch_library.rht_from_text(text) == r
    assert torch_library.rht_text("te") == "te" and torch_library.rht_text(None) is None
    assert torch_library.rht_text(5) == torch_library.rht_text(RHT.from_seed(5))
    with pytest.raises(ValueError, match="rht"):
        torch_library.rht_from_text("sixteen")


SEED_CASES = [("ufp4", {}), ("nvfp4", {"axis": 0, "pad": True}), ("mxfp4", {"rht": 7}), ("nvint4", {"sr_bits": 12})]
SEED_IDS = [f"{s}-{'-'.join(f'{k}={v}' for k, v in kw.items())}" for s, kw in SEED_CASES]


@pytest.mark.parametrize("scheme,kw", SEED_CASES, ids=SEED_IDS)
def test_opcheck_with_a_seed_tensor(scheme, kw):
    """The seed travels as a tensor argument; the codes are fp4spec.quantize(..., seed=int)'s."""
    x = torch.randn(32, 56 if kw.get("pad") else 64, generator=torch.Generator().manual_seed(2)) * 4
    axis, sr_bits, pad, rht = kw.get("axis", -1), kw.get("sr_bits", 8), kw.get("pad", False), kw.get("rht")
    args = (x, scheme, axis, "sr", None, sr_bits, pad, torch_library.rht_text(rht), "auto",
            torch_library.seed_arg(2**63 + 17, x))
    torch.library.opcheck(torch.ops.fp4spec.quantize.default, args)
    torch.library.opcheck(torch.ops.fp4spec.fake_quantize.default, args)
    q = fp4spec.quantize(x, scheme, rounding="sr", seed=2**63 + 17, axis=axis, sr_bits=sr_bits, pad=pad, rht=rht)
    data, scales, _ = torch.ops.fp4spec.quantize(*args)
    assert torch.equal(scales, q.scales.movedim(q.axis, -1).contiguous())
    assert torch.equal(data, q.storage.movedim(q.axis, -1).contiguous())
    assert torch.equal(torch.ops.fp4spec.fake_quantize(*args), fp4spec.dequantize(q))


@pytest.mark.parametrize("scheme,kw", SEED_CASES, ids=SEED_IDS)
def test_compiled_quantize_with_seed_and_rht_object_is_one_graph(scheme, kw):
    from fp4spec.rht import resolve_rht

    x = torch.randn(32, 64, generator=torch.Generator().manual_seed(3)) * 4
    rht = resolve_rht(kw.get("rht"))  # an RHT object, as fp4spec.training's recipes hold
    opts = {k: v for k, v in kw.items() if k != "rht"}

    def f(x, s):
        q = fp4spec.quantize(x, scheme, rounding="sr", seed=s, rht=rht, **opts)
        return q, fp4spec.dequantize(q)

    torch._dynamo.reset()
    seed = torch_library.seed_arg(-5, x)
    q, v = torch.compile(f, fullgraph=True, backend="aot_eager")(x, seed)
    q0, v0 = f(x, seed)
    _same(q, q0)
    _same(q, fp4spec.quantize(x, scheme, rounding="sr", seed=-5, rht=rht, **opts))
    assert torch.equal(v, v0)
