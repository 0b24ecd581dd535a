"""QuantizedTensor: the one currency between layers -- codes, scales, tensor scale, scheme.

Shapes, for x of shape ``S`` quantized along ``axis`` with blocks of k elements:

* ``codes``: uint8, one code per element, x's shape (with ``pad=True`` the blocked axis --
  and for tiles the axis before it -- padded with zeros to whole blocks; the padding holds
  the code of +0). A QuantizedTensor holds its codes *as stored* (``data``): 4-bit elements
  may be given packed two per byte along the blocked axis, the first element in the low
  nibble (:func:`fp4spec.pack`, ``order="lo_first"``: the device kernels' output and the
  layout of ``torch.float4_e2m1fn_x2``), and are then kept packed; ``codes`` is the
  one-per-element view, unpacked on first use and cached. ``storage`` is the packed form
  (packed on first use for codes given one per element; wider elements: the codes).
* ``scales``: uint8 scale codes, x's shape with the blocked axis replaced by the number of
  blocks (``S[:-1] + (n_blocks,)`` for ``axis=-1``). E8M0 codes for MX, UE4M3 codes
  (0x00..0x7F, the float8_e4m3fn bit pattern) for NVFP4, E6M2 codes for HiF4. For r x k
  tiles there is still one entry per 1 x k row block; the r rows of a tile hold the same code.
* ``global_scale``: the float32 tensor-level *decode* multiplier (TE's S_dec, torchao's
  per-tensor scale), or None.
* ``e1_8``, ``e1_16``: HiF4's micro-exponent bits (None for other schemes), in the layout
  :mod:`fp4spec.emulator.hif4` returns, with the blocked axis moved back to ``axis``.
* ``backend``: the name of the backend that computed it (``"numpy"``, ``"torch"``,
  ``"triton"``...): provenance for audits, not part of the value (:meth:`QuantizedTensor.equals`
  ignores it).
* ``rht``: the :class:`~fp4spec.rht.RHT` applied before quantization (``fp4spec.quantize(...,
  rht=)``), or None. With one, codes and scales describe the *rotated* values
  ``rht.apply(x)``: dequantize gives rotated values and does not undo the transform
  (``rht.inverse(values, axis)`` does, up to rounding). Part of the value: :meth:`equals`
  compares it. The RHT runs after padding, so padded positions hold the codes of the
  transformed zeros (+0, or -0 where IEEE signed-zero sums give it).

The arrays are either all numpy arrays (read-only) or all torch tensors on one device (then
``global_scale`` is a 0-d float32 tensor on that device). Torch tensors cannot be made
read-only: a QuantizedTensor holds them as given, so do not modify them in place.
"""

from __future__ import annotations

import numbers
import sys

import numpy as np

from .block_schemes import Scheme, get_scheme
from .rht import RHT

_ARRAYS = ("codes", "scales", "e1_8", "e1_16")  # the array fields; "codes" is stored as ``data``


