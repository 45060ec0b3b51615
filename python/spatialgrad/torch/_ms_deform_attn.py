"""``spatialgrad.torch.ms_deform_attn``: the adapter of mmcv's ``MultiScaleDeformableAttnFunction.apply``, its
TorchScript branch, the PyTorch reference ``ms_deform_attn_reference`` and the module
``spatialgrad.torch.nn.MultiScaleDeformableAttention``."""
import math
import warnings
from typing import List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor, nn

from .. import _strict
from . import _onnx
from ._common import (apply, empty_like_kernel, fake, is_compiling, native_operator, package, public, script_branch,
                      try_native)

_native_ms_deform_attn = native_operator("ms_deform_attn")


def ms_deform_attn(value: Tensor, spatial_shapes: Tensor, level_start_index: Tensor, sampling_locations: Tensor,
                   attention_weights: Tensor, im2col_step: int = 64) -> Tensor:
    """Multi-scale deformable attention (Deformable DETR), differentiable in value, locations and weights.

    For each query and head, the sum over levels l and points p of ``attention_weights[..., l, p]`` times a
    bilinear sample of level l of ``value`` at ``sampling_locations[..., l, p, :]``.

    Args:
        value: ``(bs, S, nH, C)`` CPU tensor, float16, bfloat16, float32 or float64: the levels' pixels
            stacked along ``S`` (row-major per level).
        spatial_shapes: ``(L, 2)`` int64 (or int32) tensor, ``(H, W)`` of each level, ``sum(H * W) == S``.
        level_start_index: ``(L,)`` int tensor, where each level starts in ``S`` (the exclusive prefix sum of
            ``H * W``).
        sampling_locations: ``(bs, Q, nH, L, P, 2)``, ``(x, y)`` with ``[0, 1]`` spanning the level; points
            outside read zeros.
        attention_weights: ``(bs, Q, nH, L, P)``.
        im2col_step: accepted for the same call as mmcv's function and ignored (the CPU kernel does not
            batch columns).

    ``sampling_locations`` and ``attention_weights`` are cast to ``value``'s dtype (mixed precision); each
    gradient comes back in its input's own dtype.

    Returns:
        ``(bs, Q, nH * C)`` of value's dtype.

    Raises:
        ValueError: inconsistent shapes, ``S`` or ``level_start_index`` not matching ``spatial_shapes``, a
        non-CPU tensor. TypeError: a dtype other than those listed.

    Example::

        shapes, starts = torch.tensor([[4, 4], [2, 2]]), torch.tensor([0, 16])
        out = spatialgrad.torch.ms_deform_attn(torch.rand(1, 20, 2, 8), shapes, starts, torch.rand(1, 3, 2, 2, 4, 2),
                                               torch.rand(1, 3, 2, 2, 4))  # (1, 3, 16)
    """
    if torch.jit.is_scripting():
        return _ms_deform_attn_from_script(value, spatial_shapes, level_start_index, sampling_locations,
                                           attention_weights, im2col_step)
    # mmcv casts the points to value's dtype (AMP: float16 value, float32 locations), and so does the operator;
    # here the casts are part of the graph, so each input's gradient comes back in its own dtype.
    if package.native and _strict.chip is None:
        out = try_native(_native_ms_deform_attn, value, spatial_shapes, level_start_index, sampling_locations,
                         attention_weights, im2col_step)
        if out is not None:
            return out
    return apply("ms_deform_attn", [value, spatial_shapes, level_start_index, sampling_locations.to(value.dtype),
                                    attention_weights.to(value.dtype)], {})


