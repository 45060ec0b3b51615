"""avg_pool2d rows of the sweep, against F.avg_pool2d and aten.avg_pool2d_backward. A channels_last row calls
spatialgrad.torch's operators on channels-last tensors (the NumPy API returns C-contiguous arrays), as a network
in channels_last would; PyTorch's side gets the same tensors."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

import torch
import torch.nn.functional as F

import spatialgrad as sg
from sweep_ops import Pair, dims, normal


@dataclass(frozen=True)
class PoolRow:
    input: Tuple[int, int, int, int]
    kernel: int
    stride: int
    padding: int = 0
    ceil_mode: bool = False
    count_include_pad: bool = True
    table: bool = False
    channels_last: bool = False

    @property
    def plane(self):
        return self.input[2:]

    def describe(self) -> str:
        text = f"{dims(self.input)} k{self.kernel} s{self.stride}"
        text += f" p{self.padding}" if self.padding else ""
        text += " ceil" if self.ceil_mode else ""
        text += "" if self.count_include_pad else " exclude-pad"
        return text + (" channels_last" if self.channels_last else "")


ROWS = [
    PoolRow((32, 512, 7, 7), 7, 7, table=True),  # a ResNet-18/34 head's global pooling
    PoolRow((64, 2048, 7, 7), 7, 7),  # a ResNet-50 head, batch 64
    PoolRow((1, 1, 7, 7), 3, 1, 1),  # tiny
    PoolRow((2, 64, 13, 13), 3, 2, 1, ceil_mode=True, count_include_pad=False),  # small planes, odd sizes
    PoolRow((1, 3, 224, 224), 2, 2),  # one image
    PoolRow((8, 3, 512, 512), 3, 2, 1),  # images, few channels
    PoolRow((16, 16, 56, 56), 2, 2),
    PoolRow((8, 64, 112, 112), 3, 2, 1),  # `make bench`'s shape (a ResNet stem)
    PoolRow((64, 64, 56, 56), 3, 1, 1, count_include_pad=False),  # an Inception branch, batch 64
    PoolRow((2, 256, 32, 32), 2, 2),
    PoolRow((4, 3, 600, 800), 5, 1, 2),  # a 5x5 box blur
    PoolRow((1, 16, 1024, 1024), 4, 4),
    PoolRow((1, 1, 2048, 2048), 2, 2),
    PoolRow((1, 1, 10000, 10000), 2, 2),  # a plane beyond 8k x 8k
    # issue 44: channels_last networks (a ResNet stem's pooling, a downsampling step, a 3x3 blur)
    PoolRow((8, 64, 56, 56), 3, 2, 1, channels_last=True),
    PoolRow((8, 64, 112, 112), 3, 2, 1, channels_last=True),
    PoolRow((16, 256, 14, 14), 2, 2, channels_last=True),
    PoolRow((8, 3, 224, 224), 3, 1, 1, channels_last=True),
]


def build_channels_last(row: PoolRow, x, g, args, k, s, p):
    import spatialgrad.torch as sgt

    cl = torch.channels_last
    tx = torch.from_numpy(x).contiguous(memory_format=cl)
    tg = torch.from_numpy(g).contiguous(memory_format=cl)
    backward = torch.ops.spatialgrad.avg_pool2d_backward
    return {
        "forward": Pair(lambda: sgt.avg_pool2d(tx, *args), lambda: F.avg_pool2d(tx, *args), "F.avg_pool2d", [x]),
        "backward": Pair(lambda: backward(tg, tx, k, s, p, row.ceil_mode, row.count_include_pad, None),
                         lambda: torch.ops.aten.avg_pool2d_backward(tg, tx, k, s, p, row.ceil_mode,
                                                                    row.count_include_pad, None),
                         "aten.avg_pool2d_backward", [g, x]),
    }


def build(row: PoolRow, rng):
    x = normal(rng, row.input)
    args = (row.kernel, row.stride, row.padding, row.ceil_mode, row.count_include_pad)
    tx = torch.from_numpy(x)
    g = normal(rng, row.input[:2] + tuple(F.avg_pool2d(tx[:1, :1], *args).shape[2:]))
    tg = torch.from_numpy(g)
    k, s, p = [row.kernel] * 2, [row.stride] * 2, [row.padding] * 2
    if row.channels_last:
        return build_channels_last(row, x, g, args, k, s, p)
    return {
        "forward": Pair(lambda: sg.avg_pool2d(x, *args), lambda: F.avg_pool2d(tx, *args), "F.avg_pool2d", [x]),
        "backward": Pair(lambda: sg.avg_pool2d_backward(g, x, *args),
                         lambda: torch.ops.aten.avg_pool2d_backward(tg, tx, k, s, p, row.ceil_mode,
                                                                    row.count_include_pad, None),
                         "aten.avg_pool2d_backward", [g, x]),
    }
