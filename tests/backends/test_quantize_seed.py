"""``fp4spec.quantize(..., rounding="sr", seed=S)`` is, on every backend, the same codes as
``rbits=fp4spec.draw_rbits(x.shape, sr_bits, S, method="philox")``; the triton backend draws
the bits inside its kernels (rowwise, unpadded, sr_bits <= 24) and the plan draws them for the
others. On a machine without a GPU the kernels run under TRITON_INTERPRET=1."""

from __future__ import annotations

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():  # before triton is imported: it reads the variable once
    os.environ.setdefault("TRITON_INTERPRET", "1")

import fp4spec  # noqa: E402
from fp4spec.api import plan as plan_module  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

HAVE_TRITON = fp4spec.backends.get_backend("triton").is_available() if plan_module._installed("triton") else False
BACKENDS = ["numpy", "torch"] + (["triton"] if HAVE_TRITON else [])
DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _x(shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * 3).to(DEV)


def _reference(x, scheme, seed, sr_bits=8, **kw):
    rb = fp4spec.draw_rbits(tuple(x.shape), sr_bits, seed, method="philox")
    return fp4spec.quantize(x.float().cpu().numpy(), scheme, rounding="sr", rbits=rb, sr_bits=sr_bits, **kw)


def _same(q, r):
    q = q.to_numpy()
    assert np.array_equal(q.codes, r.codes)
    assert np.array_equal(q.scales, r.scales)
    if r.global_scale is not None:
        assert np.float32(q.global_scale).view(np.uint32) == np.float32(r.global_scale).view(np.uint32)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("scheme", ["nvfp4", "mxfp4", "ufp4", "nvint4"])
def test_seed_is_philox_rbits(backend, scheme):
    x = _x((32, 64))
    _same(fp4spec.quantize(x, scheme, rounding="sr", seed=2**40 + 5, backend=backend), _reference(x, scheme, 2**40 + 5))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kw", [dict(axis=0), dict(pad=True), dict(sr_bits=12), dict(sr_bits=30)],
                         ids=["axis0", "pad", "sr_bits12", "sr_bits30"])
def test_seed_layouts(backend, kw):
    x = _x((40, 48) if kw.get("pad") else (32, 64), seed=1)
    if backend != "numpy" and kw.get("sr_bits", 8) > 24:
        pytest.skip("the torch and triton backends take sr_bits 1..24")
    _same(fp4spec.quantize(x, "nvfp4", rounding="sr", seed=-3, backend=backend, **kw), _reference(x, "nvfp4", -3, **kw))


@pytest.mark.skipif(not HAVE_TRITON, reason="triton is not available")
def test_seed_with_rht():
    x = _x((32, 64), seed=2)
    q = fp4spec.quantize(x, "nvfp4", rounding="sr", seed=11, rht="te", backend="triton")
    _same(q, _reference(x, "nvfp4", 11, rht="te"))


@pytest.mark.skipif(not HAVE_TRITON, reason="triton is not available")
def test_triton_draws_on_the_device(monkeypatch):
    """Rowwise and unpadded: the kernels draw; the plan never materializes the bits."""
    x = _x((32, 64), seed=3)
    ref = _reference(x, "mxfp4", 5)

    def refuse(*a, **k):
        raise AssertionError("the bits were drawn on the host")

    monkeypatch.setattr("fp4spec.philox.philox_rbits", refuse)
    _same(fp4spec.quantize(x, "mxfp4", rounding="sr", seed=5, backend="triton"), ref)


def test_plan_draws_for_backends_that_do_not():
    x = _x((16, 32))
    p = plan_module.plan_quantize(x, "nvfp4", {}, axis=-1, rounding="sr", rbits_given=True, sr_bits=8, pad=False,
                                  rht=None, backend="torch")
    assert not p.draws_seed()


@pytest.mark.parametrize("kw,match", [
    (dict(seed=3), "only used with rounding='sr'"),
    (dict(seed=1.5, rounding="sr"), "seed: expected an integer"),
    (dict(seed=2**64, rounding="sr"), "outside"),
    (dict(seed=True, rounding="sr"), "seed: expected an integer"),
    (dict(seed=3, rounding="sr", rbits=np.zeros((16, 32), np.uint32)), "not both"),
])
def test_seed_errors(kw, match):
    with pytest.raises(ValueError, match=match):
        fp4spec.quantize(np.ones((16, 32), np.float32), "nvfp4", **kw)
