"""torch_generic equals the numpy emulator bit for bit, on the CPU.

* Element encode: every catalogued format x every rounding mode over every bfloat16 value;
  the overflow / NaN / negative-zero policies (errors included) on the element sweep;
  float64 inputs off the float32 grid; sr with 1..32 random bits; hypothesis floats.
* MX (every element, every scale rule, both profiles) x every rounding mode, rowwise and
  axis=0, on adversarial tensors (ties after scaling, binade edges, subnormals, zeros/-0,
  single values, saturation, NaN/Inf, huge and tiny blocks) and hypothesis tensors: codes,
  scale codes and dequantized bits (NaN = NaN).
* HiF4 in both arithmetics: codes, E6M2 scales and the micro-exponent bits on adversarial
  groups (element ties, the E1 thresholds, the E6M2 clamps, bfloat16 ties of the scale),
  rowwise / axis=0 / padded, NaN/Inf groups, the error message, input dtypes; dequantize.
* Once the torch backend claims these schemes (the integration patch), the Backend
  interface too: quantize and dequantize of every claimed scheme x rounding, encode of
  every claimed format; until then those tests skip.
"""

from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

torch = pytest.importorskip("torch")

import fp4spec
from fp4spec.backends import torch_generic as G  # noqa: E402
from fp4spec.backends.base import resolve_scheme  # noqa: E402
from fp4spec.conformance import builders  # noqa: E402
from fp4spec.conformance import strategies as fst  # noqa: E402
from fp4spec.emulator import scaling  # noqa: E402
from fp4spec.emulator import hif4 as nh  # noqa: E402
from fp4spec.emulator.elements import encode as np_encode  # noqa: E402
from fp4spec.hif4 import CONST_REC, e6m2_code, e6m2_reciprocal, to_bf16  # noqa: E402
from fp4spec.elements import magnitude_grid  # noqa: E402
from fp4spec.rounding import NAN_POLICIES, NEG_ZERO_POLICIES, OVERFLOW_POLICIES  # noqa: E402

#: The CPU always; CUDA where there is a GPU (the lead's GPU check: ``-k cuda``).
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
pytestmark = [pytest.mark.parametrize("dev", DEVICES), pytest.mark.filterwarnings("ignore::RuntimeWarning")]

MODES = fp4spec.ROUNDING_MODES
FORMATS = tuple(fp4spec.formats)
MX = [(n, r) for n in G.MX_SCHEMES for r in G.MX_RULES]
MX_IDS = [f"{n}-{r}" for n, r in MX]
PROFILES = ("ocp", "torchao")

BF16 = np.arange(1 << 16, dtype=np.uint16).view(ml_dtypes.bfloat16).astype(np.float32)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Single-threaded torch: these tensors are small, and on a busy 2-core machine intra-op
    threads mostly wait for each other."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _t(a, dev="cpu"):
    """A torch tensor of a numpy array on ``dev`` (a writable copy: torch warns on read-only arrays)."""
    return torch.from_numpy(np.array(a, order="C")).to(dev)


def _n(t):
    return t.detach().cpu().numpy()


def _rbits(rng, shape, sr_bits=8):
    return builders.build_rbits(rng, shape, sr_bits).astype(np.int64)


def _outcome(fn):
    """The codes, or the exception's type and message (both paths must fail alike)."""
    try:
        out = fn()
    except (ValueError, OverflowError, TypeError) as exc:
        return type(exc), str(exc)
    return np.asarray(_n(out) if isinstance(out, torch.Tensor) else out)


def assert_same_outcome(got, want):
    if isinstance(want, tuple) or isinstance(got, tuple):
        assert got == want
    else:
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def assert_same_f32(got, want):
    """float32 bits equal, NaN matching NaN (payloads are not specified)."""
    g = np.ascontiguousarray(_n(got) if isinstance(got, torch.Tensor) else got, np.float32)
    w = np.ascontiguousarray(want, np.float32)
    assert g.shape == w.shape
    gn, wn = np.isnan(g), np.isnan(w)
    np.testing.assert_array_equal(gn, wn)
    np.testing.assert_array_equal(g.view(np.uint32)[~gn], w.view(np.uint32)[~wn])


# =================================================================================================
# element encode
# =================================================================================================

