"""Bit-exact comparison of a backend's result with the reference, and the counterexample it makes.

Every field is compared with equality: element codes, scale codes, the float32 bits of the
tensor scale, HiF4's micro-exponent bits, and the metadata (shape, axis). The first
difference becomes a :class:`~fp4spec.conformance.report.Counterexample` that names the
block, shows its input values and both code sequences in hex, and says what the spec
computes there (the scaled value each element is rounded from, and whether it is a tie).
"""

from __future__ import annotations

import numpy as np

from fp4spec.backends.base import as_numpy
from fp4spec.block_schemes import Scheme

from . import chain
from .report import Counterexample, code_hex, f32_hex, f32_text

FIELDS = ("codes", "scales", "global_scale", "e1_8", "e1_16")


class Departure(Exception):
    """Raised by a property check: the backend departs from the spec; carries the counterexample."""

    def __init__(self, counterexample: Counterexample):
        super().__init__(counterexample.what)
        self.counterexample = counterexample


def depart(what: str, **kw) -> Departure:
    return Departure(Counterexample(what, **kw))


def tensor_record(x: np.ndarray, rbits=None) -> dict:
    """The whole input, as float32 bit patterns, for the JSON report (replayable exactly)."""
    x = np.ascontiguousarray(x, np.float32)
    rec = {"shape": list(x.shape), "float32_bits": [f"{int(b):08X}" for b in x.view(np.uint32).ravel()]}
    if rbits is not None:
        rec["rbits"] = [int(r) for r in np.broadcast_to(np.asarray(rbits), x.shape).ravel()]
    return rec


def value_text(fmt, code) -> str:
    v = fmt.values[int(code)] if 0 <= int(code) < len(fmt.values) else None
    return "not a code" if v is None else f32_text(v) if np.isfinite(v) else str(v)


def _hex_codes(a, bits) -> list[str]:
    return [code_hex(c, bits) for c in np.asarray(a).ravel()]


def tie_note(y, fmt) -> str | None:
    """Describe the scaled value y: a tie between two element values, or exact, or neither."""
    if not np.isfinite(y):
        return f"scaled value {f32_text(y)}"
    grid = np.unique(np.abs(fmt.values[np.isfinite(fmt.values)]))
    a = abs(float(y))
    if a in grid:
        return f"scaled value {f32_text(y)} is exactly representable"
    i = int(np.searchsorted(grid, a))
    if 0 < i < len(grid):
        lo, hi = grid[i - 1], grid[i]
        mid = (lo + hi) / 2
        rel = "exactly the midpoint (a tie)" if a == mid else ("below" if a < mid else "above") + " the midpoint"
        return f"scaled value {f32_text(y)} lies between {lo:g} and {hi:g}: {rel}"
    return f"scaled value {f32_text(y)} is beyond the element max {grid[-1]:g} (saturates)"


def _context(x, scheme: Scheme, rounding: str, rbits, row, b) -> dict:
    ctx = {"rounding": rounding}
    if scheme.structure == "two_level":
        ts = chain.tensor_scale(x, scheme)
        ctx["tensor_amax"] = f32_text(ts.amax)
        ctx["S_enc"] = f"{f32_text(ts.encode)} ({f32_hex(ts.encode)})"
        ctx["S_dec"] = f"{f32_text(ts.decode)} ({f32_hex(ts.decode)})"
    if rbits is not None:
        k = scheme.block_size
        rb = np.broadcast_to(np.asarray(rbits), x.shape)[row, b * k:(b + 1) * k]
        ctx["rbits"] = " ".join(str(int(r)) for r in rb)
    return ctx


def _block_slice(scheme: Scheme, col: int) -> tuple[int, slice]:
    k = scheme.block_size
    b = col // k
    return b, slice(b * k, (b + 1) * k)


def _field(q, name):
    return as_numpy(getattr(q, name, None))


