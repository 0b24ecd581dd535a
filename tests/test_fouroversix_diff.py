"""fp4spec against fouroversix's own PyTorch reference (PyPI ``fouroversix`` 1.0.5), bit for bit: IF4,
and NVFP4 / NVINT4 / MXFP4 under profile ``fouroversix``.

fouroversix is installed without its CUDA extension (``SKIP_CUDA_BUILD=1``, see
tests/conformance/fouroversix_backends.py, which loads its reference quantizers without the
package ``__init__``); CI installs it in ``.ci/run``. Without it these tests skip and say why.

* Ordinary tensors: equal codes, scale bytes and decode scale, every scale rule.
* Adversarial tensors (every kind of the conformance builders, tensor amaxes anywhere in
  float32): fouroversix equals fp4spec with fouroversix's departures switched on
  (:func:`fp4spec.conformance.if4_mistakes.quantize` with ``fouroversix=True``) -- so every
  difference from the spec is one of the departures docs/divergences.md lists.
* Near-ties of the selection: equal (the error order is torch's CPU sum).
* NVFP4 (every scale rule), NVINT4, MXFP4 under profile ``fouroversix``: equal on ordinary
  tensors; on every adversarial kind (NaN and Inf included) equal to
  :mod:`fp4spec.conformance.fouroversix_model` -- the profile plus fouroversix's departures.
* IF4 16 x 16 tiles (``if4_2d``, fouroversix's ``block_scale_2d=True``): equal on ordinary
  tensors and on tile near-ties (the 256 error terms in torch's CPU order); on adversarial
  tensors equal to the spec with fouroversix's departures.
* The smallest inputs of each departure, and of the one 4over6 policy difference from
  TransformerEngine (the order the 16 error terms are added in).
"""

import numpy as np
import pytest

from tests.conformance import fouroversix_backends as F

_reason = F.unavailable_reason()
if _reason:
    pytest.skip(_reason, allow_module_level=True)
if F.version() != F.VERSION:
    pytest.skip(f"fouroversix {F.version()} is installed; these tests pin the reference of {F.VERSION}",
                allow_module_level=True)

import fp4spec  # noqa: E402
from fp4spec.conformance import builders, fouroversix_model, if4_mistakes, selection  # noqa: E402

F32 = np.float32
RULES = ("mse", "mae", "abs_max")


def _theirs(x, rule, **kw):
    codes, scales, amax = F.quantize(x, "if4", rule, **kw)
    return codes, scales, F.decode_scale(amax, 448.0, 6.0)


def _equal(x, rule, want, **kw) -> bool:
    codes, scales, g = _theirs(x, rule, **kw)
    return (np.array_equal(codes, np.asarray(want.codes)) and np.array_equal(scales, np.asarray(want.scales))
            and F32(g).view(np.uint32) == F32(want.global_scale).view(np.uint32))


@pytest.mark.parametrize("rule", RULES)
def test_ordinary_tensors_equal(rule):
    rng = np.random.default_rng(0)
    sch = fp4spec.get_scheme("if4", scale_rule=rule)
    int_blocks = 0
    for _ in range(40):
        x = (rng.standard_normal((8, 64)) * np.exp2(rng.integers(-6, 6, (8, 64)))).astype(np.float32)
        x *= F32(2.0 ** int(rng.integers(-20, 20)))
        q = fp4spec.quantize(x, sch)
        assert _equal(x, rule, q)
        int_blocks += int((q.scales >= 0x80).sum())
    assert int_blocks > 100  # both branches exercised


@pytest.mark.parametrize("rule", RULES)
def test_adversarial_tensors_equal_the_spec_or_its_named_departures(rule):
    rng = np.random.default_rng(1)
    sch = fp4spec.get_scheme("if4", scale_rule=rule)
    departing = 0
    for kind in builders.kinds_for(sch):
        for _ in range(12):
            x = builders.build_tensor(rng, sch, kind, block_rows=2, block_cols=4, spread=40)
            model = if4_mistakes.quantize(x, sch, fouroversix=True)
            assert _equal(x, rule, model), kind
            departing += not _equal(x, rule, fp4spec.quantize(x, sch))
    assert departing > 0  # the departures are reached, and modelled