@pytest.mark.parametrize("fmt", FORMATS)
def test_encode_every_bf16(dev, fmt):
    """Every bfloat16 value (NaN, +-Inf, subnormals, -0 included), every rounding mode."""
    f = fp4spec.get_format(fmt)
    nan = "auto" if f.has_nan else "zero"
    rng = np.random.default_rng(len(fmt))
    x = _t(BF16, dev)
    for mode in MODES:
        rb = _rbits(rng, BF16.shape) if mode == "sr" else None
        got = G.encode_elements(x, fmt, mode, None if rb is None else _t(rb, dev), nan=nan)
        assert got.dtype == torch.uint8 and got.device == x.device and got.shape == x.shape
        np.testing.assert_array_equal(_n(got), np_encode(BF16, fmt, mode, rbits=rb, nan=nan), err_msg=mode)


@pytest.mark.parametrize("fmt", FORMATS)
def test_encode_policies(dev, fmt):
    """overflow x neg_zero x rounding on the element sweep, and every NaN policy: same codes,
    or the same error (type and message)."""
    f = fp4spec.get_format(fmt)
    x = builders.element_sweep(f)
    xt = _t(x, dev)
    for mode in MODES:
        rb = _rbits(np.random.default_rng(0), x.shape) if mode == "sr" else None
        rbt = None if rb is None else _t(rb, dev)
        for overflow in OVERFLOW_POLICIES:
            for neg_zero in NEG_ZERO_POLICIES:
                kw = dict(overflow=overflow, neg_zero=neg_zero, nan="zero" if f.has_zero else "max")
                want = _outcome(lambda: np_encode(x, fmt, mode, rbits=rb, **kw))
                got = _outcome(lambda: G.encode_elements(xt, fmt, mode, rbt, **kw))
                assert_same_outcome(got, want)
    xn = np.array([1.0, -np.nan, np.nan, -0.0, -1.0, np.inf], np.float32)
    for nan in NAN_POLICIES:
        for neg_zero in NEG_ZERO_POLICIES:
            want = _outcome(lambda: np_encode(xn, fmt, nan=nan, neg_zero=neg_zero))
            got = _outcome(lambda: G.encode_elements(_t(xn, dev), fmt, nan=nan, neg_zero=neg_zero))
            assert_same_outcome(got, want)


@pytest.mark.parametrize("fmt", FORMATS)
def test_encode_float64_and_half_inputs(dev, fmt):
    """float64 values just off the midpoints (not float32 values) are compared in float64;
    float16/bfloat16 tensors widen exactly."""
    f = fp4spec.get_format(fmt)
    grid = np.array([float(g) for g in magnitude_grid(f, False)])
    mids = (grid[:-1] + grid[1:]) / 2
    x = np.concatenate([mids, mids * (1 + 2.0 ** -40), mids * (1 - 2.0 ** -40), grid, [0.0, 1e300, 5e-324]])
    x = np.concatenate([x, -x]) if f.signed else x
    rng = np.random.default_rng(1)
    for mode in MODES:
        rb = _rbits(rng, x.shape, 32) if mode == "sr" else None
        got = G.encode_elements(_t(x, dev), fmt, mode, None if rb is None else _t(rb, dev), sr_bits=32)
        np.testing.assert_array_equal(_n(got), np_encode(x, fmt, mode, rbits=rb, sr_bits=32), err_msg=mode)
    for dt, npdt in ((torch.float16, np.float16), (torch.bfloat16, ml_dtypes.bfloat16)):
        xs = x[np.abs(x) < 6e4].astype(npdt)
        got = G.encode_elements(_t(xs.astype(np.float32), dev).to(dt), fmt, "rne")
        np.testing.assert_array_equal(_n(got), np_encode(xs, fmt, "rne"))


@pytest.mark.parametrize("sr_bits", [1, 2, 8, 24, 32])
def test_encode_sr_bits(dev, sr_bits):
    rng = np.random.default_rng(sr_bits)
    for fmt in FORMATS:
        x = builders.element_sweep(fp4spec.get_format(fmt))
        rb = _rbits(rng, x.shape, sr_bits)
        got = G.encode_elements(_t(x, dev), fmt, "sr", _t(rb, dev), sr_bits)
        np.testing.assert_array_equal(_n(got), np_encode(x, fmt, "sr", rbits=rb, sr_bits=sr_bits), err_msg=fmt)


