"""``spatialgrad.torch.avg_pool2d``: the adapter of ``F.avg_pool2d``, its TorchScript branch and ``patch()``'s
replacement of ``F.avg_pool2d``."""
from typing import List, Optional, Sequence

import torch
from torch._prims_common import suggest_memory_format  # (c10's rule, as the CPU kernels read it)
import torch.nn.functional as F
from torch import Tensor

from .. import _strict
from . import _onnx
from ._common import (BroadcastingList2, apply, empty_like_kernel, fake, ints, native_operator, package, public,
                      script_branch, try_native)
from ._patch import Routes, covered, each, named_like, ours_or_original

_native_avg_pool2d = native_operator("avg_pool2d")


def avg_pool2d(input: Tensor, kernel_size: BroadcastingList2[int], stride: Optional[BroadcastingList2[int]] = None,
               padding: BroadcastingList2[int] = 0, ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: Optional[int] = None) -> Tensor:
    """Average pooling over the last two dimensions, differentiable; the arguments of ``F.avg_pool2d``.

    Args:
        input: ``(N, C, H, W)`` or ``(C, H, W)`` CPU tensor, float16, bfloat16, float32 or float64, any strides.
        kernel_size: ``k`` or ``(kH, kW)``, each > 0.
        stride: ``s`` or ``(sH, sW)``, each > 0; ``None`` (default) means ``kernel_size``.
        padding: ``p`` or ``(pH, pW)`` of implicit zeros, ``0 <= p <= k // 2`` (default 0).
        ceil_mode: round the output size up (default False).
        count_include_pad: divide by the window size including the padding (default True), otherwise by the
            number of input pixels in the window.
        divisor_override: divide every window by this value instead (default ``None``: not set).

    Returns:
        ``(N, C, OH, OW)`` (or ``(C, OH, OW)``) of the input's dtype, ``O = floor((I + 2p - k) / s) + 1``
        (``ceil`` with ``ceil_mode``, dropping a last window that starts in the padding).

    Raises:
        ValueError: bad sizes or parameters, or a non-CPU tensor. TypeError: a dtype other than those listed.

    Example::

        y = spatialgrad.torch.avg_pool2d(torch.rand(2, 3, 8, 8, requires_grad=True), 2)  # (2, 3, 4, 4)
        y.sum().backward()
    """
    if torch.jit.is_scripting():
        return _avg_pool2d_from_script(input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                                       divisor_override)
    if package.native and _strict.chip is None:
        out = try_native(_native_avg_pool2d, input, ints(kernel_size), ints(stride), ints(padding), ceil_mode,
                         count_include_pad, divisor_override)
        if out is not None:
            return out
    return apply("avg_pool2d", [input], dict(kernel_size=kernel_size, stride=stride, padding=padding,
                                              ceil_mode=ceil_mode, count_include_pad=count_include_pad,
                                              divisor_override=divisor_override))


def _avg_pool2d_native_script(input: Tensor, kernel_size: List[int], stride: Optional[List[int]],
                              padding: List[int], ceil_mode: bool, count_include_pad: bool,
                              divisor_override: Optional[int]) -> Tensor:
    no_stride: List[int] = []  # (the operator's default: the kernel size)
    return torch.ops.spatialgrad.avg_pool2d(input, kernel_size, no_stride if stride is None else stride, padding,
                                            ceil_mode, count_include_pad, divisor_override)


