"""ms_deform_attn at the standard shape: bs 2, levels 64x64/32x32/16x16/8x8, nH 8, C 32, Q 1000, L 4, P 4,
float32, against the grid_sample composition of mmcv's PyTorch fallback (its forward, and its autograd
backward through a retained graph); also in float16 and bfloat16, against our float32 and against the fallback in
the same dtype where PyTorch can run it (its grid_sample in half precision: 2.x)."""
import numpy as np
import torch

import spatialgrad as sg
from common import Case, half_cases, nbytes, torch_half_kernels, torch_in_format
from spatialgrad.torch import ms_deform_attn_reference

LEVELS = [(64, 64), (32, 32), (16, 16), (8, 8)]


def cases(rng):
    bs, heads, channels, queries, points = 2, 8, 32, 1000, 4
    shapes = np.array(LEVELS, np.int64)
    areas = shapes[:, 0] * shapes[:, 1]
    starts = np.cumsum(areas) - areas
    value = rng.standard_normal((bs, int(areas.sum()), heads, channels)).astype(np.float32)
    loc = rng.uniform(0, 1, (bs, queries, heads, len(LEVELS), points, 2)).astype(np.float32)
    attn = rng.uniform(0, 1, (bs, queries, heads, len(LEVELS), points)).astype(np.float32)
    attn /= attn.sum(axis=(3, 4), keepdims=True)
    grad = rng.standard_normal((bs, queries, heads * channels)).astype(np.float32)
    tv, tl, ta = (torch.from_numpy(a).requires_grad_() for a in (value, loc, attn))
    tg = torch.from_numpy(grad)

    def baseline_forward():
        with torch.no_grad():
            return ms_deform_attn_reference(tv, shapes, tl, ta)

    graph = ms_deform_attn_reference(tv, shapes, tl, ta)

    def baseline_backward():
        return torch.autograd.grad(graph, (tv, tl, ta), tg, retain_graph=True)

    variant = "std bs2 Q1000"
    output = sg.ms_deform_attn(value, shapes, starts, loc, attn)
    out = [
        Case("ms_deform_attn", variant, "forward", lambda: sg.ms_deform_attn(value, shapes, starts, loc, attn),
             baseline_forward, "grid_sample fallback", nbytes(value, loc, attn, output)),
        Case("ms_deform_attn", variant, "backward",
             lambda: sg.ms_deform_attn_backward(value, shapes, starts, loc, attn, grad), baseline_backward,
             "grid_sample fallback autograd", nbytes(value, loc, attn, grad, value, loc, attn)),
    ]
    # Second order against our own first backward (mmcv has none); the speed-up column is backward / 2nd-order.
    grads = sg.ms_deform_attn_backward(value, shapes, starts, loc, attn, grad)
    cot = [rng.standard_normal(a.shape).astype(np.float32) for a in grads]
    out.append(Case("ms_deform_attn", variant, "2nd-order",
                    lambda: sg.ms_deform_attn_double_backward(value, shapes, starts, loc, attn, grad, *cot),
                    lambda: sg.ms_deform_attn_backward(value, shapes, starts, loc, attn, grad), "ours backward",
                    nbytes(value, loc, attn, grad, *cot, value, loc, attn, grad)))
    def torch_forward(fmt):
        hv, hl, ha = (torch_in_format(t.detach(), fmt) for t in (tv, tl, ta))

        def forward():
            with torch.no_grad():
                return ms_deform_attn_reference(hv, shapes, hl, ha)
        return forward

    def torch_backward(fmt):
        hv, hl, ha = (torch_in_format(t.detach(), fmt).requires_grad_() for t in (tv, tl, ta))
        half_graph, hg = ms_deform_attn_reference(hv, shapes, hl, ha), torch_in_format(tg, fmt)
        return lambda: torch.autograd.grad(half_graph, (hv, hl, ha), hg, retain_graph=True)

    out += half_cases("ms_deform_attn", variant, "forward",
                      lambda value, loc, attn: sg.ms_deform_attn(value, shapes, starts, loc, attn), [value, loc, attn],
                      nbytes(value, loc, attn, output), torch_half_kernels(torch_forward), "grid_sample fallback")
    out += half_cases("ms_deform_attn", variant, "backward",
                      lambda value, loc, attn, grad: sg.ms_deform_attn_backward(value, shapes, starts, loc, attn, grad),
                      [value, loc, attn, grad], nbytes(value, loc, attn, grad, value, loc, attn),
                      torch_half_kernels(torch_backward), "grid_sample fallback autograd")
    return out
