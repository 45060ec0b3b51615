"""The rows of the shape sweep (bench/sweep.py), one module per operator.

Each module has ROWS, a declarative table of frozen dataclasses (one per row: the shapes and options of one
call; `describe()` gives the printed shape, `plane` the largest (H, W) it reads or writes, `table` marks the
rows of issue 31's table), and build(row, rng) -> {"forward": Pair, "backward": Pair}, which makes the arrays
(float32) and the two calls of each direction."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np


@dataclass
class Pair:
    """One direction of one row: our NumPy call, the anchor's (PyTorch, torchvision or mmcv's formula) on the
    same values, and the arrays our call reads (the outputs are measured from what the call returns)."""

    ours: Callable[[], object]
    anchor: Callable[[], object]
    anchor_name: str
    inputs: Sequence[np.ndarray]


def dims(shape) -> str:
    """(2, 3, 64, 64) -> "(2,3,64,64)": shapes as the sweep prints them."""
    return "(" + ",".join(str(int(n)) for n in shape) + ")"


def normal(rng: np.random.Generator, shape) -> np.ndarray:
    """float32 standard normal values (drawn in float32: the sweep's largest inputs have 10^8 elements)."""
    return rng.standard_normal(shape, dtype=np.float32)