def _pooled_size(size, kernel: int, stride: int, padding: int, ceil_mode: bool):
    """An output extent (integer operations only: ``size`` may be symbolic), as the core's
    ``avg_pool2d_output_shape``: floor (or ceil) of the window count, without a last window starting in the
    padding."""
    out = (size + 2 * padding - kernel + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + padding:
        out = out - 1
    return out


@fake("avg_pool2d")  # (the schema's defaults: a caller may leave them out)
def _avg_pool2d_fake(input, kernel_size, stride=(), padding=(0,), ceil_mode=False, count_include_pad=True,
                     divisor_override=None):
    kernel = list(kernel_size) * (2 // len(kernel_size))
    steps = list(stride) * (2 // len(stride)) if len(stride) else kernel
    pads = list(padding) * (2 // len(padding))
    planes = input.shape[:-2]
    extents = [_pooled_size(input.shape[-2 + i], kernel[i], steps[i], pads[i], ceil_mode) for i in range(2)]
    return empty_like_kernel(input, list(planes) + extents, channels_last=_channels_last_output(input))


@fake("avg_pool2d_backward")
def _avg_pool2d_backward_fake(grad_output, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                              divisor_override):
    return empty_like_kernel(grad_output, input.shape, channels_last=_channels_last_output(input))


def _channels_last_output(input) -> bool:
    """Both kernels' outputs follow the input's suggested memory format (4-D), as aten's (csrc/torch/avg_pool2d.cpp)."""
    return input.dim() == 4 and suggest_memory_format(input) == torch.channels_last


def _replacement(original):
    """patch()'s replacement of F.avg_pool2d, over `original`, the function it replaces."""
    def routed_avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                          divisor_override=None):
        args = (input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
        if not (covered(input) and input.dim() in (3, 4)):
            return original(*args)
        return ours_or_original(avg_pool2d, original, *args)
    return named_like(routed_avg_pool2d, original)


# ---- ONNX export (spatialgrad.torch._onnx registers ONNX) --------------------------------------------------

# PyTorch before 2.1 exports count_include_pad=True as an explicit Pad before AveragePool; later versions use
# AveragePool's count_include_pad attribute. avg_pool2d follows the running PyTorch, so that patch() changes
# no op type of a model's graph.
_PYTORCH_PADS_EXPLICITLY = tuple(int(part) for part in torch.__version__.split(".")[:2]) < (2, 1)


def _ceil_extra(input, kernel: Sequence[int], stride: Sequence[int], padding: Sequence[int],
                ceil_mode: bool) -> List[int]:
    """The padding ceil_mode adds past each axis' end: its last window reaches that far beyond the padded input.
    Written as explicit end padding (with ceil_mode=0), because ONNX's and PyTorch's ceil_mode differ there."""
    if not ceil_mode or all(s == 1 for s in stride):  # stride 1: ceil and floor give the same windows
        return [0, 0]
    spatial = _onnx.known_sizes(input)[-2:]  # as the exporter sees them: dynamic axes are None
    if len(spatial) != 2 or None in spatial:
        raise _onnx.fail("avg_pool2d", "a static height and width with ceil_mode=True and a stride > 1 (the "
                         "last window depends on them)", f"sizes {spatial or 'unknown'} (export without dynamic "
                         "axes 2 and 3 there, or use ceil_mode=False)")
    extra = []
    for size, k, s, p in zip(spatial, kernel, stride, padding):
        out = _pooled_size(size, k, s, p, True)
        extra.append(max(0, (out - 1) * s + k - (size + 2 * p)))
    return extra


def _average_pool(g, input, kernel, stride, pads, count_include_pad: bool):
    return g.op("AveragePool", input, kernel_shape_i=kernel, strides_i=stride, pads_i=pads, ceil_mode_i=0,
                count_include_pad_i=int(count_include_pad))


def _pool_4d(g, input, kernel, stride, padding, extra, count_include_pad, divisor):
    """avg_pool2d of a 4-D input, windows and divisors as PyTorch's."""
    before, after = list(padding), [p + e for p, e in zip(padding, extra)]
    if divisor is not None:
        # Window sums (every window lies in the padded input: the divisor is kH * kW), then the divisor.
        summed = _average_pool(g, input, kernel, stride, before + after, True)
        return g.op("Mul", summed, _onnx.const(g, kernel[0] * kernel[1] / divisor, _onnx.dtype_of(input)))
    if count_include_pad and (_PYTORCH_PADS_EXPLICITLY or any(extra)):
        # PyTorch divides by the window clipped to the padded input: pad with zeros, then count what is in it.
        padded = g.op("Pad", input, _onnx.const(g, [0, 0] + before + [0, 0] + before), mode_s="constant")
        return _average_pool(g, padded, kernel, stride, [0, 0] + extra, False)
    return _average_pool(g, input, kernel, stride, before + after, count_include_pad)


def _onnx_symbolic(g, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    """spatialgrad::avg_pool2d (aten's schema) -> AveragePool."""
    _onnx.require_opset(g, "avg_pool2d", 11, "AveragePool and Pad as PyTorch exports them")
    kernel = _onnx.pair(_onnx.constant(kernel_size, "avg_pool2d", "kernel_size"))
    stride = _onnx.pair(_onnx.constant(stride, "avg_pool2d", "stride") or kernel)
    padding = _onnx.pair(_onnx.constant(padding, "avg_pool2d", "padding"))
    ceil = bool(_onnx.constant(ceil_mode, "avg_pool2d", "ceil_mode"))
    divisor = _onnx.constant(divisor_override, "avg_pool2d", "divisor_override")
    extra = _ceil_extra(input, kernel, stride, padding, ceil)
    include_pad = bool(_onnx.constant(count_include_pad, "avg_pool2d", "count_include_pad"))
    if len(_onnx.traced_sizes(g, 0)) != 3:
        return _pool_4d(g, input, kernel, stride, padding, extra, include_pad, divisor)
    batched = _onnx.unsqueeze(g, input, [0])  # (C, H, W): AveragePool takes (N, C, H, W)
    return _onnx.squeeze(g, _pool_4d(g, batched, kernel, stride, padding, extra, include_pad, divisor), [0])


# This operator's entry of spatialgrad.torch's list (see its __init__.py).
PUBLIC = public(avg_pool2d)
ONNX = _onnx_symbolic
_avg_pool2d_from_script = script_branch(avg_pool2d, _avg_pool2d_native_script)
PATCH = Routes(targets=lambda: [(F, "avg_pool2d")], replace=each(_replacement),
               described="``F.avg_pool2d`` (``nn.AvgPool2d``)")
REPLACES = "``torch.nn.functional.avg_pool2d``"
