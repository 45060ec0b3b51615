"""The one table of differentiable operators, read by :mod:`spatialgrad.autograd` and :mod:`spatialgrad.torch`.

Each entry names the forward, its array arguments in positional order, which of them are differentiable, and a
backward that maps the output gradient to one gradient per array argument (``None`` where not differentiable or
not needed).
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import numpy as np

from . import functional as F

Grads = Tuple[Optional[np.ndarray], ...]


@dataclass(frozen=True)
class OpSpec:
    name: str
    forward: Callable[..., np.ndarray]
    arrays: Tuple[str, ...]  # array arguments, in positional order
    differentiable: Tuple[bool, ...]  # per array argument
    # backward(grad_out, arrays by name, the other arguments by name, needs per array) -> grads per array
    backward: Callable[[np.ndarray, Dict[str, np.ndarray], Dict[str, Any], Sequence[bool]], Grads]

    def bind(self, args, kwargs) -> Tuple[Dict[str, np.ndarray], Dict[str, Any]]:
        """Splits a call's arguments into (arrays, options), with defaults applied."""
        bound = inspect.signature(self.forward).bind(*args, **kwargs)
        bound.apply_defaults()
        arrays = {n: bound.arguments[n] for n in self.arrays}
        options = {k: v for k, v in bound.arguments.items() if k not in arrays}
        return arrays, options


def _pair(value) -> Tuple[Any, Any]:
    if isinstance(value, (tuple, list)):
        if len(value) == 1:
            return value[0], value[0]
        return value[0], value[1]
    return value, value


def _avg_pool2d_backward(g, arrays, o, needs) -> Grads:
    if not needs[0]:
        return (None,)
    return (F.avg_pool2d_backward(g, arrays["input"], **o),)


def _upsample_backward(g, arrays, o, needs) -> Grads:
    if not needs[0]:
        return (None,)
    x = arrays["input"]
    nhwc = str(o["layout"]).upper() == "NHWC"
    out_hw = g.shape[1:3] if nhwc else g.shape[2:4]
    scales = (0.0, 0.0) if o["scale_factor"] is None else tuple(float(s) for s in _pair(o["scale_factor"]))
    return (F.upsample_bilinear2d_backward(g, tuple(out_hw), x.shape, o["align_corners"], scales[0], scales[1],
                                           o["layout"]),)


def _grid_sample_backward(g, arrays, o, needs) -> Grads:
    if not (needs[0] or needs[1]):
        return (None, None)
    return tuple(F.grid_sampler_2d_backward(g, arrays["input"], arrays["grid"], o["mode"], o["padding_mode"],
                                            o["align_corners"], output_mask=(bool(needs[0]), bool(needs[1]))))


def _roi_align_backward(g, arrays, o, needs) -> Grads:
    if not needs[0]:
        return (None, None)
    ph, pw = _pair(o["output_size"])
    return (F.roi_align_backward(g, arrays["boxes"], arrays["input"].shape, ph, pw, o["spatial_scale"],
                                 o["sampling_ratio"], o["aligned"]), None)


def _ms_deform_attn_backward(g, arrays, o, needs) -> Grads:
    if not (needs[0] or needs[3] or needs[4]):
        return (None,) * 5
    grad_value, grad_loc, grad_attn = F.ms_deform_attn_backward(
        arrays["value"], arrays["spatial_shapes"], arrays["level_start_index"], arrays["sampling_locations"],
        arrays["attention_weights"], g)
    return (grad_value if needs[0] else None, None, None, grad_loc if needs[3] else None,
            grad_attn if needs[4] else None)


OPS: Dict[str, OpSpec] = {
    spec.name: spec
    for spec in [
        OpSpec("avg_pool2d", F.avg_pool2d, ("input",), (True,), _avg_pool2d_backward),
        OpSpec("upsample_bilinear2d", F.upsample_bilinear2d, ("input",), (True,), _upsample_backward),
        OpSpec("grid_sample", F.grid_sample, ("input", "grid"), (True, True), _grid_sample_backward),
        OpSpec("roi_align", F.roi_align, ("input", "boxes"), (True, False), _roi_align_backward),
        OpSpec("ms_deform_attn", F.ms_deform_attn,
               ("value", "spatial_shapes", "level_start_index", "sampling_locations", "attention_weights"),
               (True, False, False, True, True), _ms_deform_attn_backward),
    ]
}


def lookup(op) -> OpSpec:
    """The spec of an operator given by name or by its spatialgrad forward function."""
    if isinstance(op, str):
        if op in OPS:
            return OPS[op]
    else:
        for spec in OPS.values():
            if spec.forward is op:
                return spec
    names = ", ".join(OPS)
    raise ValueError(f"spatialgrad: expected one of the differentiable operators ({names}), but got {op!r}")
