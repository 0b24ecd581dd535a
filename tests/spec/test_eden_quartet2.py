"""MS-EDEN against Quartet II's PyTorch path (``quartet2_reference``, fp4spec's own statement of
what IST-DASLab/Quartet-II@8776a90 computes), bit for bit where the semantics match:

* Steps 1-3 (decode scale, initial block scales, the scaled values y) and the element rounding
  on tie-free inputs equal the reference's float32 values exactly.
* The scales' stochastic rounding equals the reference's ``sr_e4m3`` for every normal E4M3
  target with the same draw: uniform u = k / 2^20 is rbits r = 2^20 - 1 - k at sr_bits = 20
  (every scale code, the draws at each side of the threshold).
* The whole quantization (codes and scale bytes) equals the reference's on random tensors.
* The correction's sums: fp4spec's exact sums are within 4 float32 ulps of the reference's.
* The divergences, each with its smallest input: exact E2M1 ties, the 447.99 clamp, subnormal
  scale targets.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import quartet2_reference as q2  # noqa: E402

from fp4spec import eden  # noqa: E402
from fp4spec.elements import encode_scalar  # noqa: E402
from fp4spec.emulator.eden import ms_eden_quantize  # noqa: E402
from fp4spec.emulator.elements import encode  # noqa: E402

K = 20  # fp32 -> E4M3 drops 20 mantissa bits for normal targets


def _inputs():
    rng = np.random.default_rng(7)
    sparse = np.where(rng.random((4, 256)) < 0.8, 0.0, rng.standard_normal((4, 256)) * 1e4)
    zero_block = rng.standard_normal((4, 256))
    zero_block[:, 16:32] = 0
    return [rng.standard_normal((8, 256)), rng.standard_t(3, (8, 256)), rng.standard_t(3, (4, 128)) * 1e-30,
            sparse, zero_block, np.zeros((2, 128))]


def _steps(x):
    """fp4spec's steps 1-3 and the element values, from the scalar reference."""
    blocks = x.reshape(-1, eden.BLOCK)
    d = eden.decode_scale(np.abs(blocks).max(axis=-1))
    codes = [eden.initial_scale_code(np.abs(b).max(), d) for b in blocks]
    y = np.array([eden.scaled_block(list(b), c, d) for b, c in zip(blocks, codes)], np.float32)
    q = np.array([[eden.E2M1.values[encode_scalar(v, eden.E2M1, "rne", overflow="saturate")] for v in row]
                  for row in y], np.float32)
    return d, eden.UE4M3.values[codes].astype(np.float32), y, q


@pytest.mark.parametrize("case", range(len(_inputs())))
def test_steps_1_to_3_equal_the_reference(case):
    x = np.asarray(_inputs()[case], np.float32)
    ref = q2.eden_parts(torch.from_numpy(x.copy()))
    d, s, y, q = _steps(x)
    assert d.tobytes() == np.float32(ref["global_scale"].item()).tobytes()
    assert s.tobytes() == ref["scales"].numpy().ravel().tobytes()
    assert y.tobytes() == ref["x_scaled"].numpy().tobytes()
    assert np.array_equal(q, ref["x_fp4"].numpy())  # values: the reference keeps no sign on zero
    c = np.array([eden.correction(yg, qg) for yg, qg in zip(y.reshape(-1, 128), q.reshape(-1, 128))], np.float32)
    ulps = np.abs(c.view(np.int32) - ref["correction"].numpy().ravel().view(np.int32))
    assert ulps.max() <= 4


def _every_normal_target():
    """t = fp32(s * c) for every nonzero UE4M3 scale s and 64 corrections c in [0.5, 2]."""
    s = eden.UE4M3.values[1:0x7F].astype(np.float32)
    c = np.random.default_rng(3).uniform(0.5, 2.0, 64).astype(np.float32)
    t = (s[:, None] * c[None, :]).ravel().astype(np.float32)
    return t[(t >= 2.0 ** -6) & (t <= np.float32(447.99))]