def ms_deform_attn_reference(value: torch.Tensor, spatial_shapes: torch.Tensor, sampling_locations: torch.Tensor,
                             attention_weights: torch.Tensor, *extra) -> torch.Tensor:
    """Multi-scale deformable attention composed of PyTorch ops: the reference :func:`ms_deform_attn` is
    compared against (in tests, benchmarks and examples), differentiable by PyTorch's autograd.

    It takes no ``level_start_index`` (unlike :func:`ms_deform_attn`; the order of mmcv's pure-PyTorch
    fallback): the levels are split by ``spatial_shapes`` alone. Each level is sampled with ``F.grid_sample``
    (bilinear, zeros padding, ``align_corners=False``) at ``2 * location - 1`` and the samples are summed with
    the attention weights, through temporaries of ``bs * nH * C * Q * L * P`` elements.

    Args:
        value: ``(bs, S, nH, C)`` floating tensor, the levels' pixels stacked along ``S``.
        spatial_shapes: ``(L, 2)`` ``(H, W)`` per level (a tensor, an array or a list of pairs), ``sum(H * W) == S``.
        sampling_locations: ``(bs, Q, nH, L, P, 2)``, ``(x, y)`` with ``[0, 1]`` spanning the level.
        attention_weights: ``(bs, Q, nH, L, P)``.

    Returns:
        ``(bs, Q, nH * C)``.

    Raises:
        TypeError: more than four arguments (a ``level_start_index`` passed as with :func:`ms_deform_attn`).

    Example::

        value, locations, weights = torch.rand(1, 20, 2, 8), torch.rand(1, 3, 2, 2, 4, 2), torch.rand(1, 3, 2, 2, 4)
        out = spatialgrad.torch.ms_deform_attn_reference(value, [(4, 4), (2, 2)], locations, weights)  # (1, 3, 16)
    """
    if extra:
        raise TypeError(f"ms_deform_attn_reference(): expected 4 arguments (value, spatial_shapes, sampling_locations, "
                        f"attention_weights; no level_start_index, unlike ms_deform_attn), but got {4 + len(extra)}")
    bs, _, heads, channels = value.shape
    _, queries, _, levels, points, _ = sampling_locations.shape
    sizes = [(int(h), int(w)) for h, w in spatial_shapes]  # a tensor, an array or a list of pairs
    grids = 2 * sampling_locations - 1
    sampled = []
    for level, (value_level, (h, w)) in enumerate(zip(value.split([h * w for h, w in sizes], dim=1), sizes)):
        # (bs, H*W, nH, C) -> (bs*nH, C, H, W)
        image = value_level.flatten(2).transpose(1, 2).reshape(bs * heads, channels, h, w)
        # (bs, Q, nH, P, 2) -> (bs*nH, Q, P, 2)
        grid = grids[:, :, :, level].transpose(1, 2).flatten(0, 1)
        sampled.append(torch.nn.functional.grid_sample(image, grid, mode="bilinear", padding_mode="zeros",
                                                       align_corners=False))
    # (bs, Q, nH, L, P) -> (bs*nH, 1, Q, L*P)
    weights = attention_weights.transpose(1, 2).reshape(bs * heads, 1, queries, levels * points)
    out = (torch.stack(sampled, dim=-2).flatten(-2) * weights).sum(-1)
    return out.view(bs, heads * channels, queries).transpose(1, 2).contiguous()


def _ms_deform_attn_native_script(value: Tensor, spatial_shapes: Tensor, level_start_index: Tensor,
                                  sampling_locations: Tensor, attention_weights: Tensor, im2col_step: int) -> Tensor:
    return torch.ops.spatialgrad.ms_deform_attn(value, spatial_shapes, level_start_index, sampling_locations,
                                                attention_weights, im2col_step)


@fake("ms_deform_attn")
def _ms_deform_attn_fake(value, spatial_shapes, level_start_index, sampling_locations, attention_weights,
                         im2col_step=64):
    return empty_like_kernel(value, [value.shape[0], sampling_locations.shape[1], value.shape[2] * value.shape[3]])


def _gradients_like(value, *tensors):
    """Gradients of ``value`` and ``tensors``, all in value's dtype (the operator computes in it)."""
    return tuple(empty_like_kernel(value, t.shape) for t in (value,) + tensors)


@fake("ms_deform_attn_backward")
def _ms_deform_attn_backward_fake(value, spatial_shapes, level_start_index, sampling_locations, attention_weights,
                                  grad_output, im2col_step=64):
    return _gradients_like(value, sampling_locations, attention_weights)


@fake("ms_deform_attn_double_backward")
def _ms_deform_attn_double_backward_fake(value, spatial_shapes, level_start_index, sampling_locations,
                                         attention_weights, grad_output, grad_grad_value,
                                         grad_grad_sampling_locations, grad_grad_attention_weights):
    return _gradients_like(value, sampling_locations, attention_weights) + (empty_like_kernel(grad_output,
                                                                                              grad_output.shape),)


