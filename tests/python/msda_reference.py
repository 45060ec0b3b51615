"""Multi-scale deformable attention composed from torch.nn.functional.grid_sample, one call per level.

This is the formula of mmcv's pure-PyTorch fallback (``multi_scale_deformable_attn_pytorch``), written
here from its definition: locations in [0, 1] become grid_sample coordinates ``2 * loc - 1`` with
``align_corners=False`` and zero padding, so pixel centres sit at ``(i + 0.5) / W``. It is the parity
reference of the tests and the baseline of the benchmark (bench/ops/ms_deform_attn.py imports it).
It materialises a (bs*nH, C, Q, L*P) tensor of samples, which is what makes it slow and memory-hungry.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def ms_deform_attn_grid_sample(value: torch.Tensor, spatial_shapes, sampling_locations: torch.Tensor,
                               attention_weights: torch.Tensor) -> torch.Tensor:
    """value (bs, S, nH, C), spatial_shapes (L, 2) of (H, W), locations (bs, Q, nH, L, P, 2),
    weights (bs, Q, nH, L, P) -> (bs, Q, nH*C). Differentiable in value, locations and weights."""
    bs, _, heads, channels = value.shape
    _, queries, _, levels, points, _ = sampling_locations.shape
    sizes = [(int(h), int(w)) for h, w in spatial_shapes]
    per_level = value.split([h * w for h, w in sizes], dim=1)
    grids = 2 * sampling_locations - 1
    samples = []
    for level, (h, w) in enumerate(sizes):
        # (bs, H*W, nH, C) -> (bs*nH, C, H, W): one image per (batch, head).
        image = per_level[level].permute(0, 2, 3, 1).reshape(bs * heads, channels, h, w)
        # (bs, Q, nH, P, 2) -> (bs*nH, Q, P, 2): a Q x P grid of points per image.
        grid = grids[:, :, :, level].permute(0, 2, 1, 3, 4).reshape(bs * heads, queries, points, 2)
        samples.append(F.grid_sample(image, grid, mode="bilinear", padding_mode="zeros", align_corners=False))
    # (bs*nH, C, Q, L, P) weighted by (bs*nH, 1, Q, L, P), summed over levels and points.
    stacked = torch.stack(samples, dim=3)
    weights = attention_weights.permute(0, 2, 1, 3, 4).reshape(bs * heads, 1, queries, levels, points)
    out = (stacked * weights).sum(dim=(3, 4))  # (bs*nH, C, Q)
    return out.reshape(bs, heads * channels, queries).transpose(1, 2).contiguous()
