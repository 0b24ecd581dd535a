"""``fp4spec.quantize(..., backend=)``: which backend runs, torch tensors in and out, the same bits
whichever runs; QuantizedTensor holding torch tensors; ``draw_rbits(method="philox")``.

Availability is controlled with monkeypatch (other test modules set TRITON_INTERPRET=1 for the
whole process). The only Triton runs here are tiny interpreter runs, when the interpreter is on.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():  # as test_triton_backend: before triton's kernels are first imported
    os.environ.setdefault("TRITON_INTERPRET", "1")
try:  # now, before a test below unsets TRITON_INTERPRET: triton fixes the interpreter mode when imported
    import triton  # noqa: F401
except ImportError:  # pragma: no cover
    pass

import fp4spec  # noqa: E402
from fp4spec.api import plan as api_plan  # noqa: E402
from fp4spec.backends import BackendError  # noqa: E402
from fp4spec.backends.base import Availability  # noqa: E402
from fp4spec.backends.torch_backend import TorchBackend  # noqa: E402
from fp4spec.philox import philox4x32  # noqa: E402
from fp4spec.api.plan import AUTO_ORDER, select_backend, unsupported_reason  # noqa: E402
from fp4spec.backends.torch_ops import to_numpy  # noqa: E402

from .test_torch_backend import adversarial, with_nonfinite  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


@pytest.fixture(autouse=True)
def fresh_plans():
    """The tests patch what backend selection sees (devices, installs, availability): no plan
    made before or after a test may be reused."""
    api_plan.clear_plan_cache()
    yield
    api_plan.clear_plan_cache()

#: (scheme, overrides, rounding, the backend auto picks for a CPU tensor)
AUTO_CPU = [
    ("nvfp4", {}, "rne", "torch"),
    ("nvfp4_2d", {}, "rne", "torch"),
    ("mxfp4", {}, "rne", "torch"),
    ("mxfp4", {"scale_rule": "rceil"}, "rne", "torch"),
    ("mxfp4", {"profile": "torchao"}, "rne", "torch"),
    ("ufp4", {}, "rne", "torch"),
    ("nvint4", {}, "rne", "torch"),
    ("nvfp4", {}, "sr", "torch"),
    ("nvfp4", {}, "rtz", "torch"),
    ("mxfp4", {}, "rto", "torch"),
    ("nvfp4", {"profile": "torchao"}, "rne", "numpy"),  # the TE chain only
    ("nvfp4", {"scale_rule": "4over6"}, "rne", "numpy"),
    ("mxfp8_e4m3", {}, "rne", "torch"),
    ("mxfp8_e5m2", {"scale_rule": "rceil"}, "rna", "torch"),
    ("mxfp6_e2m3", {}, "rne", "torch"),
]
AUTO_IDS = [f"{n}{''.join('-' + str(v) for v in o.values())}-{r}" for n, o, r, _ in AUTO_CPU]


def _f32_bits(a) -> np.ndarray:
    a = a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def assert_same_values(got, want):
    """float32 values bit-equal, NaN matching NaN (NaN payloads are not specified)."""
    g, w = _f32_bits(got), _f32_bits(want)
    assert g.shape == w.shape
    gn, wn = np.isnan(g.view(np.float32)), np.isnan(w.view(np.float32))
    np.testing.assert_array_equal(gn, wn)
    np.testing.assert_array_equal(g[~gn], w[~wn])


def assert_torch_qt(q, device):
    assert q.is_torch and isinstance(q.codes, torch.Tensor) and isinstance(q.scales, torch.Tensor)
    assert q.codes.dtype == torch.uint8 and q.scales.dtype == torch.uint8
    assert q.codes.device == torch.device(device) and q.scales.device == torch.device(device)
    if q.global_scale is not None:
        assert isinstance(q.global_scale, torch.Tensor) and q.global_scale.dtype == torch.float32
        assert q.global_scale.shape == () and q.global_scale.device == torch.device(device)


def finite_for(name, x):
    """HiF4 has no encoding for NaN or Inf: zero them for it."""
    return np.where(np.isfinite(x), x, np.float32(0)) if name == "hif4" else x


def _rbits(shape, seed=0, sr_bits=8):
    return fp4spec.draw_rbits(shape, sr_bits, seed)


@pytest.fixture
def no_triton(monkeypatch):
    """The triton backend is unavailable, whatever the machine and TRITON_INTERPRET."""
    from fp4spec.backends.triton import TritonBackend

    monkeypatch.setattr(TritonBackend, "is_available",
                        lambda self: Availability.no("test: no GPU here"))


@pytest.fixture
def fake_cuda_triton(monkeypatch):
    """Auto selection sees x on a CUDA device with an available triton (selection only: no kernel runs)."""
    from fp4spec.backends.triton import TritonBackend

    monkeypatch.setattr(api_plan, "_device_type", lambda x: "cuda")
    monkeypatch.setattr(api_plan, "_installed", lambda module: True)
    monkeypatch.setattr(TritonBackend, "is_available", lambda self: Availability.yes("test GPU"))


# -- numpy input: unchanged ------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["nvfp4", "mxfp4", "hif4", "mxfp8_e4m3"])
def test_numpy_input_is_the_emulator(name, fake_cuda_triton):
    x = finite_for(name, adversarial(1, rows=32, cols=128))
    q = fp4spec.quantize(x, name)
    assert q.backend == "numpy" and not q.is_torch and isinstance(q.codes, np.ndarray)
    assert not q.codes.flags.writeable and not q.scales.flags.writeable
    assert select_backend(x, name) == "numpy"  # even with a GPU backend available
    assert q.equals(fp4spec.quantize(x, name, backend="numpy"))
    ref = fp4spec.quantize(x, name, backend=fp4spec.backends.NumpyBackend())  # a Backend object: not cached
    assert q.equals(ref)
    np.testing.assert_array_equal(q.codes, ref.codes)
    assert isinstance(fp4spec.dequantize(q), np.ndarray)


def test_numpy_input_explicit_torch_gives_numpy_out():
    x = with_nonfinite(adversarial(2))
    q = fp4spec.quantize(x, "nvfp4", backend="torch")
    assert q.backend == "torch" and not q.is_torch
    assert not q.codes.flags.writeable
    assert q.equals(fp4spec.quantize(x, "nvfp4"))
    rb = _rbits(x.shape, 3)
    assert fp4spec.quantize(x, "mxfp4", axis=0, rounding="sr", rbits=rb, backend="torch").equals(
        fp4spec.quantize(x, "mxfp4", axis=0, rounding="sr", rbits=rb))


# -- torch tensors in, torch tensors out --------------------------------------------------------------

@pytest.mark.parametrize("name,over,rounding,expect", AUTO_CPU, ids=AUTO_IDS)
@pytest.mark.parametrize("axis", [-1, 0])
def test_torch_cpu_auto_bit_equal_to_numpy(name, over, rounding, expect, axis):
    x = with_nonfinite(adversarial(5, rows=32, cols=64))
    rb = _rbits(x.shape, 7) if rounding == "sr" else None
    ref = fp4spec.quantize(x, name, axis=axis, rounding=rounding, rbits=rb, **over)
    xt = torch.from_numpy(x)
    rbt = None if rb is None else torch.from_numpy(rb.astype(np.int32))
    assert select_backend(xt, name, rounding=rounding, **over) == expect
    q = fp4spec.quantize(xt, name, axis=axis, rounding=rounding, rbits=rbt, **over)
    assert q.backend == expect
    assert_torch_qt(q, "cpu")
    assert q.axis == ref.axis and q.shape == ref.shape and tuple(q.codes.shape) == ref.codes.shape
    assert q.equals(ref) and ref.equals(q)
    np.testing.assert_array_equal(q.codes.numpy(), ref.codes)
    np.testing.assert_array_equal(q.scales.numpy(), ref.scales)
    assert_same_values(fp4spec.dequantize(q), fp4spec.dequantize(ref))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
@pytest.mark.parametrize("backend", ["auto", "torch", "numpy"])
def test_torch_dtypes(dtype, backend):
    xt = torch.from_numpy(adversarial(3)).to(dtype)
    ref = fp4spec.quantize(to_numpy(xt), "nvfp4")  # bf16 as ml_dtypes: exact
    q = fp4spec.quantize(xt, "nvfp4", backend=backend)
    assert q.backend == ("torch" if backend == "auto" else backend)
    assert_torch_qt(q, "cpu")
    assert q.equals(ref)


@pytest.mark.parametrize("backend", ["torch", "numpy"])
@pytest.mark.parametrize("name", ["nvfp4", "nvfp4_2d", "mxfp4"])
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_torch_pad_and_axes(backend, name, axis):
    x = adversarial(8, rows=32, cols=64)[:, :60].reshape(2, 30, 32)[:, :, :30].copy()
    rb = _rbits(x.shape, axis)
    for rounding, r in (("rne", None), ("sr", rb)):
        ref = fp4spec.quantize(x, name, axis=axis, pad=True, rounding=rounding, rbits=r)
        q = fp4spec.quantize(torch.from_numpy(x), name, axis=axis, pad=True, rounding=rounding,
                             rbits=None if r is None else torch.from_numpy(r.astype(np.int64)), backend=backend)
        assert q.backend == backend and q.padded == ref.padded
        assert q.equals(ref)
        out = fp4spec.dequantize(q)
        assert isinstance(out, torch.Tensor) and tuple(out.shape) == x.shape
        assert_same_values(out, fp4spec.dequantize(ref))


def test_torch_rbits_broadcast_and_numpy_rbits():
    x = adversarial(4)
    rb = _rbits((1, x.shape[1]), 2)
    ref = fp4spec.quantize(x, "nvfp4", rounding="sr", rbits=rb)
    xt = torch.from_numpy(x)
    assert fp4spec.quantize(xt, "nvfp4", rounding="sr", rbits=torch.from_numpy(rb.astype(np.int16))).equals(ref)
    assert fp4spec.quantize(xt, "nvfp4", rounding="sr", rbits=rb).equals(ref)  # numpy bits with a torch x


def _message(fn):
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the test compares the two paths' errors
        return type(exc), str(exc)
    raise AssertionError("no error")


@pytest.mark.parametrize("backend", ["auto", "torch"])
@pytest.mark.parametrize("case", ["length", "tiles", "axis", "0-d", "dtype", "rbits-missing", "rbits-range",
                                  "rbits-rne", "rbits-shape", "rounding", "pad", "sr_bits"])
def test_torch_input_errors_match_numpy(backend, case):
    """The torch path checks x, axis, rounding, rbits and pad as prepare_input does, with the same messages."""
    x = adversarial(0)
    kw, name = {}, "nvfp4"
    if case == "length":
        x = x[:, :40]
    elif case == "tiles":
        x, name = x[:20], "nvfp4_2d"
    elif case == "axis":
        kw = {"axis": 2}
    elif case == "0-d":
        x = np.float32(1.0).reshape(())
    elif case == "dtype":
        x = x.astype(np.int32)
    elif case == "rbits-missing":
        kw = {"rounding": "sr"}
    elif case == "rbits-range":
        kw = {"rounding": "sr", "rbits": np.full(x.shape, 256, np.int64)}
    elif case == "rbits-rne":
        kw = {"rbits": np.zeros(x.shape, np.int64)}
    elif case == "rbits-shape":
        kw = {"rounding": "sr", "rbits": np.zeros((3, 1), np.int64)}
    elif case == "rounding":
        kw = {"rounding": "nearest"}
    elif case == "pad":
        kw = {"pad": 1}
    elif case == "sr_bits":
        kw = {"rounding": "sr", "rbits": np.zeros(x.shape, np.int64), "sr_bits": 0}
    want = _message(lambda: fp4spec.quantize(x, name, **kw))
    kt = dict(kw)
    if isinstance(kt.get("rbits"), np.ndarray):
        kt["rbits"] = torch.from_numpy(kt["rbits"])
    got = _message(lambda: fp4spec.quantize(torch.from_numpy(np.array(x)), name, backend=backend, **kt))
    if case == "dtype":  # torch names its own dtypes
        assert got == (TypeError, "x: dtype torch.int32 is not supported; pass float16, bfloat16, float32 or "
                                  "float64 values")
        assert want[1].startswith("x: dtype int32 is not supported")
    else:
        assert got == want


def test_torch_rbits_dtype_error():
    x = torch.from_numpy(adversarial(0))
    with pytest.raises(ValueError, match="rbits: dtype torch.float32 is not an integer dtype"):
        fp4spec.quantize(x, "nvfp4", rounding="sr", rbits=torch.zeros(x.shape))


# -- explicit backends ------------------------------------------------------------------------------

def test_explicit_numpy_with_torch_input():
    x = with_nonfinite(adversarial(6))
    q = fp4spec.quantize(torch.from_numpy(x), "mxfp4", backend="numpy")
    assert q.backend == "numpy"
    assert_torch_qt(q, "cpu")
    assert q.equals(fp4spec.quantize(x, "mxfp4"))


def test_explicit_triton_unavailable_raises(no_triton):
    x = adversarial(0)
    for xin in (x, torch.from_numpy(x)):
        with pytest.raises(BackendError, match=r"backend: 'triton' cannot quantize nvfp4 .*test: no GPU here"):
            fp4spec.quantize(xin, "nvfp4", backend="triton")


def test_explicit_triton_without_interpreter_on_cpu(monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("a GPU makes triton available")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    x = torch.from_numpy(adversarial(0))
    with pytest.raises(BackendError, match=r"'triton'.*TRITON_INTERPRET=1"):
        fp4spec.quantize(x, "nvfp4", backend="triton")
    with pytest.raises(BackendError, match=r"'triton'.*TRITON_INTERPRET=1 is not set"):
        fp4spec.quantize(x.numpy(), "nvfp4", backend="triton")


def test_explicit_triton_not_installed(monkeypatch):
    monkeypatch.setattr(api_plan, "_installed", lambda module: module != "triton")
    with pytest.raises(BackendError, match="'triton'.*triton is not installed"):
        fp4spec.quantize(torch.from_numpy(adversarial(0)), "nvfp4", backend="triton")


def test_explicit_triton_unsupported_request(monkeypatch):
    from fp4spec.backends.triton import TritonBackend

    monkeypatch.setattr(TritonBackend, "is_available", lambda self: Availability.yes("test"))
    monkeypatch.setattr(api_plan, "_device_type", lambda x: "cuda")
    x = torch.from_numpy(adversarial(0))
    with pytest.raises(BackendError, match=r"'triton' cannot quantize nvfp4 with rounding='rtz'"):
        fp4spec.quantize(x, "nvfp4", rounding="rtz", backend="triton")
    with pytest.raises(BackendError, match=r"'triton'.*sr_bits"):
        fp4spec.quantize(x, "nvfp4", rounding="sr", rbits=np.zeros(x.shape, np.int64), sr_bits=25, backend="triton")
    with pytest.raises(BackendError, match=r"'triton'.*element_max"):
        fp4spec.quantize(x, "nvfp4", element_max=4.0, backend="triton")


def test_explicit_torch_unsupported_request():
    x = torch.from_numpy(adversarial(0))
    with pytest.raises(BackendError, match=r"backend: 'torch' cannot quantize hif4 with rounding='rtz': hif4: "
                                           r"rounding 'rtz'"):
        fp4spec.quantize(x, "hif4", rounding="rtz", backend="torch")
    with pytest.raises(BackendError, match=r"'torch' cannot quantize nvfp4 .*element 'e4m3'"):
        fp4spec.quantize(x, "nvfp4", element="e4m3", backend="torch")
    with pytest.raises(BackendError, match=r"'torch'.*TransformerEngine"):
        fp4spec.quantize(x.numpy(), "nvfp4", profile="torchao", backend="torch")


def test_explicit_torch_unavailable(monkeypatch):
    monkeypatch.setattr(TorchBackend, "is_available", lambda self: Availability.no("test: torch broken"))
    with pytest.raises(BackendError, match="'torch'.*test: torch broken"):
        fp4spec.quantize(torch.from_numpy(adversarial(0)), "nvfp4", backend="torch")
    # auto moves on to numpy
    q = fp4spec.quantize(torch.from_numpy(adversarial(0)), "nvfp4")
    assert q.backend == "numpy" and q.is_torch


@pytest.mark.parametrize("bad", ["cuda", "Torch", "", 3])
def test_bad_backend_names(bad):
    with pytest.raises(BackendError, match="backend: "):
        fp4spec.quantize(adversarial(0), "nvfp4", backend=bad)
    if isinstance(bad, str):
        with pytest.raises(BackendError, match="'auto', 'numpy', 'torch', 'triton'"):
            fp4spec.quantize(torch.from_numpy(adversarial(0)), "nvfp4", backend=bad)


def test_interface_backend_by_object_and_registered_name():
    """Other backends run through the Backend interface (numpy, blocked axis last); results come
    back in x's layout, as torch tensors for a torch x, with the backend's name recorded."""
    from fp4spec.backends import NumpyBackend, register_backend
    from fp4spec.backends.registry import _REGISTERED

    class Echo(NumpyBackend):
        name = "echo"

    x = with_nonfinite(adversarial(9))
    ref = fp4spec.quantize(x, "ufp4", axis=0)
    q = fp4spec.quantize(x, "ufp4", axis=0, backend=Echo())
    assert q.backend == "echo" and q.equals(ref) and not q.is_torch
    register_backend("echo-test", Echo)
    try:
        q = fp4spec.quantize(torch.from_numpy(x), "ufp4", axis=0, backend="echo-test")
    finally:
        _REGISTERED.pop("echo-test", None)
    assert q.backend == "echo" and q.is_torch and q.equals(ref)


def test_interface_backend_refusal_from_capabilities():
    from fp4spec.backends import Backend, Capabilities

    class OnlyMx(Backend):
        name = "only-mx"

        def capabilities(self):
            return Capabilities(schemes=("mxfp4",), rounding=("rne",))

        def quantize(self, x, scheme, *, rounding="rne", rbits=None, sr_bits=8):
            raise AssertionError("not called")

    with pytest.raises(BackendError, match=r"'only-mx' cannot quantize nvfp4.*capabilities"):
        fp4spec.quantize(adversarial(0), "nvfp4", backend=OnlyMx())
    with pytest.raises(BackendError, match=r"'only-mx' cannot quantize mxfp4 with rounding='rtz'"):
        fp4spec.quantize(adversarial(0), "mxfp4", rounding="rtz", backend=OnlyMx())


# -- auto selection order --------------------------------------------------------------------------

def test_auto_order_is_documented():
    assert AUTO_ORDER == ("triton", "torch", "numpy")
    assert "triton, torch, numpy" in select_backend.__doc__.replace("\n    ", " ")


def test_auto_prefers_triton_on_cuda(fake_cuda_triton):
    xt = torch.from_numpy(adversarial(0))
    assert select_backend(xt, "nvfp4") == "triton"
    assert select_backend(xt, "mxfp4", scale_rule="rceil", rounding="sr") == "triton"
    # triton refuses, torch runs it
    assert select_backend(xt, "nvfp4", element_max=4.0) == "torch"
    assert "element_max" in unsupported_reason("triton", xt, fp4spec.get_scheme("nvfp4", element_max=4.0),
                                               auto=True)
    assert select_backend(xt, "nvfp4", rounding="rtz") == "torch"
    assert select_backend(xt, "hif4") == "triton"
    assert select_backend(xt, "hif4", rht="te") == "triton"  # the unfused butterfly
    # both refuse: numpy
    assert select_backend(xt, "nvfp4", rounding="sr", sr_bits=25) == "numpy"
    assert select_backend(xt, "nvfp4", profile="torchao") == "numpy"
    assert select_backend(xt[:0], "nvfp4") == "torch"  # the kernels need a block


def test_auto_runs_if4_on_cpu_tensors_with_the_emulator():
    """IF4 of a CPU tensor: the emulator (faster there than the torch backend), bit-equal."""
    x = np.random.default_rng(3).standard_normal((32, 64)).astype(np.float32)
    xt = torch.from_numpy(x)
    assert select_backend(xt, "if4") == "numpy"
    assert "emulator" in unsupported_reason("torch", xt, "if4", auto=True)
    assert unsupported_reason("torch", xt, "if4") == ""  # explicitly named: allowed
    q = fp4spec.quantize(xt, "if4")
    assert q.backend == "numpy" and q.is_torch
    assert q.equals(fp4spec.quantize(xt, "if4", backend="torch")) and q.equals(fp4spec.quantize(x, "if4"))


def test_auto_skips_unavailable_triton(fake_cuda_triton, no_triton):
    assert select_backend(torch.from_numpy(adversarial(0)), "nvfp4") == "torch"


def test_auto_never_picks_the_interpreter(monkeypatch):
    """On the CPU auto takes torch even with TRITON_INTERPRET=1 and an available triton."""
    from fp4spec.backends.triton import TritonBackend

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(TritonBackend, "is_available", lambda self: Availability.yes("test"))
    xt = torch.from_numpy(adversarial(0))
    assert select_backend(xt, "nvfp4") == "torch"
    assert "CUDA tensors only" in unsupported_reason("triton", xt, "nvfp4", auto=True)
    assert unsupported_reason("triton", xt, "nvfp4") == ""  # explicitly named: allowed


def test_auto_falls_back_to_numpy_when_torch_cannot(monkeypatch):
    monkeypatch.setattr(TorchBackend, "is_available", lambda self: Availability.no("test"))
    xt = torch.from_numpy(with_nonfinite(adversarial(1)))
    assert select_backend(xt, "nvfp4") == "numpy"
    q = fp4spec.quantize(xt, "nvfp4_2d")
    assert q.backend == "numpy"
    assert_torch_qt(q, "cpu")
    assert q.equals(fp4spec.quantize(xt.numpy(), "nvfp4_2d"))


def test_explicit_backend_is_never_replaced(fake_cuda_triton):
    """Named backends run or raise: auto's preferences do not apply."""
    xt = torch.from_numpy(adversarial(0))
    assert select_backend(xt, "nvfp4", backend="torch") == "torch"
    assert select_backend(xt, "nvfp4", backend="numpy") == "numpy"
    with pytest.raises(BackendError, match="'torch'"):
        select_backend(xt, "nvfp4", profile="torchao", backend="torch")


