"""Markdown renderers of the scheme pages (docs/schemes/, divergences, the GEMM page): worked
blocks, scale rules and profile comparisons, computed by fp4spec itself."""

from __future__ import annotations

import math
from fractions import Fraction

import fp4spec
from format_tables import FORMAT_PAGES, _decimal, _hex, _table, fmt_value

# -- block-scaling schemes ------------------------------------------------------------------------

#: Documentation page (relative to docs/schemes/) of each catalogued scheme.
SCHEME_PAGES = {
    "mxfp4": "mx.md",
    "mxfp6_e2m3": "mx.md",
    "mxfp6_e3m2": "mx.md",
    "mxfp8_e4m3": "mx.md",
    "mxfp8_e5m2": "mx.md",
    "nvfp4": "nvfp4.md",
    "nvfp4_2d": "nvfp4.md",
    "ufp4": "ufp4.md",
    "nvint4": "ufp4.md",
    "nvint4_e0m3": "ufp4.md",
    "hif4": "hif4.md",
    "if4": "if4.md",
    "if4_2d": "if4.md",
}


def _f32(v, bits: bool = True) -> str:
    """A float32 as the shortest decimal that reads back as the same float32, with its bit
    pattern: ``152 (0x43180000)``."""
    import numpy as np

    v = np.float32(v)
    if math.isnan(v):
        text = "NaN"
    elif math.isinf(v):
        text = "+Inf" if v > 0 else "-Inf"
    elif v == 0 or 1e-4 <= abs(v) < 1e7:
        text = np.format_float_positional(v, unique=True, trim="-")
    else:
        text = np.format_float_scientific(v, unique=True, trim="-")
    if not bits or math.isnan(v):  # a NaN's sign and payload are not specified
        return text
    return f"{text} (`0x{int(np.array(v).view(np.uint32)):08X}`)"


def _num(v) -> str:
    """A float32 input or output value: exact (``1.5·2^-125``, ``0.25``) when that is short,
    else the shortest decimal that reads back as the same float32."""
    import numpy as np

    v = np.float32(v)
    if not math.isfinite(v) or v == 0:
        return _f32(v, bits=False)
    text = fmt_value(float(v))
    return text if len(text) <= 14 else _f32(v, bits=False)


def _compact(table: str) -> str:
    """A wide table in the dense style of the divergence matrices (smaller type, no minimum
    column width), so that it fits the page instead of scrolling."""
    return f'<div class="matrix" markdown>\n\n{table}\n\n</div>'


