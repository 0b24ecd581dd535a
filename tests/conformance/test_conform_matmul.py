"""The block-scaled GEMM in the conformance suite: ``matmul/<family>`` rows of ``fp4spec conform``
for every accumulator model a backend claims, and ``fp4spec vectors --op matmul`` round trips.

Every run here names its backend explicitly (numpy, a planted defect, a class in this file):
some tests set TRITON_INTERPRET=1 for the whole process, which makes the triton backend
"available", and no test may start a conformance run on it by accident.
"""

import dataclasses
import json

import numpy as np
import pytest

import fp4spec
from fp4spec.backends import Availability, Backend, BackendError, Capabilities, NumpyBackend
from fp4spec.cli import main as cli_main
from fp4spec.conformance import run
from fp4spec.conformance import vectors as V
from fp4spec.conformance.matmul_properties import FAMILIES, family_schemes, make_operand, schemes_for
from fp4spec.conformance.report import render_markdown, render_text
from fp4spec.conformance.runner import DEFAULT_MATMUL_MAX_EXAMPLES, StderrProgress
from fp4spec.conformance.command import main as conform_main
from tests.conformance import defects as D


def _failures(report):
    return "\n".join(f"{r.property}/{r.scheme}/{r.rounding}: " + (r.counterexample.what if r.counterexample
                                                                   else r.reason) for r in report.departures)


def _rows(report):
    return {(r.property, r.scheme, r.rounding): (r.status, r.examples, r.counterexample and r.counterexample.to_dict())
            for r in report.results}


# -- the backend interface ------------------------------------------------------------------------------

def test_capabilities_accumulators_are_validated_against_the_catalogue():
    caps = Capabilities(schemes=("nvfp4",), operations=("matmul",),
                        accumulators=("sm100-mxf4nvf4", fp4spec.get_accumulator("exact"), "sm100-mxf4nvf4"))
    assert caps.accumulators == ("sm100-mxf4nvf4", "exact") and caps.supports("matmul")
    assert Capabilities(schemes=("nvfp4",)).accumulators == ()
    with pytest.raises(BackendError, match=r"accumulators: 'sm100' is not one of 'exact', 'fp32'"):
        Capabilities(schemes=("nvfp4",), operations=("matmul",), accumulators=("sm100",))
    with pytest.raises(BackendError, match="operation 'matmul' is claimed but no accumulator model is named"):
        Capabilities(schemes=("nvfp4",), operations=("matmul",))
    with pytest.raises(BackendError, match="'exact' given but operation 'matmul' is not claimed"):
        Capabilities(schemes=("nvfp4",), accumulators=("exact",))
    renamed = dataclasses.replace(fp4spec.get_accumulator("exact"), notes="mine")
    with pytest.raises(BackendError, match="differs from the catalogued model"):
        Capabilities(schemes=("nvfp4",), operations=("matmul",), accumulators=(renamed,))


def test_numpy_backend_claims_every_model_and_is_fp4spec_matmul():
    be = NumpyBackend()
    caps = be.capabilities()
    assert caps.supports("matmul") and caps.accumulators == tuple(fp4spec.accumulators)
    rng = np.random.default_rng(0)
    qa = fp4spec.quantize(rng.standard_normal((3, 64)).astype(np.float32), "nvfp4")
    qb = fp4spec.quantize(rng.standard_normal((2, 64)).astype(np.float32), "nvfp4")
    c = rng.standard_normal((3, 2)).astype(np.float32)
    for acc in ("exact", "sm100-mxf4nvf4"):
        want = fp4spec.matmul(qa, qb, accumulator=acc, c=c)
        got = be.matmul(qa, qb, accumulator=acc, c=c)
        assert got.dtype == np.float32 and np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_base_class_matmul_says_what_is_missing():
    class Minimal(Backend):
        name = "minimal"

    with pytest.raises(NotImplementedError, match="matmul: backend 'minimal' does not implement it"):
        Minimal().matmul(None, None, accumulator="exact")


# -- fp4spec conform: matmul rows ------------------------------------------------------------------------

