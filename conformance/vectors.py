"""Test vectors for hardware fp4spec cannot run: generate inputs with expected results, check results made elsewhere.

``fp4spec vectors generate --scheme nvfp4 --level 1 --seed 0 -o vec.npz`` writes inputs and
the reference's codes and scales; run the inputs through your kernel (on a Blackwell or
MI350 machine), save what it produced as ``results.npz``, and
``fp4spec vectors check vec.npz results.npz`` compares them bit for bit, with the same
report and exit codes as ``fp4spec conform`` (0 conforms, 1 departs, 2 usage error).

``--op matmul`` does the same for a block-scaled GEMM under a named accumulator model:
``fp4spec vectors generate --op matmul --scheme nvfp4 --accumulator sm100-mxf4nvf4 --level 1
-o vec.npz`` writes the operands as codes with the expected output bits
(:mod:`.matmul_vectors`, format ``"fp4spec-matmul-vectors"``); ``check`` tells the two kinds
of file apart by their ``format`` array. ``fp4spec vectors run vec.npz --backend NAME -o
results.npz`` runs either kind through a backend that can run here and writes its results
in the layout ``check`` reads (a round trip, or a template for the results file).

The vectors are TestFloat-style: every *case* is one small tensor whose amax has an
interesting exponent (level 1: the edges of float32, of the E8M0 range and of the NVFP4
tensor scale; level 2: every exponent from -149 to 127) times a significand pattern (1.0,
1.5, 1.75, just below 2, one ulp beside them, the element's rounding edge), filled with
the adversarial block kinds of :mod:`~fp4spec.conformance.builders` (ties and one ulp
beside them, binade edges, subnormals, saturation, zero and single-element blocks,
NaN/Inf); then extra cases of each kind alone.

npz layout (``format_version`` 1). N cases, each an ``R x C`` tensor quantized along its
last axis (``C`` a multiple of the block size k; tile schemes: ``R`` a multiple of the
tile height). Every case is quantized on its own (its own NVFP4 tensor scale).

====================  =====================  ==========================================================
array                 dtype, shape           meaning
====================  =====================  ==========================================================
format                str ()                 ``"fp4spec-vectors"``
format_version        int64 ()               1
scheme                str ()                 scheme spec, e.g. ``"nvfp4"`` or ``"mxfp4:scale_rule=rceil"``
rounding              str ()                 element rounding mode of the expected codes
sr_bits               int64 ()               random bits per element (used when rounding is ``"sr"``)
level, seed           int64 ()               how the vectors were generated
fp4spec_version       str ()                 the version that computed the expected results
kind                  str (N,)               case label: ``sweep`` or a block kind (``ties``, ``zero``...)
x                     float32 (N, R, C)      inputs (bit patterns are exact; NaN payloads as written)
rbits                 uint32 (N, R, C)       random bits, one per element (rounding ``"sr"`` only)
codes                 uint8 (N, R, C)        expected element codes, one per byte
codes_packed          uint8 (N, R, C/2)      the same, two per byte, first element in the low nibble (4-bit elements)
scales                uint8 (N, R, C/k)      expected scale codes (E8M0 / UE4M3 / E6M2), one per 1 x k block
global_scale          float32 (N,)           expected tensor decode scale (two-level schemes only)
global_scale_bits     uint32 (N,)            its bit pattern
e1_8, e1_16           uint8 (N, R, C/64, .)  HiF4 micro-exponent bits (HiF4 only)
====================  =====================  ==========================================================

A results file holds the backend's answers for the same cases: ``codes`` (N, R, C) or
``codes_packed`` (N, R, C/2, low nibble first); ``scales`` (N, R, C/k) or ``scales_blocked``
(N, R'*C', the cuBLAS 128x4 layout of each case's scale matrix, padding checked to be zero);
``global_scale`` (float32) or ``global_scale_bits`` (uint32) for two-level schemes; ``e1_8`` and
``e1_16`` for HiF4. Any other arrays are ignored.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from fp4spec.backends.base import BackendError, as_numpy, resolve_scheme, scheme_spec
from fp4spec.cli_options import parse_args
from fp4spec.rounding import ROUNDING_MODES

from . import builders
from . import matmul_vectors as mmv
from .compare import compare_quantized
from .report import FAIL, PASS, Counterexample, PropertyResult, Report, render_text, write_report

FORMAT = "fp4spec-vectors"
FORMAT_VERSION = 1
#: The ``format`` of GEMM vector files (:mod:`.matmul_vectors`).
MATMUL_FORMAT = mmv.FORMAT
#: What ``fp4spec vectors generate --op`` takes.
OPS = ("quantize", "matmul")

#: Level-1 tensor-amax exponents: float32 edges, E8M0 range edges, NVFP4 tensor-scale edges.
LEVEL1_EXPONENTS = (-149, -140, -133, -127, -126, -125, -100, -64, -20, -10, -3, -1, 0, 1, 2, 3, 8, 10, 20, 64,
                    100, 120, 125, 126, 127)


class VectorError(BackendError):
    """A vector or results file is missing, malformed or does not match (a usage error)."""


class BackendRaised(Exception):
    """``vectors run``: the backend raised on a case (a departure, exit status 1)."""


def case_shape(scheme) -> tuple[int, int]:
    """(R, C) of every case: 4 row blocks x 4 blocks (tile schemes: 2 x 2 tiles)."""
    sch = resolve_scheme(scheme)
    return (2 * sch.tile_rows, 2 * sch.block_size) if sch.is_2d else (4, 4 * sch.block_size)


def _grid(scheme) -> tuple[int, int]:
    sch = resolve_scheme(scheme)
    r, c = case_shape(sch)
    return r // sch.tile_rows, c // sch.block_size


def generate_cases(scheme, level: int = 1, seed: int = 0) -> tuple[np.ndarray, list[str]]:
    """The inputs: (x float32 (N, R, C), kind labels). Deterministic in (scheme, level, seed)."""
    sch = resolve_scheme(scheme)
    if level not in (1, 2):
        raise VectorError(f"level: {level!r} is not 1 or 2")
    rng = np.random.default_rng(seed)
    rows, cols = _grid(sch)
    nb = rows * cols
    kinds = builders.kinds_for(sch)
    finite = builders.kinds_for(sch, builders.FINITE_KINDS)  # a NaN/Inf block would fix the tensor scale at 1
    sigs = builders.amax_significands(sch)
    exps = LEVEL1_EXPONENTS if level == 1 else tuple(range(-149, 128))
    spreads = (0, 2, 8, 40, 250)
    xs, labels = [], []
    i = 0
    for e in exps:
        for sig in sigs:
            ks = [finite[(i + j) % len(finite)] for j in range(nb)]
            g = builders.global_amax(rng, sch, e, sig)
            xs.append(builders.build_tensor(rng, sch, ks, block_rows=rows, block_cols=cols, amax=g,
                                            spread=spreads[i % len(spreads)]))
            labels.append("sweep")
            i += 1
    extra = 8 if level == 1 else 64
    for kind in kinds:
        for _ in range(extra):
            xs.append(builders.build_tensor(rng, sch, kind, block_rows=rows, block_cols=cols,
                                            spread=int(rng.choice(spreads))))
            labels.append(kind)
    return np.stack(xs).astype(np.float32), labels


def generate(scheme, level: int = 1, seed: int = 0, rounding: str = "rne", sr_bits: int = 8) -> dict:
    """The whole vector set as a dict of arrays (the npz layout of the module docstring)."""
    import fp4spec
    from fp4spec.backends import get_backend

    sch = resolve_scheme(scheme)
    if rounding not in ROUNDING_MODES:
        raise VectorError(f"rounding: {rounding!r} is not one of {', '.join(ROUNDING_MODES)}")
    if sch.structure == "hif4" and rounding != "rne":
        raise VectorError("rounding: HiF4 has only its own rounding ('rne')")
    x, labels = generate_cases(sch, level, seed)
    ref = get_backend("numpy")
    rbits = None
    if rounding == "sr":
        rbits = builders.build_rbits(np.random.default_rng([seed, 1]), x.shape, sr_bits, "uniform")
    qs = [ref.quantize(x[n], sch, rounding=rounding, rbits=None if rbits is None else rbits[n], sr_bits=sr_bits)
          for n in range(len(x))]
    out = {
        "format": np.array(FORMAT), "format_version": np.array(FORMAT_VERSION),
        "scheme": np.array(scheme_spec(sch)), "rounding": np.array(rounding), "sr_bits": np.array(sr_bits),
        "level": np.array(level), "seed": np.array(seed), "fp4spec_version": np.array(fp4spec.__version__),
        "kind": np.array(labels), "x": x,
        "codes": np.stack([q.codes for q in qs]).astype(np.uint8),
        "scales": np.stack([q.scales for q in qs]).astype(np.uint8),
    }
    if rbits is not None:
        out["rbits"] = rbits
    if sch.element.bits == 4:
        out["codes_packed"] = np.stack([fp4spec.pack(q.codes) for q in qs])
    if sch.structure == "two_level":
        g = np.array([q.global_scale for q in qs], np.float32)
        out["global_scale"], out["global_scale_bits"] = g, g.view(np.uint32)
    if sch.structure == "hif4":
        out["e1_8"] = np.stack([q.e1_8 for q in qs]).astype(np.uint8)
        out["e1_16"] = np.stack([q.e1_16 for q in qs]).astype(np.uint8)
    return out


def save(path: str, vectors: dict) -> None:
    np.savez_compressed(path, **vectors)


def load(path: str) -> dict:
    """Read an npz (vectors or results) into a dict of arrays; VectorError if unreadable."""
    try:
        with np.load(path, allow_pickle=False) as f:
            return {k: f[k] for k in f.files}
    except FileNotFoundError:
        raise VectorError(f"file: {path!r} does not exist") from None
    except (OSError, ValueError) as exc:
        raise VectorError(f"file: {path!r} is not a readable npz file: {exc}") from None


def _str(a) -> str:
    return str(np.asarray(a).item() if np.ndim(a) == 0 else a)


def _results_arrays(vec: dict, res: dict, sch) -> dict:
    """The backend's answers in the vectors' layout: codes (N,R,C), scales (N,R,nb), global bits, e1 bits."""
    from fp4spec.layouts import from_blocked
    from fp4spec.packing import unpack

    n, R, C = vec["x"].shape
    nb = C // sch.block_size
    out = {"layout_errors": []}
    if "codes" in res:
        codes = res["codes"]
    elif "codes_packed" in res:
        codes = unpack(res["codes_packed"])
    else:
        raise VectorError("results: need 'codes' (N, R, C) or 'codes_packed' (N, R, C/2)")
    if codes.shape != (n, R, C):
        raise VectorError(f"results: codes have shape {codes.shape}, the vectors have {(n, R, C)}")
    out["codes"] = codes
    if "scales" in res:
        scales = res["scales"]
    elif "scales_blocked" in res:
        buf = res["scales_blocked"].reshape(n, -1)
        scales = np.empty((n, R, nb), np.uint8)
        for i in range(n):
            try:
                scales[i] = from_blocked(buf[i], R, nb, check_padding=True)
            except ValueError as exc:
                scales[i] = from_blocked(buf[i], R, nb)
                out["layout_errors"].append((i, str(exc)))
    else:
        raise VectorError("results: need 'scales' (N, R, C/k) or 'scales_blocked' (N, R'*C')")
    if scales.shape != (n, R, nb):
        raise VectorError(f"results: scales have shape {scales.shape}, the vectors have {(n, R, nb)}")
    out["scales"] = scales
    if sch.structure == "two_level":
        if "global_scale_bits" in res:
            out["global_scale"] = np.asarray(res["global_scale_bits"], np.uint32).view(np.float32)
        elif "global_scale" in res:
            out["global_scale"] = res["global_scale"]
        else:
            raise VectorError("results: a two-level scheme needs 'global_scale' (float32) or 'global_scale_bits'")
        if np.shape(out["global_scale"]) != (n,):
            raise VectorError(f"results: global_scale has shape {np.shape(out['global_scale'])}, expected {(n,)}")
    for name in ("e1_8", "e1_16"):
        if sch.structure == "hif4":
            if name not in res:
                raise VectorError(f"results: HiF4 needs {name!r}")
            out[name] = res[name]
    return out


def _format(d: dict) -> str:
    return _str(d["format"]) if "format" in d else ""


def _refuse_vector_file(res: dict) -> None:
    if _format(res) in (FORMAT, MATMUL_FORMAT):
        raise VectorError(f"results: this is a vector file (format {_format(res)!r}), not results; run the "
                          f"vectors through the kernel first (or: fp4spec vectors run VEC.npz --backend NAME)")


def check(vectors, results) -> Report:
    """Compare results (paths or dicts) with the expected results of the vectors: one report
    row per case kind (GEMM vectors: per case family), with the first departing case's
    counterexample. Dispatches on the vectors' ``format`` (quantize or matmul vectors)."""
    import time

    from fp4spec.quantized import QuantizedTensor

    start = time.perf_counter()
    vec = load(vectors) if isinstance(vectors, str) else vectors
    res = load(results) if isinstance(results, str) else results
    fmt = _format(vec)
    if fmt == MATMUL_FORMAT:
        return check_matmul_results(vec, res)
    if fmt != FORMAT:
        raise VectorError(f"vectors: not an fp4spec vector file (format {_str(vec.get('format', '?'))!r}; "
                          f"expected {FORMAT!r} or {MATMUL_FORMAT!r})")
    _refuse_vector_file(res)
    if int(vec["format_version"]) != FORMAT_VERSION:
        raise VectorError(f"vectors: format_version {int(vec['format_version'])} is not {FORMAT_VERSION}")
    sch = resolve_scheme(_str(vec["scheme"]))
    rounding = _str(vec["rounding"])
    got = _results_arrays(vec, res, sch)
    x, kinds = vec["x"], [str(k) for k in vec["kind"]]
    rbits = vec.get("rbits")
    rows: dict[str, PropertyResult] = {}
    spec = scheme_spec(sch)
    for i in range(len(x)):
        label = f"vectors/{kinds[i]}"
        row = rows.setdefault(label, PropertyResult(label, spec, rounding, PASS))
        row.examples += 1
        if row.status == FAIL:
            continue
        shape = x[i].shape
        g = None if sch.structure != "two_level" else vec["global_scale"][i]
        expected = QuantizedTensor(vec["codes"][i], vec["scales"][i], g, sch, 1, shape,
                                   vec.get("e1_8", [None] * len(x))[i], vec.get("e1_16", [None] * len(x))[i])
        ga = None if sch.structure != "two_level" else got["global_scale"][i]
        actual = QuantizedTensor(got["codes"][i], got["scales"][i], ga, sch, 1, shape,
                                 got.get("e1_8", [None] * len(x))[i], got.get("e1_16", [None] * len(x))[i])
        cx = compare_quantized(expected, actual, x[i], sch, rounding, None if rbits is None else rbits[i],
                               label=f"case {i}")
        if cx is not None:
            row.status, row.counterexample = FAIL, cx
    if got["layout_errors"]:
        i, msg = got["layout_errors"][0]
        rows["vectors/scale_layout"] = PropertyResult(
            "vectors/scale_layout", spec, rounding, FAIL, examples=len(x),
            counterexample=Counterexample(f"case {i}: {msg}", field="blocked",
                                          notes=["padded entries must be zero bytes (vllm#45741)"]))
    source = f"vectors level {int(vec['level'])} seed {int(vec['seed'])} (fp4spec {_str(vec['fp4spec_version'])})"
    return Report(f"results for {spec}", list(rows.values()), seed=int(vec["seed"]), max_examples=len(x),
                  seconds=time.perf_counter() - start, notes=source, source="vectors")


