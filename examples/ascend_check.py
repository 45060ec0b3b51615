"""What would a Deformable-DETR layer with 12-channel heads and a bicubic warp hit on an Ascend NPU?

One training step runs on the CPU under ``spatialgrad.ascend.strict(chip, rejected="warn")``: every
spatialgrad call is checked against the chip's aclnn rules (docs/ascend.md) and each call the NPU would
reject or compute differently is reported, without changing any result. ``spatialgrad.torch.patch(ascend=chip)``
does the same and raises at the first rejected call instead.

    python examples/ascend_check.py [chip ...]      (default: every chip the rules know)
"""
import sys
import warnings

import numpy as np
import torch
import torch.nn.functional as F

import spatialgrad
import spatialgrad.torch as sgt
from spatialgrad import ascend


def training_step() -> None:
    torch.manual_seed(0)
    # 96 dims over 8 heads: 12 channels per head, which the NPU's deformable attention gradient refuses.
    layer = sgt.nn.MultiScaleDeformableAttention(embed_dims=96, num_heads=8, num_levels=2, num_points=4,
                                                 batch_first=True)
    shapes = torch.tensor([[8, 8], [4, 4]])
    starts = torch.tensor([0, 64])
    value = torch.rand(2, 80, 96)
    query = torch.rand(2, 10, 96)
    reference = torch.rand(2, 10, 2, 2)
    features = layer(query, value=value, reference_points=reference, spatial_shapes=shapes, level_start_index=starts)
    # A bicubic warp of an image by a predicted flow: the NPU has no bicubic grid_sample gradient.
    image = torch.rand(2, 3, 16, 16, requires_grad=True)
    grid = torch.rand(2, 16, 16, 2) * 2 - 1
    with sgt.patch():  # F.grid_sample -> spatialgrad
        warped = F.grid_sample(image, grid, mode="bicubic", align_corners=False)
    (features.sum() + warped.sum()).backward()


def report(chip: str) -> list:
    with ascend.strict(chip, rejected="warn"), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ascend.AscendCompatibilityWarning)
        training_step()
    messages = sorted({str(w.message) for w in caught if issubclass(w.category, ascend.AscendCompatibilityWarning)})
    print(f"Ascend {chip}: {len(messages) or 'nothing'}{' finding(s)' if messages else ' to report'}")
    for message in messages:
        print("  -", message)
    return messages


def main() -> None:
    chips = sys.argv[1:] or ascend.chips()
    found = {chip: report(chip) for chip in chips}
    # The NumPy API answers the same question for one call, without running it.
    value = np.zeros((1, 16, 8, 12), np.float32)
    locations = np.zeros((1, 10, 8, 1, 4, 2), np.float32)
    weights = np.zeros((1, 10, 8, 1, 4), np.float32)
    grad = np.zeros((1, 10, 96), np.float32)
    for f in ascend.check("ms_deform_attn_backward", value, np.array([[4, 4]]), np.array([0]), locations, weights,
                          grad, chip="910B"):
        print(f"check(): {f.rule!r} broken by {f.argument} = {f.value} ({'rejected' if f.rejects else 'differs'}; "
              f"{f.source})")
    if "910B" in found:  # what this example is about: both calls are rejected on the A2 series
        assert any("channels % 8 == 0" in m for m in found["910B"]), found["910B"]
        assert any("interpolationMode" in m for m in found["910B"]), found["910B"]
    print(f"spatialgrad {spatialgrad.__version__}: results are unchanged by the check")


if __name__ == "__main__":
    main()
