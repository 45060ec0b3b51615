"""avg_pool2d at the standard shape (8,64,112,112): k3 s2 p1 and k2 s2 in float32; k3 s2 p1 in float16 and
bfloat16 (against our float32, and against torch in bfloat16)."""
import numpy as np
import torch
import torch.nn.functional as F

import spatialgrad as sg
from common import Case, half_cases, nbytes, torch_call, torch_half_kernels


def cases(rng):
    x = rng.standard_normal((8, 64, 112, 112)).astype(np.float32)
    tx = torch.from_numpy(x)
    out = []
    for k, s, p in [(3, 2, 1), (2, 2, 0)]:
        y = sg.avg_pool2d(x, k, s, p)
        g = rng.standard_normal(y.shape).astype(np.float32)
        tg = torch.from_numpy(g)
        variant = f"k{k} s{s} p{p}"
        out.append(Case("avg_pool2d", variant, "forward", lambda k=k, s=s, p=p: sg.avg_pool2d(x, k, s, p),
                        lambda k=k, s=s, p=p: F.avg_pool2d(tx, k, s, p), "F.avg_pool2d", nbytes(x, y)))
        out.append(Case("avg_pool2d", variant, "backward", lambda g=g, k=k, s=s, p=p: sg.avg_pool2d_backward(g, x, k, s, p),
                        lambda tg=tg, k=k, s=s, p=p: torch.ops.aten.avg_pool2d_backward(tg, tx, [k, k], [s, s], [p, p],
                                                                                        False, True, None),
                        "aten.avg_pool2d_backward", nbytes(g, x)))
        if (k, s, p) != (3, 2, 1):
            continue
        out += half_cases("avg_pool2d", variant, "forward", lambda x: sg.avg_pool2d(x, 3, 2, 1), [x], nbytes(x, y),
                          torch_half_kernels(lambda fmt: torch_call(F.avg_pool2d, [tx], fmt, 3, 2, 1)), "F.avg_pool2d")
        out += half_cases("avg_pool2d", variant, "backward", lambda g, x: sg.avg_pool2d_backward(g, x, 3, 2, 1),
                          [g, x], nbytes(g, x),
                          torch_half_kernels(lambda fmt: torch_call(torch.ops.aten.avg_pool2d_backward, [tg, tx], fmt,
                                                                    [3, 3], [2, 2], [1, 1], False, True, None)),
                          "aten.avg_pool2d_backward")
    return out
