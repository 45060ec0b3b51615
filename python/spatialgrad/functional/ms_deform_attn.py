"""Multi-scale deformable attention (mmcv ``MultiScaleDeformableAttnFunction`` semantics)."""
from __future__ import annotations

from typing import Optional, Sequence, Tuple, Union

import numpy as np

from .. import _core
from .._declare import Call, declare
from .. import _strict

__all__ = ["ms_deform_attn", "ms_deform_attn_backward", "ms_deform_attn_double_backward"]

# spatial_shapes and level_start_index: an int array, or nested lists of ints.
IndexTable = Union[np.ndarray, Sequence]


def _index_array(value):
    # spatial_shapes and level_start_index are small tables: also accept nested lists of ints (-> int64).
    return value if isinstance(value, np.ndarray) else np.asarray(value)


def ms_deform_attn(
    value: np.ndarray,
    spatial_shapes: IndexTable,
    level_start_index: IndexTable,
    sampling_locations: np.ndarray,
    attention_weights: np.ndarray,
) -> np.ndarray:
    """Attention-weighted sum of bilinear samples taken from a multi-level feature map.

    Args:
        value: ``(bs, S, nH, C)`` float16, bfloat16, float32 or float64, the levels' pixels stacked along ``S``
            (row-major per level), any strides.
        spatial_shapes: ``(L, 2)`` int32 or int64 (or a nested list of ints), ``(H, W)`` of each level, each >= 1, with
            ``sum(H * W) == S``.
        level_start_index: ``(L,)`` int32 or int64 (or a list of ints), the exclusive prefix sum of ``H * W``.
        sampling_locations: ``(bs, Q, nH, L, P, 2)`` of value's dtype; ``[..., 0]`` is x and ``[..., 1]``
            is y, normalised so that ``[0, 1]`` spans the level (pixel centres at ``(i + 0.5) / W``).
        attention_weights: ``(bs, Q, nH, L, P)`` of value's dtype.

    Returns:
        ``(bs, Q, nH * C)`` array, element ``[b, q, h * C + c]``. A point outside the open range
        ``-1 < x * W - 0.5 < W``, ``-1 < y * H - 0.5 < H`` (or NaN) contributes nothing; pixels outside the
        level read as zero (``grid_sample`` with ``padding_mode="zeros"``, ``align_corners=False``).

    Raises:
        ValueError: inconsistent shapes, ``S`` or ``level_start_index`` not matching ``spatial_shapes``,
            a level smaller than 1x1. TypeError: a dtype other than those listed.

    Example::

        value, loc, w = np.random.rand(1, 20, 2, 8), np.random.rand(1, 3, 2, 2, 4, 2), np.random.rand(1, 3, 2, 2, 4)
        out = spatialgrad.ms_deform_attn(value, [[4, 4], [2, 2]], [0, 16], loc, w)  # (1, 3, 16)
    """
    if _strict.chip is not None:
        _strict.enforce("ms_deform_attn", locals())
    return _core.ms_deform_attn(value, _index_array(spatial_shapes), _index_array(level_start_index),
                                sampling_locations, attention_weights)


