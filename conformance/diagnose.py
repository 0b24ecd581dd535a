"""Name the mistake: re-run the spec with each known mistake and say which one the backend matches.

When a row fails, :func:`explain` replays its counterexample (the whole input tensor and its
random bits, from the counterexample's record), asks the backend again, and compares its
answer with the reference run with one known mistake at a time -- the same bit-exact
comparison as everywhere else. The first mistake (or two) whose result equals the
backend's on every field becomes the counterexample's ``matches`` line::

    matches: ceil scale rule (floor expected)

The mistakes (:data:`MISTAKES`, most specific first):

=====================  ============================================================================
mistake                the spec re-run with
=====================  ============================================================================
ties_away              ``rounding="rna"`` where ``rne`` is claimed
sr_ignores_bits        ``rounding="rtz"`` where ``sr`` is claimed (the random bits ignored)
float_log2             the MX floor/rceil exponent from a float32 ``log2`` (for torchao's RCEIL: its
                       known eager-mode bug)
torchao_zero_scale     torchao's division by a zero per-tensor scale (its known NVFP4 bug)
divide                 two-level elements divided by ``fp32(s * S_dec)`` instead of multiplied by
                       ``fp32(1 / fp32(s * S_dec))``
4over6 decode scale   4over6 errors through the global decode scale (FlashInfer before #3448)
if4                    IF4 with one mistake (:mod:`~fp4spec.conformance.if4_mistakes`): ties taking
                       INT4, the INT4 candidate by division, the errors in element order, the flag
                       inverted; fouroversix's known departures
scale_rule             every other MX scale rule (floor, ceil, rceil, even) / two-level rule / IF4 rule
policy                 one policy of the profile changed to another profile's choice: the TE vs
                       torchao NVFP4 scale chain, the E4M3 scale floor, the MX NaN-block policy,
                       torchao's element scaling, the sign of zero ...
profile                the whole of another profile
=====================  ============================================================================

The packing, scale-layout and RHT properties name their own mistakes (nibbles swapped,
scales not in the cuBLAS layout, the RHT on the wrong axis ...), where they see them.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Callable

import numpy as np

from fp4spec.block_schemes import SCALE_RULES, get_scheme
from fp4spec.emulator.elements import encode
from fp4spec.profiles import ALGORITHM_POLICIES, POLICIES, Profile, get_profile, list_profiles
from fp4spec.scaling import element_nan_policy

from . import chain, fouroversix_model, if4_mistakes, selection
from .compare import compare_quantized

F32 = np.float32

#: Why a policy matters, in words (a policy not listed is named by its key).
POLICY_TITLES = {
    "nv_scale_chain": "NVFP4 scale chain",
    "nv_block_scale_floor": "E4M3 scale floor",
    "mx_nonfinite_block": "NaN-block policy",
    "mx_element_scaling": "MX element scaling",
    "mx_rceil_descale": "RCEIL descale",
    "nv_negative_zero": "sign of zero",
    "nv_4over6": "4over6 candidate selection",
}

#: Field names of a counterexample a replay of ``quantize`` can explain.
QUANTIZE_FIELDS = ("codes", "scales", "global_scale", "e1_8", "e1_16")


@dataclasses.dataclass(frozen=True)
class Variant:
    """One mistaken reference: ``run(env, t, x, rbits)`` gives its QuantizedTensor (or None
    where the mistake makes no difference), ``scheme`` the scheme its result is judged under."""

    text: str
    run: Callable
    scheme: object = None
    family: str = ""  # "policy", "profile": a whole profile is not named where one of its policies matched


def _ref(env, scheme, rounding, x, rbits, sr_bits):
    return env.reference.quantize(x, scheme, rounding=rounding, rbits=rbits if rounding == "sr" else None,
                                  sr_bits=sr_bits)


def _rerun(scheme=None, rounding=None):
    def run(env, t, x, rbits):
        return _ref(env, scheme or t.scheme, rounding or t.rounding, x, rbits, t.sr_bits)
    return run


def with_policy(scheme, policy: str, value: str):
    """``scheme`` under its own profile with one policy changed (an unregistered Profile)."""
    prof = get_profile(scheme.profile)
    variant = Profile(name=prof.name, title=f"{prof.title}, {policy}={value}", source=prof.source,
                      structures=prof.structures, policies={**prof.policies, policy: value})
    return dataclasses.replace(scheme, profile=variant)


# -- the mistakes --------------------------------------------------------------------------------

def _ties_away(t):
    if t.rounding == "rne" and t.scheme.structure != "hif4":
        yield Variant("ties away from zero (ties to even expected)", _rerun(rounding="rna"))


def _sr_ignores_bits(t):
    if t.rounding == "sr":
        yield Variant("stochastic rounding that ignores its random bits (rounds toward zero)", _rerun(rounding="rtz"))


def _scale_rules(t):
    sch = t.scheme
    for rule in SCALE_RULES[sch.structure]:
        if rule != sch.scale_rule:
            try:
                alt = get_scheme(sch, scale_rule=rule)
            except ValueError:
                continue
            yield Variant(f"{rule} scale rule ({sch.scale_rule} expected)", _rerun(alt), alt)


def _mx_with_scale_codes(x, sch, codes, rounding, rbits, sr_bits):
    """MX quantization of x with the given scale codes (the spec's element step)."""
    k = sch.block_size
    m = np.repeat(chain.mx_multipliers(codes, sch), k, axis=-1)
    with np.errstate(all="ignore"):
        y = chain.scaled(x, m, sch)
    if sch.element.has_nan:
        y = np.where(np.isnan(y), np.copysign(F32(np.nan), x), y).astype(np.float32)
    el = encode(y, sch.element, rounding, rbits=rbits, sr_bits=sr_bits, overflow="saturate",
                nan=element_nan_policy(sch.element))
    return SimpleNamespace(codes=el, scales=codes, global_scale=None, e1_8=None, e1_16=None)


def _float_log2_codes(x, sch):
    k = sch.block_size
    amax = np.max(np.abs(x.reshape(x.shape[0], -1, k)), axis=-1).astype(np.float32)
    with np.errstate(all="ignore"):
        if sch.scale_rule == "floor":
            e = np.floor(np.log2(amax)).astype(np.float64) - sch.element.emax
        else:
            d = (amax / F32(sch.element.max)) if sch.policies["mx_rceil_descale"] == "divide" else \
                amax * (F32(1.0) / F32(sch.element.max))
            e = np.ceil(np.log2(d.astype(np.float32))).astype(np.float64)
    finite = np.isfinite(e) & (amax >= 2.0 ** -126) & np.isfinite(amax)  # subnormal amaxes: as the rule
    return np.where(finite, np.clip(np.nan_to_num(e), -127, 127) + 127, 0).astype(np.uint8)


def _float_log2(t):
    sch = t.scheme
    if sch.structure != "mx" or sch.scale_rule not in ("floor", "rceil"):
        return
    if sch.scale_rule == "rceil" and sch.policies["mx_element_scaling"] == "torchao":
        text = ("known torchao bug: its eager RCEIL takes ceil(torch.log2(amax / max)) in float32, one binade "
                "low a few ulps above a power of two (not modelled by profile 'torchao'; the exact ceiling is what "
                "cvt.rp.satfinite.ue8m0x2.f32 gives)")
    else:
        text = (f"{sch.scale_rule} scale exponent from a float32 log2, wrong next to powers of two (the exact "
                f"exponent bits expected; gfloat#49, FlyDSL#590)")

    def run(env, t, x, rbits):
        base = _ref(env, sch, t.rounding, x, rbits, t.sr_bits)
        codes = _float_log2_codes(x, sch)
        with np.errstate(invalid="ignore"):
            amax = np.max(np.abs(x.reshape(x.shape[0], -1, sch.block_size)), axis=-1)
        exact = ~np.isfinite(amax) | (amax < 2.0 ** -126)  # NaN, Inf and subnormal amaxes: as the rule
        codes = np.where(exact, np.asarray(base.scales), codes).astype(np.uint8)
        if np.array_equal(codes, base.scales):
            return None
        return _mx_with_scale_codes(x, sch, codes, t.rounding, rbits, t.sr_bits)

    yield Variant(text, run)


def _divide(t):
    sch = t.scheme
    if sch.structure != "two_level" or sch.scale_rule != "amax" or sch.policies["nv_scale_chain"] != "te":
        return

    def run(env, t, x, rbits):
        ref = _ref(env, sch, t.rounding, x, rbits, t.sr_bits)
        ts = chain.tensor_scale(x, sch)
        k = sch.block_size
        s = sch.scale.values.astype(np.float32)[np.asarray(ref.scales).astype(np.int64)]
        with np.errstate(all="ignore"):
            d = np.repeat((s * ts.decode).astype(np.float32), k, axis=-1)
            y = chain.scaled((x / d).astype(np.float32), F32(1.0), sch)
        codes = encode(y, sch.element, t.rounding, rbits=rbits, sr_bits=t.sr_bits, overflow="saturate",
                       nan=element_nan_policy(sch.element))
        return SimpleNamespace(codes=codes, scales=ref.scales, global_scale=ref.global_scale, e1_8=None, e1_16=None)

    yield Variant("division by the block scale, x / fp32(s * S_dec), instead of multiplication by its reciprocal "
                  "fp32(1 / fp32(s * S_dec)) (arch-com#905)", run)


def _torchao_zero_scale(t):
    sch = t.scheme
    if sch.structure != "two_level" or sch.profile == "fouroversix":
        return
    try:
        ao = get_scheme(sch, profile="torchao") if sch.profile != "torchao" else sch
    except ValueError:  # a scheme torchao has no profile for (4over6)
        return

    def run(env, t, x, rbits):
        with np.errstate(all="ignore"):
            amax = np.max(np.abs(x)) if x.size else F32(0)
            pts = F32(amax) / (F32(ao.scale_bound) * F32(ao.max_elem))
        if not pts == 0:
            return None
        q = _ref(env, ao, t.rounding, x, rbits, t.sr_bits)
        scales = np.asarray(q.scales)
        return SimpleNamespace(codes=q.codes, scales=np.where(scales == 0x7F, 0xFF, scales).astype(np.uint8),
                               global_scale=q.global_scale, e1_8=None, e1_16=None)

    yield Variant("known torchao bug: nvfp4_quantize divides by a zero per-tensor scale when the tensor amax is 0 "
                  "or so small that amax / 2688 underflows: the block scales are NaN (0xFF on x86, outside UE4M3) "
                  "and the element codes come from NaN data (not modelled by profile 'torchao')", run, ao)


#: What each IF4 mistake is, in words.
IF4_MISTAKES = {
    "ties_to_int": "IF4 ties between the two block errors take INT4 (E2M1 expected: INT4 only when its error is "
                   "strictly smaller)",
    "int_divides": "IF4's INT4 candidate computed as y / fp32(6/7) (fp32(y * fp32(7/6)) expected)",
    "element_order": "IF4 block errors added in element order (torch's CPU order expected: t_j + t_(j+8), then the "
                     "eight sums in order)",
    "flag_inverted": "IF4 flag inverted: the scale byte's sign bit set on E2M1 blocks (it marks INT4 blocks)",
    "fouroversix": "known fouroversix bug (its 1.0.5 reference; not modelled by profile 'fouroversix'): 2688 / amax "
                   "and 1 / (S_dec * s) are not clamped, so tiny tensors get NaN blocks, and under a subnormal block "
                   "scale |y| >= 7 rounds to 8, packed as code 0x8 (-0)",
}


def _if4(t):
    if t.scheme.structure != "if4":
        return
    for name, text in IF4_MISTAKES.items():
        def run(env, t, x, rbits, name=name):
            if name == "fouroversix" and t.rounding != "rne":
                return None
            return if4_mistakes.quantize(x, t.scheme, t.rounding, rbits, t.sr_bits, **{name: True})
        yield Variant(text, run)


FOUROVERSIX_BUGS = ("known fouroversix bugs (its 1.0.5 reference; not modelled by profile 'fouroversix'): no "
                    "FLT_MAX clamps (NaN blocks for tiny tensors), |y| >= 7 under a subnormal scale packed as 0x8, "
                    "NaN/Inf input, MX byte 1 for amax <= 6 * 2^-127 and a division by 0.0 in all-zero MX blocks")


def _four_over_six_decode_scale(t):
    sch = t.scheme
    if sch.scale_rule != "4over6" or sch.is_2d or sch.policies["nv_scale_chain"] != "te":
        return
    yield Variant("4over6 errors against fp32(fp32(q * s) * S_dec), the global decode scale's path (((q * s) * amax) "
                  "/ (6 * Emax) expected: algebraically equal, not bitwise; flashinfer#3448)",
                  lambda env, t, x, rbits: selection.four_over_six_decode_scale(x, t.scheme, t.rounding, rbits,
                                                                               t.sr_bits))


def _fouroversix(t):
    sch = t.scheme
    if sch.profile != "fouroversix" or sch.structure not in ("two_level", "mx") or t.rounding != "rne":
        return

    def run(env, t, x, rbits):
        model = fouroversix_model.quantize(x, t.scheme)
        if np.isfinite(x).all():
            return model
        return fouroversix_model.same_but_nan_signs(model, env.quantize(x, t, rbits), t.scheme)

    yield Variant(FOUROVERSIX_BUGS, run)


def _profiles_with(policy, value, structure):
    return [p.name for p in list_profiles() if p.policies.get(policy) == value and structure in p.structures]


def _policies(t):
    sch = t.scheme
    prof = get_profile(sch.profile)
    for policy in sorted(ALGORITHM_POLICIES):
        if policy not in prof.policies:
            continue
        current = prof.policies[policy]
        for value in POLICIES[policy][1]:
            if value == current:
                continue
            try:
                alt = with_policy(sch, policy, value)
            except ValueError:
                continue
            owners = _profiles_with(policy, value, sch.structure)
            whose = f" of profile {owners[0]!r}" if owners else ""
            title = POLICY_TITLES.get(policy, policy)
            yield Variant(f"{title}{whose} ({policy}={value!r}; {current!r} expected)", _rerun(alt), alt, "policy")


def _profiles(t):
    sch = t.scheme
    mine = get_profile(sch.profile)
    for p in list_profiles():
        if p.name == mine.name or sch.structure not in p.structures:
            continue
        try:
            alt = get_scheme(sch, profile=p.name)
        except ValueError:
            continue
        prefix = "mx_" if sch.structure == "mx" else "nv_"
        differ = [k for k in sorted(ALGORITHM_POLICIES) if k.startswith(prefix)
                  and p.policies.get(k) != mine.policies.get(k)]
        yield Variant(f"profile {p.name!r} ({', '.join(f'{k}={p.policies.get(k)!r}' for k in differ)}; profile "
                      f"{mine.name!r} expected)", _rerun(alt), alt, "profile")


#: The known mistakes, most specific first: each yields the Variants that apply to a target.
MISTAKES = (_ties_away, _sr_ignores_bits, _float_log2, _torchao_zero_scale, _fouroversix, _divide, _if4,
            _four_over_six_decode_scale, _scale_rules, _policies, _profiles)


def variants(t) -> list[Variant]:
    """Every mistaken reference that applies to target ``t`` (a scheme row), in order."""
    if t.scheme is None:
        return []
    return [v for m in MISTAKES for v in m(t)]


# -- explaining a counterexample ---------------------------------------------------------------------

def replay(tensor: dict) -> tuple[np.ndarray, np.ndarray | None]:
    """(x, rbits) from a counterexample's tensor record."""
    bits = np.array([int(b, 16) for b in tensor["float32_bits"]], np.uint32)
    x = bits.view(np.float32).reshape(tensor["shape"])
    rb = tensor.get("rbits")
    return x, None if rb is None else np.array(rb, np.uint32).reshape(x.shape)


def matching(env, t, x, rbits, got, limit: int = 2) -> list[str]:
    """The texts of the variants whose result equals ``got`` (the backend's) on every field."""
    out, families = [], set()
    for v in variants(t):
        if v.family == "profile" and "policy" in families:
            continue
        try:
            alt = v.run(env, t, x, rbits)
            same = alt is not None and compare_quantized(alt, got, x, v.scheme or t.scheme, t.rounding, rbits) is None
        except Exception:  # noqa: BLE001 -- a diagnosis only; a variant that cannot run does not match
            continue
        if same:
            out.append(v.text)
            families.add(v.family)
            if len(out) >= limit:
                break
    return out


def explain(env, t, cx) -> str:
    """The ``matches`` line of a failed row's counterexample ("" if no known mistake matches;
    a diagnosis never raises)."""
    try:
        return _explain(env, t, cx)
    except Exception:  # noqa: BLE001 -- a diagnosis only
        return ""


def _explain(env, t, cx) -> str:
    if cx is None or not cx.tensor or cx.field not in QUANTIZE_FIELDS or getattr(t, "scheme", None) is None:
        return ""
    x, rbits = replay(cx.tensor)
    if x.ndim != 2 or x.shape[-1] % t.scheme.block_size:
        return ""
    try:
        got = env.quantize(x, t, rbits)
        ref = env.ref_quantize(x, t, rbits)
    except Exception:  # noqa: BLE001 -- the backend raises on the replay: nothing to match
        return ""
    if compare_quantized(ref, got, x, t.scheme, t.rounding, rbits) is None:
        return ""  # the backend agrees on x itself; the departure was on an input derived from it
    return " or ".join(matching(env, t, x, rbits, got))


__all__ = ["IF4_MISTAKES", "MISTAKES", "POLICY_TITLES", "Variant", "explain", "matching", "replay", "variants", "with_policy"]
