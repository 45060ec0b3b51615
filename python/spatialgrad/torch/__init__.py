"""Differentiable PyTorch functions backed by spatialgrad's CPU kernels.

Importing this module needs PyTorch; ``import spatialgrad`` does not. Signatures and defaults follow the
PyTorch/torchvision/mmcv functions they replace:

========================  ======================================================================
``roi_align``             ``torchvision.ops.roi_align``
``upsample_bilinear2d``   ``torch.nn.functional.interpolate(..., mode="bilinear")``
``avg_pool2d``            ``torch.nn.functional.avg_pool2d``
``grid_sample``           ``torch.nn.functional.grid_sample``
``ms_deform_attn``        mmcv ``MultiScaleDeformableAttnFunction.apply`` (``im2col_step`` is ignored)
========================  ======================================================================

CPU tensors are shared with the kernels without copies (inputs are viewed through their strides, outputs are
wrapped with ``torch.from_numpy``); float16, bfloat16, float32 and float64 tensors are supported (bfloat16
crosses as its raw bits, still without copies). Gradients are computed only for inputs that require them.
Backward passes are differentiable (``create_graph=True``): avg_pool2d, upsample_bilinear2d and roi_align to
any order, grid_sample and ms_deform_attn to second order; a third derivative of those two raises a
RuntimeError naming the operator.
"""
import math
import os
from typing import List, Optional, Sequence, Union

import numpy as np
import torch
from torch import Tensor
from torch._jit_internal import BroadcastingList2

from .. import _core
from .._registry import OPS, OpSpec, as_tuple, gather_grads, pullback_call
from ..bfloat16 import bfloat16_bits, is_bfloat16

__all__ = ["roi_align", "upsample_bilinear2d", "avg_pool2d", "grid_sample", "ms_deform_attn",
           "ms_deform_attn_reference", "patch", "nn"]


def _to_numpy(t: Optional[torch.Tensor], op: str, name: str) -> Optional[np.ndarray]:
    """A NumPy view of a CPU tensor (no copy); bfloat16 as marked bit patterns (spatialgrad.bfloat16)."""
    if t is None:  # an absent cotangent
        return None
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"spatialgrad.torch.{op}(): expected {name} to be a torch.Tensor, but got {type(t).__name__}")
    if t.device.type != "cpu":
        raise ValueError(f"spatialgrad.torch.{op}(): expected {name} to be a CPU tensor, but got device {t.device}")
    t = t.detach()
    if t.dtype == torch.bfloat16:
        return bfloat16_bits(t.view(torch.int16).numpy())
    return t.numpy()


def _to_torch(a: Optional[np.ndarray]) -> Optional[torch.Tensor]:
    if a is None:
        return None
    if is_bfloat16(a):
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


class _SpatialgradFunction(torch.autograd.Function):
    """One autograd Function for every registry entry (forwards, backwards, second-order kernels).

    Its backward applies the entry's pullback call (``_registry``) as another _SpatialgradFunction, so with
    ``create_graph=True`` the backward is itself recorded and differentiable: the linear operators to any
    order, grid_sample and ms_deform_attn to second order (a third derivative raises a clear error).
    """

    @staticmethod
    def forward(ctx, spec: OpSpec, options: dict, *tensors: Optional[torch.Tensor]):
        arrays = {name: _to_numpy(t, spec.name, name) for name, t in zip(spec.arrays, tensors)}
        options = spec.bind((), dict(arrays, **options))[1]  # defaults filled in: the pullbacks read them
        out = spec.forward(**arrays, **options)
        ctx.spec, ctx.options = spec, options
        ctx.save_for_backward(*tensors)
        ctx.set_materialize_grads(False)  # a None cotangent stays None (zeros) down to the kernels
        if spec.outputs == 1:
            return _to_torch(out)
        return tuple(_to_torch(o) for o in out)

    @staticmethod
    def backward(ctx, *grads: Optional[torch.Tensor]):
        spec: OpSpec = ctx.spec
        tensors = ctx.saved_tensors
        needs = [bool(n) and d for n, d in zip(ctx.needs_input_grad[2:], spec.differentiable)]
        if not any(needs) or all(g is None for g in grads):
            return (None, None) + (None,) * len(tensors)
        arrays = dict(zip(spec.arrays, tensors))
        try:
            call = pullback_call(spec, grads, arrays, ctx.options, needs)
        except NotImplementedError as e:
            raise RuntimeError(f"spatialgrad.torch: {e}") from None
        target = OPS[call.op]
        outputs = as_tuple(_SpatialgradFunction.apply(target, call.options,
                                                      *(call.arrays[name] for name in target.arrays)))
        return (None, None) + gather_grads(call, outputs, needs)


# Whether this process has looked for a DataLoader worker yet (reset in forked children).
_threads_followed = False


def _forget_threads_followed() -> None:
    global _threads_followed
    _threads_followed = False


os.register_at_fork(after_in_child=_forget_threads_followed)


