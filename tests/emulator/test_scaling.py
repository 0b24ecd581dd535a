"""The vectorized emulator equals the scalar reference, bit for bit, for every scheme, rule and profile."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fp4spec
from fp4spec.block_schemes import get_scheme
from fp4spec.emulator import scaling
from fp4spec.emulator.elements import encode
from fp4spec.number_formats import get_format
from fp4spec.api.block_scaling import quantize
from fp4spec.scaling import dequantize_reference, quantize_reference

F32 = np.float32


def adversarial(seed: int, shape, scheme, specials: bool) -> np.ndarray:
    """float32 x whose blocks are each one kind of hard case: grid values and midpoints
    (ties after power-of-two scaling), amax significands 1, 1.25, 1.5, 1.75 and just below 2,
    zeros, fp32 subnormals, wide ranges inside a block and across blocks, NaN/Inf."""
    rng = np.random.default_rng(seed)
    k = scheme.block_size
    flat = np.empty((int(np.prod(shape)) // k, k), np.float64)
    grid = np.array([v for v in scheme.element.values if np.isfinite(v) and v >= 0])
    mids = (grid[:-1] + grid[1:]) / 2
    top = grid.max()
    for b in range(flat.shape[0]):
        e = int(rng.integers(-140, 110))
        kind = int(rng.integers(9))
        if kind == 0:
            v = rng.standard_normal(k) * 2.0 ** e
        elif kind == 1:
            v = rng.choice(grid, k) * 2.0 ** e
            v[rng.integers(k)] = top * 2.0 ** e
        elif kind == 2:
            v = rng.choice(mids, k) * 2.0 ** e
            v[rng.integers(k)] = top * 2.0 ** e
        elif kind == 3:
            v = np.where(rng.random(k) < 0.5, 0.0, -0.0)
        elif kind == 4:
            v = rng.integers(0, 1 << 23, k) * 2.0 ** -149
        elif kind == 5:
            sig = rng.choice([1.0, 1.25, 1.5, 1.75, 2 - 2 ** -23, 1 + 2 ** -23, 1.5 - 2 ** -23, 1.75 + 2 ** -22], k)
            v = sig * 2.0 ** rng.integers(e - 3, e + 1, k)
        elif kind == 6:
            v = rng.standard_normal(k) * 2.0 ** rng.integers(-149, 127, k).astype(float)
        elif kind == 7:
            v = rng.uniform(-1, 1, k) * 2.0 ** e * rng.choice([1, 1e-3, 1e-6], k)
        else:
            v = rng.choice(grid, k) * 2.0 ** e * (1 + rng.integers(-2, 3, k) * 2.0 ** -23)
        v = v * np.where(rng.random(k) < 0.5, -1, 1)
        if specials and rng.random() < 0.25:
            v[rng.integers(k)] = rng.choice([np.nan, np.inf, -np.inf])
        flat[b] = v
    with np.errstate(over="ignore"):
        x = flat.astype(np.float32).reshape(shape)
    return np.where(np.isinf(x) & np.isfinite(flat.reshape(shape)), np.sign(x) * np.finfo(np.float32).max, x).astype(np.float32)


def same_bits_nan_aware(a: np.ndarray, b: np.ndarray) -> bool:
    na, nb = np.isnan(a), np.isnan(b)
    return bool(np.array_equal(na, nb) and np.array_equal(a[~na].view(np.uint32), b[~nb].view(np.uint32)))


def check_equal(x, scheme, rounding="rne", rbits=None, sr_bits=8):
    q = quantize(x, scheme, rounding=rounding, rbits=rbits, sr_bits=sr_bits)
    r = quantize_reference(x, scheme, rounding=rounding, rbits=rbits, sr_bits=sr_bits)
    assert q.equals(r), (scheme.describe(), np.argwhere(q.codes != r.codes)[:5], np.argwhere(q.scales != r.scales)[:5])
    assert same_bits_nan_aware(fp4spec.dequantize(q), dequantize_reference(q))


MX_CASES = [(name, rule, profile)
            for name in ("mxfp4", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp8_e4m3", "mxfp8_e5m2")
            for rule in ("floor", "ceil", "rceil", "even")
            for profile in ("ocp", "torchao")] + [("mxfp4", "rceil", "fouroversix")]


@pytest.mark.parametrize("name,rule,profile", MX_CASES)
@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), specials=st.booleans())
def test_mx_emulator_equals_reference(name, rule, profile, seed, specials):
    s = get_scheme(name, scale_rule=rule, profile=profile)
    check_equal(adversarial(seed, (2, 96), s, specials), s)


TWO_LEVEL_CASES = [
    ("nvfp4", {}),
    ("nvfp4", {"profile": "torchao"}),
    ("nvfp4", {"scale_rule": "4over6"}),
    ("nvfp4", {"scale_rule": "4over6", "error_mode": "mse", "scale_max": 256}),
    ("nvfp4_2d", {}),
    ("nvfp4_2d", {"profile": "torchao"}),
    ("nvfp4_2d", {"scale_rule": "4over6"}),
    ("nvfp4_2d", {"scale_rule": "4over6", "error_mode": "mse", "scale_max": 256}),
    ("ufp4", {}),
    ("ufp4", {"profile": "torchao"}),
    ("ufp4", {"block_size": 32, "element_max": 3.0, "scale": "e8m0", "scale_max": 2.0**100}),
    ("nvint4", {}),
    ("nvint4", {"profile": "torchao"}),
    # profile fouroversix: divided block scale, zeroed zero-scale blocks, S_dec = 0 for a zero tensor, torch's sums
    ("nvfp4", {"profile": "fouroversix"}),
    ("nvfp4", {"profile": "fouroversix", "element_max": 4.0}),
    ("nvfp4", {"profile": "fouroversix", "scale_rule": "4over6", "error_mode": "mse", "scale_max": 256}),
    ("nvfp4", {"profile": "fouroversix", "scale_rule": "4over6", "error_mode": "mae", "scale_max": 256}),
    ("nvfp4", {"profile": "fouroversix", "scale_rule": "4over6", "error_mode": "abs_max", "scale_max": 256}),
    ("nvfp4", {"scale_rule": "4over6", "error_mode": "abs_max"}),
    ("nvint4", {"profile": "fouroversix"}),
]


@pytest.mark.parametrize("name,overrides", TWO_LEVEL_CASES)
@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), specials=st.booleans())
def test_two_level_emulator_equals_reference(name, overrides, seed, specials):
    s = get_scheme(name, **overrides)
    shape = (32, 32) if s.is_2d else (3, 64)
    x = adversarial(seed, shape, s, specials)
    if np.random.default_rng(seed).random() < 0.3:  # a tensor with a small dynamic range
        x = np.where(np.isfinite(x), np.random.default_rng(seed).standard_normal(shape), x).astype(np.float32)
    check_equal(x, s)


@pytest.mark.parametrize("name,overrides", [("mxfp4", {}), ("mxfp8_e4m3", {"scale_rule": "rceil"}),
                                            ("nvfp4", {}), ("nvfp4", {"profile": "torchao"}),
                                            ("nvfp4", {"profile": "fouroversix", "scale_rule": "4over6"}),
                                            ("nvfp4_2d", {"scale_rule": "4over6"}), ("nvint4", {}), ("ufp4", {})])
@pytest.mark.parametrize("rounding", ["rna", "rtz", "rup", "rdn", "rto", "sr"])
@settings(max_examples=4, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1))
def test_rounding_modes_emulator_equals_reference(name, overrides, rounding, seed):
    s = get_scheme(name, **overrides)
    shape = (16, 32) if s.is_2d else (2, 64)
    x = adversarial(seed, shape, s, specials=False)
    rbits = None
    sr_bits = 8
    if rounding == "sr":
        sr_bits = int(np.random.default_rng(seed).choice([1, 4, 8, 12]))
        rbits = np.random.default_rng(seed + 1).integers(0, 1 << sr_bits, shape)
    check_equal(x, s, rounding, rbits, sr_bits)


def test_equal_along_other_axes_and_padding():
    s = get_scheme("nvfp4")
    x = adversarial(3, (48, 4), get_scheme("nvfp4", block_size=4), False)
    for name in ("mxfp4", "nvfp4", "nvint4"):
        q = quantize(x, name, axis=0, pad=True)
        r = quantize_reference(x, get_scheme(name), axis=0, pad=True)
        assert q.equals(r) and same_bits_nan_aware(fp4spec.dequantize(q), dequantize_reference(q))
    assert s.block_size == 16


@pytest.mark.parametrize("chunk", [1, 64, 1000])
def test_chunking_does_not_change_results(monkeypatch, chunk):
    cases = [("mxfp4", {}, (40, 96)), ("nvfp4", {}, (40, 96)), ("nvfp4", {"scale_rule": "4over6"}, (8, 64)),
             ("nvfp4_2d", {}, (48, 64)), ("nvfp4_2d", {"scale_rule": "4over6"}, (32, 48))]
    expected = []
    for name, ov, shape in cases:
        s = get_scheme(name, **ov)
        x = adversarial(11, shape, s, True)
        expected.append((x, s, quantize(x, s)))
    monkeypatch.setattr(scaling, "CHUNK_ELEMENTS", chunk)
    for x, s, q in expected:
        assert quantize(x, s).equals(q)


# -- coverage: every scale code and every element code is reachable --------------------------------

def test_every_e8m0_scale_code_is_reached():
    """0..252 by the floor rule on E2M1 (amax = 2^(code - 125), code 0 also for zero and
    subnormal blocks), 253 by rceil at the largest float32, 254 by torchao's rceil on an
    infinite block, 255 by a NaN block -- each through the emulator and the reference."""
    reached = set()
    floor = get_scheme("mxfp4")
    x = np.zeros((253, 32), np.float32)
    x[:, 0] = np.ldexp(F32(1.0), np.arange(253) - 125)
    q = quantize(x, floor)
    assert q.equals(quantize_reference(x, floor))
    assert list(q.scales[:, 0]) == list(range(253))
    reached |= set(q.scales[:, 0].tolist())
    big = np.full((1, 32), np.finfo(np.float32).max, np.float32)
    assert quantize(big, "mxfp4", scale_rule="rceil").scales[0, 0] == 253
    assert quantize_reference(big, get_scheme("mxfp4", scale_rule="rceil")).scales[0, 0] == 253
    inf = np.zeros((1, 32), np.float32)
    inf[0, 3] = np.inf
    ao_rceil = get_scheme("mxfp4", scale_rule="rceil", profile="torchao")
    assert quantize(inf, ao_rceil).scales[0, 0] == 254 == quantize_reference(inf, ao_rceil).scales[0, 0]
    nan = np.zeros((1, 32), np.float32)
    nan[0, 5] = np.nan
    assert quantize(nan, "mxfp4").scales[0, 0] == 255
    reached |= {253, 254, 255}
    assert reached == set(range(256))


CODE_CASES = [("mxfp4", {}), ("mxfp6_e2m3", {}), ("mxfp6_e3m2", {}), ("mxfp8_e4m3", {}), ("mxfp8_e5m2", {}),
              ("nvfp4", {}), ("nvfp4", {"profile": "torchao"}), ("nvfp4_2d", {}), ("ufp4", {}), ("nvint4", {})]


@pytest.mark.parametrize("name,overrides", CODE_CASES)
def test_every_finite_element_code_is_reached(name, overrides):
    """The element's own finite values (a block whose amax is the element max) come back as
    their own codes; a tiny negative supplies the -0 code under TE's positive-zero policy."""
    s = get_scheme(name, **overrides)
    fmt = s.element
    codes = [c for c in fmt.finite_codes]
    vals = np.array([fmt.values[c] for c in codes] + [-1e-30], np.float64)
    k = s.block_size
    n_blocks = -(-len(vals) // (k - 1))
    blocks = np.zeros((n_blocks, k))
    flat = np.zeros(n_blocks * (k - 1))
    flat[:len(vals)] = vals
    blocks[:, :-1] = flat.reshape(n_blocks, k - 1)
    blocks[:, -1] = fmt.max  # every block's amax is the element max
    x = blocks.reshape(1, -1).astype(np.float32)
    if s.is_2d:
        x = np.repeat(x, 16, axis=0)
    q = quantize(x, s)
    r = quantize_reference(x, s)
    assert q.equals(r)
    got = set(q.codes.ravel().tolist())
    assert set(codes) <= got, sorted(set(codes) - got)


def test_e4m3_nan_element_code_in_a_poisoned_block():
    x = np.zeros((1, 32), np.float32)
    x[0, :3] = [np.nan, -np.inf, 1.0]
    q = quantize(x, "mxfp8_e4m3")
    assert q.scales[0, 0] == 0xFF and list(q.codes[0, :4]) == [0x7F, 0xFF, 0x00, 0x00]
    assert quantize_reference(x, get_scheme("mxfp8_e4m3")).equals(q)


# -- helpers of the emulator ---------------------------------------------------------------------

def test_encode_ue4m3_fast_path_equals_encoder():
    vals = get_format("ue4m3").values[:127].astype(np.float32)
    mids = ((vals[:-1].astype(np.float64) + vals[1:]) / 2).astype(np.float32)
    pts = np.concatenate([vals, mids])
    near = np.concatenate([pts, np.nextafter(pts, F32(0)), np.nextafter(pts, F32(np.inf))])
    rnd = np.random.default_rng(0).uniform(0, 448, 200000).astype(np.float32)
    tiny = np.random.default_rng(1).uniform(0, 2 ** -8, 100000).astype(np.float32)
    s = np.minimum(np.concatenate([near, rnd, tiny, [0.0, 448.0, np.nan, -np.nan]]).astype(np.float32), F32(448))
    assert np.array_equal(scaling.encode_ue4m3(s), encode(s, "ue4m3", overflow="saturate"))


def test_abs_max_last_propagates_nan_and_reads_inf():
    a = np.array([[1.0, -3.0, 2.0], [1.0, np.nan, 5.0], [-np.inf, 0.0, 1.0], [-0.0, 0.0, -0.0]], np.float32)
    m = scaling.abs_max_last(a)
    assert m[0] == 3.0 and np.isnan(m[1]) and m[2] == np.inf and m[3] == 0 and not np.signbit(m[3])
