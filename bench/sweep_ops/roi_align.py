"""roi_align rows of the sweep, against torchvision.ops.roi_align and torchvision's _roi_align_backward.
Each box's width and height are drawn apart, uniform in box_px (image pixels), and the box lies anywhere in the
image (the plane / spatial_scale), on a random image of the batch. sampling_ratio <= 0 is adaptive."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

import numpy as np
import torch

import spatialgrad as sg
from sweep_ops import Pair, dims, normal


@dataclass(frozen=True)
class RoiRow:
    input: Tuple[int, int, int, int]
    boxes: int
    box_px: Tuple[float, float]  # (smallest, largest) side in image pixels
    output: int
    sampling_ratio: int
    spatial_scale: float = 1.0
    aligned: bool = True
    table: bool = False

    @property
    def plane(self):
        return self.input[2:]

    def describe(self) -> str:
        text = (f"{dims(self.input)} {self.boxes} boxes {self.box_px[0]:g}-{self.box_px[1]:g} px "
                f"{self.output}x{self.output} sr{self.sampling_ratio}")
        text += f" scale 1/{1 / self.spatial_scale:g}" if self.spatial_scale != 1 else ""
        return text + ("" if self.aligned else " unaligned")


ROWS = [
    RoiRow((1, 3, 800, 800), 64, (8, 300), 14, 2, table=True),  # crops from images (issue 31's table)
    RoiRow((2, 256, 64, 64), 512, (1, 16), 7, 2),  # `make bench`'s shape
    RoiRow((2, 256, 100, 168), 512, (32, 256), 14, 2, 1 / 8),  # a Mask R-CNN mask head (FPN level 1/8)
    RoiRow((2, 256, 200, 336), 1000, (8, 128), 7, 2, 1 / 4),  # a box head on FPN level 1/4, 1000 proposals
    RoiRow((1, 1024, 50, 84), 128, (32, 800), 14, 0, 1 / 16),  # Faster R-CNN C4: large boxes, adaptive
    RoiRow((4, 3, 512, 512), 256, (4, 32), 7, -1),  # small boxes on images, adaptive
    RoiRow((1, 1, 1024, 1024), 16, (200, 800), 14, 0),  # few large boxes, one channel, adaptive
    RoiRow((8, 64, 32, 32), 512, (2, 16), 7, 2, aligned=False),  # torchvision's default (unaligned)
    RoiRow((2, 16, 128, 128), 2000, (1, 8), 5, 1),  # many tiny boxes
    RoiRow((1, 256, 7, 7), 4, (1, 7), 7, 2),  # a tiny plane
    RoiRow((64, 256, 14, 14), 64, (4, 14), 7, 2),  # batch 64
    RoiRow((1, 64, 256, 256), 300, (8, 128), 7, 4),  # fixed sampling, 4x4 per bin
    RoiRow((2, 3, 2048, 2048), 128, (64, 512), 14, 2),  # crops from large images
    RoiRow((1, 1, 10000, 10000), 32, (100, 1000), 7, 2),  # a plane beyond 8k x 8k
]


def make_boxes(rng, row: RoiRow) -> np.ndarray:
    """(K, 5) float32 boxes (batch index, x1, y1, x2, y2) in image pixels, inside the image."""
    height, width = (n / row.spatial_scale for n in row.plane)
    side = rng.uniform(*row.box_px, (row.boxes, 2))
    side = np.minimum(side, [width, height])
    corner = rng.uniform(0, 1, (row.boxes, 2)) * ([width, height] - side)
    batch = rng.integers(0, row.input[0], row.boxes)
    return np.concatenate([batch[:, None], corner, corner + side], 1).astype(np.float32)


def build(row: RoiRow, rng):
    from torchvision.ops import roi_align as tv_roi_align

    x, boxes = normal(rng, row.input), make_boxes(rng, row)
    g = normal(rng, (row.boxes, row.input[1], row.output, row.output))
    tx, tboxes, tg = torch.from_numpy(x), torch.from_numpy(boxes), torch.from_numpy(g)
    o, scale, sr, aligned = row.output, row.spatial_scale, row.sampling_ratio, row.aligned
    ours_sr = max(sr, 0)  # torchvision's -1 (adaptive) is our 0, as spatialgrad.torch.roi_align maps it
    return {
        "forward": Pair(lambda: sg.roi_align(x, boxes, o, scale, ours_sr, aligned),
                        lambda: tv_roi_align(tx, tboxes, o, scale, sr, aligned), "torchvision roi_align", [x, boxes]),
        "backward": Pair(lambda: sg.roi_align_backward(g, boxes, row.input, o, o, scale, ours_sr, aligned),
                         lambda: torch.ops.torchvision._roi_align_backward(tg, tboxes, scale, o, o, *row.input, sr,
                                                                           aligned),
                         "torchvision _roi_align_backward", [g, boxes]),
    }
