"""NumPy-level forward and backward functions, one module per operator.

What is exported comes from the table of operators (``spatialgrad._registry.OPERATORS``): each function there,
wrapped so that a non-array argument is explained in one line (see ``_args.explain_argument_errors``).
"""
from .._registry import OPS

__all__ = list(OPS)
globals().update((name, spec.forward) for name, spec in OPS.items())