# -- QuantizedTensor holding torch tensors -----------------------------------------------------------

DEQ_SCHEMES = [("nvfp4", {}), ("nvfp4", {"profile": "torchao"}), ("nvfp4_2d", {}), ("mxfp4", {}),
               ("mxfp4", {"profile": "torchao"}), ("ufp4", {}), ("nvint4", {}), ("mxfp6_e2m3", {}),
               ("mxfp6_e3m2", {}), ("mxfp8_e4m3", {}), ("mxfp8_e5m2", {}), ("hif4", {})]
DEQ_IDS = [n + "".join(f"-{v}" for v in o.values()) for n, o in DEQ_SCHEMES]


@pytest.mark.parametrize("name,over", DEQ_SCHEMES, ids=DEQ_IDS)
@pytest.mark.parametrize("axis", [-1, 0])
def test_torch_quantized_tensor_dequantize(name, over, axis):
    x = finite_for(name, with_nonfinite(adversarial(11, rows=64, cols=128)))
    ref = fp4spec.quantize(x, name, axis=axis, **over)
    qt = ref.to_torch("cpu")
    assert_torch_qt(qt, "cpu")
    assert qt.equals(ref) and qt.backend == ref.backend
    out = fp4spec.dequantize(qt)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32 and tuple(out.shape) == x.shape
    assert out.is_contiguous()
    assert_same_values(out, fp4spec.dequantize(ref))
    assert_same_values(fp4spec.dequantize(qt), fp4spec.dequantize(ref))


