"""grid_sampler_2d at the standard shape: input (8,32,64,64), grid (8,64,64,2) uniform in [-1.1,1.1], float32,
align_corners=False; bilinear, nearest and bicubic with zeros padding, bilinear with border and reflection,
bicubic and nearest with border; bilinear at 4x the shape (batch 32, against PyTorch and against our batch 8:
its time should be ~4x the standard one);
bilinear/zeros, nearest/border and bicubic/border also in float16 and bfloat16 (against our float32, and against
PyTorch's kernel in the same dtype where it has one: 2.x, not 1.13)."""
import numpy as np
import torch

import spatialgrad as sg
from common import Case, half_cases, nbytes, torch_call, torch_half_kernels


def mode_cases(variant, x, grid, g, name, padding, mode, pad):
    """Forward and backward of one interpolation / padding mode against PyTorch."""
    tx, tgrid, tg = torch.from_numpy(x), torch.from_numpy(grid), torch.from_numpy(g)
    return [
        Case("grid_sampler_2d", variant, "forward", lambda: sg.grid_sample(x, grid, name, padding),
             lambda: torch.ops.aten.grid_sampler_2d(tx, tgrid, mode, pad, False), "aten.grid_sampler_2d",
             nbytes(x, grid, g)),
        Case("grid_sampler_2d", variant, "backward", lambda: sg.grid_sampler_2d_backward(g, x, grid, name, padding),
             lambda: torch.ops.aten.grid_sampler_2d_backward(tg, tx, tgrid, mode, pad, False, [True, True]),
             "aten.grid_sampler_2d_backward", nbytes(g, x, grid, x, grid)),
    ]


def cases(rng):
    x = rng.standard_normal((8, 32, 64, 64)).astype(np.float32)
    grid = rng.uniform(-1.1, 1.1, (8, 64, 64, 2)).astype(np.float32)
    g = rng.standard_normal((8, 32, 64, 64)).astype(np.float32)
    tx, tgrid, tg = torch.from_numpy(x), torch.from_numpy(grid), torch.from_numpy(g)
    out = []
    modes = {"bilinear": 0, "nearest": 1, "bicubic": 2}
    paddings = {"zeros": 0, "border": 1, "reflection": 2}
    for name, padding in [("bilinear", "zeros"), ("nearest", "zeros"), ("bicubic", "zeros"), ("bilinear", "border"),
                          ("bilinear", "reflection"), ("bicubic", "border"), ("nearest", "border")]:
        out += mode_cases(f"{name} {padding}", x, grid, g, name, padding, modes[name], paddings[padding])
    big = [np.concatenate([a] * 4) for a in (x, grid, g)]
    out += mode_cases("bilinear zeros batch 32", *big, "bilinear", "zeros", 0, 0)
    # Cost linear in work: batch 32 timed alternately against our batch 8 (so that machine noise hits both
    # alike); the speed-up column is batch-8 time / batch-32 time, 0.25x when the cost is exactly linear.
    bx, bgrid, bg = big
    out.append(Case("grid_sampler_2d", "bilinear zeros batch 32", "forward", lambda: sg.grid_sample(bx, bgrid),
                    lambda: sg.grid_sample(x, grid), "ours batch 8", nbytes(bx, bgrid, bg)))
    out.append(Case("grid_sampler_2d", "bilinear zeros batch 32", "backward",
                    lambda: sg.grid_sampler_2d_backward(bg, bx, bgrid), lambda: sg.grid_sampler_2d_backward(g, x, grid),
                    "ours batch 8", nbytes(bg, bx, bgrid, bx, bgrid)))
    # Second order (the vjp of the backward, cotangents for both gradients) against our own first backward:
    # PyTorch 1.13 has no double backward of grid_sampler_2d. The speed-up column is backward / 2nd-order.
    u = rng.standard_normal(x.shape).astype(np.float32)
    v = rng.standard_normal(grid.shape).astype(np.float32)
    for name in ("bilinear", "bicubic"):
        out.append(Case("grid_sampler_2d", f"{name} zeros", "2nd-order",
                        lambda name=name: sg.grid_sampler_2d_double_backward(u, v, g, x, grid, name),
                        lambda name=name: sg.grid_sampler_2d_backward(g, x, grid, name), "ours backward",
                        nbytes(u, v, g, x, grid, g, x, grid)))
    for name, padding in [("bilinear", "zeros"), ("nearest", "border"), ("bicubic", "border")]:
        mode, pad = modes[name], paddings[padding]

        def torch_forward(fmt, mode=mode, pad=pad):
            return torch_call(torch.ops.aten.grid_sampler_2d, [tx, tgrid], fmt, mode, pad, False)

        def torch_backward(fmt, mode=mode, pad=pad):
            return torch_call(torch.ops.aten.grid_sampler_2d_backward, [tg, tx, tgrid], fmt, mode, pad, False,
                              [True, True])

        out += half_cases("grid_sampler_2d", f"{name} {padding}", "forward",
                          lambda x, grid, name=name, padding=padding: sg.grid_sample(x, grid, name, padding), [x, grid],
                          nbytes(x, grid, g), torch_half_kernels(torch_forward), "aten.grid_sampler_2d")
        out += half_cases("grid_sampler_2d", f"{name} {padding}", "backward",
                          lambda g, x, grid, name=name, padding=padding: sg.grid_sampler_2d_backward(
                              g, x, grid, name, padding), [g, x, grid], nbytes(g, x, grid, x, grid),
                          torch_half_kernels(torch_backward), "aten.grid_sampler_2d_backward")
    return out
