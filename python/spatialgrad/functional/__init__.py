"""NumPy-level forward and backward functions, one module per operator.

What is exported comes from the table of operators (``spatialgrad._registry.OPERATORS``): each function there,
wrapped so that a non-array argument is explained in one line (see ``_args.explain_argument_errors``).
"""
import typing as _typing

from .._registry import OPS as _OPS

# Type checkers (the package ships py.typed) cannot run the table: they read the same functions by name here,
# and tests/python/test_operator_table.py checks that these names are the table's.
if _typing.TYPE_CHECKING:
    from .avg_pool2d import avg_pool2d, avg_pool2d_backward
    from .grid_sampler_2d import grid_sample, grid_sampler_2d_backward, grid_sampler_2d_double_backward
    from .ms_deform_attn import ms_deform_attn, ms_deform_attn_backward, ms_deform_attn_double_backward
    from .roi_align import roi_align, roi_align_backward
    from .upsample_bilinear2d import upsample_bilinear2d, upsample_bilinear2d_backward
else:
    __all__ = list(_OPS)
    globals().update((name, spec.forward) for name, spec in _OPS.items())
