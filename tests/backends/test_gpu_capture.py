"""The public calls on CUDA inside CUDA graphs and compiled graphs (``pytest -m gpu``; skipped
without CUDA): ``fp4spec.quantize`` / ``dequantize`` captured by ``torch.cuda.graph`` replay to
the same bits as eager calls on new values, and a function that quantizes compiles with
inductor to one graph (``fullgraph=True``), also under ``mode="reduce-overhead"`` (CUDA graphs)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)

import fp4spec  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.filterwarnings("ignore::RuntimeWarning")]

CASES = [
    ("nvfp4", {}),
    ("mxfp4", {}),
    ("nvfp4", {"axis": 0}),
    ("nvfp4", {"rounding": "sr", "seed": 77}),
    ("mxfp4", {"rht": "te"}),
    ("ufp4", {}),
]
IDS = [f"{s}-{'-'.join(f'{k}={v}' for k, v in kw.items())}" for s, kw in CASES]


def _x(seed, shape=(256, 512)):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(shape, generator=g, device="cuda") * 5).to(torch.bfloat16)


@pytest.mark.parametrize("scheme,kw", CASES, ids=IDS)
def test_cuda_graph_replay(scheme, kw):
    x = _x(0)
    for _ in range(2):  # warm: compiles, cached plans and tables
        fp4spec.dequantize(fp4spec.quantize(x, scheme, **kw))
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        q = fp4spec.quantize(x, scheme, **kw)
        v = fp4spec.dequantize(q)
    for seed in (1, 2):
        x.copy_(_x(seed))
        graph.replay()
        ref = fp4spec.quantize(x, scheme, **kw)
        assert q.equals(ref)
        assert torch.equal(v, fp4spec.dequantize(ref))


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_inductor_one_graph(mode):
    def layer(x, w):
        qx, qw = fp4spec.quantize(x, "nvfp4"), fp4spec.quantize(w, "nvfp4")
        return fp4spec.dequantize(qx).to(torch.bfloat16) @ fp4spec.dequantize(qw).to(torch.bfloat16).T

    torch._dynamo.reset()
    f = torch.compile(layer, fullgraph=True, mode=mode)
    for seed in (0, 1, 2):
        x, w = _x(seed), _x(seed + 10, (128, 512))
        assert torch.equal(f(x, w), layer(x, w))
