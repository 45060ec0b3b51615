"""Scripts a small detector head built on spatialgrad.torch and saves it for a C++ program (deploy.cpp).

The model (the tiny detector of examples/train_tiny_detector.py, shrunk): conv stem -> avg_pool2d ->
upsample_bilinear2d -> an affine warp with grid_sample -> roi_align over the boxes -> a deformable-attention
head (ms_deform_attn). torch.jit.script compiles it; with spatialgrad's native operators
(spatialgrad.torch.native) the scripted graph calls torch.ops.spatialgrad.*, so torch.jit.save writes a model
that runs without Python wherever libspatialgrad_torch is loaded. Writes to --out:
- model.pt: the scripted model (seeded weights);
- inputs.pt: the example inputs, as the attributes `images` and `boxes` of a scripted module (C++ reads them
  with torch::jit::load(...).attr(...));
and prints the model's output on them ("shape: d0 d1 ..." then one value per line, %.9g), the format
deploy.cpp prints, so the two can be compared line by line (tests/python/test_torchscript_deploy.py does).

    python examples/torchscript_deploy/export.py --out DIR
    build/deploy/deploy DIR/model.pt DIR/inputs.pt      # see CMakeLists.txt beside this file
"""
from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import spatialgrad.torch as sgt

IMAGE, OBJECTS, HEADS, CHANNELS, POINTS, LEVELS = 16, 2, 2, 4, 4, 2


class DeployModel(nn.Module):
    """Colour scores (batch, OBJECTS, 3) of the boxes (batch * OBJECTS, 5) of images (batch, 3, IMAGE, IMAGE)."""

    def __init__(self):
        super().__init__()
        width = HEADS * CHANNELS
        self.stem = nn.Conv2d(3, width, 3, padding=1)
        self.warp = nn.Parameter(0.1 * torch.randn(2, 3))
        self.query = nn.Linear(width * 16, 16)
        self.value = nn.Conv2d(width, width, 1)
        self.offsets = nn.Linear(16, HEADS * LEVELS * POINTS * 2)
        self.weights = nn.Linear(16, HEADS * LEVELS * POINTS)
        self.head = nn.Linear(width, 3)
        self.register_buffer("shapes", torch.tensor([[IMAGE, IMAGE], [IMAGE // 2, IMAGE // 2]]))
        self.register_buffer("starts", torch.tensor([0, IMAGE * IMAGE]))
        # (TorchScript reads module attributes, not Python globals)
        self.image, self.objects, self.heads, self.channels = IMAGE, OBJECTS, HEADS, CHANNELS
        self.levels, self.points = LEVELS, POINTS

    def forward(self, images: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
        batch = images.shape[0]
        fine = F.relu(self.stem(images))
        coarse = sgt.avg_pool2d(fine, 2)
        features = fine + sgt.upsample_bilinear2d(coarse, [self.image, self.image], None, False)
        theta = torch.eye(2, 3, dtype=images.dtype) + self.warp
        grid = F.affine_grid(theta.expand(batch, 2, 3), list(features.shape), align_corners=False)
        warped = sgt.grid_sample(features, grid, "bilinear", "zeros", False)
        rois = sgt.roi_align(warped, boxes, [4, 4], 1.0, 2, True)
        queries = torch.tanh(self.query(rois.flatten(1))).view(batch, self.objects, -1)
        # Two value levels (the warped map and the pooled one), flattened to (bs, S, nH, C).
        value = torch.cat([self.value(warped).flatten(2), self.value(coarse).flatten(2)], dim=2)
        value = value.transpose(1, 2).reshape(batch, -1, self.heads, self.channels)
        centres = ((boxes[:, 1:3] + boxes[:, 3:5]) / 2 / self.image).view(batch, self.objects, 1, 1, 1, 2)
        offsets = self.offsets(queries).view(batch, self.objects, self.heads, self.levels, self.points, 2)
        weights = self.weights(queries).view(batch, self.objects, self.heads, self.levels * self.points).softmax(-1)
        attended = sgt.ms_deform_attn(value, self.shapes, self.starts, centres + 0.1 * torch.tanh(offsets),
                                      weights.view(batch, self.objects, self.heads, self.levels, self.points))
        return self.head(attended)


class Inputs(nn.Module):
    """The example inputs as attributes, so that C++ loads them with torch::jit::load."""

    def __init__(self, images: torch.Tensor, boxes: torch.Tensor):
        super().__init__()
        self.images, self.boxes = images, boxes

    def forward(self) -> torch.Tensor:
        return self.images


def example_inputs(batch: int = 2):
    generator = torch.Generator().manual_seed(1)
    images = torch.rand(batch, 3, IMAGE, IMAGE, generator=generator)
    corners = torch.rand(batch * OBJECTS, 2, 2, generator=generator) * (IMAGE - 4)
    index = torch.arange(batch).repeat_interleave(OBJECTS)[:, None].float()
    boxes = torch.cat([index, corners.min(1).values, corners.max(1).values + 3], dim=1)
    return images, boxes


def format_output(output: torch.Tensor) -> str:
    """deploy.cpp's format: the shape, then each value (%.9g, exact for float32)."""
    values = output.detach().double().flatten().tolist()
    return "\n".join(["shape: " + " ".join(str(s) for s in output.shape)] + ["%.9g" % v for v in values])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="directory for model.pt and inputs.pt")
    args = parser.parse_args()
    if not sgt.native:
        print("export.py: spatialgrad.torch.native is False (spatialgrad was built without libtorch): a scripted "
              "model would call back into Python and cannot be saved for C++", file=sys.stderr)
        return 1
    torch.manual_seed(0)
    model = torch.jit.script(DeployModel().eval())
    images, boxes = example_inputs()
    os.makedirs(args.out, exist_ok=True)
    torch.jit.save(model, os.path.join(args.out, "model.pt"))
    torch.jit.save(torch.jit.script(Inputs(images, boxes)), os.path.join(args.out, "inputs.pt"))
    with torch.no_grad():
        print(format_output(model(images, boxes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
