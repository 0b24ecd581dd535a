"""A kernel author's mistakes get a clear message, never "internal error": set-up errors, the
return contract, backends from files, report paths, flags, --fail-fast, --thorough, --shrink,
help without hypothesis."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from types import SimpleNamespace

import numpy as np
import pytest

import fp4spec
from fp4spec.backends import Backend, Capabilities, NumpyBackend
from fp4spec.conformance import run
from fp4spec.conformance.contract import CONTRACT_URL
from fp4spec.conformance.command import main

ROOT = Path(__file__).resolve().parents[2]
FAST = ["--max-examples", "0", "--matmul-max-examples", "0", "--no-progress"]


# -- set-up errors: one line, exit 2 ----------------------------------------------------------------

class InitRaises(NumpyBackend):
    def __init__(self):
        raise RuntimeError("CUDA driver version is insufficient for CUDA runtime version")


class CapabilitiesRaises(NumpyBackend):
    name = "caps-raise"

    def capabilities(self):
        raise RuntimeError("CUDA error: no kernel image is available for execution on the device")


class AvailabilityRaises(NumpyBackend):
    name = "avail-raise"

    def is_available(self):
        raise OSError("libcuda.so.1: cannot open shared object file")


@pytest.mark.parametrize("target, words", [
    (f"{__name__}:InitRaises", "loading it raised RuntimeError: CUDA driver version is insufficient"),
    (f"{__name__}:CapabilitiesRaises", "backend 'caps-raise': capabilities() raised RuntimeError: CUDA error"),
    (f"{__name__}:AvailabilityRaises", "backend 'avail-raise': is_available() raised OSError: libcuda.so.1"),
    ("no_such_module_anywhere:Kernel", "cannot import module 'no_such_module_anywhere'"),
])
def test_set_up_errors_are_one_line_and_exit_2(target, words, capsys):
    assert main(["--backend", target] + FAST) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and cap.err.count("\n") == 1 and words in cap.err, cap.err
    assert "Traceback" not in cap.err


# -- backends from files and from the current directory --------------------------------------------

KERNEL = textwrap.dedent("""
    import fp4spec
    from fp4spec.backends import Backend, Capabilities
    from helper_rounding import ROUNDING   # a sibling module: the file's folder is importable

    class Kernel(Backend):
        name = "file-kernel"

        def capabilities(self):
            return Capabilities(schemes=["nvfp4"], rounding=["rne"])

        def quantize(self, x, scheme, *, rounding="rne", rbits=None, sr_bits=8):
            return fp4spec.quantize(x, scheme, rounding=ROUNDING)
