"""Argument normalisation shared by the NumPy-level wrappers (validation itself lives in C++), and the one
translation of pybind11's argument-type errors into spatialgrad's form."""
from __future__ import annotations

import functools
import inspect
import operator
import reprlib
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np

IntOrPair = Union[int, Sequence[int]]

# The grid sampler's modes by name, as aten's and aclnn's integers (read by its functions, the PyTorch adapters and
# the Ascend rules).
GRID_INTERPOLATION = {"bilinear": 0, "nearest": 1, "bicubic": 2}
GRID_PADDING = {"zeros": 0, "border": 1, "reflection": 2}

_SHORT = reprlib.Repr()
_SHORT.maxlist = _SHORT.maxtuple = 8
_SHORT.maxstring = _SHORT.maxother = 60


def short_repr(value: Any) -> str:
    """``repr(value)`` bounded for messages (a list the user passed can be any length): at most 8 entries of a
    list or tuple and 60 characters of a string or other object."""
    return _SHORT.repr(value)


def int_list(value: Optional[IntOrPair], name: str, op: str) -> list[int]:
    """An int, a sequence of ints or None (-> []) as a list of Python ints.

    The C++ core checks how many entries are allowed and their ranges; this only checks types.
    """
    if value is None:
        return []
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{op}(): expected {name} to be an int or a sequence of ints, but got {short_repr(value)}")
    if not isinstance(value, (tuple, list)):  # tuples and lists skip a raised TypeError (~0.3 us of a 3 us call)
        try:
            return [operator.index(value)]
        except TypeError:
            pass
    try:
        return [operator.index(v) for v in value]
    except TypeError:
        raise TypeError(
            f"{op}(): expected {name} to be an int or a sequence of ints, but got {short_repr(value)}"
        ) from None


# The annotations (strings: the modules use postponed evaluation) of the arguments that must be NumPy arrays.
_ARRAY_ANNOTATIONS = {"np.ndarray": False, "Optional[np.ndarray]": True}  # -> whether None is accepted


def explain_argument_errors(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` with pybind11's "incompatible function arguments" replaced by a one-line message.

    pybind11 rejects a non-array argument of ``_core`` by printing every argument it was given (a long list is
    tens of kilobytes). Applied once to every public NumPy function (``functional/__init__.py``); the check runs
    only after the call failed, so a valid call pays just the extra frame (0.1-0.25 us on 2-4 us calls).
    """
    @functools.wraps(function)
    def explained(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except TypeError as error:
            if "incompatible function arguments" not in str(error):
                raise
            message = _argument_type_message(function, args, kwargs)
        raise TypeError(message)
    return explained


def _argument_type_message(function: Callable[..., Any], args: tuple, kwargs: dict) -> str:
    """op(): expected <the first argument that is not an array> to be a NumPy array, but got <its type>."""
    op = function.__name__
    bound = inspect.signature(function).bind(*args, **kwargs)
    for name, parameter in inspect.signature(function).parameters.items():
        if name not in bound.arguments or parameter.annotation not in _ARRAY_ANNOTATIONS:
            continue
        value = bound.arguments[name]
        if value is None and _ARRAY_ANNOTATIONS[parameter.annotation]:
            continue
        if not isinstance(value, np.ndarray):
            return (f"{op}(): expected {name} to be a NumPy array, but got {type(value).__name__} "
                    f"(convert it with numpy.asarray)")
    got = ", ".join(f"{name}: {type(value).__name__}" for name, value in bound.arguments.items())
    return f"{op}(): expected the argument types of its documentation, but got ({got})"[:300]
