"""The state of ``spatialgrad.ascend.strict()``, read by every NumPy function: while ``chip`` is None (the
default) a call pays one attribute test and nothing else."""
from typing import Any, Dict, Optional

chip: Optional[str] = None
raise_rejected = True


def enforce(op: str, arguments: Dict[str, Any]) -> None:
    from ..ascend import _enforce  # imported on first use: spatialgrad.ascend imports the functional modules

    _enforce(op, arguments)
