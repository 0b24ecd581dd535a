"""Fused RHT + quantize (triton kernels) equals the numpy emulator's composition bit for bit:
``fp4spec.quantize(RHT.apply(x, axis), ...)`` -- codes, scale codes, tensor scale -- for every
scheme the kernels claim, RNE and SR (given bits and Philox), rowwise and columnwise, bf16 and
float32 transform output, on blocks chosen to break a wrong transform (wide spans where the
float32 butterfly differs from float64, ties after the transform, bf16 ties, NaN/Inf, zeros,
-0.0, subnormals, overflow inside the butterfly). On a machine without a GPU the kernels
run under TRITON_INTERPRET=1 on small shapes (the columnwise v3 kernel without RHT is tested
in test_triton_backend.py)."""

from __future__ import annotations

import inspect
import os

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():  # before triton is imported: it reads the variable once
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")

import fp4spec  # noqa: E402
from dataclasses import replace  # noqa: E402

from fp4spec.backends.triton import DEFAULT_CONFIG, philox_rbits, quantize_packed  # noqa: E402
from fp4spec.backends.triton.capability import rht_params  # noqa: E402
from fp4spec.backends.triton.launch import rht_global_amax  # noqa: E402
from fp4spec.layouts import to_blocked  # noqa: E402
from fp4spec.packing import pack  # noqa: E402
from fp4spec.rht import RHT  # noqa: E402

from .test_torch_backend import SCHEMES  # noqa: E402
from . import test_triton_backend as _triton_tests  # noqa: E402

backend = _triton_tests.backend  # the shared fixture: a TritonBackend, skipped where unavailable

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

FUSED = [s for s in SCHEMES if s[0] != "nvfp4_2d"]
FUSED_IDS = [n + "".join(f"-{v}" for v in o.values()) for n, o in FUSED]

TE = RHT.te()  # bf16 output
SEEDED32 = RHT.from_seed(7, out_dtype="float32")