class MultiScaleDeformableAttention(nn.Module):
    """Deformable DETR's attention layer: each query attends to ``num_points`` points per head and level
    around its reference point, computed by :func:`spatialgrad.torch.ms_deform_attn`.

    Per query: ``sampling_offsets`` (a Linear of the query) moves ``num_points`` points per head and level
    away from the reference point, ``attention_weights`` (a Linear, softmax over levels x points) weighs them,
    ``value_proj`` projects the values that are sampled, ``output_proj`` the result. The constructor
    arguments, parameter names, initialisation and forward are mmcv's, so mmcv or Deformable-DETR
    checkpoints load with ``load_state_dict(strict=True)``.

    Args:
        embed_dims: channels of query, value and output (default 256), divisible by ``num_heads``.
        num_heads: attention heads (default 8); each samples ``embed_dims // num_heads`` value channels.
        num_levels: feature levels the value is made of (default 4): ``spatial_shapes`` must have this many rows.
        num_points: sampling points per head and level (default 4).
        im2col_step: accepted and ignored (the CPU kernel does not batch columns).
        dropout: dropout probability on the output (default 0.1). Call ``eval()`` before ``gradcheck`` or
            any comparison of two forwards: in training mode each forward drops different entries.
        batch_first: whether query, value and the output are ``(bs, n, embed_dims)`` (default False:
            ``(n, bs, embed_dims)``, sequence first).
        norm_cfg, init_cfg: accepted and unused (mmcv's configuration hooks).
        value_proj_ratio: ``value_proj`` has ``int(embed_dims * value_proj_ratio)`` outputs (default 1.0).

    Raises:
        ValueError: ``embed_dims`` not divisible by ``num_heads``.

    Example (batch-first, two levels of 8x8 and 4x4, 10 queries)::

        attn = spatialgrad.torch.nn.MultiScaleDeformableAttention(32, 4, num_levels=2, batch_first=True).eval()
        shapes, starts = torch.tensor([[8, 8], [4, 4]]), torch.tensor([0, 64])
        out = attn(torch.rand(2, 10, 32), value=torch.rand(2, 80, 32), reference_points=torch.rand(2, 10, 2, 2),
                   spatial_shapes=shapes, level_start_index=starts)  # (2, 10, 32)
    """

    def __init__(self, embed_dims: int = 256, num_heads: int = 8, num_levels: int = 4, num_points: int = 4,
                 im2col_step: int = 64, dropout: float = 0.1, batch_first: bool = False,
                 norm_cfg: Optional[dict] = None, init_cfg: Optional[dict] = None, value_proj_ratio: float = 1.0):
        super().__init__()
        if embed_dims % num_heads != 0:
            raise ValueError(f"MultiScaleDeformableAttention: expected embed_dims divisible by num_heads, but got "
                             f"{embed_dims} and {num_heads}")
        self.embed_dims, self.num_heads, self.num_levels, self.num_points = embed_dims, num_heads, num_levels, num_points
        self.im2col_step, self.batch_first, self.norm_cfg, self.init_cfg = im2col_step, batch_first, norm_cfg, init_cfg
        self.dropout = nn.Dropout(dropout)
        points = num_heads * num_levels * num_points
        self.sampling_offsets = nn.Linear(embed_dims, points * 2)
        self.attention_weights = nn.Linear(embed_dims, points)
        value_dims = int(embed_dims * value_proj_ratio)
        self.value_proj = nn.Linear(embed_dims, value_dims)
        self.output_proj = nn.Linear(value_dims, embed_dims)
        self.init_weights()

    def init_weights(self) -> None:
        """mmcv's initialisation: each head's offsets start on a ring of directions, point i at distance i + 1;
        uniform attention; Xavier-uniform projections with zero biases."""
        nn.init.zeros_(self.sampling_offsets.weight)
        angles = torch.arange(self.num_heads, dtype=torch.float32) * (2.0 * math.pi / self.num_heads)
        directions = torch.stack([angles.cos(), angles.sin()], -1)
        directions = directions / directions.abs().max(-1, keepdim=True)[0]  # onto the square's boundary
        offsets = directions.view(self.num_heads, 1, 1, 2).repeat(1, self.num_levels, self.num_points, 1)
        offsets = offsets * torch.arange(1, self.num_points + 1, dtype=torch.float32).view(1, 1, -1, 1)
        with torch.no_grad():
            self.sampling_offsets.bias.copy_(offsets.view(-1))
        nn.init.zeros_(self.attention_weights.weight)
        nn.init.zeros_(self.attention_weights.bias)
        for projection in (self.value_proj, self.output_proj):
            nn.init.xavier_uniform_(projection.weight)
            nn.init.zeros_(projection.bias)

    def forward(self, query: Tensor, key: Optional[Tensor] = None, value: Optional[Tensor] = None,
                identity: Optional[Tensor] = None, query_pos: Optional[Tensor] = None,
                key_padding_mask: Optional[Tensor] = None, reference_points: Optional[Tensor] = None,
                spatial_shapes: Optional[Tensor] = None, level_start_index: Optional[Tensor] = None,
                **kwargs) -> Tensor:
        """Attends from each query to the sampled points of ``value``; returns ``identity + dropout(output)``.

        Args:
            query: ``(num_query, bs, embed_dims)``, or ``(bs, num_query, embed_dims)`` with ``batch_first``.
            key: unused (the keys are the sampled points).
            value: ``(num_value, bs, embed_dims)`` (``(bs, num_value, embed_dims)`` with ``batch_first``): the
                levels' pixels flattened row-major and stacked, ``num_value = sum(H * W)``; ``None``: ``query``.
            identity: added to the output (default ``query``, before ``query_pos``); ``residual=`` is an older name.
            query_pos: added to ``query`` before the offsets and weights are computed.
            key_padding_mask: ``(bs, num_value)`` bool, True where value is padding (those values read as 0).
            reference_points: ``(bs, num_query, num_levels, 2)`` points ``(x, y)`` in ``[0, 1]`` of each level
                (the offsets are in pixels of the level), or ``(..., 4)`` boxes ``(cx, cy, w, h)`` (the offsets
                are fractions of half the box, divided by ``num_points``).
            spatial_shapes: ``(num_levels, 2)`` int64 tensor, ``(H, W)`` of each level.
            level_start_index: ``(num_levels,)`` int64 tensor, where each level starts in ``value``
                (``[0, H0 * W0, H0 * W0 + H1 * W1, ...]``).

        Returns:
            A tensor shaped like ``query``.

        Raises:
            ValueError: a missing or misshapen ``spatial_shapes``, ``level_start_index`` or
            ``reference_points``, or a ``value`` whose length is not ``sum(H * W)`` (with a hint when
            ``batch_first`` looks wrong).
        """
        if "residual" in kwargs:  # mmcv's deprecated name of identity
            warnings.warn("MultiScaleDeformableAttention: 'residual' is deprecated, pass 'identity'")
            identity = kwargs.pop("residual")
        value = query if value is None else value
        identity = query if identity is None else identity
        if query_pos is not None:
            query = query + query_pos
        self._check_inputs(query, value, reference_points, spatial_shapes, level_start_index)
        if not self.batch_first:
            query, value = query.permute(1, 0, 2), value.permute(1, 0, 2)
        bs, num_query, _ = query.shape
        num_value = value.shape[1]
        value = self.value_proj(value)
        if key_padding_mask is not None:
            value = value.masked_fill(key_padding_mask[..., None], 0.0)
        value = value.view(bs, num_value, self.num_heads, -1)
        shape = (bs, num_query, self.num_heads, self.num_levels, self.num_points)
        offsets = self.sampling_offsets(query).view(*shape, 2)
        weights = self.attention_weights(query).view(bs, num_query, self.num_heads, -1).softmax(-1).view(*shape)
        locations = self._sampling_locations(reference_points, offsets, spatial_shapes)
        output = ms_deform_attn(value, spatial_shapes, level_start_index, locations, weights, self.im2col_step)
        output = self.output_proj(output)
        if not self.batch_first:
            output = output.permute(1, 0, 2)
        return self.dropout(output) + identity

    def _check_inputs(self, query: Tensor, value: Tensor, reference_points: Optional[Tensor],
                      spatial_shapes: Optional[Tensor], level_start_index: Optional[Tensor]) -> None:
        """What forward needs, checked before any arithmetic (query and value in the caller's layout)."""
        levels = self.num_levels
        _expect_shape("spatial_shapes", spatial_shapes, (levels, 2),
                      f"({levels}, 2): (H, W) of each of the num_levels={levels} levels the module was built for")
        _expect_shape("level_start_index", level_start_index, (levels,),
                      f"({levels},): where each level starts in value")
        if query.dim() != 3:
            raise ValueError(f"{_FORWARD}: expected query of shape {self._layout('num_query')}, but got "
                             f"{tuple(query.shape)}")
        sequence = 1 if self.batch_first else 0  # the axis of the queries / values; the other is the batch
        if value.dim() != 3:
            raise ValueError(f"{_FORWARD}: expected value of shape {self._layout('sum(H * W)')}, but got "
                             f"{tuple(value.shape)}")
        # sum(H * W) reads spatial_shapes' values, where TorchDynamo would break the graph: while it traces, the
        # operator checks it when it runs.
        if not is_compiling():
            total = int((spatial_shapes[:, 0] * spatial_shapes[:, 1]).sum())
            if value.shape[sequence] != total:  # before reference_points: a wrong layout shows here
                raise ValueError(f"{_FORWARD}: expected value of shape {self._layout(str(total))} with sum(H * W) = "
                                 f"{total} entries, but got {tuple(value.shape)}" + self._batch_first_hint(value, total))
        bs, num_query = query.shape[1 - sequence], query.shape[sequence]
        _expect_shape("reference_points", reference_points, (bs, num_query, levels, (2, 4)),
                      f"({bs}, {num_query}, {levels}, 2 or 4): (bs, num_query, num_levels, point or box)")

    def _layout(self, length: str) -> str:
        return f"(bs, {length}, embed_dims)" if self.batch_first else f"({length}, bs, embed_dims)"

    def _batch_first_hint(self, value: Tensor, total: int) -> str:
        """A value whose batch axis has the levels' length was given in the other layout."""
        if value.dim() != 3 or value.shape[0 if self.batch_first else 1] != total:
            return ""
        return (" (sequence-first tensors: construct the module with batch_first=False)" if self.batch_first else
                " (batch-first tensors: construct the module with batch_first=True)")

    def _sampling_locations(self, reference_points: Tensor, offsets: Tensor, spatial_shapes: Tensor) -> Tensor:
        """Reference points plus offsets: in pixels of each level (2-d points), or as fractions of half the
        reference box per point (4-d boxes (x, y, w, h))."""
        reference = reference_points[:, :, None, :, None, :]
        if reference_points.shape[-1] == 2:
            level_wh = torch.stack([spatial_shapes[..., 1], spatial_shapes[..., 0]], -1)
            return reference + offsets / level_wh[None, None, None, :, None, :]
        return reference[..., :2] + offsets / self.num_points * reference[..., 2:] * 0.5  # 4 (checked in forward)


