"""The documentation renderers (docs/hooks/tables.py) and the placeholder hook (generate.py).

The renderers print every value exactly, so these tests parse the tables back and compare
them with the descriptors code by code.
"""

from __future__ import annotations

import doctest
import math
import re
import sys
from fractions import Fraction
from pathlib import Path

import pytest

import fp4spec
from fp4spec import number_formats

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
sys.path.insert(0, str(DOCS / "hooks"))

import tables  # noqa: E402


# -- helpers ------------------------------------------------------------------------------------

def parse_value(text: str) -> float:
    """Inverse of tables.fmt_value."""
    text = text.strip()
    if text == "NaN":
        return math.nan
    if text in ("+Inf", "-Inf"):
        return math.copysign(math.inf, -1.0 if text[0] == "-" else 1.0)
    if text == "-0":
        return -0.0
    m = re.fullmatch(r"(-?)(?:([0-9.]+)·)?2\^(-?\d+)", text)
    if m:
        sign, mant, exp = m.groups()
        v = Fraction(mant or "1") * Fraction(2) ** int(exp)
        return float(-v if sign else v)
    return float(Fraction(text))


def same(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def table_rows(markdown: str) -> tuple[list[str], list[list[str]]]:
    """Header cells and data rows of a Markdown table."""
    lines = [ln for ln in markdown.strip().splitlines() if ln.startswith("|")]
    cells = [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in lines]
    return cells[0], cells[2:]


def unquote(cell: str) -> str:
    return cell.strip("`*")


# -- values ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("value, text", [
    (0.0, "0"), (-0.0, "-0"), (6.0, "6"), (-1.5, "-1.5"), (0.001953125, "0.001953125"),
    (2.0 ** -127, "2^-127"), (1.75 * 2.0 ** -17, "1.75·2^-17"), (2.0 ** 127, "2^127"),
    (math.nan, "NaN"), (math.inf, "+Inf"), (-math.inf, "-Inf"), (57344.0, "57344"),
])
def test_fmt_value_is_exact(value, text):
    assert tables.fmt_value(value) == text
    assert same(parse_value(text), value)


def test_fmt_value_accepts_fractions():
    assert tables.fmt_value(Fraction(3, 8)) == "0.375"
    assert tables.fmt_value(Fraction(-3, 2 ** 20)) == "-1.5·2^-19"


# -- code tables ----------------------------------------------------------------------------------

def test_e2m1_code_table_has_16_rows_and_0x7_is_6():
    header, rows = table_rows(tables.code_table("e2m1"))
    assert header == ["code", "sign", "exponent", "mantissa", "value", "class"]
    assert len(rows) == 16
    row7 = next(r for r in rows if unquote(r[0]) == "0x7")
    assert [unquote(c) for c in row7[1:5]] == ["0", "11", "1", "6"]
    assert "max" in row7[5]
    row8 = next(r for r in rows if unquote(r[0]) == "0x8")
    assert row8[4] == "-0"


@pytest.mark.parametrize("name", list(fp4spec.formats))
def test_code_table_lists_every_code_exactly(name):
    fmt = fp4spec.get_format(name)
    header, rows = table_rows(tables.code_table(name))
    assert len(rows) == 1 << fmt.bits
    value_col = header.index("value")
    for code, row in enumerate(rows):
        assert int(unquote(row[0]), 16) == code
        assert same(parse_value(row[value_col]), float(fmt.values[code])), (name, code, row)


@pytest.mark.parametrize("name", list(fp4spec.formats))
def test_code_grid_lists_every_code_exactly(name):
    fmt = fp4spec.get_format(name)
    text = tables.code_grid(name)
    header, rows = table_rows(text)
    n_cols = len(header) - 1
    assert n_cols * len(rows) == 1 << fmt.bits
    exponents = "Cell = *k*" in text
    for r, row in enumerate(rows):
        for c, cell in enumerate(row[1:]):
            value = math.nan if cell == "NaN" else 2.0 ** int(cell) if exponents else parse_value(cell)
            assert same(value, float(fmt.values[r * n_cols + c])), (name, r, c, cell)


@pytest.mark.parametrize("name", [n for n, f in fp4spec.formats.items()
                                  if f.kind == "float" and f.mantissa_bits > 0])
