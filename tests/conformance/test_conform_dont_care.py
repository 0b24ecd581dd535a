"""Positions a profile declares don't-care (``element_nan="unspecified"``) are counted, never failures."""


import numpy as np

import fp4spec
from fp4spec.conformance.compare import compare_quantized, dont_care_codes


def _block_with_nan():
    x = np.ones((1, 32), np.float32)
    x[0, 5] = np.nan
    return x


def test_nan_elements_are_dont_care_under_torchao():
    x = _block_with_nan()
    sch = fp4spec.get_scheme("mxfp4", profile="torchao")
    ref = fp4spec.quantize(x, sch)
    got = ref.replace(codes=np.where(np.isnan(x), 0x3, ref.codes).astype(np.uint8))  # torchao: sign|3
    tally = {}
    assert compare_quantized(ref, got, x, sch, "rne", tally=tally) is None
    assert tally == {"dont_care": 1}
    assert dont_care_codes(ref, x, sch).sum() == 1


def test_the_ocp_profile_leaves_nothing_open():
    x = _block_with_nan()
    sch = fp4spec.get_scheme("mxfp4")
    ref = fp4spec.quantize(x, sch)
    got = ref.replace(codes=np.where(np.isnan(x), 0x3, ref.codes).astype(np.uint8))
    assert dont_care_codes(ref, x, sch) is None
    assert compare_quantized(ref, got, x, sch, "rne").field == "codes"


def test_a_format_with_nan_still_needs_a_nan_code():
    x = _block_with_nan()
    sch = fp4spec.get_scheme("mxfp8_e5m2", profile="torchao")
    ref = fp4spec.quantize(x, sch)
    torch_nan = ref.replace(codes=np.where(np.isnan(x), 0x7F, ref.codes).astype(np.uint8))
    assert int(ref.codes[0, 5]) == 0x7E and compare_quantized(ref, torch_nan, x, sch, "rne") is None  # any NaN
    not_nan = ref.replace(codes=np.where(np.isnan(x), 0x3C, ref.codes).astype(np.uint8))
    assert compare_quantized(ref, not_nan, x, sch, "rne").field == "codes"


def test_torchao_rceil_nan_blocks_are_nan_everywhere():
    """torchao's RCEIL multiplies a NaN block by its NaN descale: the profile models every element
    as NaN (E4M3: a NaN code for every element; the scalar reference and the emulator agree)."""
    from fp4spec.scaling import quantize_block_mx

    x = _block_with_nan()
    sch = fp4spec.get_scheme("mxfp8_e4m3", profile="torchao", scale_rule="rceil")
    q = fp4spec.quantize(x, sch)
    assert int(q.scales[0, 0]) == 0xFF and set(np.asarray(q.codes).ravel()) <= {0x7F, 0xFF}
    codes, scale = quantize_block_mx(list(x[0]), sch)
    assert codes == list(q.codes[0]) and scale == 0xFF
    assert set(np.asarray(fp4spec.quantize(x, "mxfp8_e4m3", scale_rule="rceil").codes[0])) == {0x00, 0x7F}  # OCP: x * 0