def rht_adversarial(rht: RHT, seed: int, rows: int = 32, cols: int = 64) -> np.ndarray:
    """float32 (rows, cols): rows of 16 along the last axis that stress the transform."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    e = rng.integers(-130, 110, size=(rows, cols // 16))
    x *= np.repeat(np.ldexp(np.float32(1), e).astype(np.float32), 16, axis=1)
    n16 = cols // 16

    def put(r, j, v):
        x[r % rows, 16 * (j % n16):16 * (j % n16) + 16] = np.asarray(v, np.float32)

    # wide spans: the butterfly drops bits a later stage would keep (fwht-fp32 != float64)
    for r in range(0, rows, 3):
        put(r, r + 1, rng.choice([-1, 1], 16) * np.ldexp(1.0 + rng.random(16), rng.integers(-30, 30, 16)))
    put(1, 0, [2.0 ** 24, 1, -(2.0 ** 24)] + [0] * 13)  # the documented example (y_0 = 0, not 0.25)
    # ties after the transform: y chosen on E2M1/INT4 midpoints (block amax 6 * 2^k), x = RHT^-1(y) exactly
    mids = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 0.5, 1.5, 3.0, 6.0, 7.0, 6.5, 5.5, 4.5, 3.25])
    for r in range(2, rows, 5):
        y = rng.permutation(mids) * rng.choice([-1, 1], 16) * 2.0 ** int(rng.integers(-8, 8))
        put(r, r, rht.inverse(y.astype(np.float32), out_dtype="float32"))
    # bf16 ties: y halfway between two bf16 neighbours
    y = (1.0 + (2 * np.arange(16) + 1) * 2.0 ** -8) * rng.choice([-1, 1], 16)
    put(4, 1, rht.inverse(y.astype(np.float32), out_dtype="float32"))
    put(5, 2, np.zeros(16))
    put(6, 2, -np.zeros(16))  # signed zeros out of the sign flips and sums
    put(7, 2, [0.0, -0.0] * 8)
    put(8, 3, np.arange(16) * np.float32(1e-45))  # subnormals: u * 0.25 rounds
    put(9, 3, rng.integers(-7, 8, 16) * np.float32(3e-45))
    put(10, 0, rng.standard_normal(16) * np.float32(3e38))  # overflow in the butterfly: Inf, Inf - Inf
    put(11, 1, [np.inf] + [1.0] * 15)
    put(12, 2, [np.inf, -np.inf] + [0.0] * 14)
    put(13, 3, [np.nan] + [2.0] * 15)
    put(14, 0, [448.0 * 6 * 4] * 16)
    return x


def reference(x, sch, rht: RHT, axis, **kw):
    y = rht.apply(x, axis=axis).astype(np.float32)  # bf16 / float64 outputs widen exactly
    return fp4spec.quantize(y, sch, axis=axis, **kw)


def same(out, ref, axis):
    m = ref.moved()
    np.testing.assert_array_equal(out["packed"].cpu().numpy(), pack(m["codes"], order="lo_first", axis=-1))
    scales = out["scales"].cpu().numpy()
    want = m["scales"].reshape(scales.shape[0], -1) if scales.ndim == 2 else to_blocked(m["scales"])
    np.testing.assert_array_equal(scales, want)
    if ref.global_scale is None:
        assert out["global_scale"] is None
    else:
        assert np.float32(out["global_scale"].cpu()).view(np.uint32) == np.float32(ref.global_scale).view(np.uint32)


def _dev(x, dtype, backend):
    return torch.from_numpy(np.ascontiguousarray(x)).to(dtype).to(backend.device)


@pytest.mark.parametrize("name,over", FUSED, ids=FUSED_IDS)
@pytest.mark.parametrize("axis", [-1, 0])
def test_fused_rht(backend, name, over, axis):
    """RNE with bf16 and float32 output, SR with given bits and Philox; the RHT + amax pass."""
    sch = fp4spec.get_scheme(name, **over)
    variant = "rows" if axis == -1 else "cols"
    x = rht_adversarial(TE, 1)
    x = x if axis == -1 else np.ascontiguousarray(x.T)  # blocks run down the columns
    xt = _dev(x, torch.float32, backend)
    for rht, kw in ((TE, {}), (SEEDED32, {})):
        same(quantize_packed(xt, sch, axis=axis, rht=rht, variant=variant), reference(x, sch, rht, axis, **kw), axis)
    rb = np.random.default_rng(2).integers(0, 1 << 8, size=x.shape).astype(np.uint32)
    same(quantize_packed(xt, sch, axis=axis, rht=TE, rounding="sr", rbits=rb, variant=variant),
         reference(x, sch, TE, axis, rounding="sr", rbits=rb), axis)
    rb = philox_rbits(99, x.shape, 24)
    same(quantize_packed(xt, sch, axis=axis, rht=SEEDED32, rounding="sr", seed=99, sr_bits=24, variant=variant),
         reference(x, sch, SEEDED32, axis, rounding="sr", rbits=rb, sr_bits=24), axis)


@pytest.mark.parametrize("rht", [None, TE], ids=["plain", "rht"])
@pytest.mark.parametrize("name", ["nvfp4", "mxfp4"])
def test_cols_scalar_and_vector_loads_agree(backend, name, rht):
    """cols with one value per thread loaded in its compute layout (config cols_scalar_loads)
    and with 8-byte loads: the same bytes, equal to the reference, on adversarial bf16 data
    with ragged columns (masked loads)."""
    sch = fp4spec.get_scheme(name)
    x = np.ascontiguousarray(rht_adversarial(TE, 3, rows=48, cols=64).T)  # 64 x 48: blocks down the columns
    x = x.astype(ml_dtypes.bfloat16).astype(np.float32)
    xt = _dev(x, torch.bfloat16, backend)
    outs = []
    key = (sch.block_size, rht is not None)
    for loads in (DEFAULT_CONFIG.cols_scalar_loads - {key}, DEFAULT_CONFIG.cols_scalar_loads | {key}):
        cfg = replace(DEFAULT_CONFIG, cols_scalar_loads=loads)
        outs.append(quantize_packed(xt, sch, axis=0, rht=rht, variant="cols", BN=32, config=cfg))
    assert torch.equal(outs[0]["packed"], outs[1]["packed"]) and torch.equal(outs[0]["scales"], outs[1]["scales"])
    if rht is not None:
        same(outs[1], reference(x, sch, rht, 0), 0)


@pytest.mark.parametrize("name", ["nvfp4", "mxfp4"])
@pytest.mark.parametrize("axis", [-1, 0])
def test_fused_rht_bf16_input(backend, name, axis):
    """bf16 input (64-bit group loads rowwise, int16 rows columnwise); several programs with
    masked blocks / columns; the 4-block (NB=4) and 1-block columnwise bands; given tensor scale."""
    xb = rht_adversarial(TE, 3, 64, 96).astype(ml_dtypes.bfloat16).astype(np.float32)
    x = xb if axis == -1 else np.ascontiguousarray(xb.T[:, :40])  # cols: (96, 40), 40 columns
    xt = _dev(x, torch.bfloat16, backend)
    ref = reference(x, name, TE, axis)
    if axis == -1:
        for br in (16, 512):
            same(quantize_packed(xt, name, rht=TE, BM=br), ref, axis)
    else:
        for bc, nb in ((32, 4), (16, 1), (64, None)):
            same(quantize_packed(xt, name, axis=0, rht=TE, BN=bc, BM=nb), ref, axis)
    if ref.global_scale is not None:  # the tensor scale given (TE's delayed amax): no amax pass
        from fp4spec.backends import torch_backend as tb

        amax = np.max(np.abs(TE.apply(x, axis=axis).astype(np.float32)))
        sed = tb.tensor_scale(torch.tensor(amax), fp4spec.get_scheme(name))
        same(quantize_packed(xt, name, axis=axis, rht=TE, s_enc_dec=sed), ref, axis)


def fast_safe(rht: RHT, seed: int, rows: int = 32, cols: int = 64) -> np.ndarray:
    """rht_adversarial without NaN/Inf and with |x| < 2^12 (block amaxes after the transform
    below 4e5: TE multipliers >= 2^-16, no MX NaN scales), so the fast E2M1 encoder needs no
    fallback anywhere: ties after the transform, bf16 ties, zeros, -0, rows of 16 from 2^-130 up
    (tiny transformed values next to large ones in a 1 x 32 block)."""
    x = rht_adversarial(rht, seed, rows, cols)
    bad = ~np.isfinite(x) | (np.abs(x) >= 2.0 ** 12)
    x[bad] = np.random.default_rng(seed).standard_normal(int(bad.sum())).astype(np.float32) * 100
    return x


@pytest.mark.parametrize("name", ["nvfp4", "mxfp4", "mxfp4:scale_rule=rceil"])
@pytest.mark.parametrize("axis", [-1, 0])
def test_fast_encoder_alone(backend, name, axis):
    """The fused kernels' fast encoder without its exact fallback (config exact_fallback=False),
    on data where it must be exact: bf16 and float32 transform output, bf16 and float32
    input, several programs. (The adversarial tests above take the fallback: huge and
    non-finite blocks.)"""
    from fp4spec.backends.base import resolve_scheme

    cfg = replace(DEFAULT_CONFIG, exact_fallback=False)
    sch = resolve_scheme(name)
    x = fast_safe(TE, 11, 64, 64)
    x = x if axis == -1 else np.ascontiguousarray(x.T)
    kw = {"BM": 16} if axis == -1 else {"BN": 32}
    for dtype in (torch.float32, torch.bfloat16):
        xx = x if dtype == torch.float32 else x.astype(ml_dtypes.bfloat16).astype(np.float32)
        xt = _dev(xx, dtype, backend)
        for rht in (TE, SEEDED32):
            same(quantize_packed(xt, sch, axis=axis, rht=rht, config=cfg, **kw), reference(xx, sch, rht, axis), axis)


@pytest.mark.parametrize("name", ["mxfp4", "mxfp4:scale_rule=rceil", "mxfp4:scale_rule=even",
                                  "mxfp4:scale_rule=ceil", "mxfp4:profile=torchao", "mxfp4:block_size=16"])
def test_fused_rht_mx_bf16x2_encoder(backend, name):
    """Fused RHT + rowwise MX quantize of bf16 input with bf16 output: the encoder on bf16x2
    words (config rht_rows_bf16x2, GPU only) and the float32 one give the spec's bytes for every MX
    scale rule and profile, on adversarial data (NaN / Inf blocks: the program's exact
    fallback) and, without the fallback, on data where the fast path must be exact. In the
    interpreter only the float32 encoder runs."""
    from fp4spec.backends.base import resolve_scheme

    sch = resolve_scheme(name)
    for data, fallback in ((rht_adversarial(TE, 5, 64, 96), True), (fast_safe(TE, 6, 64, 96), False)):
        x = data.astype(ml_dtypes.bfloat16).astype(np.float32)
        xt = _dev(x, torch.bfloat16, backend)
        ref = reference(x, sch, TE, -1)
        for bf16x2 in (False, True):
            cfg = replace(DEFAULT_CONFIG, exact_fallback=fallback, rht_rows_bf16x2=bf16x2)
            for br in (16, 256):
                same(quantize_packed(xt, sch, rht=TE, variant="rows", BM=br, config=cfg), ref, -1)


@pytest.mark.parametrize("axis", [-1, 0])
def test_rht_amax(backend, axis):
    x = rht_adversarial(TE, 4)
    x[13, :16] = 1.0  # no NaN: a finite amax
    xs = x if axis == -1 else np.ascontiguousarray(x.T)
    xt = _dev(xs, torch.float32, backend)
    for rht in (TE, SEEDED32):
        want = np.max(np.abs(rht.apply(xs, axis=axis).astype(np.float32)))
        if axis == -1:
            got = rht_global_amax(xt, xs.shape[0], xs.shape[1], xs.shape[1], 1, rht_params(rht))
        else:
            got = rht_global_amax(xt, xs.shape[1], xs.shape[0], 1, xs.shape[1], rht_params(rht))
        assert np.float32(got.cpu()).view(np.uint32) == want.view(np.uint32)
    x[13, 0] = np.nan
    xt = _dev(x, torch.float32, backend)
    assert np.isnan(float(rht_global_amax(xt, 32, 64, 64, 1, rht_params(TE))))


@pytest.mark.parametrize("spec", ["nvfp4_2d", "mxfp4:block_size=64", "nvfp4:block_size=8"])
def test_unfused_rht(backend, spec):
    """Shapes the fused kernels do not take: the transform goes through a float32 temporary."""
    from fp4spec.backends.base import resolve_scheme

    sch = resolve_scheme(spec)
    x = rht_adversarial(TE, 5, 64, 128)
    xt = _dev(x, torch.float32, backend)
    same(quantize_packed(xt, sch, rht=TE), reference(x, sch, TE, -1), -1)
    rb = np.random.default_rng(0).integers(0, 256, size=x.shape).astype(np.uint32)
    same(quantize_packed(xt, sch, rht=SEEDED32, rounding="sr", rbits=rb), reference(x, sch, SEEDED32, -1, rounding="sr", rbits=rb), -1)
    if not sch.is_2d:
        same(quantize_packed(xt, sch, axis=0, rht=TE), reference(x, sch, TE, 0), 0)


@pytest.mark.parametrize("name", ["nvfp4", "mxfp4"])
def test_fused_rht_cublas_layout(backend, name):
    x = rht_adversarial(TE, 6, 128, 64)
    xt = _dev(x, torch.float32, backend)
    same(quantize_packed(xt, name, rht=TE, scale_layout="cublas"), reference(x, name, TE, -1), -1)
    same(quantize_packed(xt, name, axis=0, rht=TE, scale_layout="cublas"), reference(x, name, TE, 0), 0)
    same(quantize_packed(xt, name, axis=0, rht=TE, scale_layout="cublas", BM=1), reference(x, name, TE, 0), 0)


@pytest.mark.parametrize("name", ["nvfp4", "mxfp4:scale_rule=rceil"])
@pytest.mark.parametrize("axis", [-1, 0])
def test_backend_quantize_rht(backend, name, axis):
    """TritonBackend.quantize(rht=) records the transform and equals fp4spec.quantize(rht=)."""
    x = rht_adversarial(TE, 8, 32, 32)
    x64 = x.astype(np.float64) * (1 + 2.0 ** -40)  # float64 input: rounded to float32 first (F1)
    from fp4spec.backends.base import resolve_scheme

    sch = resolve_scheme(name)
    got = backend.quantize(x64, sch, axis=axis, rht=TE)
    assert got.rht == TE
    if "rht" in inspect.signature(fp4spec.quantize).parameters:
        assert got.equals(fp4spec.quantize(x64, sch, axis=axis, rht=TE))
    ref = reference(x64.astype(np.float32), sch, TE, axis)
    np.testing.assert_array_equal(got.codes, ref.codes)
    np.testing.assert_array_equal(got.scales, ref.scales)


def test_capabilities_and_refusals(backend):
    from fp4spec.backends.triton.capability import gpu_features

    caps = backend.capabilities()
    a = gpu_features().mma_arith  # the tensor-core arithmetic: claimed on Hopper and in the interpreter
    assert caps.rht == ("16/fwht-fp32",) + ((f"16/{a}",) if a else ())
    assert caps.supports_rht(TE) and caps.supports_rht(RHT.from_seed(1, out_dtype="float64"))
    assert not caps.supports_rht(RHT.from_seed(1, size=32))
    assert "16/fwht-fp32" in backend.why_unsupported("nvfp4", rht=RHT.from_seed(1, size=32))
    assert "16/fwht-fp32" in backend.why_unsupported("nvfp4", rht=RHT.te(arith="float64"))
    assert backend.why_unsupported("nvfp4", rht=TE) == ""
    x = torch.ones((16, 32))
    with pytest.raises(NotImplementedError):
        quantize_packed(x, "nvfp4", rht=RHT.te(arith="float64"))
    with pytest.raises(NotImplementedError):
        quantize_packed(x, "nvfp4_2d", rht=TE, variant="rows")
    with pytest.raises(ValueError):
        quantize_packed(x, "nvfp4", rht=TE, variant="tile")
    with pytest.raises(ValueError):
        quantize_packed(torch.ones((16, 24)), "nvfp4:block_size=8", rht=TE)  # 24 is not a multiple of 16
