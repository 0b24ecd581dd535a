"""``fp4spec.training.Linear``: a drop-in ``torch.nn.Linear`` whose three GEMMs follow a :class:`Recipe`.

The autograd function quantizes each GEMM's operands along that GEMM's reduction axis with
the public ``fp4spec.quantize`` and multiplies them:

* ``compute="dequantize"`` (the fast path): ``fp4spec.dequantize`` of each operand, converted
  to the recipe's compute dtype (bf16, RNE), then one ``torch.matmul`` -- torch tensors on
  their device throughout, no host synchronisation added here, no numpy;
* an accumulator model name: ``fp4spec.matmul(qa, qb, accumulator=...)`` on the operands
  laid out rows x K, bit-exact to that model (on Hopper, CUDA operands under ``sm90-bf16``,
  ``exact``, ``fp32`` and ``sm100-*`` run the triton GEMM -- the others by a per-output
  certificate, its unproved outputs on the CPU emulator; elsewhere the emulator: slow).

Normative steps of one GEMM ``C = A B^T`` (:func:`gemm`):

1. For each operand: if its scheme is None, its values are the tensor converted to the
   compute dtype. Otherwise, under ``scope="global"`` with a process group of more than one
   rank, a tensor whose rows the ranks split (x, dy) is first all-gathered along the rows
   unless quantizing it is row-local (no tensor scale, no SR, blocks that stay inside a
   rank's rows).
2. SR operands take their seed (``fp4spec.training.random_bits.call_seed_tensor``: the
   layer's seed, the GEMM, the operand and the layer's call counter, on the device).
3. ``q = fp4spec.quantize(t, scheme, axis=<reduction axis>, rounding, seed=<step 2's seed>,
   sr_bits, pad=True, rht=<the GEMM's RHT>, backend=recipe.backend)``: the SR bits are the
   Philox bits of that seed in t's row-major order, drawn on t's device.
4. ``values = fp4spec.dequantize(q).to(compute dtype)``; the rank's own rows are kept.
   (dgrad reuses fprop's weight values where that gives the same bits: 16x16 tiles, RNE, no
   RHT; ``weight_reusable``.)
5. ``C = A_values @ B_values^T``, converted to the output dtype (the stored tensors viewed
   transposed where the table of ``fp4spec.training.recipe`` says so).
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Callable

import torch

import fp4spec
from fp4spec.backends.base import HostFallbackWarning

from . import random_bits
from .recipe import DEQUANTIZE, GEMMS, Gemm, Operand, Recipe, get_recipe


@dataclasses.dataclass
class OperandRecord:
    """What one quantized operand of one GEMM call was (passed to ``Linear.on_operand``;
    ``call``: the layer's call counter, read back to the host for the record).

    ``source``: the high-precision tensor quantized (the all-gathered one under the global
    scope), stored layout; ``q``: its QuantizedTensor; ``values``: this rank's values as the
    GEMM used them (stored layout); ``rbits``: the SR bits or None; ``axis``: the reduction
    axis of the stored tensor."""

    layer: str
    call: int
    gemm: str
    tensor: str
    axis: int
    source: torch.Tensor
    q: fp4spec.QuantizedTensor
    values: torch.Tensor
    rbits: "torch.Tensor | None"


@dataclasses.dataclass
class LayerState:
    """Per-call context of one quantized linear: recipe, seeds (``keys``: the layer's
    :func:`~fp4spec.training.random_bits.operand_keys`), the call counter (a 0-d int64 tensor
    on the layer's device: step 2's counter), process group, hook."""

    recipe: Recipe
    name: str = ""
    layer_seed: int = 0
    call: "torch.Tensor | None" = None
    group: object = None
    on_operand: "Callable[[OperandRecord], None] | None" = None
    keys: "dict[str, int]" = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        if not self.keys:
            self.keys = random_bits.operand_keys(self.layer_seed)

    def world(self) -> int:
        return _world(self.group)


def _row_local(scheme, rounding: str, blocked_on_rows: bool, rows: int) -> bool:
    """True if quantizing a rank's rows alone gives the rows of the global tensor's quantization."""
    if scheme.global_scale is not None or rounding == "sr":
        return False
    if blocked_on_rows:
        return rows % scheme.block_size == 0
    return rows % scheme.tile_rows == 0


def _gather_rows(t: torch.Tensor, group):
    world = torch.distributed.get_world_size(group)
    parts = [torch.empty_like(t) for _ in range(world)]
    torch.distributed.all_gather(parts, t.contiguous(), group=group)
    rank = torch.distributed.get_rank(group)
    rows = t.shape[0]
    return torch.cat(parts, dim=0), slice(rank * rows, (rank + 1) * rows)


def _seed(op: Operand, st: LayerState, gemm: str, tensor: str):
    """Step 2: the SR seed of an operand (a 0-d int64 tensor), or None."""
    if op.rounding != "sr":
        return None
    return random_bits.call_seed_tensor(st.keys[f"{gemm}/{tensor}"], st.call)


def _drawn_rbits(op: Operand, seed, t: torch.Tensor):
    """The bits ``seed`` draws for t (stored layout); None without SR."""
    return None if seed is None else random_bits.draw(seed, t.shape, op.sr_bits, t.device)


def _quantize(op: Operand, t: torch.Tensor, axis: int, rht, st: LayerState, gemm: str, tensor: str,
              split_rows: bool):
    """Steps 1-3 for one quantized operand: (source, rbits, q, this rank's row slice or None)."""
    scheme = op.resolved
    own = None
    if split_rows and st.recipe.scope == "global" and st.world() > 1 and \
            not _row_local(scheme, op.rounding, axis == 0, t.shape[0]):
        t, own = _gather_rows(t, st.group)
    seed = _seed(op, st, gemm, tensor)
    q = fp4spec.quantize(t, scheme, axis=axis, rounding=op.rounding, seed=seed, sr_bits=op.sr_bits, pad=True,
                         rht=rht, backend=st.recipe.backend)
    rbits = _drawn_rbits(op, seed, t) if st.on_operand is not None else None
    return t, rbits, q, own


def operand_values(op: Operand, t: torch.Tensor, axis: int, rht, st: LayerState, gemm: str, tensor: str,
                   split_rows: bool, dtype) -> torch.Tensor:
    """Steps 1-4: this rank's values of one operand, in t's stored layout, as the GEMM uses them."""
    if not op.quantized:
        return t.to(dtype)
    source, rbits, q, own = _quantize(op, t, axis, rht, st, gemm, tensor, split_rows)
    values = fp4spec.dequantize(q).to(dtype)
    if own is not None:
        values = values[own]
    if st.on_operand is not None:
        st.on_operand(OperandRecord(st.name, int(st.call), gemm, tensor, axis, source, q, values, rbits))
    return values


def _model_product(g: Gemm, st: LayerState, gemm: str, a_spec, b_spec) -> torch.Tensor:
    """Step 5 under an accumulator model: both operands quantized rows x K, through fp4spec.matmul."""
    if st.world() > 1:
        raise NotImplementedError(f"compute: the accumulator model {g.compute!r} runs in one process; "
                                  f"use compute='dequantize' under torch.distributed")
    qs = []
    for op, (t, transposed, tensor, _split) in ((g.a, a_spec), (g.b, b_spec)):
        logical = (t.t() if transposed else t).contiguous()
        rbits = _drawn_rbits(op, _seed(op, st, gemm, tensor), t)  # drawn in the stored layout
        if rbits is not None and transposed:
            rbits = rbits.t().contiguous()
        q = fp4spec.quantize(logical, op.resolved, axis=-1, rounding=op.rounding, rbits=rbits, sr_bits=op.sr_bits,
                             pad=True, rht=g.rht, backend=st.recipe.backend, check_rbits=False)
        if st.on_operand is not None:
            values = fp4spec.dequantize(q)
            st.on_operand(OperandRecord(st.name, int(st.call), gemm, tensor, 1, logical, q, values, rbits))
        qs.append(q)
    with warnings.catch_warnings():  # outputs no device kernel computes run on the CPU emulator, as documented
        warnings.simplefilter("ignore", HostFallbackWarning)
        out = fp4spec.matmul(qs[0], qs[1], accumulator=g.compute)  # on the device where a kernel computes the model
    return out if isinstance(out, torch.Tensor) else torch.from_numpy(out).to(a_spec[0].device)


def gemm(g: Gemm, st: LayerState, name: str, a_spec, b_spec, dtype, lead=None, b_values=None) -> torch.Tensor:
    """``C = A B^T`` for one GEMM (module docstring, steps 1-5).

    ``a_spec``, ``b_spec``: ``(stored tensor, transposed, tensor name, rows split across ranks)``;
    the logical operand is the stored tensor, or its transpose when ``transposed``; it is
    quantized along the logical K axis (the stored tensor's axis 0 when transposed, else 1).
    Returns the float32 (model) or compute-dtype (dequantize) product, its rows reshaped to
    ``lead`` if given (computed in that shape: the result is not a view). ``b_values``: B's
    values already computed (stored layout), as :func:`weight_reusable` allows.
    """
    if g.compute != DEQUANTIZE:
        out = _model_product(g, st, name, a_spec, b_spec)
        return out if lead is None else out.reshape(*lead, out.shape[-1]).clone()
    sides = []
    for op, (t, transposed, tensor, split), given in ((g.a, a_spec, None), (g.b, b_spec, b_values)):
        v = given if given is not None else operand_values(op, t, 0 if transposed else 1, g.rht, st, name, tensor,
                                                           split, dtype)
        sides.append(v.t() if transposed else v)
    a = sides[0] if lead is None else sides[0].reshape(*lead, sides[0].shape[-1])
    return a @ sides[1].t()


_DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}


def weight_reusable(recipe: Recipe) -> bool:
    """True if dgrad's weight values equal fprop's, so the backward pass reuses them: the same
    operand, deterministic rounding, no RHT, square 2-D tiles (a tile's scale and codes do not
    depend on the direction it is read in: ``quantize(w, axis=0)`` and ``quantize(w, axis=1)``
    give the same values; tested), both GEMMs on the fast path."""
    f, d = recipe.fprop, recipe.dgrad
    if not (f.compute == d.compute == DEQUANTIZE and f.b == d.b and f.b.quantized):
        return False
    s = f.b.resolved
    return f.rht is None and d.rht is None and f.b.rounding != "sr" and s.is_2d and s.tile_rows == s.block_size


class QuantizedLinearFunction(torch.autograd.Function):
    """``y = x w^T + b`` with fprop, dgrad and wgrad as ``state.recipe`` says; x is (..., K)
    and runs as the 2-D (tokens x K) matrix of its rows."""

    @staticmethod
    def forward(ctx, x, weight, bias, call, state: LayerState, out_dtype):
        # ``call`` (state.call) is an input saved for backward: the backward GEMMs draw with
        # this call's counter value
        state = dataclasses.replace(state, call=call)
        dt = _DTYPES[state.recipe.compute_dtype]
        x2 = x.reshape(-1, x.shape[-1])
        fp = state.recipe.fprop
        reuse = weight_reusable(state.recipe)
        with torch.autocast(x.device.type, enabled=False):
            wv = operand_values(fp.b, weight, 1, fp.rht, state, "fprop", "w", False, dt) if reuse else None
            y = gemm(fp, state, "fprop", (x2, False, "x", True), (weight, False, "w", False), dt, lead=x.shape[:-1],
                     b_values=wv)
            y = y.to(out_dtype)
            if bias is not None:
                y = y + bias.to(out_dtype)
        ctx.save_for_backward(x2, weight, wv, call)
        ctx.state = dataclasses.replace(state, call=None)
        ctx.x_shape = x.shape
        ctx.bias_dtype = None if bias is None else bias.dtype
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, wv, call = ctx.saved_tensors
        st = dataclasses.replace(ctx.state, call=call)
        dt = _DTYPES[st.recipe.compute_dtype]
        dx = dw = db = None
        dy = dy.reshape(-1, dy.shape[-1]).contiguous()
        with torch.autocast(dy.device.type, enabled=False):
            if ctx.needs_input_grad[0]:
                dx = gemm(st.recipe.dgrad, st, "dgrad", (dy, False, "dy", True), (weight, True, "w", False), dt,
                          b_values=wv)
                dx = dx.to(x.dtype).reshape(ctx.x_shape)
            if ctx.needs_input_grad[1]:
                dw = gemm(st.recipe.wgrad, st, "wgrad", (dy, True, "dy", True), (x, True, "x", True), dt)
                dw = dw.to(weight.dtype)
            if ctx.bias_dtype is not None and ctx.needs_input_grad[2]:
                db = dy.float().sum(0).to(ctx.bias_dtype)
        return dx, dw, db, None, None, None


def _out_dtype(x: torch.Tensor):
    dev = x.device.type
    if torch.is_autocast_enabled(dev):
        return torch.get_autocast_dtype(dev)
    return x.dtype


def quantized_linear(x, weight, bias, state: LayerState):
    """The functional form of :class:`Linear`: ``x`` of shape (..., K), ``weight`` (N, K)."""
    return QuantizedLinearFunction.apply(x, weight, bias, state.call, state, _out_dtype(x))


class Linear(torch.nn.Linear):
    """A ``torch.nn.Linear`` whose fprop, dgrad and wgrad follow ``recipe`` (a :class:`Recipe`
    or a preset name). Same parameters, state-dict keys and call signature as
    ``torch.nn.Linear``.

    ``name`` (the module's name in its model) seeds its SR bits with ``recipe.seed``
    (:mod:`fp4spec.training.random_bits`); ``calls`` (a 0-d int64 tensor on the weight's
    device, moved with the module, not in the state dict) counts forward calls under autograd:
    the SR bits' counter (save and restore it with :func:`counters` and :func:`set_counters`
    when resuming). ``process_group``:
    the data-parallel group for ``scope="global"`` (None: the default group when
    torch.distributed is initialized). ``on_operand``: None or a callable receiving an
    :class:`OperandRecord` for every quantized operand (tests, audits).

    Under ``torch.compile`` the layer is traced whole (``fullgraph=True`` works): the quantize
    and dequantize calls are custom operators (:mod:`fp4spec.api.torch_library`), the SR seeds
    and bits are tensor arithmetic in the graph and the counter is a tensor the graph replaces
    each call, so one graph serves every step. Three cases run eagerly
    (``torch.compiler.disable``, a graph break): an ``on_operand`` hook, an accumulator-model
    GEMM (``fp4spec.matmul``) and more than one rank (the all-gather of ``scope="global"``).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None, *,
                 recipe: "Recipe | str" = "nvfp4", name: str = "", process_group=None):
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self._setup(recipe, name, process_group)

    def _setup(self, recipe, name: str, process_group) -> None:
        self.recipe = get_recipe(recipe)
        self.name = name
        self.layer_seed = random_bits.derive(self.recipe.seed, name)
        self.operand_keys = random_bits.operand_keys(self.layer_seed)
        self.calls = torch.zeros((), dtype=torch.int64, device=self.weight.device)
        self.process_group = process_group
        self.on_operand = None

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, recipe: "Recipe | str", name: str = "", process_group=None):
        """A Linear sharing ``linear``'s parameters (no copy)."""
        new = cls.__new__(cls)
        torch.nn.Module.__init__(new)
        new.in_features, new.out_features = linear.in_features, linear.out_features
        new.weight = linear.weight
        new.bias = linear.bias
        new._setup(recipe, name, process_group)
        return new

    def extra_repr(self) -> str:
        return super().extra_repr() + f", recipe={self.recipe.name}"

    def forward(self, x):
        if not self.recipe.quantized:
            return torch.nn.functional.linear(x, self.weight, self.bias)
        group = self.process_group
        if group is None and torch.distributed.is_available() and torch.distributed.is_initialized():
            group = torch.distributed.group.WORLD
        traced = self.on_operand is None and _world(group) == 1 and \
            all(self.recipe.gemm(g).compute == DEQUANTIZE for g in GEMMS)
        return self._quantized_forward(x, group) if traced else self._eager_forward(x, group)

    def _apply(self, fn, recurse=True):
        """``Module._apply`` (``.to()``, ``.cuda()``, ``.to_empty()``...), the counter moved as a
        buffer would be; a counter on the meta device (a model built there) holds no value and
        becomes a zero one."""
        out = super()._apply(fn, recurse)
        moved = fn(self.calls)
        self.calls = torch.zeros_like(moved) if self.calls.is_meta else moved
        return out

    def _next_call(self) -> torch.Tensor:
        """This call's counter value; calls under autograd advance it (evaluation draws no new bits).

        The counter is a plain tensor attribute, replaced on every call, not a buffer updated in
        place: the compiled backward pass must see this call's value (torch 2.13's AOTAutograd
        saves an in-place-updated buffer itself, whose later value a backward then reads), and
        replacing a registered buffer mutates the module's buffer dict, which makes dynamo refuse
        to read the scheme tables (mapping proxies) later in the same graph."""
        call = self.calls
        if torch.is_grad_enabled():
            self.calls = call + 1
        return call

    def _quantized_forward(self, x, group):
        state = LayerState(self.recipe, self.name, self.layer_seed, self._next_call(), group, self.on_operand,
                           self.operand_keys)
        return quantized_linear(x, self.weight, self.bias, state)

    @torch.compiler.disable
    def _eager_forward(self, x, group):
        return self._quantized_forward(x, group)


def _world(group) -> int:
    if group is None or not torch.distributed.is_available() or not torch.distributed.is_initialized():
        return 1
    return torch.distributed.get_world_size(group)


def convert(model: torch.nn.Module, recipe: "Recipe | str", *, skip=(), process_group=None) -> torch.nn.Module:
    """Replace every ``torch.nn.Linear`` of ``model`` (in place) by a :class:`Linear` with ``recipe``,
    except those whose name (``model.named_modules()``) matches a pattern of ``skip`` or of
    ``recipe.keep_high_precision`` (``fnmatch``: ``"lm_head"``, ``"*.attn.*"``). Parameters are
    shared, not copied: convert before building the optimizer and before wrapping in DDP/FSDP.
    A recipe that quantizes nothing (``bf16``) leaves the model as it is. Returns ``model``.
    """
    rec = get_recipe(recipe)
    if isinstance(skip, str):
        skip = (skip,)
    keep = rec.replace(keep_high_precision=rec.keep_high_precision + tuple(skip))
    if not rec.quantized:
        return model
    targets = [(n, m) for n, m in model.named_modules()
               if type(m) is torch.nn.Linear and n and not keep.keeps(n)]
    for name, mod in targets:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, Linear.from_linear(mod, rec, name, process_group))
    return model


def quantized_layers(model: torch.nn.Module) -> dict[str, Linear]:
    """The :class:`Linear` modules of ``model`` by their recipe name (``Linear.name``)."""
    return {m.name: m for m in model.modules() if isinstance(m, Linear)}


def counters(model: torch.nn.Module) -> dict[str, int]:
    """Every quantized layer's forward-call counter, as ints (save it with a checkpoint; reads
    the counters back to the host)."""
    return {n: int(m.calls) for n, m in quantized_layers(model).items()}


def set_counters(model: torch.nn.Module, state: dict) -> None:
    """Restore :func:`counters` (the SR bits continue as if the run had not stopped)."""
    layers = quantized_layers(model)
    missing = sorted(set(state) - set(layers))
    if missing:
        raise ValueError(f"state: counters for layers the model does not have: {', '.join(missing)}")
    for n, calls in state.items():
        layers[n].calls = torch.full((), int(calls), dtype=torch.int64, device=layers[n].calls.device)


__all__ = ["weight_reusable", "Linear", "LayerState", "OperandRecord", "QuantizedLinearFunction", "convert", "counters", "gemm",
           "operand_values", "quantized_layers", "quantized_linear", "set_counters"]
