"""``fp4spec.quantize(..., rounding="sr", seed=S)`` is, on every backend, the same codes as
``rbits=fp4spec.draw_rbits(x.shape, sr_bits, S, method="philox")``; the triton backend draws
the bits inside its kernels (rowwise, unpadded, sr_bits <= 24) and the plan draws them for the
others. On a machine without a GPU the kernels run under TRITON_INTERPRET=1."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


# -- tensor seeds: the Philox bits drawn by torch ops on x's device (fp4spec.backends.torch_philox) --

SEEDS = [0, 1, 11, 2**32 - 1, 2**32, 2**40 + 5, 2**63 - 1, 2**63, 2**64 - 1, -1, -3, -(2**63)]


@pytest.mark.parametrize("seed", SEEDS)
def test_torch_philox_equals_the_numpy_definition(seed):
    """Every sr_bits the torch draw takes, int and tensor seeds, a length not a multiple of 4."""
    from fp4spec.backends import torch_philox
    from fp4spec.philox import philox4x32, philox_rbits

    for sr_bits in range(1, 32):
        want = philox_rbits(seed, (5, 7), sr_bits).astype(np.int64)
        for s in (seed, torch_philox.seed_tensor(seed)):
            got = torch_philox.philox_rbits(s, (5, 7), sr_bits)
            assert got.dtype == torch_philox.rbits_dtype(sr_bits)
            assert np.array_equal(got.numpy().astype(np.int64), want), sr_bits
    counters = np.array([0, 1, 2**32 - 1, 2**32, 2**62 + 3], np.uint64)
    got = torch_philox.philox4x32(torch.from_numpy(counters.astype(np.int64)), seed)
    for g, w in zip(got, philox4x32(counters, seed)):
        assert np.array_equal(g.numpy().astype(np.uint64), w)


def test_torch_philox_known_answer_and_limbs():
    """Random123's known answer (counter 0, key 0), and the 16-bit-limb product at its extremes."""
    from fp4spec.backends import torch_philox

    words = torch_philox.philox4x32(torch.zeros(1, dtype=torch.int64), 0)
    assert [int(w) for w in words] == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    b = torch.tensor([0, 1, 0xFFFF, 0x10000, 0xFFFFFFFF, 0x89ABCDEF], dtype=torch.int64)
    for a in (0, 1, 0xD2511F53, 0xCD9E8D57, 0xFFFFFFFF):
        hi, lo = torch_philox.mulhilo(a, b)
        for h, low, v in zip(hi.tolist(), lo.tolist(), b.tolist()):
            assert (h << 32 | low) == a * v


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kw", [dict(), dict(axis=0), dict(pad=True), dict(sr_bits=12)],
                         ids=["rows", "axis0", "pad", "sr_bits12"])
@pytest.mark.parametrize("seed", [5, 2**63 + 9, -7])
def test_tensor_seed_equals_the_int_seed(backend, kw, seed):
    from fp4spec.backends.torch_philox import seed_tensor

    x = _x((40, 48) if kw.get("pad") else (32, 64), seed=4)
    q = fp4spec.quantize(x, "nvfp4", rounding="sr", seed=seed_tensor(seed, x.device), backend=backend, **kw)
    _same(q, _reference(x, "nvfp4", seed, **kw))


def test_tensor_seed_under_compile_takes_new_values_without_recompiling():
    from fp4spec.backends.torch_philox import seed_tensor

    x = _x((32, 64), seed=5)

    def f(x, s):
        return fp4spec.dequantize(fp4spec.quantize(x, "ufp4", rounding="sr", seed=s, rht="te"))

    torch._dynamo.reset()
    g = torch.compile(f, fullgraph=True, backend="aot_eager")
    with torch._dynamo.config.patch(error_on_recompile=True):
        for seed in (3, 2**63 + 1, -2):
            s = seed_tensor(seed, x.device)
            assert torch.equal(g(x, s), f(x, s))
            ref = _reference(x, "ufp4", seed, rht="te")
            assert torch.equal(g(x, s).cpu(), torch.from_numpy(fp4spec.dequantize(ref)))


@pytest.mark.parametrize("seed,x,match", [
    (torch.zeros(2, dtype=torch.int64), _x((16, 32)), "one integer element"),
    (torch.zeros((), dtype=torch.float32), _x((16, 32)), "one integer element"),
    (torch.zeros((), dtype=torch.int64), np.ones((16, 32), np.float32), "device"),
])
def test_tensor_seed_errors(seed, x, match):
    with pytest.raises(ValueError, match=match):
        fp4spec.quantize(x, "nvfp4", rounding="sr", seed=seed)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(-(2**63), 2**64 - 1), n=st.integers(0, 37), sr_bits=st.integers(1, 31))
def test_torch_philox_hypothesis(seed, n, sr_bits):
    from fp4spec.backends import torch_philox
    from fp4spec.philox import philox_rbits

    got = torch_philox.philox_rbits(torch_philox.seed_tensor(seed), (n,), sr_bits).numpy().astype(np.int64)
    assert np.array_equal(got, philox_rbits(seed, (n,), sr_bits).astype(np.int64))
