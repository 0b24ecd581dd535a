"""Placeholders of the IF4 page, computed by fp4spec at build time (docs/schemes/if4.md).

* ``if4_code_table()`` -- every 4-bit code, its value in an E2M1 block and in an INT4 block.
* ``if4_example(values)`` -- one block through every step: scale, both candidates, their
  float32 errors, the choice, the scale byte; checked against ``fp4spec.quantize``.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

import fp4spec
from fp4spec import if4

F32 = np.float32


def _table(header, rows, align=None) -> str:
    align = align or ["---"] * len(header)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def _frac(v: Fraction) -> str:
    if v.denominator == 1:
        return str(v.numerator)
    return f"{v.numerator}/{v.denominator}"


def _f(v) -> str:
    return np.format_float_positional(F32(v), unique=True, trim="-")


def if4_code_table() -> str:
    """Every code: bits, its E2M1 value (flag clear), its INT4 value k and k * 6/7 (flag set)."""
    rows = []
    for code in range(16):
        fp = if4.element_value(code, 0x00)
        k = if4.INT4.decode_exact(code)
        scaled = if4.element_value(code, if4.INT_FLAG)
        fp_text = "-0" if code == 0x8 else _frac(fp)
        int_text = "(-8: never produced)" if code == 0x8 else f"{_frac(k)} → {_frac(scaled)} ≈ {float(scaled):.4f}"
        rows.append([f"`0x{code:X}`", f"`{code:04b}`", fp_text, int_text])
    return _table(["code", "bits", "E2M1 block (scale bit 7 clear)", "INT4 block (bit 7 set): k → k × 6/7"], rows,
                  ["---", "---", "--:", "--:"])


def if4_example(values, global_amax=2688.0, rule="mse") -> str:
    """A worked block: ``values`` (16 floats) after a block holding the tensor amax ``global_amax``."""
    block = np.array(values, np.float32)
    anchor = np.zeros(16, np.float32)
    anchor[0] = F32(global_amax)
    x = np.concatenate([anchor, block])[None]
    amax, s_enc, s_dec = if4.tensor_scales(np.max(np.abs(x)))
    vec_max = np.max(np.abs(block))
    code = if4.block_scale_code(vec_max, s_enc)
    r = if4.element_multiplier(code, s_dec)
    s = F32(if4.UE4M3.values[code])
    ys = [if4.scaled_value(v, r) for v in block]
    fp = [if4.fp_code(y, "rne", None, 8) for y in ys]
    it = [if4.int_code(y, "rne", None, 8) for y in ys]
    e_fp = if4.block_error(block, [if4.dequantized_fp(c, s, amax) for c in fp], rule)
    e_int = if4.block_error(block, [if4.dequantized_int(c, s, amax) for c in it], rule)
    codes, byte = if4.quantize_block_if4(block, amax, s_enc, s_dec, rule)
    q = fp4spec.quantize(x, "if4", scale_rule=rule)
    if list(q.codes[0, 16:]) != codes or int(q.scales[0, 1]) != byte:
        raise AssertionError("if4_example: fp4spec.if4 and fp4spec.quantize disagree")
    lines = [f"Tensor amax {_f(amax)}: S_enc = {_f(s_enc)}, S_dec = {_f(s_dec)}. Block amax {_f(vec_max)}: "
             f"s = fp32(fp32({_f(vec_max)} / 6) × S_enc) → UE4M3 `0x{code:02X}` ({_f(s)}); r = {_f(r)}.", ""]
    rows = []
    for i, (v, y, a, b) in enumerate(zip(block, ys, fp, it)):
        rows.append([str(i), _f(v), _f(y), f"`0x{a:X}` ({_frac(if4.E2M1.decode_exact(a)) if a != 8 else '-0'})",
                     f"{_f(F32(y) * if4.INT_UP)}", f"`0x{b:X}` ({_frac(if4.INT4.decode_exact(b))})"])
    lines.append(_table(["i", "x", "y = x·r", "E2M1 candidate", "z = y·fp32(7/6)", "INT4 candidate"], rows,
                        ["--:", "--:", "--:", "---", "--:", "---"]))
    chosen = "INT4" if byte & if4.INT_FLAG else "E2M1"
    lines += ["", f"Errors ({rule}): E2M1 {_f(e_fp)}, INT4 {_f(e_int)} → **{chosen}**; scale byte "
                  f"`0x{byte:02X}`{' (bit 7: INT4)' if byte & if4.INT_FLAG else ''}."]
    return "\n".join(lines)


PLACEHOLDERS = {
    "if4_code_table": if4_code_table,
    "if4_example": if4_example,
}
