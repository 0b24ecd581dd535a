"""Block-scale memory layouts: the plain row-major matrix and the cuBLAS 128x4 "blocked" layout.

A block-scaled operand (MXFP4, NVFP4, MXFP8...) of R rows and K elements per row carries a
scale matrix ``S[R, C]`` with ``C = K / block`` (block 32 for MX, 16 for NVFP4). In the
*plain* layout ``S`` is stored row-major. cuBLAS, CUTLASS (``Sm1xxBlockScaledConfig``),
cuDNN ("128x4 tiled"), torchao ``to_blocked`` and PyTorch ``SWIZZLE_32_4_4`` use the
*blocked* layout implemented here:

1. Pad ``S`` with **zero bytes** to ``R' = ceil(R/128) * 128`` rows and
   ``C' = ceil(C/4) * 4`` columns.
2. Cut the padded matrix into tiles of 128 rows x 4 columns (512 bytes each), stored one
   after another in row-tile-major order: tile index ``(r // 128) * (C'/4) + (c // 4)``.
3. Inside a tile the 128 x 4 bytes are stored as 32 rows of 16 bytes: the byte for
   ``(r, c)`` goes to row ``r % 32``, column ``((r % 128) // 32) * 4 + (c % 4)``.

Closed form: the byte offset of ``S[r, c]`` in the blocked buffer is::

    offset(r, c) = ((r // 128) * (C'/4) + (c // 4)) * 512
                   + (r % 32) * 16 + ((r % 128) // 32) * 4 + (c % 4)

Worked example: ``r = 130, c = 5`` in a 300 x 11 matrix (``C' = 12``) ->
``4 * 512 + 2 * 16 + 0 * 4 + 1 = 2081``.

The layout is the same for MX (E8M0 scales) and NVFP4 (UE4M3 scales); only the number of
elements per scale differs. Padded entries must be zero bytes: a stale non-finite scale
(0xFF for E8M0, 0x7F for UE4M3) times a zero padded element gives NaN (vllm-project/vllm
#45741, #48898). Note that a zero byte means +0 for UE4M3 but 2^-127 for E8M0.

A plain ``reshape`` of ``S`` (row-major bytes) is *not* this layout; using one was the bug of
facebookexperimental/triton#917.
"""

from __future__ import annotations

import operator

import numpy as np

#: Rows and scale columns covered by one tile of the blocked layout.
TILE_ROWS = 128
TILE_COLS = 4
#: Bytes per tile (128 x 4).
TILE_BYTES = TILE_ROWS * TILE_COLS


def _nonneg_int(x, name: str) -> int:
    if isinstance(x, bool):
        raise ValueError(f"{name}: expected a non-negative int, got {x!r}")
    try:
        v = operator.index(x)
    except TypeError:
        raise ValueError(f"{name}: expected a non-negative int, got {x!r}") from None
    if v < 0:
        raise ValueError(f"{name}: expected a non-negative int, got {v}")
    return v