def dont_care_codes(expected, x: np.ndarray, scheme: Scheme) -> np.ndarray | None:
    """Element positions whose code the scheme's profile leaves open (None if there are none):
    under ``element_nan="unspecified"`` (torchao) the code of a NaN scaled value is any code of
    a format without NaN, and any NaN code of a format with NaN."""
    if scheme.policies.get("element_nan") != "unspecified":
        return None
    scales = _field(expected, "scales")
    if scales is None or scales.shape[-1:] != (x.shape[-1] // scheme.block_size,):
        return None
    nan = scheme.scale.nan_codes[0] if scheme.scale.nan_codes else 0
    scales = np.where(scales.astype(np.int64) >= len(scheme.scale.values), nan, scales)  # a byte outside: NaN
    with np.errstate(all="ignore"):
        y = chain.scaled_values(x, scales, scheme)
    if y is None:
        return None
    mask = np.isnan(y)
    return mask if mask.any() else None


def compare_quantized(expected, actual, x: np.ndarray, scheme: Scheme, rounding: str, rbits=None, *,
                      label: str = "", fields=FIELDS, tally: dict | None = None) -> Counterexample | None:
    """The first difference between the reference's QuantizedTensor and a backend's result
    (None if they are bit-identical). ``x`` is the 2-D float32 input, blocked along its last
    axis; ``fields`` limits the comparison (default: all of :data:`FIELDS` and the metadata).

    Element codes the profile leaves open (:func:`dont_care_codes`) are not compared (a format
    with NaN must still give a NaN code there); ``tally["dont_care"]`` counts them."""
    pre = f"{label}: " if label else ""
    if actual is None or not hasattr(actual, "codes") or not hasattr(actual, "scales"):
        return Counterexample(f"{pre}quantize returned {type(actual).__name__}, not a QuantizedTensor",
                              field="metadata", tensor=tensor_record(x, rbits))
    el, sc = scheme.element, scheme.scale
    k = scheme.block_size
    for name in fields:
        exp, act = _field(expected, name), _field(actual, name)
        if name == "global_scale":
            cx = _compare_global(exp, act, x, scheme, rounding, rbits, pre)
            if cx:
                return cx
            continue
        if exp is None and act is None:
            continue
        if exp is None or act is None:
            return Counterexample(f"{pre}{name}: expected {'none' if exp is None else 'an array'}, got "
                                  f"{'none' if act is None else 'an array'}", field=name,
                                  tensor=tensor_record(x, rbits))
        if act.shape != exp.shape:
            return Counterexample(f"{pre}{name}: shape {tuple(act.shape)}, expected {tuple(exp.shape)}", field=name,
                                  tensor=tensor_record(x, rbits))
        if act.dtype.kind not in "ui" and act.dtype != np.bool_:
            return Counterexample(f"{pre}{name}: dtype {act.dtype}, expected unsigned integer codes", field=name,
                                  tensor=tensor_record(x, rbits))
        diff = np.asarray(act).astype(np.int64) != np.asarray(exp).astype(np.int64)
        if name == "codes":
            free = dont_care_codes(expected, x, scheme) if act.shape == x.shape else None
            if free is not None:
                if tally is not None:
                    tally["dont_care"] = tally.get("dont_care", 0) + int(free.sum())
                diff = diff & ~free
                if el.nan_codes:  # a format with NaN: any NaN code, but a NaN code
                    diff |= free & ~np.isin(act, list(el.nan_codes))
        if not diff.any():
            continue
        idx = tuple(int(i) for i in np.argwhere(diff)[0])
        if name == "codes":
            return _codes_cx(exp, act, idx, x, scheme, rounding, rbits, pre, expected, actual)
        if name == "scales":
            row, b = idx[0], idx[-1]
            sl = slice(b * k, (b + 1) * k)
            notes = [f"block {b} of row {row}: amax {f32_text(np.max(np.abs(x[row, sl])))}"]
            if scheme.is_2d:
                r0 = (row // scheme.tile_rows) * scheme.tile_rows
                tile = x[r0:r0 + scheme.tile_rows, sl]
                notes.append(f"{scheme.tile_rows}x{k} tile rows {r0}..{r0 + scheme.tile_rows - 1}: amax "
                             f"{f32_text(np.max(np.abs(tile)))}")
            return Counterexample(
                f"{pre}scales[{row}, {b}]: expected {code_hex(exp[idx], sc.bits)} ({value_text(sc, exp[idx])}), "
                f"got {code_hex(act[idx], sc.bits)} ({value_text(sc, act[idx])})",
                field="scales", inputs=[f32_text(v) for v in x[row, sl]],
                expected=[code_hex(c, sc.bits) for c in exp[row]], actual=[code_hex(c, sc.bits) for c in act[row]],
                where={"row": row, "block": b}, notes=notes, context=_context(x, scheme, rounding, rbits, row, b),
                tensor=tensor_record(x, rbits))
        return Counterexample(f"{pre}{name}{list(idx)}: expected {int(exp[idx])}, got {int(act[idx])}", field=name,
                              where={"index": list(idx)}, tensor=tensor_record(x, rbits))
    for name in ("axis", "shape"):
        e, a = getattr(expected, name, None), getattr(actual, name, None)
        if e is not None and a is not None and tuple(np.atleast_1d(e)) != tuple(np.atleast_1d(a)):
            return Counterexample(f"{pre}{name}: expected {e}, got {a}", field="metadata", tensor=tensor_record(x, rbits))
    return None


def _scale_text(scheme: Scheme, code) -> str:
    sc = scheme.scale
    return f"{code_hex(code, max(sc.bits, 8))} ({value_text(sc, code)})"


def _block_scales(expected_q, actual_q, row: int, b: int) -> tuple:
    """(expected, actual) scale code of block b of a row (None where there is none)."""
    out = []
    for q in (expected_q, actual_q):
        s = _field(q, "scales")
        out.append(int(s[row, b]) if s is not None and s.ndim == 2 and s.shape[-1] > b and row < s.shape[0]
                   else None)
    return tuple(out)


def _codes_cx(exp, act, idx, x, scheme, rounding, rbits, pre, expected_q, actual_q=None) -> Counterexample:
    el = scheme.element
    row, col = idx[0], idx[-1]
    b, sl = _block_slice(scheme, col)
    notes = []
    with np.errstate(all="ignore"):
        y_all = chain.scaled_values(x, _field(expected_q, "scales"), scheme)
    if y_all is not None:
        note = tie_note(y_all[row, col], el)
        if note:
            notes.append(note)
    s_exp, s_act = _block_scales(expected_q, actual_q, row, b)
    scale_what = ""
    if s_exp is not None and s_act is not None and s_exp != s_act:
        scale_what = f"; the block scale differs too: expected {_scale_text(scheme, s_exp)}, got " \
                     f"{_scale_text(scheme, s_act)}"
        notes.append(f"block scale: expected {_scale_text(scheme, s_exp)}, got {_scale_text(scheme, s_act)} -- "
                     f"the scale is wrong; the element codes follow from it")
    elif s_exp is not None:
        notes.append(f"block scale {_scale_text(scheme, s_exp)} (the backend's is the same)"
                     if s_act is not None else f"block scale {_scale_text(scheme, s_exp)}")
    xv = x[row, col]
    return Counterexample(
        f"{pre}codes[{row}, {col}]: x = {f32_text(xv)}, expected {code_hex(exp[idx], el.bits)} "
        f"({value_text(el, exp[idx])}), got {code_hex(act[idx], el.bits)} ({value_text(el, act[idx])})"
        + scale_what,
        field="codes", inputs=[f32_text(v) for v in x[row, sl]],
        expected=_hex_codes(exp[row, sl], el.bits), actual=_hex_codes(act[row, sl], el.bits),
        where={"row": row, "column": col, "block": b, "position_in_block": col - b * scheme.block_size},
        notes=notes, context=_context(x, scheme, rounding, rbits, row, b), tensor=tensor_record(x, rbits))


def _compare_global(exp, act, x, scheme, rounding, rbits, pre) -> Counterexample | None:
    if exp is None and act is None:
        return None
    if exp is None or act is None:
        return Counterexample(f"{pre}global_scale: expected {exp}, got {act}", field="global_scale",
                              tensor=tensor_record(x, rbits))
    act_arr = np.asarray(act)
    if act_arr.size != 1:
        return Counterexample(f"{pre}global_scale: expected one float32, got shape {act_arr.shape}",
                              field="global_scale", tensor=tensor_record(x, rbits))
    a64 = act_arr.reshape(()).astype(np.float64) if act_arr.dtype.kind == "f" else None
    if a64 is None:
        return Counterexample(f"{pre}global_scale: dtype {act_arr.dtype}, expected float32", field="global_scale",
                              tensor=tensor_record(x, rbits))
    a32 = np.float32(a64)
    if not (np.isnan(a64) and np.isnan(a32)) and float(a32) != float(a64):
        return Counterexample(f"{pre}global_scale: {a64!r} is not a float32 value", field="global_scale",
                              tensor=tensor_record(x, rbits))
    e32 = np.float32(exp)
    if f32_hex(e32) == f32_hex(a32):
        return None
    ts = chain.tensor_scale(x, scheme)
    notes = []
    if ts is not None:
        notes.append(f"tensor amax {f32_text(ts.amax)} ({f32_hex(ts.amax)}); the decode scale is stored, "
                     f"S_enc = {f32_text(ts.encode)} ({f32_hex(ts.encode)})")
    return Counterexample(
        f"{pre}global_scale: expected {f32_hex(e32)} ({f32_text(e32)}), got {f32_hex(a32)} ({f32_text(a32)})",
        field="global_scale", expected=[f32_hex(e32)], actual=[f32_hex(a32)], notes=notes,
        context={"rounding": rounding}, tensor=tensor_record(x, rbits))


def compare_float32(expected: np.ndarray, actual, what: str) -> tuple | None:
    """First index where two float32 arrays differ in bits (NaN equals NaN). Returns
    ``(index, expected_value, actual_value)`` or None; raises Departure on shape/dtype problems."""
    act = as_numpy(actual)
    if act is None or act.shape != expected.shape:
        raise depart(f"{what}: shape {None if act is None else tuple(act.shape)}, expected {tuple(expected.shape)}",
                     field="dequantized")
    if act.dtype != np.float32:
        raise depart(f"{what}: dtype {act.dtype}, expected float32", field="dequantized")
    e_bits = np.ascontiguousarray(expected, np.float32).view(np.uint32)
    a_bits = np.ascontiguousarray(act, np.float32).view(np.uint32)
    same = (e_bits == a_bits) | (np.isnan(expected) & np.isnan(act))
    if same.all():
        return None
    idx = tuple(int(i) for i in np.argwhere(~same)[0])
    return idx, expected[idx], act[idx]


__all__ = ["Departure", "FIELDS", "compare_float32", "compare_quantized", "depart", "dont_care_codes", "tensor_record",
           "tie_note", "value_text"]