""")


@pytest.fixture
def kernel_dir(tmp_path):
    d = tmp_path / "kernels"
    d.mkdir()
    (d / "mykernel.py").write_text(KERNEL)
    (d / "helper_rounding.py").write_text("ROUNDING = 'rne'\n")
    return d


def _conform(cwd, *args, env=None):
    return subprocess.run([sys.executable, "-m", "fp4spec", "conform", *args, *FAST], cwd=cwd,
                          env=env or dict(os.environ), capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("spec_of", [lambda d: "./mykernel.py:Kernel", lambda d: str(d / "mykernel.py") + ":Kernel",
                                     lambda d: "kernels/mykernel.py:Kernel"])
def test_backend_from_a_file(kernel_dir, spec_of):
    cwd = kernel_dir.parent if spec_of(kernel_dir).startswith("kernels/") else kernel_dir
    proc = _conform(cwd, "--backend", spec_of(kernel_dir))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "file-kernel: CONFORMS" in proc.stdout


def test_module_in_the_current_directory_without_pythonpath(kernel_dir):
    exe = Path(sys.executable).with_name("fp4spec")  # the console script: sys.path[0] is its own folder
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-P", "-m", "fp4spec"]
    proc = subprocess.run(cmd + ["conform", "--backend", "mykernel:Kernel", *FAST], cwd=kernel_dir, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_file_that_fails_to_import_is_a_set_up_error(tmp_path):
    (tmp_path / "broken.py").write_text("import not_installed_anywhere\n")
    proc = _conform(tmp_path, "--backend", "./broken.py:Kernel")
    assert proc.returncode == 2 and "importing './broken.py' raised ModuleNotFoundError" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = _conform(tmp_path, "--backend", "./missing.py:Kernel")
    assert proc.returncode == 2 and "no file './missing.py'" in proc.stderr


# -- the return contract ------------------------------------------------------------------------------

class _Wrong(Backend):
    def capabilities(self):
        return Capabilities(schemes=["mxfp4"], rounding=["rne"])

    def quantize(self, x, scheme, *, rounding="rne", rbits=None, sr_bits=8):
        return self.wrong(fp4spec.quantize(x, scheme), x)


class FloatScales(_Wrong):
    def wrong(self, q, x):
        return fp4spec.QuantizedTensor(q.codes, np.exp2(q.scales.astype(np.float32) - 127), None, q.scheme, 1, x.shape)


class PackedCodes(_Wrong):
    """Not wrong: a QuantizedTensor holds 4-bit codes packed two per byte as they come."""

    def wrong(self, q, x):
        return fp4spec.QuantizedTensor(fp4spec.pack(q.codes), q.scales, None, q.scheme, 1, x.shape)


class PackedHiFirst(_Wrong):
    def wrong(self, q, x):
        return fp4spec.QuantizedTensor(fp4spec.pack(q.codes, order="hi_first"), q.scales, None, q.scheme, 1, x.shape)


class HalfCodesArray(_Wrong):
    def wrong(self, q, x):
        return SimpleNamespace(codes=fp4spec.pack(q.codes), scales=q.scales, global_scale=None)


class Float32Codes(_Wrong):
    def wrong(self, q, x):
        return fp4spec.QuantizedTensor(q.codes.astype(np.float32), q.scales, None, q.scheme, 1, x.shape)


class BlockedScales(_Wrong):
    def wrong(self, q, x):
        return fp4spec.QuantizedTensor(q.codes, fp4spec.to_blocked(q.scales), None, q.scheme, 1, x.shape)


class NotAQuantizedTensor(_Wrong):
    def wrong(self, q, x):
        return q.codes, q.scales


class Float8Scales(_Wrong):
    def wrong(self, q, x):
        torch = pytest.importorskip("torch")
        return fp4spec.QuantizedTensor(torch.from_numpy(np.array(q.codes)),
                                       torch.from_numpy(np.array(q.scales)).view(torch.float8_e8m0fnu), None,
                                       q.scheme, 1, x.shape)


def test_packed_codes_are_accepted_and_reported():
    """A QuantizedTensor of packed codes (lo_first) conforms, and the report says so; hi_first
    packing departs, and the diagnosis names the nibble swap."""
    report = run(PackedCodes, max_examples=0, matmul_max_examples=0)
    assert report.ok, report
    assert "quantize returned 4-bit codes packed two per byte" in report.notes, report.notes
    report = run(PackedHiFirst, max_examples=0, matmul_max_examples=0)
    assert not report.ok


@pytest.mark.parametrize("backend, words", [
    (FloatScales, "scales must be integer codes (bit patterns), not values (floats)"),
    (HalfCodesArray, "this looks packed (two 4-bit codes per byte); return a QuantizedTensor"),
    (Float32Codes, "codes must be integer codes (bit patterns), not values (floats)"),
    (BlockedScales, "looks like a swizzled layout"),
    (NotAQuantizedTensor, "return an fp4spec.QuantizedTensor"),
    (Float8Scales, "returned scales as a torch.float8_e8m0fnu tensor: return the bit patterns as integer codes "
                   "(scales.view(torch.uint8))"),
], ids=lambda v: v.__name__ if isinstance(v, type) else "")
def test_return_contract_departures_state_the_contract(backend, words):
    if backend is Float8Scales:
        pytest.importorskip("torch")
    report = run(backend, max_examples=0, matmul_max_examples=0)
    assert not report.ok and report.count("ERROR") == 0
    cx = report.departures[0].counterexample
    assert cx.field == "contract" and words in cx.what, cx.what
    assert CONTRACT_URL in cx.what and "internal error" not in cx.what


# -- reports, flags ----------------------------------------------------------------------------------

def test_an_unwritable_report_fails_before_the_run(tmp_path, capsys):
    path = tmp_path / "no" / "such" / "folder" / "r.json"
    assert main(["--backend", "numpy", "--report", str(path)] + FAST) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and "report: cannot write" in cap.err  # nothing ran
    assert not path.parent.exists()
    ok = tmp_path / "r.md"
    assert main(["--backend", "numpy", "--scheme", "nvint4", "--report", str(ok)] + FAST) == 0 and ok.exists()


def test_deprecated_spellings_still_work_with_a_note(capsys):
    assert main(["--backend", "numpy", "--schemes", "nvint4", "--quiet", "--rounding", "rne",
                 "--max-examples", "0", "--matmul-max-examples", "0"]) == 0
    err = capsys.readouterr().err
    assert "--schemes is deprecated; use --scheme" in err and "--quiet is deprecated; use --no-progress" in err
    assert "checks:" not in err  # --quiet still means no progress


def test_summary_wording_is_singular_for_one():
    from fp4spec.conformance.report import PropertyResult, Report

    assert "1 row: 1 passed" in Report("x", [PropertyResult("packing", "*", "-", "PASS")]).summary()
    assert "2 rows:" in Report("x", [PropertyResult("a", "*", "-", "PASS")] * 2).summary()


def test_fail_fast_stops_at_the_first_departure():
    from tests.conformance import defects as D

    report = run(D.TiesAway, schemes=["mxfp4", "nvfp4"], rounding=["rne"], fail_fast=True)
    assert len(report.departures) == 1 and "--fail-fast" in report.stopped and "stopped" in report.summary()
    assert len(report.results) < len(run(D.TiesAway, schemes=["mxfp4", "nvfp4"], rounding=["rne"]).results)


def test_thorough_is_the_earlier_depth(capsys):
    from fp4spec.conformance.runner import THOROUGH_MAX_EXAMPLES

    assert main(["--backend", "numpy", "--scheme", "nvint4", "--rounding", "rne", "--property", "monotonic",
                 "--thorough", "--no-progress", "--all"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("monotonic"))
    assert int(row.split()[4]) > THOROUGH_MAX_EXAMPLES  # deterministic checks + 20 examples


def test_shrink_draws_with_hypothesis_and_shrinks():
    pytest.importorskip("hypothesis")
    from tests.conformance import defects as D

    report = run(D.TiesAway, schemes=["nvfp4"], rounding=["rne"], properties=["ties_to_even"], shrink=True)
    assert not report.ok and report.departures[0].counterexample.matches.startswith("ties away")


# -- help without hypothesis --------------------------------------------------------------------------

NO_HYPOTHESIS = textwrap.dedent("""
    import sys, importlib.abc
    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name == "hypothesis" or name.startswith("hypothesis."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    sys.meta_path.insert(0, Block())
    from fp4spec.cli import main
    sys.exit(main(sys.argv[1:]))
""")

HELPS = [[], ["formats"], ["table"], ["profiles"], ["conform"], ["vectors"], ["vectors", "generate"],
         ["vectors", "check"], ["vectors", "run"], ["analyze"]]


@pytest.mark.parametrize("command", HELPS, ids=lambda c: " ".join(c) or "fp4spec")
def test_every_help_works_without_hypothesis_and_describes_the_command(command):
    proc = subprocess.run([sys.executable, "-c", NO_HYPOTHESIS, *command, "--help"], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("usage: fp4spec") and "hypothesis" not in proc.stderr
    paragraphs = [p for p in out.split("\n\n") if p.strip()]
    assert len(paragraphs) >= 3, out  # usage, a description, the options


def test_a_conform_run_works_without_hypothesis_and_shrink_says_what_it_needs():
    args = ["conform", "--backend", "numpy", "--scheme", "nvfp4", "--max-examples", "1", "--matmul-max-examples",
            "1", "--no-progress"]
    proc = subprocess.run([sys.executable, "-c", NO_HYPOTHESIS, *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    proc = subprocess.run([sys.executable, "-c", NO_HYPOTHESIS, *args, "--shrink"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 2 and "shrinking needs hypothesis" in proc.stderr and proc.stderr.count("\n") == 1


def test_mx_inputs_are_quantized_in_stacked_calls_and_shapes_are_counted():
    """MX blocks are independent: a row's deterministic inputs go to the backend in one call per
    width; the report counts the distinct shapes each scheme was called with (compile pressure)."""
    calls = []

    class Counting(NumpyBackend):
        name = "counting"

        def quantize(self, x, scheme, **kw):
            calls.append(x.shape)
            return super().quantize(x, scheme, **kw)

    report = run(Counting, schemes=["mxfp4"], rounding=["rne"], properties=["reference"], max_examples=0,
                 matmul_max_examples=0)
    assert report.ok and report.shapes["mxfp4"] == len(set(calls))
    assert max(s[0] for s in calls) > 8  # a tall stack of the row's inputs
    assert len(calls) < report.results[0].examples  # fewer calls than checks
