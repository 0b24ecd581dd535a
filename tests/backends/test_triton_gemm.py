"""The triton GEMM (backends/triton/gemm.py, kernels/gemm.py) against ``fp4spec.matmul(..., accumulator="sm90-bf16")``.

On the CPU the kernels run under TRITON_INTERPRET=1, where ``tl.dot`` is a numpy matmul, not
the wgmma chain: those tests use data on which the accumulator models agree (each asserts
that first: ``exact`` == ``sm90-bf16``, or ``fp32`` == ``sm90-bf16`` where bf16 operands
overflow), so they check the dequantization, the packing, c, the tensor-scale epilogue, NaN
patterns, the bf16 output and every variant's wiring -- not the accumulation. The tests
marked ``gpu`` (skipped without CUDA) check the accumulation bit for bit on the conformance
case families and random operands.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():  # before triton is imported: it reads the variable once
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")

import fp4spec  # noqa: E402
from fp4spec.backends.triton import DEFAULT_CONFIG, capability  # noqa: E402
from fp4spec.backends.triton import gemm as G  # noqa: E402
from fp4spec.backends.triton.kernels import gemm as GK  # noqa: E402
from fp4spec.backends.base import BackendError, HostFallbackWarning  # noqa: E402
from fp4spec.conformance.matmul_properties import FAMILIES, GENERATORS, family_schemes, make_operand  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

CUDA = torch.cuda.is_available()
DEV = "cuda" if CUDA else "cpu"
SCHEMES = ["mxfp4", "nvfp4", "ufp4", "nvint4"]
MODEL = fp4spec.get_accumulator("sm90-bf16")
#: Small tiles for the interpreter: every variant and both unpackings.
CPU_CONFIGS = {
    "fused": dict(variant="fused", BM=16, BN=16, BK=32),
    "fused-dup": dict(variant="fused", BM=16, BN=32, BK=64, unpack="dup"),
    "hybrid-dup": dict(variant="hybrid", BM=32, BN=16, BK=32, unpack="dup"),
    "prepass": dict(variant="prepass", BM=16, BN=16, BK=64),
}
#: any_shape configurations (K tails of k = 16 dots after BK ones) for the interpreter.
ANY_CONFIGS = {
    "hybrid-dup-k32": dict(variant="hybrid", BM=16, BN=32, BK=32, unpack="dup", any_shape=True),
    "prepass-k64": dict(variant="prepass", BM=16, BN=16, BK=64, any_shape=True),
}
#: On a GPU the variants are checked by the gpu tests; fewer here keeps the JIT compile count down.
AGREE_VARIANTS = ["prepass"] if CUDA else list(CPU_CONFIGS)
AGREE_CASES = [(True, "float32"), (False, "bfloat16")] if CUDA else \
    [(True, "float32"), (False, "float32"), (True, "bfloat16"), (False, "bfloat16")]
HOPPER = CUDA and torch.cuda.get_device_capability()[0] == 9
gpu = pytest.mark.skipif(not HOPPER, reason="needs a Hopper GPU (the sm90-bf16 model is its MMA arithmetic)")


def bits(a):
    return np.asarray(a, np.float32).view(np.uint32)


def assert_bits(got, want, what=""):
    """float32 bit patterns equal (got: numpy or a torch tensor on any device); the message
    names ``what``, the count and the first differing output."""
    got = got.cpu().numpy() if hasattr(got, "cpu") else got
    bad = np.argwhere(bits(got) != bits(want))
    assert not len(bad), (f"{what + ': ' if what else ''}{len(bad)} of {want.size} outputs differ; first at "
                          f"{tuple(bad[0])}: got 0x{int(bits(got)[tuple(bad[0])]):08X}, "
                          f"want 0x{int(bits(want)[tuple(bad[0])]):08X}")


def model(qa, qb, c=None, name="sm90-bf16"):
    return fp4spec.matmul(qa, qb, accumulator=name, c=c)


def agreeing_case(name, m, n, k, seed, *, with_c=True):
    """Operands on which every model agrees: scales 2^-2 .. 2^2 (UE4M3: also 1.5 and 0.75),
    K <= 128, so every partial sum is exact in float32 and the fused steps truncate nothing;
    a few zero blocks and signed zeros; c on a 2^-2 grid."""
    rng = np.random.default_rng(seed)
    sch = fp4spec.get_scheme(name)
    fin = np.array(sch.element.finite_codes, np.uint8)
    vals = sch.scale.values
    ok = [c for c in range(1 << sch.scale.bits) if vals[c] in (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 4.0)]
    nb = k // sch.block_size
    a, b = rng.choice(fin, (m, k)), rng.choice(fin, (n, k))
    a[0, :sch.block_size] = 0
    sa, sb = rng.choice(ok, (m, nb)), rng.choice(ok, (n, nb))
    ga, gb = (np.float32(0.75), np.float32(-2.5)) if sch.global_scale else (None, None)
    qa, qb = make_operand(a, sa, sch, ga), make_operand(b, sb, sch, gb)
    c = (rng.integers(-64, 64, (m, n)) * 0.25).astype(np.float32) if with_c else None
    if c is not None:
        c[0, 0] = -0.0
    assert_bits(model(qa, qb, c, "exact"), model(qa, qb, c))  # the data is one on which the models agree
    return qa, qb, c


# =====================================================================================
# Dequantization: every element code x scale code
# =====================================================================================

@pytest.mark.parametrize("spec", SCHEMES + ["mxfp4:element=e1m2", "nvint4:scale=e8m0,scale_max=448", "nvfp4:block_size=32"])
def test_dequantize_every_code_pair(spec):
    sch = G.resolve_scheme(spec)
    ns = 1 << sch.scale.bits
    packed = np.tile(np.arange(256, dtype=np.uint8), (ns, 1))                     # every code pair, 512 elements
    scales = np.repeat(np.arange(ns, dtype=np.uint8)[:, None], 512 // sch.block_size, axis=1)
    out = G.dequantize_bf16(torch.from_numpy(packed).to(DEV), torch.from_numpy(scales).to(DEV), sch)
    got = out.view(torch.int16).cpu().numpy().view(np.uint16)
    codes = np.stack([packed & 15, packed >> 4], -1).reshape(ns, 512)
    v = sch.element.values[codes].astype(np.float64) * np.repeat(sch.scale.values[scales].astype(np.float64),
                                                                  sch.block_size, axis=1)
    with np.errstate(all="ignore"):
        want = v.astype(np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)   # the model's operand rule
    nan = np.isnan(v)
    np.testing.assert_array_equal((got & 0x7FFF) > 0x7F80, nan)
    np.testing.assert_array_equal(got[~nan], want[~nan])


# =====================================================================================
# CPU (and GPU): data on which the models agree
# =====================================================================================

@pytest.mark.parametrize("variant", AGREE_VARIANTS)
@pytest.mark.parametrize("name", SCHEMES)
def test_matmul_agreeing(name, variant):
    cfg = CPU_CONFIGS[variant]
    for seed, (with_c, out) in enumerate(AGREE_CASES):
        out = getattr(torch, out)
        qa, qb, c = agreeing_case(name, 32, 16, 128 if seed % 2 else 64, seed, with_c=with_c)
        want = model(qa, qb, c)
        got = G.matmul(qa, qb, c=c, out_dtype=out, **cfg)
        if out == torch.float32:
            assert got.dtype == np.float32 and got.shape == want.shape
            assert_bits(got, want)
        else:
            np.testing.assert_array_equal(got, G.bf16_rne_bits(want))


def test_bf16_rounding_reference():
    x = np.array([1.0, 1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8 + 2 ** -20), 3.4e38, -0.0, np.inf, np.nan,
                  1e-40], np.float32)
    with np.errstate(all="ignore"):
        want = x.astype(ml_dtypes.bfloat16).view(np.uint16)
    got = G.bf16_rne_bits(x)
    np.testing.assert_array_equal(got[:7], want[:7])
    assert got[7] == 0x7FFF and got[8] == want[8]


def _special_case(name, seed):
    """NaN block scales, NaN/Inf in c, and (E8M0) bf16 operand overflow to +-Inf."""
    qa, qb, c = agreeing_case(name, 16, 16, 64, seed)
    sch = qa.scheme
    nan = sch.scale.nan_codes[0]
    sa, sb = np.array(qa.scales), np.array(qb.scales)
    sa[3, 0] = nan
    sb[5, -1] = nan
    c = c.copy()
    c[1, 2], c[2, 1], c[4, 4] = np.nan, np.inf, -np.inf
    codes_a = np.array(qa.codes)
    if sch.scale.name == "e8m0":
        sa[7, :] = 254                      # 2^127: elements >= 2 overflow bf16 -> +-Inf
        codes_a[7, :] = 7                   # 6 * 2^127 = +Inf operands in row 7
    return make_operand(codes_a, sa, sch, qa.global_scale), make_operand(qb.codes, sb, sch, qb.global_scale), c


@pytest.mark.parametrize("name", SCHEMES)
def test_matmul_specials(name):
    qa, qb, c = _special_case(name, 11)
    want = model(qa, qb, c)
    other = model(qa, qb, c, "fp32")                  # fp32 operands overflow where bf16 ones do
    assert_bits(np.where(np.isnan(other), want, other), want)   # (its NaN pattern is IEEE's)
    assert np.isnan(want).any()
    for cfg in [CPU_CONFIGS[v] for v in ("fused", "prepass") if v in AGREE_VARIANTS]:
        assert_bits(G.matmul(qa, qb, c=c, **cfg), want)
        np.testing.assert_array_equal(G.matmul(qa, qb, c=c, out_dtype=torch.bfloat16, **cfg), G.bf16_rne_bits(want))


def test_mixed_schemes_and_torch_operands():
    qa, _, c = agreeing_case("mxfp4", 16, 16, 64, 3)
    _, qb, _ = agreeing_case("nvfp4", 16, 16, 64, 4)
    want = model(qa, qb, c)
    assert_bits(G.matmul(qa, qb, c=c, **CPU_CONFIGS["fused"]), want)
    got = G.matmul(qa.to_torch(DEV), qb.to_torch(DEV), c=torch.from_numpy(c), **CPU_CONFIGS["hybrid-dup"])
    assert isinstance(got, torch.Tensor) and got.device.type == DEV  # torch operands: a tensor where they are
    assert_bits(got.cpu().numpy(), want)


def test_matmul_packed_direct():
    qa, qb, c = agreeing_case("nvfp4", 16, 32, 64, 5)
    pa, sa, ga = G.pack_operand(qa, DEV)
    pb, sb, gb = G.pack_operand(qb, DEV)
    g = ga * gb
    got = G.matmul_packed(pa, sa, pb, sb, "nvfp4", g=g, c=torch.from_numpy(c).to(DEV), **CPU_CONFIGS["prepass"])
    assert got.dtype == torch.float32 and got.device.type == DEV
    assert_bits(got.cpu().numpy(), model(qa, qb, c))
    np.testing.assert_array_equal(pa.cpu().numpy(), qa.pack())          # low nibble first, as the spec packs


def test_ue4m3_bit_7_is_ignored_as_the_model_says():
    """sm90-bf16 has ue4m3_sign_bit='ignore': the host checks (check_operands) let UE4M3 scale
    bytes with bit 7 set through and the kernel reads their low 7 bits. Every element code
    pair x every scale byte 0x80..0xFF dequantizes as the byte with bit 7 cleared; a GEMM with
    such bytes (0x80, 0xFF among them) equals fp4spec.matmul."""
    assert G.UE4M3_SIGN_BIT == MODEL.ue4m3_sign_bit == "ignore"
    for spec in ("nvfp4", "nvint4"):
        sch = G.resolve_scheme(spec)
        packed = torch.from_numpy(np.tile(np.arange(256, dtype=np.uint8), (128, 1))).to(DEV)
        high = np.repeat(np.arange(128, 256, dtype=np.uint8)[:, None], 512 // sch.block_size, axis=1)
        got = G.dequantize_bf16(packed, torch.from_numpy(high).to(DEV), sch).view(torch.int16).cpu().numpy()
        low = G.dequantize_bf16(packed, torch.from_numpy(high & 0x7F).to(DEV), sch).view(torch.int16).cpu().numpy()
        np.testing.assert_array_equal(got, low)
    qa, qb, c = agreeing_case("nvfp4", 16, 16, 64, 7)
    rng = np.random.default_rng(7)
    sa = np.asarray(qa.scales).copy()
    sa[rng.random(sa.shape) < 0.4] |= 0x80
    sa[0, 0], sa[1, 1] = 0x80, 0xFF
    qa = qa.replace(scales=sa)
    want = model(qa, qb, c)
    assert np.isnan(want[1]).all() and bits(want[1]).tolist() == [MODEL.nan_bits] * 16
    assert_bits(G.matmul(qa, qb, c=c, **CPU_CONFIGS["fused"]), want)
    assert_bits(G.matmul(qa, qb, c=c, **CPU_CONFIGS["prepass"]), want)


# =====================================================================================
# Errors
# =====================================================================================

def test_errors():
    qa, qb, c = agreeing_case("nvfp4", 16, 16, 64, 0)
    with pytest.raises(BackendError, match="sm90-bf16"):
        G.matmul(qa, qb, accumulator="cdna3-fp8")
    with pytest.raises(ValueError, match="unknown model"):
        G.matmul(qa, qb, accumulator="sm80")
    with pytest.raises(ValueError, match="K differs"):
        G.matmul(qa, fp4spec.quantize(np.ones((16, 32), np.float32), "nvfp4"))
    with pytest.raises(ValueError, match="shape"):
        G.matmul(qa, qb, c=np.zeros((16, 8), np.float32))
    with pytest.raises(TypeError, match="float32"):
        G.matmul(qa, qb, c=np.zeros((16, 16), np.float64))
    with pytest.raises(ValueError, match="hif4"):
        q = fp4spec.quantize(np.ones((4, 64), np.float32), "hif4")
        G.matmul(q, q)
    q6 = fp4spec.quantize(np.ones((4, 64), np.float32), "mxfp6_e2m3")
    with pytest.raises(BackendError, match="e2m3"):
        G.matmul(q6, q6)
    with pytest.raises(BackendError, match="block size 8 "):
        G.operand_format("nvfp4:block_size=8")
    with pytest.raises(ValueError, match="variant"):
        G.matmul(qa, qb, variant="split")
    with pytest.raises(ValueError, match="power of two"):
        G.matmul(qa, qb, BM=48)
    with pytest.raises(ValueError, match="not a tile configuration field"):
        G.matmul(qa, qb, BQ=16)
    pa, sa, _ = G.pack_operand(qa, DEV)
    with pytest.raises(ValueError, match="multiple of 16"):
        G.matmul_packed(pa[:, :12], sa[:, :1], pa[:, :12], sa[:, :1], "mxfp4:block_size=16")
    with pytest.raises(ValueError, match="K differs"):
        G.matmul_packed(pa, sa, pa[:, :16], sa[:, :2], "nvfp4")
    with pytest.raises(ValueError, match="a_scales: expected shape"):
        G.matmul_packed(pa, sa[:, :2], pa, sa, "nvfp4")
    with pytest.raises(ValueError, match="uint8"):
        G.matmul_packed(pa.to(torch.int32), sa, pa, sa, "nvfp4")
    with pytest.raises(ValueError, match="out_dtype"):
        G.matmul_packed(pa, sa, pa, sa, "nvfp4", out_dtype=torch.float16)
    with pytest.raises(ValueError, match="g: expected one value"):
        G.matmul_packed(pa, sa, pa, sa, "nvfp4", g=torch.ones(2))


def test_claim_only_on_hopper():
    avail = capability.gemm_availability()
    if not CUDA:
        assert not avail and capability.claimed_accumulators() == ()
    else:
        hopper = torch.cuda.get_device_capability()[0] == 9
        assert bool(avail) == hopper
        assert capability.claimed_accumulators() == (capability.GEMM_ACCUMULATORS if hopper else ())


def test_constants():
    assert capability.GEMM_ACCUMULATORS == ("sm90-bf16", "exact", "fp32", "sm100-mxf4nvf4", "sm100-mxf8f6f4")
    for s in G.SCHEMES:
        G.operand_format(s)
    assert G.NAN_BITS == MODEL.nan_bits
    assert set(G.CONFIGS) and DEFAULT_CONFIG.gemm in G.CONFIGS and DEFAULT_CONFIG.gemm_small in G.CONFIGS


# =====================================================================================
# GPU: the accumulation itself, bit for bit
# =====================================================================================

#: Tuned configurations checked on random data (each a compile of a few seconds on the GPU: one
#: of each code path -- prepass / hybrid / fused, join / dup, 64- and 128-row wgmma tiles).
GPU_CONFIGS = ["prepass-128x256", "hybrid-64x256", "fused-128x128-dup", "fused-128x256"]
#: The any_shape configurations (one compile per scheme, whatever the shape).
ANY = [name for name, cfg in G.CONFIGS.items() if cfg.any_shape]
T0 = time.time()


@pytest.fixture(autouse=True)
def _gpu_progress(request):
    """On a GPU: one timestamped line per test on the real stderr (not captured), flushed, so
    that a run stopped by a time limit shows where it was."""
    if not CUDA:
        yield
        return
    sys.__stderr__.write(f"[{time.time() - T0:7.1f}s] {request.node.name} ...\n")
    sys.__stderr__.flush()
    t = time.time()
    yield
    sys.__stderr__.write(f"[{time.time() - T0:7.1f}s] {request.node.name} done in {time.time() - t:.1f} s "
                         f"(gemm kernels compiled so far: {_compiled()})\n")
    sys.__stderr__.flush()


def _compiled():
    """How many variants of the GEMM kernels Triton has compiled in this process (None where
    its JIT cache layout is unknown)."""
    try:
        return sum(len(c[0]) for k in (GK.gemm_kernel, GK.gemm_kernel_any) for c in k.device_caches.values())
    except Exception:  # noqa: BLE001 -- Triton internals; informative only
        return None


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("name", SCHEMES)
def test_gpu_families(name, family):
    """Each conformance case family: ``matmul`` as the backend calls it (small GEMMs: the
    any-shape 64 x 64 configuration, wgmma) at a tile-sized shape and a tiny one, and the tuned
    default (prepass-128x256: wgmma, operands from shared memory) at the tile-sized shape."""
    if not family_schemes(family, (name,)):
        pytest.skip(f"family {family!r} does not draw {name}")
    sch = fp4spec.get_scheme(name)
    for seed, (m, n, k) in enumerate([(96, 160, 512), (3, 5, 64)]):
        case = GENERATORS[family](np.random.default_rng(1000 + seed), MODEL, sch, m, n, k)
        want = model(case.qa, case.qb, case.c)
        assert_bits(G.matmul(case.qa, case.qb, c=case.c), want)
        if m > 8:
            assert_bits(G.matmul(case.qa, case.qb, c=case.c, config=DEFAULT_CONFIG.gemm), want)


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("name", ["nvfp4", "mxfp4"])
def test_gpu_random_configs(name):
    """The tuned code paths on a shape that is not a multiple of the tiles, and the any-shape
    configurations also with a K tail (K % BK = 32: two k = 16 dots after the BK ones)."""
    sch = fp4spec.get_scheme(name)
    case = GENERATORS["random"](np.random.default_rng(7), MODEL, sch, 200, 72, 1024)
    want = model(case.qa, case.qb, case.c)
    for cfg in GPU_CONFIGS + ANY:
        assert_bits(G.matmul(case.qa, case.qb, c=case.c, config=cfg), want)
    np.testing.assert_array_equal(G.matmul(case.qa, case.qb, c=case.c, out_dtype=torch.bfloat16),
                                  G.bf16_rne_bits(want))
    tail = GENERATORS["truncation"](np.random.default_rng(8), MODEL, sch, 130, 70, 1056)
    want = model(tail.qa, tail.qb, tail.c)
    for cfg in ANY:
        assert_bits(G.matmul(tail.qa, tail.qb, c=tail.c, config=cfg), want)


@gpu
@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_every_config():
    """Every named configuration once (nvfp4, random data, c given): ten more compiles (marked
    slow)."""
    case = GENERATORS["random"](np.random.default_rng(9), MODEL, fp4spec.get_scheme("nvfp4"), 136, 264, 512)
    c = np.random.default_rng(10).standard_normal((136, 264)).astype(np.float32)
    want = model(case.qa, case.qb, c)
    for cfg in G.CONFIGS:
        assert_bits(G.matmul(case.qa, case.qb, c=c, config=cfg), want)


@gpu
@pytest.mark.gpu
def test_gpu_mixed_schemes():
    ca = GENERATORS["wide_scales"](np.random.default_rng(3), MODEL, fp4spec.get_scheme("mxfp4"), 64, 64, 256)
    cb = GENERATORS["wide_scales"](np.random.default_rng(4), MODEL, fp4spec.get_scheme("nvfp4"), 64, 64, 256)
    want = model(ca.qa, cb.qb, ca.c)
    assert_bits(G.matmul(ca.qa, cb.qb, c=ca.c), want)
    assert_bits(G.matmul(ca.qa, cb.qb, c=ca.c, config=DEFAULT_CONFIG.gemm), want)


@gpu
@pytest.mark.gpu
def test_gpu_conformance_rows_compile_once():
    """The conformance matmul rows through TritonBackend (as ``fp4spec conform --backend triton
    --property matmul`` runs them, every claimed model): every row passes (``scale_sign_bit``
    is skipped under the models that refuse such bytes), and the many shapes they draw reuse
    one compiled GEMM kernel per scheme and kind (plain, and with the certificate), as the
    interpreter test ``test_conformance_matmul_rows_through_backend`` counts them."""
    from fp4spec.accumulator_models import get_accumulator
    from fp4spec.conformance import runner

    before = _compiled()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HostFallbackWarning)
        report = runner.run("triton", properties=["matmul"], matmul_max_examples=10)
    rows = [r for r in report.results if r.property.startswith("matmul/")]
    assert len(rows) == len(FAMILIES) * len(capability.GEMM_ACCUMULATORS)
    refusing = {m for m in capability.GEMM_ACCUMULATORS if get_accumulator(m).ue4m3_sign_bit == "reject"}
    bad = [(r.property, r.rounding, r.status, r.counterexample and r.counterexample.what) for r in rows
           if r.status != "PASS" and not (r.status == "SKIP" and r.property == "matmul/scale_sign_bit"
                                          and r.rounding.removeprefix("acc=") in refusing)]
    assert not bad, bad
    after = _compiled()
    if before is not None and after is not None:
        assert after - before <= 2 * len(SCHEMES), (before, after)


def test_row_padded_operand():
    """A QuantizedTensor whose stored rows are padded (16 x 16 tiles) multiplies as its own rows."""
    from fp4spec.quantized import QuantizedTensor

    qa, qb, c = agreeing_case("nvfp4", 20, 16, 64, 8)
    padded = QuantizedTensor(np.pad(np.asarray(qa.codes), ((0, 12), (0, 0))), np.pad(np.asarray(qa.scales),
                             ((0, 12), (0, 0))), qa.global_scale, qa.scheme, 1, qa.shape)
    got = G.matmul(padded, qb, c=c, **CPU_CONFIGS["prepass"])
    assert got.shape == (20, 16)
    assert_bits(got, model(qa, qb, c))


# =====================================================================================
# CPU: the model's MMA chain in place of the interpreter's dot (any data, bit for bit)
# =====================================================================================

interp_only = pytest.mark.skipif(CUDA, reason="CPU interpreter check (on a GPU the gpu tests check the MMA itself)")


@interp_only
@pytest.mark.parametrize("family", FAMILIES)
def test_interpreter_model_dot_families(family):
    """With :func:`interpreter_model_dot` the interpreted kernels give the model's bits on the
    adversarial families too: everything around the MMA (packing, scales, K tiles, c, g, NaN
    patterns, padded tiles, every variant) is checked on data where the models differ."""
    shapes = [(3, 5, 64), (17, 33, 96), (2, 70, 160)]
    configs = [[{}, CPU_CONFIGS["fused"]], [CPU_CONFIGS["hybrid-dup"], ANY_CONFIGS["hybrid-dup-k32"]],
               [{"config": "any-prepass-128x128-k64"}, ANY_CONFIGS["prepass-k64"]]]
    with G.interpreter_model_dot():
        for si, (m, n, k) in enumerate(shapes):
            for name in family_schemes(family, SCHEMES):
                case = GENERATORS[family](np.random.default_rng(50 + si), MODEL, fp4spec.get_scheme(name), m, n, k)
                want = model(case.qa, case.qb, case.c)
                for cfg in configs[si]:
                    assert_bits(G.matmul(case.qa, case.qb, c=case.c, **cfg), want)


@interp_only
def test_conformance_matmul_rows_through_backend(monkeypatch):
    """``fp4spec conform --backend triton --property matmul`` as the GPU runs it (the backend
    claims sm90-bf16 and the certified models), on the interpreter with the model's dot: every
    row passes (``scale_sign_bit`` is skipped under the models that refuse such bytes), so what
    the conformance feeds ``Backend.matmul`` (numpy QuantizedTensors, c None or given, M or N of
    1, K of one block, tensor scales) is handled as the bench's operands are."""
    from fp4spec.accumulator_models import get_accumulator
    from fp4spec.conformance import runner

    monkeypatch.setattr(capability, "claimed_accumulators", lambda device=None: capability.GEMM_ACCUMULATORS)
    keys = _log_launches(monkeypatch)
    with G.interpreter_model_dot(), warnings.catch_warnings():
        warnings.simplefilter("ignore", HostFallbackWarning)
        report = runner.run("triton", properties=["matmul"], matmul_max_examples=10)
    rows = [r for r in report.results if r.property.startswith("matmul/")]
    assert len(rows) == len(FAMILIES) * len(capability.GEMM_ACCUMULATORS)
    refusing = {m for m in capability.GEMM_ACCUMULATORS if get_accumulator(m).ue4m3_sign_bit == "reject"}
    bad = [(r.property, r.rounding, r.status, r.counterexample and r.counterexample.what) for r in rows
           if r.status != "PASS" and not (r.status == "SKIP" and r.property == "matmul/scale_sign_bit"
                                          and r.rounding.removeprefix("acc=") in refusing)]
    assert not bad, bad
    # what the GPU would compile per scheme: gemm_kernel_any with and without the certificate,
    # and the bf16 dequantization the certificate's norms read; nothing else
    assert sorted(k[0] for k in keys) == (["dequant_bf16_kernel_any"] * len(SCHEMES)
                                          + ["gemm_kernel_any"] * 2 * len(SCHEMES)), sorted(keys)


