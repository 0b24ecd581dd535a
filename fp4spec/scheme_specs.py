"""Scheme specs: a block-scaling scheme named in one string.

A *scheme spec* is a catalogue name optionally followed by field overrides,
``name[:field=value,...]``: ``"nvfp4"``, ``"mxfp4:scale_rule=rceil"``,
``"nvfp4:profile=torchao,scale_rule=4over6"``, ``"nvfp4_2d:block_shape=16x32"``. The fields
are those of :func:`fp4spec.get_scheme` (:data:`fp4spec.block_schemes.OVERRIDES`).

This is the one parser of them: :func:`fp4spec.get_scheme` and :func:`fp4spec.quantize`
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

from .block_schemes import OVERRIDES, Scheme, get_scheme, schemes as _catalogue

#: Fields :func:`scheme_spec` writes, in this order, when they differ from the catalogue entry.
SPEC_FIELDS = ("block_shape", "element", "scale", "scale_rule", "profile", "element_max", "scale_max",
               "error_mode")


def _value(field: str, text: str):
    """Step 3: the value of one override."""
    if field == "block_shape":
        try:
            return tuple(int(p) for p in text.lower().replace("*", "x").split("x"))
        except ValueError:
            raise ValueError(f"scheme: block_shape={text!r} is not 'k' or 'rxk' (e.g. 16x16)") from None
    if field == "block_size":
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"scheme: block_size={text!r} is not an integer") from None
    if field in ("element_max", "scale_max"):
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"scheme: {field}={text!r} is not a number") from None
    return text


def parse_scheme_spec(spec: str) -> tuple[str, dict]:
    """Steps 1-3: ``(name, overrides)`` of a spec string (ValueError naming the bad part)."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"scheme: {spec!r} is not a scheme spec; use a name ({', '.join(_catalogue)}) "
                         f"optionally followed by ':field=value,...'")
    name, _, rest = spec.strip().partition(":")
    overrides = {}
    for part in filter(None, (p.strip() for p in rest.split(","))):
        field, eq, value = part.partition("=")
        field = field.strip()
        if not eq or field not in OVERRIDES:
            raise ValueError(f"scheme: {part!r} in {spec!r} is not field=value with field one of "
                             f"{', '.join(OVERRIDES)}")
        if field in overrides:
            raise ValueError(f"scheme: {field!r} is given twice in {spec!r}")
        overrides[field] = _value(field, value.strip())
    return name.strip(), overrides


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
