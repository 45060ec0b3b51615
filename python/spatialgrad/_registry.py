"""The one table of operators (``OPERATORS``): it makes :mod:`spatialgrad.functional`'s exports, the functions
:mod:`spatialgrad.autograd` differentiates, :mod:`spatialgrad.torch`'s adapters list (and their TorchScript and
torch.fx plumbing) and ``patch()``'s operators.

Each operator lists its functions (the forward, its backward, and for grid_sample and ms_deform_attn a
second-order kernel) as ``OpSpec``s: the array arguments in positional order, which of them are
differentiable, and the pullback: the vjp of the function written as one call of another function. The vjp of
a forward is its backward; the vjp of a linear backward (avg_pool2d, upsample, roi_align) is its forward again,
so those differentiate to any order; the vjp of the grid_sample and ms_deform_attn backwards is their
second-order kernel, which has no pullback (a third derivative raises). The pullbacks only pass arrays along
and read shapes, so the same entries serve NumPy arrays (``OpSpec.backward``) and torch tensors
(``spatialgrad.torch`` applies each call as an autograd Function, which is what makes ``create_graph=True``
work).
"""
from __future__ import annotations

import functools
import importlib
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import numpy as np

from .functional._args import explain_argument_errors, short_repr

Grads = Tuple[Optional[np.ndarray], ...]


@dataclass(frozen=True)
class Call:
    """One call of a registered entry, and which of its outputs is the gradient of each array argument of
    the entry being differentiated (``None``: no gradient)."""

    op: str
    arrays: Dict[str, Any]
    options: Dict[str, Any]
    grads: Tuple[Optional[int], ...]


# pullback(cotangents per output (None = zeros), arrays by name, options by name, needs per array) -> Call
Pullback = Callable[[Tuple[Any, ...], Dict[str, Any], Dict[str, Any], Sequence[bool]], Call]


@dataclass(frozen=True)
class OpSpec:
    name: str
    forward: Callable[..., Any]
    arrays: Tuple[str, ...]  # array arguments, in positional order
    differentiable: Tuple[bool, ...]  # per array argument
    outputs: int  # 1: returns an array; k > 1: returns a tuple of k (array or None)
    pullback: Optional[Pullback]  # None: no further derivative (a third-order gradient)

    def bind(self, args, kwargs) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        """Splits a call's arguments into (arrays, options), with defaults applied."""
        bound = _signature(self.forward).bind(*args, **kwargs)
        bound.apply_defaults()
        arrays = {n: bound.arguments[n] for n in self.arrays}
        options = {k: v for k, v in bound.arguments.items() if k not in arrays}
        return arrays, options

    def backward(self, cotangents, arrays: Dict[str, Any], options: Dict[str, Any], needs: Sequence[bool]) -> Grads:
        """The gradients of the arrays (NumPy): ``cotangents`` is the output gradient, or a tuple of them."""
        if self.outputs == 1 and not isinstance(cotangents, tuple):
            cotangents = (cotangents,)
        needs = [bool(n) and d for n, d in zip(needs, self.differentiable)]
        if not any(needs) or all(c is None for c in cotangents):
            return (None,) * len(self.arrays)
        call = pullback_call(self, cotangents, arrays, options, needs)
        return gather_grads(call, as_tuple(OPS[call.op].forward(**call.arrays, **call.options)), needs)


@functools.lru_cache(maxsize=None)
def _signature(fn) -> inspect.Signature:
    return inspect.signature(fn)  # once per function: every torch call binds its options


def pullback_call(spec: OpSpec, cotangents, arrays, options, needs) -> Call:
    if spec.pullback is None:
        raise NotImplementedError(
            f"spatialgrad: {spec.name} has no derivative (it is already a second-order gradient; third-order "
            f"gradients of {_FIRST_OF[spec.name]} are not implemented)")
    return spec.pullback(tuple(cotangents), arrays, options, needs)


def as_tuple(out) -> tuple:
    return out if isinstance(out, tuple) else (out,)


def gather_grads(call: Call, outputs: tuple, needs: Sequence[bool]) -> tuple:
    return tuple(outputs[i] if (i is not None and need) else None for i, need in zip(call.grads, needs))


def _pair(value) -> Tuple[Any, Any]:
    if isinstance(value, (tuple, list)):
        if len(value) == 1:
            return value[0], value[0]
        return value[0], value[1]
    return value, value


def _shape(array) -> Tuple[int, ...]:
    return tuple(int(s) for s in array.shape)


