"""Train a tiny detector head on synthetic data with all five spatialgrad operators, on the CPU.

The model: conv stem -> avg_pool2d -> upsample_bilinear2d (a two-scale feature) -> a learned affine warp with
grid_sample -> roi_align on the object boxes -> a deformable-attention head (ms_deform_attn) that predicts each
object's colour. The same model is also built from PyTorch/torchvision ops (and mmcv's grid_sample formula for
deformable attention); the script checks that both give the same gradients, compares their step times, trains
the spatialgrad model for ~100 steps and writes a loss curve.

The step times are fair: both libraries run on the same number of threads (torch.set_num_threads and
sg.set_num_threads, THREADS below; each library otherwise picks its own count), in one process, and each time
is the median of 10 steps after 2 warm-up steps (the first steps allocate and fill caches).

    python examples/train_tiny_detector.py [--steps 100] [--out examples/train_tiny_detector.png]
"""
from __future__ import annotations

import argparse
import copy
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

import spatialgrad as sg
import spatialgrad.torch as sgt

IMAGE, OBJECTS, HEADS, CHANNELS, POINTS = 32, 2, 2, 8, 4
THREADS = 2  # for both libraries, so that the step times compare the kernels, not the thread counts
LEVELS = ((IMAGE, IMAGE), (IMAGE // 2, IMAGE // 2))


class SpatialgradOps:
    name = "spatialgrad"
    avg_pool2d = staticmethod(sgt.avg_pool2d)
    grid_sample = staticmethod(sgt.grid_sample)
    roi_align = staticmethod(sgt.roi_align)

    @staticmethod
    def upsample(x, size):
        return sgt.upsample_bilinear2d(x, size=size, align_corners=False)

    @staticmethod
    def ms_deform_attn(value, shapes, starts, loc, attn):
        return sgt.ms_deform_attn(value, shapes, starts, loc, attn)


class TorchOps:
    name = "torch"
    avg_pool2d = staticmethod(F.avg_pool2d)
    grid_sample = staticmethod(F.grid_sample)
    roi_align = staticmethod(torchvision.ops.roi_align)

    @staticmethod
    def upsample(x, size):
        return F.interpolate(x, size=size, mode="bilinear", align_corners=False)

    @staticmethod
    def ms_deform_attn(value, shapes, starts, loc, attn):
        return sgt.ms_deform_attn_reference(value, shapes, loc, attn)


class TinyDetector(nn.Module):
    def __init__(self, ops):
        super().__init__()
        self.ops = ops
        width = HEADS * CHANNELS
        self.stem = nn.Conv2d(3, width, 3, padding=1)
        self.warp = nn.Parameter(torch.zeros(2, 3))  # affine warp, starts at the identity
        self.query = nn.Linear(width * 16, 32)
        self.value = nn.Conv2d(width, width, 1)
        self.offsets = nn.Linear(32, HEADS * len(LEVELS) * POINTS * 2)
        self.weights = nn.Linear(32, HEADS * len(LEVELS) * POINTS)
        self.head = nn.Linear(width, 3)
        nn.init.normal_(self.offsets.weight, std=1e-3)
        nn.init.zeros_(self.offsets.bias)

    def forward(self, images, boxes):
        ops, batch = self.ops, images.shape[0]
        fine = F.relu(self.stem(images))
        coarse = ops.avg_pool2d(fine, 2, 2)
        features = fine + ops.upsample(coarse, (IMAGE, IMAGE))
        theta = torch.eye(2, 3, dtype=images.dtype) + 0.1 * self.warp
        grid = F.affine_grid(theta.expand(batch, 2, 3), list(features.shape), align_corners=False)
        warped = ops.grid_sample(features, grid, align_corners=False)
        rois = ops.roi_align(warped, boxes, (4, 4), spatial_scale=1.0, sampling_ratio=2, aligned=True)
        queries = torch.tanh(self.query(rois.flatten(1))).view(batch, OBJECTS, -1)
        # Two value levels (the warped 32x32 map and the pooled 16x16 one), flattened to (bs, S, nH, C).
        value = torch.cat([self.value(warped).flatten(2), self.value(coarse).flatten(2)], dim=2)
        value = value.transpose(1, 2).reshape(batch, -1, HEADS, CHANNELS)
        shapes = torch.tensor(LEVELS, dtype=torch.int64)
        starts = torch.tensor([0, IMAGE * IMAGE], dtype=torch.int64)
        # Reference points: box centres in [0, 1]; learned offsets around them.
        centres = ((boxes[:, 1:3] + boxes[:, 3:5]) / 2 / IMAGE).view(batch, OBJECTS, 1, 1, 1, 2)
        offsets = self.offsets(queries).view(batch, OBJECTS, HEADS, len(LEVELS), POINTS, 2)
        locations = centres + 0.1 * torch.tanh(offsets)
        attn = self.weights(queries).view(batch, OBJECTS, HEADS, len(LEVELS) * POINTS).softmax(-1)
        attn = attn.view(batch, OBJECTS, HEADS, len(LEVELS), POINTS)
        attended = ops.ms_deform_attn(value, shapes, starts, locations, attn)
        return self.head(attended)  # (batch, objects, 3): predicted colours


def make_batch(generator, batch=8, dtype=torch.float32):
    """Noisy images with OBJECTS coloured squares each; boxes (K, 5) and the squares' colours as targets."""
    images = 0.1 * torch.randn(batch, 3, IMAGE, IMAGE, generator=generator, dtype=dtype)
    boxes, colours = [], []
    for b in range(batch):
        for _ in range(OBJECTS):
            size = int(torch.randint(6, 12, (1,), generator=generator))
            x0, y0 = (int(v) for v in torch.randint(0, IMAGE - size, (2,), generator=generator))
            colour = torch.rand(3, generator=generator, dtype=dtype)
            images[b, :, y0:y0 + size, x0:x0 + size] += colour.view(3, 1, 1)
            boxes.append([b, x0, y0, x0 + size, y0 + size])
            colours.append(colour)
    return images, torch.tensor(boxes, dtype=dtype), torch.stack(colours).view(batch, OBJECTS, 3)


def check_gradients(model_sg, model_torch) -> float:
    """Largest parameter-gradient difference between the two builds on one float64 batch."""
    batch = make_batch(torch.Generator().manual_seed(123), dtype=torch.float64)
    grads = []
    for model in (model_sg, model_torch):
        model = copy.deepcopy(model).double()
        images, boxes, colours = batch
        F.mse_loss(model(images, boxes), colours).backward()
        grads.append({n: p.grad for n, p in model.named_parameters()})
    return max(float((grads[0][n] - grads[1][n]).abs().max()) for n in grads[0])


def step_times(models, steps=10) -> list:
    """Median step time of each model, their steps alternating one by one (so that a busy machine's load,
    which comes and goes, weighs on all of them alike)."""
    optimisers = [torch.optim.SGD(model.parameters(), lr=1e-3) for model in models]
    generator = torch.Generator().manual_seed(5)
    batches = [make_batch(generator, batch=16) for _ in range(steps + 2)]
    times = [[] for _ in models]
    for images, boxes, colours in batches:
        for model, optimiser, samples in zip(models, optimisers, times):
            start = time.perf_counter()
            optimiser.zero_grad()
            F.mse_loss(model(images, boxes), colours).backward()
            optimiser.step()
            samples.append(time.perf_counter() - start)
    return [sorted(samples[2:])[len(samples[2:]) // 2] for samples in times]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--out", default="examples/train_tiny_detector.png")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(THREADS)
    sg.set_num_threads(THREADS)

    model = TinyDetector(SpatialgradOps())
    reference = copy.deepcopy(model)
    reference.ops = TorchOps()

    difference = check_gradients(model, reference)
    print(f"gradient check (float64, all parameters): max |spatialgrad - torch| = {difference:.2e}")

    t_sg, t_torch = step_times([copy.deepcopy(model), copy.deepcopy(reference)])
    print(f"\nstep time (ms, median of 10 steps after 2 warm-up, the two models' steps alternating, {THREADS} threads "
          "for both libraries)")
    print(f"{'model built from':<20} {'step time (ms)':>15}")
    print(f"{'spatialgrad':<20} {t_sg * 1e3:15.2f}")
    print(f"{'torch/torchvision':<20} {t_torch * 1e3:15.2f}")
    print(f"{'speed-up':<20} {t_torch / t_sg:14.2f}x\n")

    optimiser = torch.optim.Adam(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(1)
    losses = []
    for step in range(args.steps):
        images, boxes, colours = make_batch(generator)
        optimiser.zero_grad()
        loss = F.mse_loss(model(images, boxes), colours)
        loss.backward()
        optimiser.step()
        losses.append(float(loss))
        if step % 20 == 0 or step == args.steps - 1:
            print(f"step {step:4d}  loss {loss.item():.4f}")

    first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
    print(f"\nmean loss over the first 10 steps {first:.4f}, over the last 10 {last:.4f}")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.plot(losses)
        ax.set_xlabel("step")
        ax.set_ylabel("MSE loss")
        ax.set_yscale("log")
        ax.set_title("tiny detector trained with spatialgrad operators")
        fig.tight_layout()
        fig.savefig(args.out, dpi=100)
        print(f"wrote {args.out}")
    except ImportError:
        print("matplotlib is not installed: no loss curve written")

    ok = difference < 1e-9 and last < 0.7 * first
    print("OK" if ok else "FAILED: gradients differ or the loss did not fall")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
