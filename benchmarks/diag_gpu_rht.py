"""Where does the fused Triton RHT + quantize differ from the emulator on a GPU? (diagnostic)

For each RHT test-tensor kind of the conformance suite (conformance/rht_properties.py) and
each scheme given, quantize with ``rht=`` through the triton backend and through numpy, and
print the first differing block: input bits, the emulator's RHT output, both code rows and
scale codes. Also tries the unfused path (``variant="unfused"``: RHT into a float32 temporary,
then the plain kernel) to separate the transform from the quantizer.

    python benchmarks/diag_gpu_rht.py [mxfp4 nvfp4 ...]
"""

import sys
import time

import numpy as np
import torch

import fp4spec
from fp4spec.backends import triton_backend as trb
from fp4spec.backends.base import resolve_scheme
from fp4spec.conformance.rht_properties import RHT_KINDS, rht_tensor
from fp4spec.rht import RHT

t0 = time.time()
bad = 0
for spec in (sys.argv[1:] or ["mxfp4", "nvfp4"]):
    sch = resolve_scheme(spec)
    for r in (RHT.te(), RHT.from_seed(3)):
        for kind in RHT_KINDS:
            x = rht_tensor(np.random.default_rng(1), sch, r, kind).astype(np.float32)
            ref = fp4spec.quantize(x, sch, rht=r, backend="numpy")
            y = r.apply(x)
            for variant in (None, "unfused"):
                xt = torch.from_numpy(x).to("cuda" if torch.cuda.is_available() else "cpu")
                try:
                    out = trb.quantize_packed(xt, sch, rht=r, variant=variant)
                except Exception as exc:  # noqa: BLE001
                    print(f"{spec} {kind} {r.spec} variant={variant}: {type(exc).__name__}: {exc}"[:300])
                    continue
                codes = trb.unpack_lo_first(out["packed"]).cpu().numpy().reshape(ref.codes.shape)
                sc = out["scales"].cpu().numpy().reshape(ref.scales.shape)
                dc = np.argwhere(codes != ref.codes)
                ds = np.argwhere(sc != ref.scales)
                ok = len(dc) == 0 and len(ds) == 0
                bad += not ok
                print(f"{spec:6s} {kind:13s} signs={r.sign_mask():#06x} variant={variant}: "
                      f"{'ok' if ok else f'{len(dc)} codes, {len(ds)} scales differ'}  [{time.time() - t0:.0f}s]",
                      flush=True)
                if not ok:
                    i, j = (dc[0] if len(dc) else ds[0])[:2]
                    k = sch.block_size
                    b = (j // k) * k if len(dc) else j * k
                    print("   x bits   ", [hex(v) for v in x[i, b:b + k].view(np.uint32)])
                    print("   rht(x)   ", [hex(v) for v in np.asarray(y[i, b:b + k], np.float32).view(np.uint32)])
                    print("   ref codes", ref.codes[i, b:b + k].tolist(), "scale", ref.scales[i, b // k])
                    print("   gpu codes", codes[i, b:b + k].tolist(), "scale", sc[i, b // k])
print(f"{bad} differing cases, {time.time() - t0:.0f} s")
sys.exit(1 if bad else 0)
