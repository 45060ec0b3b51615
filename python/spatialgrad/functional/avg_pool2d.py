"""2-D average pooling (PyTorch ``avg_pool2d`` / aclnnAvgPool2d semantics)."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .. import _core
from .._declare import Call, declare
from .. import _strict
from .._args import IntOrPair, int_list

__all__ = ["avg_pool2d", "avg_pool2d_backward"]


def _divisor(divisor_override: Optional[int], op: str) -> int:
    return 0 if divisor_override is None else int_list(divisor_override, "divisor_override", op)[0]


def avg_pool2d(
    input: np.ndarray,
    kernel_size: IntOrPair,
    stride: Optional[IntOrPair] = None,
    padding: IntOrPair = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: Optional[int] = None,
) -> np.ndarray:
    """Average pooling over the last two dimensions.

    Args:
        input: ``(N, C, H, W)`` or ``(C, H, W)`` array, float16, bfloat16, float32 or float64, any strides.
        kernel_size: ``k`` or ``(kH, kW)``, each > 0.
        stride: ``s`` or ``(sH, sW)``, each > 0; ``None`` (or ``()``) means ``kernel_size``.
        padding: ``p`` or ``(pH, pW)``; implicit zeros, ``0 <= p <= k // 2``.
        ceil_mode: round the output size up (a last window that would start in the right padding is dropped).
        count_include_pad: divide by the window size including padding (clipped at the padded edge);
            otherwise by the number of input pixels in the window.
        divisor_override: divide every window by this value instead (``None`` or ``0``: not set).

    Returns:
        ``(N, C, OH, OW)`` or ``(C, OH, OW)`` array of the input dtype, with
        ``O = floor((I + 2p - k [+ s - 1 if ceil_mode]) / s) + 1``.

    Raises:
        ValueError: invalid sizes or parameters. TypeError: unsupported dtype.

    Example::

        x = np.random.rand(2, 3, 8, 8).astype(np.float32)
        y = spatialgrad.avg_pool2d(x, 3, stride=2, padding=1)  # (2, 3, 4, 4)
    """
    if _strict.chip is not None:
        _strict.enforce("avg_pool2d", locals())
    op = "avg_pool2d"
    return _core.avg_pool2d(
        input,
        int_list(kernel_size, "kernel_size", op),
        int_list(stride, "stride", op),
        int_list(padding, "padding", op),
        bool(ceil_mode),
        bool(count_include_pad),
        _divisor(divisor_override, op),
    )


def avg_pool2d_backward(
    grad_output: np.ndarray,
    input: np.ndarray,
    kernel_size: IntOrPair,
    stride: Optional[IntOrPair] = None,
    padding: IntOrPair = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: Optional[int] = None,
) -> np.ndarray:
    """Gradient of :func:`avg_pool2d` with respect to its input (aclnnAvgPool2dBackward).

    Args:
        grad_output: gradient of the pooled output, shaped like ``avg_pool2d(input, ...)``.
        input: the forward input; only its shape and dtype are used.
        Other arguments as in :func:`avg_pool2d`.

    Returns:
        ``grad_input``, shaped like ``input``.

    Example::

        x = np.random.rand(2, 3, 8, 8).astype(np.float32)
        grad_x = spatialgrad.avg_pool2d_backward(np.ones((2, 3, 4, 4), np.float32), x, 2)  # (2, 3, 8, 8)
    """
    if _strict.chip is not None:
        _strict.enforce("avg_pool2d_backward", locals())
    op = "avg_pool2d_backward"
    return _core.avg_pool2d_backward(
        grad_output,
        input,
        int_list(kernel_size, "kernel_size", op),
        int_list(stride, "stride", op),
        int_list(padding, "padding", op),
        bool(ceil_mode),
        bool(count_include_pad),
        _divisor(divisor_override, op),
    )


# ---- the operator's entry in the table of operators (spatialgrad._registry) ----------------------------------

# Both functions are linear in their first array, so each one's vjp is the other (any order).

def _forward_vjp(g, arrays, o, needs) -> Call:
    return Call("avg_pool2d_backward", dict(grad_output=g[0], input=arrays["input"]), dict(o), (0,))


def _backward_vjp(g, arrays, o, needs) -> Call:
    return Call("avg_pool2d", dict(input=g[0]), dict(o), (0, None))


OPERATOR = declare(
    (avg_pool2d, ("input",), (True,), 1, _forward_vjp),
    # input only lends its shape and dtype to avg_pool2d_backward.
    (avg_pool2d_backward, ("grad_output", "input"), (True, False), 1, _backward_vjp),
    patched=True)
