"""The mechanism on real tensors: attenuation and SQNR of a network's own activations, weights
and gradients under E2M1 and E1M2, with and without an RHT (issue: does E2M1's shrinkage
compound across layers, and does the RHT make it worse, on an actual network?).

:func:`capture` runs one forward and backward pass of a model on a batch and keeps, for every
``torch.nn.Linear`` (converted or not), a sample of its input x, its weight w and the
gradient dy of its output. The backward pass is ``torch.autograd.grad`` with respect to the
linears' outputs: no parameter gradient is accumulated, so a training step is not disturbed.

:func:`measure` quantizes each GEMM's operands of those samples (fprop ``x w^T``, dgrad
``dy w``, wgrad ``dy^T x``; blocks along the reduction axis, as in training) with the ``nvfp4``
(E2M1) and ``ufp4`` (E1M2) schemes, RNE, with no RHT and with TE's 16-point RHT, and reports
per layer, GEMM and variant:

* ``eta = <Q(A) Q(B)^T, A B^T> / <A B^T, A B^T>`` -- the attenuation of the GEMM's output;
* ``alpha_a``, ``alpha_b`` -- the least-squares gain of ``Q(A) = alpha A + R`` per operand
  (``fp4spec.analysis.attenuation``), in the rotated basis when an RHT is applied;
* ``sqnr_a``, ``sqnr_b`` -- ``10 log10(|A|^2 / |A - Q(A)|^2)`` in dB, likewise.

Samples: the first ``rows`` tokens and the first ``rows`` output (fprop, wgrad) or input
(dgrad) features; computed in float64 on the model's device.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

import fp4spec

#: (label, scheme) of the grids compared.
GRIDS = (("e2m1", "nvfp4"), ("e1m2", "ufp4"))
#: RHT settings compared: none, or TransformerEngine's 16-point transform.
RHTS = (None, "te")


@dataclasses.dataclass
class Sample:
    """One linear's tensors from one pass: x (tokens x K), w (N x K), dy (tokens x N)."""

    name: str
    x: torch.Tensor
    w: torch.Tensor
    dy: torch.Tensor


def capture(model: torch.nn.Module, loss_fn, *, rows: int = 256) -> list[Sample]:
    """One forward (``loss_fn(model)`` returns the loss) and one backward to the linears'
    outputs; the first ``rows`` tokens of every linear's x and dy, and its weight."""
    linears = [(n, m) for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    seen: dict[str, list] = {}

    def hook(name):
        def keep(mod, inputs, out):
            seen[name] = [inputs[0].detach().reshape(-1, inputs[0].shape[-1])[:rows], out]
        return keep

    handles = [m.register_forward_hook(hook(n)) for n, m in linears]
    try:
        loss = loss_fn(model)
    finally:
        for h in handles:
            h.remove()
    names = [n for n, _ in linears if n in seen]
    grads = torch.autograd.grad(loss, [seen[n][1] for n in names], allow_unused=True)
    mods = dict(linears)
    out = []
    for n, g in zip(names, grads):
        if g is None:
            continue
        out.append(Sample(n, seen[n][0].float(), mods[n].weight.detach().float(),
                          g.detach().reshape(-1, g.shape[-1])[:rows].float()))
    return out


def _rht_matrix(rht: fp4spec.RHT, device) -> torch.Tensor:
    """The transform T (x_row @ T), read off the RHT by applying it to the identity in float64."""
    exact = dataclasses.replace(rht, arith="float64", out_dtype="float64")
    return torch.from_numpy(exact.apply(np.eye(rht.size), axis=-1)).to(device)


def _rotate(a: torch.Tensor, t) -> torch.Tensor:
    if t is None:
        return a.double()
    n = t.shape[0]
    return (a.double().reshape(a.shape[0], -1, n) @ t).reshape(a.shape)


def _dq(a: torch.Tensor, scheme: str, rht) -> torch.Tensor:
    return fp4spec.dequantize(fp4spec.quantize(a.float().contiguous(), scheme, rht=rht, pad=True)).double()


def _stats(ref: torch.Tensor, q: torch.Tensor) -> tuple[float, float]:
    sig = float((ref * ref).sum())
    noise = float(((ref - q) ** 2).sum())
    alpha = float((q * ref).sum()) / sig if sig else float("nan")
    sqnr = float("inf") if noise == 0 else float(10.0 * np.log10(sig / noise)) if sig else float("nan")
    return alpha, sqnr


def gemm_operands(s: Sample, rows: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Each GEMM's (A, B) as rows x K, K the reduction axis (module docstring's samples)."""
    m = min(s.x.shape[0], s.dy.shape[0])
    m -= m % 16
    x, dy = s.x[:m], s.dy[:m]
    return {"fprop": (x, s.w[:rows]), "dgrad": (dy, s.w[:, :rows].t()), "wgrad": (dy[:, :rows].t(), x[:, :rows].t())}


def measure(samples: list[Sample], *, rows: int = 256, grids=GRIDS, rhts=RHTS) -> list[dict]:
    """One record per (layer, GEMM, grid, RHT): eta, alpha_a, alpha_b, sqnr_a, sqnr_b."""
    out = []
    for depth, s in enumerate(samples):
        for gemm, (a, b) in gemm_operands(s, rows).items():
            if a.shape[1] < 16 or a.shape[1] % 16:
                continue
            exact = (a.double() @ b.double().t())
            den = float((exact * exact).sum())
            for rht_spec in rhts:
                rht = fp4spec.resolve_rht(rht_spec)
                t = None if rht is None else _rht_matrix(rht, a.device)
                ra, rb = _rotate(a, t), _rotate(b, t)
                for label, scheme in grids:
                    qa, qb = _dq(a, scheme, rht), _dq(b, scheme, rht)
                    eta = float(((qa @ qb.t()) * exact).sum()) / den if den else float("nan")
                    alpha_a, sqnr_a = _stats(ra, qa)
                    alpha_b, sqnr_b = _stats(rb, qb)
                    out.append({"layer": s.name, "index": depth, "gemm": gemm, "grid": label,
                                "rht": 0 if rht is None else rht.size, "eta": eta, "alpha_a": alpha_a,
                                "alpha_b": alpha_b, "sqnr_a": sqnr_a, "sqnr_b": sqnr_b})
    return out


__all__ = ["GRIDS", "RHTS", "Sample", "capture", "gemm_operands", "measure"]
