"""Modules over spatialgrad's operators, constructed and used as the modules they replace.

============================================  =====================================================================
``RoIAlign``                                  ``torchvision.ops.RoIAlign``
``MultiScaleRoIAlign``                        ``torchvision.ops.MultiScaleRoIAlign`` (needs torchvision for its level mapping)
``MultiScaleDeformableAttention``             mmcv's ``MultiScaleDeformableAttention`` (same arguments, parameter names,
                                              initialisation and forward; an mmcv or Deformable-DETR state_dict loads)
============================================  =====================================================================
"""
from __future__ import annotations

import math
import warnings
from typing import Dict, List, Optional, Tuple, Union

import torch
from torch import Tensor, nn

from . import ms_deform_attn, roi_align

__all__ = ["RoIAlign", "MultiScaleRoIAlign", "MultiScaleDeformableAttention"]


class RoIAlign(nn.Module):
    """:func:`spatialgrad.torch.roi_align` as a module, with ``torchvision.ops.RoIAlign``'s arguments.

    Args:
        output_size: ``P`` or ``(PH, PW)``, the bins per box.
        spatial_scale: multiplies the box coordinates (feature size / image size).
        sampling_ratio: samples per bin along each axis; ``<= 0`` is adaptive, ``ceil(box size / P)``.
        aligned: shift the boxes by -0.5 pixel (default False).

    ``forward(input, rois)`` takes a ``(B, C, H, W)`` tensor and ``(K, 5)`` rows ``(batch_index, x1, y1, x2,
    y2)`` or a list of ``(L_i, 4)`` tensors, one per image, and returns ``(K, C, PH, PW)``.

    Example::

        pool = spatialgrad.torch.nn.RoIAlign(7, spatial_scale=0.25, sampling_ratio=2, aligned=True)
        pooled = pool(torch.rand(1, 8, 32, 32), [torch.tensor([[4.0, 4.0, 60.0, 40.0]])])  # (1, 8, 7, 7)
    """

    def __init__(self, output_size, spatial_scale: float, sampling_ratio: int, aligned: bool = False):
        super().__init__()
        self.output_size = output_size
        self.spatial_scale = spatial_scale
        self.sampling_ratio = sampling_ratio
        self.aligned = aligned

    def forward(self, input: Tensor, rois: Union[Tensor, List[Tensor]]) -> Tensor:
        """Pools ``rois`` (``(K, 5)``, or one ``(L_i, 4)`` tensor per image) from ``input`` (``(B, C, H, W)``)
        into ``(K, C, PH, PW)``; raises as :func:`spatialgrad.torch.roi_align` does."""
        return roi_align(input, rois, self.output_size, self.spatial_scale, self.sampling_ratio, self.aligned)

    def extra_repr(self) -> str:
        return (f"output_size={self.output_size}, spatial_scale={self.spatial_scale}, "
                f"sampling_ratio={self.sampling_ratio}, aligned={self.aligned}")


def _torchvision_poolers():
    try:
        from torchvision.ops import poolers
    except ImportError as e:  # pragma: no cover - CI installs torchvision
        raise ImportError("spatialgrad.torch.nn.MultiScaleRoIAlign needs torchvision (for its level mapping)") from e
    return poolers


class MultiScaleRoIAlign(nn.Module):
    """RoIAlign over a feature pyramid: each box is pooled, by :func:`spatialgrad.torch.roi_align`, from the
    level its size selects (FPN's rule ``floor(canonical_level + log2(sqrt(area) / canonical_scale))``, clamped
    to the levels present). ``torchvision.ops.MultiScaleRoIAlign``'s arguments; needs torchvision, whose level
    mapper and scale inference it uses so that the results are the same.

    Args:
        featmap_names: the keys of the feature maps to pool from, finest first.
        output_size: ``P`` or ``(PH, PW)``.
        sampling_ratio: samples per bin along each axis; ``<= 0`` is adaptive.
        canonical_scale, canonical_level: FPN's level rule (defaults 224 and 4).

    ``forward(x, boxes, image_shapes)``: ``x`` a dict of ``(B, C, H_l, W_l)`` maps, ``boxes`` one ``(L_i, 4)``
    tensor per image, ``image_shapes`` the ``(H, W)`` of each image (the scales are inferred from them on the
    first call); returns ``(sum L_i, C, PH, PW)``.

    Example::

        pool = spatialgrad.torch.nn.MultiScaleRoIAlign(["p2", "p3"], 7, sampling_ratio=2)
        pooled = pool({"p2": torch.rand(1, 8, 32, 32), "p3": torch.rand(1, 8, 16, 16)},
                      [torch.tensor([[4.0, 4.0, 60.0, 40.0]])], [(128, 128)])  # (1, 8, 7, 7)
    """

    def __init__(self, featmap_names: List[str], output_size, sampling_ratio: int, *, canonical_scale: int = 224,
                 canonical_level: int = 4):
        super().__init__()
        if isinstance(output_size, int):
            output_size = (output_size, output_size)
        self.featmap_names = featmap_names
        self.sampling_ratio = sampling_ratio
        self.output_size = tuple(output_size)
        self.scales: Optional[List[float]] = None
        self.map_levels = None
        self.canonical_scale = canonical_scale
        self.canonical_level = canonical_level

    def forward(self, x: Dict[str, Tensor], boxes: List[Tensor], image_shapes: List[Tuple[int, int]]) -> Tensor:
        """Pools every image's boxes (``(L_i, 4)`` each) from the level each selects; returns
        ``(sum L_i, C, PH, PW)`` in the order of the boxes."""
        poolers = _torchvision_poolers()
        features = poolers._filter_input(x, self.featmap_names)
        if self.scales is None or self.map_levels is None:
            self.scales, self.map_levels = poolers._setup_scales(features, image_shapes, self.canonical_scale,
                                                                 self.canonical_level)
        rois = poolers._convert_to_roi_format(boxes)
        if len(features) == 1:
            return roi_align(features[0], rois, self.output_size, self.scales[0], self.sampling_ratio)
        levels = self.map_levels(boxes)
        result = features[0].new_zeros((rois.shape[0], features[0].shape[1]) + self.output_size)
        for level, (feature, scale) in enumerate(zip(features, self.scales)):
            picked = torch.where(levels == level)[0]
            pooled = roi_align(feature, rois[picked], self.output_size, scale, self.sampling_ratio)
            result = result.index_put((picked,), pooled.to(result.dtype))  # out of place: autograd sees it
        return result

    def extra_repr(self) -> str:
        return f"featmap_names={self.featmap_names}, output_size={self.output_size}, sampling_ratio={self.sampling_ratio}"


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
        total = int((spatial_shapes[:, 0] * spatial_shapes[:, 1]).sum())
        if value.dim() != 3 or value.shape[sequence] != total:  # before reference_points: a wrong layout shows here
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
    fits = tensor.dim() == len(shape) and all(int(have) in (want if isinstance(want, tuple) else (want,))
                                              for have, want in zip(tensor.shape, shape))
    if not fits:
        raise ValueError(f"{_FORWARD}: expected {name} of shape {described}, but got {tuple(tensor.shape)}")
