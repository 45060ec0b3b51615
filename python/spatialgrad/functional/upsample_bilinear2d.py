"""Bilinear 2-D upsampling (PyTorch ``upsample_bilinear2d`` / aclnnUpsampleBilinear2d semantics)."""
from __future__ import annotations

import operator
from typing import Optional, Sequence, Union

import numpy as np

from .. import _core
from .._declare import Call, declare, pair, shape
from .. import _strict
from .._args import IntOrPair, int_list, short_repr

__all__ = ["upsample_bilinear2d", "upsample_bilinear2d_backward"]

FloatOrPair = Union[float, Sequence[float]]


def _size_pair(value: IntOrPair, name: str, op: str) -> list[int]:
    """An int means the same size for H and W; a sequence is passed on (the core checks it has 2 entries)."""
    sizes = int_list(value, name, op)
    if isinstance(value, (tuple, list)):
        return sizes
    try:
        operator.index(value)
        return sizes * 2
    except TypeError:
        return sizes


def _scale_pair(value: Optional[FloatOrPair], name: str, op: str) -> tuple[float, float]:
    """None -> (0, 0) ("not given"); a number -> the same for H and W; else exactly two numbers."""
    if value is None:
        return 0.0, 0.0
    if type(value) is float or type(value) is int:  # the common case, without np.ndim's ~1 us
        return float(value), float(value)
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{op}(): expected {name} to be a number or a pair of numbers, but got {short_repr(value)}")
    if np.ndim(value) == 0:
        values = [value]
    else:
        values = list(value)
    try:
        values = [0.0 if v is None else float(v) for v in values]
    except (TypeError, ValueError):
        raise TypeError(f"{op}(): expected {name} to be a number or a pair of numbers, but got "
                        f"{short_repr(value)}") from None
    if len(values) == 1:
        return values[0], values[0]
    if len(values) != 2:
        raise ValueError(f"{op}(): expected {name} to have 2 entries (H, W), but got {len(values)} "
                         f"({short_repr(value)})")
    return values[0], values[1]


def _scale(value: Optional[float], name: str, op: str) -> float:
    """One scale: None -> 0.0 ("not given")."""
    if type(value) is float or type(value) is int:  # the common case (the default 0.0), kept cheap
        return float(value)
    if value is not None and (isinstance(value, (str, bytes)) or np.ndim(value) != 0):
        raise TypeError(f"{op}(): expected {name} to be a number or None, but got {short_repr(value)}")
    return _scale_pair(value, name, op)[0]


def _array(value, name: str, op: str) -> np.ndarray:
    if not isinstance(value, np.ndarray):
        raise TypeError(f"{op}(): expected {name} to be a NumPy array, but got {type(value).__name__}")
    return value


def _layout(layout: str, op: str) -> str:
    if not isinstance(layout, str):
        raise TypeError(f"{op}(): expected layout to be a string (\"NCHW\" or \"NHWC\"), but got {short_repr(layout)}")
    return layout  # the core parses it (case-insensitive) and rejects unknown names with a ValueError


def upsample_bilinear2d(
    input: np.ndarray,
    output_size: Optional[IntOrPair] = None,
    scale_factor: Optional[FloatOrPair] = None,
    align_corners: bool = False,
    layout: str = "NCHW",
) -> np.ndarray:
    """Bilinear resampling of the two spatial dimensions.

    Args:
        input: ``(N, C, H, W)`` array (``(N, H, W, C)`` when ``layout="NHWC"``), float16, bfloat16, float32 or
            float64, any strides; H, W >= 1 (N or C may be 0: the result is empty).
        output_size: ``s`` or ``(oH, oW)``, each >= 1.
        scale_factor: ``f`` or ``(fH, fW)``. Give ``output_size``, ``scale_factor`` or both: with only
            scale factors the output size is ``floor(in * f)``; with both, ``output_size`` fixes the
            shape and the factors fix the coordinate ratio (``1 / f``), as in aclnn and
            ``torch.ops.aten.upsample_bilinear2d``. A factor <= 0 counts as not given.
        align_corners: map the corner pixel centres onto each other (ratio ``(in - 1) / (out - 1)``);
            the scale factors are then ignored.
        layout: ``"NCHW"`` or ``"NHWC"`` (case-insensitive).

    Returns:
        ``(N, C, oH, oW)`` (or ``(N, oH, oW, C)``) array of the input dtype.

    Raises:
        ValueError: invalid sizes, unknown layout, neither output_size nor scale_factor.
        TypeError: unsupported dtype or argument type.

    Example::

        x = np.random.rand(1, 3, 4, 4)
        y = spatialgrad.upsample_bilinear2d(x, scale_factor=2.0)  # (1, 3, 8, 8), float64
    """
    if _strict.chip is not None:
        _strict.enforce("upsample_bilinear2d", locals())
    op = "upsample_bilinear2d"
    if output_size is None and scale_factor is None:
        raise ValueError(f"{op}(): expected output_size or scale_factor, but got neither")
    scales_h, scales_w = _scale_pair(scale_factor, "scale_factor", op)
    size = None if output_size is None else _size_pair(output_size, "output_size", op)
    return _core.upsample_bilinear2d(_array(input, "input", op), size, bool(align_corners), scales_h, scales_w,
                                     _layout(layout, op))


