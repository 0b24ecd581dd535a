"""Markdown renderers of the format pages (docs/formats/), computed from the format descriptors.

Every function returns Markdown text and reads everything it shows from ``fp4spec``. Values
are printed exactly: a decimal when it is short, otherwise ``m·2^k`` with ``m`` in [1, 2).
The table helpers here (:func:`fmt_value`, :func:`_table`...) serve the scheme pages too
(:mod:`scheme_tables`); :mod:`tables` lists every placeholder.
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