def _is_torch(a) -> bool:
    """True if ``a`` is a torch tensor (without importing torch)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(a, torch.Tensor)


def _readonly(a):
    if a is None:
        return None
    a = np.asarray(a)
    if a.flags.writeable:
        a = np.array(a, copy=True)
        a.setflags(write=False)
    return a


def _moveaxis(a, src: int, dst: int):
    if _is_torch(a):
        return a.movedim(src, dst)
    return np.moveaxis(a, src, dst)


def _move_back(a, axis: int, ndim: int):
    """Move the blocked axis (last, or second-to-last for arrays with one extra trailing axis) back to ``axis``."""
    if a is None:
        return None
    if not _is_torch(a):
        a = np.asarray(a)
    if a.ndim == ndim:
        return _moveaxis(a, -1, axis)
    if a.ndim == ndim + 1:
        return _moveaxis(a, -2, axis)
    raise ValueError(f"expected a {ndim}- or {ndim + 1}-d array, got shape {tuple(a.shape)}")


def _move_to_end(a, axis: int, ndim: int):
    if a is None:
        return None
    if a.ndim == ndim:
        return _moveaxis(a, axis, -1)
    return _moveaxis(a, axis, -2)


def _tensor_fields(fields: dict, global_scale):
    """Check that torch fields are all torch and on one device; the tensor scale as a 0-d
    float32 tensor there. Returns the new global_scale."""
    import torch

    present = {k: v for k, v in fields.items() if v is not None}
    mixed = [k for k, v in present.items() if not isinstance(v, torch.Tensor)]
    if mixed:
        raise TypeError(f"{', '.join(present)}: all numpy arrays or all torch tensors, not a mix "
                        f"({', '.join(mixed)} not torch tensors)")
    devices = {str(v.device) for v in present.values()}
    if len(devices) > 1:
        raise ValueError(f"{', '.join(present)}: torch tensors must be on one device, got {sorted(devices)}")
    device = fields["codes"].device
    if global_scale is None:
        return None
    if isinstance(global_scale, torch.Tensor):
        if global_scale.numel() != 1:
            raise ValueError(f"global_scale: expected one value, got a tensor of shape {tuple(global_scale.shape)}")
        return global_scale.detach().reshape(()).to(device=device, dtype=torch.float32)
    return torch.tensor(float(np.float32(global_scale)), dtype=torch.float32, device=device)


def _as_scheme(scheme) -> Scheme:
    if isinstance(scheme, Scheme):
        return scheme
    if isinstance(scheme, str):
        return get_scheme(scheme)  # names and specs ("mxfp4:scale_rule=rceil"); ValueError names it
    raise TypeError(f"scheme: expected a scheme name, a scheme spec or an fp4spec.Scheme, got {type(scheme).__name__}")


def _check_global_scale_presence(scheme: Scheme, g) -> None:
    if scheme.global_scale is not None and g is None:
        raise ValueError(f"global_scale: scheme {scheme.name!r} has a float32 tensor scale; got None")
    if scheme.global_scale is None and g is not None:
        raise ValueError(f"global_scale: scheme {scheme.name!r} has no tensor scale; expected None, got {g!r}")


def _f32_scalar(g) -> np.float32:
    a = np.asarray(g)
    if a.size != 1 or a.dtype.kind not in "fiu" or a.dtype == bool:
        raise TypeError(f"global_scale: expected one real number (the float32 decode multiplier), got {g!r}")
    return np.float32(a.reshape(()))


def _dtype_name(a) -> str:
    return str(a.dtype).removeprefix("torch.")


def _max_value(a) -> int | None:
    """The largest entry (None if empty, or a torch tensor off the CPU: not scanned)."""
    if _is_torch(a):
        if a.device.type != "cpu" or a.numel() == 0:
            return None
        return int(a.max())
    return int(a.max()) if a.size else None


#: Rows of padding the axis before the blocked one may hold for 1D-block schemes (less than this).
ROW_PAD = 16


def _moved(t: tuple, axis: int) -> tuple:
    return t[:axis] + t[axis + 1:] + (t[axis],)


def _field(q: "QuantizedTensor", name: str):
    return q.data if name == "codes" else getattr(q, name)


def _check_arrays(q: "QuantizedTensor", scan: bool = True) -> None:
    """Dtypes, code ranges and shapes of a QuantizedTensor (see :meth:`QuantizedTensor.__init__`).
    Sets ``is_packed``: 4-bit codes whose blocked axis holds half the padded length.
    ``scan=False``: shapes only (codes already checked, now seen along another axis)."""
    sch = q.scheme
    hif4 = sch.structure == "hif4"
    for name in _ARRAYS:
        a = _field(q, name)
        if a is None:
            if name in ("codes", "scales") or hif4:
                raise ValueError(f"{name}: scheme {sch.name!r} needs it; got None")
            continue
        if name.startswith("e1_") and not hif4:
            raise ValueError(f"{name}: only HiF4 has micro-exponent bits; scheme {sch.name!r} has none, expected None")
        if _dtype_name(a) != "uint8":
            raise TypeError(f"{name}: expected uint8, got dtype {_dtype_name(a)}")
    data = q.data
    nd = data.ndim
    if nd == 0:
        raise ValueError("codes: expected an array of at least 1 dimension, got a 0-d array")
    if isinstance(q.axis, bool) or not isinstance(q.axis, numbers.Integral) or not -nd <= int(q.axis) < nd:
        raise ValueError(f"axis: {q.axis!r} is not an axis of the {nd}-d codes")
    axis = int(q.axis) % nd
    object.__setattr__(q, "axis", axis)
    shape = q.shape
    if (not isinstance(shape, (tuple, list)) or len(shape) != nd
            or not all(isinstance(n, numbers.Integral) and not isinstance(n, bool) and n >= 0 for n in shape)):
        raise ValueError(f"shape: expected {nd} non-negative integers (x's shape before padding, as the codes "
                         f"{tuple(data.shape)}), got {shape!r}")
    shape = tuple(int(n) for n in shape)
    object.__setattr__(q, "shape", shape)
    k, r = sch.block_size, sch.tile_rows
    padded = -(-shape[axis] // k) * k
    packed = sch.element.bits == 4 and data.shape[axis] * 2 == padded and data.shape[axis] != padded
    object.__setattr__(q, "is_packed", packed)
    cshape = q.padded_shape
    cm, sm = _moved(cshape, axis), _moved(shape, axis)
    if sch.is_2d and nd < 2:
        raise ValueError(f"codes: scheme {sch.name!r} has {r} x {k} tiles and needs at least 2 dimensions")
    for i in range(nd):
        # The blocked axis is padded to whole blocks; the axis before it to whole 16-row tiles
        # (r-row tiles of 2D schemes; GEMM operands keep 16-row padding for 1D schemes too).
        block = k if i == nd - 1 else (r if sch.is_2d else ROW_PAD) if i == nd - 2 else 1
        if (cm[i] % block and (i == nd - 1 or sch.is_2d)) or not sm[i] <= cm[i] < sm[i] + block:
            where = "the blocked axis" if i == nd - 1 else ("the rows before it" if block > 1 else "an axis that is not blocked")
            raise ValueError(f"shape: {shape} does not match the codes {tuple(data.shape)} along {where} "
                             f"(codes hold x's length padded to a multiple of {block}, by less than {block}"
                             + ("; 4-bit codes may be packed two per byte: half that length)" if sch.element.bits == 4
                                else ")"))
    want = cshape[:axis] + (cm[-1] // k,) + cshape[axis + 1:]
    if tuple(q.scales.shape) != want:
        raise ValueError(f"scales: expected shape {want} (one scale per block of {k} along axis {axis} of the "
                         f"codes {cshape}), got {tuple(q.scales.shape)}")
    if hif4:
        for name, n in (("e1_8", 8), ("e1_16", 16)):
            got = tuple(getattr(q, name).shape)
            if got != want + (n,):
                raise ValueError(f"{name}: expected shape {want + (n,)} (scales + ({n},)), got {got}")
    if not scan:
        return
    if not packed:  # a packed byte holds two codes of 0..15: every byte is valid
        top = (1 << sch.element.bits) - 1
        m = _max_value(data)
        if m is not None and m > top:
            raise ValueError(f"codes: {sch.element.name} codes are {sch.element.bits}-bit (0..{top}); found {m}")
    if hif4:
        for name in ("e1_8", "e1_16"):
            m = _max_value(getattr(q, name))
            if m is not None and m > 1:
                raise ValueError(f"{name}: expected bits (0 or 1); found {m}")


def _f32_bits(g) -> np.uint32 | None:
    if g is None:
        return None
    if _is_torch(g):
        g = g.detach().cpu().numpy()
    return np.asarray(g, dtype=np.float32).reshape(()).view(np.uint32)[()]


def _unpack(data, axis: int):
    """One code per element of lo_first packed bytes along ``axis`` (numpy or torch, on its device)."""
    if _is_torch(data):
        import torch

        c = data.movedim(axis, -1)
        out = torch.stack((c & 0xF, c >> 4), dim=-1).reshape(*c.shape[:-1], 2 * c.shape[-1])
        return out.movedim(-1, axis)
    c = np.moveaxis(data, axis, -1)
    out = np.empty(c.shape[:-1] + (2 * c.shape[-1],), np.uint8)
    out[..., 0::2] = c & 0xF
    out[..., 1::2] = c >> 4
    out = np.moveaxis(out, -1, axis)
    out.setflags(write=False)
    return out


_FIELDS = ("codes", "scales", "global_scale", "scheme", "axis", "shape", "e1_8", "e1_16", "backend", "rht")


class QuantizedTensor:
    """A block-quantized tensor (see the module docstring for the fields' shapes).

    ``codes`` (the one-code-per-element view) and ``data`` (the codes as stored: packed two
    per byte along the blocked axis for 4-bit elements given so), ``scales``,
    ``global_scale``, ``scheme``, ``axis`` (non-negative, the axis the blocks run along),
    ``shape`` (the shape of the quantized x before padding), HiF4's ``e1_8`` and ``e1_16``,
    ``backend`` (what computed it) and ``rht`` (the transform the values were rotated by
    before quantization, or None). Immutable; numpy arrays are read-only; torch tensors (all
    fields on one device) are held as given. :meth:`replace` makes a changed copy.
    """

    __slots__ = ("data", "scales", "global_scale", "scheme", "axis", "shape", "e1_8", "e1_16", "backend", "rht",
                 "is_packed", "_codes", "_storage")

    def __init__(self, codes, scales, global_scale, scheme, axis, shape, e1_8=None, e1_16=None,
                 backend: str = "numpy", rht: RHT | None = None):
        """Validate and normalize every field (ValueError / TypeError naming the field): the
        scheme (a name or spec string is resolved), uint8 arrays, codes within the element
        format's range (or 4-bit codes packed two per byte: ``codes`` then holds half the
        padded length along ``axis``), the shapes of scales and of the HiF4 bits against the
        codes, ``shape`` against the codes (padding less than one block), a tensor scale iff
        the scheme has one. Torch tensors off the CPU are not scanned for their values (that
        would synchronize the device); :meth:`to_numpy` checks them.

        The error carries the fields as given (``exc.rejected_fields``, a dict), so that
        conformance can say which part of the return contract a backend's result breaks."""
        given = dict(codes=codes, scales=scales, global_scale=global_scale, scheme=scheme, axis=axis, shape=shape,
                     e1_8=e1_8, e1_16=e1_16, backend=backend, rht=rht)
        for name, value in given.items():
            object.__setattr__(self, "data" if name == "codes" else name, value)
        object.__setattr__(self, "_codes", None)
        object.__setattr__(self, "_storage", None)
        try:
            self._validate()
        except (TypeError, ValueError) as exc:
            exc.rejected_fields = given
            raise

    def __setattr__(self, name, value):
        raise AttributeError(f"QuantizedTensor is immutable: use replace({name}=...)")

    def _validate(self):
        object.__setattr__(self, "scheme", _as_scheme(self.scheme))
        fields = {name: _field(self, name) for name in _ARRAYS}
        _check_global_scale_presence(self.scheme, self.global_scale)
        if any(_is_torch(a) for a in fields.values()):
            object.__setattr__(self, "global_scale", _tensor_fields(fields, self.global_scale))
        else:
            for name, a in fields.items():
                object.__setattr__(self, "data" if name == "codes" else name, _readonly(a))
            if self.global_scale is not None:
                object.__setattr__(self, "global_scale", _f32_scalar(self.global_scale))
        if not isinstance(self.backend, str) or not self.backend:
            raise ValueError(f"backend: expected a backend name (a non-empty string), got {self.backend!r}")
        if self.rht is not None and not isinstance(self.rht, RHT):
            raise ValueError(f"rht: expected None or an fp4spec.rht.RHT, got {self.rht!r}")
        _check_arrays(self)

    # -- the codes, as stored and one per element ------------------------------------------------

    @property
    def codes(self):
        """One code per element (uint8, the padded shape): ``data`` itself, or ``data``
        unpacked (on first use, then cached) when the codes are stored packed."""
        if not self.is_packed:
            return self.data
        if self._codes is None:
            object.__setattr__(self, "_codes", _unpack(self.data, self.axis))
        return self._codes

    @property
    def storage(self):
        """The codes as a kernel stores them: 4-bit elements packed two per byte along the
        blocked axis (first element in the low nibble; ``data`` itself when held packed, else
        packed on first use and cached); wider elements one code per byte."""
        if self.is_packed or self.scheme.element.bits != 4:
            return self.data
        if self._storage is None:
            object.__setattr__(self, "_storage", self.pack())
        return self._storage

    def replace(self, **changes) -> "QuantizedTensor":
        """A new QuantizedTensor with ``changes`` applied to the constructor's fields (validated)."""
        unknown = sorted(set(changes) - set(_FIELDS))
        if unknown:
            raise TypeError(f"{unknown[0]}: not a field of QuantizedTensor ({', '.join(_FIELDS)})")
        fields = {name: (self.data if name == "codes" else getattr(self, name)) for name in _FIELDS}
        return QuantizedTensor(**{**fields, **changes})

    def relabeled(self, axis: int, shape, *, rht: RHT | None = None, backend: str | None = None) -> "QuantizedTensor":
        """The same codes labelled as blocked along ``axis`` of an x of ``shape``: the result
        of a backend (blocked axis last, x padded) moved back to the caller's axis (views, no
        copies) with the caller's shape, ``rht`` and backend name. The values are not scanned
        again."""
        nd = len(shape)
        m = self._moved_fields() if self.axis != self.data.ndim - 1 else \
            {"data": self.data, "scales": self.scales, "e1_8": self.e1_8, "e1_16": self.e1_16}
        last = axis == nd - 1  # the rowwise case: nothing moves
        fields = dict(data=m["data"] if last else _moveaxis(m["data"], -1, axis),
                      scales=m["scales"] if last else _move_back(m["scales"], axis, nd),
                      global_scale=self.global_scale, scheme=self.scheme, axis=axis, shape=tuple(shape),
                      e1_8=m["e1_8"] if last else _move_back(m["e1_8"], axis, nd),
                      e1_16=m["e1_16"] if last else _move_back(m["e1_16"], axis, nd),
                      backend=self.backend if backend is None else backend, rht=rht)
        if len(self.shape) == nd and all(n >= s for n, s in zip(self.shape, _moved(tuple(shape), axis))):
            return QuantizedTensor._checked(fields, self.is_packed)  # x's shape within the padded one
        return QuantizedTensor(**{("codes" if k == "data" else k): v for k, v in fields.items()})

    @classmethod
    def _checked(cls, fields: dict, is_packed: bool) -> "QuantizedTensor":
        """A QuantizedTensor of fields that another one already validated, seen along another
        axis or with the unpadded shape (no checks again: every call would pay for them)."""
        q = object.__new__(cls)
        for name, value in fields.items():
            object.__setattr__(q, name, value)
        object.__setattr__(q, "is_packed", is_packed)
        object.__setattr__(q, "_codes", None)
        object.__setattr__(q, "_storage", None)
        return q

    @classmethod
    def from_kernel(cls, data, scales, global_scale, scheme: Scheme, shape, *, backend: str,
                    rht: RHT | None = None, e1_8=None, e1_16=None) -> "QuantizedTensor":
        """Wrap what a kernel wrote, unchecked: torch tensors with the blocked axis last (the
        ``len(shape) - 1``), 4-bit codes packed two per byte, ``global_scale`` a 0-d float32
        tensor on their device (None for MX), ``shape`` the (padded) x's; HiF4's bits in the
        emulator's layout. For backends whose
        results are tested equal to the emulator and certified by ``fp4spec conform`` (which
        compares every field): the checks of :meth:`__init__` cost a warm GPU call a large part
        of its host time."""
        return cls._checked(dict(data=data, scales=scales, global_scale=global_scale, scheme=scheme,
                                 axis=len(shape) - 1, shape=tuple(shape), e1_8=e1_8, e1_16=e1_16, backend=backend,
                                 rht=rht), scheme.element.bits == 4)

    @classmethod
    def from_moved(cls, codes, scales, global_scale, scheme: Scheme, axis: int, shape, *, e1_8=None, e1_16=None,
                   backend: str = "numpy", rht: RHT | None = None):
        """Build from arrays whose blocked axis is last (the emulator's layout); ``codes`` one
        per element or packed.

        Takes ownership: numpy arrays are made read-only, not copied; torch tensors are
        viewed, not copied.
        """
        nd = len(shape)
        for a in (codes, scales, e1_8, e1_16):
            if isinstance(a, np.ndarray):
                a.setflags(write=False)
        return cls(_moveaxis(codes, -1, axis), _move_back(scales, axis, nd), global_scale, scheme, axis,
                   tuple(shape), _move_back(e1_8, axis, nd), _move_back(e1_16, axis, nd), backend=backend, rht=rht)

    def _moved_fields(self) -> dict:
        nd = len(self.shape)
        return {"data": _moveaxis(self.data, self.axis, -1), "scales": _move_to_end(self.scales, self.axis, nd),
                "e1_8": _move_to_end(self.e1_8, self.axis, nd), "e1_16": _move_to_end(self.e1_16, self.axis, nd)}

    def moved(self) -> dict:
        """codes (one per element), scales, e1_8, e1_16 with the blocked axis last (the emulator's layout)."""
        nd = len(self.shape)
        return {"codes": _moveaxis(self.codes, self.axis, -1),
                "scales": _move_to_end(self.scales, self.axis, nd),
                "e1_8": _move_to_end(self.e1_8, self.axis, nd),
                "e1_16": _move_to_end(self.e1_16, self.axis, nd)}

    @property
    def is_torch(self) -> bool:
        """True if the fields are torch tensors (see :meth:`to_numpy`, :meth:`to_torch`)."""
        return _is_torch(self.data)

    @property
    def device(self):
        """The torch device of the fields, or ``"cpu"`` for numpy arrays."""
        return self.data.device if self.is_torch else "cpu"

    def to_numpy(self) -> "QuantizedTensor":
        """An equal QuantizedTensor of (read-only) numpy arrays; itself if it already is one."""
        if not self.is_torch:
            return self

        def np_(a):
            return None if a is None else a.detach().cpu().numpy()

        g = self.global_scale
        return QuantizedTensor(np_(self.data), np_(self.scales), None if g is None else np_(g).reshape(())[()],
                               self.scheme, self.axis, self.shape, np_(self.e1_8), np_(self.e1_16),
                               backend=self.backend, rht=self.rht)

    def to_torch(self, device="cpu") -> "QuantizedTensor":
        """An equal QuantizedTensor of torch tensors on ``device`` (copies)."""
        import torch

        def t_(a):
            if a is None:
                return None
            if _is_torch(a):
                return a.to(device)
            return torch.from_numpy(np.array(a, order="C", copy=True)).to(device)

        g = self.global_scale
        if g is not None and not _is_torch(g):
            g = torch.from_numpy(np.array(g, dtype=np.float32).reshape(1)).reshape(())
        return QuantizedTensor(t_(self.data), t_(self.scales), None if g is None else t_(g), self.scheme,
                               self.axis, self.shape, t_(self.e1_8), t_(self.e1_16), backend=self.backend,
                               rht=self.rht)

    @property
    def n_blocks(self) -> int:
        """Blocks along the axis (after padding)."""
        return self.scales.shape[self.axis]

    @property
    def padded_shape(self) -> tuple:
        """The shape of the codes one per element (x's shape padded to whole blocks), without
        unpacking them."""
        shape = tuple(self.data.shape)
        if not self.is_packed:
            return shape
        return shape[:self.axis] + (2 * shape[self.axis],) + shape[self.axis + 1:]

    @property
    def padded(self) -> bool:
        return self.padded_shape != self.shape

    def pack(self, order: str = "lo_first"):
        """Pack the codes for storage along the blocked axis (numpy in, numpy out; torch
        tensors are packed with torch ops on their device).

        4-bit elements: two codes per byte (:func:`fp4spec.pack`; ``order="lo_first"``, the
        NVIDIA/PyTorch order, or ``"hi_first"``). 8-bit elements: the codes themselves (one
        byte each). 6-bit elements: NotImplementedError (no packed FP6 layout is specified).
        """
        from .packing import pack

        bits = self.scheme.element.bits
        if self.is_packed and order == "lo_first":
            return self.data
        if self.is_torch:
            return _pack_torch(self.codes, bits, self.scheme.element.name, order, self.axis)
        if bits == 4:
            return pack(self.codes, order=order, axis=self.axis)
        if bits == 8:
            return np.array(self.codes, dtype=np.uint8)
        raise NotImplementedError(f"pack: {bits}-bit elements ({self.scheme.element.name}) have no specified packed layout")

    def torch_views(self) -> dict:
        """The fields as the torch dtypes scaled-matmul APIs take, as bit views (no copy, on
        the fields' device): ``codes`` -- E2M1 as ``torch.float4_e2m1fn_x2`` (the storage
        form, two per byte), other elements as their uint8 storage; ``scales`` -- E8M0 as
        ``torch.float8_e8m0fnu``, UE4M3 as ``torch.float8_e4m3fn``, others uint8. Torch
        fields only (``q.to_torch(device)`` first for numpy ones)."""
        if not self.is_torch:
            raise TypeError("torch_views: the fields are numpy arrays; use q.to_torch(device).torch_views(), "
                            "or q.ml_dtypes_views() for numpy")
        from .interop import TORCH_SCALE_DTYPES, to_torch_fp4x2, to_torch_scales

        el, sc = self.scheme.element.name, self.scheme.scale.name
        codes = to_torch_fp4x2(self.storage) if el == "e2m1" else self.storage
        scales = to_torch_scales(self.scales, sc) if sc in TORCH_SCALE_DTYPES else self.scales
        return {"codes": codes, "scales": scales}

    def ml_dtypes_views(self) -> dict:
        """The fields as ml_dtypes arrays, as bit views of the numpy arrays (no copy): ``codes``
        one per element (ml_dtypes' sub-byte types are unpacked) as the element's ml_dtypes
        type, ``scales`` as the scale's (E8M0 ``float8_e8m0fnu``, UE4M3 ``float8_e4m3fn``);
        a field whose format has no ml_dtypes type stays uint8. Numpy fields only."""
        if self.is_torch:
            raise TypeError("ml_dtypes_views: the fields are torch tensors; use q.to_numpy().ml_dtypes_views(), "
                            "or q.torch_views()")
        import ml_dtypes

        from .interop import ML_DTYPES_NAMES

        def view(a, fmt):
            name = ML_DTYPES_NAMES.get(fmt.name)
            return a if name is None else a.view(getattr(ml_dtypes, name))

        return {"codes": view(self.codes, self.scheme.element), "scales": view(self.scales, self.scheme.scale)}

    def equals(self, other: "QuantizedTensor") -> bool:
        """Bit-exact equality of every field (codes, scales, tensor-scale bits, HiF4 bits,
        scheme, axis, shape, rht), numpy and torch alike (a torch QuantizedTensor equals its
        :meth:`to_numpy`), packed or not. ``backend`` is provenance and is not compared."""
        if not isinstance(other, QuantizedTensor):
            return False
        a, b = self.to_numpy(), other.to_numpy()

        def same(a, b):
            if a is None or b is None:
                return a is None and b is None
            return a.shape == b.shape and a.dtype == b.dtype and bool(np.array_equal(a, b))

        return (a.scheme == b.scheme and a.axis == b.axis and a.shape == b.shape and a.rht == b.rht
                and same(a.codes, b.codes) and same(a.scales, b.scales)
                and _f32_bits(a.global_scale) == _f32_bits(b.global_scale)
                and same(a.e1_8, b.e1_8) and same(a.e1_16, b.e1_16))

    def __repr__(self) -> str:
        g = self.global_scale
        if g is not None and _is_torch(g):
            g = g.detach().cpu().numpy().reshape(())[()]
        g = "None" if g is None else str(g)  # shortest float32 digits
        extra = "" if self.backend == "numpy" else f", backend={self.backend!r}"  # the emulator: as always
        if self.rht is not None:
            extra += f", rht={str(self.rht)!r}"
        if self.is_packed:
            extra += ", packed"
        if self.is_torch:
            extra += f", device={self.data.device}"
        return (f"QuantizedTensor(scheme={self.scheme.name!r}, shape={self.shape}, axis={self.axis}, "
                f"codes={self.padded_shape}, scales={tuple(self.scales.shape)}, global_scale={g}{extra})")


def _pack_torch(codes, bits: int, element: str, order: str, axis: int):
    """:meth:`QuantizedTensor.pack` of torch codes, in torch ops on their device."""
    import torch

    from .packing import _check_order

    order = _check_order(order)
    if bits == 8:
        return codes.to(torch.uint8).clone()
    if bits != 4:
        raise NotImplementedError(f"pack: {bits}-bit elements ({element}) have no specified packed layout")
    c = codes.movedim(axis, -1)
    n = c.shape[-1]
    if n % 2:
        raise ValueError(f"codes: length {n} along axis {axis} is odd; packing needs an even length "
                         f"(pad with a zero code first)")
    if c.dtype != torch.uint8:
        raise ValueError(f"codes: expected a uint8 tensor of 4-bit codes, got {c.dtype}")
    if c.numel() and int(c.max()) > 15:
        raise ValueError(f"codes: every entry must lie in 0..15, found {int(c.max())}")
    first, second = c[..., 0::2], c[..., 1::2]
    out = first | (second << 4) if order == "lo_first" else (first << 4) | second
    return out.movedim(-1, axis).contiguous()


__all__ = ["QuantizedTensor"]