@pytest.mark.parametrize("rule", ("mse", "mae"))
def test_selection_near_ties_equal(rule):
    """Blocks one float32 step from flipping E2M1 <-> INT4: fouroversix adds the 16 error terms in
    the spec's order (torch's CPU sum)."""
    rng = np.random.default_rng(2)
    sch = fp4spec.get_scheme("if4", scale_rule=rule)
    other_order = 0
    for _ in range(6):
        x = selection.near_tie_tensor(rng, sch)
        assert _equal(x, rule, fp4spec.quantize(x, sch))
        other_order += not _equal(x, rule, if4_mistakes.quantize(x, sch, element_order=True))
    assert other_order > 0  # the blocks tell the orders apart


def test_smallest_input_rounding_to_eight():
    """[2688, 0 x 15 | 0.01640625, 0 x 15]: the second block's scale 0.01640625 / 6 = 1.4 * 2^-9
    rounds down to 2^-9 (UE4M3 0x01), so its amax scales to 8.4. fp4spec saturates to 6 (0x7);
    fouroversix rounds to 8 and packs 8 as 0x8, which decodes as -0."""
    x = np.zeros((1, 32), np.float32)
    x[0, 0], x[0, 16] = 2688.0, 0.01640625
    codes, scales, _ = _theirs(x, "mse")
    q = fp4spec.quantize(x, "if4")
    assert list(scales[0]) == list(q.scales[0]) == [0x7E, 0x01]
    assert codes[0, 16] == 0x8 and q.codes[0, 16] == 0x7
    assert F.quantize(x, "nvfp4", "static_6")[0][0, 16] == 0x8  # its NVFP4 too


def test_smallest_input_tiny_tensor():
    """[1e-36, 0 x 15]: 2688 / 1e-36 overflows float32; fouroversix's scale is the saturated cast of
    +Inf (0x7E) and every code NaN's (0xB here); fp4spec clamps S_enc to FLT_MAX."""
    x = np.zeros((1, 16), np.float32)
    x[0, 0] = 1e-36
    codes, scales, g = _theirs(x, "mse")
    q = fp4spec.quantize(x, "if4")
    assert scales[0, 0] == 0x7E and g == 0
    assert set(codes[0]) <= {0x3, 0xB}
    assert q.codes[0, 0] == 0x7 and np.isfinite(fp4spec.dequantize(q)).all()


# -- IF4 16 x 16 tiles -------------------------------------------------------------------------------

@pytest.mark.parametrize("rule", RULES)
def test_2d_ordinary_tensors_equal(rule):
    rng = np.random.default_rng(10)
    sch = fp4spec.get_scheme("if4_2d", scale_rule=rule)
    both = set()
    for i in range(16):
        x = (rng.standard_normal((32, 64)) * np.exp2(rng.integers(-6, 6, (32, 64)))).astype(np.float32)
        if i % 2:
            x[:16, :32] = rng.uniform(-1, 1, (16, 32))  # tiles the INT4 grid suits
        x *= F32(2.0 ** int(rng.integers(-20, 20)))
        q = fp4spec.quantize(x, sch)
        assert _equal(x, rule, q, block_scale_2d=True)
        both |= set((q.scales >= 0x80).ravel().tolist())
    assert both == {False, True}


@pytest.mark.parametrize("rule", ("mse", "mae"))
def test_2d_near_ties_equal(rule):
    """Tiles one float32 step from flipping: fouroversix adds the 256 error terms in the spec's
    order (torch's CPU sum, four interleaved vector accumulators), not in element order."""
    rng = np.random.default_rng(11)
    sch = fp4spec.get_scheme("if4_2d", scale_rule=rule)
    other_order = 0
    for _ in range(4):
        x = selection.near_tie_tensor(rng, sch, rows=1, cols=4)
        assert _equal(x, rule, fp4spec.quantize(x, sch), block_scale_2d=True)
        other_order += not _equal(x, rule, if4_mistakes.quantize(x, sch, element_order=True), block_scale_2d=True)
    assert other_order > 0


@pytest.mark.parametrize("rule", RULES)
def test_2d_adversarial_tensors_equal_the_spec_or_its_named_departures(rule):
    rng = np.random.default_rng(12)
    sch = fp4spec.get_scheme("if4_2d", scale_rule=rule)
    for kind in builders.kinds_for(sch):
        for _ in range(4):
            x = builders.build_tensor(rng, sch, kind, block_rows=2, block_cols=2, spread=40)
            assert _equal(x, rule, if4_mistakes.quantize(x, sch, fouroversix=True), block_scale_2d=True), kind


