"""An R1 gradient penalty through a spatial transformer and an RoIAlign head: second-order gradients.

The critic warps its input with a learned affine transform (affine_grid + grid_sample), pools regions of
interest (roi_align) and scores them. Its R1 penalty ||d critic / d image||^2 is differentiated with respect to
the critic's parameters, which takes the derivative of grid_sample's backward (with respect to the grid, through
theta, and to the image) and of roi_align's backward. The script

  1. checks the penalty's parameter gradients against central finite differences (float64);
  2. shows that PyTorch cannot do this with F.grid_sample ("derivative for aten::grid_sampler_2d_backward is
     not implemented") nor torchvision's roi_align, and compares with what it can do: bilinear sampling
     written with differentiable gather/index ops, which gives the same numbers;
  3. times one penalty step (forward, gradient, gradient of the penalty) both ways.

    python examples/gradient_penalty.py [--batch 8] [--size 32]
"""
from __future__ import annotations

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

import spatialgrad.torch as sgt


def gather_grid_sample(x, grid):
    """Bilinear grid_sample (zeros padding, align_corners=False) from gather and arithmetic: slower than a
    kernel, but PyTorch can differentiate it twice."""
    n, c, h, w = x.shape
    ix = ((grid[..., 0] + 1) * w - 1) / 2
    iy = ((grid[..., 1] + 1) * h - 1) / 2
    x0, y0 = ix.floor().detach(), iy.floor().detach()
    out = 0
    for dy in (0, 1):
        for dx in (0, 1):
            cx, cy = x0 + dx, y0 + dy
            weight = (1 - (ix - cx).abs()) * (1 - (iy - cy).abs())
            inside = ((cx >= 0) & (cx < w) & (cy >= 0) & (cy < h)).to(x.dtype)
            flat = (cy.clamp(0, h - 1) * w + cx.clamp(0, w - 1)).long().view(n, 1, -1).expand(n, c, -1)
            values = x.reshape(n, c, h * w).gather(2, flat).view(n, c, *grid.shape[1:3])
            out = out + values * (weight * inside).unsqueeze(1)
    return out


class Critic(nn.Module):
    def __init__(self, sample, roi_align, channels=8):
        super().__init__()
        self.sample, self.roi_align = sample, roi_align
        self.theta = nn.Parameter(torch.tensor([[1.0, 0.1, 0.05], [-0.08, 0.95, -0.03]]))
        self.conv = nn.Conv2d(3, channels, 3, padding=1)
        self.score = nn.Linear(channels * 4 * 4, 1)

    def forward(self, image, boxes):
        theta = self.theta.expand(image.shape[0], 2, 3)
        grid = F.affine_grid(theta, list(image.shape), align_corners=False)
        features = torch.tanh(self.conv(self.sample(image, grid)))
        pooled = self.roi_align(features, boxes, (4, 4), 1.0, 2, True)
        return self.score(pooled.flatten(1)).sum()


def r1_penalty(critic, image, boxes):
    image = image.detach().requires_grad_()
    (grad,) = torch.autograd.grad(critic(image, boxes), image, create_graph=True)
    return grad.square().sum()


def parameter_gradients(critic, image, boxes):
    critic.zero_grad()
    r1_penalty(critic, image, boxes).backward()
    # (the score's bias does not change the penalty: no gradient)
    return [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in critic.parameters()]


def finite_difference_check(critic, image, boxes, samples=6, eps=1e-6):
    """Central differences of the penalty along a few parameter entries (float64)."""
    grads = parameter_gradients(critic, image, boxes)
    worst = 0.0
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param, grad in zip(critic.parameters(), grads):
            for _ in range(samples):
                i = int(torch.randint(param.numel(), (1,), generator=generator))
                flat = param.view(-1)
                original = flat[i].item()
                flat[i] = original + eps
                with torch.enable_grad():
                    plus = r1_penalty(critic, image, boxes).item()
                flat[i] = original - eps
                with torch.enable_grad():
                    minus = r1_penalty(critic, image, boxes).item()
                flat[i] = original
                numeric = (plus - minus) / (2 * eps)
                worst = max(worst, abs(numeric - grad.view(-1)[i].item()) / (1e-6 + abs(numeric)))
    return worst


def step_time(critic, image, boxes, repeats=5):
    parameter_gradients(critic, image, boxes)  # warm-up
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        parameter_gradients(critic, image, boxes)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--size", type=int, default=32)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(2)

    def sg_sample(x, grid):
        return sgt.grid_sample(x, grid, align_corners=False)

    ours = Critic(sg_sample, sgt.roi_align).double()
    # torchvision's roi_align has no double backward either ("double backwards on roi_align not supported"):
    # the comparison keeps ours there and replaces only grid_sample.
    theirs = Critic(gather_grid_sample, sgt.roi_align).double()
    theirs.load_state_dict(ours.state_dict())
    image = torch.rand(args.batch, 3, args.size, args.size, dtype=torch.float64)
    boxes = torch.tensor([[b, 2.0 + b, 3.0, args.size - 4.0, args.size - 5.0 - b] for b in range(args.batch)],
                         dtype=torch.float64)

    error = finite_difference_check(ours, image[:2], boxes[:2])
    print(f"R1 penalty parameter gradients vs central differences: worst relative error {error:.2e}")
    assert error < 1e-4, error

    for name, sample, roi_align in (("F.grid_sample", lambda x, g: F.grid_sample(x, g, align_corners=False),
                                     sgt.roi_align),
                                    ("torchvision.ops.roi_align", sg_sample, torchvision.ops.roi_align)):
        try:
            parameter_gradients(Critic(sample, roi_align).double(), image, boxes)
            print(f"PyTorch's {name}: differentiated twice")
        except RuntimeError as e:
            print(f"PyTorch's {name} cannot be differentiated twice: {str(e).splitlines()[0]}")

    for a, b in zip(parameter_gradients(ours, image, boxes), parameter_gradients(theirs, image, boxes)):
        torch.testing.assert_close(a, b)
    print("same penalty gradients as PyTorch's gather-based bilinear sampling")

    for dtype in (torch.float64, torch.float32):
        ours, theirs = ours.to(dtype), theirs.to(dtype)
        x, bx = image.to(dtype), boxes.to(dtype)
        t_ours, t_theirs = step_time(ours, x, bx), step_time(theirs, x, bx)
        print(f"{str(dtype):<14} penalty step: spatialgrad {t_ours * 1e3:7.2f} ms, with the gather composition "
              f"{t_theirs * 1e3:7.2f} ms ({t_theirs / t_ours:.2f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