def test_field_grid_lists_every_non_negative_code_exactly(name):
    fmt = fp4spec.get_format(name)
    header, rows = table_rows(tables.field_grid(name))
    assert len(rows) == 1 << fmt.exponent_bits and len(header) == 2 + (1 << fmt.mantissa_bits)
    for e, row in enumerate(rows):
        for m, cell in enumerate(row[2:]):
            code = (e << fmt.mantissa_bits) | m
            assert same(parse_value(cell), float(fmt.values[code])), (name, code, cell)


def test_field_grid_of_e4m3_ends_with_448_and_nan():
    _, rows = table_rows(tables.field_grid("e4m3"))
    assert rows[-1][-2:] == ["448", "NaN"]
    assert rows[0][1] == "2^-6 (subnormal: 0.M)"


def test_e8m0_grid_is_16_by_16_exponents():
    text = tables.code_grid("e8m0")
    assert text.startswith("Cell = *k*: the code's value is 2^*k*.")
    header, rows = table_rows(text)
    assert header[1:] == [f"_{c:X}" for c in range(16)]
    assert len(rows) == 16
    assert rows[0][0] == "**0x0_**" and rows[0][1] == "-127"
    assert rows[7][16] == "0"  # 0x7F = 2^0
    assert rows[15][15] == "127" and rows[15][16] == "NaN"


def test_code_table_of_a_p3109_draft_format():
    header, rows = table_rows(tables.code_table("binary4p2sf"))
    assert len(rows) == 16
    assert rows[8][header.index("value")] == "NaN"
    assert rows[7][header.index("value")] == "3"


# -- summaries and parameters ---------------------------------------------------------------------

def test_format_summary_has_one_row_per_catalogued_format():
    header, rows = table_rows(tables.format_summary())
    assert [unquote(r[0]) for r in rows] == list(fp4spec.formats)
    e2m1 = rows[0]
    assert dict(zip(header, e2m1))["max"] == "6"
    assert dict(zip(header, e2m1))["min subnormal"] == "0.5"
    e8m0 = dict(zip(header, next(r for r in rows if unquote(r[0]) == "e8m0")))
    assert e8m0["max"] == "2^127" and e8m0["specials"] == "NaN 0xFF; no zero"


def test_format_summary_links_each_format_to_its_page():
    _, rows = table_rows(tables.format_summary(link_base="formats/"))
    assert rows[0][0] == "[`e2m1`](formats/e2m1.md)"


def test_format_params_e2m1():
    text = tables.format_params("e2m1")
    assert "| largest finite value | 6 (code `0x7`) |" in text
    assert "| smallest subnormal value | 0.5 |" in text
    assert "| zero | +0 and -0 |" in text
    assert "FloatFormat(name='e2m1'" in text


# -- the rounding-interval table (shrinkage bias) ------------------------------------------------

def mean_errors(name):
    header, rows = table_rows(tables.rne_bins(name))
    return {row[1]: row[header.index("mean error")] for row in rows}


def test_e2m1_shrinkage_bias_at_2_and_4():
    errors = mean_errors("e2m1")
    assert errors["2"] == "-0.125" and errors["4"] == "-0.25"
    assert all(errors[v] == "0" for v in ("0.5", "1", "1.5", "3", "6"))


def test_e2m1_rne_intervals():
    _, rows = table_rows(tables.rne_bins("e2m1"))
    intervals = {row[1]: row[2] for row in rows}
    assert intervals["2"] == "[1.75, 2.5]"
    assert intervals["3"] == "(2.5, 3.5)"
    assert intervals["6"].startswith("(5, 7)")


@pytest.mark.parametrize("name", ["e1m2", "e1m2_b1", "s1p2", "int4", "int4_sym"])
def test_uniform_grids_have_no_shrinkage_bias(name):
    errors = mean_errors(name)
    assert set(errors.values()) <= {"0", "–"}


def test_e4m3_top_interval_is_closed_because_448_has_an_even_code():
    _, rows = table_rows(tables.rne_bins("e4m3"))
    assert rows[-1][1] == "448" and rows[-1][2].startswith("[432, 464]")


# -- facts the pages state about the grids -----------------------------------------------------

