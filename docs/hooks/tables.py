"""Markdown renderers for the documentation, computed from the format descriptors.

Every function returns Markdown text and reads everything it shows from ``fp4spec``; the
docs hook (``generate.py``) calls them for the ``{{ name(args) }}`` placeholders listed in
:data:`PLACEHOLDERS`. Values are printed exactly: a decimal when it is short, otherwise
``m·2^k`` with ``m`` in [1, 2).
"""

from __future__ import annotations

import importlib
import inspect
import math
import re
from fractions import Fraction

import fp4spec

#: Documentation page (relative to docs/formats/) of each catalogued format.
FORMAT_PAGES = {
    "e2m1": "e2m1.md",
    "e1m2": "e1m2.md",
    "e1m2_b1": "e1m2.md",
    "int4": "int4.md",
    "int4_sym": "int4.md",
    "s1p2": "s1p2.md",
    "e0m3": "int4.md",
    "e2m3": "fp6.md",
    "e3m2": "fp6.md",
    "e4m3": "e4m3.md",
    "ue4m3": "e4m3.md",
    "e5m2": "e5m2.md",
    "e8m0": "e8m0.md",
    "e6m2": "e6m2.md",
}

def get_format(name: str):
    """A catalogued format, or an IEEE P3109 draft format named like ``binary4p2sf``."""
    return fp4spec.get_format(name)


# -- value formatting -------------------------------------------------------------------------

def _decimal(q: Fraction) -> str:
    """Exact decimal expansion of a dyadic rational (denominator a power of two)."""
    sign = "-" if q < 0 else ""
    q = abs(q)
    k = q.denominator.bit_length() - 1
    if q.denominator != 1 << k:
        raise ValueError(f"{q} is not dyadic")
    digits = str(q.numerator * 5**k)
    if k == 0:
        return sign + digits
    digits = digits.rjust(k + 1, "0")
    return sign + (digits[:-k] + "." + digits[-k:]).rstrip("0").rstrip(".")


def _power_form(q: Fraction) -> str:
    """``m·2^k`` with m in [1, 2) (``2^k`` when m == 1)."""
    sign = "-" if q < 0 else ""
    q = abs(q)
    k = q.numerator.bit_length() - q.denominator.bit_length()
    if q < Fraction(2) ** k:
        k -= 1
    m = q / Fraction(2) ** k
    return f"{sign}2^{k}" if m == 1 else f"{sign}{_decimal(m)}·2^{k}"


def fmt_value(v, width: int = 12) -> str:
    """Exact text for a value: decimal if at most ``width`` characters, else ``m·2^k``."""
    if isinstance(v, float):
        if math.isnan(v):
            return "NaN"
        if math.isinf(v):
            return "+Inf" if v > 0 else "-Inf"
        if v == 0:
            return "-0" if math.copysign(1.0, v) < 0 else "0"
    q = Fraction(v)
    if q == 0:
        return "0"
    text = _decimal(q)
    return text if len(text.lstrip("-")) <= width else _power_form(q)


def _hex(fmt, code: int) -> str:
    return f"0x{code:0{(fmt.bits + 3) // 4}X}"


def _code_list(fmt, codes) -> str:
    """Codes as hex, runs of consecutive codes written as ranges (0x7D–0x7F)."""
    parts, run = [], []
    for c in list(codes) + [None]:
        if run and (c is None or c != run[-1] + 1):
            parts.append(_hex(fmt, run[0]) if len(run) == 1 else
                         f"{_hex(fmt, run[0])}, {_hex(fmt, run[1])}" if len(run) == 2 else
                         f"{_hex(fmt, run[0])}–{_hex(fmt, run[-1])}")
            run = []
        if c is not None:
            run.append(c)
    return ", ".join(parts)


def _layout(fmt) -> str:
    if fmt.kind == "int":
        return f"{fmt.bits}-bit two's complement"
    if fmt.kind == "uniform":
        return "S." + "K" * (fmt.bits - 1) + " (sign, magnitude index)"
    parts = (["S"] if fmt.signed else []) + ["E" * fmt.exponent_bits, "M" * fmt.mantissa_bits]
    return ".".join(p for p in parts if p)


def _specials(fmt) -> str:
    out = []
    if fmt.inf_codes:
        out.append("Inf " + _code_list(fmt, fmt.inf_codes))
    if fmt.nan_codes:
        out.append("NaN " + _code_list(fmt, fmt.nan_codes))
    if fmt.has_negative_zero:
        out.append("-0")
    if not fmt.has_zero:
        out.append("no zero")
    if fmt.kind == "int" and fmt.symmetric:
        out.append(f"{_hex(fmt, 1 << (fmt.bits - 1))} not produced by encoding")
    return "; ".join(out) or "none"


def _code_class(fmt, code: int) -> str:
    """Short description of one code: zero, subnormal, normal, NaN, Inf, and extreme values."""
    v = float(fmt.values[code])
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if code not in fmt.finite_codes:
        return "not produced by encoding"
    if v == 0:
        return "-0" if math.copysign(1.0, v) < 0 else "+0"
    marks = []
    if fmt.kind == "float":
        subnormal = fmt.subnormals and int(fmt.fields(code)[1] or "0", 2) == 0
        marks.append("subnormal" if subnormal else "normal")
        if v == fmt.min_subnormal:
            marks.append("min subnormal")
        if v == fmt.min_normal:
            marks.append("min normal")
    if v == fmt.max:
        marks.append("max")
    elif fmt.kind == "int" and v == fmt.min:
        marks.append("min")
    elif v == -fmt.max:
        marks.append("-max")
    return ", ".join(marks)


def _escape(text: str) -> str:
    """Plain text for a Markdown table cell: no emphasis, no cell breaks."""
    return re.sub(r"([\\*_|\[\]])", r"\\\1", text)


def _table(header: list[str], rows: list[list[str]], align: list[str] | None = None) -> str:
    align = align or ["---"] * len(header)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


# -- renderers (one per placeholder) ------------------------------------------------------------

