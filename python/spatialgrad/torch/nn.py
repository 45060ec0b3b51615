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
    """``torchvision.ops.RoIAlign`` computed by :func:`spatialgrad.torch.roi_align`."""

    def __init__(self, output_size, spatial_scale: float, sampling_ratio: int, aligned: bool = False):
        super().__init__()
        self.output_size = output_size
        self.spatial_scale = spatial_scale
        self.sampling_ratio = sampling_ratio
        self.aligned = aligned

    def forward(self, input: Tensor, rois: Union[Tensor, List[Tensor]]) -> Tensor:
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
    """``torchvision.ops.MultiScaleRoIAlign``: each box pooled from the feature level its size selects (FPN's
    rule, torchvision's level mapper and scale inference), by :func:`spatialgrad.torch.roi_align`."""

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
    """mmcv's ``MultiScaleDeformableAttention`` (Deformable DETR) on :func:`spatialgrad.torch.ms_deform_attn`.

    Same constructor arguments, parameters (``sampling_offsets``, ``attention_weights``, ``value_proj``,
    ``output_proj``), initialisation and forward, so mmcv or Deformable-DETR checkpoints load with
    ``load_state_dict(strict=True)``. ``norm_cfg`` and ``init_cfg`` are accepted and unused, as in mmcv's module
    (which passes ``init_cfg`` to its base class); ``im2col_step`` is ignored.
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
        """As mmcv: query (num_query, bs, embed_dims) ((bs, num_query, embed_dims) with ``batch_first``), value
        likewise over the flattened levels, reference_points (bs, num_query, num_levels, 2 or 4); returns
        ``identity + dropout(output)`` shaped like query. ``key`` is unused (as in mmcv)."""
        if "residual" in kwargs:  # mmcv's deprecated name of identity
            warnings.warn("MultiScaleDeformableAttention: 'residual' is deprecated, pass 'identity'")
            identity = kwargs.pop("residual")
        value = query if value is None else value
        identity = query if identity is None else identity
        if query_pos is not None:
            query = query + query_pos
        if not self.batch_first:
            query, value = query.permute(1, 0, 2), value.permute(1, 0, 2)
        bs, num_query, _ = query.shape
        num_value = value.shape[1]
        if int((spatial_shapes[:, 0] * spatial_shapes[:, 1]).sum()) != num_value:
            raise ValueError(f"MultiScaleDeformableAttention: expected value to have sum(H * W) = "
                             f"{int((spatial_shapes[:, 0] * spatial_shapes[:, 1]).sum())} entries, but got {num_value}")
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

    def _sampling_locations(self, reference_points: Tensor, offsets: Tensor, spatial_shapes: Tensor) -> Tensor:
        """Reference points plus offsets: in pixels of each level (2-d points), or as fractions of half the
        reference box per point (4-d boxes (x, y, w, h))."""
        reference = reference_points[:, :, None, :, None, :]
        if reference_points.shape[-1] == 2:
            level_wh = torch.stack([spatial_shapes[..., 1], spatial_shapes[..., 0]], -1)
            return reference + offsets / level_wh[None, None, None, :, None, :]
        if reference_points.shape[-1] == 4:
            return reference[..., :2] + offsets / self.num_points * reference[..., 2:] * 0.5
        raise ValueError(f"MultiScaleDeformableAttention: expected reference_points whose last dimension is 2 or 4, "
                         f"but got {reference_points.shape[-1]}")