def upsample_bilinear2d_backward(
    grad_output: np.ndarray,
    output_size: IntOrPair,
    input_size: Sequence[int],
    align_corners: bool = False,
    scales_h: Optional[float] = 0.0,
    scales_w: Optional[float] = 0.0,
    layout: str = "NCHW",
) -> np.ndarray:
    """Gradient of :func:`upsample_bilinear2d` with respect to its input (aclnnUpsampleBilinear2dBackwardV2).

    Args:
        grad_output: ``(N, C, oH, oW)`` (``(N, oH, oW, C)`` for NHWC) gradient of the output.
        output_size: ``(oH, oW)`` (an int means both), each >= 1.
        input_size: ``(N, C, H, W)`` (``(N, H, W, C)`` for NHWC) of the forward input.
        align_corners: as in :func:`upsample_bilinear2d`.
        scales_h, scales_w: the forward's scale factors; ``<= 0`` or ``None`` means not given. They change
            only the coordinate ratio, never the sizes.
        layout: ``"NCHW"`` or ``"NHWC"`` (case-insensitive).

    Returns:
        ``grad_input`` of shape ``input_size``.

    Example::

        g = np.ones((1, 3, 8, 8))
        grad_x = spatialgrad.upsample_bilinear2d_backward(g, (8, 8), (1, 3, 4, 4), scales_h=2.0, scales_w=2.0)
    """
    if _strict.chip is not None:
        _strict.enforce("upsample_bilinear2d_backward", locals())
    op = "upsample_bilinear2d_backward"
    return _core.upsample_bilinear2d_backward(
        _array(grad_output, "grad_output", op),
        _size_pair(output_size, "output_size", op),
        int_list(input_size, "input_size", op),
        bool(align_corners),
        _scale(scales_h, "scales_h", op),
        _scale(scales_w, "scales_w", op),
        _layout(layout, op),
    )


# ---- the operator's entry in the table of operators (spatialgrad._registry) ----------------------------------

# Both functions are linear, so each one's vjp is the other (any order).

def _forward_vjp(g, arrays, o, needs) -> Call:
    nhwc = str(o["layout"]).upper() == "NHWC"
    out_hw = shape(g[0])[1:3] if nhwc else shape(g[0])[2:4]
    scales = (0.0, 0.0) if o["scale_factor"] is None else tuple(float(s) for s in pair(o["scale_factor"]))
    return Call("upsample_bilinear2d_backward", dict(grad_output=g[0]),
                dict(output_size=out_hw, input_size=shape(arrays["input"]), align_corners=o["align_corners"],
                     scales_h=scales[0], scales_w=scales[1], layout=o["layout"]), (0,))


def _backward_vjp(g, arrays, o, needs) -> Call:
    scales = (o["scales_h"] or 0.0, o["scales_w"] or 0.0)
    return Call("upsample_bilinear2d", dict(input=g[0]),
                dict(output_size=tuple(pair(o["output_size"])),
                     scale_factor=scales if max(scales) > 0 else None,
                     align_corners=o["align_corners"], layout=o["layout"]), (0,))


OPERATOR = declare(
    (upsample_bilinear2d, ("input",), (True,), 1, _forward_vjp),
    (upsample_bilinear2d_backward, ("grad_output",), (True,), 1, _backward_vjp),
    patched=True)