def test_numpy_conforms_on_matmul_rows():
    report = run("numpy", properties=["matmul"])
    assert report.ok, _failures(report)
    accs = tuple(fp4spec.accumulators)
    assert [(r.property, r.rounding) for r in report.results] == \
        [(f"matmul/{f}", f"acc={a}") for a in accs for f in FAMILIES]
    for r in report.results:
        takes = family_schemes(r.property[len("matmul/"):], schemes_for(r.rounding[4:]))
        if not takes:   # scale_sign_bit under sm100-mxf8f6f4 (E8M0 scales only)
            assert (r.property, r.rounding, r.status) == ("matmul/scale_sign_bit", "acc=sm100-mxf8f6f4", "SKIP")
            assert "needs UE4M3 block scales" in r.reason
            continue
        assert r.status == "PASS" and r.examples == DEFAULT_MATMUL_MAX_EXAMPLES
        assert r.scheme == ",".join(takes)
    assert report.matmul_max_examples == DEFAULT_MATMUL_MAX_EXAMPLES


def test_default_plan_adds_matmul_rows_for_the_claimed_schemes():
    report = run("numpy", schemes=["nvint4"], rounding=["rne"], max_examples=0, matmul_max_examples=1)
    assert report.ok, _failures(report)
    mm = [r for r in report.results if r.property.startswith("matmul")]
    assert report.results[:len(report.results) - len(mm)] == [r for r in report.results if r not in mm]
    ran = {r.rounding for r in mm if r.status == "PASS"}
    assert ran == {"acc=exact", "acc=fp32", "acc=sm90-bf16", "acc=cdna3-fp8"}
    assert all(r.scheme == "nvint4" for r in mm if r.status == "PASS")
    skipped = {r.rounding: r.reason for r in mm if r.status == "SKIP"}
    assert set(skipped) == {"acc=sm100-mxf4nvf4", "acc=sm100-mxf8f6f4"}
    assert "takes none of the schemes checked (nvint4); it takes mxfp4, nvfp4" in skipped["acc=sm100-mxf4nvf4"]
    assert not [r for r in run("numpy", schemes=["nvint4"], max_examples=0, matmul_max_examples=0).results
                if r.property.startswith("matmul") and r.status != "SKIP"]


def test_subsets_do_not_change_matmul_rows():
    whole = _rows(run(D.Truncate34Gemm, properties=["matmul"], seed=5))
    one = _rows(run(D.Truncate34Gemm, properties=["matmul/truncation"], seed=5, accumulators=["sm100-mxf4nvf4"]))
    key = ("matmul/truncation", "mxfp4,nvfp4,nvint4_e0m3", "acc=sm100-mxf4nvf4")
    assert list(one) == [key] and one[key] == whole[key] and whole[key][0] == "FAIL"
    again = _rows(run(D.Truncate34Gemm, properties=["matmul"], seed=5))
    assert again == whole


# planted GEMM defect, the rows that must report it
GEMM_CASES = [
    (D.Fp32AccumulateGemm, {"matmul/truncation", "matmul/alignment", "matmul/nan_scales"}),
    (D.Truncate34Gemm, {"matmul/truncation"}),
    (D.SwappedScalesGemm, {"matmul/random", "matmul/truncation"}),
    (D.Ue4m3BitAsSignGemm, {"matmul/scale_sign_bit"}),
]


@pytest.mark.parametrize("defect, caught_by", GEMM_CASES, ids=[c[0].__name__ for c in GEMM_CASES])
def test_default_run_rejects_planted_gemm_defect(defect, caught_by):
    # properties=["matmul"] keeps this fast; the rows are those of a full default run
    report = run(defect, properties=["matmul"])
    assert not report.ok and report.exit_code() == 1
    departing = {r.property for r in report.departures}
    assert caught_by <= departing, f"{defect.__name__}: caught by {departing}, expected {caught_by}"
    for r in report.departures:
        assert r.status == "FAIL" and r.rounding == "acc=sm100-mxf4nvf4"
        cx = r.counterexample
        if cx.field == "exception":   # the fp32 model refuses what sm100-mxf4nvf4 takes: bit-7 UE4M3 bytes
            assert (defect, r.property) == (D.Fp32AccumulateGemm, "matmul/scale_sign_bit"), cx.what
            assert "ue4m3_sign_bit='reject'" in cx.what
            continue
        assert cx.field == "matmul" and cx.what.startswith("d[") and "outputs differ" in cx.what
        assert cx.expected != cx.actual and {"row", "column"} <= set(cx.where)
    if defect is D.Ue4m3BitAsSignGemm:
        assert departing == {"matmul/scale_sign_bit"}


