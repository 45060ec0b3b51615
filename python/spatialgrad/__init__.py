"""spatialgrad: exact, fast CPU forward and backward passes of spatial vision operators.

All functions take and return NumPy arrays (float16, bfloat16, float32 or float64; see
:mod:`spatialgrad.bfloat16` for bfloat16 in NumPy); outputs are new C-contiguous arrays of the input dtype.
"""
from ._core import __version__, clear_memory_cache, get_num_threads, set_num_threads
from .bfloat16 import BFLOAT16_BITS, bfloat16_bits, bfloat16_to_float32, is_bfloat16, to_bfloat16
from .functional import *  # noqa: F401,F403
from .functional import __all__ as _functional_all
from . import ascend  # spatialgrad.ascend: would a call run on an Ascend NPU?

__all__ = ["clear_memory_cache", "get_num_threads", "set_num_threads", "BFLOAT16_BITS", "bfloat16_bits",
           "bfloat16_to_float32", "is_bfloat16", "to_bfloat16", *_functional_all]
