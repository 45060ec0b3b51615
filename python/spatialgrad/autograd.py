"""Framework-neutral reverse mode: ``vjp(op, *args, **kwargs) -> (out, pullback)``.

``op`` is one of the five forwards (``spatialgrad.avg_pool2d``, ``upsample_bilinear2d``, ``grid_sample``,
``roi_align``, ``ms_deform_attn``) or its name. ``pullback(grad_out)`` returns one gradient per array argument of
the forward, in positional order, with ``None`` for arguments that are not differentiable (boxes, spatial shapes,
level start index)::

    out, pullback = vjp(sg.grid_sample, image, grid, mode="bicubic")
    grad_image, grad_grid = pullback(np.ones_like(out))
"""
from __future__ import annotations

from typing import Callable, Optional, Tuple, Union

import numpy as np

from ._registry import OPS, lookup

__all__ = ["vjp", "differentiable_ops"]


def differentiable_ops() -> Tuple[str, ...]:
    """Names of the operators :func:`vjp` accepts."""
    return tuple(OPS)


def vjp(op: Union[str, Callable[..., np.ndarray]], *args, **kwargs
        ) -> Tuple[np.ndarray, Callable[[np.ndarray], Tuple[Optional[np.ndarray], ...]]]:
    """Runs ``op(*args, **kwargs)`` and returns ``(out, pullback)``.

    The arrays are captured by reference, as passed: mutating them before calling ``pullback`` changes the
    gradient. ``pullback`` may be called any number of times.
    """
    spec = lookup(op)
    arrays, options = spec.bind(args, kwargs)
    out = spec.forward(*args, **kwargs)

    def pullback(grad_out: np.ndarray) -> Tuple[Optional[np.ndarray], ...]:
        grad_out = np.asarray(grad_out)
        if grad_out.shape != out.shape:
            raise ValueError(f"{spec.name} pullback: expected grad_out of shape {out.shape}, but got {grad_out.shape}")
        return spec.backward(grad_out, arrays, options, spec.differentiable)

    return out, pullback
