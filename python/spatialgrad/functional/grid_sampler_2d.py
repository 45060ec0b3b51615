"""2-D grid sampling (PyTorch ``grid_sample`` / ``grid_sampler_2d`` and aclnnGridSampler2D semantics)."""
from __future__ import annotations

import operator
from typing import Optional, Sequence, Tuple, Union

import numpy as np

from .. import _core
from .._declare import Call, declare
from .. import _strict
from .._args import GRID_INTERPOLATION as _INTERPOLATION
from .._args import GRID_PADDING as _PADDING
from .._args import short_repr

__all__ = ["grid_sample", "grid_sampler_2d_backward", "grid_sampler_2d_double_backward"]

Mode = Union[str, int]


def _mode_number(value: Mode, names: dict, arg: str, op: str) -> int:
    """A mode name or its aclnn integer as the integer; anything else is a ValueError."""
    if isinstance(value, str):
        if value in names:
            return names[value]
    elif not isinstance(value, (bool, np.bool_)):
        try:
            number = operator.index(value)
        except TypeError:
            pass
        else:
            if number in names.values():
                return number
    # The list of choices is formatted only here: formatted on every call it cost 2 us of a 4 us call.
    choices = ", ".join(f"{name!r} ({number})" for name, number in names.items())
    raise ValueError(f"{op}(): expected {arg} to be one of {choices}, but got {short_repr(value)}")


def _output_mask(output_mask: Sequence[bool], op: str, entries: int = 2) -> list:
    try:
        mask = [bool(v) for v in output_mask]
    except TypeError:
        raise TypeError(f"{op}(): expected output_mask to be a sequence of {entries} bools, but got "
                        f"{short_repr(output_mask)}") from None
    return mask  # the C++ core checks the number of entries


def grid_sample(
    input: np.ndarray,
    grid: np.ndarray,
    mode: Mode = "bilinear",
    padding_mode: Mode = "zeros",
    align_corners: bool = False,
) -> np.ndarray:
    """Samples ``input`` at the normalised locations of ``grid`` (``torch.nn.functional.grid_sample``, 4-D).

    Args:
        input: ``(N, C, H, W)`` array, float16, bfloat16, float32 or float64, any strides; ``H, W >= 1``.
        grid: ``(N, Ho, Wo, 2)`` array of the input dtype; ``grid[..., 0]`` is x (along W), ``grid[..., 1]``
            is y (along H), with -1 and +1 the image edges (or the corner pixel centres if ``align_corners``).
        mode: ``"bilinear"`` (0), ``"nearest"`` (1, round half to even) or ``"bicubic"`` (2, A = -0.75).
        padding_mode: ``"zeros"`` (0), ``"border"`` (1) or ``"reflection"`` (2): how locations outside the
            image read.
        align_corners: whether -1 and +1 are the centres of the corner pixels.

    Returns:
        ``(N, C, Ho, Wo)`` array of the input dtype. NaN/Inf grid values behave as in PyTorch's CPU kernel.

    Raises:
        ValueError: bad shapes or modes. TypeError: unsupported or mismatched dtypes.

    Example::

        x, grid = np.random.rand(1, 3, 8, 8), np.random.uniform(-1, 1, (1, 5, 5, 2))
        y = spatialgrad.grid_sample(x, grid, mode="bicubic", padding_mode="border")  # (1, 3, 5, 5)
    """
    if _strict.chip is not None:
        _strict.enforce("grid_sample", locals())
    op = "grid_sample"
    return _core.grid_sampler_2d(
        input,
        grid,
        _mode_number(mode, _INTERPOLATION, "mode", op),
        _mode_number(padding_mode, _PADDING, "padding_mode", op),
        bool(align_corners),
    )


def grid_sampler_2d_backward(
    grad_output: np.ndarray,
    input: np.ndarray,
    grid: np.ndarray,
    mode: Mode = "bilinear",
    padding_mode: Mode = "zeros",
    align_corners: bool = False,
    output_mask: Sequence[bool] = (True, True),
) -> Tuple[Optional[np.ndarray], Optional[np.ndarray]]:
    """Gradients of :func:`grid_sample` (``aten.grid_sampler_2d_backward`` / aclnnGridSampler2DBackward).

    Args:
        grad_output: ``(N, C, Ho, Wo)`` gradient of the sampled output.
        input, grid, mode, padding_mode, align_corners: as given to :func:`grid_sample`.
        output_mask: ``(want input_grad, want grid_grad)``; exactly 2 entries.

    Returns:
        ``(input_grad, grid_grad)`` shaped like ``input`` and ``grid``; a gradient that ``output_mask`` does not
        ask for is ``None`` (and costs nothing). ``grid_grad`` is zero for ``"nearest"``.

    Example::

        x, grid = np.random.rand(1, 3, 8, 8), np.random.uniform(-1, 1, (1, 5, 5, 2))
        grad_x, grad_grid = spatialgrad.grid_sampler_2d_backward(np.ones((1, 3, 5, 5)), x, grid)
    """
    if _strict.chip is not None:
        _strict.enforce("grid_sampler_2d_backward", locals())
    op = "grid_sampler_2d_backward"
    return _core.grid_sampler_2d_backward(
        grad_output,
        input,
        grid,
        _mode_number(mode, _INTERPOLATION, "mode", op),
        _mode_number(padding_mode, _PADDING, "padding_mode", op),
        bool(align_corners),
        _output_mask(output_mask, op),
    )


