"""``fp4spec vectors generate|check``: the documented npz layout, and results from elsewhere checked bit for bit."""

import numpy as np
import pytest

import fp4spec
from fp4spec.backends import NumpyBackend, resolve_scheme
from fp4spec.conformance import vectors as V
from tests.conformance import defects as D


@pytest.fixture(scope="module")
def nvfp4_vec():
    return V.generate("nvfp4", level=1, seed=3)


def _results(vec, backend=None, rounding="rne"):
    sch = resolve_scheme(str(vec["scheme"]))
    be = backend or NumpyBackend()
    qs = [be.quantize(vec["x"][i], sch, rounding=rounding, rbits=None if "rbits" not in vec else vec["rbits"][i])
          for i in range(len(vec["x"]))]
    out = {"codes": np.stack([q.codes for q in qs]), "scales": np.stack([q.scales for q in qs])}
    if sch.structure == "two_level":
        out["global_scale"] = np.array([q.global_scale for q in qs], np.float32)
    return out


def test_layout(nvfp4_vec):
    v = nvfp4_vec
    n, R, C = v["x"].shape
    assert (R, C) == V.case_shape("nvfp4") == (4, 64)
    assert str(v["format"]) == "fp4spec-vectors" and int(v["format_version"]) == 1
    assert str(v["scheme"]) == "nvfp4" and str(v["rounding"]) == "rne"
    assert v["x"].dtype == np.float32 and v["codes"].dtype == np.uint8 and v["codes"].shape == (n, R, C)
    assert v["codes_packed"].shape == (n, R, C // 2) and v["scales"].shape == (n, R, C // 16)
    assert np.array_equal(v["global_scale"].view(np.uint32), v["global_scale_bits"])
    kinds = set(v["kind"].tolist())
    assert {"sweep", "ties", "scale_tie", "zero", "nonfinite", "subnormal", "saturate"} <= kinds
    assert len(v["kind"]) == n and n == len(V.LEVEL1_EXPONENTS) * 13 + 9 * 8
    # every case is the reference's answer for its input
    q = fp4spec.quantize(v["x"][17], "nvfp4")
    assert np.array_equal(q.codes, v["codes"][17]) and q.global_scale == v["global_scale"][17]


def test_deterministic_in_seed():
    a, _ = V.generate_cases("mxfp4", 1, 5)
    b, _ = V.generate_cases("mxfp4", 1, 5)
    c, _ = V.generate_cases("mxfp4", 1, 6)
    assert a.tobytes() == b.tobytes() and a.tobytes() != c.tobytes()


def test_check_passes_exact_results_in_every_accepted_form(nvfp4_vec):
    res = _results(nvfp4_vec)
    assert V.check(nvfp4_vec, res).ok
    packed = {"codes_packed": fp4spec.pack(res["codes"]), "global_scale_bits": res["global_scale"].view(np.uint32),
              "scales_blocked": np.stack([fp4spec.to_blocked(s) for s in res["scales"]])}
    assert V.check(nvfp4_vec, packed).ok


def test_check_finds_departures(nvfp4_vec):
    rep = V.check(nvfp4_vec, _results(nvfp4_vec, D.DivideNotReciprocal()))
    assert not rep.ok and rep.exit_code() == 1
    failed = {r.property for r in rep.departures}
    assert "vectors/ties" in failed or "vectors/sweep" in failed
    res = _results(nvfp4_vec, D.WrongGlobalScale())
    assert any(r.counterexample.field == "global_scale" for r in V.check(nvfp4_vec, res).departures)
    blocked = np.stack([fp4spec.to_blocked(s) for s in _results(nvfp4_vec)["scales"]])
    blocked[:, -1] = 0xFF  # a stale padded byte
    res = {"codes": _results(nvfp4_vec)["codes"], "scales_blocked": blocked,
           "global_scale": _results(nvfp4_vec)["global_scale"]}
    assert [r.property for r in V.check(nvfp4_vec, res).departures] == ["vectors/scale_layout"]


def test_sr_and_hif4_vectors():
    v = V.generate("mxfp4", level=1, seed=0, rounding="sr")
    assert v["rbits"].shape == v["x"].shape
    assert V.check(v, _results(v, rounding="sr")).ok
    assert not V.check(v, _results(v, D.SrIgnoresBits(), rounding="sr")).ok
    h = V.generate("hif4", level=1, seed=0)
    assert h["e1_8"].shape[-1] == 8 and "nonfinite" not in set(h["kind"].tolist())


def test_main_exit_codes(tmp_path, nvfp4_vec, capsys):
    vec = tmp_path / "vec.npz"
    assert V.main(["generate", "--scheme", "mxfp4:scale_rule=rceil", "--level", "1", "--seed", "1",
                   "-o", str(vec)]) == 0
    loaded = V.load(str(vec))
    assert str(loaded["scheme"]) == "mxfp4:scale_rule=rceil"
    good, bad = tmp_path / "good.npz", tmp_path / "bad.npz"
    np.savez(good, **_results(loaded))
    np.savez(bad, **_results(loaded, D.TiesAway()))
    assert V.main(["check", str(vec), str(good)]) == 0
    assert V.main(["check", str(vec), str(bad), "--report", str(tmp_path / "r.md")]) == 1
    assert "FAIL" in (tmp_path / "r.md").read_text()
    np.savez(tmp_path / "short.npz", codes=np.zeros((2, 4, 128), np.uint8))
    for argv in (["check", str(vec), str(tmp_path / "missing.npz")],
                 ["check", str(vec), str(tmp_path / "short.npz")],
                 ["check", str(good), str(good)],
                 ["generate", "--scheme", "mxfp9", "-o", str(tmp_path / "x.npz")],
                 ["generate", "--scheme", "nvfp4", "-o", str(tmp_path / "x.bin")],
                 []):
        assert V.main(argv) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and "shape" in err and "not an fp4spec vector file" in err