def test_torch_dequantize_crops_padding():
    x = adversarial(12)[:30, :50]
    ref = fp4spec.quantize(x, "nvfp4_2d", pad=True)
    q = fp4spec.quantize(torch.from_numpy(np.ascontiguousarray(x)), "nvfp4_2d", pad=True)
    assert q.padded and tuple(q.codes.shape) == (32, 64)
    assert tuple(fp4spec.dequantize(q).shape) == (30, 50)
    assert_same_values(fp4spec.dequantize(q), fp4spec.dequantize(ref))


PACK_CASES = [(n, a, o) for n in ("nvfp4", "mxfp4", "hif4") for a in (-1, 0) for o in ("lo_first", "hi_first")
              if not (n == "hif4" and a == 0)] + [("mxfp8_e4m3", -1, "lo_first"), ("mxfp8_e4m3", 0, "lo_first")]


@pytest.mark.parametrize("name,axis,order", PACK_CASES)
def test_torch_pack(name, axis, order):
    x = finite_for(name, adversarial(13, rows=64, cols=128))
    ref = fp4spec.quantize(x, name, axis=axis)
    qt = ref.to_torch()
    got = qt.pack(order=order)
    want = ref.pack(order=order)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.uint8 and got.is_contiguous()
    assert tuple(got.shape) == want.shape
    np.testing.assert_array_equal(got.numpy(), want)


