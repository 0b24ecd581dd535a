"""Markdown renderers of grid equivalences, the UE4M3 halving, the cuBLAS blocked layout, MX
special blocks and profile differences (the schemes, divergences and layout pages)."""

from __future__ import annotations

from fractions import Fraction

import fp4spec
from format_tables import _escape, _hex, _table, fmt_value
from scheme_tables import _compact, _f32, _mx_block, _num, _values


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

    from fp4spec.elements import encode_scalar

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