# -- NVFP4, NVINT4, MXFP4 under profile fouroversix -------------------------------------------------

BACKENDS = F.TWO_LEVEL_AND_MX


def _same(q, want) -> bool:
    g_ok = want.global_scale is None or F32(q.global_scale).view(np.uint32) == F32(want.global_scale).view(np.uint32)
    return np.array_equal(q.codes, np.asarray(want.codes)) and np.array_equal(q.scales, np.asarray(want.scales)) \
        and g_ok


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.__name__)
def test_profile_fouroversix_equals_its_reference_on_ordinary_tensors(backend):
    b = backend()
    sch = fp4spec.get_scheme(b.scheme)
    rng = np.random.default_rng(3)
    for _ in range(25):
        x = (rng.standard_normal((4, 64)) * np.exp2(rng.integers(-8, 8, (4, 64)))).astype(np.float32)
        assert _same(b.quantize(x, sch), fp4spec.quantize(x, sch))


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.__name__)
def test_every_difference_is_a_modelled_departure(backend):
    b = backend()
    sch = fp4spec.get_scheme(b.scheme)
    rng = np.random.default_rng(4)
    for kind in builders.BLOCK_KINDS:
        for _ in range(6):
            x = builders.build_tensor(rng, sch, kind, block_rows=2, block_cols=3, spread=40)
            q = b.quantize(x, sch)
            model = fouroversix_model.quantize(x, sch)
            if not np.isfinite(x).all():  # which sign torch gives a NaN from NaN input is its own
                model = fouroversix_model.same_but_nan_signs(model, q, sch)
            assert _same(q, model), kind


def test_smallest_input_mx_subnormal_block():
    """[6 * 2^-128, 0 x 31]: fp32(amax / 6) = 2^-128 is an fp32 subnormal with mantissa bits, so fouroversix
    adds one to its exponent field 0: byte 1 (2^-126). RCEIL gives ceil(log2 2^-128) = -128, clamped: byte 0."""
    x = np.zeros((1, 32), np.float32)
    x[0, 0] = np.ldexp(F32(6.0), -128)
    _, scales, _ = F.quantize(x, "mxfp4", "static_6")
    assert scales[0, 0] == 1 and fp4spec.quantize(x, "mxfp4:scale_rule=rceil,profile=fouroversix").scales[0, 0] == 0


def test_smallest_input_mx_zero_block():
    """An all-zero MX block: byte 0, and 1.0.5 divides the block by 0.0: NaN codes (3 | sign << 3)."""
    codes, scales, _ = F.quantize(np.zeros((1, 32), np.float32), "mxfp4", "static_6")
    assert scales[0, 0] == 0 and set(codes[0]) <= {0x3, 0xB}


#: A block whose 4over6 MAE errors (scale bound 256) are one float32 step apart: TransformerEngine adds
#: the 16 terms in element order and takes map-to-4 (UE4M3 0x74); torch.sum (fouroversix) takes map-to-6
#: (0x70). After a block holding the tensor amax 1.0.
NEAR_TIE_BITS = ("3F000000 BE33C9D7 BDCA97EA 3E967DC0 3ECB40BE BEBF2701 BE250671 80000000 "
                 "BD1C8829 BDD1A0A2 3C54725B 3DFFAF65 3EB9DA28 3D6AE767 3EA576DA 3E16FC1E")


def test_4over6_error_order_te_versus_fouroversix():
    block = np.array([int(h, 16) for h in NEAR_TIE_BITS.split()], np.uint32).view(np.float32)
    x = np.concatenate([np.array([1.0] + [0.0] * 15, np.float32), block])[None]
    te = fp4spec.get_scheme("nvfp4:scale_rule=4over6,scale_max=256,error_mode=mae")
    fos = fp4spec.get_scheme("nvfp4:profile=fouroversix,scale_rule=4over6,scale_max=256,error_mode=mae")
    assert fp4spec.quantize(x, te).scales[0, 1] == 0x74
    assert fp4spec.quantize(x, fos).scales[0, 1] == 0x70
    codes, scales, _ = F.quantize(x, "nvfp4", "mae")
    assert scales[0, 1] == 0x70 and np.array_equal(codes, fp4spec.quantize(x, fos).codes)
