"""Markdown renderers of the NVFP4 page's worked chains: the scale operation order, reciprocal vs
division, the dequantize order, profile disagreements, 4over6."""

from __future__ import annotations


import fp4spec
from format_tables import _hex, _table, fmt_value
from scheme_tables import _f32, _values


def nv_scale_order(block_amax, global_amax, max_elem: float = 6.0, scale_bound: float = 448.0) -> str:
    """The NVFP4 block scale of one block computed in three fp32 operation orders, with the
    UE4M3 code each gives: TE (one rounding after the folded reciprocal), the same quotient in
    two roundings, and torchao's chain. Rows 1 and 3 are checked against ``fp4spec.quantize``."""
    import numpy as np

    from fp4spec.elements import encode_scalar

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
    from fp4spec.emulator.elements import encode

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
