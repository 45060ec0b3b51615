"""spatialgrad: exact, fast CPU forward and backward passes of spatial vision operators.

All functions take and return NumPy arrays; outputs are new C-contiguous arrays of the input dtype.
"""
from ._core import get_num_threads, set_num_threads
from .functional import *  # noqa: F401,F403
from .functional import __all__ as _functional_all

__version__ = "0.1.0"

__all__ = ["get_num_threads", "set_num_threads", *_functional_all]
