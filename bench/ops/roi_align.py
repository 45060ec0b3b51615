"""roi_align at the standard shape: features (2,256,64,64) float32, 512 boxes of 1-16 px, 7x7,
sampling_ratio 2, aligned. Baseline: torchvision.ops.roi_align and its autograd backward kernel. Also in
float16 and bfloat16 (against our float32, and against torchvision in the same dtype where it has a kernel)."""
import numpy as np
import torch

import spatialgrad as sg
from common import Case, half_cases, nbytes, torch_call, torch_half_kernels


def standard_boxes(rng, num_boxes=512, num_images=2, size=64):
    """Boxes of 1-16 px (each side) anywhere in the image, random batch indices."""
    wh = rng.uniform(1, 16, (num_boxes, 2))
    xy = rng.uniform(0, size - wh)
    batch = rng.integers(0, num_images, num_boxes)
    return np.concatenate([batch[:, None], xy, xy + wh], 1).astype(np.float32)


def cases(rng):
    from torchvision.ops import roi_align as tv_roi_align

    x = rng.standard_normal((2, 256, 64, 64)).astype(np.float32)
    boxes = standard_boxes(rng)
    tx, tboxes = torch.from_numpy(x), torch.from_numpy(boxes)
    y = sg.roi_align(x, boxes, 7, 1.0, 2, True)
    g = rng.standard_normal(y.shape).astype(np.float32)
    tg = torch.from_numpy(g)
    variant = "512 boxes 7x7 sr2"
    out = [
        Case("roi_align", variant, "forward", lambda: sg.roi_align(x, boxes, 7, 1.0, 2, True),
             lambda: tv_roi_align(tx, tboxes, 7, 1.0, 2, True), "torchvision roi_align", nbytes(x, boxes, y)),
        Case("roi_align", variant, "backward", lambda: sg.roi_align_backward(g, boxes, x.shape, 7, 7, 1.0, 2, True),
             lambda: torch.ops.torchvision._roi_align_backward(tg, tboxes, 1.0, 7, 7, 2, 256, 64, 64, 2, True),
             "torchvision _roi_align_backward", nbytes(g, boxes, x)),
    ]
    def torch_forward(fmt):
        return torch_call(tv_roi_align, [tx, tboxes], fmt, 7, 1.0, 2, True)

    def torch_backward(fmt):
        return torch_call(torch.ops.torchvision._roi_align_backward, [tg, tboxes], fmt, 1.0, 7, 7, 2, 256, 64, 64, 2,
                          True)

    out += half_cases("roi_align", variant, "forward", lambda x, boxes: sg.roi_align(x, boxes, 7, 1.0, 2, True),
                      [x, boxes], nbytes(x, boxes, y), torch_half_kernels(torch_forward), "torchvision roi_align")
    out += half_cases("roi_align", variant, "backward",
                      lambda g, boxes: sg.roi_align_backward(g, boxes, x.shape, 7, 7, 1.0, 2, True), [g, boxes],
                      nbytes(g, boxes, x), torch_half_kernels(torch_backward), "torchvision _roi_align_backward")
    return out
