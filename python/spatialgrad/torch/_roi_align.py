"""``spatialgrad.torch.roi_align``: the adapter of ``torchvision.ops.roi_align``, its TorchScript branch,
``patch()``'s replacement of torchvision's ``roi_align`` and the modules ``spatialgrad.torch.nn.RoIAlign`` and
``MultiScaleRoIAlign``."""
import sys
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor, nn

from .. import _strict
from ..functional.roi_align import core_sampling_ratio
from . import _onnx
from ._common import (BroadcastingList2, apply, empty_like_kernel, fake, native_operator, package, public,
                      script_branch, try_native)
from ._patch import Routes, covered, each, named_like, ours_or_original

_native_roi_align = native_operator("roi_align")


def _height_width(value) -> Optional[tuple]:
    """(h, w) from an int or one or two entries; None for anything else (the Python path reports it)."""
    if isinstance(value, int):
        return value, value
    if isinstance(value, (list, tuple)) and len(value) in (1, 2):
        return value[0], value[-1]
    return None


def _boxes_k5(boxes: Union[torch.Tensor, List[torch.Tensor]], dtype: torch.dtype) -> torch.Tensor:
    """torchvision's box formats as (K, 5) rows: a (K, 5) tensor as it is, a list of (L_i, 4) tensors (one per
    image) joined with each image's index first. Nothing is detached, so that, as with torchvision, boxes that
    require grad make an output that requires grad (their gradient is None), and a trace records no more than
    torchvision's conversion records (torch.fx, torch.jit.trace)."""
    if not isinstance(boxes, (list, tuple)):
        return boxes
    _check_boxes_per_image(boxes)
    return _rows_of_images(list(boxes), dtype)


def _rows_of_images(boxes: List[Tensor], dtype: torch.dtype) -> Tensor:
    """(L_i, 4) boxes, one tensor per image, as (K, 5) rows with the image's index first (the conversion both the
    adapter and its TorchScript branch run: TorchScript compiles it)."""
    if len(boxes) == 0:
        return torch.zeros([0, 5], dtype=dtype)
    joined = torch.cat(boxes, dim=0)  # (first, as torchvision's conversion: a trace records the same ops)
    image_index = torch.cat([torch.full_like(b[:, :1], float(i)) for i, b in enumerate(boxes)], dim=0)
    return torch.cat([image_index, joined], dim=1)


def _check_boxes_per_image(boxes: Sequence[torch.Tensor]) -> None:
    """The list format is checked here: joined into (K, 5), a (L, 5) entry would be reported as (K, 6). (torch.fx
    traces with Proxies, whose shapes are not known: the operator checks the joined rows when the graph runs.)"""
    for i, b in enumerate(boxes):
        if isinstance(b, torch.fx.Proxy):
            continue
        if not isinstance(b, torch.Tensor) or b.dim() != 2 or b.shape[1] != 4:
            got = f"shape {tuple(b.shape)}" if isinstance(b, torch.Tensor) else type(b).__name__
            raise ValueError(f"spatialgrad.torch.roi_align(): expected boxes as a list of (L, 4) tensors (x1, y1, "
                             f"x2, y2), one per image, but got boxes[{i}] of {got} (pass (K, 5) rows with the batch "
                             f"index as one tensor, not in a list)")


