"""Each operator's test inputs, in one place: the tests that cover every operator read them from here, so a new
operator adds its entries to this file and to no test's own list.

- cases(rng): small float64 inputs for each forward, shared by the autograd, second-order, half-precision and
  torch-adapter tests: (op name, positional arrays, keyword options); sample points are kept away from integer
  pixel coordinates so finite differences do not straddle the kinks of bilinear interpolation.
- DIFFERENTIABLE: which of each forward's arrays has a gradient (the others' is None), stated here
  independently of the operator table that vjp follows.
- backward_cases(rng, forward_cases): inputs of each differentiable backward, built from the forward cases.
- valid_call(name): keyword arguments of a valid call of each public NumPy function whose array arguments a
  test spoils one at a time (test_first_contact).
"""
from __future__ import annotations

import numpy as np


def cases(rng):
    out = []
    out.append(("avg_pool2d", [rng.standard_normal((2, 3, 7, 6))], dict(kernel_size=3, stride=2, padding=1)))
    out.append(("upsample_bilinear2d", [rng.standard_normal((2, 3, 5, 4))], dict(output_size=(9, 7))))
    # grid_sample: pixel coordinates ((x + 1) * W - 1) / 2 with fractional parts in [0.2, 0.8]
    n, h, w, ho, wo = 2, 5, 6, 4, 3
    px = rng.integers(0, w - 1, size=(n, ho, wo)) + rng.uniform(0.2, 0.8, size=(n, ho, wo))
    py = rng.integers(0, h - 1, size=(n, ho, wo)) + rng.uniform(0.2, 0.8, size=(n, ho, wo))
    grid = np.stack([(2 * px + 1) / w - 1, (2 * py + 1) / h - 1], axis=-1)
    out.append(("grid_sample", [rng.standard_normal((n, 3, h, w)), grid], dict(mode="bilinear")))
    boxes = np.array([[0, 1.3, 2.2, 7.6, 8.1], [1, 0.4, 0.7, 10.2, 5.9], [1, 3.1, 3.3, 4.2, 4.9]])
    out.append(("roi_align", [rng.standard_normal((2, 3, 10, 12)), boxes],
                dict(output_size=(3, 2), spatial_scale=1.0, sampling_ratio=2, aligned=True)))
    shapes = np.array([[4, 5], [2, 3]], dtype=np.int64)
    starts = np.array([0, 20], dtype=np.int64)
    bs, q, heads, levels, points, c = 2, 3, 2, 2, 2, 4
    value = rng.standard_normal((bs, 26, heads, c))
    # locations: pixel coordinate loc * size - 0.5 with fractional part in [0.2, 0.8]
    loc = np.empty((bs, q, heads, levels, points, 2))
    for lvl, (hh, ww) in enumerate(shapes):
        for axis, size in ((0, ww), (1, hh)):
            pix = rng.integers(0, size - 1, size=(bs, q, heads, points)) + rng.uniform(0.2, 0.8, size=(bs, q, heads, points))
            loc[:, :, :, lvl, :, axis] = (pix + 0.5) / size
    attn = rng.uniform(0.1, 1.0, size=(bs, q, heads, levels, points))
    out.append(("ms_deform_attn", [value, shapes, starts, loc, attn], {}))
    return out


DIFFERENTIABLE = {
    "avg_pool2d": (True,),
    "upsample_bilinear2d": (True,),
    "grid_sample": (True, True),
    "roi_align": (True, False),
    "ms_deform_attn": (True, False, False, True, True),
}


def backward_cases(rng, forward_cases):
    """(name of a backward, its positional arrays, options) for each backward that has a derivative, built from
    `forward_cases` (name -> (arrays, options), from cases())."""
    import spatialgrad as sg

    out = []
    x = forward_cases["avg_pool2d"][0][0]
    o = forward_cases["avg_pool2d"][1]
    out.append(("avg_pool2d_backward", [rng.standard_normal(sg.avg_pool2d(x, **o).shape), x], o))
    x = forward_cases["upsample_bilinear2d"][0][0]
    out.append(("upsample_bilinear2d_backward", [rng.standard_normal((2, 3, 9, 7))],
                dict(output_size=(9, 7), input_size=x.shape, align_corners=False, scales_h=0.0, scales_w=0.0)))
    (x, boxes), o = forward_cases["roi_align"]
    out.append(("roi_align_backward", [rng.standard_normal((3, 3, 3, 2)), boxes],
                dict(input_shape=x.shape, pooled_height=3, pooled_width=2, spatial_scale=1.0, sampling_ratio=2,
                     aligned=True)))
    (x, grid), o = forward_cases["grid_sample"]
    for mode in ("bilinear", "bicubic"):
        out.append(("grid_sampler_2d_backward", [rng.standard_normal((2, 3, 4, 3)), x, grid],
                    dict(mode=mode, padding_mode="border", align_corners=False)))
    arrays, _ = forward_cases["ms_deform_attn"]
    out.append(("ms_deform_attn_backward", list(arrays) + [rng.standard_normal((2, 3, 8))], {}))
    return out