# -- GEMM vectors ------------------------------------------------------------------------------------

def generate_matmul(scheme, accumulator, level=1, seed: int = 0) -> dict:
    """GEMM vectors (:func:`.matmul_vectors.generate_matmul_vectors`); VectorError on bad arguments.

    ``level``: 0/``"smoke"``, 1/``"standard"``, 2/``"full"``.
    """
    from fp4spec.accumulator_models import accumulators

    if accumulator not in accumulators:
        raise VectorError(f"accumulator: {accumulator!r} is not one of {', '.join(map(repr, accumulators))}")
    lv = mmv.LEVEL_ALIASES.get(level, level) if isinstance(level, int) and not isinstance(level, bool) else level
    if lv not in mmv.LEVELS:
        raise VectorError(f"level: {level!r} is not one of 0, 1, 2 ({', '.join(mmv.LEVELS)}) for --op matmul")
    try:
        return mmv.generate_matmul_vectors(resolve_scheme(scheme), accumulator, lv, seed)
    except ValueError as exc:
        if isinstance(exc, BackendError):
            raise
        raise VectorError(str(exc)) from None


def _check_matmul_file(vec: dict) -> int:
    if int(vec["format_version"]) != mmv.FORMAT_VERSION:
        raise VectorError(f"vectors: format_version {int(vec['format_version'])} is not {mmv.FORMAT_VERSION}")
    return int(vec["n_cases"])