def test_a_gemm_refusing_ue4m3_bytes_the_model_reads_departs():
    """Planted: a kernel that refuses UE4M3 scale bytes with bit 7 set under
    sm100-mxf4nvf4 (ue4m3_sign_bit='ignore'; what fp4spec.matmul did before the policy)."""
    report = run(D.Ue4m3BitRefusedGemm, properties=["matmul"])
    assert [r.property for r in report.departures] == ["matmul/scale_sign_bit"]
    (r,) = report.departures
    assert r.counterexample.field == "exception" and "has bit 7 set" in r.counterexample.what
    assert r.counterexample.tensor is not None


def test_a_gemm_accepting_ue4m3_bytes_the_model_refuses_departs():
    """Planted: a kernel that claims exact (ue4m3_sign_bit='reject') but reads bit-7 bytes
    as their low 7 bits: the scale_sign_bit row says it accepted a byte the model refuses."""
    report = run(D.Ue4m3BitAcceptedGemm, properties=["matmul"])
    assert [r.property for r in report.departures] == ["matmul/scale_sign_bit"]
    (r,) = report.departures
    cx = r.counterexample
    assert r.rounding == "acc=exact" and cx.field == "matmul"
    assert "which accumulator 'exact' refuses (ue4m3_sign_bit='reject'): expected a ValueError" in cx.what
    assert "family scale_sign_bit" in cx.notes[0] and cx.tensor["scheme"] in ("nvfp4", "nvfp4_2d", "nvint4")


def test_gemm_defect_counterexample_replays_from_the_json_report(tmp_path):
    out = tmp_path / "r.json"
    argv = ["--backend", "tests.conformance.defects:Truncate34Gemm", "--property", "matmul/truncation", "--no-progress",
            "--report", str(out)]
    assert conform_main(argv) == 1
    row = json.loads(out.read_text())["results"][0]
    cx = row["counterexample"]
    t = cx["tensor"]

    def operand(p):
        bits = t[f"{p}_global_bits"]
        g = None if bits is None else np.array(int(bits, 16), np.uint32).view(np.float32)
        return make_operand(t[f"{p}_codes"], t[f"{p}_scales"], t["scheme"], g)

    c = None if t["c_bits"] is None else \
        np.array([[int(b, 16) for b in r] for r in t["c_bits"]], np.uint32).view(np.float32)
    qa, qb = operand("a"), operand("b")
    i, j = cx["where"]["row"], cx["where"]["column"]
    want = fp4spec.matmul(qa, qb, accumulator="sm100-mxf4nvf4", c=c)
    got = D.Truncate34Gemm().matmul(qa, qb, accumulator="sm100-mxf4nvf4", c=c)
    assert cx["expected"] == [f"0x{int(want.view(np.uint32)[i, j]):08X}"]
    assert cx["actual"] == [f"0x{int(got.view(np.uint32)[i, j]):08X}"]


class RaisingGemm(NumpyBackend):
    name = "raising-gemm"

    def capabilities(self):
        return dataclasses.replace(super().capabilities(), accumulators=("exact",))

    def matmul(self, qa, qb, *, accumulator, c=None):
        if c is not None:
            raise RuntimeError("kernel has no C operand")
        return super().matmul(qa, qb, accumulator=accumulator, c=c)


def test_a_matmul_exception_is_a_departure_not_a_suite_error():
    report = run(RaisingGemm, properties=["matmul/random"])
    (row,) = report.results
    assert row.status == "FAIL" and row.counterexample.field == "exception"
    assert "matmul raised RuntimeError: kernel has no C operand" in row.counterexample.what
    assert row.counterexample.tensor["c_bits"] is not None


