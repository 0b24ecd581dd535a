"""Scheme specs: a block-scaling scheme named in one string.

A *scheme spec* is a catalogue name optionally followed by field overrides,
``name[:field=value,...]``: ``"nvfp4"``, ``"mxfp4:scale_rule=rceil"``,
``"nvfp4:profile=torchao,scale_rule=4over6"``, ``"nvfp4_2d:block_shape=16x32"``. The fields
are those of :func:`fp4spec.get_scheme` (:data:`fp4spec.block_schemes.OVERRIDES`).

This is the one grammar of them (the parser, :func:`parse_scheme_spec`, lives beside
:func:`fp4spec.get_scheme` in :mod:`fp4spec.block_schemes`, which reads specs too): :func:`fp4spec.get_scheme` and :func:`fp4spec.quantize`
accept a spec wherever they accept a name, the command line (``fp4spec conform --scheme``,
``fp4spec vectors``) and the backend interface resolve them here, and :func:`scheme_spec`
writes the canonical spec of a scheme (``resolve_scheme(scheme_spec(s)) == s``).

1. Split the text at the first ``:`` into the name and the overrides.
2. Split the overrides at ``,``; each is ``field=value`` with ``field`` one of the
   overridable fields.
3. Read the value by field: ``block_shape`` as ``k`` or ``rxk`` (integers), ``block_size`` an
   integer, ``element_max`` and ``scale_max`` numbers, the rest as text.
4. :func:`fp4spec.get_scheme` applies them to the catalogue entry (and validates them).
"""

from __future__ import annotations

from .block_schemes import Scheme, get_scheme, parse_scheme_spec, schemes as _catalogue

#: Fields :func:`scheme_spec` writes, in this order, when they differ from the catalogue entry.
SPEC_FIELDS = ("block_shape", "element", "scale", "scale_rule", "profile", "element_max", "scale_max",
               "error_mode")


def resolve_scheme(spec: "str | Scheme") -> Scheme:
    """A :class:`~fp4spec.block_schemes.Scheme` from a spec (a Scheme passes through);
    ValueError naming the spec and the bad part."""
    if isinstance(spec, Scheme):
        return spec
    name, overrides = parse_scheme_spec(spec)
    try:
        return get_scheme(name, **overrides)
    except ValueError as exc:
        raise ValueError(f"scheme: {spec!r}: {exc}") from None


def scheme_spec(scheme: "str | Scheme") -> str:
    """The canonical spec of a scheme: its name, plus the fields that differ from the
    catalogue entry of that name (``"mxfp4:scale_rule=rceil"``); :func:`resolve_scheme` inverts it."""
    sch = resolve_scheme(scheme)
    base = _catalogue.get(sch.name)
    if base is None:
        raise ValueError(f"scheme: {sch.name!r} is not a catalogue name; give the scheme a catalogue name "
                         f"and express the differences as overrides")
    parts = []
    for field in SPEC_FIELDS:
        value, ref = getattr(sch, field), getattr(base, field)
        if value == ref:
            continue
        if field == "block_shape":
            text = "x".join(map(str, value))
        elif field in ("element", "scale"):
            text = value.name
        elif isinstance(value, float):
            text = f"{value:g}" if float(f"{value:g}") == value else repr(value)  # reads back as the same float
        else:
            text = str(value)
        parts.append(f"{field}={text}")
    return sch.name + (":" + ",".join(parts) if parts else "")


__all__ = ["SPEC_FIELDS", "parse_scheme_spec", "resolve_scheme", "scheme_spec"]
