"""How a functional module declares its operator (``OPERATOR = declare(...)`` at its end): the operator's
functions (the forward first, then its backward and, where the backward is not linear, a second-order kernel) as
``OpSpec``s: the array arguments in positional order, which of them are differentiable, and the pullback: the vjp
of the function written as one call (``Call``) of another function. The vjp of a forward is its backward; the vjp
of a linear backward is its forward again, so those differentiate to any order; the vjp of another backward is
its second-order kernel, which has no pullback (a third derivative raises). The pullbacks only pass arrays along
and read shapes, so the same entries serve NumPy arrays and torch tensors.

This module knows no operator: the table built from the declarations is ``spatialgrad._registry``, which imports
the functional modules (they import only this, ``_args``, ``_strict`` and ``_core``: the package imports top-down).
"""
from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import numpy as np

from ._args import explain_argument_errors

Grads = Tuple[Optional[np.ndarray], ...]


@dataclass(frozen=True)
class Call:
    """One call of a registered entry, and which of its outputs is the gradient of each array argument of
    the entry being differentiated (``None``: no gradient)."""

    op: str
    arrays: Dict[str, Any]
    options: Dict[str, Any]
    grads: Tuple[Optional[int], ...]


# pullback(cotangents per output (None = zeros), arrays by name, options by name, needs per array) -> Call
Pullback = Callable[[Tuple[Any, ...], Dict[str, Any], Dict[str, Any], Sequence[bool]], Call]


@dataclass(frozen=True)
class OpSpec:
    name: str
    forward: Callable[..., Any]
    arrays: Tuple[str, ...]  # array arguments, in positional order
    differentiable: Tuple[bool, ...]  # per array argument
    outputs: int  # 1: returns an array; k > 1: returns a tuple of k (array or None)
    pullback: Optional[Pullback]  # None: no further derivative (a third-order gradient)

    def bind(self, args, kwargs) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        """Splits a call's arguments into (arrays, options), with defaults applied."""
        bound = _signature(self.forward).bind(*args, **kwargs)
        bound.apply_defaults()
        arrays = {n: bound.arguments[n] for n in self.arrays}
        options = {k: v for k, v in bound.arguments.items() if k not in arrays}
        return arrays, options


@functools.lru_cache(maxsize=None)
def _signature(fn) -> inspect.Signature:
    return inspect.signature(fn)  # once per function: every torch call binds its options


def as_tuple(out) -> tuple:
    return out if isinstance(out, tuple) else (out,)


def gather_grads(call: Call, outputs: tuple, needs: Sequence[bool]) -> tuple:
    return tuple(outputs[i] if (i is not None and need) else None for i, need in zip(call.grads, needs))


def pair(value) -> Tuple[Any, Any]:
    """An option given as one value or a sequence of 1 or 2, as a pair."""
    if isinstance(value, (tuple, list)):
        if len(value) == 1:
            return value[0], value[0]
        return value[0], value[1]
    return value, value


def shape(array) -> Tuple[int, ...]:
    """An array's (or a tensor's) shape as ints."""
    return tuple(int(s) for s in array.shape)


@dataclass(frozen=True)
class Operator:
    """One operator: its NumPy functions (the forward first, then its backward and any second-order kernel),
    and whether ``spatialgrad.torch.patch()`` routes PyTorch's calls to it. The forward's name is the
    operator's name in ``spatialgrad``, ``spatialgrad.torch`` (an adapter of that name) and ``patch()``."""

    functions: Tuple[OpSpec, ...]
    patched: bool

    @property
    def name(self) -> str:
        return self.functions[0].name


def declare(*entries, patched: bool) -> Operator:
    """A functional module's operator: each entry (function, arrays, differentiable, outputs, pullback), the
    forward first. The table holds the functions wrapped to explain a non-array argument (the exported ones)."""
    return Operator(tuple(OpSpec(function.__name__, _exported(explain_argument_errors(function)), *rest)
                          for function, *rest in entries), patched)


def _exported(wrapper: Callable[..., Any]) -> Callable[..., Any]:
    """A wrapper named after the package that exports it (spatialgrad.functional, where ``spatialgrad`` takes it
    from) rather than after the module of the function it wraps: pickle (and so ``multiprocessing``) saves a
    function as its module and name, and under the defining module that name is the unwrapped function."""
    wrapper.__module__ = f"{__package__}.functional"
    return wrapper