def test_e1m2_b1_and_s1p2_are_the_same_codes():
    a, b = fp4spec.get_format("e1m2_b1").values, fp4spec.get_format("s1p2").values
    assert all(same(x, y) for x, y in zip(a, b))


def test_uniform_grids_are_one_grid_at_three_scales():
    sym = {v for v, _ in fp4spec.get_format("int4_sym").grid}
    assert sym == {2 * v for v, _ in fp4spec.get_format("e1m2").grid}
    assert sym == {4 * v for v, _ in fp4spec.get_format("e1m2_b1").grid}
    assert sym == {4 * v for v, _ in fp4spec.get_format("s1p2").grid}


def test_binary4p2sf_is_e2m1_halved_except_0x8():
    p, e = tables.get_format("binary4p2sf").values, fp4spec.get_format("e2m1").values
    for code in range(16):
        if code == 8:
            assert math.isnan(p[code]) and e[code] == 0
        elif code:
            assert p[code] == e[code] / 2


def test_side_by_side_rejects_mixed_widths():
    with pytest.raises(ValueError, match="different widths"):
        tables.side_by_side("e2m1", "e4m3")


# -- profiles and the command line ----------------------------------------------------------------

def test_profiles_table_has_every_profile_and_marks_disagreement():
    from fp4spec import profiles

    text = tables.profiles_table()
    for p in profiles.list_profiles():
        assert f"| `{p.name}` |" in text
    for key in profiles.differing_policies():
        assert f"| `{key}` ≠ |" in text


def test_cli_help_shows_the_usage_line():
    assert "usage: fp4spec" in tables.cli_help()
    assert "usage: fp4spec table" in tables.cli_help("table")


# -- docstrings -----------------------------------------------------------------------------------

def test_docstring_is_quoted_verbatim():
    text = tables.docstring("fp4spec.number_formats")
    assert text.startswith('!!! quote "Docstring of `fp4spec.number_formats`')
    body = "\n".join(line[4:] for line in text.splitlines()[2:])
    assert "3. Otherwise the value is ``(-1)^S * 2^(E-b) * (1 + M/2^m)``." in body
    assert ":class:" not in body  # Sphinx roles become code spans


def test_docstring_of_an_attribute():
    assert "Look up a format by name" in tables.docstring("fp4spec.number_formats.get_format")


@pytest.mark.parametrize("path", ["fp4spec.no_such_module.f", "fp4spec.number_formats.no_such_name",
                                  "no_such_package"])
def test_docstring_of_a_missing_object_raises(path):
    with pytest.raises(ImportError, match="cannot import"):
        tables.docstring(path)


# -- the hook ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def generate():
    pytest.importorskip("mkdocs", reason="mkdocs is not installed")
    import generate as module
    return module


def test_hook_expands_placeholders(generate):
    out = generate.expand('# Page\n\n{{ code_table("e2m1") }}\n\nText {{ format_params( "int4" ) }}\n')
    assert "| `0x7` | `0` | `11` | `1` | 6 |" in out
    assert "Text | parameter | value |" in out and "| largest finite value | 7 (code `0x7`) |" in out
    assert "{{" not in out


def test_hook_keeps_indentation_inside_admonitions(generate):
    out = generate.expand('??? note "All codes"\n\n    {{ code_table("e2m1") }}\n')
    lines = out.splitlines()[2:]
    assert len(lines) == 18 and all(line.startswith("    |") for line in lines)


def test_hook_accepts_keyword_arguments(generate):
    assert "[`e2m1`](x/e2m1.md)" in generate.expand('{{ format_summary(link_base="x/") }}')


def test_hook_leaves_code_alone(generate):
    text = 'Write `{{ code_table("e2m1") }}`.\n\n```md\n{{ code_table("nope") }}\n```\n'
    assert generate.expand(text) == text


@pytest.mark.parametrize("text, message", [
    ('{{ no_such_renderer("e2m1") }}', "unknown placeholder 'no_such_renderer'"),
    ('{{ code_table("no_such_format") }}', "unknown format 'no_such_format'"),
    ('{{ code_table(e2m1) }}', "cannot expand"),
    ('{{ docstring("fp4spec.reference_that_does_not_exist.f") }}', "cannot import"),
    ('{{ code_table("e2m1") }', "malformed placeholder"),
])
def test_hook_fails_loudly(generate, text, message):
    from mkdocs.exceptions import PluginError

    with pytest.raises(PluginError, match=re.escape(message)) as info:
        generate.expand(text, "page.md")
    assert "page.md" in str(info.value)


