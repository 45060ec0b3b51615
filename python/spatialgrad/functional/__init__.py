"""NumPy-level forward and backward functions, one module per operator.

Each module declares its operator next to its functions (``OPERATOR``: its functions, their array arguments and
pullbacks, whether ``patch()`` routes it; see ``spatialgrad._declare``). ``OPERATORS`` is the one list of them,
in ``OPERATOR_MODULES``' order; what is exported here is each operator's functions as declared: wrapped so that a
non-array argument is explained in one line (see ``spatialgrad._args.explain_argument_errors``). The table built
on this list (``spatialgrad._registry``) imports this package, never the other way round.
"""
import typing as _typing

from . import avg_pool2d as _avg_pool2d
from . import grid_sampler_2d as _grid_sampler_2d
from . import ms_deform_attn as _ms_deform_attn
from . import roi_align as _roi_align
from . import upsample_bilinear2d as _upsample_bilinear2d

# In this order: spatialgrad.torch's and patch()'s.
_MODULES = (_roi_align, _upsample_bilinear2d, _avg_pool2d, _grid_sampler_2d, _ms_deform_attn)
OPERATOR_MODULES: _typing.Tuple[str, ...] = tuple(m.__name__.rsplit(".", 1)[1] for m in _MODULES)
OPERATORS = tuple(m.OPERATOR for m in _MODULES)

# Type checkers (the package ships py.typed) cannot run the list: they read the same functions by name here,
# and tests/python/test_operator_table.py checks that these names are the table's.
if _typing.TYPE_CHECKING:
    from .avg_pool2d import avg_pool2d, avg_pool2d_backward
    from .grid_sampler_2d import grid_sample, grid_sampler_2d_backward, grid_sampler_2d_double_backward
    from .ms_deform_attn import ms_deform_attn, ms_deform_attn_backward, ms_deform_attn_double_backward
    from .roi_align import roi_align, roi_align_backward
    from .upsample_bilinear2d import upsample_bilinear2d, upsample_bilinear2d_backward
else:
    __all__ = [spec.name for operator in OPERATORS for spec in operator.functions]
    globals().update((spec.name, spec.forward) for operator in OPERATORS for spec in operator.functions)