def test_torch_pack_golden_byte_and_errors():
    sch = fp4spec.get_scheme("mxfp4")
    codes = torch.zeros((1, 32), dtype=torch.uint8)
    codes[0, 0], codes[0, 1] = 0x1, 0x7
    q = fp4spec.QuantizedTensor(codes, torch.full((1, 1), 127, dtype=torch.uint8), None, sch, 1, (1, 32))
    assert int(q.pack()[0, 0]) == 0x71 and int(q.pack(order="hi_first")[0, 0]) == 0x17
    with pytest.raises(ValueError, match="order: 'middle' is not one of"):
        q.pack(order="middle")
    with pytest.raises(ValueError, match=r"codes: e2m1 codes are 4-bit \(0..15\); found 23"):
        fp4spec.QuantizedTensor(codes + 16, q.scales, None, sch, 1, (1, 32))  # checked on construction
    six = fp4spec.quantize(torch.from_numpy(adversarial(0)), "mxfp6_e2m3")
    with pytest.raises(NotImplementedError, match="6-bit"):
        six.pack()


def test_to_numpy_and_to_torch_round_trip():
    x = with_nonfinite(adversarial(14))
    q = fp4spec.quantize(torch.from_numpy(x), "nvfp4", axis=0)
    n = q.to_numpy()
    assert not n.is_torch and n.backend == "torch"
    assert isinstance(n.codes, np.ndarray) and not n.codes.flags.writeable and not n.scales.flags.writeable
    assert isinstance(n.global_scale, np.float32)
    assert n.global_scale.view(np.uint32) == _f32_bits(q.global_scale)
    assert n.equals(fp4spec.quantize(x, "nvfp4", axis=0))
    assert n.to_numpy() is n
    back = n.to_torch()
    assert back.is_torch and back.equals(q) and back.backend == "torch"
    h = fp4spec.quantize(finite_for("hif4", x[:, :64]), "hif4")
    ht = h.to_torch()
    assert isinstance(ht.e1_8, torch.Tensor) and ht.equals(h) and ht.to_numpy().equals(h)


