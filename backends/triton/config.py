"""Every tunable of the triton backend in one frozen dataclass.

A :class:`TritonConfig` says how the kernels run -- tiles, warps, which of two equivalent
kernels or code paths to take -- never what they compute: every configuration gives the same
bits (the tests run the alternatives against the emulator). The defaults are the tuned
choices for the H200 (the measurements behind each: benchmarks/RESULTS.md and
benchmarks/NOTES-triton.md). Pass a modified copy instead of changing module state::

    from dataclasses import replace
    from fp4spec.backends.triton import DEFAULT_CONFIG, quantize_packed

    cfg = replace(DEFAULT_CONFIG, rows_bf16_blocks=256, rows_bf16_warps=8)
    quantize_packed(x, "nvfp4", config=cfg)

Names: *blocks* are quantization blocks per program, *warps* Triton's ``num_warps``;
``rows_*`` configure the rowwise kernels, ``cols_*`` the columnwise ones, ``rht_*`` the
butterfly RHT kernels, ``mma_*`` the RHT on the tensor cores, ``gemm*`` the GEMM.
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Mapping, Optional


def _frozen(d) -> Mapping:
    return dataclasses.field(default_factory=lambda: MappingProxyType(dict(d)))


@dataclasses.dataclass(frozen=True)
class TritonConfig:
    """How the triton kernels run (see the module docstring). Fields:

    Rowwise (``quantize_packed`` variants ``rows_bf16``, ``rows_sr``, ``rows``, ``rows_split``):
        rows_bf16_blocks, rows_bf16_warps: the default rowwise kernel (bf16, E2M1, 1 x 16 /
            1 x 32 blocks, RNE, plain scales).
        rows_sr_blocks, rows_sr_warps: the default rowwise SR kernel (E2M1, E1M2, INT4,
            1 x 16 / 1 x 32 blocks; not tuned on a GPU yet).
        rows_sr_fp32_pipe: its SR encoder by directed-rounding fma / add on the FP32 pipe
            (GPU only, sr_bits <= 23) instead of a conversion and integer shifts and adds;
            off until timed on the H200 (both are exact: tests/backends/test_triton_rows_sr.py).
        rows_mx, rows_two_level: (variant, blocks, warps) of the other rowwise requests of MX
            and two-level schemes; the variant ``"rows_split"`` applies to bf16 E2M1 RNE only,
            other requests take ``"rows"`` with the same tile.
        rows_wide: (blocks, warps) of ``rows_wide`` (MX with 6- and 8-bit elements).
        hif4_rows, hif4_cols: (groups, warps) per program of ``rows_hif4`` (a group of 64
            per thread) and ``cols_hif4`` (a [groups, 64] tile); HiF4, untuned.
        if4_rows, if4_cols: (blocks, warps) per program of ``rows_if4`` and ``cols_if4`` (a
            [blocks, 16] tile of one block column); if4_tiles: (tiles, warps) of ``if4_2d``
            (16 x 16 tiles, row-major over the tiles); IF4, untuned.
    Columnwise (variants ``cols``, ``cols_tile``):
        cols_variant: the default columnwise kernel for 1 x 16 and 1 x 32 blocks.
        cols_fast: block size -> (columns, warps, blocks) per program of ``cols`` with the fast
            E2M1 encoder (RNE); cols_generic: the same for SR and other elements.
        cols_scalar_loads: the (block size, with RHT) pairs for which ``cols`` loads one value
            per thread in the layout that computes it (else 8-byte loads).
        cols_tile_columns, cols_tile_warps, cols_tile_bands: ``cols_tile`` (other block sizes).
        cols_wide: (columns, blocks, warps) of ``cols_wide`` (MX with 6- and 8-bit elements).
    Generic tile kernel (variant ``tile``: 2-D block tiles, any strides):
        tile_rows, tile_cols, tile_warps.
    Dequantize: dequant_elements, dequant_warps (the rowwise kernel: elements per program);
        dequant_tile: (rows, columns, warps) of the generic one.
    Tensor amax: amax_tile (rows, columns, warps).
    Butterfly RHT (``rht="16/fwht-fp32"``):
        rht_rows_blocks, rht_rows_warps: the fused rowwise kernel.
        rht_rows_bf16x2: its MX encoder on bf16x2 words where the GPU has the instructions.
        rht_amax_rows: (rows of 16 per program, warps), rht_amax_cols: (columns, bands of 16
            rows, warps) of the RHT + amax pass; rht_apply: (logical rows, warps) of the
            unfused transform.
        rht_const_signs: sign masks compiled into the kernels (others are run-time arguments).
            Only the empty mask: TE's mask compiled in gave zero results of the wrong sign on
            the H200 (Triton 3.6 rewrote (-a) + (-b) into -(a + b), which IEEE addition of
            signed zeros forbids; benchmarks/RESULTS.md).
        rht_bf16_cvt: how the GPU rounds the RHT output to bf16: 0 integer operations, 1
            ``cvt.rn.bf16.f32``, 2 ``cvt.rn.bf16x2.f32`` (inline PTX); None: 1. The
            interpreter always uses 0.
    Fast E2M1 encoder:
        exact_fallback: the per-program branch to the exact encoder in the fused RHT, ``cols``,
            ``rows_bf16`` and mma kernels. False only in tests of the fast path alone, on data
            where it is exact.
    GPU-only instructions:
        hw_instructions: use them where the device has them (the hardware UE4M3 conversion,
            byte permutes for sign bits, the bf16x2 encoder); False: the integer twins.
    RHT on the tensor cores (``rht=RHT.te(arith="mma:sm90-bf16")``):
        mma_rows, mma_warps: tile rows of 64 elements, warps of the fused kernel.
        mma_tma: read the operand by the tensor memory accelerator (whole tiles only);
            mma_tma_per_sm, mma_tma_maxnreg, mma_tma_stages (block size -> pipeline stages).
        mma_persist, mma_per_sm, mma_stages, mma_maxnreg: the pointer-load loop (persistent
            grid; else one tile per program).
        mma_pair_rows: block size -> paired operand rows (a 1 x 32 block in one thread) or
            plain 64-element rows.
        mma_defer: the TMA loop checks its rare cases once per program (else per tile).
        mma_block_stores: the deferred loop stores each block from its thread (else 16-byte
            rows of codes).
        mma_pair_tmajor: paired rows' TMA box with the column group outermost.
        mma_bf16x2: MX 1 x 32 blocks encoded on bf16x2 words in the deferred loop.
        mma_apply: (logical rows, warps) of the unfused transform; mma_amax: (rows of 16,
            warps) of the RHT + amax pass.
    GEMM (``sm90-bf16``):
        gemm, gemm_small: tile configurations (names of :data:`~.gemm.CONFIGS` or
            :class:`~.gemm.TileConfig`) for GEMMs above / at most gemm_small_macs multiply-adds.
        gemm_certified: the configuration of large GEMMs under the certified models
            (:mod:`~.certify`: the kernel also keeps the largest |acc| per output, a second
            accumulator's worth of registers).
    """

    rows_bf16_blocks: int = 128
    rows_bf16_warps: int = 4
    rows_sr_blocks: int = 128
    rows_sr_warps: int = 4
    rows_sr_fp32_pipe: bool = False
    rows_mx: tuple = ("rows_split", 256, 8)
    rows_two_level: tuple = ("rows", 512, 8)
    rows_wide: tuple = (128, 4)
    hif4_rows: tuple = (256, 8)
    hif4_cols: tuple = (64, 4)
    if4_rows: tuple = (64, 4)
    if4_cols: tuple = (64, 4)
    if4_tiles: tuple = (8, 4)
    cols_variant: str = "cols"
    cols_fast: Mapping[int, tuple] = _frozen({16: (128, 4, 4), 32: (128, 4, 2)})
    cols_generic: tuple = (128, 4, 1)
    cols_scalar_loads: frozenset = frozenset({(16, False), (16, True)})
    cols_tile_columns: int = 512
    cols_tile_warps: int = 2
    cols_tile_bands: int = 8
    cols_wide: tuple = (64, 2, 4)
    tile_rows: int = 32
    tile_cols: int = 128
    tile_warps: int = 4
    dequant_elements: int = 16384
    dequant_warps: int = 8
    dequant_tile: tuple = (32, 128, 4)
    amax_tile: tuple = (64, 256, 4)
    rht_rows_blocks: int = 256
    rht_rows_warps: int = 8
    rht_rows_bf16x2: bool = True
    rht_amax_rows: tuple = (1024, 8)
    rht_amax_cols: tuple = (256, 4, 4)
    rht_apply: tuple = (64, 4)
    rht_const_signs: frozenset = frozenset({0})
    rht_bf16_cvt: Optional[int] = None
    exact_fallback: bool = True
    hw_instructions: bool = True
    mma_rows: int = 64
    mma_warps: int = 4
    mma_tma: bool = True
    mma_tma_per_sm: int = 5
    mma_tma_maxnreg: int = 96
    mma_tma_stages: Mapping[int, int] = _frozen({16: 4, 32: 3})
    mma_persist: bool = True
    mma_per_sm: int = 4
    mma_stages: int = 1
    mma_maxnreg: int = 128
    mma_pair_rows: Mapping[int, bool] = _frozen({16: False, 32: False})
    mma_defer: bool = True
    mma_block_stores: bool = True
    mma_pair_tmajor: bool = True
    mma_bf16x2: bool = True
    mma_apply: tuple = (64, 4)
    mma_amax: tuple = (256, 4)
    gemm: object = "prepass-128x256"
    gemm_small: object = "any-64x64"
    gemm_certified: object = "prepass-128x128-w8"
    gemm_small_macs: int = 1 << 24

    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, dict):  # replace(cfg, cols_fast={...}): kept read-only
                object.__setattr__(self, f.name, MappingProxyType(dict(v)))
        for name in ("rows_mx", "rows_two_level"):
            v = getattr(self, name)
            if not (isinstance(v, tuple) and len(v) == 3 and v[0] in ("rows", "rows_split")):
                raise ValueError(f"{name}: {v!r} is not (variant 'rows' or 'rows_split', blocks, warps)")
            _positive(name, v[1:])
        if self.cols_variant not in ("cols", "cols_tile"):
            raise ValueError(f"cols_variant: {self.cols_variant!r} is not 'cols' or 'cols_tile'")
        for k in (16, 32):
            if k not in self.cols_fast:
                raise ValueError(f"cols_fast: no entry for block size {k} (columns, warps, blocks)")
            c = self.cols_fast[k]
            _positive(f"cols_fast[{k}]", c)
            if c[2] not in (1, 2, 4):
                raise ValueError(f"cols_fast[{k}]: {c[2]} blocks per program is not 1, 2 or 4")
            if k not in self.mma_tma_stages or k not in self.mma_pair_rows:
                raise ValueError(f"mma_tma_stages, mma_pair_rows: no entry for block size {k}")
        if self.rht_bf16_cvt not in (None, 0, 1, 2):
            raise ValueError(f"rht_bf16_cvt: {self.rht_bf16_cvt!r} is not None, 0, 1 or 2")
        if self.mma_rows % 16 or self.mma_rows & (self.mma_rows - 1):
            raise ValueError(f"mma_rows: {self.mma_rows} is not a power of two >= 16")
        for name in ("rows_bf16_blocks", "rows_bf16_warps", "rows_sr_blocks", "rows_sr_warps", "cols_tile_columns", "cols_tile_warps", "cols_tile_bands",
                     "tile_rows", "tile_cols", "tile_warps", "dequant_elements", "dequant_warps", "rht_rows_blocks",
                     "rht_rows_warps", "mma_warps", "mma_tma_per_sm", "mma_per_sm", "mma_stages", "gemm_small_macs"):
            _positive(name, (getattr(self, name),))
        for name in ("cols_generic", "dequant_tile", "amax_tile", "rht_amax_rows", "rht_amax_cols", "rht_apply",
                     "mma_apply", "mma_amax"):
            _positive(name, getattr(self, name))
        for name, n in (("rows_wide", 2), ("cols_wide", 3), ("hif4_rows", 2), ("hif4_cols", 2),
                        ("if4_rows", 2), ("if4_cols", 2), ("if4_tiles", 2)):
            v = getattr(self, name)
            if not (isinstance(v, tuple) and len(v) == n):
                raise ValueError(f"{name}: {v!r} is not a tuple of {n} positive integers")
            _positive(name, v)
            if any(t & (t - 1) for t in v[:n - 1]):
                raise ValueError(f"{name}: {v!r}: the tile sizes must be powers of two")


def _positive(name, values):
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}: {v!r} is not a positive integer")


#: The shipped configuration (tuned on the H200).
DEFAULT_CONFIG = TritonConfig()


def resolve_config(config) -> TritonConfig:
    """``config`` as a TritonConfig (None: :data:`DEFAULT_CONFIG`), else TypeError."""
    if config is None:
        return DEFAULT_CONFIG
    if not isinstance(config, TritonConfig):
        raise TypeError(f"config: expected a TritonConfig (or None), got {type(config).__name__}")
    return config


__all__ = ["DEFAULT_CONFIG", "TritonConfig", "resolve_config"]
