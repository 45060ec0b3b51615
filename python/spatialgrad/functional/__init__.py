"""NumPy-level forward and backward functions, one module per operator.

``OPERATOR_MODULES`` is the one list of operators: each module named there declares its operator next to its
functions (``OPERATOR``: its functions, their array arguments and pullbacks, whether ``patch()`` routes it; see
``spatialgrad._registry``), and the table built from them (``spatialgrad._registry.OPERATORS``) makes what is
exported here: each function, wrapped so that a non-array argument is explained in one line (see
``_args.explain_argument_errors``).
"""
import typing as _typing

# In this order: spatialgrad.torch's and patch()'s. (Set before the table is built: _registry reads it.)
OPERATOR_MODULES: _typing.Tuple[str, ...] = (
    "roi_align", "upsample_bilinear2d", "avg_pool2d", "grid_sampler_2d", "ms_deform_attn")

from .._registry import OPS as _OPS  # noqa: E402

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
