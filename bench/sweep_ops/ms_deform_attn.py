"""ms_deform_attn rows of the sweep, against spatialgrad.torch.ms_deform_attn_reference (mmcv's CPU fallback:
F.grid_sample per level, weighted sum), its backward by autograd through a retained graph.

Sampling locations are "local" (Deformable-DETR's: each query's reference point plus N(0, 2 px) offsets at
every level; the encoder's queries are the pixels of all levels, their reference points the pixel centres;
a decoder's are uniform in the image) or "uniform" (anywhere in every level, as bench/ops/ms_deform_attn.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np
import torch

import spatialgrad as sg
from spatialgrad.torch import ms_deform_attn_reference
from sweep_ops import Pair, normal

DETR = ((100, 167), (50, 84), (25, 42), (13, 21))  # Deformable-DETR's levels for an 800x1333 image
BENCH = ((64, 64), (32, 32), (16, 16), (8, 8))  # `make bench`'s levels
SMALL = ((32, 32), (16, 16), (8, 8), (4, 4))
MASK2FORMER = ((64, 128), (32, 64), (16, 32))  # a pixel decoder's levels for a 512x1024 image
DINO5 = ((200, 334),) + DETR  # DINO's 5-scale model: a stride-4 level first
LEVEL_NAMES = {DETR: "DETR levels", BENCH: "levels 64..8", SMALL: "levels 32..4", MASK2FORMER: "M2F levels",
               DINO5: "DINO 5 levels"}


@dataclass(frozen=True)
class DeformRow:
    bs: int
    levels: Tuple[Tuple[int, int], ...]
    heads: int = 8
    channels: int = 32  # per head
    queries: Optional[int] = None  # None: an encoder, Q = S (every pixel of every level is a query)
    points: int = 4
    locations: str = "local"  # or "uniform"
    table: bool = False

    @property
    def plane(self):
        return max(self.levels, key=lambda hw: hw[0] * hw[1])

    @property
    def pixels(self) -> int:
        return sum(h * w for h, w in self.levels)

    def describe(self) -> str:
        levels = LEVEL_NAMES.get(self.levels) or "+".join(f"{h}x{w}" for h, w in self.levels)
        queries = f"Q=S={self.pixels}" if self.queries is None else f"Q{self.queries}"
        return (f"bs{self.bs} {levels} {self.heads}x{self.channels} {queries} P{self.points} "
                f"{self.locations}")


ROWS = [
    DeformRow(2, DETR),  # Deformable-DETR's encoder
    DeformRow(2, DETR, queries=300),  # ... and decoder
    DeformRow(1, DETR, locations="uniform"),  # the encoder at inference, points anywhere
    DeformRow(8, DETR, queries=300),  # the decoder, batch 8
    DeformRow(2, DETR, queries=900),  # DINO's 900 queries
    DeformRow(2, DINO5, queries=900),  # ... on its 5 levels (S = 89,023)
    DeformRow(1, DETR, queries=10, locations="uniform"),  # few queries
    DeformRow(1, DETR, queries=1, locations="uniform"),  # one query
    DeformRow(1, ((400, 667),), queries=300),  # one large level (stride 2 of an 800x1333 image), a decoder's queries
    DeformRow(2, DETR, heads=4, channels=64, queries=300),
    DeformRow(2, DETR, queries=300, points=8),
    DeformRow(2, BENCH, queries=1000, locations="uniform"),  # `make bench`'s shape
    DeformRow(2, MASK2FORMER),  # Mask2Former's pixel decoder (an encoder on 3 levels)
    DeformRow(4, ((32, 32),), queries=1024),  # one level
    DeformRow(2, SMALL, heads=8, channels=16, queries=300),  # few channels per head
    DeformRow(2, ((64, 64), (32, 32)), heads=1, channels=256, queries=1000, points=8),  # one wide head
    DeformRow(16, SMALL, queries=300),  # batch 16 of small images
]


def reference_points(rng, row: DeformRow) -> np.ndarray:
    """(bs, Q, 2) normalised (x, y): the pixel centres of all levels (an encoder) or uniform (a decoder)."""
    if row.queries is not None:
        return rng.uniform(0, 1, (row.bs, row.queries, 2))
    centres = []
    for h, w in row.levels:
        y, x = np.meshgrid((np.arange(h) + 0.5) / h, (np.arange(w) + 0.5) / w, indexing="ij")
        centres.append(np.stack([x.ravel(), y.ravel()], 1))
    return np.broadcast_to(np.concatenate(centres), (row.bs, row.pixels, 2))


def sampling_locations(rng, row: DeformRow) -> np.ndarray:
    queries = row.pixels if row.queries is None else row.queries
    shape = (row.bs, queries, row.heads, len(row.levels), row.points, 2)
    if row.locations == "uniform":
        return rng.uniform(0, 1, shape).astype(np.float32)
    level_sizes = np.array([(w, h) for h, w in row.levels], np.float64)  # (L, 2) as (x, y)
    offsets = rng.normal(0, 2.0, shape) / level_sizes[:, None, :]
    return (reference_points(rng, row)[:, :, None, None, None, :] + offsets).astype(np.float32)


def build(row: DeformRow, rng):
    shapes = np.array(row.levels, np.int64)
    areas = shapes[:, 0] * shapes[:, 1]
    starts = np.cumsum(areas) - areas
    value = normal(rng, (row.bs, row.pixels, row.heads, row.channels))
    loc = sampling_locations(rng, row)
    attn = rng.uniform(0, 1, loc.shape[:-1]).astype(np.float32)
    attn /= attn.sum(axis=(3, 4), keepdims=True)
    grad = normal(rng, (row.bs, loc.shape[1], row.heads * row.channels))
    tv, tl, ta = (torch.from_numpy(a).requires_grad_() for a in (value, loc, attn))
    tg = torch.from_numpy(grad)

    def anchor_forward():
        with torch.no_grad():
            return ms_deform_attn_reference(tv, shapes, tl, ta)

    graph = ms_deform_attn_reference(tv, shapes, tl, ta)
    return {
        "forward": Pair(lambda: sg.ms_deform_attn(value, shapes, starts, loc, attn), anchor_forward,
                        "grid_sample fallback", [value, loc, attn]),
        "backward": Pair(lambda: sg.ms_deform_attn_backward(value, shapes, starts, loc, attn, grad),
                         lambda: torch.autograd.grad(graph, (tv, tl, ta), tg, retain_graph=True),
                         "grid_sample fallback autograd", [value, loc, attn, grad]),
    }