def test_encode_sr_broadcast_rbits(dev):
    x = builders.element_sweep(fp4spec.get_format("e2m1")).reshape(1, -1).repeat(3, 0)
    rb = np.array([[0], [100], [255]], np.int64)
    got = G.encode_elements(_t(x, dev), "e2m1", "sr", _t(rb, dev))
    np.testing.assert_array_equal(_n(got), np_encode(x, "e2m1", "sr", rbits=rb))


def test_encode_argument_errors(dev):
    x = _t(np.ones(4, np.float32), dev)
    with pytest.raises(ValueError, match="rounding: 'nearest' is not one of"):
        G.encode_elements(x, "e2m1", "nearest")
    with pytest.raises(ValueError, match="rbits: rounding='sr' needs explicit random bits"):
        G.encode_elements(x, "e2m1", "sr")
    with pytest.raises(ValueError, match="rbits: only used with rounding='sr', not 'rne'"):
        G.encode_elements(x, "e2m1", "rne", _t(np.zeros(4, np.int64), dev))
    with pytest.raises(ValueError, match=r"sr_bits: 33 is not an integer in \[1, 32\]"):
        G.encode_elements(x, "e2m1", "sr", _t(np.zeros(4, np.int64), dev), 33)
    with pytest.raises(ValueError, match="overflow: 'inf' needs a format with Inf"):
        G.encode_elements(x, "e2m1", overflow="inf")
    with pytest.raises(ValueError, match="format: unknown format"):
        G.encode_elements(x, "e9m9")
    with pytest.raises(TypeError, match="y: dtype torch.int32 is not a float dtype"):
        G.encode_elements(x.to(torch.int32), "e2m1")


def test_encode_nan_sign_override(dev):
    """``nan_negative`` decides the NaN code's sign, whatever the NaN's own sign bit."""
    y = _t(np.array([np.nan, -np.nan, np.nan, 1.0], np.float32), dev)
    nn = torch.tensor([True, False, False, True], device=dev)
    got = G.encode_elements(y, "e4m3", nan="nan", nan_negative=nn)
    assert got.tolist() == [0xFF, 0x7F, 0x7F, 0x38]


def test_encode_wide_format_gives_uint16(dev):
    """A registered format wider than 8 bits: uint16 codes, as the emulator's."""
    fmt = fp4spec.float_format("e5m4", name="e5m4_torch_generic_test")
    x = builders.element_sweep(fmt)
    for mode in ("rne", "rto"):
        got = G.encode_elements(_t(x, dev), fmt, mode)
        assert got.dtype == torch.uint16
        np.testing.assert_array_equal(_n(got), np_encode(x, fmt, mode))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fmt=st.sampled_from(FORMATS), mode=st.sampled_from(MODES), sr_bits=st.integers(1, 32),
       x=hnp.arrays(np.float32, st.integers(1, 64), elements=st.floats(width=32)), seed=st.integers(0, 2 ** 32 - 1))
def test_encode_hypothesis(dev, fmt, mode, sr_bits, x, seed):
    f = fp4spec.get_format(fmt)
    nan = "nan" if f.has_nan else "signed_zero" if f.has_zero else "max"
    rb = _rbits(np.random.default_rng(seed), x.shape, sr_bits) if mode == "sr" else None
    got = G.encode_elements(_t(x, dev), fmt, mode, None if rb is None else _t(rb, dev), sr_bits, nan=nan)
    np.testing.assert_array_equal(_n(got), np_encode(x, fmt, mode, rbits=rb, sr_bits=sr_bits, nan=nan))


# =================================================================================================
# MX with any float element
# =================================================================================================

def mx_torch(dev, x, sch, axis=-1, rounding="rne", rbits=None, sr_bits=8):
    """The layout of torch_backend.quantize_tensors: blocked axis last, (..., n_blocks, k)."""
    xm = torch.movedim(_t(x, dev), axis, -1).contiguous()
    k = sch.block_size
    xb = xm.reshape(*xm.shape[:-1], -1, k)
    rb = None if rbits is None else torch.movedim(_t(rbits, dev), axis, -1).reshape(xb.shape)
    codes, scales = G.quantize_mx_blocks(xb, sch, rounding, rb, sr_bits)
    assert codes.dtype == torch.uint8 and scales.dtype == torch.uint8
    return codes, scales


