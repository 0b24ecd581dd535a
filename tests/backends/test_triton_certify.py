"""The triton GEMM under ``exact``, ``fp32``, ``sm100-mxf4nvf4`` and ``sm100-mxf8f6f4``
(backends/triton/certify.py): Hopper's bf16 kernel plus a per-output exactness certificate,
the emulator for the outputs it cannot prove -- against ``fp4spec.matmul`` bit for bit.

On the CPU the kernel runs under TRITON_INTERPRET=1 with :func:`interpreter_model_dot` (each
``tl.dot`` is the sm90-bf16 model's chain, as Hopper computes it), so a certified output is
checked against what the GPU would give; the ``gpu`` test repeats it on the H200's wgmma.
A planted defect -- a certificate that proves everything -- must be caught by the families.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():  # before triton is imported: it reads the variable once
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")

import fp4spec  # noqa: E402
from fp4spec.backends.base import HostFallbackWarning  # noqa: E402
from fp4spec.backends.triton import certify as C  # noqa: E402
from fp4spec.backends.triton import gemm as G  # noqa: E402
from fp4spec.conformance.matmul_properties import FAMILIES, GENERATORS, expects_refusal, family_schemes  # noqa: E402

from .test_triton_gemm import assert_bits, bits  # noqa: E402  (one bit-comparison helper for the GEMM tests)

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

CUDA = torch.cuda.is_available()
HOPPER = CUDA and torch.cuda.get_device_capability()[0] == 9
interp_only = pytest.mark.skipif(CUDA, reason="interpreter test (the GPU runs the gpu tests)")
gpu = pytest.mark.skipif(not HOPPER, reason="needs a Hopper GPU")
SCHEMES = {"exact": ["mxfp4", "nvfp4", "ufp4", "nvint4"], "fp32": ["mxfp4", "nvfp4", "nvint4"],
           "sm100-mxf4nvf4": ["mxfp4", "nvfp4"], "sm100-mxf8f6f4": ["mxfp4"]}
SMALL = dict(variant="prepass", BM=16, BN=16, BK=32)


def cases(model_name, family, shapes, seed0=0):
    model = fp4spec.get_accumulator(model_name)
    for si, (m, n, k) in enumerate(shapes):
        for name in family_schemes(family, SCHEMES[model_name]):
            case = GENERATORS[family](np.random.default_rng(seed0 + si), model, fp4spec.get_scheme(name), m, n, k)
            if not expects_refusal(model, case):
                yield name, case


def test_element_lsb():
    assert C.element_lsb(fp4spec.get_format("e2m1")) == -1   # 0.5
    assert C.element_lsb(fp4spec.get_format("e1m2")) == -1   # 0.5 .. 3.5 in steps of 0.5
    assert C.element_lsb(fp4spec.get_format("int4_sym")) == 0
    for name in ("e2m1", "e1m2", "int4_sym"):
        vals = np.asarray(fp4spec.get_format(name).values, np.float64)
        lsb = C.element_lsb(fp4spec.get_format(name))
        assert np.all(np.ldexp(vals, -lsb) == np.round(np.ldexp(vals, -lsb)))
        assert not np.all(np.ldexp(vals, -lsb - 1) == np.round(np.ldexp(vals, -lsb - 1)))


def _lsb(v: float) -> int:
    m, e = np.frexp(v)
    mi = int(m * 2.0 ** 53)
    return int(e) - 53 + (mi & -mi).bit_length() - 1


@pytest.mark.parametrize("stats_k", [1024, 64])
@pytest.mark.parametrize("name", ["mxfp4", "nvfp4", "ufp4", "nvint4"])
def test_operand_stats_against_numpy(name, stats_k, monkeypatch):
    """The statistics kernel against float64 numpy on every scale code: la is a lower bound of
    the smallest lsb of the row's nonzero values (equal for E8M0, within the 3 fractional
    bits of UE4M3), -2^20 for NaN scales and values below 2^-60, 2^20 for rows of zeros; na is
    the largest norm over the K tiles, to float32 rounding. With the columns in one program
    and split over four (their partial results combined by atomics)."""
    monkeypatch.setattr(C, "STATS_K", stats_k)
    sch = fp4spec.get_scheme(name)
    rng = np.random.default_rng(1)
    k, tile = 256, 64
    n_codes = 255 if sch.scale.name == "e8m0" else 0x7F
    rows = n_codes + 3
    codes = rng.integers(0, 16, (rows, k), dtype=np.uint8)
    scodes = rng.integers(100, 140, (rows, k // sch.block_size), dtype=np.uint8) if sch.scale.name == "e8m0" \
        else rng.integers(0x30, 0x50, (rows, k // sch.block_size), dtype=np.uint8)
    scodes[:n_codes + 1, 0] = np.arange(n_codes + 1)       # every scale code once (NaN last)
    codes[n_codes + 1] = 0                                  # a row of zeros
    codes[n_codes + 2, : sch.block_size] = 0                # a zero block with a tiny scale
    scodes[n_codes + 2, 0] = 0
    from fp4spec.conformance.matmul_properties import make_operand

    q = make_operand(codes, scodes, sch)
    pa, sa, _ = G.pack_operand(q, "cuda" if CUDA else "cpu")
    x = G.dequantize_bf16(pa, sa, name)
    la, na = C.operand_stats(x, sa, sch, tile)
    la, na = la.cpu().numpy(), na.cpu().numpy()
    vals = np.asarray(x.float().cpu().numpy(), np.float64)
    for r in range(rows):
        v = vals[r]
        if not np.all(np.isfinite(v)):
            assert la[r] == C.NEVER, r
            continue
        nz = v[v != 0]
        if nz.size == 0:
            assert la[r] == 1 << 20, r
            continue
        true = min(_lsb(float(t)) for t in nz)
        norms = [np.sqrt(np.sum(v[t:t + tile] ** 2)) for t in range(0, k, tile)]
        if true < C.LSB_MIN or max(norms) >= 2.0 ** 64:
            assert la[r] == C.NEVER, (r, true)
            continue
        assert la[r] == C.NEVER or (la[r] <= true and (la[r] == true or sch.scale.name == "ue4m3")), (r, la[r], true)
        want = max(norms)
        assert abs(na[r] - want) <= want * 2.0 ** -18, (r, na[r], want)


def test_lo_min_and_exponent_excess():
    """The proof's condition F >= 23 + D holds for every certified model and scheme pair the
    kernel takes (D from the formats, as the emulator assigns exponents), with the bits that
    are known: E2M1 products overstate by 2, UE4M3 subnormal scales by 3 each."""
    from fp4spec.matmul_operands import check_operands
    from fp4spec.conformance.matmul_properties import make_operand

    e2m1 = fp4spec.get_scheme("mxfp4")
    assert C.exponent_excess(fp4spec.get_accumulator("sm100-mxf8f6f4"), e2m1, e2m1) == 2
    nv = fp4spec.get_scheme("nvfp4")
    assert C.exponent_excess(fp4spec.get_accumulator("sm100-mxf4nvf4"), nv, nv) == 2 + 6
    assert C.exponent_excess(fp4spec.get_accumulator("sm90-bf16"), nv, nv) == 0
    assert C.lo_min(fp4spec.get_accumulator("sm100-mxf4nvf4"), nv, nv) == -149
    assert C.lo_min(fp4spec.get_accumulator("exact"), nv, nv) == -149
    for name in C.CERTIFIED:
        m = fp4spec.get_accumulator(name)
        for spec in G.SCHEMES:
            sch = fp4spec.get_scheme(spec)
            q = make_operand(np.zeros((16, sch.block_size * 4), np.uint8), np.zeros((16, 4), np.uint8), sch)
            try:
                check_operands(m, q, q)
            except ValueError:
                continue  # the model does not take the scheme
            assert m.algorithm in ("exact", "fma") or m.frac_bits >= 23 + C.exponent_excess(m, sch, sch), (name, spec)
            assert C.lo_min(m, sch, sch) <= -139
    # a model whose F is too small for its terms certifies nothing
    tight = fp4spec.get_accumulator("sm100-mxf8f6f4").__class__(**{
        **{f: getattr(fp4spec.get_accumulator("sm100-mxf8f6f4"), f) for f in ("name", "algorithm", "scales", "k_step",
                                                                           "group_size", "final_rounding", "e_zero")},
        "frac_bits": 24})
    assert C.lo_min(tight, e2m1, e2m1) == 1 << 20


@interp_only
@pytest.mark.parametrize("model_name", C.CERTIFIED)
@pytest.mark.parametrize("family", FAMILIES)
def test_families(model_name, family):
    """Every conformance family at a few shapes: certified outputs from the kernel (the sm90
    chain), the rest from the emulator; the whole equals the model's bits."""
    with G.interpreter_model_dot(), warnings.catch_warnings():
        warnings.simplefilter("ignore", HostFallbackWarning)
        for name, case in cases(model_name, family, [(3, 5, 64), (33, 20, 128)], seed0=7):
            want = fp4spec.matmul(case.qa, case.qb, accumulator=model_name, c=case.c)
            assert_bits(G.matmul(case.qa, case.qb, accumulator=model_name, c=case.c, **SMALL), want,
                        f"{model_name} {family} {name}")


