"""``sr_headroom="16/17"`` under profile ``fouroversix`` against fouroversix's own
``stochastic_unbiased`` scale factors (``fouroversix_unbiased_reference``, ported from
mit-han-lab/fouroversix@dadfad6): equal scale bytes and decode scale, bit for bit, on random,
heavy-tailed, huge, tiny and zero-block tensors. (Its element rounding adds ``torch.rand - 0.5``
noise in float32 and takes no explicit random bits, so it is not replayed.)
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import fouroversix_unbiased_reference as ref  # noqa: E402

import fp4spec  # noqa: E402

SCHEME = fp4spec.get_scheme("nvfp4", sr_headroom="16/17", profile="fouroversix")


def _inputs():
    rng = np.random.default_rng(11)
    zero_blocks = rng.standard_normal((4, 128))
    zero_blocks[:, ::32] = 0
    zero_blocks[:, 32:64] = 0
    return [rng.standard_normal((8, 256)), rng.standard_t(2, (8, 256)), rng.standard_normal((4, 128)) * 1e30,
            rng.standard_t(3, (4, 128)) * 1e-30, zero_blocks,
            np.exp2(rng.integers(-20, 20, (4, 128))) * rng.choice([-1, 1], (4, 128))]


@pytest.mark.parametrize("case", range(len(_inputs())))
def test_scales_equal_fouroversix_stochastic_unbiased(case):
    x = np.asarray(_inputs()[case], np.float32)
    rbits = np.random.default_rng(case).integers(0, 256, x.shape)
    q = fp4spec.quantize(x, SCHEME, rounding="sr", rbits=rbits)
    t = torch.from_numpy(x.copy())
    scales, decode = ref.compute_nv_scale_factors(t.reshape(-1, 16), t.abs().max())
    assert np.array_equal(scales.numpy().reshape(np.shape(q.scales)), np.asarray(q.scales))
    assert np.float32(decode.item()).view(np.uint32) == np.float32(q.global_scale).view(np.uint32)