def assert_mx_equal(dev, x, sch, axis=-1, rounding="rne", rbits=None, sr_bits=8):
    ref = fp4spec.quantize(x, sch, axis=axis, rounding=rounding, rbits=rbits, sr_bits=sr_bits)
    m = ref.moved()
    codes, scales = mx_torch(dev, x, sch, axis, rounding, rbits, sr_bits)
    np.testing.assert_array_equal(_n(scales), m["scales"])
    np.testing.assert_array_equal(_n(codes.reshape(m["codes"].shape)), m["codes"])
    return codes, scales, ref


def mx_adversarial(sch, seed, block_rows=4, block_cols=9):
    """Every block kind of the conformance builders (ties, binade edges, subnormals, zeros,
    single values, saturation, NaN/Inf...), amaxes spread over 40 binades, the tensor amax
    typical or anywhere in float32; plus blocks of -0.0, float32 max and tiny values."""
    rng = np.random.default_rng(seed)
    kinds = [builders.BLOCK_KINDS[(seed + i) % len(builders.BLOCK_KINDS)] for i in range(block_rows * block_cols)]
    amax = builders.global_amax(rng, sch, int(rng.integers(-10, 11)) if seed % 2 else None)
    x = builders.build_tensor(rng, sch, kinds, block_rows=block_rows, block_cols=block_cols, amax=amax, spread=40)
    k = sch.block_size
    x[0, :k] = -0.0
    x[1, k:2 * k] = np.float32(3.4028235e38) * np.where(np.arange(k) % 2, 1, -1).astype(np.float32)
    x[2, 2 * k:3 * k] = np.float32(2.0 ** -149) * np.arange(k, dtype=np.float32)
    return x


@pytest.mark.parametrize("name,rule", MX, ids=MX_IDS)
def test_mx_every_rounding_adversarial(dev, name, rule):
    """Both profiles, every rounding mode, rowwise and axis=0 (the transposed tensor)."""
    for profile in PROFILES:
        sch = fp4spec.get_scheme(name, scale_rule=rule, profile=profile)
        for seed in range(2):
            x = mx_adversarial(sch, seed + 10 * len(profile))
            rng = np.random.default_rng(seed)
            for mode in MODES:
                rb = _rbits(rng, x.shape) if mode == "sr" else None
                codes, scales, ref = assert_mx_equal(dev, x, sch, -1, mode, rb)
                if mode == "rne":
                    assert_same_f32(G.dequantize_mx_blocks(codes, scales, sch),
                                    scaling.dequantize_mx(ref.moved()["codes"].reshape(codes.shape), ref.scales, sch))
                xt = np.ascontiguousarray(x.T)
                assert_mx_equal(dev, xt, sch, 0, mode, None if rb is None else np.ascontiguousarray(rb.T))