@interp_only
@pytest.mark.parametrize("model_name", [m for m in C.CERTIFIED if C.stepped(fp4spec.get_accumulator(m))])
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("unroll", [1, 2])
def test_families_by_steps_per_iteration(model_name, family, unroll, monkeypatch):
    """The step kernel with one and two steps per loop iteration (two MMAs issued before the
    first RZ addition where K allows): the model's bits on every family."""
    real = C.matmul_steps
    monkeypatch.setattr(C, "matmul_steps", lambda *a, **kw: real(*a, **kw, unroll=unroll))
    test_families(model_name, family)


@interp_only
@pytest.mark.parametrize("model_name", ["sm100-mxf4nvf4", "exact"])
def test_random_data_is_certified(model_name):
    """Typical operands: every output is proved on the device (no emulator fallback), in
    chunks (K > CHUNK) and in one piece."""
    rng = np.random.default_rng(3)
    for k in (256, 1024):
        a = rng.standard_normal((40, k)).astype(np.float32)
        b = rng.standard_normal((24, k)).astype(np.float32)
        for name in SCHEMES[model_name][:2]:
            qa, qb = fp4spec.quantize(a, name), fp4spec.quantize(b, name)
            want = fp4spec.matmul(qa, qb, accumulator=model_name)
            with G.interpreter_model_dot(), warnings.catch_warnings():
                warnings.simplefilter("error", HostFallbackWarning)
                got = G.matmul(qa, qb, accumulator=model_name, **SMALL)
            assert_bits(got, want, f"{model_name} {name} K={k}")


