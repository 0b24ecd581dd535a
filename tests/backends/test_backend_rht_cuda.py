"""GPU check of the torch backend's RHT (fwht-fp32 in eager CUDA float32 ops) against the numpy spec.

Skipped without CUDA. On the GPU machine:

    python -m pytest -q -p no:cacheprovider tests/backends/test_backend_rht_cuda.py

Every comparison is bit for bit (NaN matches NaN). With $OUT set, a one-line JSON summary per
test is appended to $OUT/rht_cuda.jsonl.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)

import fp4spec  # noqa: E402
from fp4spec.backends.torch_backend import apply_rht  # noqa: E402
from fp4spec.conformance.rht_properties import RHT_KINDS, rht_tensor  # noqa: E402
from fp4spec.rht import RHT  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.filterwarnings("ignore::RuntimeWarning")]


def _log(**kw):
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "rht_cuda.jsonl"), "a") as f:
            f.write(json.dumps(kw) + "\n")


def _bits_equal(got, want) -> int:
    """Number of differing elements (NaN equals NaN)."""
    g = np.ascontiguousarray(got, np.float32)
    w = np.ascontiguousarray(want, np.float32)
    gn, wn = np.isnan(g), np.isnan(w)
    bad = (gn != wn) | (~gn & ~wn & (g.view(np.uint32) != w.view(np.uint32)))
    return int(bad.sum())


def _inputs(size: int) -> np.ndarray:
    rng = np.random.default_rng(size)
    x = rng.standard_t(3, (4096, 256)).astype(np.float32)
    x[::7] *= np.exp2(rng.integers(-30, 30, (x[::7].shape[0], 256))).astype(np.float32)  # wide spans
    r = RHT.from_seed(size, size)
    parts = [rht_tensor(rng, fp4spec.get_scheme("nvfp4"), r, k) for k in RHT_KINDS]
    cols = max(p.shape[1] for p in parts)
    parts = [np.tile(p, (1, cols // p.shape[1])) for p in parts]
    extra = np.concatenate(parts, axis=0)
    extra = np.tile(extra, (1, 256 // extra.shape[1])) if extra.shape[1] < 256 else extra[:, :256]
    extra = np.concatenate([extra] * (-(-64 // extra.shape[0])))[:64]  # 64 rows: whole tiles, axis=0 RHT rows
    return np.ascontiguousarray(np.concatenate([x, extra], axis=0))


@pytest.mark.parametrize("size", [16, 32, 64, 128])
@pytest.mark.parametrize("out", ["bfloat16", "float32"])
def test_apply_rht_cuda_equals_numpy(size, out):
    x = _inputs(size)
    bad = 0
    for r in ([RHT.te(out_dtype=out)] if size == 16 else []) + [RHT.from_seed(size + 1, size, out_dtype=out)]:
        with np.errstate(all="ignore"):
            want = r.apply(x).astype(np.float32)
            want0 = r.apply(np.ascontiguousarray(x.T), axis=0).astype(np.float32)
        xt = torch.from_numpy(x).cuda()
        got = apply_rht(xt, r).float().cpu().numpy()
        got0 = apply_rht(xt.T.contiguous(), r, 0).float().cpu().numpy()
        bad += _bits_equal(got, want) + _bits_equal(got0, want0)
    _log(test="apply_rht", size=size, out=out, elements=int(x.size), differing=bad)
    assert bad == 0


@pytest.mark.parametrize("scheme", ["nvfp4", "mxfp4", "nvfp4_2d"])
@pytest.mark.parametrize("rounding", ["rne", "sr"])
@pytest.mark.parametrize("axis", [-1, 0])
def test_quantize_rht_cuda_equals_numpy(scheme, rounding, axis):
    x = _inputs(16)
    rb = fp4spec.draw_rbits(x.shape, 8, 5) if rounding == "sr" else None
    diffs = {}
    for r in (RHT.te(), RHT.from_seed(3, 16, out_dtype="float32"), RHT.from_seed(4, 64)):
        ref = fp4spec.quantize(x, scheme, axis=axis, rounding=rounding, rbits=rb, rht=r)
        q = fp4spec.quantize(torch.from_numpy(x).cuda(), scheme, axis=axis, rounding=rounding,
                             rbits=None if rb is None else torch.from_numpy(rb.astype(np.int64)).cuda(), rht=r,
                             backend="torch")
        qn = q.to_numpy()
        diffs[r.spec + "/" + r.out_dtype] = int((np.asarray(qn.codes) != ref.codes).sum()
                                                + (np.asarray(qn.scales) != ref.scales).sum())
        assert q.backend == "torch" and str(q.device).startswith("cuda")
        assert q.equals(ref), (r, diffs)
    _log(test="quantize_rht", scheme=scheme, rounding=rounding, axis=axis, differing=diffs)