def test_equals_compares_bits_across_numpy_and_torch():
    x = adversarial(15)
    ref = fp4spec.quantize(x, "nvfp4")
    q = fp4spec.quantize(torch.from_numpy(x), "nvfp4")
    assert q.equals(ref) and ref.equals(q) and q.equals(q.to_numpy().to_torch())
    codes = q.codes.clone()
    codes[3, 5] ^= 1
    assert not fp4spec.QuantizedTensor(codes, q.scales, q.global_scale, q.scheme, q.axis, q.shape).equals(ref)
    g = torch.tensor(np.nextafter(ref.global_scale, np.float32(np.inf)))
    assert not fp4spec.QuantizedTensor(q.codes, q.scales, g, q.scheme, q.axis, q.shape).equals(ref)
    assert not q.equals(fp4spec.quantize(x, "nvfp4", axis=0))
    assert not q.equals("not a tensor")


def test_quantized_tensor_torch_field_checks():
    q = fp4spec.quantize(adversarial(0), "nvfp4")
    with pytest.raises(TypeError, match="codes, scales: all numpy arrays or all torch tensors, not a mix"):
        fp4spec.QuantizedTensor(torch.from_numpy(q.codes.copy()), q.scales, q.global_scale, q.scheme, 1, q.shape)
    with pytest.raises(ValueError, match="global_scale: expected one value"):
        fp4spec.QuantizedTensor(torch.from_numpy(q.codes.copy()), torch.from_numpy(q.scales.copy()),
                                torch.ones(2), q.scheme, 1, q.shape)
    with pytest.raises(ValueError, match="backend: expected a backend name"):
        fp4spec.QuantizedTensor(q.codes, q.scales, q.global_scale, q.scheme, 1, q.shape, backend="")
    t = fp4spec.QuantizedTensor(torch.from_numpy(q.codes.copy()), torch.from_numpy(q.scales.copy()),
                                float(q.global_scale), q.scheme, 1, q.shape, backend="torch")
    assert isinstance(t.global_scale, torch.Tensor) and t.equals(q)
    r = repr(t)
    assert r.startswith("QuantizedTensor(scheme='nvfp4', shape=(32, 64), axis=1, codes=(32, 64), scales=(32, 4)")
    assert "backend='torch'" in r and "device=cpu" in r
    assert f"global_scale={q.global_scale}" in r
    assert repr(q).endswith(f"global_scale={q.global_scale})")  # the emulator's repr is unchanged
    assert repr(q.to_torch()).endswith(f"global_scale={q.global_scale}, device=cpu)")


