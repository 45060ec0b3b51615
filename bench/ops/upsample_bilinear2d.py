"""upsample_bilinear2d at the standard shape (8,64,64,64) -> (128,128) float32, align_corners=False,
NCHW (against F.interpolate / aten backward) and NHWC (against torch channels_last); the same in float16 and
bfloat16 (against our float32, and against torch in the same dtype where it has a kernel)."""
import numpy as np
import torch
import torch.nn.functional as F

import spatialgrad as sg
from common import Case, half_cases, nbytes, torch_call, torch_half_kernels


def cases(rng):
    size = [128, 128]
    x = rng.standard_normal((8, 64, 64, 64)).astype(np.float32)
    g = rng.standard_normal((8, 64, 128, 128)).astype(np.float32)
    tx, tg = torch.from_numpy(x), torch.from_numpy(g)
    # NHWC: the same values stored channels-last; torch sees them as channels_last NCHW tensors.
    tx_cl = tx.contiguous(memory_format=torch.channels_last)
    tg_cl = tg.contiguous(memory_format=torch.channels_last)
    x_nhwc, g_nhwc = tx_cl.permute(0, 2, 3, 1).numpy(), tg_cl.permute(0, 2, 3, 1).numpy()
    assert x_nhwc.flags.c_contiguous and g_nhwc.flags.c_contiguous
    y = sg.upsample_bilinear2d(x, size)
    in_size = list(x.shape)
    out = [
        Case("upsample_bilinear2d", "NCHW 64->128", "forward", lambda: sg.upsample_bilinear2d(x, size),
             lambda: F.interpolate(tx, size=size, mode="bilinear", align_corners=False), "F.interpolate",
             nbytes(x, y)),
        Case("upsample_bilinear2d", "NCHW 64->128", "backward",
             lambda: sg.upsample_bilinear2d_backward(g, size, in_size),
             lambda: torch.ops.aten.upsample_bilinear2d_backward(tg, size, in_size, False, None, None),
             "aten.upsample_bilinear2d_backward", nbytes(g, x)),
        Case("upsample_bilinear2d", "NHWC 64->128", "forward",
             lambda: sg.upsample_bilinear2d(x_nhwc, size, layout="NHWC"),
             lambda: F.interpolate(tx_cl, size=size, mode="bilinear", align_corners=False),
             "F.interpolate channels_last", nbytes(x, y)),
        Case("upsample_bilinear2d", "NHWC 64->128", "backward",
             lambda: sg.upsample_bilinear2d_backward(g_nhwc, size, list(x_nhwc.shape), layout="NHWC"),
             lambda: torch.ops.aten.upsample_bilinear2d_backward(tg_cl, size, in_size, False, None, None),
             "aten backward channels_last", nbytes(g, x)),
    ]
    def torch_forward(t):
        return lambda fmt: torch_call(F.interpolate, [t], fmt, size, None, "bilinear", False)

    def torch_backward(t):
        return lambda fmt: torch_call(torch.ops.aten.upsample_bilinear2d_backward, [t], fmt, size, in_size, False,
                                      None, None)

    out += half_cases("upsample_bilinear2d", "NCHW 64->128", "forward", lambda x: sg.upsample_bilinear2d(x, size),
                      [x], nbytes(x, y), torch_half_kernels(torch_forward(tx)), "F.interpolate")
    out += half_cases("upsample_bilinear2d", "NCHW 64->128", "backward",
                      lambda g: sg.upsample_bilinear2d_backward(g, size, in_size), [g], nbytes(g, x),
                      torch_half_kernels(torch_backward(tg)), "aten.upsample_bilinear2d_backward")
    out += half_cases("upsample_bilinear2d", "NHWC 64->128", "forward",
                      lambda x: sg.upsample_bilinear2d(x, size, layout="NHWC"), [x_nhwc], nbytes(x, y),
                      torch_half_kernels(torch_forward(tx_cl)), "F.interpolate channels_last")
    out += half_cases("upsample_bilinear2d", "NHWC 64->128", "backward",
                      lambda g: sg.upsample_bilinear2d_backward(g, size, list(x_nhwc.shape), layout="NHWC"), [g_nhwc],
                      nbytes(g, x), torch_half_kernels(torch_backward(tg_cl)), "aten backward channels_last")
    return out
