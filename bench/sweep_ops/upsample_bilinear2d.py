"""upsample_bilinear2d rows of the sweep (NCHW), against F.interpolate and aten.upsample_bilinear2d_backward."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

import torch
import torch.nn.functional as F

import spatialgrad as sg
from sweep_ops import Pair, dims, normal


@dataclass(frozen=True)
class UpsampleRow:
    input: Tuple[int, int, int, int]
    size: Tuple[int, int]
    align_corners: bool = False
    table: bool = False

    @property
    def plane(self):
        return max(self.input[2:], self.size, key=lambda hw: hw[0] * hw[1])

    def describe(self) -> str:
        return f"{dims(self.input)} -> {self.size[0]}x{self.size[1]}" + (" align" if self.align_corners else "")


ROWS = [
    UpsampleRow((4, 3, 600, 800), (300, 400), table=True),  # downsampling images
    UpsampleRow((1, 1, 7, 7), (14, 14)),  # tiny
    UpsampleRow((1, 3, 224, 224), (448, 448)),
    UpsampleRow((8, 3, 512, 512), (256, 256), align_corners=True),
    UpsampleRow((4, 3, 600, 800), (1000, 1333)),  # resizing to a detector's input (non-integer scale)
    UpsampleRow((16, 16, 56, 56), (112, 112)),
    UpsampleRow((8, 64, 64, 64), (128, 128)),  # `make bench`'s shape
    UpsampleRow((64, 64, 14, 14), (28, 28)),  # batch 64, small planes
    UpsampleRow((2, 256, 13, 21), (25, 42)),  # an FPN top-down step (not a factor of 2)
    UpsampleRow((2, 19, 128, 256), (512, 1024)),  # segmentation logits back to the image
    UpsampleRow((1, 512, 7, 7), (224, 224), align_corners=True),  # class activation maps
    UpsampleRow((1, 3, 1024, 1024), (2048, 2048), align_corners=True),
    UpsampleRow((1, 1, 2048, 2048), (1024, 1024)),
    UpsampleRow((1, 1, 10000, 10000), (5000, 5000)),  # a plane beyond 8k x 8k
]


def build(row: UpsampleRow, rng):
    x = normal(rng, row.input)
    g = normal(rng, row.input[:2] + row.size)
    tx, tg = torch.from_numpy(x), torch.from_numpy(g)
    size, ac = list(row.size), row.align_corners
    return {
        "forward": Pair(lambda: sg.upsample_bilinear2d(x, size, align_corners=ac),
                        lambda: F.interpolate(tx, size=size, mode="bilinear", align_corners=ac), "F.interpolate",
                        [x]),
        "backward": Pair(lambda: sg.upsample_bilinear2d_backward(g, size, row.input, ac),
                         lambda: torch.ops.aten.upsample_bilinear2d_backward(tg, size, list(row.input), ac, None,
                                                                             None),
                         "aten.upsample_bilinear2d_backward", [g]),
    }