class DuckGemm:
    """Not a Backend subclass: the registry's wrapper must forward matmul."""

    name = "duck-gemm"

    def capabilities(self):
        return Capabilities(schemes=("nvfp4",), operations=("matmul",), accumulators=("fp32",))

    def quantize(self, x, scheme, **kw):
        return fp4spec.quantize(x, scheme, **kw)

    def matmul(self, qa, qb, *, accumulator, c=None):
        return fp4spec.matmul(qa, qb, accumulator=accumulator, c=c)


class NoMatmul(NumpyBackend):
    name = "no-matmul"

    def capabilities(self):
        return Capabilities(schemes=("nvfp4",), rounding=("rne",))


def test_duck_typed_and_unclaimed_matmul():
    report = run(f"{__name__}:DuckGemm", properties=["matmul"], matmul_max_examples=2)
    assert report.ok and {r.rounding for r in report.results} == {"acc=fp32"}
    assert {r.scheme for r in report.results} == {"nvfp4"}  # the claimed schemes the model takes
    (row,) = run(NoMatmul, properties=["matmul"]).results
    assert (row.property, row.status, row.reason) == ("matmul", "SKIP", "operation 'matmul' not claimed")


@pytest.mark.parametrize("argv, words", [
    (["--accumulator", "sm100"], ["accumulator: 'sm100' is not one of 'exact'"]),
    (["--backend", "tests.conformance.defects:Truncate34Gemm", "--accumulator", "exact"],
     ["accumulator: 'exact' is not claimed by backend 'gemm-truncate-34'; it claims sm100-mxf4nvf4"]),
    (["--backend", f"{__name__}:NoMatmul", "--accumulator", "exact"],
     ["backend 'no-matmul' does not claim the 'matmul' operation"]),
    (["--matmul-max-examples", "-1"], ["matmul-max-examples: -1 is negative"]),
    (["--property", "matmul/speed"], ["invalid choice: 'matmul/speed'"]),
])
def test_matmul_usage_errors_exit_2(argv, words, capsys):
    if "--backend" not in argv:
        argv = ["--backend", "numpy"] + argv
    assert conform_main(argv + ["--no-progress"]) == 2
    err = capsys.readouterr().err
    for w in words:
        assert w in err


def test_cli_accumulator_narrows_and_tables_show_gemm_rows(capsys):
    assert conform_main(["--backend", "numpy", "--property", "matmul", "--accumulator", "sm100-mxf4nvf4",
                         "--matmul-max-examples", "2", "--all"]) == 0
    cap = capsys.readouterr()
    lines = cap.out.splitlines()
    assert lines[0].split() == ["scheme", "rows", "passed", "failed", "skipped", "s"]  # the summary per group
    assert lines[2].split()[:5] == ["matmul", "sm100-mxf4nvf4", str(len(FAMILIES)), str(len(FAMILIES)), "0"]
    assert lines[4].split()[:5] == ["property", "schemes", "accumulator", "result", "examples"]
    assert "matmul/truncation      mxfp4,nvfp4,nvint4_e0m3  sm100-mxf4nvf4  PASS    2" in cap.out
    assert "matmul/scale_sign_bit  nvfp4,nvint4_e0m3        sm100-mxf4nvf4  PASS    2" in cap.out
    assert "acc=exact" not in cap.out and "fp32 " not in cap.out
    assert f"[{len(FAMILIES)}/{len(FAMILIES)}] examples: matmul acc=sm100-mxf4nvf4: {len(FAMILIES)} passed" in cap.err
    assert conform_main(["--backend", "numpy", "--list"]) == 0
    listed = capsys.readouterr().out
    assert "accumulators (matmul):" in listed and "sm100-mxf4nvf4   schemes: mxfp4, nvfp4, nvint4_e0m3" in listed


def test_mixed_report_renders_two_tables():
    report = run("numpy", schemes=["nvint4"], rounding=["rne"], properties=["ties_to_even", "matmul/random"],
                 accumulators=["exact"], max_examples=1, matmul_max_examples=1)
    text = render_text(report, all_rows=True)
    assert "ties_to_even  nvint4  rne       PASS" in text
    assert "matmul/random  nvint4   exact        PASS" in text
    md = render_markdown(report)
    assert "| property | schemes | accumulator |" in md and "| matmul/random | nvint4 | exact | PASS |" in md
    assert "matmul max examples 1" in md


