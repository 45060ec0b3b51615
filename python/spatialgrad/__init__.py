"""spatialgrad: exact, fast CPU forward and backward passes of spatial vision operators.

All functions take and return NumPy arrays (float16, bfloat16, float32 or float64); outputs are new
C-contiguous arrays of the input dtype. A non-array argument is a TypeError naming it.

- The operators and their gradients, the functions of :mod:`spatialgrad.functional` (one module per
  operator): each forward with its ``*_backward`` (and a ``*_double_backward`` for grid sampling and
  deformable attention); :mod:`spatialgrad.autograd` chains them (``vjp``).
- bfloat16 in NumPy, which has no such dtype (:mod:`spatialgrad.bfloat16`): ``to_bfloat16``,
  ``bfloat16_to_float32``, ``bfloat16_bits``, ``is_bfloat16``; ``BFLOAT16_BITS`` is the dtype of the marked
  bit-pattern arrays (uint16 with the metadata ``{"spatialgrad": "bfloat16"}``).
- The thread pool and memory: ``set_num_threads``, ``get_num_threads``, ``clear_memory_cache``; the
  kernels' instruction level: ``simd_level``.
- PyTorch: :mod:`spatialgrad.torch` (imported on its own; it needs PyTorch).
"""
from . import _core
from ._core import __version__
from .bfloat16 import BFLOAT16_BITS, bfloat16_bits, bfloat16_to_float32, is_bfloat16, to_bfloat16
from .functional import *  # noqa: F401,F403
from .functional import __all__ as _functional_all
from . import ascend  # spatialgrad.ascend: would a call run on an Ascend NPU?


def _documented_as(builtin):
    """Gives the decorated function ``builtin``'s documentation (a pybind11 function's, without its signature
    line). The thread and memory functions are Python functions of this package, not the pybind11 ones: pickle
    saves a function by name, and pybind11 (before 3.0) binds its functions to a capsule that cannot be saved,
    so ``multiprocessing`` could not send them."""
    def decorate(function):
        function.__doc__ = builtin.__doc__.split("\n\n", 1)[1]
        return function
    return decorate


@_documented_as(_core.set_num_threads)
def set_num_threads(n: int) -> None:
    _core.set_num_threads(n)


@_documented_as(_core.get_num_threads)
def get_num_threads() -> int:
    return _core.get_num_threads()


@_documented_as(_core.clear_memory_cache)
def clear_memory_cache() -> None:
    _core.clear_memory_cache()


@_documented_as(_core.simd_level)
def simd_level() -> str:
    return _core.simd_level()


__all__ = ["clear_memory_cache", "get_num_threads", "set_num_threads", "simd_level", "BFLOAT16_BITS", "bfloat16_bits",
           "bfloat16_to_float32", "is_bfloat16", "to_bfloat16", *_functional_all]
