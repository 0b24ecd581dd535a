import math

import numpy as np
import pytest

from fp4spec.analysis import compare, quantize_roundtrip, sample, sqnr, sqnr_db
from fp4spec.analysis.sqnr import Comparison
from fp4spec.rht import rht

from ._helpers import block_quantizer, quantize_api


def test_sqnr_db_definition():
    x = np.array([3.0, 4.0])
    assert sqnr_db(x, x) == math.inf
    assert sqnr_db(x, x + np.array([0.5, 0.0])) == pytest.approx(10 * math.log10(25 / 0.25))
    with pytest.raises(ValueError, match="x"):
        sqnr_db(np.zeros(2), np.ones(2))


def test_rht_error_same_in_both_domains(e2m1_q):
    x = sample("student_t3", (64, 256), 0)
    original = sqnr(x, e2m1_q, rht=16, rht_seed=0)
    y = rht(x, 16, seed=0)
    rotated = sqnr_db(y, e2m1_q(y))
    assert original == pytest.approx(rotated, abs=1e-6)


def test_roundtrip_without_rht_is_the_quantizer(e1m2_q):
    x = sample("gaussian", (8, 64), 1)
    assert np.array_equal(quantize_roundtrip(x, e1m2_q), e1m2_q(x))


def test_uniform_grid_gains_from_rht_on_heavy_tails(e2m1_q, e1m2_q):
    # the paradox with idealised (exact-scale) block quantizers, no quantize_api needed
    x = sample("student_t3", (256, 1024), 0)
    before = sqnr(x, e2m1_q) - sqnr(x, e1m2_q)
    after = sqnr(x, e2m1_q, rht=16, rht_signs="te") - sqnr(x, e1m2_q, rht=16, rht_signs="te")
    assert before > 1.5 and after < -1.5


def test_compare_with_callables():
    qs = [block_quantizer("e2m1"), block_quantizer("e1m2")]
    c = compare(qs, ["gaussian", "laplace"], seed=0, rht_sizes=(None, 16, 32), shape=(16, 128))
    assert isinstance(c, Comparison)
    assert c.schemes == ("e2m1_b16", "e1m2_b16")
    assert len(c.values) == 2 * 2 * 3 == len(c.eta)
    md = c.to_markdown()
    assert md.splitlines()[0] == "| distribution | scheme | none (dB) | RHT16 (dB) | RHT32 (dB) |"
    assert len(md.splitlines()) == 2 + 4
    assert "eta" in c.to_markdown(what="eta").splitlines()[0]
    # deterministic
    assert compare(qs, ["gaussian"], seed=0, shape=(16, 128)).values == {
        k: v for k, v in c.values.items() if k[0] == "gaussian" and k[2] in (None, 16)}


def test_compare_errors():
    with pytest.raises(ValueError, match="distribution"):
        compare([block_quantizer("e2m1")], ["cauchy"])
    with pytest.raises(ValueError, match="size"):
        compare([block_quantizer("e2m1")], ["gaussian"], rht_sizes=(8,))


@pytest.fixture(scope="module")
def paradox():
    """SQNR of nvfp4 and ufp4 on the fixed-seed Student-t(3) tensor, without and with RHT16."""
    quantize_api()
    x = sample("student_t3", (256, 1024), seed=0)
    return {(s, r): sqnr(x, s, rht=r, rht_seed=0) for s in ("nvfp4", "ufp4") for r in (None, 16)}


def test_paradox_e2m1_ahead_before_rht(paradox):
    assert paradox[("nvfp4", None)] > paradox[("ufp4", None)] + 1.0


def test_paradox_e2m1_behind_after_rht(paradox):
    assert paradox[("nvfp4", 16)] < paradox[("ufp4", 16)] - 1.0
    assert paradox[("nvfp4", 16)] < paradox[("nvfp4", None)]
    assert paradox[("ufp4", 16)] > paradox[("ufp4", None)] + 2.0