# -- the pages ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(fp4spec.formats))
def test_every_catalogued_format_has_a_page_with_its_tables(name):
    assert name in tables.FORMAT_PAGES, f"add a page for {name!r} and list it in FORMAT_PAGES"
    page = (DOCS / "formats" / tables.FORMAT_PAGES[name]).read_text()
    assert f'format_params("{name}")' in page
    assert f'code_table("{name}")' in page


def test_every_placeholder_in_the_pages_expands(generate):
    for page in sorted(DOCS.rglob("*.md")):
        generate.expand(page.read_text(), str(page.relative_to(DOCS)))


def test_home_page_quick_start_matches_the_readme():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = [line.strip() for block in re.findall(r"```bash\n(.*?)```", section, re.DOTALL)
                for line in block.splitlines() if line.strip()]
    assert commands, "README.md has no bash commands under '## Quick start'"
    home = (DOCS / "index.md").read_text()
    for command in commands:
        assert command in home, f"README quick-start command missing from docs/index.md: {command}"


def pycon_examples(page: Path) -> str:
    blocks = re.findall(r"^```pycon\n(.*?)^```", page.read_text(), re.MULTILINE | re.DOTALL)
    return "\n".join(blocks)


@pytest.mark.parametrize("page", sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")
                                        if "```pycon" in p.read_text()))
def test_examples_in_the_pages_run(page):
    saved = dict(number_formats._FORMATS)
    try:
        test = doctest.DocTestParser().get_doctest(pycon_examples(DOCS / page), {}, page, page, 0)
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.IGNORE_EXCEPTION_DETAIL)
        runner.run(test)
        assert runner.failures == 0, f"{runner.failures} example(s) in docs/{page} failed (see output)"
    finally:
        number_formats._FORMATS.clear()
        number_formats._FORMATS.update(saved)


# -- block-scaling schemes (docs/schemes/) ------------------------------------------------------

def test_scheme_summary_has_one_row_per_catalogued_scheme():
    header, rows = table_rows(tables.scheme_summary())
    assert [re.search(r"`(\w+)`", r[0]).group(1) for r in rows] == list(fp4spec.schemes)
    by_name = {re.search(r"`(\w+)`", r[0]).group(1): dict(zip(header, r)) for r in rows}
    assert by_name["mxfp4"]["bits / element"] == "4.25"
    assert by_name["mxfp8_e4m3"]["bits / element"] == "8.25"
    assert by_name["nvfp4"]["bits / element"] == "4.5"
    assert by_name["hif4"]["bits / element"] == "4.5"  # 4 + (8 + 8 + 16) / 64
    assert "+ 24 bits" in by_name["hif4"]["scales"]
    assert "FP32 tensor scale" in by_name["nvfp4"]["scales"] and "FP32" not in by_name["mxfp4"]["scales"]
    assert by_name["nvfp4_2d"]["block"] == "16 × 16 tile"
    assert rows[0][0] == "[`mxfp4`](mx.md)"


def test_scheme_summary_filters_by_name():
    _, rows = table_rows(tables.scheme_summary(names=["ufp4", "nvint4"]))
    assert len(rows) == 2
    with pytest.raises(ValueError, match="unknown scheme"):
        tables.scheme_summary(names=["nvfp5"])


@pytest.mark.parametrize("name", list(fp4spec.schemes))
def test_every_catalogued_scheme_has_a_page(name):
    assert name in tables.SCHEME_PAGES, f"add {name!r} to a scheme page and to SCHEME_PAGES"
    page = DOCS / "schemes" / tables.SCHEME_PAGES[name]
    assert page.exists() and name in page.read_text()


