"""``backend="auto"`` on CUDA tensors (``pytest -m gpu``; skipped without CUDA): which backend it
picks, that the results are torch tensors on the input's device, and that they are bit-equal
to the numpy emulator on the same values."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)

import fp4spec  # noqa: E402
from fp4spec.rht import RHT  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.filterwarnings("ignore::RuntimeWarning")]

MMA = RHT.te(arith="mma:sm90-bf16")
# (scheme, rounding, the backend auto must pick on CUDA, rht)
CASES = [
    ("nvfp4", "rne", "triton", None),
    ("nvfp4", "sr", "triton", None),
    ("mxfp4", "rne", "triton", None),
    ("mxfp4:scale_rule=rceil", "rne", "triton", None),
    ("nvfp4_2d", "rne", "triton", None),
    ("ufp4", "rne", "triton", None),
    ("nvint4", "rne", "triton", None),
    ("nvfp4", "rna", "torch", None),  # the triton kernels round rne and sr; torch every mode
    ("hif4", "rne", "triton", None),
    ("mxfp6_e2m3", "rne", "triton", None),  # rows_wide
    ("mxfp8_e4m3", "rto", "torch", None),
    ("nvfp4", "rne", "triton", "te"),  # fwht-fp32: triton (fused) before torch
    ("mxfp4", "rne", "triton", MMA),  # mma:sm90-bf16: triton on Hopper, else numpy
    ("nvfp4", "sr", "triton", MMA),
]


@pytest.fixture(scope="module")
def data():
    g = torch.Generator().manual_seed(7)
    x = torch.randn(256, 512, generator=g) * torch.exp2(torch.randint(-20, 20, (256, 1), generator=g).float())
    x = x.to(torch.bfloat16).cuda()
    rb = torch.randint(0, 256, x.shape, generator=g, dtype=torch.int32)
    return x, x.float().cpu().numpy(), rb


@pytest.mark.parametrize("spec,rounding,want,rht", CASES,
                         ids=[f"{c[0]}-{c[1]}" + ("" if c[3] is None else "-rht") for c in CASES])
def test_auto_on_cuda(data, spec, rounding, want, rht):
    x, xf, rb = data
    name, _, rule = spec.partition(":scale_rule=")
    over = {"scale_rule": rule} if rule else {}
    if rht is not None:
        over["rht"] = rht
        if rht is MMA and torch.cuda.get_device_capability()[0] != 9:
            want = "numpy"  # the sm90-bf16 model is Hopper's MMA only
    kw = {"rbits": rb.cuda(), "sr_bits": 8} if rounding == "sr" else {}
    assert fp4spec.select_backend(x, name, rounding=rounding, **over) == want
    q = fp4spec.quantize(x, name, rounding=rounding, **kw, **over)
    ref = fp4spec.quantize(xf, name, rounding=rounding, backend="numpy",
                           **({"rbits": rb.numpy().astype(np.uint32), "sr_bits": 8} if rounding == "sr" else {}), **over)
    assert q.backend == want
    assert q.codes.device.type == "cuda" and q.scales.device.type == "cuda"
    np.testing.assert_array_equal(q.codes.cpu().numpy(), ref.codes)
    np.testing.assert_array_equal(q.scales.cpu().numpy(), ref.scales)
    if ref.global_scale is not None:
        assert np.float32(q.global_scale.cpu()).tobytes() == np.float32(ref.global_scale).tobytes()