@pytest.mark.parametrize("name", G.MX_SCHEMES)
def test_mx_ties_at_every_midpoint(dev, name):
    """Each block: the element max times 2^k (so floor gives e = k) and every midpoint of the
    element grid (the one above max included), one float32 ulp either side, and every grid
    value, times 2^k with random signs: every tie of the element grid after scaling."""
    sch = fp4spec.get_scheme(name)
    el = sch.element
    grid = np.array([float(g) for g in magnitude_grid(el, False)])
    mids = (grid[:-1] + grid[1:]) / 2
    vals = np.concatenate([mids, np.nextafter(mids.astype(np.float32), np.float32(0)),
                           np.nextafter(mids.astype(np.float32), np.float32(np.inf)), grid[:-1]]).astype(np.float64)
    k = sch.block_size
    n = -(-len(vals) // (k - 1))
    vals = np.resize(vals, n * (k - 1)).reshape(n, k - 1)
    rng = np.random.default_rng(3)
    rows = []
    for e in (-140, -127, -126, -20, -1, 0, 3, 100, 127 - el.emax):
        blocks = np.concatenate([np.full((n, 1), el.max), vals], axis=1) * rng.choice([-1.0, 1.0], (n, k))
        rows.append(np.ldexp(blocks, e).astype(np.float32).reshape(-1))
    x = np.stack(rows)
    for profile in PROFILES:
        for rule in G.MX_RULES:
            s = fp4spec.get_scheme(name, scale_rule=rule, profile=profile)
            for mode in MODES:
                rb = _rbits(rng, x.shape) if mode == "sr" else None
                assert_mx_equal(dev, x, s, -1, mode, rb)


@pytest.mark.parametrize("name", G.MX_SCHEMES)
def test_mx_nonfinite_blocks_and_nan_signs(dev, name):
    """NaN-scale blocks: a NaN scaled value takes x's sign bit (+-NaN and +-Inf times 0 alike,
    not the device's sign of Inf * 0); torchao's Inf-only blocks."""
    k = 32
    x = np.zeros((4, 2 * k), np.float32)
    x[0, :4] = [np.inf, -np.inf, np.nan, -np.nan]
    x[1, :3] = [np.inf, 1.0, -2.0]
    x[2, 5], x[2, k + 7] = -np.inf, np.nan
    x[3, :] = np.inf
    x[3, 1::2] = -np.inf
    for profile in PROFILES:
        for rule in G.MX_RULES:
            sch = fp4spec.get_scheme(name, scale_rule=rule, profile=profile)
            codes, _, ref = assert_mx_equal(dev, x, sch)
            assert_same_f32(G.dequantize_mx_blocks(codes, _t(ref.scales, dev), sch), fp4spec.dequantize(ref).reshape(codes.shape))
    if fp4spec.get_format(sch.element).has_nan:
        from fp4spec.elements import canonical_nan_code
        pos, neg = canonical_nan_code(sch.element, False), canonical_nan_code(sch.element, True)
        codes, _ = mx_torch(dev, x, fp4spec.get_scheme(name))
        assert codes[0, 0, :4].tolist() == [pos, neg, pos, neg]  # +Inf, -Inf, NaN, -NaN
        assert codes[3, 0].tolist() == [pos, neg] * (k // 2)


@pytest.mark.parametrize("name", G.MX_SCHEMES)
def test_mx_dequantize_every_code_and_scale(dev, name):
    sch = fp4spec.get_scheme(name)
    every = np.resize(np.arange(1 << sch.element.bits, dtype=np.uint8), 256).reshape(-1, 32)  # 8 blocks
    codes = np.tile(every, (8, 1, 1))  # (8 scales, 8 blocks, 32)
    scales = np.repeat(np.array([0, 1, 2, 100, 127, 200, 254, 255], np.uint8)[:, None], 8, axis=1)
    got = G.dequantize_mx_blocks(_t(codes, dev), _t(scales, dev), sch)
    assert got.dtype == torch.float32
    assert_same_f32(got, scaling.dequantize_mx(codes, scales, sch))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), spec=st.sampled_from([(n, r, p) for n, r in MX for p in PROFILES]),
       mode=st.sampled_from(MODES), sr_bits=st.sampled_from([1, 8, 24]), axis=st.sampled_from([-1, 0]))
def test_mx_hypothesis(dev, data, spec, mode, sr_bits, axis):
    name, rule, profile = spec
    sch = fp4spec.get_scheme(name, scale_rule=rule, profile=profile)
    x = data.draw(fst.tensors(sch))
    if axis == 0:
        x = np.ascontiguousarray(x.T)
    rb = _rbits(np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1))), x.shape, sr_bits) \
        if mode == "sr" else None
    assert_mx_equal(dev, x, sch, axis, mode, rb, sr_bits)


# =================================================================================================
# HiF4
# =================================================================================================

ARITHS = ("float64", "float32")
HIF4_FIELDS = ("codes", "scales", "e1_8", "e1_16")


def _f32_near(v, ulps):
    y = np.float32(v)
    for _ in range(abs(ulps)):
        y = np.nextafter(y, np.float32(np.inf if ulps > 0 else 0))
    return y