def roi_align(input: Tensor, boxes: Union[Tensor, List[Tensor]], output_size: BroadcastingList2[int],
              spatial_scale: float = 1.0, sampling_ratio: int = -1, aligned: bool = False) -> Tensor:
    """Average of bilinear samples over each bin of each box, differentiable in ``input`` (torchvision's
    ``roi_align`` arguments and defaults).

    Args:
        input: ``(B, C, H, W)`` CPU tensor, float16, bfloat16, float32 or float64.
        boxes: a ``(K, 5)`` tensor of rows ``(batch_index, x1, y1, x2, y2)``, or a list of ``B`` tensors of
            shape ``(L_i, 4)`` (rows ``(x1, y1, x2, y2)`` of image i); the input's dtype, in image coordinates.
        output_size: ``P`` or ``(PH, PW)``, the bins per box.
        spatial_scale: multiplies the box coordinates (feature size / image size; default 1.0).
        sampling_ratio: samples per bin along each axis; ``<= 0`` (the default -1) is adaptive,
            ``ceil(box size / P)`` (the same meaning as :func:`spatialgrad.roi_align`).
        aligned: shift the boxes by -0.5 pixel (default False: unshifted, boxes at least 1 pixel).

    Returns:
        ``(K, C, PH, PW)`` of the input's dtype; no gradient flows to ``boxes``.

    Raises:
        ValueError: bad shapes (e.g. a ``(L, 5)`` tensor in the list format), parameters, a non-CPU tensor.
        IndexError: a batch index outside ``[0, B)``. TypeError: boxes of another dtype than ``input``.

    Example::

        boxes = torch.tensor([[0, 1.0, 1.0, 6.0, 5.0]])
        y = spatialgrad.torch.roi_align(torch.rand(1, 3, 8, 8), boxes, 2, aligned=True)  # (1, 3, 2, 2)
    """
    if torch.jit.is_scripting():
        return _roi_align_from_script(input, boxes, output_size, spatial_scale, sampling_ratio, aligned)
    size = _height_width(output_size) if package.native and _strict.chip is None else None
    if size is not None:
        rois = _boxes_k5(boxes, input.dtype)
        out = try_native(_native_roi_align, input, rois, spatial_scale, size[0], size[1], sampling_ratio, aligned)
        if out is not None:
            return out
    return apply("roi_align", [input, _boxes_k5(boxes, input.dtype)],
                 dict(output_size=output_size, spatial_scale=float(spatial_scale),
                      sampling_ratio=int(sampling_ratio), aligned=bool(aligned)))


def _roi_align_native_script(input: Tensor, boxes: Union[Tensor, List[Tensor]], output_size: List[int],
                             spatial_scale: float, sampling_ratio: int, aligned: bool) -> Tensor:
    rois = boxes if isinstance(boxes, Tensor) else _rows_of_images(boxes, input.dtype)
    return torch.ops.spatialgrad.roi_align(input, rois, spatial_scale, output_size[0], output_size[1], sampling_ratio,
                                           aligned)


@fake("roi_align")
def _roi_align_fake(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned):
    return empty_like_kernel(input, [rois.shape[0], input.shape[1], pooled_height, pooled_width])


@fake("roi_align_backward")
def _roi_align_backward_fake(grad, rois, spatial_scale, pooled_height, pooled_width, batch_size, channels, height,
                             width, sampling_ratio, aligned):
    return empty_like_kernel(grad, [batch_size, channels, height, width])


def _replacement(original):
    """patch()'s replacement of torchvision's roi_align, over `original`, the function it replaces."""
    def routed_roi_align(input, boxes, output_size, spatial_scale=1.0, sampling_ratio=-1, aligned=False):
        args = (input, boxes, output_size, spatial_scale, sampling_ratio, aligned)
        box_tensors = list(boxes) if isinstance(boxes, (list, tuple)) else [boxes]
        if not (covered(input, *box_tensors) and input.dim() == 4
                and all(b.dtype == input.dtype for b in box_tensors)):
            return original(*args)
        return ours_or_original(roi_align, original, *args)
    return named_like(routed_roi_align, original)


def _targets():
    """torchvision's roi_align and the names its own modules call, when torchvision is installed."""
    try:
        import torchvision.ops  # noqa: F401  (loads the submodules below)
    except ImportError:
        return []
    return [(sys.modules["torchvision.ops"], "roi_align"), (sys.modules["torchvision.ops.roi_align"], "roi_align"),
            (sys.modules["torchvision.ops.poolers"], "roi_align")]


