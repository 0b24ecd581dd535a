"""A small Llama-style GPT for the pretraining comparison: RMSNorm, SwiGLU, RoPE, SDPA.

Pre-norm blocks ``x + attn(norm(x))``, ``x + mlp(norm(x))``; no biases; rotary position
embeddings on queries and keys (half-split rotation, base 10000); causal
``torch.nn.functional.scaled_dot_product_attention``; a SwiGLU MLP ``down(silu(gate) * up)``
with gate and up as one linear; untied embedding and output head. Initialisation: normal,
std 0.02, the residual projections (``attn.out``, ``mlp.down``) scaled by
``1/sqrt(2 * layers)`` (GPT-2).

Every linear is a ``torch.nn.Linear`` named ``blocks.<i>.attn.qkv``, ``blocks.<i>.attn.out``,
``blocks.<i>.mlp.gate_up``, ``blocks.<i>.mlp.down`` and ``lm_head``, so that
:func:`fp4spec.training.convert` can swap them. The default size is about 30M parameters
(d 512, 9 layers, 8 heads, MLP 1408: 29.2M).
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import nn


@dataclasses.dataclass(frozen=True)
class GPTConfig:
    vocab: int = 256
    d_model: int = 512
    layers: int = 9
    heads: int = 8
    ffn: int = 1408
    seq_len: int = 1024
    rope_base: float = 10000.0
    norm_eps: float = 1e-5

    def __post_init__(self):
        for f in ("vocab", "d_model", "layers", "heads", "ffn", "seq_len"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{f}: {v!r} is not a positive integer")
        if self.d_model % self.heads or (self.d_model // self.heads) % 2:
            raise ValueError(f"heads: d_model {self.d_model} must split into {self.heads} heads of an even size")


def rope_tables(seq_len: int, head_dim: int, base: float):
    """cos and sin of shape (seq_len, head_dim / 2), float32."""
    inv = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    ang = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv)
    return ang.cos(), ang.sin()


def apply_rope(x, cos, sin):
    """Rotate the two halves of the last axis of x (batch, heads, time, head_dim)."""
    t = x.shape[-2]
    c, s = cos[:t].to(x.dtype), sin[:t].to(x.dtype)
    a, b = x.chunk(2, dim=-1)
    return torch.cat((a * c - b * s, a * s + b * c), dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.heads = cfg.heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.out = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        cos, sin = rope_tables(cfg.seq_len, cfg.d_model // cfg.heads, cfg.rope_base)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k = apply_rope(q, self.cos, self.sin), apply_rope(k, self.cos, self.sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, t, d))


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.gate_up = nn.Linear(cfg.d_model, 2 * cfg.ffn, bias=False)
        self.down = nn.Linear(cfg.ffn, cfg.d_model, bias=False)

    def forward(self, x):
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(F.silu(gate) * up)


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.norm1 = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.attn = Attention(cfg)
        self.norm2 = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.norm = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)
        self.reset_parameters()

    def reset_parameters(self):
        resid = 0.02 / math.sqrt(2 * self.cfg.layers)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=resid if name.endswith(("attn.out.weight", "mlp.down.weight")) else 0.02)
            else:
                nn.init.ones_(p)

    def forward(self, idx, targets=None):
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.norm(x))
        if targets is None:
            return logits
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


__all__ = ["GPT", "GPTConfig", "apply_rope", "parameter_count", "rope_tables"]
