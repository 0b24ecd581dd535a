"""One scheme-spec parser (fp4spec.scheme_specs), used by get_scheme, quantize, the backends and conform."""

import numpy as np
import pytest

import fp4spec
from fp4spec.backends.base import BackendError, resolve_scheme as backend_resolve
from fp4spec.scheme_specs import parse_scheme_spec, resolve_scheme, scheme_spec


def test_quantize_and_get_scheme_take_specs():
    x = np.random.default_rng(1).standard_normal((4, 64)).astype(np.float32) * 3
    assert fp4spec.get_scheme("mxfp4:scale_rule=rceil") == fp4spec.get_scheme("mxfp4", scale_rule="rceil")
    assert fp4spec.quantize(x, "mxfp4:scale_rule=rceil").equals(fp4spec.quantize(x, "mxfp4", scale_rule="rceil"))
    q = fp4spec.quantize(x, "nvfp4:profile=torchao,scale_rule=amax")
    assert q.scheme.profile == "torchao"
    assert fp4spec.get_scheme("ufp4:block_shape=32", element_max=3.0).block_size == 32


def test_a_field_given_twice_is_an_error():
    with pytest.raises(ValueError, match="scale_rule: given both in the scheme spec and as a keyword"):
        fp4spec.get_scheme("mxfp4:scale_rule=rceil", scale_rule="ceil")
    with pytest.raises(ValueError, match="'scale_rule' is given twice"):
        parse_scheme_spec("mxfp4:scale_rule=rceil,scale_rule=ceil")


@pytest.mark.parametrize("spec, words", [
    ("mxfp4:rule=floor", "'rule=floor' in 'mxfp4:rule=floor' is not field=value"),
    ("nvfp4:block_size=x", "block_size='x' is not an integer"),
    ("nvfp4_2d:block_shape=16y16", "block_shape='16y16' is not 'k' or 'rxk'"),
    ("mxfp4:scale_rule=round", "scale_rule: 'round' is not one of"),
])
def test_errors_name_the_part(spec, words):
    with pytest.raises(ValueError) as err:
        fp4spec.quantize(np.zeros((1, 32), np.float32), spec)
    assert words in str(err.value)


def test_the_backend_interface_reexports_the_one_parser():
    for spec in ("mxfp4", "mxfp4:scale_rule=rceil", "nvfp4_2d:block_shape=16x32"):
        assert backend_resolve(spec) == resolve_scheme(spec) == fp4spec.get_scheme(spec)
        assert resolve_scheme(scheme_spec(spec)) == resolve_scheme(spec)
    with pytest.raises(BackendError, match="unknown scheme"):
        backend_resolve("mxfp9")
