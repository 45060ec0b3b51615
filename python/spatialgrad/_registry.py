"""The one table of operators (``OPERATORS``): it makes :mod:`spatialgrad.functional`'s exports, the functions
:mod:`spatialgrad.autograd` differentiates, :mod:`spatialgrad.torch`'s adapters list (and their TorchScript and
torch.fx plumbing) and ``patch()``'s operators.

The table is built from the functional modules listed in ``spatialgrad.functional.OPERATOR_MODULES``: each one
declares its operator (``OPERATOR = declare(...)``) next to its functions. An operator lists its functions (the
forward, its backward, and a second-order kernel where the backward is not linear) as ``OpSpec``s: the array
arguments in positional order, which of them are differentiable, and the pullback: the vjp of the function
written as one call of another function. The vjp of a forward is its backward; the vjp of a linear backward is
its forward again, so those differentiate to any order; the vjp of another backward is its second-order kernel,
which has no pullback (a third derivative raises). The pullbacks only pass arrays along and read shapes, so the
same entries serve NumPy arrays (``OpSpec.backward``) and torch tensors (``spatialgrad.torch`` applies each
call as an autograd Function, which is what makes ``create_graph=True`` work).
"""
from __future__ import annotations

import functools
import importlib
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import numpy as np

from .functional._args import explain_argument_errors, short_repr

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

    def backward(self, cotangents, arrays: Dict[str, Any], options: Dict[str, Any], needs: Sequence[bool]) -> Grads:
        """The gradients of the arrays (NumPy): ``cotangents`` is the output gradient, or a tuple of them."""
        if self.outputs == 1 and not isinstance(cotangents, tuple):
            cotangents = (cotangents,)
        needs = [bool(n) and d for n, d in zip(needs, self.differentiable)]
        if not any(needs) or all(c is None for c in cotangents):
            return (None,) * len(self.arrays)
        call = pullback_call(self, cotangents, arrays, options, needs)
        return gather_grads(call, as_tuple(OPS[call.op].forward(**call.arrays, **call.options)), needs)


@functools.lru_cache(maxsize=None)
def _signature(fn) -> inspect.Signature:
    return inspect.signature(fn)  # once per function: every torch call binds its options


def pullback_call(spec: OpSpec, cotangents, arrays, options, needs) -> Call:
    if spec.pullback is None:
        raise NotImplementedError(
            f"spatialgrad: {spec.name} has no derivative (it is already a second-order gradient; third-order "
            f"gradients of {_FIRST_OF[spec.name]} are not implemented)")
    return spec.pullback(tuple(cotangents), arrays, options, needs)


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


# THE table, in the order of spatialgrad.functional.OPERATOR_MODULES (spatialgrad.torch's and patch()'s order).
# spatialgrad.functional sets that list before it imports this module; the modules it names declare their
# operators with the definitions above, which is why this comes last.
from .functional import OPERATOR_MODULES  # noqa: E402

OPERATORS: Tuple[Operator, ...] = tuple(
    importlib.import_module(f"{__package__}.functional.{module}").OPERATOR for module in OPERATOR_MODULES)

# Every NumPy function by name (the entries spatialgrad.torch's autograd Function applies).
OPS: Dict[str, OpSpec] = {spec.name: spec for operator in OPERATORS for spec in operator.functions}

# The forward each function belongs to, for messages.
_FIRST_OF = {spec.name: operator.name for operator in OPERATORS for spec in operator.functions}

# What differentiable_ops() lists and vjp() accepts: every entry with a pullback.
DIFFERENTIABLE = tuple(name for name, spec in OPS.items() if spec.pullback is not None)


def lookup(op, among: Sequence[str] = DIFFERENTIABLE) -> OpSpec:
    """The spec of an operator given by name or by its spatialgrad function."""
    if isinstance(op, str):
        if op in among:
            return OPS[op]
    else:
        for name in among:
            if OPS[name].forward is op:
                return OPS[name]
    # The forwards only: all names with the backwards and a long op came to 320 characters.
    names = ", ".join(name for name in among if not name.endswith("backward"))
    raise ValueError(f"spatialgrad: expected one of the differentiable operators ({names} or their backwards: "
                     f"spatialgrad.autograd.differentiable_ops()), but got {short_repr(op)}")