def _matmul_result(res: dict, vec: dict, i: int) -> np.ndarray:
    """Case i's result as float32 (M, N) from ``NNNN/d`` (float32) or ``NNNN/d_bits`` (uint32);
    VectorError if missing or of the wrong dtype or shape."""
    shape = vec[mmv._key(i, "d_bits")].shape
    for key, dtype in ((mmv._key(i, "d"), np.float32), (mmv._key(i, "d_bits"), np.uint32)):
        if key in res:
            a = np.asarray(res[key])
            if a.dtype != dtype:
                raise VectorError(f"results: {key!r} is {a.dtype}, expected {np.dtype(dtype).name} "
                                  f"('NNNN/d' float32 or 'NNNN/d_bits' uint32)")
            if a.shape != shape:
                raise VectorError(f"results: {key!r} has shape {a.shape}, the vectors have {shape}")
            return a.view(np.float32)
    raise VectorError(f"results: no result for case {i:04d}: need {mmv._key(i, 'd')!r} (float32 {shape}) "
                      f"or {mmv._key(i, 'd_bits')!r} (uint32)")


def check_matmul_results(vec: dict, res: dict) -> Report:
    """Compare GEMM results with GEMM vectors, bit for bit: one row per case family
    (``vectors/<family>``, rounding column ``acc=<model>``); a departing row's counterexample
    names the first differing case and output (``case 0007: ... first at (1, 2): expected
    0x..., got 0x...``) with the rows of A and B behind it."""
    import time

    from .matmul_properties import mismatch_counterexample

    start = time.perf_counter()
    n = _check_matmul_file(vec)
    _refuse_vector_file(res)
    got = [_matmul_result(res, vec, i) for i in range(n)]   # usage errors before any comparison
    acc, spec = _str(vec["accumulator"]), _str(vec["scheme"])
    rows: dict[str, PropertyResult] = {}
    for i in range(n):
        family = _str(vec[mmv._key(i, "family")])
        label = f"vectors/{family}"
        row = rows.setdefault(label, PropertyResult(label, spec, f"acc={acc}", PASS))
        row.examples += 1
        if row.status == FAIL:
            continue
        want = vec[mmv._key(i, "d_bits")].view(np.float32)
        if np.array_equal(want.view(np.uint32), got[i].view(np.uint32)):
            continue
        cx = mismatch_counterexample(mmv.vector_case(vec, i), want, got[i], acc, prefix=f"case {i:04d}: ",
                                     where={"case": i})
        row.status, row.counterexample = FAIL, cx
    source = (f"matmul vectors level {_str(vec['level'])} seed {int(vec['seed'])} "
              f"(fp4spec {_str(vec['fp4spec_version'])}); {_str(vec['model'])}")
    return Report(f"results for {spec} under {acc}", list(rows.values()), seed=int(vec["seed"]), max_examples=n,
                  seconds=time.perf_counter() - start, notes=source, source="vectors")


