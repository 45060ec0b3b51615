"""Framework-neutral reverse mode: ``vjp(op, *args, **kwargs) -> (out, pullback)``.

``op`` is one of the five forwards (``spatialgrad.avg_pool2d``, ``upsample_bilinear2d``, ``grid_sample``,
``roi_align``, ``ms_deform_attn``), one of their backwards (``avg_pool2d_backward``, ...,
``grid_sampler_2d_backward``, ``ms_deform_attn_backward``: second-order gradients), or its name.
``pullback(grad_out)`` returns one gradient per array argument of ``op``, in positional order, with ``None`` for
arguments that are not differentiable (boxes, spatial shapes, level start index, avg_pool2d_backward's input,
which lends only its shape)::

    out, pullback = vjp(sg.grid_sample, image, grid, mode="bicubic")
    grad_image, grad_grid = pullback(np.ones_like(out))

For an ``op`` with several outputs (``grid_sampler_2d_backward``, ``ms_deform_attn_backward``), ``grad_out`` is a
tuple with one entry per output, ``None`` meaning zeros.
"""
from __future__ import annotations

from typing import Callable, Optional, Tuple, Union

import numpy as np

from ._registry import DIFFERENTIABLE, lookup

__all__ = ["vjp", "differentiable_ops"]


def differentiable_ops() -> Tuple[str, ...]:
    """Names of the operators :func:`vjp` accepts."""
    return DIFFERENTIABLE


def vjp(op: Union[str, Callable[..., np.ndarray]], *args, **kwargs
        ) -> Tuple[np.ndarray, Callable[[np.ndarray], Tuple[Optional[np.ndarray], ...]]]:
    """Runs ``op(*args, **kwargs)`` and returns ``(out, pullback)``.

    The arrays are captured by reference, as passed: mutating them before calling ``pullback`` changes the
    gradient. ``pullback`` may be called any number of times.
    """
    spec = lookup(op)
    arrays, options = spec.bind(args, kwargs)
    out = spec.forward(*args, **kwargs)

    outs = out if isinstance(out, tuple) else (out,)

    def pullback(grad_out) -> Tuple[Optional[np.ndarray], ...]:
        grads = tuple(grad_out) if isinstance(out, tuple) else (grad_out,)
        if len(grads) != len(outs):
            raise ValueError(f"{spec.name} pullback: expected a tuple of {len(outs)} output gradients, but got "
                             f"{len(grads)}")
        grads = tuple(None if g is None else np.asarray(g) for g in grads)
        for g, o in zip(grads, outs):
            if g is not None and (o is None or g.shape != o.shape):
                expected = None if o is None else o.shape
                raise ValueError(f"{spec.name} pullback: expected grad_out of shape {expected}, but got {g.shape}")
        return spec.backward(grads, arrays, options, spec.differentiable)

    return out, pullback