def _ceil_to(n: int, m: int) -> int:
    return -(-n // m) * m


def blocked_shape(rows: int, cols: int) -> tuple[int, int]:
    """Padded scale-matrix shape ``(R', C')`` of the blocked layout.

    ``R' = ceil(rows / 128) * 128`` and ``C' = ceil(cols / 4) * 4``; the blocked buffer
    holds ``R' * C'`` bytes. ``blocked_shape(300, 11) == (384, 12)``.
    """
    rows = _nonneg_int(rows, "rows")
    cols = _nonneg_int(cols, "cols")
    return _ceil_to(rows, TILE_ROWS), _ceil_to(cols, TILE_COLS)


def blocked_offset(r: int, c: int, cols: int) -> int:
    """Byte offset of scale ``S[r, c]`` in the blocked buffer of a matrix with ``cols`` columns.

    The closed form (``C' = ceil(cols / 4) * 4``)::

        offset(r, c) = ((r // 128) * (C'/4) + (c // 4)) * 512
                       + (r % 32) * 16 + ((r % 128) // 32) * 4 + (c % 4)

    The offset does not depend on the number of rows. ``blocked_offset(130, 5, 11) == 2081``.
    """
    r = _nonneg_int(r, "r")
    c = _nonneg_int(c, "c")
    cols = _nonneg_int(cols, "cols")
    if c >= cols:
        raise ValueError(f"c: column {c} is out of range for a matrix with cols={cols} (allowed 0..{cols - 1})")
    cp = _ceil_to(cols, TILE_COLS)
    tile = (r // TILE_ROWS) * (cp // TILE_COLS) + (c // TILE_COLS)
    return tile * TILE_BYTES + (r % 32) * 16 + ((r % TILE_ROWS) // 32) * 4 + (c % TILE_COLS)


def _as_byte_array(x, name: str) -> np.ndarray:
    arr = x if isinstance(x, np.ndarray) else np.asarray(x)
    if arr.size == 0 and arr.dtype == np.float64 and not isinstance(x, np.ndarray):
        arr = arr.astype(np.uint8)  # an empty Python list has no integer dtype of its own
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(
            f"{name}: expected an integer array of scale bytes (uint8, or any integer dtype with "
            f"entries 0..255), got dtype {arr.dtype}; view float8 scales as uint8 first"
        )
    if arr.size and (arr.min() < 0 or arr.max() > 255):
        bad = arr.min() if arr.min() < 0 else arr.max()
        raise ValueError(f"{name}: every entry must be a byte in 0..255, found {int(bad)}")
    return arr.astype(np.uint8, copy=False)


def to_blocked(scales) -> np.ndarray:
    """Lay out a row-major scale matrix in the cuBLAS 128x4 blocked layout.

    Args:
        scales: a 2-D ``(rows, cols)`` integer array of scale bytes (uint8, or any integer
            dtype with entries 0..255; E8M0 / UE4M3 codes). Batched (3-D or more) input is
            rejected: lay out each matrix separately.

    Returns:
        A new 1-D uint8 array of length ``R' * C'`` (see :func:`blocked_shape`), the bytes in
        memory order. The 1-D form is canonical because the layout is a permutation of the
        whole padded buffer; any C-order reshape of it (e.g. to ``(R', C')``, the shape TE
        allocates) holds the same bytes, but the 2-D indices of such a view do not address
        ``S[r, c]``.

    Normative algorithm:

    1. Reject ``scales`` unless it is a 2-D integer array with entries in 0..255.
    2. Let ``(R, C) = scales.shape`` and ``(R', C') = blocked_shape(R, C)``.
    3. Form the padded matrix ``P[R', C']``: ``P[r, c] = scales[r, c]`` for ``r < R`` and
       ``c < C``, and ``P[r, c] = 0`` (a zero byte) everywhere else.
    4. For every ``(r, c)`` in ``P``, write ``P[r, c]`` to ``out[offset(r, c)]`` with
       ``offset(r, c) = ((r // 128) * (C'/4) + (c // 4)) * 512 + (r % 32) * 16
       + ((r % 128) // 32) * 4 + (c % 4)``. This is a bijection onto ``0 .. R'C' - 1``.

    Vectorised form (equal to step 4): with ``r = 128*i + 32*q + p`` and ``c = 4*k + j``,
    view ``P`` as axes ``(i, q, p, k, j)`` of sizes ``(R'/128, 4, 32, C'/4, 4)``, transpose to
    ``(i, k, p, q, j)`` and flatten in C order.
    """
    arr = _as_byte_array(scales, "scales")
    if arr.ndim != 2:
        raise ValueError(f"scales: expected a 2-D (rows, cols) matrix, got {arr.ndim}-d with shape {arr.shape}")
    rows, cols = arr.shape
    rp, cp = blocked_shape(rows, cols)
    padded = np.zeros((rp, cp), dtype=np.uint8)
    padded[:rows, :cols] = arr
    tiles = padded.reshape(rp // TILE_ROWS, 4, 32, cp // TILE_COLS, TILE_COLS)  # (i, q, p, k, j)
    return np.ascontiguousarray(tiles.transpose(0, 3, 2, 1, 4)).reshape(-1)  # (i, k, p, q, j)


def from_blocked(blocked, rows: int, cols: int, *, check_padding: bool = False) -> np.ndarray:
    """Recover the row-major ``(rows, cols)`` scale matrix from a blocked buffer.

    Args:
        blocked: integer array of ``R' * C'`` bytes (``blocked_shape(rows, cols)``), in memory
            order; any shape is accepted and read in C order (a 1-D buffer, or e.g. the
            ``(R', C')`` allocation).
        rows, cols: the unpadded scale-matrix shape.
        check_padding: if True, raise ValueError when any padded position holds a non-zero
            byte (conformance property: padded scale entries must be zero).

    Returns:
        A new 2-D uint8 array of shape ``(rows, cols)``.

    Normative algorithm:

    1. Let ``(R', C') = blocked_shape(rows, cols)``; reject ``blocked`` unless it is an integer
       array of exactly ``R' * C'`` entries in 0..255. Let ``b`` be its entries in C order.
    2. For every ``r < rows`` and ``c < cols``: ``out[r, c] = b[offset(r, c)]`` with the offset
       of :func:`blocked_offset`.
    3. (``check_padding`` only) every ``b[offset(r, c)]`` with ``r >= rows`` or ``c >= cols``
       must be 0.

    Vectorised form: view ``b`` as axes ``(i, k, p, q, j)`` of sizes
    ``(R'/128, C'/4, 32, 4, 4)``, transpose to ``(i, q, p, k, j)``, reshape to ``(R', C')`` and
    crop to ``[:rows, :cols]`` (TransformerEngine ``_recover_swizzled_scales``).
    """
    rp, cp = blocked_shape(rows, cols)
    buf = _as_byte_array(blocked, "blocked").reshape(-1)
    if buf.size != rp * cp:
        raise ValueError(
            f"blocked: has {buf.size} bytes, but a {rows} x {cols} scale matrix needs "
            f"blocked_shape({rows}, {cols}) = ({rp}, {cp}) -> {rp * cp} bytes"
        )
    tiles = buf.reshape(rp // TILE_ROWS, cp // TILE_COLS, 32, 4, TILE_COLS)  # (i, k, p, q, j)
    padded = tiles.transpose(0, 3, 2, 1, 4).reshape(rp, cp)  # (i, q, p, k, j)
    if check_padding:
        mask = np.ones((rp, cp), dtype=bool)
        mask[:rows, :cols] = False
        if np.any(padded[mask]):
            r, c = np.argwhere(mask & (padded != 0))[0]
            raise ValueError(
                f"blocked: padded position (r={r}, c={c}) at offset {blocked_offset(r, c, cp)} holds "
                f"0x{int(padded[r, c]):02X}; padded scale entries must be zero bytes"
            )
    return np.array(padded[:rows, :cols], dtype=np.uint8, order="C")


__all__ = ["TILE_BYTES", "TILE_COLS", "TILE_ROWS", "blocked_offset", "blocked_shape", "from_blocked", "to_blocked"]