def code_table(name: str) -> str:
    """Every code of a format: hex code, sign/exponent/mantissa bits, exact value, class."""
    fmt = get_format(name)
    cols = {"sign": fmt.signed,
            "exponent": fmt.kind == "float" and fmt.exponent_bits > 0,
            "mantissa": fmt.mantissa_bits > 0}
    labels = {"float": ("sign", "exponent", "mantissa"),
              "int": ("sign (MSB)", "exponent", "low bits"),
              "uniform": ("sign", "exponent", "magnitude index")}[fmt.kind]
    header = ["code"] + [lab for lab, on in zip(labels, cols.values()) if on] + ["value", "class"]
    rows = []
    width = 0 if _powers_of_two(fmt) else 12
    for row in fmt.code_table():
        bits = [b for b, on in zip((row.sign, row.exponent, row.mantissa), cols.values()) if on]
        rows.append([f"`{row.hex}`"] + [f"`{b}`" for b in bits]
                    + [fmt_value(fmt.decode_exact(row.code), width), _code_class(fmt, row.code)])
    align = ["---"] + [":-:"] * (len(header) - 3) + ["--:", "---"]
    return _table(header, rows, align)


def code_grid(name: str) -> str:
    """Compact grid of every value: row = code without its low nibble, column = low nibble.

    For formats whose values are all powers of two (E8M0) a cell holds the exponent k of 2^k.
    """
    fmt = get_format(name)
    if _powers_of_two(fmt):
        return _exponent_grid(fmt)
    n_cols = min(16, 1 << fmt.bits)
    n_rows = (1 << fmt.bits) // n_cols
    header = ["code"] + [f"_{c:X}" for c in range(n_cols)]
    rows = []
    for r in range(n_rows):
        values = [fmt.decode_exact(n_cols * r + c) for c in range(n_cols)]
        cells = [fmt_value(v, width=8) for v in values]
        if any("·" in cell or "^" in cell for cell in cells):  # one notation per row
            cells = [fmt_value(v, width=0) for v in values]
        label = f"0x{r:X}_" if n_rows > 1 else "0x_"
        rows.append([f"**{label}**"] + cells)
    table = _table(header, rows, ["---"] + ["--:"] * n_cols)
    return f'<div class="code-grid" markdown>\n\n{table}\n\n</div>'


