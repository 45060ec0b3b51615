"""Differentiable PyTorch functions backed by spatialgrad's CPU kernels.

Importing this module needs PyTorch; ``import spatialgrad`` does not. Signatures and defaults follow the
PyTorch/torchvision/mmcv functions they replace (the table at the end, from each operator's module).

When the native operators are built (``native`` is True: ``libspatialgrad_torch``, ``torch.ops.spatialgrad.*``),
the adapters call them: C++ kernels and C++ autograd on PyTorch's thread pool (``torch.set_num_threads``).
Otherwise (and for arguments those do not take) a Python ``autograd.Function`` over the NumPy API computes
the same bits. Either way CPU tensors are shared with the kernels without copies (inputs are viewed through
their strides); float16, bfloat16, float32 and float64 tensors are supported. Gradients are computed only for inputs that require them.
Backward passes are differentiable (``create_graph=True``): to any order where the backward is linear (the
backward of a backward is the forward), to second order where the operator has a double-backward kernel (the
table's last column); a third derivative of those raises a RuntimeError naming the operator.

``patch()`` routes existing ``torch.nn.functional`` and ``torchvision.ops`` calls to these functions;
``OPERATORS`` is the tuple of the operator names it accepts. ``spatialgrad.torch.nn`` has modules built on them.

Each function, what it replaces and to what order it is differentiable:
"""
import contextlib
import inspect
import threading
from typing import TYPE_CHECKING, Iterable, List, Optional

import torch

from .. import _registry
from .. import ascend as _ascend
from .._args import short_repr
from . import _common, _patch
from ._operators import MODULES as _OPERATOR_MODULES  # each operator's module: everything below is built from them

# Whether the adapters call the native operators: C++ kernels and C++ autograd, on PyTorch's thread pool
# (torch.set_num_threads). Otherwise, or when an argument is one the operators' schemas do not take, or while
# spatialgrad.ascend.strict() checks calls, they run the Python path (an autograd Function over the NumPy API).
# The adapters read it at each call: setting it False switches them to the Python path.
native = _common.native

# Type checkers (the package ships py.typed) cannot run the list: they read the same functions by name from
# _operators (generated from operators.toml), and tests/python/test_operator_table.py checks that these names are
# __all__'s.
if TYPE_CHECKING:
    from ._operators import *  # noqa: F401,F403
else:
    globals().update((function.__name__, function) for module in _OPERATOR_MODULES for function in module.PUBLIC)

__all__ = [function.__name__ for module in _OPERATOR_MODULES for function in module.PUBLIC] + [
    "patch", "OPERATORS", "nn"]

# torch.fx: with the native operators, symbolic tracing goes through the adapters and records their
# torch.ops.spatialgrad.* calls. Without them it records each adapter as one leaf call (as torchvision does for
# roi_align) instead of tracing into it, where NumPy cannot take Proxy arguments.
if not native:
    for _operator in _registry.OPERATORS:
        torch.fx.wrap(_operator.name)
    del _operator

# The operators of the table marked patched; each one's module declares its routes (PATCH).
OPERATORS = tuple(operator.name for operator in _registry.OPERATORS if operator.patched)
_ROUTES = {module.PUBLIC[0].__name__: module.PATCH for module in _OPERATOR_MODULES if hasattr(module, "PATCH")}


def _rst_table(rows: List[List[str]], headings: Optional[List[str]] = None) -> str:
    """A reStructuredText simple table of two or more columns (a cell may hold several lines), for the
    docstrings built from the operator modules."""
    table = ([headings] if headings else []) + rows
    widths = [max(len(line) for row in table for line in row[k].splitlines()) for k in range(len(rows[0]))]
    rule = "  ".join("=" * width for width in widths)

    def lines_of(cells: List[str]) -> List[str]:
        split = [cell.splitlines() for cell in cells]
        return ["  ".join((part[i] if i < len(part) else "").ljust(width)
                          for part, width in zip(split, widths)).rstrip()
                for i in range(max(map(len, split)))]

    head = lines_of(headings) + [rule] if headings else []
    return "\n".join([rule] + head + [line for row in rows for line in lines_of(row)] + [rule]) + "\n"


_BY_NAME = {operator.name: operator for operator in _registry.OPERATORS}  # (named as each module's adapter)


def _order(module) -> str:
    """To what order the module's operator is differentiable: second with a double-backward kernel (a third
    function in its table entry), else any (its backward is linear)."""
    return "second order" if len(_BY_NAME[module.PUBLIC[0].__name__].functions) > 2 else "any order"


__doc__ = __doc__.rstrip() + "\n\n" + _rst_table([[f"``{module.PUBLIC[0].__name__}``", module.REPLACES, _order(module)]
                                                for module in _OPERATOR_MODULES if hasattr(module, "REPLACES")])