def _follow_torch_threads_in_workers() -> None:
    """In a DataLoader worker, spatialgrad's default thread count follows torch's (which the DataLoader sets
    to 1 there), so that num_workers processes do not each run a pool of one thread per core. Checked on
    the first call of each process; spatialgrad.set_num_threads still wins (it overrides the default)."""
    global _threads_followed
    if _threads_followed:
        return
    _threads_followed = True
    if torch.utils.data.get_worker_info() is not None:
        _core.set_default_num_threads(torch.get_num_threads())


def _apply(name: str, tensors: Sequence[torch.Tensor], options: dict) -> torch.Tensor:
    _follow_torch_threads_in_workers()
    return _SpatialgradFunction.apply(OPS[name], options, *tensors)


def avg_pool2d(input: Tensor, kernel_size: BroadcastingList2[int], stride: Optional[BroadcastingList2[int]] = None,
               padding: BroadcastingList2[int] = 0, ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: Optional[int] = None) -> Tensor:
    """Differentiable ``F.avg_pool2d`` (3-D or 4-D input)."""
    if torch.jit.is_scripting():
        return _avg_pool2d_from_script(input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                                       divisor_override)
    return _apply("avg_pool2d", [input], dict(kernel_size=kernel_size, stride=stride, padding=padding,
                                               ceil_mode=ceil_mode, count_include_pad=count_include_pad,
                                               divisor_override=divisor_override))


def upsample_bilinear2d(input: Tensor, size: Optional[BroadcastingList2[int]] = None,
                        scale_factor: Optional[BroadcastingList2[float]] = None, align_corners: Optional[bool] = None,
                        recompute_scale_factor: Optional[bool] = None) -> Tensor:
    """Differentiable ``F.interpolate(input, size, scale_factor, mode="bilinear", align_corners, ...)``.

    A ``channels_last`` input is computed in NHWC without copies and gives a ``channels_last`` result, as in PyTorch.
    """
    if torch.jit.is_scripting():
        return _upsample_bilinear2d_from_script(input, size, scale_factor, align_corners, recompute_scale_factor)
    if input.dim() != 4:
        raise ValueError(f"spatialgrad.torch.upsample_bilinear2d(): expected a 4-D input, but got {input.dim()}-D")
    if recompute_scale_factor and scale_factor is not None:
        # PyTorch then derives the size and uses the size ratio for the coordinates.
        sh, sw = (scale_factor, scale_factor) if not isinstance(scale_factor, (tuple, list)) else scale_factor
        size = (int(math.floor(input.shape[2] * sh)), int(math.floor(input.shape[3] * sw)))
        scale_factor = None
    options = dict(output_size=size, scale_factor=scale_factor, align_corners=bool(align_corners))
    channels_last = not input.is_contiguous() and input.is_contiguous(memory_format=torch.channels_last)
    if channels_last:
        out = _apply("upsample_bilinear2d", [input.permute(0, 2, 3, 1)], dict(options, layout="NHWC"))
        return out.permute(0, 3, 1, 2)
    return _apply("upsample_bilinear2d", [input], dict(options, layout="NCHW"))


def grid_sample(input: Tensor, grid: Tensor, mode: str = "bilinear", padding_mode: str = "zeros",
                align_corners: Optional[bool] = None) -> Tensor:
    """Differentiable ``F.grid_sample`` for 4-D input (``align_corners=None`` means False, as in PyTorch)."""
    if torch.jit.is_scripting():
        return _grid_sample_from_script(input, grid, mode, padding_mode, align_corners)
    return _apply("grid_sample", [input, grid], dict(mode=mode, padding_mode=padding_mode,
                                                      align_corners=bool(align_corners)))


def _boxes_k5(boxes: Union[torch.Tensor, List[torch.Tensor]], dtype: torch.dtype) -> torch.Tensor:
    """torchvision's box formats: a (K, 5) tensor, or a list of (L_i, 4) tensors, one per image."""
    if isinstance(boxes, (list, tuple)):
        parts = [torch.cat([torch.full((b.shape[0], 1), i, dtype=b.dtype), b], dim=1) for i, b in enumerate(boxes)]
        boxes = torch.cat(parts, dim=0) if parts else torch.zeros((0, 5), dtype=dtype)
    return boxes.detach()


def roi_align(input: Tensor, boxes: Union[Tensor, List[Tensor]], output_size: BroadcastingList2[int],
              spatial_scale: float = 1.0, sampling_ratio: int = -1, aligned: bool = False) -> Tensor:
    """Differentiable ``torchvision.ops.roi_align`` (same defaults: ``sampling_ratio=-1`` adaptive, ``aligned=False``)."""
    if torch.jit.is_scripting():
        return _roi_align_from_script(input, boxes, output_size, spatial_scale, sampling_ratio, aligned)
    return _apply("roi_align", [input, _boxes_k5(boxes, input.dtype)],
                  dict(output_size=output_size, spatial_scale=float(spatial_scale),
                       sampling_ratio=max(int(sampling_ratio), 0), aligned=bool(aligned)))