@interp_only
@pytest.mark.parametrize("model_name,rows,tile,count", [("exact", 40, SMALL, "576 of 1440"),
                                                         ("sm100-mxf4nvf4", 130, {}, "2304 of 4680")])
def test_some_tiles_fall_back(model_name, rows, tile, count):
    """A NaN scale in one row of A: only that row's tiles go to the emulator (the tile order
    is inverted correctly), and the result is the model's; the certificate's tiles (16 x 16
    here) and the step kernel's (64 x 64 for small GEMMs)."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((rows, 64)).astype(np.float32)
    b = rng.standard_normal((36, 64)).astype(np.float32)
    qa, qb = fp4spec.quantize(a, "mxfp4"), fp4spec.quantize(b, "mxfp4")
    scales = np.array(qa.scales)
    scales[21, 1] = 0xFF
    qa = qa.replace(scales=scales)
    want = fp4spec.matmul(qa, qb, accumulator=model_name)
    with G.interpreter_model_dot(), pytest.warns(HostFallbackWarning, match=f"{count} outputs"):
        got = G.matmul(qa, qb, accumulator=model_name, **tile)
    assert_bits(got, want, "nan row")


@interp_only
@pytest.mark.parametrize("case", ["c exponent above lo + F", "sum past the largest float"])
def test_step_kernel_checks_each_step_condition(case):
    """The step kernel's per-step conditions, each alone: (c) an accumulator entering a step
    with an exponent above lo + F (c = 2^38, lo = -2, F = 35: the model truncates the step's
    -0.25 away, an RZ addition would not), and S4 (c = the largest float plus 36 * 2^104: the
    model's Inf, where RZ saturates). Each output must be left to the emulator, and the result
    be the model's."""
    a, b = np.zeros((1, 64), np.float32), np.zeros((1, 64), np.float32)
    if case.startswith("c exponent"):
        a[0, :2], b[0, 0], c = (0.5, 4.0), -0.5, 2.0 ** 38
    else:
        a[0, 0] = b[0, 0] = 6 * 2.0 ** 52  # scale 2^52: lo = 102, so c is a multiple of 2^lo
        c = np.finfo(np.float32).max
    qa, qb, c = fp4spec.quantize(a, "mxfp4"), fp4spec.quantize(b, "mxfp4"), np.full((1, 1), c, np.float32)
    want = fp4spec.matmul(qa, qb, accumulator="sm100-mxf4nvf4", c=c)
    with G.interpreter_model_dot(), pytest.warns(HostFallbackWarning, match="1 of 1 outputs"):
        got = G.matmul(qa, qb, accumulator="sm100-mxf4nvf4", c=c)
    assert_bits(got, want, case)


@interp_only
def test_a_certificate_that_proves_everything_is_caught(monkeypatch):
    """Planted defect: norms of zero, huge lsbs and no inflation certify every output (but
    those with a c of -0 or subnormal c below lo_min); the adversarial
    families must then show outputs that are the sm90 chain's, not the model's."""
    real = C.operand_stats

    def everything(x, scales, scheme, chunk, terms=None):
        out = real(x, scales, scheme, chunk, terms)
        fake = (torch.full_like(out[0], 1 << 19), torch.zeros_like(out[1]))
        return fake + ((torch.full_like(out[2], -(1 << 19)),) if terms else ())

    monkeypatch.setattr(C, "operand_stats", everything)
    monkeypatch.setattr(C, "INFLATE", 0.0)
    caught = set()
    with G.interpreter_model_dot(), warnings.catch_warnings():
        warnings.simplefilter("ignore", HostFallbackWarning)
        for model_name in C.CERTIFIED:
            for family in ("wide_scales", "cancellation", "truncation", "subnormal", "alignment"):
                for name, case in cases(model_name, family, [(8, 8, 128), (16, 16, 256)], seed0=0):
                    want = fp4spec.matmul(case.qa, case.qb, accumulator=model_name, c=case.c)
                    got = G.matmul(case.qa, case.qb, accumulator=model_name, c=case.c, **SMALL)
                    if not np.array_equal(bits(got), bits(want)):
                        caught.add(model_name)
    assert caught == set(C.CERTIFIED), caught


def test_backend_claims():
    from fp4spec.backends.triton import capability

    assert set(C.CERTIFIED) < set(capability.GEMM_ACCUMULATORS)


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("model_name", C.CERTIFIED)
def test_gpu_families_and_random(model_name):
    """On the H200: every family through ``fp4spec.matmul`` on CUDA operands (the backend's
    default configurations), and a random 2048 x 1024 x 4096 problem compared on every output,
    proved on the device without the emulator for the sm100 models (the step kernel); for
    ``exact`` and ``fp32`` (MXFP4 only: NVFP4's exact sums at this K need more than float32's
    24 bits, which the certificate cannot prove) the few tiles the certificate leaves to the
    emulator are allowed (on the H200, 4 of 128 tiles for fp32)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HostFallbackWarning)
        for family in FAMILIES:
            for name, case in cases(model_name, family, [(96, 160, 512), (3, 5, 64)], seed0=1000):
                want = fp4spec.matmul(case.qa, case.qb, accumulator=model_name, c=case.c)
                qa, qb = case.qa.to_torch("cuda"), case.qb.to_torch("cuda")
                c = None if case.c is None else torch.from_numpy(np.asarray(case.c)).cuda()
                assert_bits(fp4spec.matmul(qa, qb, accumulator=model_name, c=c), want, f"{model_name} {family} {name}")
    g = torch.Generator(device="cuda").manual_seed(0)
    for name in SCHEMES[model_name][:2] if model_name.startswith("sm100") else ["mxfp4"]:
        a = torch.randn(2048, 4096, device="cuda", generator=g, dtype=torch.bfloat16)
        b = torch.randn(1024, 4096, device="cuda", generator=g, dtype=torch.bfloat16)
        qa, qb = fp4spec.quantize(a, name), fp4spec.quantize(b, name)
        with warnings.catch_warnings():
            warnings.simplefilter("error" if model_name.startswith("sm100") else "ignore", HostFallbackWarning)
            got = fp4spec.matmul(qa, qb, accumulator=model_name)
        want = fp4spec.matmul(qa.to_numpy(), qb.to_numpy(), accumulator=model_name)
        assert_bits(got, want, f"{model_name} random {name}")


def test_triton_refuses_formats_its_kernel_does_not_take():
    from fp4spec.backends.triton import TritonBackend

    be = TritonBackend.__new__(TritonBackend)
    q4 = fp4spec.quantize(np.ones((4, 64), np.float32), "nvfp4")
    q0 = fp4spec.quantize(np.ones((4, 64), np.float32), "nvint4_e0m3")
    assert be.why_matmul_unsupported(q4, q4) == ""
    assert "e0m3" in be.why_matmul_unsupported(q0, q0)


@gpu
@pytest.mark.gpu
def test_gpu_operands_the_kernel_does_not_take_run_on_the_emulator():
    """E0M3 operands under sm100-mxf4nvf4 on CUDA: auto runs the emulator (with the warning),
    not the triton GEMM (which would refuse them)."""
    from fp4spec.api import MatmulOnHostWarning

    x = torch.randn(32, 64, device="cuda")
    q = fp4spec.quantize(x, "nvint4_e0m3")
    with pytest.warns(MatmulOnHostWarning):
        got = fp4spec.matmul(q, q, accumulator="sm100-mxf4nvf4")
    want = fp4spec.matmul(q.to_numpy(), q.to_numpy(), accumulator="sm100-mxf4nvf4")
    assert_bits(got, want, "e0m3")


@interp_only
def test_fallback_with_torch_operands_and_tensor_scales():
    """Torch operands carry g (and c) as tensors; the emulator fallback reads them on the CPU."""
    case = GENERATORS["wide_scales"](np.random.default_rng(3), fp4spec.get_accumulator("sm100-mxf4nvf4"),
                                     fp4spec.get_scheme("nvfp4"), 8, 8, 128)
    want = fp4spec.matmul(case.qa, case.qb, accumulator="sm100-mxf4nvf4", c=case.c)
    c = None if case.c is None else torch.from_numpy(np.asarray(case.c))
    with G.interpreter_model_dot(), warnings.catch_warnings():
        warnings.simplefilter("ignore", HostFallbackWarning)
        got = G.matmul(case.qa.to_torch("cpu"), case.qb.to_torch("cpu"), accumulator="sm100-mxf4nvf4", c=c)
    assert_bits(got, want, "torch operands")