def test_progress_groups_matmul_rows_by_model():
    import io

    buf = io.StringIO()
    run("numpy", properties=["matmul/random"], accumulators=["exact", "fp32"], matmul_max_examples=1,
        progress=StderrProgress(buf))
    assert buf.getvalue().splitlines() == [
        line for line in buf.getvalue().splitlines() if "matmul acc=" in line]
    assert "[1/2] examples: matmul acc=exact: 1 passed" in buf.getvalue()
    assert "[2/2] examples: matmul acc=fp32: 1 passed" in buf.getvalue()


# -- fp4spec vectors --op matmul ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def gemm_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("gemm")
    vec, res = d / "vec.npz", d / "results.npz"
    assert cli_main(["vectors", "generate", "--op", "matmul", "--scheme", "nvfp4", "--accumulator",
                     "sm100-mxf4nvf4", "--level", "1", "--seed", "7", "-o", str(vec)]) == 0
    assert cli_main(["vectors", "run", str(vec), "--backend", "numpy", "-o", str(res)]) == 0
    return d, vec, res


def test_vectors_round_trip_through_the_cli(gemm_files, capsys):
    d, vec, res = gemm_files
    v = V.load(str(vec))
    assert str(v["format"]) == "fp4spec-matmul-vectors" and str(v["accumulator"]) == "sm100-mxf4nvf4"
    assert str(v["level"]) == "standard" and int(v["n_cases"]) == 12 * len(FAMILIES)
    assert cli_main(["vectors", "check", str(vec), str(res), "--report", str(d / "ok.md")]) == 0
    out = capsys.readouterr().out
    assert "vectors/truncation      nvfp4    sm100-mxf4nvf4  PASS    12" in out
    assert "vectors/scale_sign_bit  nvfp4    sm100-mxf4nvf4  PASS    12" in out
    assert "results for nvfp4 under sm100-mxf4nvf4: CONFORMS" in out
    # the results as bit patterns are accepted too
    r = V.load(str(res))
    bits = {k.replace("/d", "/d_bits"): a.view(np.uint32) for k, a in r.items() if k.endswith("/d")}
    np.savez(d / "bits.npz", **bits)
    assert cli_main(["vectors", "check", str(vec), str(d / "bits.npz")]) == 0


def test_one_flipped_bit_exits_1_and_names_the_element(gemm_files, capsys):
    d, vec, res = gemm_files
    r = V.load(str(res))
    v = V.load(str(vec))
    i = 30
    fam = str(v[f"{i:04d}/family"])
    a = r[f"{i:04d}/d"].copy()
    m, n = a.shape
    row, col = m - 1, n - 1
    a.view(np.uint32)[row, col] ^= 1 << 22
    r[f"{i:04d}/d"] = a
    bad = d / "flipped.npz"
    np.savez(bad, **r)
    js = d / "flipped.json"
    assert cli_main(["vectors", "check", str(vec), str(bad), "--report", str(js)]) == 1
    out = capsys.readouterr().out
    want = int(v[f"{i:04d}/d_bits"][row, col])
    assert f"case {i:04d}: d[{row}, {col}]: expected 0x{want:08X} (" in out
    assert f"got 0x{want ^ (1 << 22):08X} (" in out and f"; 1 of {m * n} outputs differ" in out
    rep = json.loads(js.read_text())
    (failed,) = [x for x in rep["results"] if x["status"] == "FAIL"]
    assert failed["property"] == f"vectors/{fam}"
    assert failed["counterexample"]["where"] == {"case": i, "row": row, "column": col}


def test_a_defect_through_vectors_run_departs(gemm_files, capsys):
    d, vec, _ = gemm_files
    res = d / "trunc.npz"
    assert cli_main(["vectors", "run", str(vec), "--backend", "tests.conformance.defects:Truncate34Gemm",
                     "-o", str(res)]) == 0
    assert cli_main(["vectors", "check", str(vec), str(res)]) == 1
    assert "vectors/truncation" in capsys.readouterr().out.split("Departures")[1]