def grid_sampler_2d_double_backward(
    grad_grad_input: Optional[np.ndarray],
    grad_grad_grid: Optional[np.ndarray],
    grad_output: np.ndarray,
    input: np.ndarray,
    grid: np.ndarray,
    mode: Mode = "bilinear",
    padding_mode: Mode = "zeros",
    align_corners: bool = False,
    output_mask: Sequence[bool] = (True, True, True),
) -> Tuple[Optional[np.ndarray], Optional[np.ndarray], Optional[np.ndarray]]:
    """The vjp of :func:`grid_sampler_2d_backward`: second-order gradients of :func:`grid_sample`.

    With ``(grad_input, grad_grid) = grid_sampler_2d_backward(grad_output, input, grid, ...)``, returns the
    gradients of ``sum(grad_grad_input * grad_input) + sum(grad_grad_grid * grad_grid)`` with respect to
    ``grad_output``, ``input`` and ``grid``.

    Args:
        grad_grad_input: shaped like ``input``, or ``None`` for zeros.
        grad_grad_grid: shaped like ``grid``, or ``None`` for zeros.
        grad_output, input, grid, mode, padding_mode, align_corners: as given to :func:`grid_sampler_2d_backward`.
        output_mask: ``(want d_grad_output, want d_input, want d_grid)``; exactly 3 entries.

    Returns:
        ``(d_grad_output, d_input, d_grid)``; an entry ``output_mask`` does not ask for is ``None``. The
        sampling weights are piecewise polynomials of the grid; at pixel boundaries (and the clamps of border
        and reflection padding) the derivatives are one-sided, as the first-order ones are. ``"nearest"`` has
        zero ``d_input`` and ``d_grid``. Deterministic for any thread count.

    Example::

        x, grid, g = np.random.rand(1, 3, 8, 8), np.random.uniform(-1, 1, (1, 5, 5, 2)), np.ones((1, 3, 5, 5))
        d_g, d_x, d_grid = spatialgrad.grid_sampler_2d_double_backward(None, np.ones_like(grid), g, x, grid)
    """
    if _strict.chip is not None:
        _strict.enforce("grid_sampler_2d_double_backward", locals())
    op = "grid_sampler_2d_double_backward"
    return _core.grid_sampler_2d_double_backward(
        grad_grad_input,
        grad_grad_grid,
        grad_output,
        input,
        grid,
        _mode_number(mode, _INTERPOLATION, "mode", op),
        _mode_number(padding_mode, _PADDING, "padding_mode", op),
        bool(align_corners),
        _output_mask(output_mask, op, entries=3),
    )


# ---- the operator's entry in the table of operators (spatialgrad._registry) ----------------------------------

# The forward's vjp is the backward; the backward's is the second-order kernel, which has none.

def _forward_vjp(g, arrays, o, needs) -> Call:
    return Call("grid_sampler_2d_backward", dict(grad_output=g[0], input=arrays["input"], grid=arrays["grid"]),
                dict(mode=o["mode"], padding_mode=o["padding_mode"], align_corners=o["align_corners"],
                     output_mask=(bool(needs[0]), bool(needs[1]))), (0, 1))


def _backward_vjp(g, arrays, o, needs) -> Call:
    mask = tuple(o["output_mask"])
    # A gradient the backward did not compute has no cotangent.
    u = g[0] if mask[0] else None
    v = g[1] if mask[1] else None
    return Call("grid_sampler_2d_double_backward",
                dict(grad_grad_input=u, grad_grad_grid=v, grad_output=arrays["grad_output"], input=arrays["input"],
                     grid=arrays["grid"]),
                dict(mode=o["mode"], padding_mode=o["padding_mode"], align_corners=o["align_corners"],
                     output_mask=tuple(bool(n) for n in needs)), (0, 1, 2))


OPERATOR = declare(
    (grid_sample, ("input", "grid"), (True, True), 1, _forward_vjp),
    (grid_sampler_2d_backward, ("grad_output", "input", "grid"), (True, True, True), 2, _backward_vjp),
    (grid_sampler_2d_double_backward, ("grad_grad_input", "grad_grad_grid", "grad_output", "input", "grid"),
     (True,) * 5, 3, None),
    patched=True)