def ms_deform_attn_backward(
    value: np.ndarray,
    spatial_shapes: IndexTable,
    level_start_index: IndexTable,
    sampling_locations: np.ndarray,
    attention_weights: np.ndarray,
    grad_output: np.ndarray,
) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradients of :func:`ms_deform_attn` (aclnnMultiScaleDeformableAttentionGrad).

    Args:
        value, spatial_shapes, level_start_index, sampling_locations, attention_weights: as in
            :func:`ms_deform_attn`.
        grad_output: ``(bs, Q, nH * C)``, the gradient of the output, of value's dtype.

    Returns:
        ``(grad_value, grad_sampling_locations, grad_attention_weights)``, shaped like the inputs. Points
        that contribute nothing get zero location and weight gradients. The result does not depend on the
        number of threads (bit for bit).

    Example::

        value, loc, w = np.random.rand(1, 20, 2, 8), np.random.rand(1, 3, 2, 2, 4, 2), np.random.rand(1, 3, 2, 2, 4)
        grad_value, grad_loc, grad_w = spatialgrad.ms_deform_attn_backward(
            value, [[4, 4], [2, 2]], [0, 16], loc, w, np.ones((1, 3, 16)))
    """
    if _strict.chip is not None:
        _strict.enforce("ms_deform_attn_backward", locals())
    return _core.ms_deform_attn_backward(
        value, _index_array(spatial_shapes), _index_array(level_start_index), sampling_locations,
        attention_weights, grad_output
    )


def ms_deform_attn_double_backward(
    value: np.ndarray,
    spatial_shapes: IndexTable,
    level_start_index: IndexTable,
    sampling_locations: np.ndarray,
    attention_weights: np.ndarray,
    grad_output: np.ndarray,
    grad_grad_value: Optional[np.ndarray] = None,
    grad_grad_sampling_locations: Optional[np.ndarray] = None,
    grad_grad_attention_weights: Optional[np.ndarray] = None,
) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The vjp of :func:`ms_deform_attn_backward`: second-order gradients of :func:`ms_deform_attn`.

    With ``(grad_value, grad_locations, grad_weights) = ms_deform_attn_backward(...)`` and cotangents shaped
    like them (``None`` for zeros), returns the gradients of ``sum(grad_grad_value * grad_value) +
    sum(grad_grad_sampling_locations * grad_locations) + sum(grad_grad_attention_weights * grad_weights)``.

    Returns:
        ``(d_value, d_sampling_locations, d_attention_weights, d_grad_output)``, shaped like ``value``,
        ``sampling_locations``, ``attention_weights`` and ``grad_output``. The bilinear weights are linear in
        x and in y, so only the mixed x-y second derivative is non-zero; at pixel boundaries derivatives are
        one-sided. Deterministic for any thread count.

    Example::

        value, loc, w = np.random.rand(1, 20, 2, 8), np.random.rand(1, 3, 2, 2, 4, 2), np.random.rand(1, 3, 2, 2, 4)
        d_value, d_loc, d_w, d_g = spatialgrad.ms_deform_attn_double_backward(
            value, [[4, 4], [2, 2]], [0, 16], loc, w, np.ones((1, 3, 16)),
            grad_grad_sampling_locations=np.ones_like(loc))
    """
    if _strict.chip is not None:
        _strict.enforce("ms_deform_attn_double_backward", locals())
    return _core.ms_deform_attn_double_backward(
        value, _index_array(spatial_shapes), _index_array(level_start_index), sampling_locations,
        attention_weights, grad_output, grad_grad_value, grad_grad_sampling_locations, grad_grad_attention_weights
    )


# ---- the operator's entry in the table of operators (spatialgrad._registry) ----------------------------------

# The forward's vjp is the backward; the backward's is the second-order kernel, which has none. The integer
# tables (spatial_shapes, level_start_index) get no gradient.

_INPUTS = ("value", "spatial_shapes", "level_start_index", "sampling_locations", "attention_weights")


def _forward_vjp(g, arrays, o, needs) -> Call:
    return Call("ms_deform_attn_backward", dict({k: arrays[k] for k in _INPUTS}, grad_output=g[0]), {},
                (0, None, None, 1, 2))


def _backward_vjp(g, arrays, o, needs) -> Call:
    return Call("ms_deform_attn_double_backward",
                dict({k: arrays[k] for k in _INPUTS + ("grad_output",)}, grad_grad_value=g[0],
                     grad_grad_sampling_locations=g[1], grad_grad_attention_weights=g[2]), {},
                (0, None, None, 1, 2, 3))


OPERATOR = declare(
    (ms_deform_attn, _INPUTS, (True, False, False, True, True), 1, _forward_vjp),
    (ms_deform_attn_backward, _INPUTS + ("grad_output",), (True, False, False, True, True, True), 3,
     _backward_vjp),
    (ms_deform_attn_double_backward,
     _INPUTS + ("grad_output", "grad_grad_value", "grad_grad_sampling_locations", "grad_grad_attention_weights"),
     (True, False, False, True, True, True, True, True, True), 4, None),
    patched=False)