def hif4_adversarial(n, seed=0):
    """Groups around exact element ties (q = k + 1/2), the E1 thresholds (V8 * REC = 4,
    V16 * REC = 2), the E6M2 clamps, bfloat16 ties of the scale factor, one float32 ulp
    either side; huge dynamic range, single values, subnormals, zeros and -0."""
    rng = np.random.default_rng(seed)
    out = np.zeros((n, 64), np.float32)
    for g in range(n):
        kind = int(rng.integers(0, 9))
        e = int(rng.integers(-52, 18))
        if kind == 0:
            vmax = np.float32(7 * 2.0 ** e)
        elif kind == 1:
            vmax = _f32_near(rng.choice([49152 * 512 / 73, 2.0 ** -48 * 512 / 73, 1e38, 1e-30, 3e5]),
                             int(rng.integers(-3, 4)))
        elif kind == 2:  # Vmax * Const_rec near a bfloat16 tie
            vmax = _f32_near((rng.integers(128, 256) + 0.5) * 2.0 ** (e - 7) * 512 / 73, int(rng.integers(-3, 4)))
        elif kind == 3:
            out[g] = (rng.standard_normal(64) * np.exp2(rng.uniform(-149, 127, 64))).astype(np.float32)
            continue
        elif kind == 4:
            out[g, rng.integers(0, 64)] = np.float32(rng.choice([-1, 1]) * np.exp2(rng.uniform(-160, 127)))
            continue
        elif kind == 5:  # float32 subnormals, -0 and negative values that round to -0
            out[g] = np.float32(2.0 ** -149) * rng.integers(-40, 40, 64).astype(np.float32)
            out[g, ::7] = -0.0
            continue
        else:
            vmax = np.float32(rng.uniform(4, 9) * 2.0 ** e)
        vmax = np.float32(min(float(vmax), 3.4028234e38))
        rec = float(e6m2_reciprocal(e6m2_code(to_bf16(Fraction(float(vmax)) * CONST_REC))))
        cands = [0.0, 4 / rec, 2 / rec, 8 / rec / 2]
        cands += [(k + 0.5) * 2.0 ** (de - 2) / rec for k in range(8) for de in range(3)]
        vals = [float(_f32_near(c, u)) for c in cands for u in (-1, 0, 1) if c < 3e38]
        vals = [v for v in vals if v <= vmax]
        row = np.array(rng.choice(vals, 64), np.float32)
        row[rng.random(64) < 0.2] = 0
        for lvl2 in range(8):
            if rng.random() < 0.25:
                row[8 * lvl2:8 * lvl2 + 8] *= np.float32(2.0 ** -int(rng.integers(1, 4)))
        row[rng.integers(0, 64)] = vmax
        out[g] = row * rng.choice(np.array([-1, 1], np.float32), 64)
    return out


HIF4_X = hif4_adversarial(600, seed=5)


def assert_hif4_equal(dev, x, **kw):
    want = nh.hif4_quantize(x, **kw)
    got = G.hif4_quantize(_t(x, dev) if isinstance(x, np.ndarray) else x, **kw)
    for f in HIF4_FIELDS:
        assert got[f].dtype == torch.uint8, f
        np.testing.assert_array_equal(_n(got[f]), want[f], err_msg=f)
    axis = kw.get("axis", -1)
    assert_same_f32(G.hif4_dequantize(**got, axis=axis), nh.hif4_dequantize(**want, axis=axis))
    return got


@pytest.mark.parametrize("arith", ARITHS)
def test_hif4_adversarial_rowwise_and_axis0(dev, arith):
    x = HIF4_X.reshape(-1, 8 * 64)  # 75 rows of 8 groups
    assert_hif4_equal(dev, x, arith=arith)
    assert_hif4_equal(dev, np.ascontiguousarray(x.T), arith=arith, axis=0)
    assert_hif4_equal(dev, x.reshape(5, 15, 512), arith=arith, axis=2)


@pytest.mark.parametrize("arith", ARITHS)
def test_hif4_random_and_conformance_tensors(dev, arith):
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((64, 256)) * np.exp2(rng.integers(-60, 60, (64, 1)))).astype(np.float32)
    assert_hif4_equal(dev, x, arith=arith)
    assert_hif4_equal(dev, x, arith=arith, axis=0)
    sch = fp4spec.get_scheme("hif4")
    for seed in range(4):
        r = np.random.default_rng(seed)
        kinds = builders.kinds_for(sch)
        t = builders.build_tensor(r, sch, [kinds[(seed + i) % len(kinds)] for i in range(12)], block_rows=3,
                                  block_cols=4, spread=40)
        assert_hif4_equal(dev, t, arith=arith)


