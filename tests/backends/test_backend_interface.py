"""The backend interface: registry, module:Name loading, capabilities, scheme specs, the numpy backend."""

import numpy as np
import pytest

import fp4spec
from fp4spec.backends import (
    Availability,
    Backend,
    BackendError,
    Capabilities,
    NumpyBackend,
    as_availability,
    get_backend,
    list_backends,
    register_backend,
    resolve_scheme,
    scheme_spec,
)


# -- registry ------------------------------------------------------------------------------------------

def test_numpy_is_builtin_and_available():
    b = get_backend("numpy")
    assert isinstance(b, NumpyBackend) and b.name == "numpy"
    avail = b.is_available()
    assert avail and "numpy" in avail.reason
    assert "numpy" in list_backends() and "torch" in list_backends() and "triton" in list_backends()


def test_module_name_class_and_instance_forms():
    assert isinstance(get_backend("fp4spec.backends.numpy_backend:NumpyBackend"), NumpyBackend)
    assert isinstance(get_backend(NumpyBackend), NumpyBackend)
    inst = NumpyBackend()
    assert get_backend(inst) is inst


@pytest.mark.parametrize("spec, words", [
    ("nope", ["'nope'", "'numpy'", "module:Name"]),
    ("no_such_module_xyz:Thing", ["cannot import", "no_such_module_xyz"]),
    ("fp4spec.backends:NoSuchClass", ["no attribute", "NoSuchClass"]),
    ("fp4spec.backends:", ["package.module:Name"]),
    ("fp4spec.number_formats:FloatFormat", ["cannot instantiate"]),
    ("fp4spec.block_schemes:schemes", ["is not a backend", "quantize"]),
])
def test_bad_backend_names_are_clear_errors(spec, words):
    with pytest.raises(BackendError) as err:
        get_backend(spec)
    assert isinstance(err.value, ValueError)
    for w in words:
        assert w in str(err.value)


class DuckBackend:
    """Not a Backend subclass: only quantize and capabilities."""

    def capabilities(self):
        return Capabilities(schemes=("mxfp4",))

    def quantize(self, x, scheme, *, rounding="rne", rbits=None, sr_bits=8):
        return fp4spec.quantize(x, scheme, rounding=rounding, rbits=rbits, sr_bits=sr_bits)


DUCK = DuckBackend()


def test_duck_typed_objects_are_wrapped():
    b = get_backend(f"{__name__}:DUCK")
    assert isinstance(b, Backend)
    assert b.name == f"{__name__}:DUCK" and b.is_available()
    x = np.linspace(-3, 3, 32, dtype=np.float32)[None]
    assert b.quantize(x, resolve_scheme("mxfp4")).equals(fp4spec.quantize(x, "mxfp4"))
    with pytest.raises(NotImplementedError, match="pack"):
        b.pack(np.zeros((1, 2), np.uint8))


def test_register_backend():
    register_backend("my-duck", DuckBackend)
    assert "my-duck" in list_backends()
    assert get_backend("my-duck").capabilities().schemes == ("mxfp4",)
    with pytest.raises(BackendError, match="built-in"):
        register_backend("numpy", DuckBackend)
    with pytest.raises(BackendError, match="without ':'"):
        register_backend("a:b", DuckBackend)


def test_availability():
    assert Availability.yes() and not Availability.no("no GPU")
    assert Availability.no("no GPU").reason == "no GPU"
    assert as_availability((False, "why")) == Availability(False, "why")
    assert as_availability(True) and not as_availability(False)


# -- scheme specs ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(fp4spec.schemes))
def test_catalogue_specs_round_trip(name):
    assert scheme_spec(name) == name
    assert resolve_scheme(name) == fp4spec.get_scheme(name)


@pytest.mark.parametrize("spec", [
    "mxfp4:scale_rule=rceil",
    "mxfp4:profile=torchao,scale_rule=even",
    "nvfp4:profile=torchao",
    "nvfp4:scale_max=256,scale_rule=4over6,error_mode=mse",
    "ufp4:block_shape=32",
    "nvfp4_2d:block_shape=16x32",
])
def test_override_specs_round_trip(spec):
    sch = resolve_scheme(spec)
    assert resolve_scheme(scheme_spec(sch)) == sch
    assert sch != fp4spec.get_scheme(spec.split(":")[0])


@pytest.mark.parametrize("spec, words", [
    ("mxfp9", ["unknown scheme", "mxfp4"]),
    ("mxfp4:rule=floor", ["rule=floor", "scale_rule"]),
    ("mxfp4:scale_rule=round", ["scale_rule", "'floor'"]),
    ("nvfp4:block_size=x", ["block_size", "integer"]),
    ("", ["scheme spec"]),
])
def test_bad_scheme_specs(spec, words):
    with pytest.raises(BackendError) as err:
        resolve_scheme(spec)
    for w in words:
        assert w in str(err.value)


# -- capabilities ----------------------------------------------------------------------------------------

def test_capabilities_validate_and_answer():
    caps = Capabilities(schemes=("mxfp4", "hif4", "mxfp4:scale_rule=rceil"), rounding=("rne", "sr"),
                        operations=("dequantize",), scheme_rounding={"hif4": ("rne",)})
    assert caps.supports("quantize") and caps.supports("dequantize") and not caps.supports("pack")
    assert caps.roundings_for("hif4") == ("rne",) and caps.roundings_for("mxfp4") == ("rne", "sr")
    assert caps.supports_scheme("mxfp4:scale_rule=rceil") and not caps.supports_scheme("mxfp4:scale_rule=ceil")
    assert caps.element_formats() == ("e2m1", "s1p2")
    with pytest.raises(BackendError, match="rounding: 'nearest' is not one of"):
        Capabilities(schemes=("mxfp4",), rounding=("nearest",))
    with pytest.raises(BackendError, match="operations: 'gemm'"):
        Capabilities(schemes=("mxfp4",), operations=("gemm",))
    with pytest.raises(BackendError, match="sr_bits"):
        Capabilities(schemes=("mxfp4",), sr_bits=(0,))


