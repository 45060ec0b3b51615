"""Argument normalisation shared by the NumPy-level wrappers (validation itself lives in C++)."""
from __future__ import annotations

import operator
from typing import Optional, Sequence, Union

IntOrPair = Union[int, Sequence[int]]


def int_list(value: Optional[IntOrPair], name: str, op: str) -> list[int]:
    """An int, a sequence of ints or None (-> []) as a list of Python ints.

    The C++ core checks how many entries are allowed and their ranges; this only checks types.
    """
    if value is None:
        return []
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{op}(): expected {name} to be an int or a sequence of ints, but got {value!r}")
    try:
        return [operator.index(value)]
    except TypeError:
        pass
    try:
        return [operator.index(v) for v in value]
    except TypeError:
        raise TypeError(
            f"{op}(): expected {name} to be an int or a sequence of ints, but got {value!r}"
        ) from None