def _exponent_grid(fmt) -> str:
    header = ["code"] + [f"_{c:X}" for c in range(16)]
    rows = []
    for r in range((1 << fmt.bits) // 16):
        cells = []
        for c in range(16):
            v = fmt.decode_exact(16 * r + c)
            cells.append(fmt_value(v) if isinstance(v, float) else str(v.numerator.bit_length() - v.denominator.bit_length()))
        rows.append([f"**0x{r:X}_**"] + cells)
    table = _table(header, rows, ["---"] + ["--:"] * 16)
    return f'Cell = *k*: the code\'s value is 2^*k*.\n\n<div class="code-grid" markdown>\n\n{table}\n\n</div>'


def field_grid(name: str) -> str:
    """Non-negative values of a float format: row = exponent field, column = mantissa field
    (the layout of the OCP tables). Negative codes are these codes with the sign bit set."""
    fmt = get_format(name)
    if fmt.kind != "float" or fmt.mantissa_bits == 0:
        raise ValueError(f"field_grid: {name!r} is not a float format with mantissa bits")
    e_bits, m_bits = fmt.exponent_bits, fmt.mantissa_bits
    header = ["E field (codes)", "scale"] + [f"M={m:0{m_bits}b}" for m in range(1 << m_bits)]
    rows = []
    for e in range(1 << e_bits):
        codes = [(e << m_bits) | m for m in range(1 << m_bits)]
        values = [fmt.decode_exact(c) for c in codes]
        cells = [fmt_value(v, width=10) for v in values]
        if any("^" in cell for cell in cells):  # one notation per row
            cells = [fmt_value(v, width=0) for v in values]
        subnormal = fmt.subnormals and e == 0
        scale = f"2^{(1 if subnormal else e) - fmt.bias}" + (" (subnormal: 0.M)" if subnormal else "")
        rows.append([f"`{e:0{e_bits}b}` ({_hex(fmt, codes[0])}–{_hex(fmt, codes[-1])})", scale] + cells)
    table = _table(header, rows, ["---", "---"] + ["--:"] * (1 << m_bits))
    return f'<div class="code-grid" markdown>\n\n{table}\n\n</div>'


def _powers_of_two(fmt) -> bool:
    """Formats without mantissa bits (E8M0): every value is written as 2^k."""
    return fmt.kind == "float" and fmt.mantissa_bits == 0


def format_summary(link_base: str | None = None) -> str:
    """One row per catalogued format; names link to ``link_base + page`` when given."""
    header = ["format", "kind", "bits", "layout", "bias", "max", "min normal",
              "min subnormal", "emax", "specials"]
    rows = []
    for name, fmt in fp4spec.formats.items():
        label = f"`{name}`"
        if link_base is not None and name in FORMAT_PAGES:
            label = f"[{label}]({link_base}{FORMAT_PAGES[name]})"
        bias = getattr(fmt, "bias", None)
        rows.append([
            label, fmt.kind, str(fmt.bits), _layout(fmt),
            "–" if bias is None else str(bias),
            fmt_value(fmt.max),
            "–" if fmt.min_normal is None else fmt_value(fmt.min_normal),
            "–" if fmt.min_subnormal is None else fmt_value(fmt.min_subnormal),
            str(fmt.emax) if fmt.kind == "float" else "–",
            _specials(fmt),
        ])
    return _table(header, rows)


def format_params(name: str) -> str:
    """Parameter table of one format, every entry read from its descriptor."""
    fmt = get_format(name)
    yes = lambda b: "yes" if b else "no"  # noqa: E731
    kind = {"float": "sign-magnitude minifloat" if fmt.signed else "unsigned minifloat",
            "int": "two's complement integer", "uniform": "sign-magnitude uniform grid"}[fmt.kind]
    zero = ("none" if not fmt.has_zero else
            "+0 and -0" if fmt.has_negative_zero else "one zero (no -0)")
    rows = [
        ["name", f"`{fmt.name}`"],
        ["kind", kind],
        ["bits", str(fmt.bits)],
        ["layout", _layout(fmt)],
    ]
    if fmt.kind == "float":
        rows += [
            ["exponent bits / mantissa bits", f"{fmt.exponent_bits} / {fmt.mantissa_bits}"],
            ["bias", str(fmt.bias)],
            ["subnormals", yes(fmt.subnormals)],
            ["special-value encoding", f"`{fmt.specials}`"],
        ]
    if fmt.kind == "uniform":
        rows.append(["step", fmt_value(fmt.step)])
    if fmt.kind == "int":
        rows.append(["symmetric (most negative code unused)", yes(fmt.symmetric)])
    rows += [
        ["signed", yes(fmt.signed)],
        ["zero", zero],
        ["infinities", _code_list(fmt, fmt.inf_codes) or "none"],
        ["NaN", _code_list(fmt, fmt.nan_codes) or "none"],
        ["largest finite value", f"{fmt_value(fmt.max)} (code `{_hex(fmt, fmt.max_code)}`)"],
        ["smallest finite value", fmt_value(fmt.min)],
    ]
    if fmt.kind == "float":
        rows += [
            ["smallest normal value", f"{fmt_value(fmt.min_normal)} (emin = {fmt.emin})"],
            ["smallest subnormal value", "–" if fmt.min_subnormal is None else fmt_value(fmt.min_subnormal)],
            ["emax (exponent of the largest value)", str(fmt.emax)],
        ]
    rows += [
        ["distinct finite values", str(len(fmt.grid) + (1 if fmt.has_negative_zero else 0))
         + (" (counting -0)" if fmt.has_negative_zero else "")],
        ["descriptor", f"`{fmt!r}`"],
    ]
    return _table(["parameter", "value"], rows)


def rne_intervals(fmt) -> list[dict]:
    """For each non-negative value of ``fmt``, in order: its code, the value, the interval of
    inputs that round to it under RNE (``lo``, ``hi``, whether each end is included) and the
    mean rounding error (value - input) of inputs spread uniformly over it, ``bias`` (0 for
    the zero, whose interval is symmetric about it). The top value's interval ends at the
    overflow tie, half an ulp of the top binade above the max."""
    grid = [(v, c) for v, c in fmt.grid if v >= 0]
    out = []
    for i, (v, code) in enumerate(grid):
        top = i + 1 == len(grid)
        if top:
            ulp = (Fraction(2) ** (fmt.emax - fmt.mantissa_bits) if fmt.kind == "float"
                   else v - grid[i - 1][0])
            hi = v + ulp / 2
            hi_closed = (fmt.kind != "float" or fmt.mantissa_bits > 0) and code % 2 == 0
        else:
            hi = (v + grid[i + 1][0]) / 2
            hi_closed = _wins_tie(fmt, (v, code), grid[i + 1])
        if i == 0:
            lo, lo_closed, bias = Fraction(0), True, Fraction(0)
        else:
            lo = (grid[i - 1][0] + v) / 2
            lo_closed = _wins_tie(fmt, (v, code), grid[i - 1])
            bias = v - (lo + hi) / 2
        out.append({"code": code, "value": v, "lo": lo, "hi": hi, "lo_closed": lo_closed, "hi_closed": hi_closed,
                    "top": top, "bias": bias, "first": i == 0})
    return out


def rne_bins(name: str) -> str:
    """For each non-negative value: the inputs that round to it under RNE, how far that
    interval reaches below and above the value, and the mean rounding error (result - input)
    of inputs spread uniformly over it. A non-zero mean error is the grid's shrinkage bias."""
    fmt = get_format(name)
    rows = []
    for c in rne_intervals(fmt):
        v, lo, hi = c["value"], c["lo"], c["hi"]
        if c["first"]:
            rows.append([f"`{_hex(fmt, c['code'])}`", fmt_value(v), f"[0, {fmt_value(hi)}"
                         + ("]" if c["hi_closed"] else ")"), "–", fmt_value(hi - v), "–"])
            continue
        interval = ("[" if c["lo_closed"] else "(") + f"{fmt_value(lo)}, {fmt_value(hi)}" + \
            ("]" if c["hi_closed"] else ")") + (" and above, if saturating" if c["top"] else "")
        err = c["bias"]
        rows.append([f"`{_hex(fmt, c['code'])}`", fmt_value(v), interval, fmt_value(v - lo),
                     fmt_value(hi - v), fmt_value(err) if err else "0"])
    return _table(["code", "value", "inputs that round to it (RNE)", "reach below",
                   "reach above", "mean error"], rows, ["---", "--:", "---", "--:", "--:", "--:"])


def _wins_tie(fmt, a, b) -> bool:
    """Whether value ``a`` (not its neighbour ``b``) receives their midpoint under RNE."""
    (va, ca), (vb, cb) = a, b
    if fmt.kind == "float" and fmt.mantissa_bits == 0:
        return abs(va) > abs(vb)  # no mantissa bits: the kept bit is the implicit 1
    return ca % 2 == 0  # even mantissa LSB (integers: even value; uniform: even index)


def side_by_side(*names: str) -> str:
    """Every code read as each of several formats with the same bit width."""
    fmts = [get_format(n) for n in names]
    bits = {f.bits for f in fmts}
    if len(bits) != 1:
        raise ValueError(f"side_by_side: formats of different widths {sorted(bits)}")
    (width,) = bits
    header = ["code", "bits"] + [f"`{f.name}`" for f in fmts]
    rows = [[f"`{_hex(fmts[0], c)}`", f"`{c:0{width}b}`"] + [fmt_value(f.decode_exact(c)) for f in fmts]
            for c in range(1 << width)]
    return _table(header, rows, ["---", "---"] + ["--:"] * len(fmts))


def format_lines() -> str:
    """A text block with the ``describe()`` line of every catalogued format."""
    return "```text\n" + "\n".join(f.describe() for f in fp4spec.formats.values()) + "\n```"


def profiles_table() -> str:
    """Every vendor profile (``fp4spec.profiles``): what it is, where it was read, and its
    choice for each policy; policies on which the profiles disagree are marked ≠."""
    from fp4spec import profiles as prof

    profiles = prof.list_profiles()
    differ = set(prof.differing_policies())
    who = _table(["profile", "implementation", "source", "drives schemes"],
                 [[f"`{p.name}`", _escape(p.title), _escape(p.source),
                   ", ".join(f"`{s}`" for s in p.structures) or "–"] for p in profiles])
    rows = []
    for key, (what, choices) in prof.POLICIES.items():
        if not any(key in p.policies for p in profiles):
            continue
        cells = [f"`{p.policies[key]}`" if key in p.policies else "–" for p in profiles]
        rows.append([f"`{key}`" + (" ≠" if key in differ else "")] + cells)
    choices = _table(["policy", "what it decides", "choices"],
                     [[f"`{key}`", _escape(what), ", ".join(f"`{c}`" for c in options)]
                      for key, (what, options) in prof.POLICIES.items()])
    return "\n\n".join([who, _table(["policy"] + [f"`{p.name}`" for p in profiles], rows), choices])


def cli_help(*command: str) -> str:
    """A text block with the output of ``fp4spec [COMMAND] --help`` (80 columns)."""
    import contextlib
    import io
    import os
    from unittest import mock

    from fp4spec import cli

    out = io.StringIO()
    with mock.patch.dict(os.environ, {"COLUMNS": "80"}), contextlib.redirect_stdout(out):
        try:
            cli.main([*command, "--help"])
        except SystemExit:
            pass
    if not out.getvalue().strip():
        raise ValueError(f"cli_help: `fp4spec {' '.join(command)} --help` printed nothing")
    return "```text\n$ fp4spec " + " ".join([*command, "--help"]) + "\n" + out.getvalue().rstrip() + "\n```"


def docstring(path: str) -> str:
    """The docstring of an importable object, quoted verbatim in a quote admonition.

    Only the plain-text markup is adapted to Markdown, as on the API page
    (``griffe_markdown.py``): Sphinx roles (``:class:`X```) become code spans, and a ``#``
    starting a line (an issue number) is escaped so it does not become a heading.
    """
    obj = import_object(path)
    doc = inspect.getdoc(obj)
    if not doc:
        raise ValueError(f"docstring: {path!r} has no docstring")
    doc = re.sub(r":[a-z]+:`~?([^`]+)`", r"`\1`", doc)
    doc = re.sub(r"^(\s*)#(?=[^#\s])", r"\1\\#", doc, flags=re.MULTILINE)
    body = "\n".join(("    " + line) if line.strip() else "" for line in doc.splitlines())
    return f'!!! quote "Docstring of `{path}` (quoted verbatim)"\n\n{body}\n'


def import_object(path: str):
    """Import ``a.b.c`` as a module, or as an attribute chain below the longest module prefix."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError as exc:
            if exc.name is not None and not ".".join(parts[:i]).startswith(exc.name):
                raise  # the module exists but one of its own imports is missing
            continue
        for attr in parts[i:]:
            try:
                obj = getattr(obj, attr)
            except AttributeError:
                raise ImportError(f"cannot import {path!r}: {'.'.join(parts[:i])!r} has no "
                                  f"attribute path {'.'.join(parts[i:])!r}") from None
        return obj
    raise ImportError(f"cannot import {path!r}: no module {parts[0]!r}")


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
    from fp4spec.reference import encode_scalar

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
    from fp4spec.reference import encode_scalar

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


def nv_scale_order(block_amax, global_amax, max_elem: float = 6.0, scale_bound: float = 448.0) -> str:
    """The NVFP4 block scale of one block computed in three fp32 operation orders, with the
    UE4M3 code each gives: TE (one rounding after the folded reciprocal), the same quotient in
    two roundings, and torchao's chain. Rows 1 and 3 are checked against ``fp4spec.quantize``."""
    import numpy as np

    from fp4spec.reference import encode_scalar

    F = np.float32
    v, g, m = F(block_amax), F(global_amax), F(max_elem)
    ue = fp4spec.get_format("ue4m3")
    em = F(F(scale_bound) * m)
    s_enc = F(em / g)
    pts = F(g / em)
    k = fmt_value(max_elem)
    rows_in = [
        (f"TransformerEngine: `block_amax * (S_enc * (1/{k}))`", f"fp32(v · fp32(S_enc · fp32(1/{k})))",
         F(v * F(s_enc * F(F(1.0) / m))), "te"),
        (f"the same quotient, two roundings: `(block_amax / {k}) * S_enc`", f"fp32(fp32(v / {k}) · S_enc)",
         F(F(v / m) * s_enc), None),
        (f"torchao: `(block_amax / {k}) / pts`", f"fp32(fp32(v / {k}) / pts)", F(F(v / m) / pts), "torchao"),
    ]
    rows = []
    for label, formula, s, profile in rows_in:
        code = encode_scalar(min(s, F(448)), ue, "rne", overflow="saturate")
        if profile is not None:
            sch = fp4spec.get_scheme("nvfp4", profile=profile, element_max=float(m), scale_max=float(scale_bound))
            x = np.zeros(32, np.float32)
            x[0], x[16] = g, v
            got = int(fp4spec.quantize(x, sch).scales[1])
            if got != code:
                raise AssertionError(f"nv_scale_order: {profile} chain gives {code:#x}, quantize {got:#x}")
        rows.append([label, formula, _f32(s),
                     f"`0x{code:02X}` = {fmt_value(ue.decode_exact(code))}"])
    head = (f"g = {_f32(g, bits=False)}, v = {_f32(v, bits=False)}: "
            f"S_enc = fp32({fmt_value(scale_bound * max_elem)} / g) = {_f32(s_enc)}, "
            f"pts = fp32(g / {fmt_value(scale_bound * max_elem)}) = {_f32(pts)}.")
    return head + "\n\n" + _table(["order", "block scale", "value (float32)", "UE4M3 code"], rows,
                                  ["---", "---", "--:", "---"])


def _e2m1_midpoints():
    fmt = fp4spec.get_format("e2m1")
    mags = sorted({float(v) for v, _ in fmt.grid if v >= 0})
    return [(a + b) / 2 for a, b in zip(mags, mags[1:])]


def nv_reciprocal_vs_division(global_amaxes=(1.0, 3.3, 100.1, 775.79785)) -> str:
    """Count the E2M1 codes that change when the NVFP4 element step divides by the block's
    decode scale instead of multiplying by its float32 reciprocal, over a family of tie
    inputs: for each tensor amax g, each finite non-zero UE4M3 scale s, each E2M1 midpoint m
    and each sign, x = fp32(±m · d) (d = fp32(s · S_dec)) and its two float32 neighbours.
    The reciprocal form is ``fp4spec.scaling.two_level_element_multiplier`` (TE)."""
    import numpy as np

    from fp4spec import scaling
    from fp4spec.emulator.encode import encode

    F = np.float32
    sch = fp4spec.get_scheme("nvfp4")
    e2m1, ue = sch.element, sch.scale
    mids = np.array(_e2m1_midpoints(), np.float32)
    total = differ = 0
    example = None
    for g in global_amaxes:
        ts = scaling.two_level_tensor_scale(F(g), sch)
        codes = [c for c in range(1 << ue.bits) if c in ue.finite_codes and ue.values[c] > 0]
        d = np.array([F(F(ue.values[c]) * ts.decode) for c in codes], np.float32)
        rcp = np.array([scaling.two_level_element_multiplier(c, ts, sch) for c in codes], np.float32)
        with np.errstate(all="ignore"):
            x0 = (mids[None, :] * d[:, None]).astype(np.float32)
            x0 = np.stack([x0, -x0], -1)
            xs = np.stack([np.nextafter(x0, F(-np.inf)), x0, np.nextafter(x0, F(np.inf))], -1)
            y_mul = np.clip(xs * rcp[:, None, None, None], F(-6), F(6))
            y_div = np.clip(xs / d[:, None, None, None], F(-6), F(6))
        c_mul = encode(y_mul, e2m1, "rne", overflow="saturate")
        c_div = encode(y_div, e2m1, "rne", overflow="saturate")
        bad = c_mul != c_div
        total += bad.size
        differ += int(bad.sum())
        normal = [(i, j, sg, t) for i, j, sg, t in np.argwhere(bad) if ue.values[codes[i]] >= 1]
        if normal:  # the example: the last tensor amax's first disagreement with a scale >= 1
            i, j, sg, t = (int(a) for a in normal[0])
            example = (g, codes[i], d[i], rcp[i], xs[i, j, sg, t], y_mul[i, j, sg, t], y_div[i, j, sg, t],
                       c_mul[i, j, sg, t], c_div[i, j, sg, t])
    text = (f"Over this family ({len(global_amaxes)} tensor amaxes × {len(codes)} non-zero UE4M3 scales × "
            f"{len(mids)} midpoints × 2 signs × 3 neighbours = {total} inputs), the two forms give a "
            f"different E2M1 code for {differ} inputs ({100 * differ / total:.2f} %).")
    if example:
        g, c, d, r, x, ym, yd, cm, cd = example
        text += (f" For example, g = {_f32(g, bits=False)}, scale `0x{c:02X}`, d = fp32(s · S_dec) = "
                 f"{_f32(d, bits=False)}, x = {_f32(x, bits=False)}: fp32(x · fp32(1/d)) = "
                 f"{_f32(ym, bits=False)} → `{_hex(e2m1, int(cm))}` but fp32(x / d) = "
                 f"{_f32(yd, bits=False)} → `{_hex(e2m1, int(cd))}`.")
    return text


def nv_dequant_order_example(global_amax=637.9617, scale_code=0x05, element_code=0x3) -> str:
    """One NVFP4 element dequantized in both fp32 orders of ``nv_dequant_order`` (TE
    ``(q*s)*g``, torchao ``q*(g*s)``) with the same g, s, q, through
    ``fp4spec.scaling.dequantize_two_level_scalar``; fails the build if they agree."""
    import numpy as np

    from fp4spec import scaling

    g = np.float32(np.float32(global_amax) / np.float32(2688))
    out = []
    for profile in ("te", "torchao"):
        sch = fp4spec.get_scheme("nvfp4", profile=profile)
        out.append(scaling.dequantize_two_level_scalar(element_code, scale_code, g, sch))
    if out[0] == out[1]:
        raise ValueError("nv_dequant_order_example: the two orders agree on this input; pick another")
    sch = fp4spec.get_scheme("nvfp4")
    return (f"q = {fmt_value(sch.element.decode_exact(element_code))} (`{_hex(sch.element, element_code)}`), "
            f"s = {fmt_value(sch.scale.decode_exact(scale_code))} (`0x{scale_code:02X}`), "
            f"g = {_f32(g)}: fp32(fp32(q · s) · g) = {_f32(out[0])}, "
            f"fp32(q · fp32(g · s)) = {_f32(out[1])}.")


def profile_disagreement(scheme: str = "nvfp4", profiles=("te", "torchao"), distributions=None,
                         shape=(1024, 1024), seed: int = 0) -> str:
    """How often two profiles of one scheme disagree, on the reproducible tensors of
    :func:`fp4spec.analysis.distributions.sample` (all of its distributions by default): block
    scale codes, element codes and dequantized values (float32 bits) that differ."""
    import numpy as np

    from fp4spec.analysis import distributions as dists

    rows = []
    for name in distributions or dists.DISTRIBUTIONS:
        x = dists.sample(name, shape, seed)
        a, b = (fp4spec.quantize(x, scheme, profile=p) for p in profiles)
        da, db = fp4spec.dequantize(a), fp4spec.dequantize(b)
        counts = [(int((a.scales != b.scales).sum()), a.scales.size),
                  (int((a.codes != b.codes).sum()), a.codes.size),
                  (int((da.view(np.uint32) != db.view(np.uint32)).sum()), da.size)]
        rows.append([f"`{name}`"] + [f"{n} of {total} ({100 * n / total:.3g} %)" for n, total in counts])
    header = ["distribution", "block scale codes", "element codes", "dequantized values"]
    return _table(header, rows, ["---", "--:", "--:", "--:"])


def four_over_six_example(values, global_amax=None, scale_max=256.0, error_mode="mae") -> str:
    """Worked 4over6 example of one 1 x 16 block: both candidate scales, their codes and
    errors (:func:`fp4spec.scaling.four_over_six_row_error`) and the choice, checked against
    ``fp4spec.quantize``."""
    import numpy as np

    from fp4spec import scaling

    s = fp4spec.get_scheme("nvfp4", scale_rule="4over6", scale_max=scale_max, error_mode=error_mode)
    k = s.block_size
    block = np.zeros(k, np.float32)
    block[:len(values)] = _values(values)
    vmax = scaling.block_amax(list(block))
    lead = global_amax is not None and np.float32(global_amax) > vmax
    x = np.concatenate([np.eye(1, k, dtype=np.float32)[0] * np.float32(global_amax), block]) if lead else block
    q = fp4spec.quantize(x, s)
    ts = scaling.two_level_tensor_scale(scaling.block_amax(list(x)), s)
    cands = []
    for name, cand in (("map to 6", 1.0), ("map to 4", 1.5)):
        code = scaling.two_level_block_scale(vmax, ts, s, cand)
        mult = scaling.two_level_element_multiplier(code, ts, s)
        codes = [scaling.two_level_element_code(v, mult, s, "rne", None, 8) for v in block]
        err = scaling.four_over_six_row_error(block, codes, code, ts, s)
        cands.append((name, code, mult, codes, err))
    pick = 1 if cands[1][4] < cands[0][4] else 0
    if cands[pick][1] != int(q.scales[-1]) or cands[pick][3] != [int(c) for c in q.codes[-k:]]:
        raise AssertionError("four_over_six_example: scaling.py and fp4spec.quantize disagree")
    rows = [[name, f"`0x{code:02X}` = {fmt_value(s.scale.decode_exact(code))}", _f32(mult, bits=False),
             " ".join(f"{fmt_value(s.element.decode_exact(c))}" for c in codes[:len(values)]),
             _f32(err, bits=False), "**chosen**" if i == pick else ""]
            for i, (name, code, mult, codes, err) in enumerate(cands)]
    head = (f"Block x = [{', '.join(_f32(v, bits=False) for v in values)}"
            f"{', 0, …' if len(values) < k else ''}], tensor amax g = {_f32(ts.amax, bits=False)}, "
            f"Emax = {fmt_value(scale_max)}, error {error_mode.upper()}: S_enc = {_f32(ts.encode)}.")
    return head + "\n\n" + _table(["candidate", "scale code", "element multiplier",
                                   "element values (first " + str(len(values)) + ")", "error", ""],
                                  rows, ["---", "---", "--:", "---", "--:", "---"])


def grid_equivalence(pairs=(("int4_sym", 1), ("e1m2", 2), ("e1m2_b1", 4), ("s1p2", 4))) -> str:
    """Non-negative grids of several formats and the same grids multiplied by a factor; the
    build fails unless every scaled grid is the same set."""
    rows, sets = [], []
    for name, factor in pairs:
        fmt = fp4spec.get_format(name)
        grid = sorted({abs(v) for v, _ in fmt.grid})
        scaled = [v * factor for v in grid]
        sets.append(frozenset(scaled))
        rows.append([f"`{name}`", ", ".join(fmt_value(v) for v in grid), f"× {factor}",
                     ", ".join(fmt_value(v) for v in scaled)])
    if len(set(sets)) != 1:
        raise ValueError("grid_equivalence: the scaled grids differ")
    return _table(["format", "magnitudes", "factor", "scaled magnitudes"], rows,
                  ["---", "---", "---", "---"])


def ue4m3_halving(amaxes=(1.0, 2.6, 100.0, 1000.0, 0.01, 1e-3, 3000.0), maxes=(3.5, 7.0)) -> str:
    """For each amax, the single-level block scales fp32(amax / max) for each element max,
    rounded to UE4M3 (RNE, saturating): code, exponent and mantissa fields, value."""
    import numpy as np

    from fp4spec.reference import encode_scalar

    ue = fp4spec.get_format("ue4m3")
    header = ["amax"] + [f"amax / {fmt_value(m)} → UE4M3" for m in maxes] + ["same M, E one apart"]
    rows = []
    for a in amaxes:
        cells, fields = [_f32(a, bits=False)], []
        for m in maxes:
            s = np.float32(np.float32(a) / np.float32(m))
            c = encode_scalar(s, ue, "rne", overflow="saturate")
            _, e_bits, m_bits = ue.fields(c)
            fields.append((int(e_bits, 2), m_bits, c))
            cells.append(f"{_f32(s, bits=False)} → `0x{c:02X}` (E `{e_bits}`, M `{m_bits}`) = "
                         f"{fmt_value(ue.decode_exact(c))}")
        same = all(f[1] == fields[0][1] and fields[0][0] - f[0] == i and f[2] != ue.max_code
                   for i, f in enumerate(fields))
        cells.append("yes" if same else "**no**")
        rows.append(cells)
    return _table(header, rows, ["--:"] + ["---"] * len(maxes) + ["---"])


def blocked_offsets(cells=((0, 0), (1, 0), (31, 0), (32, 0), (127, 3), (0, 4), (128, 0), (130, 5)),
                    rows: int = 300, cols: int = 11) -> str:
    """Offsets of scale ``S[r, c]`` in the cuBLAS 128x4 layout of a ``rows x cols`` scale
    matrix: :func:`fp4spec.layouts.blocked_offset`, checked against :func:`fp4spec.to_blocked`."""
    import numpy as np

    from fp4spec import layouts

    rp, cp = layouts.blocked_shape(rows, cols)
    table = []
    for r, c in cells:
        off = layouts.blocked_offset(r, c, cols)
        probe = np.zeros((rows, cols), np.uint8)
        probe[r, c] = 1
        if int(np.flatnonzero(fp4spec.to_blocked(probe))[0]) != off:
            raise AssertionError(f"blocked_offsets: to_blocked disagrees at ({r}, {c})")
        tile = off // layouts.TILE_BYTES
        within = off % layouts.TILE_BYTES
        table.append([f"({r}, {c})", str(tile), f"{within // 16}", f"{within % 16}", str(off)])
    head = (f"A {rows} × {cols} scale matrix pads to {rp} × {cp} (`blocked_shape({rows}, {cols})`); "
            f"the buffer holds {rp * cp} bytes, {rp * cp - rows * cols} of them padding.")
    return head + "\n\n" + _table(["(r, c)", "tile", "row in tile (r % 32)", "byte in row", "offset"], table,
                                  ["---", "--:", "--:", "--:", "--:"])


def blocked_layout_svg() -> str:
    """SVG diagram of one 128 x 4 tile of the cuBLAS blocked layout: the logical tile (rows
    in four groups of 32) and its 32 x 16 bytes in memory, every cell placed by
    :func:`fp4spec.layouts.blocked_offset`."""
    from fp4spec import layouts

    colours = ["#5c6bc0", "#26a69a", "#ffa726", "#ef5350"]  # row group q = r // 32
    cw, ch = 14, 3  # logical tile: 4 columns of 14 px, 128 rows of 3 px
    pw, ph = 14, 12  # memory: 16 columns of 14 px, 32 rows of 12 px
    lx, ly, px, py = 70, 30, 260, 30
    parts = []
    for r in range(128):
        for c in range(4):
            fill = colours[r // 32]
            op = 0.55 + 0.15 * c
            parts.append(f'<rect x="{lx + c * cw}" y="{ly + r * ch}" width="{cw - 1}" height="{ch}" '
                         f'fill="{fill}" fill-opacity="{op:.2f}"/>')
            off = layouts.blocked_offset(r, c, 4)
            row, col = divmod(off, 16)
            parts.append(f'<rect x="{px + col * pw}" y="{py + row * ph}" width="{pw - 1}" height="{ph - 1}" '
                         f'fill="{fill}" fill-opacity="{op:.2f}"/>')
    # highlight one entry in both views
    hr, hc = 33, 2
    off = layouts.blocked_offset(hr, hc, 4)
    row, col = divmod(off, 16)
    parts.append(f'<rect x="{lx + hc * cw - 1}" y="{ly + hr * ch - 1}" width="{cw + 1}" height="{ch + 2}" '
                 f'fill="none" stroke="currentColor" stroke-width="2"/>')
    parts.append(f'<rect x="{px + col * pw - 1}" y="{py + row * ph - 1}" width="{pw + 1}" height="{ph + 1}" '
                 f'fill="none" stroke="currentColor" stroke-width="2"/>')
    parts.append(f'<path d="M{lx + 4 * cw + 4},{ly + hr * ch + 1} C{lx + 4 * cw + 60},{ly + hr * ch + 1} '
                 f'{px - 60},{py + row * ph + 6} {px + col * pw - 3},{py + row * ph + 6}" fill="none" '
                 f'stroke="currentColor" stroke-width="1.2" marker-end="url(#arrow)"/>')
    def label(x, y, words, anchor="middle"):
        return f'<text x="{x}" y="{y}" text-anchor="{anchor}">{words}</text>'

    text = [label(lx + 2 * cw, ly - 12, "S[r, c]: 128 × 4"),
            label(lx + 2 * cw, ly + 128 * ch + 30, "c"),
            label(px + 8 * pw, py - 12, "memory: 32 rows × 16 bytes = 512 bytes"),
            label(px + 8 * pw, py + 32 * ph + 32, f"S[{hr}, {hc}] → offset {off} = {row} × 16 + {col}")]
    for q in range(4):
        text.append(label(lx - 6, ly + (32 * q + 17) * ch, f"r {32 * q}–{32 * q + 31}", "end"))
        text.append(label(px + (4 * q + 2) * pw, py + 32 * ph + 14, f"r // 32 = {q}"))
    for c in range(4):
        text.append(label(lx + c * cw + cw / 2, ly + 128 * ch + 14, str(c)))
    for rr in (0, 31):
        text.append(label(px - 6, py + rr * ph + 9, f"r % 32 = {rr}", "end"))
    w, h = px + 16 * pw + 20, py + 32 * ph + 44
    svg = (f'<svg class="fp4spec-diagram" viewBox="0 0 {w} {h}" width="{w * 1.5:.0f}" role="img" '
           f'aria-label="cuBLAS 128x4 scale tile layout" xmlns="http://www.w3.org/2000/svg" '
           f'font-family="sans-serif" font-size="10" fill="currentColor">'
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" markerHeight="6" '
           'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="currentColor"/></marker></defs>'
           + "".join(parts) + "".join(text) + "</svg>")
    caption = ("One 128 × 4 tile (512 bytes). Colour: row group r // 32; shade: column c. "
               "Drawn from `fp4spec.layouts.blocked_offset` at build time.")
    return f'<figure markdown>\n{svg}\n<figcaption markdown>{caption}</figcaption>\n</figure>'

def _values(values):
    """Block values from a placeholder: numbers, or the strings "nan", "inf", "-inf"."""
    import numpy as np

    return np.array([np.float32(v) for v in values], dtype=np.float32)


def mx_special_blocks(cases, scheme: str = "mxfp4", profiles=("ocp", "torchao")) -> str:
    """Edge-case MX blocks under several profiles. ``cases``: ``(label, values, rule)``
    triples; ``values`` are the block's first elements (numbers or "nan"/"inf"/"-inf"; the
    rest of the block is zero). Each cell shows the scale code, the codes of the given
    elements and their dequantized values, all from ``fp4spec.quantize``."""
    header = ["block", "x (first elements)", "rule"]
    for p in profiles:
        header += [f"`{p}`: scale", "codes", "dequantized"]
    rows = []
    for label, values, rule in cases:
        vals = _values(values)
        row = [label, ", ".join(_num(v) for v in vals), rule]
        for p in profiles:
            s = fp4spec.get_scheme(scheme, scale_rule=rule, profile=p)
            q = fp4spec.quantize(_mx_block(vals, s), s)
            d = fp4spec.dequantize(q)
            row += [f"`0x{int(q.scales[0]):02X}`",
                    ", ".join(f"`{_hex(s.element, int(c))}`" for c in q.codes[:len(vals)]),
                    ", ".join(_num(v) for v in d[:len(vals)])]
        rows.append(row)
    return _compact(_table(header, rows, ["---", "--:", "---"] + ["---", "---", "--:"] * len(profiles)))


def profile_diff(profiles=("te", "torchao"), prefix: str = "nv_") -> str:
    """The policies (``fp4spec.profiles.POLICIES``) whose names start with ``prefix``: what
    each decides and each profile's choice; rows where the profiles differ are marked ≠."""
    from fp4spec import profiles as prof

    ps = [prof.get_profile(p) for p in profiles]
    rows = []
    for key, (what, _) in prof.POLICIES.items():
        if not key.startswith(prefix) or not any(key in p.policies for p in ps):
            continue
        choices = [p.policies.get(key) for p in ps]
        mark = " ≠" if len(set(choices)) > 1 else ""
        rows.append([f'<span style="white-space: nowrap">`{key}`{mark}</span>', _escape(what)]
                    + [f"`{c}`" if c else "–" for c in choices])
    return _table(["policy", "what it decides"] + [f"`{p.name}`" for p in ps], rows)

def mx_elements() -> str:
    """The element formats of the catalogued MX schemes: max, emax, and what the ``floor``
    rule does to a block maximum 2^E · m (m in [1, 2)): it scales it to m · 2^emax, which
    exceeds the element max -- and is clamped -- when m > max / 2^emax."""
    rows = []
    for name, s in fp4spec.schemes.items():
        if s.structure != "mx":
            continue
        el = s.element
        head = Fraction(el.max) / Fraction(2) ** el.emax
        loss = 1 - Fraction(el.max) / Fraction(2) ** (el.emax + 1)
        rows.append([f"`{name}`", f"`{el.name}`", fmt_value(el.max), str(el.emax),
                     f"[{fmt_value(Fraction(2) ** el.emax)}, {fmt_value(Fraction(2) ** (el.emax + 1))})",
                     f"m > {fmt_value(head)}", f"{fmt_value(loss * 100)} %"])
    return _table(["scheme", "element", "max", "emax", "`floor`: amax / X in", "clamped when",
                   "largest loss of the block max"], rows, ["---", "---", "--:", "--:", "---", "---", "--:"])

def uniform_equivalence(a: str = "ufp4", b: str = "nvint4", distributions=None, shape=(1024, 1024),
                        seed: int = 0) -> str:
    """Compare two schemes on the reproducible tensors of
    :func:`fp4spec.analysis.distributions.sample`: block scale codes that agree, and
    dequantized values that agree bit for bit (and, of the rest, how many are zeros of
    opposite sign)."""
    import numpy as np

    from fp4spec.analysis import distributions as dists

    rows = []
    for name in distributions or dists.DISTRIBUTIONS:
        x = dists.sample(name, shape, seed)
        qa, qb = fp4spec.quantize(x, a), fp4spec.quantize(x, b)
        da, db = fp4spec.dequantize(qa), fp4spec.dequantize(qb)
        same_bits = da.view(np.uint32) == db.view(np.uint32)
        zeros = (~same_bits) & (da == 0) & (db == 0)
        rows.append([f"`{name}`", f"{int((qa.scales == qb.scales).sum())} of {qa.scales.size}",
                     f"{int(same_bits.sum())} of {da.size}", str(int(zeros.sum())),
                     str(int((~same_bits & ~zeros).sum()))])
    return _table(["distribution", "equal block scale codes", "bit-identical dequantized values",
                   "+0 vs −0", "other differences"], rows, ["---", "--:", "--:", "--:", "--:"])

#: Placeholder name -> renderer, as used in ``{{ name(args) }}`` in the Markdown pages.
PLACEHOLDERS = {
    "code_table": code_table,
    "code_grid": code_grid,
    "field_grid": field_grid,
    "format_summary": format_summary,
    "format_params": format_params,
    "rne_bins": rne_bins,
    "side_by_side": side_by_side,
    "format_lines": format_lines,
    "cli_help": cli_help,
    "profiles_table": profiles_table,
    "docstring": docstring,
    "scheme_summary": scheme_summary,
    "mx_rule_table": mx_rule_table,
    "mx_example": mx_example,
    "two_level_example": two_level_example,
    "nv_scale_order": nv_scale_order,
    "nv_reciprocal_vs_division": nv_reciprocal_vs_division,
    "nv_dequant_order_example": nv_dequant_order_example,
    "profile_disagreement": profile_disagreement,
    "four_over_six_example": four_over_six_example,
    "grid_equivalence": grid_equivalence,
    "ue4m3_halving": ue4m3_halving,
    "blocked_offsets": blocked_offsets,
    "blocked_layout_svg": blocked_layout_svg,
    "mx_special_blocks": mx_special_blocks,
    "profile_diff": profile_diff,
    "mx_elements": mx_elements,
    "uniform_equivalence": uniform_equivalence,
}
