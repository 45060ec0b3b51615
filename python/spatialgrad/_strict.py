"""The state of ``spatialgrad.ascend.strict()``, read by every NumPy function: while ``chip`` is None (the
default) a call pays one attribute test and nothing else.

spatialgrad.ascend sets all three names (it is the only writer): the check itself lives there, with the rules,
and is handed down here rather than imported, so that the functional modules depend on this state alone and
spatialgrad.ascend (which reads the functional modules' signatures) sits above them, with no import circle."""
from typing import Any, Callable, Dict, Optional

chip: Optional[str] = None
raise_rejected = True
check: Optional[Callable[[str, Dict[str, Any]], None]] = None


def enforce(op: str, arguments: Dict[str, Any]) -> None:
    if check is not None:
        check(op, arguments)