_FORWARD = "MultiScaleDeformableAttention.forward()"


def _expect_shape(name: str, tensor: Optional[Tensor], shape: Tuple[Union[int, Tuple[int, ...]], ...],
                  described: str) -> None:
    """A tensor of ``shape`` (an entry may be a tuple of allowed sizes), or a ValueError describing it."""
    if not isinstance(tensor, Tensor):
        got = "None" if tensor is None else type(tensor).__name__
        raise ValueError(f"{_FORWARD}: expected {name} of shape {described}, but got {got}")
    # (==, not `in`: TorchDynamo (PyTorch 2.6) takes `size in (2,)` of a symbolic size for False)
    fits = tensor.dim() == len(shape) and all(any(have == w for w in (want if isinstance(want, tuple) else (want,)))
                                              for have, want in zip(tensor.shape, shape))
    if not fits:
        raise ValueError(f"{_FORWARD}: expected {name} of shape {described}, but got {tuple(tensor.shape)}")


# ---- ONNX export (spatialgrad.torch._onnx registers ONNX) --------------------------------------------------

def _fixed_dims(g, input_index: int, dims: Sequence[int], argument: str) -> List[int]:
    """The sizes the graph fixes (heads, channels, levels, points), as traced."""
    sizes = _onnx.traced_sizes(g, input_index)
    picked = [sizes[d] if d < len(sizes) else None for d in dims]
    if None in picked:
        raise _onnx.fail("ms_deform_attn", f"static sizes of {argument} dimensions {list(dims)} (heads, "
                         f"channels, levels and points are fixed in the graph)", f"sizes {sizes or 'unknown'}")
    return picked


