"""What ``spatialgrad.torch.patch`` is made of: the helpers each operator module's replacements share,
``Routes``, which each patched operator's module declares (``PATCH``): which functions it replaces, and with what,
and the one process-wide installation of each operator's replacements that every active patch shares."""
import threading
from typing import Callable, Dict, List, NamedTuple, Tuple

import torch

from ._common import package

Target = Tuple[object, str]  # (module, attribute)


class Routes(NamedTuple):
    """Where ``patch()`` routes an operator: ``targets()`` lists the (module, attribute) pairs it replaces (none
    when their package is not installed); ``replace(originals)`` gives the new value of each, built over the
    functions there before (which it calls for what spatialgrad does not compute). ``described`` names them for
    ``patch()``'s docstring (reStructuredText, lines of at most 75 characters)."""
    targets: Callable[[], List[Target]]
    replace: Callable[[Dict[Target, Callable]], Dict[Target, Callable]]
    described: str


def each(make: Callable[[Callable], Callable]) -> Callable[[Dict[Target, Callable]], Dict[Target, Callable]]:
    """A ``Routes.replace`` replacing every target by ``make(its original function)``."""
    return lambda originals: {target: make(original) for target, original in originals.items()}


# One installation of each operator's replacements, shared by every active patch routing it: the first start
# installs them, the last stop puts the originals back, whatever the order of the starts and stops in between
# and their threads. (Each patch saving and restoring what it found left replacements behind when two patches
# stopped out of order, and stacked a wrapper per overlap.)
_lock = threading.Lock()
_routing: Dict[str, int] = {}  # operator -> how many active starts route it
_originals: Dict[str, Dict[Target, Callable]] = {}  # operator -> its targets' functions before the first start


def route(op: str, routes: Routes) -> None:
    """One more active start routing ``op`` (whose routes are ``routes``); the first installs the replacements."""
    with _lock:
        if op not in _routing:
            originals = {(module, name): getattr(module, name) for module, name in routes.targets()}
            for (module, name), replacement in routes.replace(originals).items():
                setattr(module, name, replacement)
            _originals[op], _routing[op] = originals, 0
        _routing[op] += 1


def unroute(op: str) -> None:
    """One start routing ``op`` fewer; after the last, its targets are the originals again."""
    with _lock:
        _routing[op] -= 1
        if _routing[op] == 0:
            del _routing[op]
            for (module, name), original in _originals.pop(op).items():
                setattr(module, name, original)


_FLOATING = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
SPATIALGRAD_ERRORS = (ValueError, TypeError, IndexError, OverflowError)


def covered(*tensors) -> bool:
    """CPU tensors of a dtype spatialgrad computes. While tracing, only with the native operators, which the
    trace records (spatialgrad:: nodes, saved with the model); the Python path would record Python calls."""
    if torch.jit.is_scripting() or (torch.jit.is_tracing() and not package.native):
        return False
    return all(isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.dtype in _FLOATING for t in tensors)


def ours_or_original(ours: Callable, original: Callable, *args):
    """spatialgrad's result; for arguments spatialgrad rejects, see original_or_clearer_error."""
    try:
        return ours(*args)
    except SPATIALGRAD_ERRORS as error:
        return original_or_clearer_error(error, original, *args)


def original_or_clearer_error(ours: Exception, original: Callable, *args):
    """The original's result for arguments spatialgrad rejected, if it accepts them (it may support more). If
    it rejects them too, spatialgrad's message is raised: it names the argument the user passed, where
    PyTorch's can mislead (its average pooling of kernel size -2: "pad should be at most half of kernel size,
    but got pad=0 and kernel_size=-2"). It is raised as the original's exception type, so handlers written for
    it still work."""
    try:
        return original(*args)
    except Exception as theirs:
        raise _with_type_of(theirs, ours) from None


def _with_type_of(theirs: Exception, ours: Exception) -> Exception:
    try:
        return type(theirs)(str(ours))
    except Exception:  # an exception type that takes other arguments: ours as it is
        return ours


def named_like(function: Callable, original: Callable) -> Callable:
    """The replacement keeps the original's name and documentation (not its module)."""
    function.__name__ = getattr(original, "__name__", function.__name__)
    function.__qualname__ = function.__name__
    function.__doc__ = f"spatialgrad replacement (spatialgrad.torch.patch) of:\n\n{getattr(original, '__doc__', '')}"
    function.__wrapped_original__ = original
    return function