# ---- forwards: their vjp is their backward ------------------------------------------------------------

def _avg_pool2d_vjp(g, arrays, o, needs) -> Call:
    return Call("avg_pool2d_backward", dict(grad_output=g[0], input=arrays["input"]), dict(o), (0,))


def _upsample_vjp(g, arrays, o, needs) -> Call:
    nhwc = str(o["layout"]).upper() == "NHWC"
    out_hw = _shape(g[0])[1:3] if nhwc else _shape(g[0])[2:4]
    scales = (0.0, 0.0) if o["scale_factor"] is None else tuple(float(s) for s in _pair(o["scale_factor"]))
    return Call("upsample_bilinear2d_backward", dict(grad_output=g[0]),
                dict(output_size=out_hw, input_size=_shape(arrays["input"]), align_corners=o["align_corners"],
                     scales_h=scales[0], scales_w=scales[1], layout=o["layout"]), (0,))


def _grid_sample_vjp(g, arrays, o, needs) -> Call:
    return Call("grid_sampler_2d_backward", dict(grad_output=g[0], input=arrays["input"], grid=arrays["grid"]),
                dict(mode=o["mode"], padding_mode=o["padding_mode"], align_corners=o["align_corners"],
                     output_mask=(bool(needs[0]), bool(needs[1]))), (0, 1))


def _roi_align_vjp(g, arrays, o, needs) -> Call:
    ph, pw = _pair(o["output_size"])
    return Call("roi_align_backward", dict(grad_output=g[0], boxes=arrays["boxes"]),
                dict(input_shape=_shape(arrays["input"]), pooled_height=ph, pooled_width=pw,
                     spatial_scale=o["spatial_scale"], sampling_ratio=o["sampling_ratio"], aligned=o["aligned"]),
                (0, None))


_DEFORM_INPUTS = ("value", "spatial_shapes", "level_start_index", "sampling_locations", "attention_weights")


def _ms_deform_attn_vjp(g, arrays, o, needs) -> Call:
    return Call("ms_deform_attn_backward", dict({k: arrays[k] for k in _DEFORM_INPUTS}, grad_output=g[0]), {},
                (0, None, None, 1, 2))


# ---- backwards: linear ones differentiate into their forward, the others into a second-order kernel ----

def _avg_pool2d_backward_vjp(g, arrays, o, needs) -> Call:
    return Call("avg_pool2d", dict(input=g[0]), dict(o), (0, None))


def _upsample_backward_vjp(g, arrays, o, needs) -> Call:
    scales = (o["scales_h"] or 0.0, o["scales_w"] or 0.0)
    return Call("upsample_bilinear2d", dict(input=g[0]),
                dict(output_size=tuple(_pair(o["output_size"])),
                     scale_factor=scales if max(scales) > 0 else None,
                     align_corners=o["align_corners"], layout=o["layout"]), (0,))


def _roi_align_backward_vjp(g, arrays, o, needs) -> Call:
    return Call("roi_align", dict(input=g[0], boxes=arrays["boxes"]),
                dict(output_size=(o["pooled_height"], o["pooled_width"]), spatial_scale=o["spatial_scale"],
                     sampling_ratio=o["sampling_ratio"], aligned=o["aligned"]), (0, None))


def _grid_sampler_2d_backward_vjp(g, arrays, o, needs) -> Call:
    mask = tuple(o["output_mask"])
    # A gradient the backward did not compute has no cotangent.
    u = g[0] if mask[0] else None
    v = g[1] if mask[1] else None
    return Call("grid_sampler_2d_double_backward",
                dict(grad_grad_input=u, grad_grad_grid=v, grad_output=arrays["grad_output"], input=arrays["input"],
                     grid=arrays["grid"]),
                dict(mode=o["mode"], padding_mode=o["padding_mode"], align_corners=o["align_corners"],
                     output_mask=tuple(bool(n) for n in needs)), (0, 1, 2))


def _ms_deform_attn_backward_vjp(g, arrays, o, needs) -> Call:
    return Call("ms_deform_attn_double_backward",
                dict({k: arrays[k] for k in _DEFORM_INPUTS + ("grad_output",)}, grad_grad_value=g[0],
                     grad_grad_sampling_locations=g[1], grad_grad_attention_weights=g[2]), {},
                (0, None, None, 1, 2, 3))