def test_scale_rounding_equals_sr_e4m3_for_normal_targets():
    t = _every_normal_target()
    lo = encode(t, eden.UE4M3, "rtz").astype(np.int64)
    frac = np.round((t - eden.UE4M3.values[lo]) / (eden.UE4M3.values[lo + 1] - eden.UE4M3.values[lo]) * 2 ** K)
    for k in (np.zeros_like(frac), frac - 1, frac, frac + 1, np.full_like(frac, 2 ** K - 1)):
        k = np.clip(k, 0, 2 ** K - 1).astype(np.int64)
        ref = q2.sr_e4m3(torch.from_numpy(t), torch.from_numpy((k / 2 ** K).astype(np.float32)))
        ours = encode(t, eden.UE4M3, "sr", rbits=2 ** K - 1 - k, sr_bits=K, overflow="saturate")
        assert np.array_equal(eden.UE4M3.values[ours].astype(np.float32), ref.numpy())


@pytest.mark.parametrize("case", range(len(_inputs())))
def test_quantization_equals_the_reference(case):
    x = np.asarray(_inputs()[case], np.float32)
    k = np.random.default_rng(case).integers(0, 2 ** K, (x.shape[0], x.shape[1] // 16))
    qt = ms_eden_quantize(x, group=128, rbits=2 ** K - 1 - k, sr_bits=K)
    x_fp4, scales, d = q2.eden_forward(torch.from_numpy(x.copy()), torch.from_numpy((k / 2 ** K).astype(np.float32)))
    assert np.float32(d.item()).tobytes() == np.float32(qt.global_scale).tobytes()
    assert np.array_equal(eden.UE4M3.values[qt.scales].astype(np.float32).ravel(), scales.numpy().ravel())
    values = eden.E2M1.values[qt.codes].astype(np.float32)
    assert np.array_equal(values.ravel(), x_fp4.numpy().ravel())


# -- the divergences, smallest inputs ------------------------------------------------------------

def _tie_input():
    """1x128: x[0] = 1 sets D and the block scale 256; x[1] is the float32 whose y is exactly 0.25."""
    d = eden.decode_scale([1.0])
    t = np.float32(64 * d)
    while eden.scaled_block([t], eden.initial_scale_code(1.0, d), d)[0] != 0.25:
        t = np.nextafter(t, np.float32(1) if eden.scaled_block([t], 0x78, d)[0] < 0.25 else np.float32(0))
    x = np.zeros((1, 128), np.float32)
    x[0, :2] = 1.0, t
    return x


def test_divergence_an_exact_tie_rounds_to_even_where_the_reference_rounds_up():
    x = _tie_input()
    ref = q2.eden_parts(torch.from_numpy(x.copy()))
    assert ref["x_scaled"][0, 1] == 0.25 and ref["x_fp4"][0, 1] == 0.5
    assert _steps(x)[3][0, 1] == 0.0


def test_divergence_a_corrected_scale_of_448():
    # s = 256, c = 1.75: fp4spec keeps 448; the reference clamps to 447.99 and can draw 416
    t = np.float32(256 * 1.75)
    assert eden.UE4M3.values[eden.corrected_scale_code(0x78, 1.75, 0, sr_bits=K)] == 448
    ref = q2.sr_e4m3(torch.tensor([t]), torch.tensor([np.float32(1 - 2 ** -K)]))
    assert ref.item() == 416


def test_divergence_subnormal_targets_keep_more_bits_than_the_draw():
    # t = 2^-9 + 2^-30: frac * 2^20 = 1/2; the reference rounds up at u = 0, fp4spec's r = 2^20 - 1 not
    t = np.float32(2.0 ** -9 + 2.0 ** -30)
    assert eden.UE4M3.values[eden.corrected_scale_code(0x01, t / np.float32(2.0 ** -9), 2 ** K - 1, K)] == 2.0 ** -9
    assert q2.sr_e4m3(torch.tensor([t]), torch.tensor([0.0])).item() == 2.0 ** -8