def _spec(value, specialised: bool) -> str:
    """How Triton's JIT keys a runtime argument (an approximation: ints by == 1 and % 16, tensors
    by dtype and 16-byte alignment; 'x' for an argument it does not specialise)."""
    if not specialised:
        return "x"
    if isinstance(value, bool):
        return repr(value)
    if isinstance(value, int):
        return "1" if value == 1 else ("D" if value % 16 == 0 else "i")
    if isinstance(value, torch.Tensor):
        return f"{value.dtype}:{'D' if value.data_ptr() % 16 == 0 else 'u'}"
    return type(value).__name__


def _log_launches(monkeypatch) -> set:
    """Record the specialisation key of every kernel launch of the GEMM module (the set of
    distinct keys is what the GPU compiles)."""
    keys = set()

    class Logged:
        def __init__(self, name, kernel):
            self.name, self.kernel = name, kernel
            dns = kernel.kwargs.get("do_not_specialize") or ()
            self.specialised = [i not in dns and a not in dns for i, a in enumerate(kernel.arg_names)]

        def __getitem__(self, grid):
            def launch(*args, **kw):
                spec = tuple(_spec(a, s) for a, s in zip(args, self.specialised))
                keys.add((self.name, spec, tuple(sorted(kw.items()))))
                return self.kernel[grid](*args, **kw)
            return launch

    for name in ("gemm_kernel", "gemm_kernel_any", "dequant_bf16_kernel", "dequant_bf16_kernel_any"):
        monkeypatch.setattr(GK, name, Logged(name, getattr(GK, name)))
    return keys