def _level_image(g, value, spatial_shapes, level_start_index, level: int, levels: int, channels: int):
    """Level `level` of value (bs, S, nH, C) as images (bs * nH, C, H, W); H and W read from spatial_shapes in
    the graph, so that they may be inputs of the model."""
    start = g.op("Gather", level_start_index, _onnx.const(g, [level]), axis_i=0)
    end = (g.op("Gather", level_start_index, _onnx.const(g, [level + 1]), axis_i=0) if level + 1 < levels
           else _onnx.const(g, [torch.iinfo(torch.int64).max]))
    pixels = g.op("Slice", value, start, end, _onnx.const(g, [1]))  # (bs, H * W, nH, C)
    pixels = g.op("Transpose", pixels, perm_i=[0, 2, 3, 1])  # (bs, nH, C, H * W)
    height_width = g.op("Gather", spatial_shapes, _onnx.const(g, level), axis_i=0)
    shape = g.op("Concat", _onnx.const(g, [-1, channels]), height_width, axis_i=0)
    return g.op("Reshape", pixels, shape)


def _grids(g, sampling_locations, levels: int, points: int):
    """sampling_locations (bs, Q, nH, L, P, 2) in [0, 1] as GridSample's grids in [-1, 1], (bs * nH, Q, L * P, 2)."""
    dtype = _onnx.dtype_of(sampling_locations)
    grids = g.op("Sub", g.op("Mul", sampling_locations, _onnx.const(g, 2.0, dtype)), _onnx.const(g, 1.0, dtype))
    grids = g.op("Transpose", grids, perm_i=[0, 2, 1, 3, 4, 5])  # (bs, nH, Q, L, P, 2)
    queries = _onnx.slice_of(g, g.op("Shape", sampling_locations), 1, 2, 0)
    shape = g.op("Concat", _onnx.const(g, [-1]), queries, _onnx.const(g, [levels * points, 2]), axis_i=0)
    return g.op("Reshape", grids, shape)