def _metadata_bits(scheme) -> int:
    """Bits of metadata per block: the scale code, plus HiF4's micro-exponent bits (counted
    from what ``fp4spec.quantize`` returns for one zero group)."""
    import numpy as np

    bits = -(-scheme.scale.bits // 8) * 8  # stored in whole bytes (a UE4M3 code takes a byte)
    if scheme.structure == "hif4":
        q = fp4spec.quantize(np.zeros(scheme.block_size, np.float32), scheme)
        bits += q.e1_8.shape[-1] + q.e1_16.shape[-1]
    return bits


def scheme_summary(link_base: str | None = "", format_base: str | None = "../formats/",
                   names=None) -> str:
    """One row per catalogued scheme (``fp4spec.schemes``; only ``names`` when given):
    element, block shape, scales (block scale format, HiF4's extra bits, the tensor scale),
    scale rule, profile and storage bits per element (the tensor scale not counted). Scheme
    names link to ``link_base + SCHEME_PAGES[name]`` and formats to
    ``format_base + FORMAT_PAGES[name]`` (None: no links)."""
    def fmt_link(fmt):
        label = f"`{fmt.name}`"
        if format_base is None or fmt.name not in FORMAT_PAGES:
            return label
        return f"[{label}]({format_base}{FORMAT_PAGES[fmt.name]})"

    header = ["scheme", "element", "block", "scales", "scale rule", "profile", "bits / element"]
    rows = []
    if names is not None:
        unknown = [n for n in names if n not in fp4spec.schemes]
        if unknown:
            raise ValueError(f"scheme_summary: unknown scheme(s) {unknown}")
    for name, s in fp4spec.schemes.items():
        if names is not None and name not in names:
            continue
        label = f"`{name}`"
        if link_base is not None and name in SCHEME_PAGES:
            label = f"[{label}]({link_base}{SCHEME_PAGES[name]})"
        meta = _metadata_bits(s)
        per_elem = Fraction(s.element.bits) + Fraction(meta, s.block_size)
        scale = fmt_link(s.scale)
        element = fmt_link(s.element)
        if s.structure == "hif4":
            scale += f" + {meta - 8} bits"
        if s.structure == "if4":
            scale += " (bit 7: INT4 flag)"
            element += f" or {fmt_link(fp4spec.get_format('int4_sym'))} × 6/7"
        if s.global_scale == "fp32":
            scale += " + FP32 tensor scale"
        elif s.global_scale is not None:
            raise ValueError(f"scheme_summary: unknown tensor scale {s.global_scale!r}")
        block = " × ".join(map(str, s.block_shape))
        if s.is_2d:
            block += " tile"
        rows.append([label, element, block, scale, f"`{s.scale_rule}`", f"`{s.profile}`",
                     _decimal(per_elem)])
    return _table(header, rows, ["---", "---", "--:", "---", "---", "---", "--:"])


def _variant(spec) -> tuple[str, object]:
    """A scheme from a placeholder argument: a name, or a dict ``{"scheme": name, **overrides}``;
    returns (column label, scheme)."""
    if isinstance(spec, str):
        spec = {"scheme": spec}
    spec = dict(spec)
    name = spec.pop("scheme")
    label = spec.pop("label", None)
    scheme = fp4spec.get_scheme(name, **spec)
    if label is None:
        extra = ", ".join(f"{k}={v}" for k, v in spec.items())
        label = f"`{name}`" + (f" ({extra})" if extra else "")
    return label, scheme


def _mx_block(values, scheme):
    import numpy as np

    k = scheme.block_size
    if len(values) > k:
        raise ValueError(f"{len(values)} values do not fit in one {scheme.name} block of {k}")
    x = np.zeros(k, np.float32)
    x[:len(values)] = _values(values)
    return x


def mx_rule_table(amaxes, scheme: str = "mxfp4", rules=("floor", "ceil", "even", "rceil"),
                  profile: str | None = None) -> str:
    """For each amax: ``fp4spec.quantize`` of the block ``[amax, 0, ..., 0]`` under each MX scale
    rule, shown as ``e → amax/2^e → P``: the scale exponent read back from the scale code, the
    exact scaled value, and the element value of the amax's code ("clamped" where the scaled
    value exceeds the element's max)."""
    import numpy as np

    base = fp4spec.get_scheme(scheme, **({"profile": profile} if profile else {}))
    if base.structure != "mx":
        raise ValueError(f"mx_rule_table: {scheme!r} is not an MX scheme")
    elem = base.element
    rows = []
    for amax in amaxes:
        a = np.float32(amax)
        if float(a) != float(amax):
            raise ValueError(f"mx_rule_table: amax {amax!r} is not a float32 value")
        cells = [fmt_value(float(a))]
        for rule in rules:
            q = fp4spec.quantize(_mx_block([a], base), base, scale_rule=rule)
            code = int(q.scales[0])
            if code == 0xFF:
                cells.append("NaN scale (`0xFF`)")
                continue
            e = code - 127
            scaled = Fraction(float(a)) / Fraction(2) ** e
            p = elem.decode_exact(int(q.codes[0]))
            if float(fp4spec.dequantize(q)[0]) != float(p * Fraction(2) ** e):
                raise AssertionError(f"mx_rule_table: dequantize disagrees at amax={amax}, rule={rule}")
            note = " (clamped)" if scaled > Fraction(float(elem.max)) else ""
            cells.append(f"{e} → {fmt_value(scaled)} → {fmt_value(p)}{note}")
        rows.append(cells)
    header = ["amax"] + [f"`{r}`" for r in rules]
    return _table(header, rows, ["--:"] + ["---"] * len(rules))


def mx_example(values, variants=("mxfp4",)) -> str:
    """Worked example of one MX block, computed at build time.

    ``values``: the block's first elements (the rest of the block is zero). ``variants``:
    scheme names or dicts ``{"scheme": name, **get_scheme overrides}``, one column each. The
    scale exponent and the scaled elements come from :func:`fp4spec.scaling.mx_scale_exponent`
    and :func:`fp4spec.scaling.mx_scaled_element`; every code is checked against
    ``fp4spec.quantize`` (the build fails if they disagree).
    """
    from fp4spec import scaling
    from fp4spec.elements import encode_scalar

    cols = [_variant(v) for v in variants]
    summary = {"block amax": [], "scale exponent e (rule)": [], "scale code (E8M0)": [],
               "scale X = 2^e": []}
    per_elem, pads = [], []
    n = len(values)
    for label, s in cols:
        if s.structure != "mx":
            raise ValueError(f"mx_example: {s.name!r} is not an MX scheme")
        x = _mx_block(values, s)
        q = fp4spec.quantize(x, s)
        deq = fp4spec.dequantize(q)
        amax = scaling.block_amax(list(x))
        e = scaling.mx_scale_exponent(amax, s.element, s.scale_rule, s.policies)
        code = scaling.mx_scale_code(e)
        if code != int(q.scales[0]):
            raise AssertionError(f"mx_example: scale code {code:#x} != quantize's {int(q.scales[0]):#x}")
        summary["block amax"].append(_f32(amax, bits=False))
        summary["scale exponent e (rule)"].append("NaN" if e is None else f"{e} (`{s.scale_rule}`)")
        summary["scale code (E8M0)"].append(f"`0x{code:02X}`")
        summary["scale X = 2^e"].append("NaN" if e is None else fmt_value(Fraction(2) ** e))
        col = []
        for i in range(n):
            y = scaling.mx_scaled_element(x[i], e, s.scale_rule, s.policies)
            c = encode_scalar(y, s.element, "rne", overflow="saturate",
                              nan=scaling.element_nan_policy(s.element))
            if c != int(q.codes[i]):
                raise AssertionError(f"mx_example: element {i} code {c:#x} != quantize's {int(q.codes[i]):#x}")
            col.append((y, c, s.element.decode_exact(c), deq[i]))
        per_elem.append((s, col))
        if n < len(x):
            pads.append((label, s.element, int(q.codes[n]), deq[n]))
    top = _table(["", *[c[0] for c in cols]], [[k, *v] for k, v in summary.items()],
                 ["---"] + ["--:"] * len(cols))
    header = ["i", "x"]
    for label, _ in cols:
        header += [f"{label}: y = scaled x", "code = P", "dequantized"]
    rows = []
    for i in range(n):
        row = [str(i), _num(values[i])]
        for s, col in per_elem:
            y, c, p, d = col[i]
            row += [_num(y), f"`{_hex(s.element, c)}`\u00a0=\u00a0{fmt_value(p)}", _num(d)]
        rows.append(row)
    k = cols[0][1].block_size
    bottom = _compact(_table(header, rows, ["--:"] * len(header)))
    rest = "\n\n" + _rest_note(n, k, pads) if n < k else ""
    return f"{top}\n\n{bottom}{rest}"


def _rest_note(n: int, k: int, pads) -> str:
    """The sentence about the zero elements n..k-1 of an example block; ``pads``: one
    (label, element format, code, dequantized value) per variant."""
    what = {(f"`{_hex(fmt, c)}`", _num(d)) for _, fmt, c, d in pads}
    if len(what) == 1:
        (code, deq), = what
        return f"Elements {n} to {k - 1} are 0: code {code}, dequantized {deq}."
    return (f"Elements {n} to {k - 1} are 0: " +
            "; ".join(f"{label}: code `{_hex(fmt, c)}`, dequantized {_num(d)}" for label, fmt, c, d in pads) + ".")


def _two_level_pre_cast(vec_max, ts, scheme):
    """The block scale before the scale-format cast, as the two_level_block_scale docstring
    states it (amax rule); returns (formula, value)."""
    import numpy as np

    F = np.float32
    m = F(scheme.max_elem)
    mx = fmt_value(scheme.max_elem)
    with np.errstate(all="ignore"):
        if scheme.policies["nv_scale_chain"] == "te":
            mult = F(ts.encode * F(F(1.0) / m))
            s = min(F(vec_max * mult), F(np.finfo(np.float32).max))
            return f"fp32(v · fp32(S_enc · fp32(1/{mx})))", s
        s = F(F(vec_max / m) / ts.decode)
        if scheme.policies["nv_block_scale_floor"] == "e4m3_min_normal":
            return f"fp32(fp32(v / {mx}) / pts), then max with {fmt_value(scheme.scale.min_normal)}", \
                max(s, F(scheme.scale.min_normal))
        return f"fp32(fp32(v / {mx}) / pts)", s


def two_level_example(values, global_amax=None, variants=("nvfp4",)) -> str:
    """Worked example of one two-level block (NVFP4 structure), computed at build time.

    ``values``: the block's first elements (the rest of the 16 are zero). ``global_amax``:
    when larger than the block's amax, the tensor gets a second block ``[global_amax, 0, ...]``
    in front, so the tensor amax differs from the block amax. ``variants``: scheme names or
    dicts ``{"scheme": name, **get_scheme overrides}`` (scale rule ``amax``), one column each.
    The tensor scale, element multiplier and codes come from :mod:`fp4spec.scaling`; every
    code is checked against ``fp4spec.quantize``.
    """
    import numpy as np

    from fp4spec import scaling
    from fp4spec.elements import encode_scalar

    cols = [_variant(v) for v in variants]
    keys = ["tensor amax g", "tensor scale", "stored decode scale (`global_scale`)", "block amax v",
            "block scale before the cast", "block scale code (RNE)", "element multiplier"]
    summary = {k: [] for k in keys}
    per_elem, pads = [], []
    n = len(values)
    for label, s in cols:
        if s.structure != "two_level" or s.is_2d or s.scale_rule != "amax":
            raise ValueError(f"two_level_example: {s.name!r} is not a 1D two-level scheme with scale rule 'amax'")
        k = s.block_size
        if n > k:
            raise ValueError(f"{n} values do not fit in one block of {k}")
        block = np.zeros(k, np.float32)
        block[:n] = _values(values)
        vmax = scaling.block_amax(list(block))
        lead = global_amax is not None and np.float32(global_amax) > vmax
        x = np.concatenate([np.eye(1, k, dtype=np.float32)[0] * np.float32(global_amax), block]) if lead else block
        q = fp4spec.quantize(x, s)
        deq = fp4spec.dequantize(q)[-k:]
        ts = scaling.two_level_tensor_scale(scaling.block_amax(list(x)), s)
        code = scaling.two_level_block_scale(vmax, ts, s)
        if code != int(q.scales[-1]) or np.float32(ts.decode).tobytes() != np.float32(q.global_scale).tobytes():
            raise AssertionError("two_level_example: scaling.py and fp4spec.quantize disagree")
        formula, pre = _two_level_pre_cast(vmax, ts, s)
        if encode_scalar(min(pre, np.float32(s.scale.max)), s.scale, "rne", overflow="saturate") != code:
            raise AssertionError("two_level_example: the documented chain does not give the scale code")
        mult = scaling.two_level_element_multiplier(code, ts, s)
        te = s.policies["nv_scale_chain"] == "te"
        emx = fmt_value(s.scale_bound * s.max_elem)
        summary["tensor amax g"].append(_f32(ts.amax, bits=False))
        special = not (np.isfinite(ts.amax) and ts.amax != 0)
        summary["tensor scale"].append(
            (f"S_enc = 1 (g is 0 or not finite) = {_f32(ts.encode)}" if special else
             f"S_enc = fp32({emx} / g) = {_f32(ts.encode)}") if te else
            f"pts = fp32(g / {emx}) = {_f32(ts.decode)}")
        summary["stored decode scale (`global_scale`)"].append(
            f"S_dec = fp32(1 / S_enc) = {_f32(ts.decode)}" if te else f"pts = {_f32(ts.decode)}")
        summary["block amax v"].append(_f32(vmax, bits=False))
        summary["block scale before the cast"].append(f"{formula} = {_f32(pre)}")
        summary["block scale code (RNE)"].append(
            f"`{_hex(s.scale, code)}` = {fmt_value(s.scale.decode_exact(code))}")
        summary["element multiplier"].append(
            f"fp32(1 / fp32(s · S_dec)) = {_f32(mult)}" if te else f"fp32(fp32(1 / pts) / s) = {_f32(mult)}")
        col = []
        for i in range(n):
            y = np.float32(np.float32(block[i]) * mult)
            c = scaling.two_level_element_code(block[i], mult, s, "rne", None, 8)
            if c != int(q.codes[-k + i]):
                raise AssertionError(f"two_level_example: element {i} disagrees with fp4spec.quantize")
            col.append((y, c, s.element.decode_exact(c), deq[i]))
        per_elem.append((s, col, lead))
        if n < k:
            pads.append((label, s.element, int(q.codes[-k + n]), deq[n]))
    top = _table(["", *[c[0] for c in cols]], [[k, *v] for k, v in summary.items()],
                 ["---"] + ["---"] * len(cols))
    header = ["i", "x"]
    for label, _ in cols:
        header += [f"{label}: y = fp32(x · multiplier)", "code = q", "dequantized"]
    rows = []
    for i in range(n):
        row = [str(i), _num(values[i])]
        for s, col, _ in per_elem:
            y, c, p, d = col[i]
            row += [_f32(y, bits=False), f"`{_hex(s.element, c)}`\u00a0=\u00a0{fmt_value(p)}", _num(d)]
        rows.append(row)
    bottom = _compact(_table(header, rows, ["--:"] * len(header)))
    k = cols[0][1].block_size
    notes = []
    if n < k:
        notes.append(_rest_note(n, k, pads))
    if any(lead for _, _, lead in per_elem):
        notes.append(f"The tensor holds a second block, `[{_f32(global_amax, bits=False)}, 0, …, 0]`, "
                     "so that its amax g is larger than the block's amax v.")
    return f"{top}\n\n{bottom}" + ("\n\n" + " ".join(notes) if notes else "")


def _values(values):
    """Block values from a placeholder: numbers, or the strings "nan", "inf", "-inf"."""
    import numpy as np

    return np.array([np.float32(v) for v in values], dtype=np.float32)
