"""Vendor profiles: each vendor's implementation-defined choices, as data.

A *profile* names one implementation (OCP MX v1.0, TransformerEngine, torchao, ml_dtypes,
the HiFloat4 golden model) and records, for each *policy* it has an opinion on, which choice
it makes. The profile modules (:mod:`.ocp_mx`, :mod:`.transformer_engine`, :mod:`.torchao`,
:mod:`.ml_dtypes`, :mod:`.hif4`, :mod:`.fouroversix`) hold only that data; the block-scaling algorithms
(:mod:`fp4spec.scaling`, :mod:`fp4spec.emulator.scaling`) read the policies of the
scheme's profile and contain every branch. A policy a profile does not set is shown as
``-`` (the vendor has no such operation).

The policies in :data:`ALGORITHM_POLICIES` are read by the algorithms; the others record
a vendor's behaviour for comparison (its default scale rule, what its element casts do, the
consequences of its operation order) and are pinned by tests rather than switched on.

Use :func:`list_profiles` for the profiles, :func:`get_profile` for one, and
:func:`describe_profiles` for a table of every policy across every profile, rows where the
profiles disagree marked with ``*``.
"""

from __future__ import annotations

from .policy import ALGORITHM_POLICIES, POLICIES, Profile

def _load() -> dict[str, Profile]:
    from . import fouroversix, hif4, ml_dtypes, ocp_mx, torchao, transformer_engine

    profiles = [ocp_mx.PROFILE, transformer_engine.PROFILE, torchao.PROFILE, ml_dtypes.PROFILE, hif4.PROFILE,
                fouroversix.PROFILE]
    return {p.name: p for p in profiles}


_PROFILES: dict[str, Profile] | None = None


def _profiles() -> dict[str, Profile]:
    global _PROFILES
    if _PROFILES is None:
        _PROFILES = _load()
    return _PROFILES


def list_profiles() -> list[Profile]:
    """Every profile, in a fixed order (OCP MX, TransformerEngine, torchao, ml_dtypes, HiF4, fouroversix)."""
    return list(_profiles().values())


def get_profile(name: "str | Profile") -> Profile:
    """Look up a profile by name (a :class:`Profile` passes through)."""
    if isinstance(name, Profile):
        return name
    profiles = _profiles()
    try:
        return profiles[name]
    except (KeyError, TypeError):
        raise ValueError(f"profile: {name!r} is not one of {', '.join(map(repr, profiles))}") from None


def differing_policies() -> list[str]:
    """Policies set by at least two profiles with different choices."""
    out = []
    for key in POLICIES:
        values = {p.policies[key] for p in list_profiles() if key in p.policies}
        if len(values) > 1:
            out.append(key)
    return out


def describe_profiles() -> str:
    """A markdown table: one row per policy, one column per profile; ``*`` marks disagreement."""
    profiles = list_profiles()
    differ = set(differing_policies())
    header = "| policy | " + " | ".join(p.name for p in profiles) + " |"
    rule = "|---|" + "---|" * len(profiles)
    lines = [header, rule]
    for key in POLICIES:
        if not any(key in p.policies for p in profiles):
            continue
        cells = [p.policies.get(key, "-") for p in profiles]
        mark = " *" if key in differ else ""
        lines.append(f"| {key}{mark} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("* = the profiles that set this policy disagree.")
    lines.append("")
    for p in profiles:
        lines.append(f"- {p.name}: {p.title} ({p.source})")
    return "\n".join(lines)


__all__ = ["ALGORITHM_POLICIES", "POLICIES", "Profile", "describe_profiles", "differing_policies", "get_profile", "list_profiles"]
