"""spatialgrad.torch's module of each operator, in the table's order: what its package and its nn module build
their exports from (a module of its own, below both, so that neither imports the other's half-built names)."""
from .. import functional
from . import _avg_pool2d, _grid_sampler_2d, _ms_deform_attn, _roi_align, _upsample_bilinear2d  # noqa: F401

# One private module per operator of the table (spatialgrad.functional.OPERATOR_MODULES, the one list of
# operators, in its order), named after the functional module with a leading underscore: the operator's adapter
# (the first of PUBLIC, named after the table's forward) and its other public functions, its TorchScript branch
# (`_<name>_from_script`), its patch() routes (PATCH, when the table marks it patched) and its
# spatialgrad.torch.nn modules (NN_MODULES, if any). tests/python/test_operator_table.py checks that the imports
# above are the table's operators.
MODULES = tuple(globals()[f"_{name}"] for name in functional.OPERATOR_MODULES)