# -- draw_rbits(method="philox") ---------------------------------------------------------------------

KAT = [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]  # Random123 Philox4x32-10, counter 0, key 0


def test_philox_known_answer():
    assert [int(w[0]) for w in philox4x32(np.zeros(1, np.uint64), 0)] == KAT
    np.testing.assert_array_equal(fp4spec.draw_rbits(4, 32, 0, method="philox"), np.array(KAT, np.uint32))
    np.testing.assert_array_equal(fp4spec.draw_rbits((2, 2), 8, 0, method="philox").reshape(-1),
                                  np.array([w >> 24 for w in KAT], np.uint32))


def test_philox_layout_and_range():
    a = fp4spec.draw_rbits((3, 5, 7), 24, 123456789, method="philox")
    assert a.dtype == np.uint32 and a.shape == (3, 5, 7) and int(a.max()) < (1 << 24)
    flat = fp4spec.draw_rbits(105, 24, 123456789, method="philox")
    np.testing.assert_array_equal(a.reshape(-1), flat)  # flat row-major order, whatever the shape
    words = np.stack(philox4x32(np.arange(27, dtype=np.uint64), 123456789), axis=-1).reshape(-1)[:105]
    np.testing.assert_array_equal(flat, (words >> np.uint64(8)).astype(np.uint32))
    assert fp4spec.draw_rbits((0, 4), 8, 1, method="philox").shape == (0, 4)
    # the seed is taken mod 2^64, as Triton's uint64 seed
    np.testing.assert_array_equal(fp4spec.draw_rbits(9, 8, -1, method="philox"),
                                  fp4spec.draw_rbits(9, 8, (1 << 64) - 1, method="philox"))
    assert not np.array_equal(fp4spec.draw_rbits(64, 8, 1, method="philox"),
                              fp4spec.draw_rbits(64, 8, 1 << 32, method="philox"))  # the key's high word counts