class RoIAlign(nn.Module):
    """:func:`spatialgrad.torch.roi_align` as a module, with ``torchvision.ops.RoIAlign``'s arguments.

    Args:
        output_size: ``P`` or ``(PH, PW)``, the bins per box.
        spatial_scale: multiplies the box coordinates (feature size / image size).
        sampling_ratio: samples per bin along each axis; ``<= 0`` is adaptive, ``ceil(box size / P)``.
        aligned: shift the boxes by -0.5 pixel (default False).

    ``forward(input, rois)`` takes a ``(B, C, H, W)`` tensor and ``(K, 5)`` rows ``(batch_index, x1, y1, x2,
    y2)`` or a list of ``(L_i, 4)`` tensors, one per image, and returns ``(K, C, PH, PW)``.

    Example::

        pool = spatialgrad.torch.nn.RoIAlign(7, spatial_scale=0.25, sampling_ratio=2, aligned=True)
        pooled = pool(torch.rand(1, 8, 32, 32), [torch.tensor([[4.0, 4.0, 60.0, 40.0]])])  # (1, 8, 7, 7)
    """

    def __init__(self, output_size, spatial_scale: float, sampling_ratio: int, aligned: bool = False):
        super().__init__()
        self.output_size = output_size
        self.spatial_scale = spatial_scale
        self.sampling_ratio = sampling_ratio
        self.aligned = aligned

    def forward(self, input: Tensor, rois: Union[Tensor, List[Tensor]]) -> Tensor:
        """Pools ``rois`` (``(K, 5)``, or one ``(L_i, 4)`` tensor per image) from ``input`` (``(B, C, H, W)``)
        into ``(K, C, PH, PW)``; raises as :func:`spatialgrad.torch.roi_align` does."""
        return roi_align(input, rois, self.output_size, self.spatial_scale, self.sampling_ratio, self.aligned)

    def extra_repr(self) -> str:
        return (f"output_size={self.output_size}, spatial_scale={self.spatial_scale}, "
                f"sampling_ratio={self.sampling_ratio}, aligned={self.aligned}")


def _torchvision_poolers():
    try:
        from torchvision.ops import poolers
    except ImportError as e:  # pragma: no cover - CI installs torchvision
        raise ImportError("spatialgrad.torch.nn.MultiScaleRoIAlign needs torchvision (for its level mapping)") from e
    return poolers


class MultiScaleRoIAlign(nn.Module):
    """RoIAlign over a feature pyramid: each box is pooled, by :func:`spatialgrad.torch.roi_align`, from the
    level its size selects (FPN's rule ``floor(canonical_level + log2(sqrt(area) / canonical_scale))``, clamped
    to the levels present). ``torchvision.ops.MultiScaleRoIAlign``'s arguments; needs torchvision, whose level
    mapper and scale inference it uses so that the results are the same.

    Args:
        featmap_names: the keys of the feature maps to pool from, finest first.
        output_size: ``P`` or ``(PH, PW)``.
        sampling_ratio: samples per bin along each axis; ``<= 0`` is adaptive.
        canonical_scale, canonical_level: FPN's level rule (defaults 224 and 4).

    ``forward(x, boxes, image_shapes)``: ``x`` a dict of ``(B, C, H_l, W_l)`` maps, ``boxes`` one ``(L_i, 4)``
    tensor per image, ``image_shapes`` the ``(H, W)`` of each image (the scales are inferred from them on the
    first call); returns ``(sum L_i, C, PH, PW)``.

    Example::

        pool = spatialgrad.torch.nn.MultiScaleRoIAlign(["p2", "p3"], 7, sampling_ratio=2)
        pooled = pool({"p2": torch.rand(1, 8, 32, 32), "p3": torch.rand(1, 8, 16, 16)},
                      [torch.tensor([[4.0, 4.0, 60.0, 40.0]])], [(128, 128)])  # (1, 8, 7, 7)
    """

    def __init__(self, featmap_names: List[str], output_size, sampling_ratio: int, *, canonical_scale: int = 224,
                 canonical_level: int = 4):
        super().__init__()
        if isinstance(output_size, int):
            output_size = (output_size, output_size)
        self.featmap_names = featmap_names
        self.sampling_ratio = sampling_ratio
        self.output_size = tuple(output_size)
        self.scales: Optional[List[float]] = None
        self.map_levels = None
        self.canonical_scale = canonical_scale
        self.canonical_level = canonical_level

    def forward(self, x: Dict[str, Tensor], boxes: List[Tensor], image_shapes: List[Tuple[int, int]]) -> Tensor:
        """Pools every image's boxes (``(L_i, 4)`` each) from the level each selects; returns
        ``(sum L_i, C, PH, PW)`` in the order of the boxes."""
        poolers = _torchvision_poolers()
        features = poolers._filter_input(x, self.featmap_names)
        if self.scales is None or self.map_levels is None:
            self.scales, self.map_levels = poolers._setup_scales(features, image_shapes, self.canonical_scale,
                                                                 self.canonical_level)
        rois = poolers._convert_to_roi_format(boxes)
        if len(features) == 1:
            return roi_align(features[0], rois, self.output_size, self.scales[0], self.sampling_ratio)
        levels = self.map_levels(boxes)
        result = features[0].new_zeros((rois.shape[0], features[0].shape[1]) + self.output_size)
        for level, (feature, scale) in enumerate(zip(features, self.scales)):
            picked = torch.where(levels == level)[0]
            pooled = roi_align(feature, rois[picked], self.output_size, scale, self.sampling_ratio)
            result = result.index_put((picked,), pooled.to(result.dtype))  # out of place: autograd sees it
        return result

    def extra_repr(self) -> str:
        return f"featmap_names={self.featmap_names}, output_size={self.output_size}, sampling_ratio={self.sampling_ratio}"