def test_capabilities_matmul_schemes():
    """A GEMM may take fewer schemes than the quantizers: conform draws its operands from
    those only."""
    from fp4spec.conformance.runner import plan_matmul

    caps = Capabilities(schemes=("mxfp4", "mxfp8_e4m3", "nvfp4"), operations=("matmul",), accumulators=("exact",),
                        matmul_schemes=("mxfp4", "nvfp4"))
    assert caps.matmul_schemes == ("mxfp4", "nvfp4")
    drawn = {s for item in plan_matmul(None, caps) for s in item.schemes}
    assert drawn and "mxfp8_e4m3" not in drawn
    every = Capabilities(schemes=("mxfp4", "mxfp8_e4m3"), operations=("matmul",), accumulators=("exact",))
    assert "mxfp8_e4m3" in {s for item in plan_matmul(None, every) for s in item.schemes}
    with pytest.raises(BackendError, match="matmul_schemes: 'hif4' is not among the claimed schemes"):
        Capabilities(schemes=("mxfp4",), operations=("matmul",), accumulators=("exact",), matmul_schemes=("hif4",))
    with pytest.raises(BackendError, match="matmul_schemes: given but operation 'matmul' is not claimed"):
        Capabilities(schemes=("mxfp4",), matmul_schemes=("mxfp4",))


def test_capabilities_rht_specs():
    from fp4spec.rht import RHT

    caps = Capabilities(schemes=("nvfp4",), rht=("16/fwht-fp32", " 16/fwht-fp32", "32/fwht-fp32/bfloat16"))
    assert caps.rht == ("16/fwht-fp32", "32/fwht-fp32/bfloat16")
    assert caps.supports_rht(None) and caps.supports_rht("te") and caps.supports_rht(7)
    assert caps.supports_rht(RHT.te(out_dtype="float32")) and caps.supports_rht(RHT.from_seed(1, 32))
    assert not caps.supports_rht(RHT.from_seed(1, 32, out_dtype="float32"))
    assert not caps.supports_rht(RHT.te(arith="float64")) and not caps.supports_rht(RHT.from_seed(0, 64))
    assert Capabilities(schemes=("nvfp4",)).rht == () and not Capabilities(schemes=("nvfp4",)).supports_rht("te")
    assert Capabilities(rht="16/fwht-fp32").rht == ("16/fwht-fp32",)
    assert Capabilities(rht=(RHT.from_seed(0, 64),)).rht == ("64/fwht-fp32",)
    for bad in ("16", "8/fwht-fp32", "16/fp32", "16/fwht-fp32/float16", "16/fwht-fp32/bfloat16/x"):
        with pytest.raises(BackendError, match="rht: .* is not an RHT spec 'size/arith'"):
            Capabilities(rht=(bad,))
    with pytest.raises(BackendError, match="rht: expected a sequence of strings"):
        Capabilities(rht=16)
    with pytest.raises(ValueError, match="rht: 'TE' is not None, an RHT"):
        caps.supports_rht("TE")


def test_numpy_capabilities_claim_everything():
    caps = get_backend("numpy").capabilities()
    assert set(caps.schemes) >= set(fp4spec.schemes) - {"hif4"}
    assert caps.rounding == fp4spec.ROUNDING_MODES
    assert caps.operations >= {"quantize", "dequantize", "encode", "pack", "to_blocked"}
    assert caps.supports_scheme("nvfp4:scale_rule=4over6")  # any override


# -- the numpy backend is the emulator ----------------------------------------------------------------------

def test_numpy_backend_operations_are_the_spec_functions():
    b = get_backend("numpy")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 64)).astype(np.float32)
    rb = fp4spec.draw_rbits(x.shape, seed=1)
    for scheme in ("mxfp4", "nvfp4", "nvfp4_2d:block_shape=4x16"):
        sch = resolve_scheme(scheme)
        q = b.quantize(x, sch, rounding="sr", rbits=rb)
        assert q.equals(fp4spec.quantize(x, sch, rounding="sr", rbits=rb))
        assert np.array_equal(b.dequantize(q), fp4spec.dequantize(q))
    assert np.array_equal(b.encode(x, "e2m1", "rtz"), fp4spec.encode(x, "e2m1", "rtz"))
    assert b.pack(np.array([[1, 7]], np.uint8))[0, 0] == 0x71
    s = rng.integers(0, 256, (130, 5)).astype(np.uint8)
    assert np.array_equal(b.to_blocked(s), fp4spec.to_blocked(s))


def test_base_class_optional_operations_say_what_is_missing():
    class Minimal(Backend):
        name = "minimal"

    m = Minimal()
    assert m.is_available()
    for op, call in (("capabilities", m.capabilities), ("quantize", lambda: m.quantize(None, None)),
                     ("dequantize", lambda: m.dequantize(None)), ("encode", lambda: m.encode(None, "e2m1")),
                     ("pack", lambda: m.pack(None)), ("to_blocked", lambda: m.to_blocked(None))):
        with pytest.raises(NotImplementedError, match=op):
            call()
