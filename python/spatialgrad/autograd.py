"""Framework-neutral reverse mode: ``vjp(op, *args, **kwargs) -> (out, pullback)``.

``op`` is a forward of spatialgrad, its backward (for second-order gradients), or its name:
:func:`differentiable_ops` lists them. ``pullback(grad_out)`` returns one gradient per array argument of ``op``,
in positional order, with ``None`` for arguments that are not differentiable (boxes, spatial shapes, level start
indices, an input that lends only its shape)::

    out, pullback = vjp(sg.grid_sample, image, grid, mode="bicubic")
    grad_image, grad_grid = pullback(np.ones_like(out))

For an ``op`` with several outputs (the backwards of the operators with two or more differentiable inputs),
``grad_out`` is a tuple with one entry per output, ``None`` meaning zeros.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Tuple, Union

import numpy as np

from ._declare import Grads  # what a pullback returns: one gradient per array argument, None where not differentiable
from ._registry import DIFFERENTIABLE, backward, lookup
from .bfloat16 import is_bfloat16

__all__ = ["vjp", "differentiable_ops"]

# What a pullback takes: the output's gradient, or (an op with several outputs) a tuple of them, None for zeros.
GradOut = Union[np.ndarray, Tuple[Optional[np.ndarray], ...]]


def differentiable_ops() -> Tuple[str, ...]:
    """Names of the operators :func:`vjp` accepts (the five forwards and their backwards), as a tuple.

    Example::

        assert "grid_sample" in spatialgrad.autograd.differentiable_ops()
        assert "grid_sampler_2d_backward" in spatialgrad.autograd.differentiable_ops()  # second order
    """
    return DIFFERENTIABLE


def vjp(op: Union[str, Callable[..., Any]], *args: Any, **kwargs: Any) -> Tuple[Any, Callable[[GradOut], Grads]]:
    """Runs ``op(*args, **kwargs)`` and returns ``(out, pullback)``.

    Args:
        op: a function of :func:`differentiable_ops` (``spatialgrad.grid_sample``, ...) or its name.
        args, kwargs: the arguments of ``op``, as for a direct call.

    ``pullback(grad_out)`` returns one gradient per array argument of ``op``, in positional order (``None``
    for arguments that are not differentiable). ``grad_out`` has the output's shape and dtype (a tuple, one per
    output, ``None`` meaning zeros, when ``op`` returns several). The arrays are captured by reference, as
    passed: mutating them before calling ``pullback`` changes the gradient. ``pullback`` may be called any
    number of times.

    Raises:
        ValueError: an ``op`` that is not differentiable; a ``grad_out`` of the wrong shape or count (from
        ``pullback``). TypeError: a ``grad_out`` of another dtype than the output (from ``pullback``).

    Example::

        image, grid = np.random.rand(1, 3, 8, 8), np.random.uniform(-1, 1, (1, 4, 4, 2))
        out, pullback = spatialgrad.autograd.vjp(spatialgrad.grid_sample, image, grid, mode="bicubic")
        grad_image, grad_grid = pullback(np.ones_like(out))
    """
    spec = lookup(op)
    arrays, options = spec.bind(args, kwargs)
    out = spec.forward(*args, **kwargs)

    outs = out if isinstance(out, tuple) else (out,)

    def pullback(grad_out: GradOut) -> Grads:
        grads = tuple(grad_out) if isinstance(out, tuple) else (grad_out,)
        if len(grads) != len(outs):
            raise ValueError(f"{spec.name} pullback: expected a tuple of {len(outs)} output gradients, but got "
                             f"{len(grads)}")
        grads = tuple(None if g is None else np.asarray(g) for g in grads)
        for g, o in zip(grads, outs):
            if g is not None:
                _check_cotangent(spec.name, g, o)
        return backward(spec, grads, arrays, options, spec.differentiable)

    return out, pullback


def _dtype_name(array: np.ndarray) -> str:
    return "bfloat16" if is_bfloat16(array) else str(array.dtype)


def _check_cotangent(op: str, grad: np.ndarray, out: Optional[np.ndarray]) -> None:
    """A cotangent must have its output's shape and dtype. A dtype mismatch is an error rather than a cast
    (PyTorch's engine would cast): a float64 cotangent of a float32 output usually means the forward was meant
    to run in float64, and a silent cast would hide that. Checked here, so that the message names grad_out,
    not the internal backward's arguments."""
    if out is None or grad.shape != out.shape:
        expected = None if out is None else out.shape
        raise ValueError(f"{op} pullback: expected grad_out of shape {expected}, but got {grad.shape}")
    if _dtype_name(grad) != _dtype_name(out):
        raise TypeError(f"{op} pullback: expected grad_out of the output's dtype ({_dtype_name(out)}), but got "
                        f"{_dtype_name(grad)} (cast grad_out, or run the forward in the dtype you need)")
