"""Test vectors for block-scaled GEMMs: check a machine's GEMM here without us having one.

:func:`generate_matmul_vectors` writes operands (raw element and scale codes), the initial
accumulator and the expected result bits of a named accumulator model; someone with a
Blackwell or MI350 machine runs their kernel on the operands and
:func:`check_matmul_vectors` compares, bit for bit.

File layout (``.npz``, written by :func:`save_matmul_vectors`; ``NNNN`` is the zero-padded
case index; every array little-endian):

=====================  =========  ============  =================================================
key                    dtype      shape         meaning
=====================  =========  ============  =================================================
``format``             str        ()            ``"fp4spec-matmul-vectors"``
``format_version``     int64      ()            layout version, 1
``fp4spec_version``    str        ()            the version that computed the expected results
``op``                 str        ()            ``"matmul"``: D = A . B^T (+ c), A M x K, B N x K
``accumulator``        str        ()            the model name (:data:`fp4spec.accumulator_models`)
``model``              str        ()            the model's ``describe()`` line (its parameters)
``scheme``             str        ()            scheme spec of A and B (``"nvfp4"``, ``"mxfp4:block_shape=16"``)
``level``, ``seed``    str/int64  ()            how the vectors were generated
``n_cases``            int64      ()            number of cases
``NNNN/family``        str        ()            the case family (:data:`.matmul_properties.FAMILIES`)
``NNNN/a_codes``       uint8      (M, K)        element codes of A (one code per byte, unpacked)
``NNNN/a_scales``      uint8      (M, K/block)  block-scale codes of A (E8M0 or UE4M3 bits)
``NNNN/a_global``      float32    (0,) or (1,)  tensor (decode) scale of A, empty if none
``NNNN/b_codes``       uint8      (N, K)        element codes of B
``NNNN/b_scales``      uint8      (N, K/block)  block-scale codes of B
``NNNN/b_global``      float32    (0,) or (1,)  tensor scale of B
``NNNN/has_c``         bool       ()            whether c is given (else the accumulator starts at +0)
``NNNN/c``             float32    (M, N)        initial accumulator (zeros when ``has_c`` is False)
``NNNN/d_bits``        uint32     (M, N)        expected result, float32 bit patterns
=====================  =========  ============  =================================================

Results to check (:func:`check_matmul_vectors`) are a mapping ``{"NNNN/d": float32 (M, N)}``
(or ``"NNNN/d_bits"`` uint32), a list of arrays in case order, or a loaded results ``.npz``
with those keys. What the kernel must do: one accumulator chain per output in ascending K
(no split-K, no multiple accumulators); the tensor-scale product ``fp32(gA * gB)`` applied
once to the final accumulator (``alpha``); c as the initial accumulator (``beta = 1`` into
the MMA's C operand, not an epilogue add).
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from fp4spec.accumulator_models import AccumulatorModel, get_accumulator
from fp4spec.backends.base import resolve_scheme, scheme_spec

from .matmul_properties import (FAMILIES, MatmulCase, family_schemes, first_mismatch, generate_case, make_operand,
                                schemes_for)

FORMAT = "fp4spec-matmul-vectors"
FORMAT_VERSION = 1

#: Cases per family and the largest M, N, K steps per level.
LEVELS = {
    "smoke": dict(per_family=2, max_dim=4, max_steps=2),
    "standard": dict(per_family=12, max_dim=8, max_steps=4),
    "full": dict(per_family=48, max_dim=16, max_steps=8),
}


#: Integer levels (as ``fp4spec vectors --level N`` takes them) and their names.
LEVEL_ALIASES = {0: "smoke", 1: "standard", 2: "full"}


def _key(i: int, name: str) -> str:
    return f"{i:04d}/{name}"


def generate_matmul_vectors(scheme: str, accumulator: "str | AccumulatorModel", level: "str | int" = "standard",
                            seed: int = 0) -> dict:
    """Vectors for ``scheme`` (A and B) under ``accumulator``: a dict of arrays (layout above).

    ``level``: ``"smoke"``, ``"standard"`` or ``"full"`` (or 0, 1, 2). Every family of
    :data:`.matmul_properties.FAMILIES` contributes ``LEVELS[level]["per_family"]`` cases with shapes and data drawn from ``seed``; the expected results
    are :func:`fp4spec.matmul` with the model. ``scale_sign_bit`` contributes only where the
    scheme has UE4M3 scales and the model reads such bytes (``ue4m3_sign_bit="ignore"``): a
    file holds results, not refusals.
    """
    from fp4spec.api.gemm import matmul

    level = LEVEL_ALIASES.get(level, level) if not isinstance(level, bool) else level
    if level not in LEVELS:
        raise ValueError(f"level: {level!r} is not one of {', '.join(map(repr, LEVELS))} (or 0, 1, 2)")
    model = get_accumulator(accumulator)
    sch = resolve_scheme(scheme)
    if sch.name not in schemes_for(model):
        raise ValueError(f"scheme: {sch.name!r} is not taken by accumulator {model.name!r}; "
                         f"use one of {', '.join(schemes_for(model))}")
    lv = LEVELS[level]
    rng = np.random.default_rng(seed)
    import fp4spec

    out = {"format": np.array(FORMAT), "format_version": np.int64(FORMAT_VERSION),
           "fp4spec_version": np.array(fp4spec.__version__), "op": np.array("matmul"),
           "accumulator": np.array(model.name), "model": np.array(model.describe()),
           "scheme": np.array(scheme_spec(sch)), "level": np.array(level), "seed": np.int64(seed)}
    i = 0
    for family in FAMILIES:
        if not family_schemes(family, (sch.name,)) or (family == "scale_sign_bit" and model.ue4m3_sign_bit != "ignore"):
            continue
        for _ in range(lv["per_family"]):
            m, n = (int(x) for x in rng.integers(1, lv["max_dim"] + 1, 2))
            steps = int(rng.integers(1, lv["max_steps"] + 1))
            case = generate_case(family, model, sch, seed=int(rng.integers(0, 2 ** 32)), m=m, n=n, steps=steps)
            d = matmul(case.qa, case.qb, accumulator=model, c=case.c)
            out.update(_case_arrays(i, case, d))
            i += 1
    out["n_cases"] = np.int64(i)
    return out


def _case_arrays(i: int, case: MatmulCase, d: np.ndarray) -> dict:
    def g(q):
        return np.zeros(0, np.float32) if q.global_scale is None else np.array([q.global_scale], np.float32)

    m, n = d.shape
    return {
        _key(i, "family"): np.array(case.family),
        _key(i, "a_codes"): np.asarray(case.qa.codes, np.uint8), _key(i, "a_scales"): np.asarray(case.qa.scales, np.uint8),
        _key(i, "a_global"): g(case.qa),
        _key(i, "b_codes"): np.asarray(case.qb.codes, np.uint8), _key(i, "b_scales"): np.asarray(case.qb.scales, np.uint8),
        _key(i, "b_global"): g(case.qb),
        _key(i, "has_c"): np.bool_(case.c is not None),
        _key(i, "c"): np.zeros((m, n), np.float32) if case.c is None else np.asarray(case.c, np.float32),
        _key(i, "d_bits"): np.ascontiguousarray(d, np.float32).view(np.uint32),
    }


def save_matmul_vectors(path: "str | os.PathLike", vec: dict) -> None:
    """Write vectors to an ``.npz`` file (uncompressed, the layout above)."""
    np.savez(path, **vec)


def load_matmul_vectors(path: "str | os.PathLike") -> dict:
    """Read vectors written by :func:`save_matmul_vectors` (checks ``format`` and ``version``)."""
    with np.load(path, allow_pickle=False) as f:
        vec = {k: f[k] for k in f.files}
    if str(vec.get("format", "")) != FORMAT or int(vec.get("format_version", -1)) != FORMAT_VERSION:
        raise ValueError(f"path: {os.fspath(path)!r} is not an {FORMAT} file of version {FORMAT_VERSION}")
    return vec


def vector_case(vec: dict, i: int) -> MatmulCase:
    """Case i of a vector dict as operands (:class:`.matmul_properties.MatmulCase`)."""
    n = int(vec["n_cases"])
    if not 0 <= i < n:
        raise ValueError(f"i: case {i} out of range 0..{n - 1}")
    sch = resolve_scheme(str(vec["scheme"]))

    def op(p):
        gl = vec[_key(i, f"{p}_global")]
        return make_operand(vec[_key(i, f"{p}_codes")], vec[_key(i, f"{p}_scales")], sch,
                            None if gl.size == 0 else np.float32(gl[0]))

    c = vec[_key(i, "c")] if bool(vec[_key(i, "has_c")]) else None
    return MatmulCase(str(vec[_key(i, "family")]), op("a"), op("b"), c)


def run_matmul_vectors(vec: dict, backend_matmul) -> dict:
    """Results of ``backend_matmul(qa, qb, accumulator=name, c=c)`` on every case, keyed
    ``"NNNN/d"`` (what :func:`check_matmul_vectors` takes)."""
    name = str(vec["accumulator"])
    out = {}
    for i in range(int(vec["n_cases"])):
        case = vector_case(vec, i)
        out[_key(i, "d")] = np.asarray(backend_matmul(case.qa, case.qb, accumulator=name, c=case.c))
    return out


@dataclasses.dataclass(frozen=True)
class MatmulVectorReport:
    """Bit-exact comparison of results with vectors: per failing case its index, family and
    the first mismatch."""

    accumulator: str
    scheme: str
    n_cases: int
    failures: tuple[tuple[int, str, str], ...]

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def n_passed(self) -> int:
        return self.n_cases - len(self.failures)

    def summary(self) -> str:
        head = (f"matmul vectors [{self.accumulator}, {self.scheme}]: {self.n_passed}/{self.n_cases} cases "
                f"bit-exact")
        lines = [head] + [f"  case {i:04d} ({fam}): {msg}" for i, fam, msg in self.failures[:20]]
        if len(self.failures) > 20:
            lines.append(f"  ... {len(self.failures) - 20} more")
        return "\n".join(lines)


def _result(results, i: int):
    if isinstance(results, (list, tuple)):
        return results[i] if i < len(results) else None
    for name, view in (("d", None), ("d_bits", np.float32)):
        k = _key(i, name)
        if k in results:
            r = np.asarray(results[k])
            return r.view(view) if view is not None and r.dtype == np.uint32 else r
    return None


def check_matmul_vectors(vec: dict, results) -> MatmulVectorReport:
    """Compare ``results`` (see the module docstring) with the expected bits of ``vec``.

    A case passes when its result is a float32 array of the expected shape whose bit
    patterns all equal ``d_bits`` (NaN patterns included); a missing result fails.
    """
    if hasattr(results, "files"):          # an open NpzFile
        results = {k: results[k] for k in results.files}
    failures = []
    n = int(vec["n_cases"])
    for i in range(n):
        want = vec[_key(i, "d_bits")].view(np.float32)
        got = _result(results, i)
        fam = str(vec[_key(i, "family")])
        if got is None:
            failures.append((i, fam, "no result"))
            continue
        msg = first_mismatch(want, got)
        if msg is not None:
            failures.append((i, fam, msg))
    return MatmulVectorReport(str(vec["accumulator"]), str(vec["scheme"]), n, tuple(failures))


__all__ = [
    "FORMAT",
    "LEVELS",
    "LEVEL_ALIASES",
    "MatmulVectorReport",
    "FORMAT_VERSION",
    "check_matmul_vectors",
    "generate_matmul_vectors",
    "load_matmul_vectors",
    "run_matmul_vectors",
    "save_matmul_vectors",
    "vector_case",
]
