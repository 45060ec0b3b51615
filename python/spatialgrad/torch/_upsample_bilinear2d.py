"""``spatialgrad.torch.upsample_bilinear2d``: the adapter of ``F.interpolate(..., mode="bilinear")``, its
TorchScript branch and ``patch()``'s replacements of ``F.interpolate``, ``F.upsample`` and ``F.upsample_bilinear``."""
import math
import warnings
from typing import List, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from .. import _strict
from . import _onnx
from ._common import (BroadcastingList2, apply, empty_like_kernel, fake, ints, is_channels_last, native_operator,
                      package, public, script_branch, try_native)
from ._patch import SPATIALGRAD_ERRORS, Routes, covered, named_like, original_or_clearer_error

_native_upsample_bilinear2d = native_operator("upsample_bilinear2d")


def upsample_bilinear2d(input: Tensor, size: Optional[BroadcastingList2[int]] = None,
                        scale_factor: Optional[BroadcastingList2[float]] = None, align_corners: Optional[bool] = None,
                        recompute_scale_factor: Optional[bool] = None) -> Tensor:
    """Bilinear upsampling (or downsampling), differentiable; ``F.interpolate(..., mode="bilinear")``'s arguments.

    Args:
        input: ``(N, C, H, W)`` CPU tensor, float16, bfloat16, float32 or float64; a ``channels_last`` input is
            computed in NHWC without copies and gives a ``channels_last`` result.
        size: ``(OH, OW)`` or one int for both; give either ``size`` or ``scale_factor``.
        scale_factor: a float or ``(sh, sw)``, each > 0; the output is ``floor(H * sh)`` by ``floor(W * sw)``.
        align_corners: whether the corner pixels' centres of input and output coincide (``None``, the default,
            means False).
        recompute_scale_factor: with ``scale_factor``, compute the coordinates from the output size instead
            of the given factor.

    Returns:
        ``(N, C, OH, OW)`` of the input's dtype.

    Raises:
        ValueError: not 4-D, both or neither of ``size`` and ``scale_factor``, sizes < 1, a non-CPU tensor.
        TypeError: a dtype other than those listed.

    Example::

        y = spatialgrad.torch.upsample_bilinear2d(torch.rand(1, 3, 4, 4), scale_factor=2, align_corners=False)
        assert y.shape == (1, 3, 8, 8)
    """
    if torch.jit.is_scripting():
        return _upsample_bilinear2d_from_script(input, size, scale_factor, align_corners, recompute_scale_factor)
    if isinstance(input, torch.Tensor) and input.dim() != 4:  # (torch.fx's Proxy: checked when the graph runs)
        raise ValueError(f"spatialgrad.torch.upsample_bilinear2d(): expected a 4-D input, but got {input.dim()}-D")
    if recompute_scale_factor and scale_factor is not None:
        # PyTorch then derives the size and uses the size ratio for the coordinates.
        sh, sw = (scale_factor, scale_factor) if not isinstance(scale_factor, (tuple, list)) else scale_factor
        size = (int(math.floor(input.shape[2] * sh)), int(math.floor(input.shape[3] * sw)))
        scale_factor = None
    if package.native and _strict.chip is None and (size is not None or scale_factor is not None):
        # The operator computes a channels_last input in NHWC (and returns channels_last), as below.
        out = try_native(_native_upsample_bilinear2d, input, ints(size, both=True), bool(align_corners),
                         None if scale_factor is None else ints(scale_factor))
        if out is not None:
            return out
    options = dict(output_size=size, scale_factor=scale_factor, align_corners=bool(align_corners))
    channels_last = not input.is_contiguous() and input.is_contiguous(memory_format=torch.channels_last)
    if channels_last:
        out = apply("upsample_bilinear2d", [input.permute(0, 2, 3, 1)], dict(options, layout="NHWC"))
        return out.permute(0, 3, 1, 2)
    return apply("upsample_bilinear2d", [input], dict(options, layout="NCHW"))


def _upsample_bilinear2d_native_script(input: Tensor, size: Optional[List[int]], scale_factor: Optional[List[float]],
                                       align_corners: Optional[bool],
                                       recompute_scale_factor: Optional[bool]) -> Tensor:
    if recompute_scale_factor is not None and recompute_scale_factor and scale_factor is not None:
        # PyTorch then derives the size and uses the size ratio for the coordinates (as the adapter does).
        size = [int(math.floor(input.size(2) * scale_factor[0])), int(math.floor(input.size(3) * scale_factor[1]))]
        scale_factor = None
    return torch.ops.spatialgrad.upsample_bilinear2d(input, size, align_corners is not None and align_corners,
                                                     scale_factor)


def _scaled_size(size, scale: float):
    """floor(size * scale), as the core's upsample_bilinear2d_output_size (``size`` may be symbolic)."""
    if isinstance(size, int):
        return int(math.floor(size * scale))
    return torch.sym_int(size * scale)  # (truncation: the floor of a positive product)