def matmul_summary(vec: dict) -> str:
    n = int(vec["n_cases"])
    fams = [_str(vec[mmv._key(i, "family")]) for i in range(n)]
    mnk = [vec[mmv._key(i, "a_codes")].shape[:1] + vec[mmv._key(i, "b_codes")].shape for i in range(n)]
    big = tuple(max(d[j] for d in mnk) for j in range(3)) if n else (0, 0, 0)
    kinds, counts = np.unique(fams, return_counts=True)
    return (f"{n} GEMM cases for {_str(vec['scheme'])} under {_str(vec['accumulator'])} (level "
            f"{_str(vec['level'])}, seed {int(vec['seed'])}, M x N x K up to {big[0]} x {big[1]} x {big[2]}): "
            + ", ".join(f"{k} {c}" for k, c in zip(kinds, counts)))


# -- running vectors through a backend -----------------------------------------------------------------

def _backend_for_vectors(backend):
    from .loading import open_backend

    be, _, caps = open_backend(backend)
    return be, caps


def run_vectors(vectors, backend) -> dict:
    """Run vectors (a path or dict, either kind) through a backend that can run here; return
    its results in the layout :func:`check` reads. BackendError if the backend does not
    claim what the vectors need; :class:`BackendRaised` if it raises on a case."""
    vec = load(vectors) if isinstance(vectors, str) else vectors
    fmt = _format(vec)
    be, caps = _backend_for_vectors(backend)
    if fmt == MATMUL_FORMAT:
        n = _check_matmul_file(vec)
        acc = _str(vec["accumulator"])
        if not caps.supports("matmul") or acc not in caps.accumulators:
            raise BackendError(f"backend: {be.name!r} does not claim matmul with accumulator {acc!r}; it claims "
                               f"{', '.join(caps.accumulators) or 'no matmul'}")
        out = {"format": np.array("fp4spec-matmul-results"), "backend": np.array(be.name),
               "accumulator": np.array(acc), "scheme": vec["scheme"]}
        for i in range(n):
            case = mmv.vector_case(vec, i)
            try:
                d = as_numpy(be.matmul(case.qa, case.qb, accumulator=acc, c=case.c))
            except Exception as exc:  # noqa: BLE001 -- a departure, reported with the case
                raise BackendRaised(f"backend {be.name!r} raised on case {i:04d}: {type(exc).__name__}: {exc}") \
                    from None
            out[mmv._key(i, "d")] = np.asarray(d)
        return out
    if fmt != FORMAT:
        raise VectorError(f"vectors: not an fp4spec vector file (format {_str(vec.get('format', '?'))!r}; "
                          f"expected {FORMAT!r} or {MATMUL_FORMAT!r})")
    sch = resolve_scheme(_str(vec["scheme"]))
    rounding, sr_bits = _str(vec["rounding"]), int(vec["sr_bits"])
    if not caps.supports_scheme(sch) or rounding not in caps.roundings_for(sch):
        raise BackendError(f"backend: {be.name!r} does not claim scheme {scheme_spec(sch)!r} with rounding "
                           f"{rounding!r}")
    x, rbits = vec["x"], vec.get("rbits")
    qs = []
    for i in range(len(x)):
        try:
            qs.append(be.quantize(x[i], sch, rounding=rounding, rbits=None if rbits is None else rbits[i],
                                  sr_bits=sr_bits))
        except Exception as exc:  # noqa: BLE001
            raise BackendRaised(f"backend {be.name!r} raised on case {i}: {type(exc).__name__}: {exc}") from None
    out = {"format": np.array("fp4spec-results"), "backend": np.array(be.name),
           "codes": np.stack([as_numpy(q.codes) for q in qs]).astype(np.uint8),
           "scales": np.stack([as_numpy(q.scales) for q in qs]).astype(np.uint8)}
    if sch.structure == "two_level":
        out["global_scale"] = np.array([q.global_scale for q in qs], np.float32)
    if sch.structure == "hif4":
        out["e1_8"] = np.stack([as_numpy(q.e1_8) for q in qs]).astype(np.uint8)
        out["e1_16"] = np.stack([as_numpy(q.e1_16) for q in qs]).astype(np.uint8)
    return out