def test_mx_rule_table_reproduces_the_worked_e2m1_table():
    header, rows = table_rows(tables.mx_rule_table([1.0, 1.25, 1.5, 1.75, 3.0, 4.0, 6.0, 6.5, 7.0]))
    assert header == ["amax", "`floor`", "`ceil`", "`even`", "`rceil`"]
    cells = {row[0]: dict(zip(["floor", "ceil", "even", "rceil"], row[1:])) for row in rows}
    assert cells["1.75"] == {"floor": "-2 → 7 → 6 (clamped)", "ceil": "-1 → 3.5 → 4",
                             "even": "-1 → 3.5 → 4", "rceil": "-1 → 3.5 → 4"}
    assert cells["1.25"]["ceil"] == "-1 → 2.5 → 2"
    assert cells["6.5"]["rceil"] == "1 → 3.25 → 3" and cells["6.5"]["even"] == "0 → 6.5 → 6 (clamped)"
    assert cells["7"]["floor"] == "0 → 7 → 6 (clamped)" and cells["7"]["even"] == "1 → 3.5 → 4"
    assert all(c == "-2 → 4 → 4" for c in cells["1"].values())


def test_mx_rule_table_for_e4m3_shows_the_rceil_ceil_difference_at_150():
    _, rows = table_rows(tables.mx_rule_table([150.0], scheme="mxfp8_e4m3"))
    assert rows[0][2].startswith("0 →") and rows[0][4].startswith("-1 →")  # ceil 0x7F, rceil 0x7E


@pytest.mark.parametrize("kwargs, message", [
    ({"amaxes": [0.1]}, "not a float32 value"),
    ({"amaxes": [1.0], "scheme": "nvfp4"}, "not an MX scheme"),
])
def test_mx_rule_table_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        tables.mx_rule_table(**kwargs)


def test_mx_example_floor_and_rceil():
    text = tables.mx_example([3.0, -7.0, 0.3], variants=["mxfp4", {"scheme": "mxfp4", "scale_rule": "rceil"}])
    _, summary = table_rows(text.split("\n\n")[0])
    assert dict((r[0], r[1:]) for r in summary)["scale code (E8M0)"] == ["`0x7F`", "`0x80`"]
    assert "| 1 | -7 | -7 | `0xF`\u00a0=\u00a0-6 | -6 | -3.5 | `0xE`\u00a0=\u00a0-4 | -8 |" in text
    assert text.endswith("Elements 3 to 31 are 0: code `0x0`, dequantized 0.")


def test_mx_example_of_a_nan_block_says_the_rest_is_nan():
    text = tables.mx_example(["nan", 1.0])
    assert "`0xFF`" in text and text.endswith("dequantized NaN.")


def test_two_level_example_te_and_torchao_disagree_on_the_documented_block():
    text = tables.two_level_example([263.2171], global_amax=775.79785,
                                    variants=["nvfp4", {"scheme": "nvfp4", "profile": "torchao"}])
    _, summary = table_rows(text.split("\n\n")[0])
    rows = {r[0]: r[1:] for r in summary}
    assert rows["block scale code (RNE)"] == ["`0x72` = 160", "`0x71` = 144"]
    assert "= 152 (`0x43180000`)" in rows["block scale before the cast"][0]
    assert "= 151.99998 (`0x4317FFFF`)" in rows["block scale before the cast"][1]
    assert "second block" in text


def test_two_level_example_zero_tensor():
    text = tables.two_level_example([0.0], variants=["nvfp4", {"scheme": "nvfp4", "profile": "torchao"}])
    assert "S_enc = 1 (g is 0 or not finite)" in text
    assert "`0x7F` = NaN" in text and text.endswith("dequantized NaN.")


def test_two_level_example_refuses_tiles_and_4over6():
    for variant in ["nvfp4_2d", {"scheme": "nvfp4", "scale_rule": "4over6"}, "mxfp4"]:
        with pytest.raises(ValueError, match="1D two-level"):
            tables.two_level_example([1.0], variants=[variant])


def test_nv_scale_order_one_rounding_vs_two():
    _, rows = table_rows(tables.nv_scale_order(263.2171, 775.79785))
    assert [r[3] for r in rows] == ["`0x72` = 160", "`0x71` = 144", "`0x71` = 144"]


def test_nv_reciprocal_vs_division_finds_differences():
    text = tables.nv_reciprocal_vs_division()
    total, differ = map(int, re.search(r"= (\d+) inputs\), the two forms give a different E2M1 code for "
                                       r"(\d+) inputs", text).groups())
    assert total == 4 * 126 * 7 * 2 * 3 and 0 < differ < total
    assert "For example" in text