@pytest.mark.parametrize("arith", ARITHS)
def test_hif4_padding_and_nonfinite_groups(dev, arith):
    x = HIF4_X[:24].reshape(4, 6 * 64)[:, :-37].copy()  # a ragged last group
    assert_hif4_equal(dev, x, arith=arith, pad=True)
    assert_hif4_equal(dev, np.ascontiguousarray(x.T), arith=arith, pad=True, axis=0)
    y = HIF4_X[:32].reshape(4, 512).copy()
    y[0, 3], y[1, 70], y[2, 200], y[2, 201], y[3, :64] = np.nan, np.inf, -np.inf, -np.nan, np.inf
    got = assert_hif4_equal(dev, y, arith=arith, nonfinite="propagate")
    assert (got["scales"] == 0xFF).sum() == 4
    assert_hif4_equal(dev, np.ascontiguousarray(y.T), arith=arith, nonfinite="propagate", axis=0)


def test_hif4_zero_and_negative_zero_groups(dev):
    x = np.zeros((3, 128), np.float32)
    x[1] = -0.0
    x[2, :64] = -np.float32(2.0 ** -149)
    for arith in ARITHS:
        got = assert_hif4_equal(dev, x, arith=arith)
        assert got["codes"][2, :64].tolist() == [8] * 64  # a negative value rounding to 0 keeps its sign


@pytest.mark.parametrize("arith", ARITHS)
def test_hif4_input_dtypes(dev, arith):
    x = HIF4_X[:16].reshape(2, 512)
    for dt, npdt in ((torch.float16, np.float16), (torch.bfloat16, ml_dtypes.bfloat16)):
        xs = np.clip(x, -6e4, 6e4).astype(npdt)
        got = G.hif4_quantize(_t(xs.astype(np.float32), dev).to(dt), arith=arith)
        want = nh.hif4_quantize(xs, arith=arith)
        for f in HIF4_FIELDS:
            np.testing.assert_array_equal(_n(got[f]), want[f])
    x64 = x.astype(np.float64) * (1 + 2.0 ** -30)  # rounds to float32 first (RNE)
    x64[0, 0] = 1e300  # beyond float32: Inf, a NaN group
    assert_hif4_equal(dev, x64, arith=arith, nonfinite="propagate")


def test_hif4_errors_match_emulator(dev):
    x = HIF4_X[:8].reshape(2, 256).copy()
    cases = [
        (x[:, :100], {}),
        (x, {"arith": "float16"}),
        (x, {"nonfinite": "zero"}),
        (x, {"pad": 1}),
        (x, {"axis": 2}),
    ]
    bad = x.copy()
    bad[1, 77] = -np.inf
    cases += [(bad, {}), (np.ascontiguousarray(bad.T), {"axis": 0})]
    big = x.astype(np.float64)
    big[0, 5] = 1e300
    cases.append((big, {}))
    for arr, kw in cases:
        assert _outcome(lambda: G.hif4_quantize(_t(arr, dev), **kw)) == _outcome(lambda: nh.hif4_quantize(arr, **kw))
    with pytest.raises(TypeError, match="x: dtype torch.int32 is not supported"):
        G.hif4_quantize(torch.zeros((1, 64), dtype=torch.int32))
    q = nh.hif4_quantize(x)
    for field, value, match in (("codes", 16, "codes: every entry must lie in 0..15"),
                                ("e1_8", 2, "e1_8: every entry must lie in 0..1")):
        bad_q = {k: np.array(v) for k, v in q.items()}
        bad_q[field].flat[0] = value
        assert _outcome(lambda: G.hif4_dequantize(**{k: _t(v, dev) for k, v in bad_q.items()})) == \
            _outcome(lambda: nh.hif4_dequantize(**bad_q))
        with pytest.raises(ValueError, match=match):
            G.hif4_dequantize(**{k: _t(v, dev) for k, v in bad_q.items()})
    shapes = {k: np.array(v) for k, v in q.items()}
    shapes["e1_16"] = shapes["e1_16"][..., :8]
    assert _outcome(lambda: G.hif4_dequantize(**{k: _t(v, dev) for k, v in shapes.items()})) == \
        _outcome(lambda: nh.hif4_dequantize(**shapes))


