"""The implementation of ``spatialgrad.torch.patch``; what it covers is documented in ``patch``'s docstring."""
from __future__ import annotations

import contextlib
import sys
import warnings
from typing import Callable, Dict, Iterable, List, Optional, Tuple

import torch
import torch.nn.functional as F

from .. import _registry
from .. import ascend as _ascend
from . import avg_pool2d as sg_avg_pool2d
from . import grid_sample as sg_grid_sample
from . import roi_align as sg_roi_align
from . import upsample_bilinear2d as sg_upsample_bilinear2d
from ..functional._args import short_repr

__all__ = ["patch", "OPERATORS"]

# The operators of the table marked patched; each has its replacements and targets below.
OPERATORS = tuple(operator.name for operator in _registry.OPERATORS if operator.patched)

_FLOATING = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_SPATIALGRAD_ERRORS = (ValueError, TypeError, IndexError, OverflowError)


def _covered(*tensors) -> bool:
    """CPU tensors of a dtype spatialgrad computes. While tracing, only with the native operators, which the
    trace records (spatialgrad:: nodes, saved with the model); the Python path would record Python calls."""
    if torch.jit.is_scripting() or (torch.jit.is_tracing() and not sys.modules[__package__].native):
        return False
    return all(isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.dtype in _FLOATING for t in tensors)


def _ours_or_original(ours: Callable, original: Callable, *args):
    """spatialgrad's result; for arguments spatialgrad rejects, see _original_or_clearer_error."""
    try:
        return ours(*args)
    except _SPATIALGRAD_ERRORS as error:
        return _original_or_clearer_error(error, original, *args)


def _original_or_clearer_error(ours: Exception, original: Callable, *args):
    """The original's result for arguments spatialgrad rejected, if it accepts them (it may support more). If
    it rejects them too, spatialgrad's message is raised: it names the argument the user passed, where
    PyTorch's can mislead (F.avg_pool2d(x, -2): "pad should be at most half of kernel size, but got pad=0 and
    kernel_size=-2"). It is raised as the original's exception type, so handlers written for it still work."""
    try:
        return original(*args)
    except Exception as theirs:
        raise _with_type_of(theirs, ours) from None


def _with_type_of(theirs: Exception, ours: Exception) -> Exception:
    try:
        return type(theirs)(str(ours))
    except Exception:  # an exception type that takes other arguments: ours as it is
        return ours


def _named_like(function: Callable, original: Callable) -> Callable:
    """The replacement keeps the original's name and documentation (not its module)."""
    function.__name__ = getattr(original, "__name__", function.__name__)
    function.__qualname__ = function.__name__
    function.__doc__ = f"spatialgrad replacement (spatialgrad.torch.patch) of:\n\n{getattr(original, '__doc__', '')}"
    function.__wrapped_original__ = original
    return function


# ---- the replacements: each closes over the function it replaces --------------------------------------------

def _grid_sample(original):
    def grid_sample(input, grid, mode="bilinear", padding_mode="zeros", align_corners=None):
        if not (_covered(input, grid) and input.dim() == 4 and input.dtype == grid.dtype
                and mode in ("bilinear", "nearest", "bicubic") and padding_mode in ("zeros", "border", "reflection")):
            return original(input, grid, mode, padding_mode, align_corners)
        return _ours_or_original(sg_grid_sample, original, input, grid, mode, padding_mode, align_corners)
    return _named_like(grid_sample, original)


def _interpolate(original):
    def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                    recompute_scale_factor=None, antialias=False):
        args = (input, size, scale_factor, mode, align_corners, recompute_scale_factor, antialias)
        if not (mode == "bilinear" and not antialias and _covered(input) and input.dim() == 4
                and (size is None) != (scale_factor is None)):
            return original(*args)
        try:
            return sg_upsample_bilinear2d(input, size, scale_factor, align_corners, recompute_scale_factor)
        except _SPATIALGRAD_ERRORS as error:
            return _original_or_clearer_error(error, original, *args)
    return _named_like(interpolate, original)


