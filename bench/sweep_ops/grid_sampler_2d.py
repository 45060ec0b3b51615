"""grid_sampler_2d rows of the sweep, against aten.grid_sampler_2d and aten.grid_sampler_2d_backward (both
gradients). Grids are of three kinds: "uniform" (locations uniform in [-1, 1], as bench/ops/grid_sampler_2d.py;
a grid of P x 1 is a set of P points, as PointRend samples), "flow" (the identity plus a smooth random flow of a
few pixels: warping an image or a feature map by optical flow) and "crop" (F.affine_grid of a rotated window of
`zoom` input pixels per output pixel: cropping patches, spatial transformers). A channels_last row reads the input
as a channels-last view (both sides get the same strides)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Tuple

import numpy as np
import torch
import torch.nn.functional as F

import spatialgrad as sg
from sweep_ops import Pair, dims, normal

MODES = {"bilinear": 0, "nearest": 1, "bicubic": 2}
PADDINGS = {"zeros": 0, "border": 1, "reflection": 2}


@dataclass(frozen=True)
class GridRow:
    input: Tuple[int, int, int, int]
    grid: Tuple[int, int]  # (Ho, Wo)
    mode: str = "bilinear"
    padding: str = "zeros"
    align_corners: bool = False
    kind: str = "uniform"  # "uniform", "flow" or "crop"
    zoom: float = 1.0  # input pixels per output pixel of a crop
    table: bool = False
    channels_last: bool = False

    @property
    def plane(self):
        return self.input[2:]

    def describe(self) -> str:
        kind = f"crop x{self.zoom:g}" if self.kind == "crop" else self.kind
        return (f"{dims(self.input)}{' channels_last' if self.channels_last else ''} grid {self.grid[0]}x{self.grid[1]} "
                f"{kind} {self.mode} {self.padding}" + (" align" if self.align_corners else ""))


ROWS = [
    GridRow((2, 3, 1024, 1024), (1024, 1024), table=True),  # warping images (issue 31's table)
    GridRow((2, 3, 1024, 1024), (1024, 1024), "bilinear", "border", True, kind="flow"),  # ... by an optical flow
    GridRow((1, 3, 2048, 2048), (64, 64), table=True),  # a patch of a large image (issue 31's table)
    GridRow((1, 3, 2048, 2048), (224, 224), kind="crop", zoom=2),  # a rotated crop, resized
    GridRow((8, 1, 256, 256), (256, 256), table=True),  # warping masks
    GridRow((8, 3, 256, 256), (256, 256), table=True),  # a spatial transformer on images
    GridRow((8, 3, 256, 256), (256, 256), "nearest", table=True),
    GridRow((4, 3, 512, 512), (512, 512), "nearest", "reflection", True, kind="flow"),  # augmentation warps
    GridRow((1, 1, 7, 7), (7, 7), "nearest", "border"),  # tiny
    GridRow((64, 3, 32, 32), (32, 32), "bicubic", "zeros", kind="crop"),  # a transformer on CIFAR, batch 64
    GridRow((16, 16, 64, 64), (64, 64), "bicubic", "border", True),
    GridRow((8, 32, 64, 64), (64, 64), "bicubic", "reflection"),  # `make bench`'s shape
    GridRow((4, 64, 128, 128), (128, 128), "bilinear", "reflection", True, kind="flow"),  # warping features
    GridRow((8, 256, 32, 32), (32, 32), kind="flow"),  # feature alignment, many channels
    GridRow((2, 256, 128, 128), (2048, 1)),  # PointRend: a few points on a large feature map
    GridRow((2, 16, 256, 256), (1024, 1024), "bilinear", "border"),  # many points per pixel
    GridRow((1, 1, 8000, 8000), (256, 256), table=True),  # a large plane (issue 31's table)
    GridRow((1, 1, 10000, 10000), (256, 256), kind="crop"),  # a tile of a plane beyond 8k x 8k
    # issue 44: few-channel images, photos, channels_last features, small crops of large planes
    GridRow((8, 3, 256, 256), (256, 256), "bicubic"),
    GridRow((8, 1, 256, 256), (256, 256), "nearest"),
    GridRow((8, 1, 256, 256), (256, 256), "bicubic"),
    GridRow((4, 3, 512, 384), (256, 192)),  # photos, a spatial transformer's half-size output
    GridRow((4, 3, 512, 384), (512, 384), "bilinear", "border", kind="flow"),
    GridRow((8, 64, 56, 56), (28, 28), channels_last=True),  # features from a channels_last network
    GridRow((8, 3, 224, 224), (224, 224), "bilinear", "reflection", kind="crop", zoom=0.8, channels_last=True),
    GridRow((2, 8, 600, 600), (600, 600), "nearest"),  # nearest on large planes
    GridRow((1, 2, 4096, 4096), (32, 32), "bicubic", kind="crop"),  # a small crop of a large plane
]


def affine(theta: np.ndarray, shape, align_corners: bool) -> torch.Tensor:
    return F.affine_grid(torch.from_numpy(theta.astype(np.float32)), list(shape), align_corners=align_corners)


def flow_grid(rng, row: GridRow, pixels: float = 4.0) -> np.ndarray:
    """The identity plus a smooth flow (a 9x9 field of N(0, pixels) displacements, interpolated)."""
    n, h, w = row.input[0], *row.plane
    out = (n, 1) + row.grid
    identity = affine(np.tile(np.eye(2, 3), (n, 1, 1)), out, row.align_corners)
    coarse = torch.from_numpy(normal(rng, (n, 2, 9, 9)) * pixels)
    flow = F.interpolate(coarse, size=list(row.grid), mode="bilinear", align_corners=True).permute(0, 2, 3, 1)
    span = 0 if not row.align_corners else 1  # normalised units per pixel: 2 / W, or 2 / (W - 1) when aligned
    return (identity + flow * torch.tensor([2 / (w - span), 2 / (h - span)])).numpy()


def crop_grid(rng, row: GridRow) -> np.ndarray:
    """Per image, a window of zoom * grid pixels anywhere in the plane, rotated by up to 15 degrees."""
    n, h, w = row.input[0], *row.plane
    scale = np.array([row.zoom * row.grid[1] / w, row.zoom * row.grid[0] / h])
    theta = np.zeros((n, 2, 3))
    for image in range(n):
        angle = math.radians(rng.uniform(-15, 15))
        rotation = np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
        theta[image, :, :2] = rotation * scale[None, :]
        theta[image, :, 2] = rng.uniform(-1, 1, 2) * np.maximum(1 - scale, 0)
    return affine(theta, (n, 1) + row.grid, row.align_corners).numpy()


def make_grid(rng, row: GridRow) -> np.ndarray:
    if row.kind == "flow":
        return flow_grid(rng, row)
    if row.kind == "crop":
        return crop_grid(rng, row)
    return rng.uniform(-1, 1, (row.input[0],) + row.grid + (2,)).astype(np.float32)


def channels_last(x: np.ndarray) -> np.ndarray:
    """The same values as a channels-last (N, C, H, W) view: C is the fastest axis."""
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


def build(row: GridRow, rng):
    x, grid = normal(rng, row.input), make_grid(rng, row)
    if row.channels_last:
        x = channels_last(x)
    g = normal(rng, row.input[:2] + row.grid)
    tx, tgrid, tg = torch.from_numpy(x), torch.from_numpy(grid), torch.from_numpy(g)
    options = (row.mode, row.padding, row.align_corners)
    numbers = (MODES[row.mode], PADDINGS[row.padding], row.align_corners)
    return {
        "forward": Pair(lambda: sg.grid_sample(x, grid, *options),
                        lambda: torch.ops.aten.grid_sampler_2d(tx, tgrid, *numbers), "aten.grid_sampler_2d",
                        [x, grid]),
        "backward": Pair(lambda: sg.grid_sampler_2d_backward(g, x, grid, *options),
                         lambda: torch.ops.aten.grid_sampler_2d_backward(tg, tx, tgrid, *numbers, [True, True]),
                         "aten.grid_sampler_2d_backward", [g, x, grid]),
    }