def test_hif4_dequantize_nan_scale_and_every_code(dev):
    codes = np.tile(np.arange(16, dtype=np.uint8), (4, 4))  # 4 groups of 64
    scales = np.array([[0], [0xC1], [0xFE], [0xFF]], np.uint8)
    rng = np.random.default_rng(0)
    e1_8 = rng.integers(0, 2, (4, 1, 8)).astype(np.uint8)
    e1_16 = rng.integers(0, 2, (4, 1, 16)).astype(np.uint8)
    got = G.hif4_dequantize(_t(codes, dev), _t(scales, dev), _t(e1_8, dev), _t(e1_16, dev))
    assert got.dtype == torch.float32
    assert_same_f32(got, nh.hif4_dequantize(codes, scales, e1_8, e1_16))


@pytest.mark.parametrize("arith", ARITHS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), axis=st.sampled_from([-1, 0]))
def test_hif4_hypothesis(dev, arith, data, axis):
    x = data.draw(fst.tensors("hif4"))
    if axis == 0:
        x = np.ascontiguousarray(x.T)
    assert_hif4_equal(dev, x, arith=arith, axis=axis)


# =================================================================================================
# through the torch backend, once it claims these (the integration patch)
# =================================================================================================

SPECS = [*G.mx_scheme_specs(), "nvfp4", "nvfp4_2d", "ufp4", "nvint4", "hif4"]


def _backend(dev):
    from fp4spec.backends.torch_backend import TorchBackend

    return TorchBackend(device=dev)


def _claimed_modes(backend, spec):
    caps = backend.capabilities()
    if not caps.supports_scheme(spec):
        return ()
    return tuple(m for m in caps.roundings_for(spec) if m in MODES)


@pytest.mark.parametrize("spec", SPECS)
def test_backend_quantize_claimed(dev, spec):
    backend = _backend(dev)
    modes = _claimed_modes(backend, spec)
    if not modes:
        pytest.skip(f"torch backend does not claim {spec} yet")
    sch = resolve_scheme(spec)
    rng = np.random.default_rng(len(spec))
    kinds = builders.kinds_for(sch)
    x = builders.build_tensor(rng, sch, [kinds[i % len(kinds)] for i in range(8)], block_rows=2, block_cols=4,
                              spread=40)
    for axis, xx in ((-1, x), (0, np.ascontiguousarray(x.T))):
        if sch.is_2d and axis == 0:
            continue
        for mode in modes:
            rb = _rbits(rng, xx.shape) if mode == "sr" else None
            ref = fp4spec.quantize(xx, sch, axis=axis, rounding=mode, rbits=rb)
            q = backend.quantize(xx, sch, rounding=mode, rbits=rb, axis=axis)
            assert q.equals(ref), (spec, mode, axis)
            if mode == "rne":
                assert_same_f32(backend.dequantize(ref), fp4spec.dequantize(ref))


def test_backend_encode_claimed(dev):
    backend = _backend(dev)
    caps = backend.capabilities()
    if "encode" not in caps.operations:
        pytest.skip("torch backend does not claim encode")
    todo = [f for f in FORMATS if f in caps.element_formats()]
    rng = np.random.default_rng(0)
    for fmt in todo:
        f = fp4spec.get_format(fmt)
        x = builders.element_sweep(f)
        for mode in caps.rounding:
            rb = _rbits(rng, x.shape) if mode == "sr" else None
            got = backend.encode(x, fmt, mode, rbits=rb)
            np.testing.assert_array_equal(got, fp4spec.encode(x, fmt, mode, rbits=rb), err_msg=f"{fmt} {mode}")
        if not f.has_nan:
            with pytest.raises(ValueError, match="nan: NaN input cannot be encoded"):
                backend.encode(np.array([1.0, np.nan], np.float32), fmt)


def test_quantize_api_hif4_torch_tensors(dev):
    """fp4spec.quantize / dequantize of torch tensors with backend='torch' (the quantize_api patch)."""
    backend = _backend(dev)
    if not _claimed_modes(backend, "hif4"):
        pytest.skip("torch backend does not claim hif4 yet")
    x = HIF4_X[:32].reshape(4, 512)
    ref = fp4spec.quantize(x, "hif4")
    q = fp4spec.quantize(_t(x, dev), "hif4", backend="torch")
    assert q.backend == "torch" and q.is_torch and q.e1_8 is not None
    assert q.equals(ref)
    assert_same_f32(fp4spec.dequantize(q), fp4spec.dequantize(ref))
