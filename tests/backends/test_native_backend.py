"""The ``native`` backend (torch._scaled_mm on Blackwell / gfx950), exercised on the CPU.

No Blackwell or MI350 is available here: the wiring QuantizedTensor -> call -> result is
checked with a stand-in ``scaled_mm`` that decodes its arguments independently (unpacks the
bytes, inverts the blocked layout) and computes the ``sm100-mxf4nvf4`` model with
fp4spec.matmul.
"""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

import fp4spec
from fp4spec.backends import get_backend, list_backends
from fp4spec.backends.base import BackendError
from fp4spec.backends.native_backend import (ACCUMULATOR, NativeBackend, apply_tensor_scale, detect,
                                             prepare_operand)
from fp4spec.layouts import blocked_shape, from_blocked, to_blocked

torch = pytest.importorskip("torch")
if not hasattr(torch, "float4_e2m1fn_x2"):
    pytest.skip("torch lacks float4_e2m1fn_x2", allow_module_level=True)

NAN_BITS = 0x7FFFFFFF


def _q(scheme, m, k, seed):
    x = np.random.default_rng(seed).standard_normal((m, k)).astype(np.float32) * 3
    return fp4spec.quantize(x, scheme)


def _bits(a):
    return np.asarray(a, np.float32).view(np.uint32)


