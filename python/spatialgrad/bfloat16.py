"""bfloat16 arrays for the NumPy API.

NumPy has no bfloat16 dtype. spatialgrad's functions accept bfloat16 data in two forms and return
results in the form they were given:

* ``ml_dtypes.bfloat16`` arrays, when the ``ml_dtypes`` package is installed;
* 16-bit integer arrays holding the bfloat16 bit patterns, marked with :func:`bfloat16_bits` (a
  zero-copy view whose dtype carries the metadata ``{"spatialgrad": "bfloat16"}``).

:func:`to_bfloat16` rounds floats to the marked form (to nearest even) and :func:`bfloat16_to_float32`
widens either form exactly. From PyTorch, pass ``torch.bfloat16`` tensors to ``spatialgrad.torch``.
"""
from __future__ import annotations

import numpy as np

__all__ = ["BFLOAT16_BITS", "bfloat16_bits", "is_bfloat16", "to_bfloat16", "bfloat16_to_float32"]

#: The dtype of marked bfloat16 arrays: uint16 bit patterns with the metadata spatialgrad looks for.
BFLOAT16_BITS = np.dtype(np.uint16, metadata={"spatialgrad": "bfloat16"})


def bfloat16_bits(bits: np.ndarray) -> np.ndarray:
    """A view of ``bits`` (uint16 or int16 bfloat16 bit patterns) that spatialgrad reads as bfloat16.

    Raises:
        TypeError: ``bits`` is not a uint16 or int16 array.

    Example::

        x = spatialgrad.bfloat16_bits(np.array([0x3F80, 0x4000], np.uint16))  # 1.0 and 2.0, no copy
        assert spatialgrad.is_bfloat16(x)
    """
    bits = np.asanyarray(bits)
    if bits.dtype not in (np.dtype(np.uint16), np.dtype(np.int16)):
        raise TypeError(f"bfloat16_bits(): expected a uint16 or int16 array of bit patterns, but got {bits.dtype}")
    return bits.view(BFLOAT16_BITS)


def is_bfloat16(array: np.ndarray) -> bool:
    """Whether spatialgrad reads ``array`` as bfloat16 (marked bit patterns or ``ml_dtypes.bfloat16``).

    Example::

        assert spatialgrad.is_bfloat16(spatialgrad.to_bfloat16([1.0, 2.5]))
        assert not spatialgrad.is_bfloat16(np.zeros(2, np.uint16))  # unmarked bits are integers
    """
    dtype = np.asanyarray(array).dtype
    if dtype.itemsize != 2:
        return False
    if dtype.metadata is not None and "spatialgrad" in dtype.metadata:
        # The marker counts on the bit-pattern carriers only: a float16 array that carries it (metadata
        # survives astype and views) is float16.
        carrier = dtype.kind in "ui" and dtype.isnative
        return carrier and dtype.metadata["spatialgrad"] == "bfloat16"
    return dtype.name == "bfloat16" and dtype.kind == "V"


def to_bfloat16(values) -> np.ndarray:
    """``values`` (anything ``np.asarray`` takes) rounded to bfloat16 (to nearest even; NaN stays NaN), as a
    marked bit-pattern array of the same shape.

    Example::

        x = spatialgrad.to_bfloat16(np.random.rand(1, 2, 4, 4))
        y = spatialgrad.avg_pool2d(x, 2)  # computed in bfloat16, returned as marked bits
    """
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) >> 16
    nan = (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    rounded = np.where(nan, (bits >> 16) | np.uint32(0x40), rounded)
    return rounded.astype(np.uint16).view(BFLOAT16_BITS)


def bfloat16_to_float32(array: np.ndarray) -> np.ndarray:
    """The float32 values of a bfloat16 array (either form; exact), as a new array.

    Raises:
        TypeError: ``array`` is not bfloat16 (see :func:`spatialgrad.is_bfloat16`).

    Example::

        x = spatialgrad.to_bfloat16([1.0, 1.00390625])  # the second rounds to 1.0 (8 bits of mantissa)
        assert spatialgrad.bfloat16_to_float32(x).tolist() == [1.0, 1.0]
    """
    array = np.asanyarray(array)
    if not is_bfloat16(array):
        raise TypeError(f"bfloat16_to_float32(): expected a bfloat16 array, but got dtype {array.dtype}")
    return (np.ascontiguousarray(array).view(np.uint16).astype(np.uint32) << 16).view(np.float32)
