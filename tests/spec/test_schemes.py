"""Scheme descriptors, profiles, and the quantize/dequantize API surface (shapes, errors, axis, padding, packing)."""

import types

import ml_dtypes
import numpy as np
import pytest

import fp4spec
from fp4spec.block_schemes import SCALE_RULES, Scheme, get_scheme, schemes
from fp4spec.profiles import POLICIES, describe_profiles, differing_policies, get_profile, list_profiles
from fp4spec.api.block_scaling import dequantize, quantize
from fp4spec.quantized import QuantizedTensor

ALL = list(schemes)
BLOCKED = [n for n in ALL if n != "hif4"]


def _data(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# -- catalogue ------------------------------------------------------------------------------

def test_catalogue_names():
    assert ALL == ["mxfp4", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp8_e4m3", "mxfp8_e5m2",
                   "nvfp4", "nvfp4_2d", "ufp4", "nvint4", "nvint4_e0m3", "hif4", "if4", "if4_2d"]


@pytest.mark.parametrize("name,element,block,scale,rule,profile", [
    ("mxfp4", "e2m1", (32,), "e8m0", "floor", "ocp"),
    ("mxfp6_e2m3", "e2m3", (32,), "e8m0", "floor", "ocp"),
    ("mxfp6_e3m2", "e3m2", (32,), "e8m0", "floor", "ocp"),
    ("mxfp8_e4m3", "e4m3", (32,), "e8m0", "floor", "ocp"),
    ("mxfp8_e5m2", "e5m2", (32,), "e8m0", "floor", "ocp"),
    ("nvfp4", "e2m1", (16,), "ue4m3", "amax", "te"),
    ("nvfp4_2d", "e2m1", (16, 16), "ue4m3", "amax", "te"),
    ("ufp4", "e1m2", (16,), "ue4m3", "amax", "te"),
    ("nvint4", "int4_sym", (16,), "ue4m3", "amax", "te"),
    ("nvint4_e0m3", "e0m3", (16,), "ue4m3", "amax", "te"),
    ("hif4", "s1p2", (64,), "e6m2", "hif4", "hif4"),
    ("if4", "e2m1", (16,), "e4m3", "mse", "fouroversix"),
])
def test_catalogue_fields(name, element, block, scale, rule, profile):
    s = get_scheme(name)
    assert (s.name, s.element.name, s.block_shape, s.scale.name, s.scale_rule, s.profile) == \
        (name, element, block, scale, rule, profile)
    assert s.global_scale == ("fp32" if s.structure in ("two_level", "if4") else None)
    assert schemes[name] is s
    assert name in s.describe()


def test_catalogue_is_read_only():
    with pytest.raises(TypeError):
        schemes["x"] = schemes["mxfp4"]


def test_derived_fields():
    assert get_scheme("nvfp4").max_elem == 6.0 and get_scheme("nvfp4").scale_bound == 448.0
    assert get_scheme("ufp4").max_elem == 3.5
    assert get_scheme("nvint4").max_elem == 7.0
    assert get_scheme("nvfp4_2d").tile_rows == 16 and get_scheme("nvfp4_2d").block_size == 16
    assert get_scheme("mxfp4").tile_rows == 1


def test_overrides():
    assert get_scheme("mxfp4", scale_rule="rceil").scale_rule == "rceil"
    assert get_scheme("nvfp4", profile="torchao").profile == "torchao"
    s = get_scheme("ufp4", block_size=32, element_max=3.0, scale="e8m0", scale_max=2.0**100)
    assert (s.block_shape, s.max_elem, s.scale.name, s.name) == ((32,), 3.0, "e8m0", "ufp4")
    with pytest.raises(ValueError, match="element_max: 7.0 exceeds the largest e1m2 value 3.5"):
        get_scheme("ufp4", element_max=7.0)
    with pytest.raises(ValueError, match="overflows float32; pass a smaller scale_max"):
        get_scheme("ufp4", scale="e8m0")
    assert get_scheme("nvfp4_2d", block_size=32).block_shape == (16, 32)
    s = get_scheme("nvfp4", scale_rule="4over6", scale_max=256, error_mode="MSE")
    assert (s.scale_bound, s.error_mode) == (256.0, "mse")
    assert get_scheme(s) is s
    assert get_scheme(s, profile="te") == s


@pytest.mark.parametrize("name,overrides,message", [
    ("nope", {}, "scheme: unknown scheme 'nope'"),
    ("mxfp4", {"scale_rule": "amax"}, "scale_rule: 'amax' is not one of 'floor', 'ceil', 'rceil', 'even'"),
    ("nvfp4", {"scale_rule": "floor"}, "scale_rule: 'floor' is not one of 'amax', '4over6'"),
    ("mxfp4", {"profile": "te"}, "profile: 'te' cannot drive a 'mx' scheme"),
    ("nvfp4", {"profile": "ocp"}, "profile: 'ocp' cannot drive a 'two_level' scheme"),
    ("nvfp4", {"profile": "ml_dtypes"}, "profile: 'ml_dtypes' cannot drive"),
    ("nvfp4", {"profile": "bogus"}, "profile: 'bogus' is not one of"),
    ("nvfp4", {"scale_rule": "4over6", "profile": "torchao"}, "use profile='te'"),
    ("ufp4", {"scale_rule": "4over6"}, "E2M1 elements with UE4M3 scales only"),
    ("nvfp4", {"scale_rule": "4over6", "block_size": 32}, "1x16 blocks and 16x16 tiles"),
    ("nvfp4", {"error_mode": "mae"}, "error_mode: only used with scale_rule='4over6'"),
    ("nvfp4", {"scale_rule": "4over6", "error_mode": "l1"}, "error_mode: 'l1' is not one of"),
    ("mxfp4", {"scale": "ue4m3"}, "scale: an MX scheme needs the E8M0 scale"),
    ("mxfp4", {"element": "int4"}, "element: an MX scheme needs a float element format"),
    ("mxfp4", {"block_shape": (16, 32)}, "MX schemes use 1D blocks"),
    ("mxfp4", {"element_max": 4.0}, "element_max: only two-level schemes"),
    ("mxfp4", {"block_size": 0}, "block_size: 0 is not a positive integer"),
    ("mxfp4", {"block_size": 32, "block_shape": (32,)}, "pass one of them"),
    ("nvfp4", {"element_max": -1.0}, "element_max: -1.0 is not a positive finite number"),
    ("nvfp4", {"scale_max": 500.0}, "scale_max: 500.0 exceeds the largest ue4m3 value 448"),
    ("nvfp4", {"colour": "red"}, "colour: not a scheme field"),
    ("hif4", {"block_size": 32}, "HiF4 groups are 64 elements"),
    ("hif4", {"element": "e2m1"}, "element: HiF4 is defined with 's1p2' only"),
    ("mxfp4", {"element": "e9m9"}, "format: unknown format 'e9m9'"),
])
def test_bad_overrides_name_the_argument(name, overrides, message):
    with pytest.raises(ValueError, match=".*".join(map(_re, message.split("*")))):
        get_scheme(name, **overrides)


def _re(s):
    import re

    return re.escape(s)


def test_scale_rules_table():
    assert SCALE_RULES["mx"] == ("floor", "ceil", "rceil", "even")
    assert SCALE_RULES["two_level"] == ("amax", "4over6")


# -- profiles -------------------------------------------------------------------------------

def test_profiles_listed_in_order():
    assert [p.name for p in list_profiles()] == ["ocp", "te", "torchao", "ml_dtypes", "hif4", "fouroversix"]
    assert get_profile("te") is list_profiles()[1]
    with pytest.raises(ValueError, match="profile: 'x' is not one of 'ocp', 'te', 'torchao', 'ml_dtypes', 'hif4', "
                                         "'fouroversix'"):
        get_profile("x")


def test_profile_values_are_allowed_choices():
    for p in list_profiles():
        for key, value in p.policies.items():
            assert value in POLICIES[key][1], (p.name, key)


def test_profiles_can_drive_their_catalogue_schemes():
    for s in schemes.values():
        assert s.structure in get_profile(s.profile).structures


def test_describe_profiles_table():
    text = describe_profiles()
    lines = text.splitlines()
    assert lines[0] == "| policy | ocp | te | torchao | ml_dtypes | hif4 | fouroversix |"
    assert "| nv_block_scale_floor * | - | none | e4m3_min_normal | - | - | none |" in lines
    assert "| mx_nonfinite_block * | nan_scale | - | nan_only | - | - | nan_scale |" in lines
    assert "| e4m3_overflow * | - | saturate | saturate | nan | - | saturate |" in lines
    assert "| element_overflow | saturate | saturate | saturate | saturate | saturate | saturate |" in lines
    assert "| nv_4over6_error_sum * | - | sequential | sequential | - | - | torch_cpu |" in lines
    assert {"nv_scale_chain", "nv_dequant_order", "mx_element_scaling"} <= set(differing_policies())
    assert "element_overflow" not in differing_policies()


def test_profile_rejects_unknown_policy():
    from fp4spec.profiles import Profile

    with pytest.raises(ValueError, match="policies: 'colour' is not a known policy"):
        Profile("x", "x", "x", (), {"colour": "red"})
    with pytest.raises(ValueError, match=r"policies\['nv_scale_chain'\]: 'fast' is not one of 'te', 'torchao'"):
        Profile("x", "x", "x", (), {"nv_scale_chain": "fast"})


# -- quantize: shapes, axis, dtypes -----------------------------------------------------------

@pytest.mark.parametrize("name", BLOCKED)
def test_shapes_and_dtypes(name):
    s = get_scheme(name)
    x = _data((2, 16, 64))
    q = quantize(x, name)
    assert isinstance(q, QuantizedTensor) and q.scheme is s
    assert q.codes.shape == x.shape and q.codes.dtype == np.uint8
    assert q.scales.shape == (2, 16, 64 // s.block_size) and q.scales.dtype == np.uint8
    assert (q.global_scale is None) == (s.structure == "mx")
    if q.global_scale is not None:
        assert isinstance(q.global_scale, np.float32)
    d = fp4spec.dequantize(q)
    assert d.dtype == np.float32 and d.shape == x.shape
    assert np.array_equal(dequantize(q).view(np.uint32), d.view(np.uint32))
    assert not q.codes.flags.writeable and not q.scales.flags.writeable


@pytest.mark.parametrize("name", ["mxfp4", "nvfp4", "mxfp8_e4m3", "nvint4"])
def test_axis_moves_blocks(name):
    x = _data((64, 3, 5))
    q0 = quantize(x, name, axis=0)
    qt = quantize(np.ascontiguousarray(np.moveaxis(x, 0, -1)), name)
    assert q0.axis == 0 and q0.scales.shape == (64 // get_scheme(name).block_size, 3, 5)
    assert np.array_equal(q0.codes, np.moveaxis(qt.codes, -1, 0))
    assert np.array_equal(q0.scales, np.moveaxis(qt.scales, -1, 0))
    assert np.array_equal(fp4spec.dequantize(q0), np.moveaxis(fp4spec.dequantize(qt), -1, 0))
    assert quantize(x, name, axis=-3).equals(q0)


def test_2d_tiles_make_transpose_consistent():
    w = _data((32, 48), seed=3) * np.exp(np.random.default_rng(4).uniform(-3, 3, (32, 48))).astype(np.float32)
    q = quantize(w, "nvfp4_2d")
    qt = quantize(np.ascontiguousarray(w.T), "nvfp4_2d")
    assert np.array_equal(qt.codes, q.codes.T)
    r, c = np.meshgrid(np.arange(32), np.arange(48), indexing="ij")
    assert np.array_equal(qt.scales[c, r // 16], q.scales[r, c // 16])
    assert (q.scales[0:16] == q.scales[0]).all()  # the 16 rows of a tile share its scale


def test_input_dtypes():
    x64 = np.random.default_rng(1).standard_normal((4, 32)) * 1e3
    q64 = quantize(x64, "mxfp4")
    assert q64.equals(quantize(x64.astype(np.float32), "mxfp4"))  # float64: RNE to float32 first
    for dt in (np.float16, ml_dtypes.bfloat16):
        xs = x64.astype(dt)
        assert quantize(xs, "nvfp4").equals(quantize(xs.astype(np.float32), "nvfp4"))
    assert quantize(x64.tolist(), "mxfp4").equals(q64)


@pytest.mark.parametrize("bad,err,message", [
    (np.zeros((2, 32), np.int32), TypeError, "x: dtype int32 is not supported; pass float16, bfloat16"),
    (np.float32(1.0), ValueError, "x: a 0-d value has no axis to block along"),
])
def test_bad_input(bad, err, message):
    with pytest.raises(err, match=_re(message)):
        quantize(bad, "mxfp4")


def test_bad_arguments():
    x = _data((2, 32))
    with pytest.raises(ValueError, match=_re("axis: 2 is out of range for a 2-d x (allowed -2..1)")):
        quantize(x, "mxfp4", axis=2)
    with pytest.raises(ValueError, match=_re("rounding: 'nearest' is not one of 'rne'")):
        quantize(x, "mxfp4", rounding="nearest")
    with pytest.raises(ValueError, match=_re("rbits: only used with rounding='sr', not 'rne'")):
        quantize(x, "mxfp4", rbits=np.zeros(x.shape, np.uint8))
    with pytest.raises(ValueError, match=_re("rbits: rounding='sr' needs explicit random bits")):
        quantize(x, "mxfp4", rounding="sr")
    with pytest.raises(ValueError, match=_re("rbits: values must be in [0, 2**8)")):
        quantize(x, "nvfp4", rounding="sr", rbits=np.full(x.shape, 256))
    with pytest.raises(ValueError, match=_re("pad: expected True or False, got 1")):
        quantize(x, "mxfp4", pad=1)
    with pytest.raises(ValueError, match="scale_rule: 'round'"):
        quantize(x, "mxfp4", scale_rule="round")
    with pytest.raises(ValueError, match=_re("has one dimension")):
        quantize(np.zeros(16, np.float32), "nvfp4_2d")


def test_length_not_multiple_of_block_raises_unless_pad():
    x = _data((3, 40))
    with pytest.raises(ValueError, match=_re("x: length 40 along axis -1 is not a multiple of the mxfp4 block size 32; "
                                             "pass pad=True to pad with zeros to 64")):
        quantize(x, "mxfp4")
    q = quantize(x, "mxfp4", pad=True)
    assert q.codes.shape == (3, 64) and q.scales.shape == (3, 2) and q.shape == (3, 40) and q.padded
    assert (q.codes[:, 40:] == 0).all()
    padded = np.concatenate([x, np.zeros((3, 24), np.float32)], axis=1)
    assert np.array_equal(q.codes, quantize(padded, "mxfp4").codes)
    d = fp4spec.dequantize(q)
    assert d.shape == (3, 40)
    assert np.array_equal(d, fp4spec.dequantize(quantize(padded, "mxfp4"))[:, :40])


def test_pad_2d_rows_and_columns():
    w = _data((20, 40))
    with pytest.raises(ValueError, match=_re("20 rows (the axis before axis -1) is not a multiple of the nvfp4_2d tile height 16")):
        quantize(w[:, :32], "nvfp4_2d")
    q = quantize(w, "nvfp4_2d", pad=True)
    assert q.codes.shape == (32, 48) and q.scales.shape == (32, 3) and fp4spec.dequantize(q).shape == (20, 40)


def test_sr_uses_one_random_value_per_element():
    x = np.full((1, 32), 0.75, np.float32)
    x[0, 0] = 6.0  # mxfp4 floor: X = 1, so 0.75 lies between 0.5 and 1.0 (frac 1/2)
    r = np.zeros((1, 32), np.uint8)
    r[0, 1::2] = 128  # frac * 256 + r >= 256 iff r >= 128
    q = quantize(x, "mxfp4", rounding="sr", rbits=r)
    assert list(q.codes[0, 1:5]) == [2, 1, 2, 1]  # 1.0 (code 2) where r = 128, 0.5 (code 1) where r = 0
    qt = quantize(x.T.copy(), "mxfp4", axis=0, rounding="sr", rbits=r.T.copy())
    assert np.array_equal(qt.codes, q.codes.T)


def test_other_rounding_modes_pass_through():
    x = np.array([[6.0, 5.0, 2.5, -2.5] + [0.0] * 28], np.float32)  # X = 1
    assert list(quantize(x, "mxfp4", rounding="rne").codes[0, :4]) == [7, 6, 4, 12]
    assert list(quantize(x, "mxfp4", rounding="rna").codes[0, :4]) == [7, 7, 5, 13]
    assert list(quantize(x, "mxfp4", rounding="rtz").codes[0, :4]) == [7, 6, 4, 12]


# -- pack ---------------------------------------------------------------------------------------

def test_pack():
    x = _data((4, 64))
    q = quantize(x, "nvfp4")
    p = q.pack()
    assert p.shape == (4, 32) and p.dtype == np.uint8
    assert np.array_equal(p & 0xF, q.codes[:, 0::2]) and np.array_equal(p >> 4, q.codes[:, 1::2])
    assert np.array_equal(q.pack(order="hi_first") >> 4, q.codes[:, 0::2])
    q0 = quantize(x.T.copy(), "mxfp4", axis=0)
    assert q0.pack().shape == (32, 4)
    assert np.array_equal(quantize(x, "mxfp8_e4m3").pack(), quantize(x, "mxfp8_e4m3").codes)
    with pytest.raises(NotImplementedError, match="6-bit elements"):
        quantize(x, "mxfp6_e2m3").pack()
    with pytest.raises(ValueError, match="order"):
        q.pack(order="middle")


def test_equals_and_repr():
    x = _data((2, 32))
    a, b = quantize(x, "mxfp4"), quantize(x, "mxfp4")
    assert a.equals(b) and not a.equals(quantize(x, "mxfp4", scale_rule="ceil")) and not a.equals(None)
    assert "QuantizedTensor(scheme='mxfp4', shape=(2, 32), axis=1" in repr(a)
    with pytest.raises(TypeError, match="q: expected a QuantizedTensor, got ndarray"):
        dequantize(x)


# -- HiF4 dispatch ------------------------------------------------------------------------------

def test_hif4_dispatch_to_emulator_module(monkeypatch):
    calls = {}

    def hif4_quantize(x):
        calls["x"] = x
        n = x.shape[-1] // 64
        return {"codes": np.ones(x.shape, np.uint8), "scales": np.full(x.shape[:-1] + (n,), 7, np.uint8),
                "e1_8": np.zeros(x.shape[:-1] + (n, 8), np.uint8), "e1_16": np.ones(x.shape[:-1] + (n, 16), np.uint8)}

    def hif4_dequantize(codes, scales, e1_8, e1_16):
        calls["deq"] = (codes.shape, scales.shape, e1_8.shape, e1_16.shape)
        return np.zeros(codes.shape, np.float32)

    from fp4spec.backends import numpy_backend

    fake = types.ModuleType("fp4spec.emulator.hif4")
    fake.hif4_quantize, fake.hif4_dequantize = hif4_quantize, hif4_dequantize
    monkeypatch.setattr(numpy_backend, "hif4", fake)
    x = _data((128, 3))
    q = quantize(x, "hif4", axis=0)
    assert calls["x"].shape == (3, 128) and calls["x"].dtype == np.float32
    assert q.codes.shape == (128, 3) and q.scales.shape == (2, 3)
    assert q.e1_8.shape == (2, 3, 8) and q.e1_16.shape == (2, 3, 16) and q.global_scale is None
    assert fp4spec.dequantize(q).shape == (128, 3)
    assert calls["deq"] == ((3, 128), (3, 2), (3, 2, 8), (3, 2, 16))
    with pytest.raises(ValueError, match="rounding: HiF4 rounds its elements"):
        quantize(x, "hif4", axis=0, rounding="sr", rbits=np.zeros(x.shape, np.uint8))


def test_scheme_is_hashable_and_frozen():
    s = get_scheme("nvfp4")
    assert hash(s) == hash(get_scheme("nvfp4"))
    with pytest.raises(Exception):
        s.name = "x"
    assert isinstance(s, Scheme)


def test_hif4_through_quantize_matches_hif4_emulator():
    hif4 = pytest.importorskip("fp4spec.emulator.hif4")
    x = _data((3, 128), seed=9) * 100
    q = quantize(x, "hif4")
    r = hif4.hif4_quantize(x)
    for field in ("codes", "scales", "e1_8", "e1_16"):
        assert np.array_equal(getattr(q, field), r[field]), field
    assert np.array_equal(fp4spec.dequantize(q).view(np.uint32), hif4.hif4_dequantize(**r).view(np.uint32))
    q0 = quantize(np.ascontiguousarray(x.T), "hif4", axis=0)
    assert np.array_equal(q0.codes, q.codes.T) and np.array_equal(fp4spec.dequantize(q0), fp4spec.dequantize(q).T)
    qp = quantize(x[:, :100], "hif4", pad=True)
    assert fp4spec.dequantize(qp).shape == (3, 100)
    assert np.array_equal(fp4spec.dequantize(qp), hif4.hif4_dequantize(**hif4.hif4_quantize(x[:, :100], pad=True)))


@pytest.mark.parametrize("shape", [(0, 32), (4, 0), (2, 0, 16), (0, 16, 16)])
@pytest.mark.parametrize("name", ["mxfp4", "nvfp4", "nvfp4_2d"])
def test_empty_arrays(shape, name):
    from fp4spec.scaling import quantize_reference

    x = np.ones(shape, np.float32)
    q = quantize(x, name, pad=True)
    assert fp4spec.dequantize(q).shape == shape
    assert q.equals(quantize_reference(x, get_scheme(name), pad=True))


def test_driving_profiles_set_every_algorithm_policy():
    """A profile that can drive a structure sets every policy the algorithms read for it."""
    from fp4spec.profiles import ALGORITHM_POLICIES

    needed = {"mx": {p for p in ALGORITHM_POLICIES if p.startswith("mx_")},
              "two_level": {p for p in ALGORITHM_POLICIES if p.startswith("nv_")}, "hif4": set(), "if4": set()}
    assert needed["mx"] | needed["two_level"] == set(ALGORITHM_POLICIES)
    for p in list_profiles():
        for structure in p.structures:
            assert needed[structure] <= set(p.policies), (p.name, structure)