def test_nv_dequant_order_example_shows_two_different_results():
    text = tables.nv_dequant_order_example()
    a, b = re.findall(r"= ([0-9.e+-]+) \(`0x[0-9A-F]{8}`\)\.?", text)[-2:]
    assert a != b
    with pytest.raises(ValueError, match="agree"):
        tables.nv_dequant_order_example(element_code=0x2)  # q = 1: both orders round once


def test_profile_disagreement_has_one_row_per_distribution():
    from fp4spec.analysis import distributions

    _, rows = table_rows(tables.profile_disagreement(shape=(32, 64)))
    assert [unquote(r[0]) for r in rows] == list(distributions.DISTRIBUTIONS)


def test_four_over_six_examples_choose_each_candidate():
    four = tables.four_over_six_example([5.0, 3.75, 2.5, 1.25, -0.6], global_amax=10.0)
    six = tables.four_over_six_example([5.0, 2.9, -1.2, 0.7, 4.4, 1.6], global_amax=10.0)
    chosen = lambda text: next(r[0] for r in table_rows(text.split("\n\n", 1)[1])[1] if "chosen" in r[-1])  # noqa: E731
    assert chosen(four) == "map to 4" and chosen(six) == "map to 6"


def test_grid_equivalence_fails_on_a_wrong_factor():
    _, rows = table_rows(tables.grid_equivalence())
    assert len({r[3] for r in rows}) == 1
    with pytest.raises(ValueError, match="differ"):
        tables.grid_equivalence([("int4_sym", 1), ("e1m2", 4)])


def test_ue4m3_halving_same_mantissa_unless_subnormal_or_saturated():
    _, rows = table_rows(tables.ue4m3_halving([1.0, 1000.0, 0.01, 3000.0]))
    assert [r[-1] for r in rows] == ["yes", "yes", "**no**", "**no**"]


def test_blocked_offsets_match_the_worked_example():
    _, rows = table_rows(tables.blocked_offsets())
    offsets = {r[0]: int(r[4]) for r in rows}
    assert offsets["(130, 5)"] == 2081 and offsets["(32, 0)"] == 4 and offsets["(127, 3)"] == 511


def test_blocked_layout_svg_draws_every_byte_of_a_tile_twice():
    svg = tables.blocked_layout_svg()
    assert svg.count('<rect x=') == 2 * 512 + 2  # both views, plus the two highlight frames
    assert "S[33, 2] → offset 22 = 1 × 16 + 6" in svg
    assert "\n\n" not in svg.split("<svg", 1)[1].split("</svg>")[0]  # no blank line inside raw HTML


def test_mx_special_blocks_nan_inf_and_zero():
    text = tables.mx_special_blocks([["zero", [0.0], "floor"], ["NaN", ["nan", 1.0], "floor"],
                                     ["Inf", ["inf", 1.0], "floor"]])
    _, rows = table_rows(text)
    assert [r[3] for r in rows] == ["`0x00`", "`0xFF`", "`0xFF`"]  # ocp
    assert [r[6] for r in rows] == ["`0x00`", "`0xFF`", "`0xFD`"]  # torchao: Inf read as 2^128


def test_profile_diff_marks_exactly_the_differing_policies():
    from fp4spec import profiles

    _, rows = table_rows(tables.profile_diff(["ocp", "torchao"], "mx_"))
    marked = {re.search(r"`(\w+)`", r[0]).group(1) for r in rows if "≠" in r[0]}
    ocp, tao = profiles.get_profile("ocp").policies, profiles.get_profile("torchao").policies
    assert marked == {k for k in ocp if k.startswith("mx_") and ocp[k] != tao.get(k)}


def test_mx_elements_floor_clamping():
    _, rows = table_rows(tables.mx_elements())
    e2m1 = next(r for r in rows if r[1] == "`e2m1`")
    assert e2m1[4:] == ["[4, 8)", "m > 1.5", "25 %"]


def test_uniform_equivalence_ufp4_is_nvint4_up_to_the_sign_of_zero():
    _, rows = table_rows(tables.uniform_equivalence(shape=(64, 128)))
    for row in rows:
        n, total = map(int, row[1].split(" of "))
        assert n == total
        assert row[4] == "0"