def vector_summary(vec: dict) -> str:
    if _format(vec) == MATMUL_FORMAT:
        return matmul_summary(vec)
    n, R, C = vec["x"].shape
    kinds, counts = np.unique(vec["kind"], return_counts=True)
    return (f"{n} cases of {R} x {C} for {_str(vec['scheme'])} ({_str(vec['rounding'])}, level {int(vec['level'])}, "
            f"seed {int(vec['seed'])}): " + ", ".join(f"{k} {c}" for k, c in zip(kinds, counts)))


# -- command line --------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fp4spec vectors",
                                description="Bit-exact test vectors for hardware fp4spec cannot run: quantization "
                                            "(--op quantize) and block-scaled GEMM (--op matmul). Exit 0: "
                                            "conforms; 1: departs; 2: usage error.")
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    g = sub.add_parser("generate", help="write inputs and expected results to an npz file",
                       description="Write test vectors -- inputs and the spec's expected codes, scales and tensor "
                                   "scales (or GEMM operands and expected output bits) -- to an npz file, to run on "
                                   "hardware elsewhere.")
    g.add_argument("--op", choices=OPS, default="quantize",
                   help="quantize: inputs and expected codes/scales (default); matmul: GEMM operands and expected "
                        "output bits under --accumulator")
    g.add_argument("--scheme", required=True, metavar="S", help="scheme spec, e.g. nvfp4 or mxfp4:scale_rule=rceil")
    g.add_argument("--accumulator", metavar="ACC",
                   help="--op matmul: the accumulator model, e.g. sm100-mxf4nvf4 (see fp4spec.accumulators)")
    g.add_argument("--level", default=None, metavar="L",
                   help="quantize: 1 edge exponents (default, fast, small), 2 every float32 exponent (thorough); "
                        "matmul: 0 smoke, 1 standard (default), 2 full")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--rounding", choices=ROUNDING_MODES, default=None, help="quantize: element rounding (default rne)")
    g.add_argument("--sr-bits", type=int, default=None, help="quantize, --rounding sr: random bits (default 8)")
    g.add_argument("-o", "--output", required=True, metavar="VEC.npz")
    c = sub.add_parser("check", help="compare a results npz from another machine with the vectors (either op)",
                       description="Compare the results a backend produced elsewhere with the vectors, bit for bit; "
                                   "the same table and exit codes as fp4spec conform.")
    c.add_argument("vectors", metavar="VEC.npz")
    c.add_argument("results", metavar="RESULTS.npz")
    c.add_argument("--report", metavar="FILE.json|FILE.md")
    r = sub.add_parser("run", help="run the vectors through a backend that runs here; write its results npz",
                       description="Run the vectors through a backend that runs here and write its results npz "
                                   "(--backend numpy writes the reference's answers: a template of the file).")
    r.add_argument("vectors", metavar="VEC.npz")
    r.add_argument("--backend", required=True, metavar="NAME|module:Name|file.py:Name",
                   help="a built-in backend (numpy), a Backend class importable as package.module:Name, or one in "
                        "a file, path/to/file.py:Name")
    r.add_argument("-o", "--output", required=True, metavar="RESULTS.npz")
    return p