@dataclass(frozen=True)
class Operator:
    """One operator: its NumPy functions (the forward first, then its backward and any second-order kernel),
    and whether ``spatialgrad.torch.patch()`` routes PyTorch's calls to it. The forward's name is the
    operator's name in ``spatialgrad``, ``spatialgrad.torch`` (an adapter of that name) and ``patch()``."""

    functions: Tuple[OpSpec, ...]
    patched: bool

    @property
    def name(self) -> str:
        return self.functions[0].name


def _functions(module: str, *entries) -> Tuple[OpSpec, ...]:
    """The specs of the functions of ``spatialgrad.functional.<module>``, each entry (name, arrays,
    differentiable, outputs, pullback). The functions are the exported ones (explaining a non-array argument)."""
    found = importlib.import_module(f"{__package__}.functional.{module}")
    return tuple(OpSpec(name, explain_argument_errors(getattr(found, name)), *rest) for name, *rest in entries)


# THE list of operators: adding one adds an entry here (in this order: spatialgrad.torch's and patch()'s).
# Every function listed is exported by spatialgrad.functional (and spatialgrad); every operator gets a
# spatialgrad.torch adapter of its forward's name, with its TorchScript and torch.fx plumbing.
OPERATORS: Tuple[Operator, ...] = (
    Operator(_functions(
        "roi_align",
        ("roi_align", ("input", "boxes"), (True, False), 1, _roi_align_vjp),
        ("roi_align_backward", ("grad_output", "boxes"), (True, False), 1, _roi_align_backward_vjp),
    ), patched=True),
    Operator(_functions(
        "upsample_bilinear2d",
        ("upsample_bilinear2d", ("input",), (True,), 1, _upsample_vjp),
        ("upsample_bilinear2d_backward", ("grad_output",), (True,), 1, _upsample_backward_vjp),
    ), patched=True),
    Operator(_functions(
        "avg_pool2d",
        ("avg_pool2d", ("input",), (True,), 1, _avg_pool2d_vjp),
        # input only lends its shape and dtype to avg_pool2d_backward.
        ("avg_pool2d_backward", ("grad_output", "input"), (True, False), 1, _avg_pool2d_backward_vjp),
    ), patched=True),
    Operator(_functions(
        "grid_sampler_2d",
        ("grid_sample", ("input", "grid"), (True, True), 1, _grid_sample_vjp),
        ("grid_sampler_2d_backward", ("grad_output", "input", "grid"), (True, True, True), 2,
         _grid_sampler_2d_backward_vjp),
        ("grid_sampler_2d_double_backward", ("grad_grad_input", "grad_grad_grid", "grad_output", "input", "grid"),
         (True,) * 5, 3, None),
    ), patched=True),
    Operator(_functions(
        "ms_deform_attn",
        ("ms_deform_attn", _DEFORM_INPUTS, (True, False, False, True, True), 1, _ms_deform_attn_vjp),
        ("ms_deform_attn_backward", _DEFORM_INPUTS + ("grad_output",), (True, False, False, True, True, True), 3,
         _ms_deform_attn_backward_vjp),
        ("ms_deform_attn_double_backward",
         _DEFORM_INPUTS + ("grad_output", "grad_grad_value", "grad_grad_sampling_locations",
                           "grad_grad_attention_weights"), (True, False, False, True, True, True, True, True, True),
         4, None),
    ), patched=False),
)

# Every NumPy function by name (the entries spatialgrad.torch's autograd Function applies).
OPS: Dict[str, OpSpec] = {spec.name: spec for operator in OPERATORS for spec in operator.functions}

# The forward each function belongs to, for messages.
_FIRST_OF = {spec.name: operator.name for operator in OPERATORS for spec in operator.functions}

# What differentiable_ops() lists and vjp() accepts: every entry with a pullback.
DIFFERENTIABLE = tuple(name for name, spec in OPS.items() if spec.pullback is not None)


def lookup(op, among: Sequence[str] = DIFFERENTIABLE) -> OpSpec:
    """The spec of an operator given by name or by its spatialgrad function."""
    if isinstance(op, str):
        if op in among:
            return OPS[op]
    else:
        for name in among:
            if OPS[name].forward is op:
                return OPS[name]
    # The forwards only: all names with the backwards and a long op came to 320 characters.
    names = ", ".join(name for name in among if not name.endswith("backward"))
    raise ValueError(f"spatialgrad: expected one of the differentiable operators ({names} or their backwards: "
                     f"spatialgrad.autograd.differentiable_ops()), but got {short_repr(op)}")