def test_new_placeholders_are_registered():
    for name in ["scheme_summary", "mx_rule_table", "mx_example", "two_level_example", "nv_scale_order",
                 "nv_reciprocal_vs_division", "nv_dequant_order_example", "profile_disagreement",
                 "four_over_six_example", "grid_equivalence", "ue4m3_halving", "blocked_offsets",
                 "blocked_layout_svg", "mx_special_blocks", "profile_diff", "mx_elements",
                 "uniform_equivalence"]:
        assert tables.PLACEHOLDERS[name] is getattr(tables, name)


# -- facts the scheme pages state in prose --------------------------------------------------------

def test_te_tiny_block_threshold_is_2_to_minus_10_over_448():
    import numpy as np

    for ratio, scale, code in [(2.1797e-6, 0x00, 0x7), (2.1799e-6, 0x01, 0x5)]:
        x = np.zeros(32, np.float32)
        x[0], x[16] = 1.0, ratio
        q = fp4spec.quantize(x, "nvfp4")
        assert int(q.scales[1]) == scale and int(q.codes[16]) == code
        assert (float(fp4spec.dequantize(q)[16]) == 0.0) == (scale == 0)  # codes +-6 with a zero scale decode to 0
    assert abs(2.0 ** -10 / 448 - 2.18e-6) < 1e-8


def test_mx_rceil_descale_policy_changes_no_scale_code():
    """mul_reciprocal (ocp) and divide (torchao) differ only where d is an FP32 subnormal, and
    there e is clamped to -127 (mx.md; checked exhaustively once, sampled here)."""
    import numpy as np

    from fp4spec.emulator import scaling

    rng = np.random.default_rng(0)
    bits = np.concatenate([rng.integers(0, 0x7F800000, 1 << 20, dtype=np.uint32),
                           np.arange(0, 1 << 20, dtype=np.uint32)])  # random + every small subnormal
    amax = bits.view(np.float32)
    for name in ["mxfp4", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp8_e4m3", "mxfp8_e5m2"]:
        a = fp4spec.get_scheme(name, scale_rule="rceil")
        b = fp4spec.get_scheme(a, profile="torchao")
        assert a.policies["mx_rceil_descale"] != b.policies["mx_rceil_descale"]
        assert np.array_equal(scaling.mx_exponents(amax, a)[0], scaling.mx_exponents(amax, b)[0])


def test_torchao_mx_blocks_with_scale_code_0_come_back_halved():
    import numpy as np

    x = np.zeros(32, np.float32)
    x[0] = 1.5 * 2.0 ** -125
    ocp, tao = (fp4spec.quantize(x, "mxfp4", profile=p) for p in ("ocp", "torchao"))
    assert int(ocp.scales[0]) == int(tao.scales[0]) == 0
    assert float(fp4spec.dequantize(ocp)[0]) == x[0] and float(fp4spec.dequantize(tao)[0]) == x[0] / 2
    rceil = fp4spec.quantize(x, "mxfp4", profile="torchao", scale_rule="rceil")
    assert float(fp4spec.dequantize(rceil)[0]) == 0.0


# -- docs/gemm.md: the accumulator-model catalogue --------------------------------------------------

def _gemm_catalogue_rows() -> dict[str, dict[str, str]]:
    text = (DOCS / "gemm.md").read_text()
    section = text.split("## The catalogue", 1)[1].split("\n\n", 2)[1]
    header, rows = table_rows(section)
    return {unquote(r[0]): dict(zip(header, r)) for r in rows}


def test_gemm_catalogue_table_matches_the_descriptors():
    """One row per catalogued model; the policy columns are the model's ``zero_sign`` and
    ``ue4m3_sign_bit``."""
    rows = _gemm_catalogue_rows()
    assert list(rows) == list(fp4spec.accumulators)
    for name, row in rows.items():
        model = fp4spec.get_accumulator(name)
        assert row["`zero_sign`"].split()[0] == model.zero_sign, name
        assert row["`ue4m3_sign_bit`"].split()[0] == model.ue4m3_sign_bit, name
        assert row["NaN bits"] == f"`0x{model.nan_bits:08X}`", name
