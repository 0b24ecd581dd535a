"""The documentation's placeholders: ``{{ name(args) }}`` in a Markdown page -> a renderer.

The docs hook (``generate.py``) calls the renderers of :data:`PLACEHOLDERS`. They live by page
family: :mod:`format_tables` (the format pages, and the value and table helpers),
:mod:`scheme_tables` (the scheme summary, MX and two-level worked blocks), :mod:`nvfp4_tables`
(the NVFP4 chains), :mod:`layout_tables` (grids, layouts, special blocks, profile
differences); all are re-exported here.
"""

from __future__ import annotations

from format_tables import (  # noqa: F401 -- re-exported
    FORMAT_PAGES,
    _code_class,
    _code_list,
    _decimal,
    _escape,
    _exponent_grid,
    _hex,
    _layout,
    _power_form,
    _powers_of_two,
    _specials,
    _table,
    _wins_tie,
    cli_help,
    code_grid,
    code_table,
    docstring,
    field_grid,
    fmt_value,
    format_lines,
    format_params,
    format_summary,
    get_format,
    import_object,
    profiles_table,
    rne_bins,
    rne_intervals,
    side_by_side,
)
from scheme_tables import (  # noqa: F401 -- re-exported
    _values,
    SCHEME_PAGES,
    _compact,
    _f32,
    _metadata_bits,
    _mx_block,
    _num,
    _rest_note,
    _two_level_pre_cast,
    _variant,
    mx_example,
    mx_rule_table,
    scheme_summary,
    two_level_example,
)
from nvfp4_tables import (  # noqa: F401 -- re-exported
    _e2m1_midpoints,
    four_over_six_example,
    nv_dequant_order_example,
    nv_reciprocal_vs_division,
    nv_scale_order,
    profile_disagreement,
)
from layout_tables import (  # noqa: F401 -- re-exported
    blocked_layout_svg,
    blocked_offsets,
    grid_equivalence,
    mx_elements,
    mx_special_blocks,
    profile_diff,
    ue4m3_halving,
    uniform_equivalence,
)

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