def test_draw_rbits_numpy_method_unchanged():
    want = np.random.default_rng(5).integers(0, 256, size=(4, 6), dtype=np.uint64).astype(np.uint32)
    np.testing.assert_array_equal(fp4spec.draw_rbits((4, 6), 8, 5), want)
    np.testing.assert_array_equal(fp4spec.draw_rbits((4, 6), 8, 5, method="numpy"), want)


@pytest.mark.parametrize("kw,match", [
    ({"method": "mt19937", "seed": 1}, "method: 'mt19937' is not one of 'numpy', 'philox'"),
    ({"method": "philox"}, "seed: method='philox' needs an integer seed"),
    ({"method": "philox", "seed": 1 << 64}, r"seed: 18446744073709551616 is outside \[-2\*\*63, 2\*\*64\)"),
    ({"method": "philox", "seed": 1.5}, "seed: expected an integer"),
    ({"method": "philox", "seed": True}, "seed: expected an integer"),
    ({"method": "philox", "seed": 1, "sr_bits": 33}, r"sr_bits: 33 is not an integer in \[1, 32\]"),
])
def test_draw_rbits_errors(kw, match):
    sr_bits = kw.pop("sr_bits", 8)
    with pytest.raises(ValueError, match=match):
        fp4spec.draw_rbits((2, 3), sr_bits, **kw)