def _upsample(original, interpolate):
    def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
        warnings.warn("F.upsample is deprecated in PyTorch: use F.interpolate (routed the same way)")
        return interpolate(input, size, scale_factor, mode, align_corners)
    return _named_like(upsample, original)


def _upsample_bilinear(original, interpolate):
    def upsample_bilinear(input, size=None, scale_factor=None):
        warnings.warn("F.upsample_bilinear is deprecated in PyTorch: use F.interpolate(..., mode='bilinear', "
                      "align_corners=True) (routed the same way)")
        return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)
    return _named_like(upsample_bilinear, original)


def _avg_pool2d(original):
    def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                   divisor_override=None):
        args = (input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
        if not (_covered(input) and input.dim() in (3, 4)):
            return original(*args)
        return _ours_or_original(sg_avg_pool2d, original, *args)
    return _named_like(avg_pool2d, original)


def _roi_align(original):
    def roi_align(input, boxes, output_size, spatial_scale=1.0, sampling_ratio=-1, aligned=False):
        args = (input, boxes, output_size, spatial_scale, sampling_ratio, aligned)
        box_tensors = list(boxes) if isinstance(boxes, (list, tuple)) else [boxes]
        if not (_covered(input, *box_tensors) and input.dim() == 4
                and all(b.dtype == input.dtype for b in box_tensors)):
            return original(*args)
        return _ours_or_original(sg_roi_align, original, *args)
    return _named_like(roi_align, original)


# ---- where they go ------------------------------------------------------------------------------------------

def _targets(op: str) -> List[Tuple[object, str]]:
    """(module, attribute) pairs an operator replaces; torchvision's only when it is installed."""
    if op == "roi_align":
        try:
            import torchvision.ops  # noqa: F401  (loads the submodules below)
        except ImportError:
            return []
        return [(sys.modules["torchvision.ops"], "roi_align"), (sys.modules["torchvision.ops.roi_align"], "roi_align"),
                (sys.modules["torchvision.ops.poolers"], "roi_align")]
    if op == "upsample_bilinear2d":
        return [(F, "interpolate"), (F, "upsample"), (F, "upsample_bilinear")]
    if op == "avg_pool2d":
        return [(F, "avg_pool2d")]
    return [(F, "grid_sample")]


def _replacements(op: str) -> Dict[Tuple[object, str], Callable]:
    """The new value of every target of `op`, built over the current ones."""
    now = {(module, name): getattr(module, name) for module, name in _targets(op)}
    if op == "upsample_bilinear2d":
        interpolate = _interpolate(now[(F, "interpolate")])
        return {(F, "interpolate"): interpolate, (F, "upsample"): _upsample(now[(F, "upsample")], interpolate),
                (F, "upsample_bilinear"): _upsample_bilinear(now[(F, "upsample_bilinear")], interpolate)}
    make = {"roi_align": _roi_align, "avg_pool2d": _avg_pool2d, "grid_sample": _grid_sample}[op]
    return {key: make(original) for key, original in now.items()}


class patch(contextlib.ContextDecorator):
    """Routes PyTorch's and torchvision's functions to spatialgrad while active, without changing call sites::

        with spatialgrad.torch.patch():            # or @spatialgrad.torch.patch() on a function,
            loss = model(images, targets)          # or p = patch(); p.start(); ...; p.stop()

    Args:
        ops: names of the operators to route, from :data:`spatialgrad.torch.OPERATORS` (``"roi_align"``,
            ``"upsample_bilinear2d"``, ``"avg_pool2d"``, ``"grid_sample"``); ``None`` (the default) routes all.
        ascend: a chip of :func:`spatialgrad.ascend.chips` (e.g. ``"910B"``): while active, every spatialgrad
            call is also checked against what that Ascend NPU accepts, as :func:`spatialgrad.ascend.strict` does.

    Inside the context these names are spatialgrad functions (whose ``__module__`` starts with "spatialgrad"):

    ===========================  ==========================================================================
    operator                     names replaced (and the modules that reach them)
    ===========================  ==========================================================================
    ``roi_align``                ``torchvision.ops.roi_align`` and the names torchvision's own modules call
                                 (``torchvision.ops.roi_align.roi_align``: ``RoIAlign``;
                                 ``torchvision.ops.poolers.roi_align``: ``MultiScaleRoIAlign``)
    ``upsample_bilinear2d``      ``F.interpolate``, ``F.upsample``, ``F.upsample_bilinear`` (``nn.Upsample``,
                                 ``nn.UpsamplingBilinear2d``) in bilinear mode on 4-D input
    ``avg_pool2d``               ``F.avg_pool2d`` (``nn.AvgPool2d``)
    ``grid_sample``              ``F.grid_sample``
    ===========================  ==========================================================================

    A call spatialgrad does not compute goes to the function that was there before, unchanged: non-CPU tensors,
    integer dtypes, other modes, 3-D/5-D input to interpolate, ``antialias=True``, tracing
    (``torch.jit.trace``) without the native operators (``spatialgrad.torch.native``; with them, a trace
    records ``spatialgrad::`` operators). Arguments spatialgrad rejects also go to the original; if it rejects
    them too, the error raised has spatialgrad's message, which names the argument (``avg_pool2d(): expected kernel_size
    entries > 0, but got [-2]``), and the original's exception type. TorchScript resolves functions when it compiles: script a
    model outside the context (a scripted model keeps calling the originals).

    The replacement is process-wide while active (module attributes): other threads see it too. Contexts nest;
    leave them in the reverse order of entering. ``start()`` returns the patch; ``active`` says whether it is.

    Raises:
        ValueError: ``ops`` names an operator not in ``OPERATORS``, or is a single string; ``ascend`` names an
            unknown chip.

    Example::

        with spatialgrad.torch.patch(["avg_pool2d"]):
            y = torch.nn.functional.avg_pool2d(torch.rand(1, 3, 8, 8), 2)  # computed by spatialgrad
    """

    def __init__(self, ops: Optional[Iterable[str]] = None, ascend: Optional[str] = None):
        selected = OPERATORS if ops is None else tuple(ops)
        unknown = [op for op in selected if op not in OPERATORS]
        if unknown or isinstance(ops, str):
            raise ValueError(f"spatialgrad.torch.patch(): expected ops to be a list of {', '.join(OPERATORS)}, "
                             f"but got {short_repr(ops)}")
        self.ops = selected
        self.ascend = None if ascend is None else _ascend.validated_chip(ascend)
        self._checks: List[contextlib.ExitStack] = []  # the strict() of each active start()
        self._saved: List[Dict[Tuple[object, str], Callable]] = []  # one entry per active start()

    def start(self) -> "patch":
        """Replaces the functions; each start() is undone by one stop()."""
        saved: Dict[Tuple[object, str], Callable] = {}
        for op in self.ops:
            for (module, name), replacement in _replacements(op).items():
                saved[(module, name)] = getattr(module, name)
                setattr(module, name, replacement)
        self._saved.append(saved)
        self._checks.append(contextlib.ExitStack())
        if self.ascend is not None:
            self._checks[-1].enter_context(_ascend.strict(self.ascend))
        return self

    def stop(self) -> None:
        """Puts back what start() replaced (the originals, or an enclosing patch's functions)."""
        if not self._saved:
            raise RuntimeError("spatialgrad.torch.patch.stop(): expected a started patch, but it is not active")
        for (module, name), previous in self._saved.pop().items():
            setattr(module, name, previous)
        self._checks.pop().close()

    def __enter__(self) -> "patch":
        return self.start()

    def __exit__(self, *exc) -> bool:
        self.stop()
        return False

    @property
    def active(self) -> bool:
        """Whether this patch is started (by ``start()`` or ``with``) and not yet stopped."""
        return bool(self._saved)
