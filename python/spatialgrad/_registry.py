"""The one table of operators (``OPERATORS``): it makes the functions :mod:`spatialgrad.autograd` differentiates,
:mod:`spatialgrad.torch`'s adapters list (and their TorchScript and torch.fx plumbing) and ``patch()``'s operators.

The table is the operators of the functional modules, in the order of ``spatialgrad.functional.OPERATOR_MODULES``:
each module declares its operator next to its functions with ``spatialgrad._declare`` (the declarations and how
a pullback reads: see there). This module sits above the functional package (it imports it, never the other way)
and applies the pullbacks: ``backward`` for NumPy arrays; ``spatialgrad.torch`` applies each call as an autograd
Function, which is what makes ``create_graph=True`` work.
"""
from __future__ import annotations

from typing import Any, Dict, Sequence

from ._args import short_repr
from ._declare import Call, Grads, Operator, OpSpec, as_tuple, gather_grads
from .functional import OPERATORS

__all__ = ["Call", "OpSpec", "Operator", "OPERATORS", "OPS", "DIFFERENTIABLE", "as_tuple", "gather_grads",
           "backward", "pullback_call", "lookup"]

# Every NumPy function by name (the entries spatialgrad.torch's autograd Function applies).
OPS: Dict[str, OpSpec] = {spec.name: spec for operator in OPERATORS for spec in operator.functions}

# The forward each function belongs to, for messages.
_FIRST_OF = {spec.name: operator.name for operator in OPERATORS for spec in operator.functions}

# What differentiable_ops() lists and vjp() accepts: every entry with a pullback.
DIFFERENTIABLE = tuple(name for name, spec in OPS.items() if spec.pullback is not None)


def pullback_call(spec: OpSpec, cotangents, arrays, options, needs) -> Call:
    if spec.pullback is None:
        raise NotImplementedError(
            f"spatialgrad: {spec.name} has no derivative (it is already a second-order gradient; third-order "
            f"gradients of {_FIRST_OF[spec.name]} are not implemented)")
    return spec.pullback(tuple(cotangents), arrays, options, needs)


def backward(spec: OpSpec, cotangents, arrays: Dict[str, Any], options: Dict[str, Any],
             needs: Sequence[bool]) -> Grads:
    """The gradients of the arrays (NumPy): ``cotangents`` is the output gradient, or a tuple of them."""
    if spec.outputs == 1 and not isinstance(cotangents, tuple):
        cotangents = (cotangents,)
    needs = [bool(n) and d for n, d in zip(needs, spec.differentiable)]
    if not any(needs) or all(c is None for c in cotangents):
        return (None,) * len(spec.arrays)
    call = pullback_call(spec, cotangents, arrays, options, needs)
    return gather_grads(call, as_tuple(OPS[call.op].forward(**call.arrays, **call.options)), needs)


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
