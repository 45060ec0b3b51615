"""RoIAlign, average mode (torchvision ``roi_align`` / aclnnRoiAlignV2 semantics)."""
from __future__ import annotations

import operator
from typing import Sequence

import numpy as np

from .. import _core
from .._declare import Call, declare, pair, shape
from .. import _strict
from .._args import IntOrPair, int_list, short_repr

__all__ = ["roi_align", "roi_align_backward"]


def _int(value, name: str, op: str) -> int:
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{op}(): expected {name} to be an int, but got {short_repr(value)}") from None


def core_sampling_ratio(value, op: str) -> int:
    """torchvision's sampling_ratio as the core's: torchvision's meaning, in both spatialgrad's NumPy and PyTorch
    APIs (and their ONNX export), is ``<= 0`` adaptive. The C++ core and the aclnn C API keep the NPU's rule (``>=
    0``, 0 adaptive, negative an error), so the mapping is here for Python (and in csrc/torch/roi_align.cpp's
    make_params for the native operators, which C++ callers reach without Python)."""
    return max(_int(value, "sampling_ratio", op), 0)


def _float(value, name: str, op: str) -> float:
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{op}(): expected {name} to be a float, but got {short_repr(value)}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{op}(): expected {name} to be a float, but got {short_repr(value)}") from None


def roi_align(
    input: np.ndarray,
    boxes: np.ndarray,
    output_size: IntOrPair,
    spatial_scale: float = 1.0,
    sampling_ratio: int = 0,
    aligned: bool = True,
) -> np.ndarray:
    """Average of bilinear samples over each bin of each region of interest.

    Note: ``aligned`` defaults to ``True`` here (pixel-centre aligned boxes, the recommended setting),
    while ``torchvision.ops.roi_align`` defaults to ``aligned=False``.

    Args:
        input: ``(B, C, H, W)`` array, float16, bfloat16, float32 or float64, any strides.
        boxes: ``(K, 5)`` array of rows ``(batch_index, x1, y1, x2, y2)`` in input-image coordinates,
            of the input's dtype; ROI k samples image ``floor(batch_index)``, which must be in ``[0, B)``.
        output_size: ``P`` or ``(PH, PW)``, the bins per ROI.
        spatial_scale: multiplies the box coordinates (feature size / image size); finite and > 0.
        sampling_ratio: samples per bin along each axis; ``0`` or negative (torchvision's ``-1``) = adaptive,
            ``ceil(roi_size / P)`` per axis.
        aligned: shift the box corners by -0.5 pixel (and do not force boxes to at least 1 pixel).

    Returns:
        ``(K, C, PH, PW)`` array of the input dtype. Boxes with NaN/Inf coordinates give zeros.

    Raises:
        ValueError: invalid shapes or parameters. IndexError: a batch index outside ``[0, B)`` (or NaN).
        TypeError: unsupported dtype, or boxes of another dtype than input.

    Example::

        x, boxes = np.random.rand(2, 3, 16, 16), np.array([[1, 2.0, 2.0, 10.0, 8.0]])
        y = spatialgrad.roi_align(x, boxes, 7, spatial_scale=1.0, sampling_ratio=2)  # (1, 3, 7, 7)
    """
    if _strict.chip is not None:
        _strict.enforce("roi_align", locals())
    op = "roi_align"
    return _core.roi_align(
        input,
        boxes,
        int_list(output_size, "output_size", op),
        _float(spatial_scale, "spatial_scale", op),
        core_sampling_ratio(sampling_ratio, op),
        bool(aligned),
    )


def roi_align_backward(
    grad_output: np.ndarray,
    boxes: np.ndarray,
    input_shape: Sequence[int],
    pooled_height: int,
    pooled_width: int,
    spatial_scale: float,
    sampling_ratio: int,
    aligned: bool,
) -> np.ndarray:
    """Gradient of :func:`roi_align` with respect to its input (aclnnRoiAlignV2Backward).

    Args:
        grad_output: ``(K, C, pooled_height, pooled_width)`` gradient of the pooled output.
        boxes: the forward's ``(K, 5)`` boxes, of grad_output's dtype.
        input_shape: ``(B, C, H, W)``, the forward input's shape.
        Other arguments as in :func:`roi_align`.

    Returns:
        ``grad_input`` of shape ``input_shape`` and grad_output's dtype.

    Example::

        boxes = np.array([[1, 2.0, 2.0, 10.0, 8.0]])
        grad_x = spatialgrad.roi_align_backward(np.ones((1, 3, 7, 7)), boxes, (2, 3, 16, 16), 7, 7, 1.0, 2, True)
    """
    if _strict.chip is not None:
        _strict.enforce("roi_align_backward", locals())
    op = "roi_align_backward"
    return _core.roi_align_backward(
        grad_output,
        boxes,
        int_list(input_shape, "input_shape", op),
        _int(pooled_height, "pooled_height", op),
        _int(pooled_width, "pooled_width", op),
        _float(spatial_scale, "spatial_scale", op),
        core_sampling_ratio(sampling_ratio, op),
        bool(aligned),
    )


# ---- the operator's entry in the table of operators (spatialgrad._registry) ----------------------------------

# Both functions are linear in their first array, so each one's vjp is the other (any order); boxes get no
# gradient.

def _forward_vjp(g, arrays, o, needs) -> Call:
    ph, pw = pair(o["output_size"])
    return Call("roi_align_backward", dict(grad_output=g[0], boxes=arrays["boxes"]),
                dict(input_shape=shape(arrays["input"]), pooled_height=ph, pooled_width=pw,
                     spatial_scale=o["spatial_scale"], sampling_ratio=o["sampling_ratio"], aligned=o["aligned"]),
                (0, None))


def _backward_vjp(g, arrays, o, needs) -> Call:
    return Call("roi_align", dict(input=g[0], boxes=arrays["boxes"]),
                dict(output_size=(o["pooled_height"], o["pooled_width"]), spatial_scale=o["spatial_scale"],
                     sampling_ratio=o["sampling_ratio"], aligned=o["aligned"]), (0, None))


OPERATOR = declare(
    (roi_align, ("input", "boxes"), (True, False), 1, _forward_vjp),
    (roi_align_backward, ("grad_output", "boxes"), (True, False), 1, _backward_vjp),
    patched=True)