class FakeScaledMM:
    """torch._scaled_mm's signature; computes the sm100-mxf4nvf4 model from the raw arguments."""

    def __init__(self):
        self.calls = []

    def __call__(self, a, b_t, scale_a, scale_b, *, out_dtype):
        self.calls.append((a, b_t, scale_a, scale_b, out_dtype))
        assert out_dtype == torch.float32
        assert a.dtype == b_t.dtype == torch.float4_e2m1fn_x2
        assert scale_a.dtype == scale_b.dtype
        assert b_t.t().is_contiguous() and not b_t.is_contiguous()  # B passed as b.t() (TN)
        if scale_a.dtype == torch.float8_e8m0fnu:
            scheme, block = "mxfp4", 32
        else:
            assert scale_a.dtype == torch.float8_e4m3fn
            scheme, block = "nvfp4", 16

        def operand(packed, scales):
            by = packed.view(torch.uint8).numpy()
            codes = np.empty((by.shape[0], by.shape[1] * 2), np.uint8)
            codes[:, 0::2], codes[:, 1::2] = by & 15, by >> 4
            rows, k = codes.shape
            s = from_blocked(scales.view(torch.uint8).numpy(), rows, k // block, check_padding=True)
            g = None if scheme == "mxfp4" else 1.0  # scaled_mm gets no tensor scales: they are 1 here
            return fp4spec.QuantizedTensor(codes, s, g, fp4spec.get_scheme(scheme), 1, (rows, k))

        d = fp4spec.matmul(operand(a, scale_a), operand(b_t.t(), scale_b), accumulator=ACCUMULATOR)
        return torch.from_numpy(d)


def _backend(fake=None):
    return NativeBackend(scaled_mm=fake or FakeScaledMM(), device="cpu")


# -- operand preparation ------------------------------------------------------------------------------

@pytest.mark.parametrize("scheme,block", [("mxfp4", 32), ("nvfp4", 16)])
def test_prepare_operand_packs_lo_first_along_k_and_blocks_scales(scheme, block):
    q = _q(scheme, 130, 64, 1)
    packed, scales = prepare_operand(q)
    codes = np.asarray(q.codes)
    assert packed.dtype == np.uint8 and packed.shape == (130, 32)
    assert np.array_equal(packed & 15, codes[:, 0::2]) and np.array_equal(packed >> 4, codes[:, 1::2])
    assert scales.dtype == np.uint8 and np.array_equal(scales, to_blocked(np.asarray(q.scales)))
    rows, cols = blocked_shape(130, 64 // block)
    assert (rows, cols) == (256, 4)  # M to a multiple of 128, K/block to a multiple of 4
    assert scales.shape == (rows * cols,)
    assert np.array_equal(from_blocked(scales, 130, 64 // block, check_padding=True), q.scales)


def test_prepare_operand_takes_torch_tensors_and_rejects_other_elements():
    q = _q("nvfp4", 5, 64, 2)
    p1, s1 = prepare_operand(q)
    p2, s2 = prepare_operand(q.to_torch())
    assert np.array_equal(p1, p2) and np.array_equal(s1, s2)
    with pytest.raises(BackendError, match="E2M1"):
        prepare_operand(_q("mxfp8_e4m3", 4, 64, 3))
    x = np.ones((64, 64), np.float32)
    with pytest.raises(BackendError, match="axis"):
        prepare_operand(fp4spec.quantize(x, "mxfp4", axis=0))


# -- end to end through the call -----------------------------------------------------------------------

@pytest.mark.parametrize("scheme", ["mxfp4", "nvfp4", "nvfp4_2d"])
def test_matmul_through_the_call_equals_fp4spec_matmul(scheme):
    m, n = (48, 16) if scheme == "nvfp4_2d" else (37, 19)  # 2-d: whole 16-row tiles
    qa, qb = _q(scheme, m, 128, 4), _q(scheme, n, 128, 5)
    fake = FakeScaledMM()
    d = _backend(fake).matmul(qa, qb, accumulator=ACCUMULATOR)
    ref = fp4spec.matmul(qa, qb, accumulator=ACCUMULATOR)
    assert d.dtype == np.float32 and d.shape == (m, n)
    assert np.array_equal(_bits(d), _bits(ref))
    assert len(fake.calls) == 1
    a, b_t, sa, sb, _ = fake.calls[0]
    assert a.shape == (m, 64) and b_t.shape == (64, n)
    assert sa.numel() == 128 * 8 // (2 if scheme == "mxfp4" else 1)  # (128, ceil(K/block to 4))


def test_matmul_accepts_torch_operands_and_zero_c():
    qa, qb = _q("nvfp4", 8, 64, 6), _q("nvfp4", 3, 64, 7)
    ref = fp4spec.matmul(qa, qb, accumulator=ACCUMULATOR)
    d = _backend().matmul(qa.to_torch(), qb.to_torch(), accumulator=ACCUMULATOR, c=np.zeros((8, 3), np.float32))
    assert np.array_equal(_bits(d), _bits(ref))


def test_matmul_refuses_what_the_call_cannot_do():
    qa, qb = _q("nvfp4", 4, 64, 8), _q("nvfp4", 4, 64, 9)
    be = _backend()
    with pytest.raises(BackendError, match="only 'sm100-mxf4nvf4'"):
        be.matmul(qa, qb, accumulator="exact")
    with pytest.raises(BackendError, match="initial-accumulator"):
        be.matmul(qa, qb, accumulator=ACCUMULATOR, c=np.ones((4, 4), np.float32))
    with pytest.raises(BackendError, match="initial-accumulator"):  # -0 is not +0
        be.matmul(qa, qb, accumulator=ACCUMULATOR, c=np.full((4, 4), -0.0, np.float32))
    with pytest.raises(BackendError, match="same scale format"):
        be.native_matmul(qa, _q("mxfp4", 4, 64, 10))


# -- the tensor-scale epilogue --------------------------------------------------------------------------

def _differing_epilogue_case():
    """acc, gA, gB with fp32(acc * fp32(gA * gB)) != fp32(fp32(acc * gA) * gB)."""
    rng = np.random.default_rng(11)
    for _ in range(10000):
        acc, ga, gb = rng.uniform(0.5, 2, 3).astype(np.float32)
        right = np.float32(acc * np.float32(ga * gb))
        wrong = np.float32(np.float32(acc * ga) * gb)
        if right != wrong:
            return acc, ga, gb, right
    raise AssertionError("no differing case found")


def test_tensor_scales_are_applied_once_after_the_call():
    acc, ga, gb, right = _differing_epilogue_case()
    qa = _q("nvfp4", 2, 64, 12).replace(global_scale=ga)
    qb = _q("nvfp4", 3, 64, 13).replace(global_scale=gb)
    inf_bits, nan_payload = np.float32(np.inf), np.array([0x7FC00001], np.uint32).view(np.float32)[0]
    raw = np.array([[acc, inf_bits, nan_payload], [0, -acc, acc]], np.float32)

    def fake(a, b_t, sa, sb, *, out_dtype):
        return torch.from_numpy(raw.copy())

    d = _backend(fake).native_matmul(qa, qb)
    assert d[0, 0] == right and d[1, 1] == -right and d[1, 0] == 0
    assert d[0, 1] == np.inf
    assert _bits(d)[0, 2] == 0x7FC00001  # the call's NaN keeps its bits
    # 0 * Inf made by the epilogue gets the model's NaN pattern
    qz = qa.replace(global_scale=np.float32(0))
    assert _bits(_backend(fake).native_matmul(qz, qb))[0, 1] == NAN_BITS


def test_apply_tensor_scale_without_g_is_the_identity():
    acc = np.array([[1.5, -np.inf]], np.float32)
    assert np.array_equal(apply_tensor_scale(acc, None, NAN_BITS), acc)
    out = apply_tensor_scale(acc, np.float32(2), NAN_BITS)
    assert out.dtype == np.float32 and out.tolist() == [[3.0, -np.inf]]


def test_mxfp4_has_no_epilogue_and_a_unit_tensor_scale():
    qa, qb = _q("nvfp4", 2, 64, 14), _q("nvfp4", 2, 64, 15)
    with pytest.raises(ValueError, match="global_scale: scheme 'nvfp4' has a float32 tensor scale"):
        qa.replace(global_scale=None)  # a QuantizedTensor has its scheme's tensor scale
    qa = qa.replace(global_scale=1.0)
    ref = fp4spec.matmul(qa, qb, accumulator=ACCUMULATOR)
    assert np.array_equal(_bits(_backend().matmul(qa, qb, accumulator=ACCUMULATOR)), _bits(ref))


# -- detection and availability -------------------------------------------------------------------------

def _fake_torch(*, cuda=True, hip=None, name="NVIDIA H200", cc=(9, 0), arch="gfx942:sramecc+:xnack-"):
    props = SimpleNamespace(name=name, major=cc[0], minor=cc[1], gcnArchName=arch)
    return SimpleNamespace(
        __version__="2.x", float4_e2m1fn_x2=object(), _scaled_mm=object(),
        version=SimpleNamespace(hip=hip, cuda=None if hip else "13.0"),
        cuda=SimpleNamespace(is_available=lambda: cuda, device_count=lambda: int(cuda),
                             get_device_properties=lambda i: props))


def test_detect_reasons():
    assert detect(_fake_torch(cuda=False)) == (None, fp4spec.backends.Availability.no("no CUDA/ROCm device"))
    platform, avail = detect(_fake_torch())
    assert platform is None and not avail
    assert avail.reason == ("CUDA device NVIDIA H200 has compute capability 9.0; native FP4 GEMM needs 10.0+ "
                            "(Blackwell)")
    platform, avail = detect(_fake_torch(name="NVIDIA B200", cc=(10, 0)))
    assert platform == "cuda" and avail and "NVIDIA B200" in avail.reason
    platform, avail = detect(_fake_torch(hip="7.0", name="AMD Instinct MI300X"))
    assert platform is None and avail.reason == "ROCm device gfx942 is not gfx950"
    platform, avail = detect(_fake_torch(hip="7.0", name="AMD Instinct MI355X", arch="gfx950:sramecc+:xnack-"))
    assert platform == "rocm" and avail and "MXFP4 only" in avail.reason
    old = SimpleNamespace(__version__="2.6", _scaled_mm=object())
    assert detect(old)[1].reason == "torch 2.6 lacks float4_e2m1fn_x2 / _scaled_mm"


def test_rocm_claims_nothing_bit_exact(monkeypatch):
    mi355 = _fake_torch(hip="7.0", name="AMD Instinct MI355X", arch="gfx950")
    be = NativeBackend()
    be._detected = detect(mi355)
    avail = be.is_available()
    assert not avail and "unpublished" in avail.reason and "native_matmul" in avail.reason
    caps = be.capabilities()
    assert not caps.supports("matmul") and caps.accumulators == () and caps.schemes == ()
    # MXFP4 only on ROCm
    qa = _q("nvfp4", 2, 64, 16)
    with pytest.raises(BackendError, match="not run natively on rocm"):
        be.native_matmul(qa, qa)


def test_registered_and_claims_on_nvidia():
    assert "native" in list_backends()
    be = get_backend("native")
    assert isinstance(be, NativeBackend) and be.name == "native"
    caps = be.capabilities()
    assert caps.accumulators == (ACCUMULATOR,) and caps.operations == {"quantize", "matmul"}
    assert set(caps.schemes) == {"mxfp4", "nvfp4", "nvfp4_2d"}
    q = be.quantize(np.ones((2, 32), np.float32), fp4spec.get_scheme("mxfp4"))
    assert q.equals(fp4spec.quantize(np.ones((2, 32), np.float32), "mxfp4"))


no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA/ROCm device is present")


@no_gpu
def test_unavailable_here_with_the_cpu_reason():
    avail = get_backend("native").is_available()
    assert not avail and avail.reason == "no CUDA/ROCm device"


@no_gpu
def test_conform_exits_2_with_the_reason():
    proc = subprocess.run([sys.executable, "-m", "fp4spec", "conform", "--backend", "native", "--no-progress"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "'native' is not available here: no CUDA/ROCm device" in proc.stderr
