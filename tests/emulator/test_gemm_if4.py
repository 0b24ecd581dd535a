"""IF4 operands in the GEMM models ``exact`` and ``fp32``: the emulator equals the scalar reference
bit for bit (1 x 16 and 16 x 16 IF4, every scale code, mixed INT4/E2M1 blocks, with c); the block
scale a model reads is the IF4 block multiplier; other models refuse IF4 with a clear error."""

import numpy as np
import pytest

import fp4spec
from fp4spec import if4
from fp4spec.conformance import builders
from fp4spec.gemm_reference import if4_ref_row, matmul_reference

F32 = np.float32


def _same(qa, qb, acc, c=None):
    e = fp4spec.matmul(qa, qb, accumulator=acc, c=c)
    r = matmul_reference(qa, qb, accumulator=acc, c=c)
    assert np.array_equal(e.view(np.uint32), r.view(np.uint32)), np.argwhere(e.view(np.uint32) != r.view(np.uint32))[:3]


@pytest.mark.parametrize("acc", ("exact", "fp32"))
@pytest.mark.parametrize("scheme", ("if4", "if4_2d", "if4:scale_rule=abs_max"))
def test_emulator_equals_reference(acc, scheme):
    rng = np.random.default_rng(0)
    a = (rng.standard_normal((16, 64)) * np.exp2(rng.integers(-4, 4, (16, 64)))).astype(np.float32)
    b = rng.standard_normal((16, 64)).astype(np.float32)
    b[:, :32] = rng.uniform(-1, 1, (16, 32))
    qa, qb = fp4spec.quantize(a, scheme), fp4spec.quantize(b, scheme)
    assert (qb.scales >= 0x80).any() and (np.concatenate([qa.scales, qb.scales]) < 0x80).any()
    _same(qa, qb, acc, c=rng.standard_normal((16, 16)).astype(np.float32))


@pytest.mark.parametrize("acc", ("exact", "fp32"))
def test_every_scale_code(acc):
    x = builders.if4_every_scale_code(np.random.default_rng(1))[:, :1024]
    q = fp4spec.quantize(np.concatenate([x, -x[:, ::-1]]), "if4")
    _same(q, q, acc)


def test_block_scale_is_the_multiplier():
    codes = np.array([0x7, 0x9] + [0] * 14, np.uint8)  # 6 / -0.5 in E2M1; 7 / -7 in INT4
    sch = fp4spec.get_scheme("if4")
    fp_row, int_row = if4_ref_row(codes, [0x38], sch), if4_ref_row(codes, [0xB8], sch)
    assert [float(v) for v in fp_row.values[:2]] == [6.0, -0.5] and fp_row.scales[0] == 1
    assert [float(v) for v in int_row.values[:2]] == [7.0, -7.0]
    assert int_row.scales[0] == float(F32(6 / 7))  # fp32(1.0 * fp32(6/7))


def test_fp32_operands_are_the_dequantized_values_before_the_tensor_scale():
    """K = 16, B = one 1.0: the fp32 model's output is the A operand fp32(q * m), times g."""
    x = builders.if4_every_scale_code(np.random.default_rng(2))[:, 16:32]
    qa = fp4spec.quantize(x, "if4")
    one = np.zeros((1, 16), np.float32)
    one[0, 3] = 2688.0  # S_dec = 1, the element 6 under scale 448: B = 2688 at k = 3
    qb = fp4spec.quantize(one, "if4")
    out = fp4spec.matmul(qa, qb, accumulator="fp32")
    m = if4.block_multiplier(int(qa.scales[0, 0]))
    q = float((if4.INT4 if qa.scales[0, 0] & 0x80 else if4.E2M1).values[qa.codes[0, 3]])
    with np.errstate(all="ignore"):
        want = F32(F32(F32(q) * m) * F32(2688.0)) * F32(F32(qa.global_scale) * F32(qb.global_scale))
    assert out[0, 0] == want


@pytest.mark.parametrize("acc", ("sm100-mxf4nvf4", "sm90-bf16", "cdna3-fp8"))
def test_other_models_refuse_if4(acc):
    q = fp4spec.quantize(np.ones((2, 32), np.float32), "if4")
    with pytest.raises(ValueError, match="qa: IF4 operands \\(if4\\) are modelled by the accumulators 'exact' and 'fp32'"):
        fp4spec.matmul(q, q, accumulator=acc)
