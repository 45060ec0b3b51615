"""``spatialgrad.torch.grid_sample``: the adapter of ``F.grid_sample`` (4-D), its TorchScript branch and
``patch()``'s replacement of ``F.grid_sample``."""
import warnings
from typing import List, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from .. import _strict
from .._args import GRID_INTERPOLATION, GRID_PADDING  # aten's integers of the modes
from . import _onnx
from ._common import (apply, empty_like_kernel, fake, is_compiling, native_operator, package, public, script_branch,
                      try_native)
from ._patch import Routes, covered, each, named_like, ours_or_original

_native_grid_sampler_2d = native_operator("grid_sampler_2d")


def grid_sample(input: Tensor, grid: Tensor, mode: str = "bilinear", padding_mode: str = "zeros",
                align_corners: Optional[bool] = None) -> Tensor:
    """Samples ``input`` at the normalised locations of ``grid``, differentiable in both (``F.grid_sample``, 4-D).

    Args:
        input: ``(N, C, H, W)`` CPU tensor, float16, bfloat16, float32 or float64.
        grid: ``(N, Ho, Wo, 2)`` of the input's dtype; ``grid[..., 0]`` is x (along W), ``grid[..., 1]`` is y,
            with -1 and +1 the image edges (the corner pixels' centres with ``align_corners=True``).
        mode: ``"bilinear"`` (default), ``"nearest"`` or ``"bicubic"``.
        padding_mode: what locations outside the image read: ``"zeros"`` (default), ``"border"`` or
            ``"reflection"``.
        align_corners: see ``grid``; ``None`` (the default) means False and warns, as ``F.grid_sample`` does.

    Returns:
        ``(N, C, Ho, Wo)`` of the input's dtype.

    Raises:
        ValueError: bad shapes or modes, a non-CPU tensor. TypeError: unsupported or mismatched dtypes.

    Example::

        grid = torch.rand(1, 5, 5, 2) * 2 - 1
        y = spatialgrad.torch.grid_sample(torch.rand(1, 3, 8, 8), grid, align_corners=False)  # (1, 3, 5, 5)
    """
    if torch.jit.is_scripting():
        return _grid_sample_from_script(input, grid, mode, padding_mode, align_corners)
    # The warning F.grid_sample gives (a patched F.grid_sample gives it from here); not while TorchDynamo traces,
    # which cannot put warnings.warn in a graph (the eager calls warn).
    if align_corners is None and not is_compiling():
        warnings.warn("grid_sample: align_corners=None means False, as in PyTorch (which warns the same); "
                      "pass it explicitly to silence this")
    if package.native and _strict.chip is None:
        # A mode that is not a name passes None, which the entry rejects: the Python path explains it.
        # (Looked up inline: a helper function per mode cost 0.1 us of a 2 us call.)
        out = try_native(_native_grid_sampler_2d, input, grid,
                         GRID_INTERPOLATION.get(mode) if type(mode) is str else None,
                         GRID_PADDING.get(padding_mode) if type(padding_mode) is str else None, bool(align_corners))
        if out is not None:
            return out
    return apply("grid_sample", [input, grid], dict(mode=mode, padding_mode=padding_mode,
                                                     align_corners=bool(align_corners)))


def _mode_index(names: List[str], name: str, argument: str) -> int:
    """aten's integer of a mode: its index in `names`."""
    for index, known in enumerate(names):
        if known == name:
            return index
    expected = ", ".join([f"'{known}' ({index})" for index, known in enumerate(names)])
    raise ValueError(f"grid_sample(): expected {argument} to be one of {expected}, but got '{name}'")


def _grid_sample_native_script(input: Tensor, grid: Tensor, mode: str, padding_mode: str,
                               align_corners: Optional[bool]) -> Tensor:
    interpolation = _mode_index(["bilinear", "nearest", "bicubic"], mode, "mode")
    padding = _mode_index(["zeros", "border", "reflection"], padding_mode, "padding_mode")
    return torch.ops.spatialgrad.grid_sampler_2d(input, grid, interpolation, padding,
                                                 align_corners is not None and align_corners)


@fake("grid_sampler_2d")
def _grid_sampler_2d_fake(input, grid, interpolation_mode, padding_mode, align_corners):
    return empty_like_kernel(input, [input.shape[0], input.shape[1], grid.shape[1], grid.shape[2]])


def _computed(wanted: bool, like):
    """A gradient of ``like``'s shape where its output_mask entry asks for it, else None (undefined)."""
    return empty_like_kernel(like, like.shape) if wanted else None


@fake("grid_sampler_2d_backward")
def _grid_sampler_2d_backward_fake(grad_output, input, grid, interpolation_mode, padding_mode, align_corners,
                                   output_mask):
    return _computed(output_mask[0], input), _computed(output_mask[1], grid)


@fake("grid_sampler_2d_double_backward")
def _grid_sampler_2d_double_backward_fake(grad_grad_input, grad_grad_grid, grad_output, input, grid,
                                          interpolation_mode, padding_mode, align_corners, output_mask):
    return _computed(output_mask[0], grad_output), _computed(output_mask[1], input), _computed(output_mask[2], grid)


def _replacement(original):
    """patch()'s replacement of F.grid_sample, over `original`, the function it replaces."""
    def routed_grid_sample(input, grid, mode="bilinear", padding_mode="zeros", align_corners=None):
        # (Mixed dtypes are torch.autocast's to cast; outside it, ours and the original both raise, ours clearer.)
        if not (covered(input, grid) and input.dim() == 4
                and mode in ("bilinear", "nearest", "bicubic") and padding_mode in ("zeros", "border", "reflection")):
            return original(input, grid, mode, padding_mode, align_corners)
        return ours_or_original(grid_sample, original, input, grid, mode, padding_mode, align_corners)
    return named_like(routed_grid_sample, original)


# ---- ONNX export (spatialgrad.torch._onnx registers ONNX) --------------------------------------------------

# The modes' names by aten's integers, as GridSample's attributes name them.
_MODE_NAMES = {number: name for name, number in GRID_INTERPOLATION.items()}
_PADDING_NAMES = {number: name for name, number in GRID_PADDING.items()}


def _onnx_symbolic(g, input, grid, interpolation_mode, padding_mode, align_corners):
    """spatialgrad::grid_sampler_2d -> GridSample, the modes by name."""
    _onnx.require_opset(g, "grid_sample", 16, "GridSample")
    mode = _MODE_NAMES[_onnx.constant(interpolation_mode, "grid_sample", "mode")]
    padding = _PADDING_NAMES[_onnx.constant(padding_mode, "grid_sample", "padding_mode")]
    corners = bool(_onnx.constant(align_corners, "grid_sample", "align_corners"))
    return _onnx.grid_sample_node(g, input, grid, mode, padding, corners)


# This operator's entry of spatialgrad.torch's list (see its __init__.py).
PUBLIC = public(grid_sample)
ONNX = _onnx_symbolic
_grid_sample_from_script = script_branch(grid_sample, _grid_sample_native_script)
PATCH = Routes(targets=lambda: [(F, "grid_sample")], replace=each(_replacement), described="``F.grid_sample``")
REPLACES = "``torch.nn.functional.grid_sample``"