def _level(text, op: str):
    if text is None:
        return 1
    try:
        return int(text)
    except ValueError:
        if op == "matmul" and text in mmv.LEVELS:
            return text
        allowed = "0, 1, 2 (smoke, standard, full)" if op == "matmul" else "1 or 2"
        raise VectorError(f"level: {text!r} is not {allowed} for --op {op}") from None


def _generate(args) -> dict:
    if args.op == "matmul":
        for flag, value in (("--rounding", args.rounding), ("--sr-bits", args.sr_bits)):
            if value is not None:
                raise VectorError(f"{flag.lstrip('-')}: {flag} is for --op quantize; GEMM operands are codes")
        if not args.accumulator:
            from fp4spec.accumulator_models import accumulators

            raise VectorError(f"accumulator: --op matmul needs --accumulator, one of "
                              f"{', '.join(map(repr, accumulators))}")
        return generate_matmul(args.scheme, args.accumulator, _level(args.level, "matmul"), args.seed)
    if args.accumulator:
        raise VectorError("accumulator: --accumulator is for --op matmul")
    return generate(args.scheme, _level(args.level, "quantize"), args.seed, args.rounding or "rne",
                    8 if args.sr_bits is None else args.sr_bits)


def main(argv=None) -> int:
    """``fp4spec vectors generate|check|run ...``; returns the exit code (0, 1 departs, 2 usage error)."""
    parser = build_parser()
    args, code = parse_args(parser, argv)
    if args is None:
        return code
    if not args.action:
        parser.print_help(sys.stderr)
        return 2
    try:
        if args.action in ("generate", "run") and not args.output.endswith(".npz"):
            raise VectorError(f"output: {args.output!r} must end in .npz")
        if args.action == "generate":
            vec = _generate(args)
            save(args.output, vec)
            print(f"wrote {args.output}: {vector_summary(vec)}")
            return 0
        if args.action == "run":
            vec = load(args.vectors)
            out = run_vectors(vec, args.backend)
            save(args.output, out)
            print(f"wrote {args.output}: results of backend {_str(out['backend'])!r} for {vector_summary(vec)}")
            return 0
        if args.report and not args.report.endswith((".json", ".md")):
            raise VectorError(f"report: {args.report!r} must end in .json or .md")
        report = check(args.vectors, args.results)
    except BackendError as exc:
        print(f"fp4spec vectors: error: {exc}", file=sys.stderr)
        return 2
    except BackendRaised as exc:
        print(f"fp4spec vectors: departs: {exc}", file=sys.stderr)
        return 1
    print(render_text(report, all_rows=True, groups=False))
    if args.report:
        write_report(report, args.report)
    return report.exit_code()


__all__ = ["BackendRaised", "FORMAT", "FORMAT_VERSION", "LEVEL1_EXPONENTS", "MATMUL_FORMAT", "OPS", "VectorError",
           "case_shape", "check", "check_matmul_results", "generate", "generate_cases", "generate_matmul", "load",
           "main", "matmul_summary", "run_vectors", "save", "vector_summary"]


if __name__ == "__main__":  # python -m fp4spec.conformance.vectors generate|check|run ...
    sys.exit(main())