def test_philox_module_needs_no_torch_or_triton():
    import subprocess
    import sys

    code = ("import sys; sys.modules['torch'] = None; sys.modules['triton'] = None\n"
            "import fp4spec\n"
            "print(fp4spec.draw_rbits(4, 32, 0, method='philox').tolist())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(KAT)


def _interpreter_or_gpu():
    pytest.importorskip("triton")
    from fp4spec.backends.triton import availability

    if not availability():
        pytest.skip(availability().reason)
    return "cuda" if torch.cuda.is_available() else "cpu"


def test_philox_equals_triton_implementation():
    dev = _interpreter_or_gpu()
    from fp4spec.backends.triton import philox_rbits, quantize_packed, unpack_lo_first

    for sr_bits in (1, 8, 24):
        np.testing.assert_array_equal(philox_rbits(77, (5, 9), sr_bits),
                                      fp4spec.draw_rbits((5, 9), sr_bits, 77, method="philox"))
    # the kernels' own draws: a tiny rowwise SR quantization with a seed vs the emulator with replayed bits
    x = with_nonfinite(adversarial(16, rows=16, cols=64))
    for sr_bits, seed in ((8, 2027), (24, 0x1234567890AB)):
        rb = fp4spec.draw_rbits(x.shape, sr_bits, seed, method="philox")
        ref = fp4spec.quantize(x, "nvfp4", rounding="sr", rbits=rb, sr_bits=sr_bits)
        out = quantize_packed(torch.from_numpy(x).to(dev), "nvfp4", rounding="sr", seed=seed, sr_bits=sr_bits)
        np.testing.assert_array_equal(unpack_lo_first(out["packed"]).cpu().numpy(), ref.codes)
        np.testing.assert_array_equal(out["scales"].cpu().numpy(), ref.scales)


def test_explicit_triton_runs_and_records(monkeypatch):
    """backend='triton' on a small tensor (the interpreter on a CPU machine): torch out, the emulator's bits."""
    dev = _interpreter_or_gpu()
    x = with_nonfinite(adversarial(17, rows=32, cols=64))
    xt = torch.from_numpy(x).to(dev)
    for name, axis in (("nvfp4", -1), ("mxfp4", 0)):
        ref = fp4spec.quantize(x, name, axis=axis)
        q = fp4spec.quantize(xt, name, axis=axis, backend="triton")
        assert q.backend == "triton"
        assert_torch_qt(q, dev)
        assert q.equals(ref)
        assert_same_values(fp4spec.dequantize(q), fp4spec.dequantize(ref))
        np.testing.assert_array_equal(q.pack().cpu().numpy(), ref.pack())


# -- rht= ------------------------------------------------------------------------------------------------

def test_rht_selection_follows_capabilities(monkeypatch):
    from fp4spec.rht import RHT

    xt = torch.from_numpy(adversarial(0))
    assert select_backend(xt, "nvfp4", rht="te") == "torch"
    f64 = RHT.te(arith="float64")
    assert select_backend(xt, "nvfp4", rht=f64) == "numpy"  # the torch backend claims fwht-fp32 only
    assert "rht 16/float64" in unsupported_reason("torch", xt, "nvfp4", rht=f64)
    with pytest.raises(BackendError, match=r"'torch' cannot quantize nvfp4 with rounding='rne' and "
                                           r"rht=16/float64: rht 16/float64 with bfloat16 output is not"):
        fp4spec.quantize(xt, "nvfp4", rht=f64, backend="torch")
    q = fp4spec.quantize(xt, "nvfp4", rht=f64)
    assert q.backend == "numpy" and q.rht == f64 and q.is_torch
    assert q.equals(fp4spec.quantize(xt.numpy(), "nvfp4", rht=f64))
    with pytest.raises(ValueError, match="rht: 'TE' is not None"):
        select_backend(xt, "nvfp4", rht="TE")


def test_rht_auto_on_cuda_needs_the_triton_claim(fake_cuda_triton):
    from fp4spec.backends.triton import TritonBackend

    xt = torch.from_numpy(adversarial(0))
    claims = TritonBackend().capabilities().supports_rht("te")
    assert select_backend(xt, "nvfp4", rht="te") == ("triton" if claims else "torch")
    assert select_backend(xt, "nvfp4") == "triton"


@pytest.mark.parametrize("axis", [-1, 0])
@pytest.mark.parametrize("rounding", ["rne", "sr"])
def test_rht_torch_tensors_bit_equal_to_numpy(axis, rounding):
    x = with_nonfinite(adversarial(3))
    rb = _rbits(x.shape, 2) if rounding == "sr" else None
    ref = fp4spec.quantize(x, "nvfp4", axis=axis, rounding=rounding, rbits=rb, rht=7)
    q = fp4spec.quantize(torch.from_numpy(x), "nvfp4", axis=axis, rounding=rounding,
                         rbits=None if rb is None else torch.from_numpy(rb.astype(np.int64)), rht=7)
    assert q.backend == "torch" and q.is_torch and q.rht == ref.rht and q.equals(ref)
    assert_same_values(fp4spec.dequantize(q), fp4spec.dequantize(ref))


def test_rht_torch_pad():
    from fp4spec.rht import RHT

    x = adversarial(5)[:, :48]
    ref = fp4spec.quantize(x, "mxfp4", pad=True, rht="te")
    q = fp4spec.quantize(torch.from_numpy(x), "mxfp4", pad=True, rht="te")
    assert q.backend == "torch" and q.equals(ref)
    with pytest.raises(ValueError, match="not a multiple of the RHT size 32"):
        fp4spec.quantize(torch.from_numpy(x), "nvfp4", rht=RHT.from_seed(0, 32))