def ms_deform_attn(value: Tensor, spatial_shapes: Tensor, level_start_index: Tensor, sampling_locations: Tensor,
                   attention_weights: Tensor, im2col_step: int = 64) -> Tensor:
    """Differentiable multi-scale deformable attention, mmcv argument order; returns (bs, Q, nH*C).

    ``im2col_step`` is accepted for compatibility and ignored (the CPU kernel needs no batching of columns).
    ``sampling_locations`` and ``attention_weights`` are cast to ``value``'s dtype, as mmcv does.
    """
    if torch.jit.is_scripting():
        return _ms_deform_attn_from_script(value, spatial_shapes, level_start_index, sampling_locations,
                                           attention_weights)
    # mmcv casts the points to value's dtype (AMP: float16 value, float32 locations); the casts are part of
    # the graph, so each input's gradient comes back in its own dtype.
    sampling_locations = sampling_locations.to(value.dtype)
    attention_weights = attention_weights.to(value.dtype)
    return _apply("ms_deform_attn", [value, spatial_shapes, level_start_index, sampling_locations,
                                     attention_weights], {})


def ms_deform_attn_reference(value: torch.Tensor, spatial_shapes: torch.Tensor, sampling_locations: torch.Tensor,
                             attention_weights: torch.Tensor) -> torch.Tensor:
    """Multi-scale deformable attention composed of PyTorch ops (mmcv's CPU fallback formula).

    Each level of ``value`` is sampled with ``F.grid_sample`` (bilinear, zeros padding, ``align_corners=False``)
    at ``2 * location - 1`` and the samples are summed with the attention weights. It allocates temporaries of
    size bs*nH*C*Q*L*P; it is here as the reference that tests, benchmarks and examples compare against.
    Shapes as in :func:`ms_deform_attn`; returns (bs, Q, nH*C).
    """
    bs, _, heads, channels = value.shape
    _, queries, _, levels, points, _ = sampling_locations.shape
    sizes = [(int(h), int(w)) for h, w in spatial_shapes]  # a tensor, an array or a list of pairs
    grids = 2 * sampling_locations - 1
    sampled = []
    for level, (value_level, (h, w)) in enumerate(zip(value.split([h * w for h, w in sizes], dim=1), sizes)):
        # (bs, H*W, nH, C) -> (bs*nH, C, H, W)
        image = value_level.flatten(2).transpose(1, 2).reshape(bs * heads, channels, h, w)
        # (bs, Q, nH, P, 2) -> (bs*nH, Q, P, 2)
        grid = grids[:, :, :, level].transpose(1, 2).flatten(0, 1)
        sampled.append(torch.nn.functional.grid_sample(image, grid, mode="bilinear", padding_mode="zeros",
                                                       align_corners=False))
    # (bs, Q, nH, L, P) -> (bs*nH, 1, Q, L*P)
    weights = attention_weights.transpose(1, 2).reshape(bs * heads, 1, queries, levels * points)
    out = (torch.stack(sampled, dim=-2).flatten(-2) * weights).sum(-1)
    return out.view(bs, heads * channels, queries).transpose(1, 2).contiguous()


# torch.fx: symbolic tracing records each adapter as one leaf call (as torchvision does for roi_align) instead
# of tracing into it, where NumPy cannot take Proxy arguments.
for _name in ("roi_align", "upsample_bilinear2d", "avg_pool2d", "grid_sample", "ms_deform_attn"):
    torch.fx.wrap(_name)
del _name

from . import nn  # noqa: E402  (modules built on the functions above)
from ._patch import patch  # noqa: E402


# TorchScript: a scripted function or module calling an adapter compiles only its `is_scripting()` branch,
# which calls one of these (torch.jit.ignore: TorchScript calls back into Python, where the adapter runs in
# eager mode). Scripted models therefore work in Python; saved with torch.jit.save, they cannot run these
# calls outside Python.
@torch.jit.ignore
def _avg_pool2d_from_script(input: Tensor, kernel_size: List[int], stride: Optional[List[int]], padding: List[int],
                            ceil_mode: bool, count_include_pad: bool, divisor_override: Optional[int]) -> Tensor:
    return avg_pool2d(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


@torch.jit.ignore
def _upsample_bilinear2d_from_script(input: Tensor, size: Optional[List[int]], scale_factor: Optional[List[float]],
                                     align_corners: Optional[bool], recompute_scale_factor: Optional[bool]) -> Tensor:
    return upsample_bilinear2d(input, size, scale_factor, align_corners, recompute_scale_factor)


@torch.jit.ignore
def _grid_sample_from_script(input: Tensor, grid: Tensor, mode: str, padding_mode: str,
                             align_corners: Optional[bool]) -> Tensor:
    return grid_sample(input, grid, mode, padding_mode, align_corners)


@torch.jit.ignore
def _roi_align_from_script(input: Tensor, boxes: Union[Tensor, List[Tensor]], output_size: List[int],
                           spatial_scale: float, sampling_ratio: int, aligned: bool) -> Tensor:
    return roi_align(input, boxes, output_size, spatial_scale, sampling_ratio, aligned)


@torch.jit.ignore
def _ms_deform_attn_from_script(value: Tensor, spatial_shapes: Tensor, level_start_index: Tensor,
                                sampling_locations: Tensor, attention_weights: Tensor) -> Tensor:
    return ms_deform_attn(value, spatial_shapes, level_start_index, sampling_locations, attention_weights)
