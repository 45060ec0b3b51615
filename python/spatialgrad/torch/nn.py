"""Modules over spatialgrad's operators, constructed and used as the modules they replace.

============================================  =====================================================================
``RoIAlign``                                  ``torchvision.ops.RoIAlign``
``MultiScaleRoIAlign``                        ``torchvision.ops.MultiScaleRoIAlign`` (needs torchvision for its level mapping)
``MultiScaleDeformableAttention``             mmcv's ``MultiScaleDeformableAttention`` (same arguments, parameter names,
                                              initialisation and forward; an mmcv or Deformable-DETR state_dict loads)
============================================  =====================================================================
"""
from typing import TYPE_CHECKING

from ._operators import MODULES as _OPERATOR_MODULES

# Each module of spatialgrad.torch's list of operators declares its nn modules (NN_MODULES); type checkers, which
# cannot run that, read them here (tests/python/test_operator_table.py checks that these names are __all__'s).
if TYPE_CHECKING:
    from ._ms_deform_attn import MultiScaleDeformableAttention
    from ._roi_align import MultiScaleRoIAlign, RoIAlign
else:
    for _operator in _OPERATOR_MODULES:
        for _layer in getattr(_operator, "NN_MODULES", ()):
            # Public under this module's name: pickles (torch.save of a whole model) and TorchScript name the
            # class spatialgrad.torch.nn.<Name>, not the private module that defines it.
            _layer.__module__ = __name__
            globals()[_layer.__name__] = _layer

__all__ = [layer.__name__ for operator in _OPERATOR_MODULES for layer in getattr(operator, "NN_MODULES", ())]