def valid_call(name: str) -> dict:
    """Keyword arguments of a valid call of the public NumPy function `name` (KeyError: a function without one)."""
    x, g4 = np.zeros((1, 2, 4, 4)), np.zeros((1, 2, 2, 2))
    grid, boxes = np.zeros((1, 2, 2, 2)), np.array([[0, 0.0, 0.0, 2.0, 2.0]])
    value, loc, w = np.zeros((1, 20, 2, 4)), np.zeros((1, 3, 2, 2, 2, 2)), np.zeros((1, 3, 2, 2, 2))
    deform = dict(value=value, spatial_shapes=[[4, 4], [2, 2]], level_start_index=[0, 16], sampling_locations=loc,
                  attention_weights=w)
    return {
        "avg_pool2d": dict(input=x, kernel_size=2),
        "avg_pool2d_backward": dict(grad_output=g4, input=x, kernel_size=2),
        "grid_sample": dict(input=x, grid=grid),
        "grid_sampler_2d_backward": dict(grad_output=g4, input=x, grid=grid),
        "grid_sampler_2d_double_backward": dict(grad_grad_input=x, grad_grad_grid=grid, grad_output=g4, input=x,
                                                grid=grid),
        "roi_align": dict(input=x, boxes=boxes, output_size=2),
        "roi_align_backward": dict(grad_output=np.zeros((1, 2, 2, 2)), boxes=boxes, input_shape=x.shape,
                                   pooled_height=2, pooled_width=2, spatial_scale=1.0, sampling_ratio=0, aligned=True),
        "ms_deform_attn": dict(deform),
        "ms_deform_attn_backward": dict(deform, grad_output=np.zeros((1, 3, 8))),
        "ms_deform_attn_double_backward": dict(deform, grad_output=np.zeros((1, 3, 8)), grad_grad_value=value),
    }[name]


def native_calls(rng):
    """[(kernel, positional arguments)] for every kernel of torch.ops.spatialgrad, float64 tensors from cases() and
    backward_cases() in several modes, shared by the tests of the PyTorch operator layer (fake kernels, opcheck,
    meta tensors). The differentiable tensors of the forwards and first-order backwards require grad; a
    second-order kernel's do not (its own derivative raises, by design)."""
    import torch

    forward = {name: (arrays, options) for name, arrays, options in cases(rng)}

    def t(a, grad=True):
        tensor = torch.from_numpy(np.ascontiguousarray(a))
        return tensor.requires_grad_(grad and tensor.is_floating_point())

    def randn(*shape, grad=True):
        return t(rng.standard_normal(shape), grad)

    x = t(forward["avg_pool2d"][0][0])  # (2, 3, 7, 6)
    channels_last = t(forward["avg_pool2d"][0][0]).detach().contiguous(memory_format=torch.channels_last)
    (image, grid), _ = forward["grid_sample"]
    image, grid = t(image), t(grid)  # (2, 3, 5, 6), (2, 4, 3, 2)
    (feature, boxes), _ = forward["roi_align"]
    feature, boxes = t(feature), t(boxes, grad=False)  # (2, 3, 10, 12), (3, 5)
    deform = [t(a) for a in forward["ms_deform_attn"][0]]  # value (2, 26, 2, 4), ..., grad_output (2, 3, 8)
    plain = [d.detach() for d in deform]
    calls = [
        ("avg_pool2d", (x, [3, 3], [2, 2], [1, 1], False, True, None)),
        ("avg_pool2d", (x, [3, 2], [2, 1], [1, 0], True, False, 5)),
        ("avg_pool2d", (x[0], [2], [], [0], True, True, None)),  # 3-D, stride = kernel
        ("avg_pool2d", (channels_last.requires_grad_(), [3, 3], [2, 2], [1, 1], False, True, None)),
        ("avg_pool2d_backward", (randn(2, 3, 4, 3), x, [3, 3], [2, 2], [1, 1], False, True, None)),
        ("avg_pool2d_backward", (randn(2, 3, 4, 3), channels_last, [3, 3], [2, 2], [1, 1], False, True, None)),
        ("upsample_bilinear2d", (x, [9, 7], False, None)),
        ("upsample_bilinear2d", (x, None, True, [1.5, 2.0])),
        ("upsample_bilinear2d", (channels_last.requires_grad_(), [9, 7], False, None)),
        ("upsample_bilinear2d_backward", (randn(2, 3, 9, 7), [9, 7], [2, 3, 7, 6], False, None, None)),
        ("upsample_bilinear2d_backward", (randn(2, 3, 10, 12), None, [2, 3, 7, 6], True, [1.5, 2.0],
                                          torch.channels_last)),
    ]
    for mode, padding, align_corners in ((0, 0, False), (1, 1, True), (2, 2, False), (2, 0, True)):
        calls.append(("grid_sampler_2d", (image, grid, mode, padding, align_corners)))
    for mask in ([True, True], [True, False], [False, True]):
        calls.append(("grid_sampler_2d_backward", (randn(2, 3, 4, 3), image, grid, 0, 1, False, mask)))
    calls.append(("grid_sampler_2d_backward", (randn(2, 3, 4, 3), image, grid, 2, 2, True, [True, True])))
    fixed = [a.detach() for a in (image, grid, randn(2, 3, 4, 3))]
    calls += [
        ("grid_sampler_2d_double_backward", (randn(2, 3, 5, 6, grad=False), randn(2, 4, 3, 2, grad=False),
                                             fixed[2], fixed[0], fixed[1], 2, 1, False, [True, True, True])),
        ("grid_sampler_2d_double_backward", (None, randn(2, 4, 3, 2, grad=False), fixed[2], fixed[0], fixed[1], 0,
                                             0, True, [True, False, True])),
        ("roi_align", (feature, boxes, 1.0, 3, 2, 2, True)),
        ("roi_align", (feature, boxes, 0.5, 2, 2, -1, False)),
        ("roi_align_backward", (randn(3, 3, 3, 2), boxes, 1.0, 3, 2, 2, 3, 10, 12, 2, True)),
        ("ms_deform_attn", tuple(deform) + (64,)),
        ("ms_deform_attn_backward", tuple(deform) + (randn(2, 3, 8), 64)),
        ("ms_deform_attn_double_backward", tuple(plain) + (randn(2, 3, 8, grad=False), randn(2, 26, 2, 4, grad=False),
                                                          randn(2, 3, 2, 2, 2, 2, grad=False), None)),
    ]
    return calls