def _onnx_symbolic(g, value, spatial_shapes, level_start_index, sampling_locations, attention_weights, im2col_step):
    """spatialgrad::ms_deform_attn -> per level a GridSample of the level's image at its points, then the points
    weighted and summed (bs, Q, nH * C). The batch, the number of queries and the levels' sizes may be dynamic;
    im2col_step is ignored, as by the kernel."""
    _onnx.require_opset(g, "ms_deform_attn", 16, "GridSample")
    heads, channels = _fixed_dims(g, 0, [2, 3], "value")
    levels, points = _fixed_dims(g, 3, [3, 4], "sampling_locations")
    spatial_shapes = g.op("Cast", spatial_shapes, to_i=_onnx.INT64)
    level_start_index = g.op("Cast", level_start_index, to_i=_onnx.INT64)
    sampling_locations = _onnx.in_dtype_of(g, sampling_locations, value)
    attention_weights = _onnx.in_dtype_of(g, attention_weights, value)
    grids = _grids(g, sampling_locations, levels, points)
    sampled = []
    for level in range(levels):
        image = _level_image(g, value, spatial_shapes, level_start_index, level, levels, channels)
        grid = _onnx.slice_of(g, grids, level * points, (level + 1) * points, 2)
        sampled.append(_onnx.grid_sample_node(g, image, grid, "bilinear", "zeros", False))  # (bs * nH, C, Q, P)
    sampled = g.op("Concat", *sampled, axis_i=3)  # (bs * nH, C, Q, L * P), level-major as the weights
    weights = g.op("Transpose", attention_weights, perm_i=[0, 2, 1, 3, 4])  # (bs, nH, Q, L, P)
    weights = g.op("Reshape", weights, _onnx.const(g, [-1, 1, 0, levels * points]))  # 0: keeps Q
    summed = g.op("ReduceSum", g.op("Mul", sampled, weights), _onnx.const(g, [3]), keepdims_i=0)  # (bs * nH, C, Q)
    out = g.op("Reshape", summed, _onnx.const(g, [-1, heads * channels, 0]))  # (bs, nH * C, Q)
    return g.op("Transpose", out, perm_i=[0, 2, 1])


# This operator's entry of spatialgrad.torch's list (see its __init__.py).
PUBLIC = public(ms_deform_attn, ms_deform_attn_reference)
REPLACES = "mmcv ``MultiScaleDeformableAttnFunction.apply`` (``im2col_step`` is ignored)"
ONNX = _onnx_symbolic
_ms_deform_attn_from_script = script_branch(ms_deform_attn, _ms_deform_attn_native_script)
NN_MODULES = (MultiScaleDeformableAttention,)