@interp_only
def test_small_config_one_compile_per_scheme(monkeypatch):
    """``matmul`` without a configuration: small GEMMs of any shape share one kernel per scheme;
    large ones use the tuned default."""
    keys = _log_launches(monkeypatch)
    with G.interpreter_model_dot():
        for i, (m, n, k) in enumerate([(1, 1, 32), (4, 3, 64), (33, 1, 96), (5, 70, 160)]):
            case = GENERATORS["random"](np.random.default_rng(i), MODEL, fp4spec.get_scheme("mxfp4"), m, n, k)
            assert_bits(G.matmul(case.qa, case.qb, c=case.c), model(case.qa, case.qb, case.c))
    assert len(keys) == 1 and next(iter(keys))[0] == "gemm_kernel_any"
    assert dict(next(iter(keys))[2])["TAIL"] is True
    assert G.get_config(DEFAULT_CONFIG.gemm_small).any_shape and not G.get_config(DEFAULT_CONFIG.gemm).any_shape
    keys.clear()
    qa, qb, c = agreeing_case("nvfp4", 16, 16, 64, 1)
    assert_bits(G.matmul(qa, qb, c=c, defaults=replace(DEFAULT_CONFIG, gemm_small_macs=1)), model(qa, qb, c))
    assert sorted(k[0] for k in keys) == ["dequant_bf16_kernel", "gemm_kernel"]
