"""Small float64 inputs for each differentiable operator, shared by the autograd and torch-adapter tests.

Each case is (op name, positional arrays, keyword options); sample points are kept away from integer pixel
coordinates so finite differences do not straddle the kinks of bilinear interpolation.
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