@fake("upsample_bilinear2d")
def _upsample_bilinear2d_fake(input, output_size, align_corners, scale_factors):
    if output_size is not None:
        extents = list(output_size) * (2 // len(output_size))
    else:
        scales = list(scale_factors) * (2 // len(scale_factors))
        extents = [_scaled_size(input.shape[2 + i], scales[i]) for i in range(2)]
    return empty_like_kernel(input, list(input.shape[:2]) + extents, channels_last=is_channels_last(input))


@fake("upsample_bilinear2d_backward")
def _upsample_bilinear2d_backward_fake(grad_output, output_size, input_size, align_corners, scale_factors,
                                       memory_format=None):
    nhwc = (memory_format == torch.channels_last if memory_format is not None else is_channels_last(grad_output))
    return empty_like_kernel(grad_output, input_size, channels_last=nhwc and len(input_size) == 4)


def _interpolate(original):
    def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                    recompute_scale_factor=None, antialias=False):
        args = (input, size, scale_factor, mode, align_corners, recompute_scale_factor, antialias)
        if not (mode == "bilinear" and not antialias and covered(input) and input.dim() == 4
                and (size is None) != (scale_factor is None)):
            return original(*args)
        try:
            return upsample_bilinear2d(input, size, scale_factor, align_corners, recompute_scale_factor)
        except SPATIALGRAD_ERRORS as error:
            return original_or_clearer_error(error, original, *args)
    return named_like(interpolate, original)


def _upsample(original, interpolate):
    def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
        warnings.warn("F.upsample is deprecated in PyTorch: use F.interpolate (routed the same way)")
        return interpolate(input, size, scale_factor, mode, align_corners)
    return named_like(upsample, original)


def _upsample_bilinear(original, interpolate):
    def upsample_bilinear(input, size=None, scale_factor=None):
        warnings.warn("F.upsample_bilinear is deprecated in PyTorch: use F.interpolate(..., mode='bilinear', "
                      "align_corners=True) (routed the same way)")
        return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)
    return named_like(upsample_bilinear, original)


def _replacements(now):
    """patch()'s replacements: F.interpolate's, and the deprecated names routed through it."""
    interpolate = _interpolate(now[(F, "interpolate")])
    return {(F, "interpolate"): interpolate, (F, "upsample"): _upsample(now[(F, "upsample")], interpolate),
            (F, "upsample_bilinear"): _upsample_bilinear(now[(F, "upsample_bilinear")], interpolate)}


# ---- ONNX export (spatialgrad.torch._onnx registers ONNX) --------------------------------------------------

def _onnx_symbolic(g, input, output_size, align_corners, scale_factors):
    """spatialgrad::upsample_bilinear2d (aten's .vec schema) -> Resize, as PyTorch exports F.interpolate: linear,
    align_corners or half_pixel, the given scales (with the batch and channel scales 1) or sizes."""
    _onnx.require_opset(g, "upsample_bilinear2d", 11, "Resize with coordinate_transformation_mode")
    corners = _onnx.constant(align_corners, "upsample_bilinear2d", "align_corners")
    attributes = dict(coordinate_transformation_mode_s="align_corners" if corners else "half_pixel", mode_s="linear",
                      cubic_coeff_a_f=-0.75, nearest_mode_s="floor")  # (the last two unused: PyTorch writes them)
    roi = _onnx.omitted(g)
    scales = _onnx.constant(scale_factors, "upsample_bilinear2d", "scale_factors")
    if scales is not None:
        scales = g.op("Concat", _onnx.const(g, [1.0, 1.0], torch.float32),
                      _onnx.const(g, _onnx.pair(scales), torch.float32), axis_i=0)
        return g.op("Resize", input, roi, scales, **attributes)
    size = _onnx.python_value(output_size)
    size = output_size if isinstance(size, torch._C.Value) else _onnx.const(g, _onnx.pair(size))
    batch_and_channels = _onnx.slice_of(g, g.op("Shape", input), 0, 2, 0)
    sizes = g.op("Concat", batch_and_channels, g.op("Cast", size, to_i=_onnx.INT64), axis_i=0)
    return g.op("Resize", input, roi, _onnx.omitted(g), sizes, **attributes)


# This operator's entry of spatialgrad.torch's list (see its __init__.py).
PUBLIC = public(upsample_bilinear2d)
ONNX = _onnx_symbolic
_upsample_bilinear2d_from_script = script_branch(upsample_bilinear2d, _upsample_bilinear2d_native_script)
PATCH = Routes(targets=lambda: [(F, "interpolate"), (F, "upsample"), (F, "upsample_bilinear")],
               replace=_replacements, described="""\
``F.interpolate``, ``F.upsample``, ``F.upsample_bilinear`` (``nn.Upsample``,
``nn.UpsamplingBilinear2d``) in bilinear mode on 4-D input""")
REPLACES = '``torch.nn.functional.interpolate(..., mode="bilinear")``'
