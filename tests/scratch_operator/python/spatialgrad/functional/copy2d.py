"""copy2d: the identity on 4-D arrays (the scratch operator of scripts/scratch_operator.sh)."""
from __future__ import annotations

import numpy as np

from .. import _core
from .._declare import Call, declare

__all__ = ["copy2d", "copy2d_backward"]


def copy2d(input: np.ndarray) -> np.ndarray:
    """A copy of a 4-D array.

    Example::

        y = spatialgrad.copy2d(np.ones((1, 2, 3, 4), np.float32))
    """
    return _core.copy2d(input)


def copy2d_backward(grad_output: np.ndarray) -> np.ndarray:
    """The gradient of copy2d's input: grad_output, copied."""
    return _core.copy2d_backward(grad_output)


# Both functions are linear: each one's vjp is the other.

def _forward_vjp(g, arrays, o, needs) -> Call:
    return Call("copy2d_backward", dict(grad_output=g[0]), {}, (0,))


def _backward_vjp(g, arrays, o, needs) -> Call:
    return Call("copy2d", dict(input=g[0]), {}, (0,))


OPERATOR = declare(
    (copy2d, ("input",), (True,), 1, _forward_vjp),
    (copy2d_backward, ("grad_output",), (True,), 1, _backward_vjp),
    patched=False)