# ---- ONNX export (spatialgrad.torch._onnx registers ONNX) --------------------------------------------------

def _column(g, rois, columns: List[int]):
    return g.op("Gather", rois, _onnx.const(g, columns), axis_i=1)


def _onnx_symbolic(g, input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned):
    """spatialgrad::roi_align (torchvision's schema) -> RoiAlign, with the batch indices and boxes taken from the
    (K, 5) rows as torchvision's export takes them. aligned=False is RoiAlign's output_half_pixel (the mode of
    RoiAlign-10, boxes at least 1 pixel), aligned=True its half_pixel (opset 16); sampling_ratio <= 0 is 0,
    adaptive in both."""
    _onnx.require_opset(g, "roi_align", 10, "RoiAlign")
    shifted = bool(_onnx.constant(aligned, "roi_align", "aligned"))
    if shifted:
        _onnx.require_opset(g, "roi_align", 16, "RoiAlign", "'s coordinate_transformation_mode, for aligned=True")
    batch_indices = g.op("Cast", _onnx.squeeze(g, _column(g, rois, [0]), [1]), to_i=_onnx.INT64)
    attributes = dict(spatial_scale_f=_onnx.constant(spatial_scale, "roi_align", "spatial_scale"),
                      output_height_i=_onnx.constant(pooled_height, "roi_align", "output_size"),
                      output_width_i=_onnx.constant(pooled_width, "roi_align", "output_size"),
                      sampling_ratio_i=core_sampling_ratio(_onnx.constant(sampling_ratio, "roi_align",
                                                                          "sampling_ratio"), "roi_align"))
    if g.opset >= 16:
        attributes["coordinate_transformation_mode_s"] = "half_pixel" if shifted else "output_half_pixel"
    return g.op("RoiAlign", input, _column(g, rois, [1, 2, 3, 4]), batch_indices, **attributes)


# This operator's entry of spatialgrad.torch's list (see its __init__.py).
PUBLIC = public(roi_align)
ONNX = _onnx_symbolic
_roi_align_from_script = script_branch(roi_align, _roi_align_native_script)
PATCH = Routes(targets=_targets, replace=each(_replacement), described="""\
``torchvision.ops.roi_align`` and the names torchvision's own modules call
(``torchvision.ops.roi_align.roi_align``: ``RoIAlign``;
``torchvision.ops.poolers.roi_align``: ``MultiScaleRoIAlign``)""")
REPLACES = "``torchvision.ops.roi_align``"
NN_MODULES = (RoIAlign, MultiScaleRoIAlign)