def test_vectors_usage_errors_exit_2(gemm_files, tmp_path, capsys):
    d, vec, res = gemm_files
    r = V.load(str(res))
    first = {k: a for k, a in r.items() if k != "0003/d"}
    np.savez(tmp_path / "missing.npz", **first)
    np.savez(tmp_path / "f64.npz", **{**r, "0003/d": r["0003/d"].astype(np.float64)})
    np.savez(tmp_path / "shape.npz", **{**r, "0003/d": np.zeros((9, 9), np.float32)})
    for argv in (["generate", "--op", "matmul", "--scheme", "nvfp4", "-o", str(tmp_path / "x.npz")],
                 ["generate", "--op", "matmul", "--scheme", "ufp4", "--accumulator", "sm100-mxf4nvf4",
                  "-o", str(tmp_path / "x.npz")],
                 ["generate", "--op", "matmul", "--scheme", "nvfp4", "--accumulator", "exact", "--level", "3",
                  "-o", str(tmp_path / "x.npz")],
                 ["generate", "--op", "matmul", "--scheme", "nvfp4", "--accumulator", "exact", "--rounding", "sr",
                  "-o", str(tmp_path / "x.npz")],
                 ["generate", "--scheme", "nvfp4", "--accumulator", "exact", "-o", str(tmp_path / "x.npz")],
                 ["check", str(vec), str(tmp_path / "missing.npz")],
                 ["check", str(vec), str(tmp_path / "f64.npz")],
                 ["check", str(vec), str(tmp_path / "shape.npz")],
                 ["check", str(vec), str(vec)],
                 ["run", str(vec), "--backend", f"{__name__}:NoMatmul", "-o", str(tmp_path / "y.npz")]):
        assert cli_main(["vectors"] + argv) == 2, argv
    err = capsys.readouterr().err
    for words in ("--op matmul needs --accumulator", "'ufp4' is not taken by accumulator 'sm100-mxf4nvf4'",
                  "level: 3 is not one of 0, 1, 2", "--rounding is for --op quantize",
                  "--accumulator is for --op matmul", "no result for case 0003", "'0003/d' is float64",
                  "'0003/d' has shape (9, 9)", "this is a vector file", "does not claim matmul"):
        assert words in err, words
    assert not (tmp_path / "x.npz").exists() and not (tmp_path / "y.npz").exists()


class CrashingGemm(NumpyBackend):
    name = "crashing-gemm"

    def matmul(self, qa, qb, *, accumulator, c=None):
        raise RuntimeError("illegal instruction")


def test_vectors_run_of_a_crashing_backend_exits_1(gemm_files, tmp_path, capsys):
    _, vec, _ = gemm_files
    assert cli_main(["vectors", "run", str(vec), "--backend", f"{__name__}:CrashingGemm",
                     "-o", str(tmp_path / "y.npz")]) == 1
    assert "backend 'crashing-gemm' raised on case 0000: RuntimeError: illegal instruction" in capsys.readouterr().err


class Unavailable(NumpyBackend):
    name = "needs-a-gpu"

    def is_available(self):
        return Availability.no("no CUDA device")


def test_quantize_vectors_run_round_trip(tmp_path, capsys):
    vec, res = tmp_path / "q.npz", tmp_path / "qr.npz"
    assert cli_main(["vectors", "generate", "--scheme", "mxfp4", "--rounding", "sr", "-o", str(vec)]) == 0
    assert cli_main(["vectors", "run", str(vec), "--backend", "numpy", "-o", str(res)]) == 0
    assert cli_main(["vectors", "check", str(vec), str(res)]) == 0
    assert cli_main(["vectors", "run", str(vec), "--backend", "tests.conformance.defects:SrIgnoresBits",
                     "-o", str(res)]) == 0
    assert cli_main(["vectors", "check", str(vec), str(res)]) == 1
    assert cli_main(["vectors", "run", str(vec), "--backend", f"{__name__}:Unavailable", "-o", str(res)]) == 2
    assert cli_main(["vectors", "check", str(vec), str(vec)]) == 2
    err = capsys.readouterr().err
    assert "'needs-a-gpu' is not available here: no CUDA device" in err and "this is a vector file" in err