class patch(contextlib.ContextDecorator):
    """Routes PyTorch's and torchvision's functions to spatialgrad while active, without changing call sites::

        with spatialgrad.torch.patch():            # or @spatialgrad.torch.patch() on a function,
            loss = model(images, targets)          # or p = patch(); p.start(); ...; p.stop()

    Args:
        ops: names of the operators to route, from :data:`spatialgrad.torch.OPERATORS` (the table below);
            ``None`` (the default) routes all.
        ascend: a chip of :func:`spatialgrad.ascend.chips` (e.g. ``"910B"``): while active, every spatialgrad
            call is also checked against what that Ascend NPU accepts, as :func:`spatialgrad.ascend.strict` does.

    Inside the context the names of the table at the end are spatialgrad functions (whose ``__module__`` starts
    with "spatialgrad").

    A call spatialgrad does not compute goes to the function that was there before, unchanged: non-CPU tensors,
    integer dtypes, other modes, 3-D/5-D input to interpolate, ``antialias=True``, tracing
    (``torch.jit.trace``) without the native operators (``spatialgrad.torch.native``; with them, a trace
    records ``spatialgrad::`` operators). Arguments spatialgrad rejects also go to the original; if it rejects
    them too, the error raised has spatialgrad's message, which names the argument (``avg_pool2d(): expected kernel_size
    entries > 0, but got [-2]``), and the original's exception type. TorchScript resolves functions when it compiles: script a
    model outside the context (a scripted model keeps calling the originals).

    The replacement is process-wide while active (module attributes): other threads see it too. Patches may
    overlap, nest, and start and stop in any order and from any threads: a name is replaced while at least one
    started patch routes its operator (every such patch shares one replacement), and is the original again once
    none does. The same patch may be started several times (each ``start()`` is undone by one ``stop()``; a
    decorated function called from several threads does this). ``start()`` returns the patch; ``active`` says
    whether it is started.

    Raises:
        ValueError: ``ops`` names an operator not in ``OPERATORS``, or is a single string; ``ascend`` names an
            unknown chip.

    Example::

        with spatialgrad.torch.patch(["avg_pool2d"]):
            y = torch.nn.functional.avg_pool2d(torch.rand(1, 3, 8, 8), 2)  # computed by spatialgrad

    The names each operator replaces (and the modules that reach them):
    """

    def __init__(self, ops: Optional[Iterable[str]] = None, ascend: Optional[str] = None):
        selected = OPERATORS if ops is None else tuple(ops)
        unknown = [op for op in selected if op not in OPERATORS]
        if unknown or isinstance(ops, str):
            raise ValueError(f"spatialgrad.torch.patch(): expected ops to be a list of {', '.join(OPERATORS)}, "
                             f"but got {short_repr(ops)}")
        self.ops = selected
        self.ascend = None if ascend is None else _ascend.validated_chip(ascend)
        self._lock = threading.Lock()
        self._starts: List[contextlib.ExitStack] = []  # per active start(): its strict() check (with ascend)

    def start(self) -> "patch":
        """Routes the operators (the first started patch of each replaces its functions); each start() is
        undone by one stop()."""
        checks = contextlib.ExitStack()
        if self.ascend is not None:
            checks.enter_context(_ascend.strict(self.ascend))
        for op in self.ops:
            _patch.route(op, _ROUTES[op])
        with self._lock:
            self._starts.append(checks)
        return self

    def stop(self) -> None:
        """Undoes one start(): an operator no other started patch routes has its original functions back."""
        with self._lock:
            if not self._starts:
                raise RuntimeError("spatialgrad.torch.patch.stop(): expected a started patch, but it is not active")
            checks = self._starts.pop()  # any of them: all check the same chip
        for op in self.ops:
            _patch.unroute(op)
        checks.close()

    def __enter__(self) -> "patch":
        return self.start()

    def __exit__(self, *exc) -> bool:
        self.stop()
        return False

    @property
    def active(self) -> bool:
        """Whether this patch is started (by ``start()`` or ``with``) and not yet stopped."""
        return bool(self._starts)


# (Dedented first: Python 3.13 strips a docstring's indentation when it compiles it, earlier versions do not.)
patch.__doc__ = inspect.cleandoc(patch.__doc__) + "\n\n" + _rst_table(
    [[f"``{name}``", _ROUTES[name].described] for name in OPERATORS],
    ["operator", "names replaced (and the modules that reach them)"])

from . import nn  # noqa: E402  (modules built on the functions above)
from . import _onnx  # noqa: E402

_onnx.register(_OPERATOR_MODULES)  # each operator's ONNX export (its module's ONNX)
