"""ONNX export of the ``spatialgrad::`` operators: symbolic functions for ``torch.onnx.export`` (the
TorchScript-based exporter of PyTorch 1.13 and 2.x; on 2.x pass ``dynamo=False``), registered when
``spatialgrad.torch`` is imported.

A traced call of a spatialgrad function (or of a function ``patch()`` routes) is recorded as a ``spatialgrad::``
node; each maps here to standard ONNX operators, so that any ONNX runtime runs the result:

- avg_pool2d: ``AveragePool`` (``Pad`` where ``count_include_pad`` needs it, ``Mul`` for ``divisor_override``);
- upsample_bilinear2d: ``Resize`` (linear), with the inputs and attributes PyTorch's export of
  ``F.interpolate(..., mode="bilinear")`` has;
- grid_sampler_2d: ``GridSample`` (opset >= 16);
- roi_align: ``RoiAlign`` (as torchvision's export: batch indices from the first column);
- ms_deform_attn: per level a ``GridSample`` (bilinear, zeros, align_corners=0), then the weighted sum, as
  mmcv's pure-PyTorch fallback computes it (opset >= 16).

What an ONNX operator cannot express raises ``torch.onnx.errors.OnnxExporterError`` naming the function, the
argument and the opset needed; nothing is exported approximately.
"""
from typing import List, Optional, Sequence

import torch
from torch.onnx.errors import OnnxExporterError

# Registered from this opset up, so that an export at a lower opset reaches the checks below (which name the
# opset needed) instead of PyTorch's "unsupported operator".
_LOWEST_OPSET = 7

_INT64 = torch.onnx.TensorProtoDataType.INT64
_DTYPES = {"Float": torch.float32, "Double": torch.float64, "Half": torch.float16, "BFloat16": torch.bfloat16}

# aten's integers of grid_sample's modes (spatialgrad._args.GRID_INTERPOLATION, GRID_PADDING) and
# their ONNX names: GridSample-20 renamed bilinear and bicubic.
_INTERPOLATION = {0: "bilinear", 1: "nearest", 2: "bicubic"}
_INTERPOLATION_20 = {"bilinear": "linear", "nearest": "nearest", "bicubic": "cubic"}
_PADDING = {0: "zeros", 1: "border", 2: "reflection"}

# PyTorch before 2.1 exports count_include_pad=True as an explicit Pad before AveragePool; later versions use
# AveragePool's count_include_pad attribute. avg_pool2d follows the running PyTorch, so that patch() changes
# no op type of a model's graph.
_PYTORCH_PADS_EXPLICITLY = tuple(int(part) for part in torch.__version__.split(".")[:2]) < (2, 1)


def _fail(function: str, expected: str, got: str) -> OnnxExporterError:
    return OnnxExporterError(f"spatialgrad.torch.{function}() export to ONNX: expected {expected}, but got {got}")


def _require_opset(g, function: str, opset: int, operators: str, because: str = "") -> None:
    if g.opset < opset:
        raise _fail(function, f"opset_version >= {opset} ({operators}{because})", f"opset_version={g.opset}")


def _python_value(value):
    """The Python value of a constant input of the traced node (None for an absent optional one, lists for
    int[] and float[]); the graph value itself when it is computed in the graph."""
    node = value.node()
    if node.mustBeNone():
        return None
    if node.kind() in ("onnx::Constant", "prim::Constant") and node.hasAttribute("value"):
        kind = node.kindOf("value")
        constant = getattr(node, kind)("value")
        return constant.tolist() if kind == "t" else constant
    if node.kind() == "prim::ListConstruct":
        items = [_python_value(item) for item in node.inputs()]
        return value if any(isinstance(item, torch._C.Value) for item in items) else items
    return value


def _constant(value, function: str, argument: str):
    """A constant argument, or an error naming it (the ONNX attributes it becomes are fixed in the graph)."""
    result = _python_value(value)
    if isinstance(result, torch._C.Value):
        raise _fail(function, f"{argument} to be a constant of the traced call", "a value computed in the graph")
    return result


def _pair(values) -> List:
    """One entry or two (the adapters pass an int or a float as one) as two."""
    values = values if isinstance(values, (list, tuple)) else [values]
    return [values[0], values[-1]]


def _sizes(value) -> List[Optional[int]]:
    """A tensor value's sizes as its type knows them: None for an unknown or dynamic one, [] for an unknown rank."""
    sizes = value.type().varyingSizes() if isinstance(value.type(), torch._C.TensorType) else None
    return list(sizes) if sizes is not None else []


def _traced_sizes(g, input_index: int) -> List[Optional[int]]:
    """The sizes of an input of the traced call, as traced: static wherever the ONNX values' shapes may be unknown
    (inferred from Reshapes of computed shapes), also along the dynamic axes (fixed sizes only are read here)."""
    return _sizes(g.original_node.inputsAt(input_index))


def _const(g, values, dtype=torch.int64):
    """A Constant node of `values` (a number or a list)."""
    return g.op("Constant", value_t=torch.tensor(values, dtype=dtype))


def _unsqueeze(g, value, axes: List[int]):
    return g.op("Unsqueeze", value, _const(g, axes)) if g.opset >= 13 else g.op("Unsqueeze", value, axes_i=axes)


def _squeeze(g, value, axes: List[int]):
    return g.op("Squeeze", value, _const(g, axes)) if g.opset >= 13 else g.op("Squeeze", value, axes_i=axes)


def _dtype(value) -> torch.dtype:
    return _DTYPES.get(value.type().scalarType(), torch.float32)


_ONNX_FLOATS = {"Float": torch.onnx.TensorProtoDataType.FLOAT, "Double": torch.onnx.TensorProtoDataType.DOUBLE,
                "Half": torch.onnx.TensorProtoDataType.FLOAT16, "BFloat16": torch.onnx.TensorProtoDataType.BFLOAT16}


def _in_dtype_of(g, tensor, like):
    """``tensor`` cast to ``like``'s dtype where both are known and differ (the operator casts mixed dtypes, as
    mmcv does), else as it is."""
    have, want = tensor.type().scalarType(), like.type().scalarType()
    if have is None or want is None or have == want or want not in _ONNX_FLOATS:
        return tensor
    return g.op("Cast", tensor, to_i=_ONNX_FLOATS[want])


def _omitted(g):
    """An omitted optional input of Resize, as PyTorch writes its roi and scales: "" from opset 13, an empty
    tensor before."""
    if g.opset < 13:
        return _const(g, [], torch.float32)
    absent = g.op("prim::Constant")
    absent.setType(torch._C.OptionalType.ofTensor())
    return absent


# ---- avg_pool2d ---------------------------------------------------------------------------------------------------

def _pooled_size(size: int, kernel: int, stride: int, pad: int, ceil_mode: bool) -> int:
    """PyTorch's output size: with ceil_mode, a last window that would start in the right padding is dropped."""
    span = size + 2 * pad - kernel
    out = (span + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def _ceil_extra(input, kernel: Sequence[int], stride: Sequence[int], padding: Sequence[int],
                ceil_mode: bool) -> List[int]:
    """The padding ceil_mode adds past each axis' end: its last window reaches that far beyond the padded input.
    Written as explicit end padding (with ceil_mode=0), because ONNX's and PyTorch's ceil_mode differ there."""
    if not ceil_mode or all(s == 1 for s in stride):  # stride 1: ceil and floor give the same windows
        return [0, 0]
    spatial = _sizes(input)[-2:]  # as the exporter sees them: dynamic axes are None
    if len(spatial) != 2 or None in spatial:
        raise _fail("avg_pool2d", "a static height and width with ceil_mode=True and a stride > 1 (the last "
                    "window depends on them)", f"sizes {spatial or 'unknown'} (export without dynamic axes 2 and 3 "
                    "there, or use ceil_mode=False)")
    extra = []
    for size, k, s, p in zip(spatial, kernel, stride, padding):
        out = _pooled_size(size, k, s, p, True)
        extra.append(max(0, (out - 1) * s + k - (size + 2 * p)))
    return extra


def _average_pool(g, input, kernel, stride, pads, count_include_pad: bool):
    return g.op("AveragePool", input, kernel_shape_i=kernel, strides_i=stride, pads_i=pads, ceil_mode_i=0,
                count_include_pad_i=int(count_include_pad))


def _pool_4d(g, input, kernel, stride, padding, extra, count_include_pad, divisor):
    """avg_pool2d of a 4-D input, windows and divisors as PyTorch's."""
    before, after = list(padding), [p + e for p, e in zip(padding, extra)]
    if divisor is not None:
        # Window sums (every window lies in the padded input: the divisor is kH * kW), then the divisor.
        summed = _average_pool(g, input, kernel, stride, before + after, True)
        return g.op("Mul", summed, _const(g, kernel[0] * kernel[1] / divisor, _dtype(input)))
    if count_include_pad and (_PYTORCH_PADS_EXPLICITLY or any(extra)):
        # PyTorch divides by the window clipped to the padded input: pad with zeros, then count what is in it.
        padded = g.op("Pad", input, _const(g, [0, 0] + before + [0, 0] + before), mode_s="constant")
        return _average_pool(g, padded, kernel, stride, [0, 0] + extra, False)
    return _average_pool(g, input, kernel, stride, before + after, count_include_pad)


def avg_pool2d(g, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    """spatialgrad::avg_pool2d (aten's schema) -> AveragePool."""
    _require_opset(g, "avg_pool2d", 11, "AveragePool and Pad as PyTorch exports them")
    kernel = _pair(_constant(kernel_size, "avg_pool2d", "kernel_size"))
    stride = _pair(_constant(stride, "avg_pool2d", "stride") or kernel)
    padding = _pair(_constant(padding, "avg_pool2d", "padding"))
    ceil = bool(_constant(ceil_mode, "avg_pool2d", "ceil_mode"))
    divisor = _constant(divisor_override, "avg_pool2d", "divisor_override")
    extra = _ceil_extra(input, kernel, stride, padding, ceil)
    include_pad = bool(_constant(count_include_pad, "avg_pool2d", "count_include_pad"))
    if len(_traced_sizes(g, 0)) != 3:
        return _pool_4d(g, input, kernel, stride, padding, extra, include_pad, divisor)
    batched = _unsqueeze(g, input, [0])  # (C, H, W): AveragePool takes (N, C, H, W)
    return _squeeze(g, _pool_4d(g, batched, kernel, stride, padding, extra, include_pad, divisor), [0])


# ---- upsample_bilinear2d ------------------------------------------------------------------------------------------

def upsample_bilinear2d(g, input, output_size, align_corners, scale_factors):
    """spatialgrad::upsample_bilinear2d (aten's .vec schema) -> Resize, as PyTorch exports F.interpolate: linear,
    align_corners or half_pixel, the given scales (with the batch and channel scales 1) or sizes."""
    _require_opset(g, "upsample_bilinear2d", 11, "Resize with coordinate_transformation_mode")
    corners = _constant(align_corners, "upsample_bilinear2d", "align_corners")
    attributes = dict(coordinate_transformation_mode_s="align_corners" if corners else "half_pixel", mode_s="linear",
                      cubic_coeff_a_f=-0.75, nearest_mode_s="floor")  # (the last two unused: PyTorch writes them)
    roi = _omitted(g)
    scales = _constant(scale_factors, "upsample_bilinear2d", "scale_factors")
    if scales is not None:
        scales = g.op("Concat", _const(g, [1.0, 1.0], torch.float32), _const(g, _pair(scales), torch.float32),
                      axis_i=0)
        return g.op("Resize", input, roi, scales, **attributes)
    size = _python_value(output_size)
    size = output_size if isinstance(size, torch._C.Value) else _const(g, _pair(size))
    batch_and_channels = g.op("Slice", g.op("Shape", input), _const(g, [0]), _const(g, [2]), _const(g, [0]))
    sizes = g.op("Concat", batch_and_channels, g.op("Cast", size, to_i=_INT64), axis_i=0)
    return g.op("Resize", input, roi, _omitted(g), sizes, **attributes)


# ---- grid_sampler_2d ----------------------------------------------------------------------------------------------

def _grid_sample(g, input, grid, mode: str, padding_mode: str, align_corners: bool):
    if g.opset >= 20:
        mode = _INTERPOLATION_20[mode]
    return g.op("GridSample", input, grid, align_corners_i=int(align_corners), mode_s=mode,
                padding_mode_s=padding_mode)


def grid_sampler_2d(g, input, grid, interpolation_mode, padding_mode, align_corners):
    """spatialgrad::grid_sampler_2d -> GridSample, the modes by name."""
    _require_opset(g, "grid_sample", 16, "GridSample")
    mode = _INTERPOLATION[_constant(interpolation_mode, "grid_sample", "mode")]
    padding = _PADDING[_constant(padding_mode, "grid_sample", "padding_mode")]
    return _grid_sample(g, input, grid, mode, padding, bool(_constant(align_corners, "grid_sample", "align_corners")))


# ---- roi_align ----------------------------------------------------------------------------------------------------

def _column(g, rois, columns: List[int]):
    return g.op("Gather", rois, _const(g, columns), axis_i=1)


def roi_align(g, input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned):
    """spatialgrad::roi_align (torchvision's schema) -> RoiAlign, with the batch indices and boxes taken from the
    (K, 5) rows as torchvision's export takes them. aligned=False is RoiAlign's output_half_pixel (the mode of
    RoiAlign-10, boxes at least 1 pixel), aligned=True its half_pixel (opset 16); sampling_ratio <= 0 is 0,
    adaptive in both."""
    _require_opset(g, "roi_align", 10, "RoiAlign")
    shifted = bool(_constant(aligned, "roi_align", "aligned"))
    if shifted:
        _require_opset(g, "roi_align", 16, "RoiAlign", "'s coordinate_transformation_mode, for aligned=True")
    batch_indices = g.op("Cast", _squeeze(g, _column(g, rois, [0]), [1]), to_i=_INT64)
    attributes = dict(spatial_scale_f=_constant(spatial_scale, "roi_align", "spatial_scale"),
                      output_height_i=_constant(pooled_height, "roi_align", "output_size"),
                      output_width_i=_constant(pooled_width, "roi_align", "output_size"),
                      sampling_ratio_i=max(0, _constant(sampling_ratio, "roi_align", "sampling_ratio")))
    if g.opset >= 16:
        attributes["coordinate_transformation_mode_s"] = "half_pixel" if shifted else "output_half_pixel"
    return g.op("RoiAlign", input, _column(g, rois, [1, 2, 3, 4]), batch_indices, **attributes)


# ---- ms_deform_attn -----------------------------------------------------------------------------------------------

def _fixed_dims(g, input_index: int, dims: Sequence[int], argument: str) -> List[int]:
    """The sizes the graph fixes (heads, channels, levels, points), as traced."""
    sizes = _traced_sizes(g, input_index)
    picked = [sizes[d] if d < len(sizes) else None for d in dims]
    if None in picked:
        raise _fail("ms_deform_attn", f"static sizes of {argument} dimensions {list(dims)} (heads, channels, "
                    f"levels and points are fixed in the graph)", f"sizes {sizes or 'unknown'}")
    return picked


def _level_image(g, value, spatial_shapes, level_start_index, level: int, levels: int, channels: int):
    """Level `level` of value (bs, S, nH, C) as images (bs * nH, C, H, W); H and W read from spatial_shapes in
    the graph, so that they may be inputs of the model."""
    start = g.op("Gather", level_start_index, _const(g, [level]), axis_i=0)
    end = (g.op("Gather", level_start_index, _const(g, [level + 1]), axis_i=0) if level + 1 < levels
           else _const(g, [torch.iinfo(torch.int64).max]))
    pixels = g.op("Slice", value, start, end, _const(g, [1]))  # (bs, H * W, nH, C)
    pixels = g.op("Transpose", pixels, perm_i=[0, 2, 3, 1])  # (bs, nH, C, H * W)
    height_width = g.op("Gather", spatial_shapes, _const(g, level), axis_i=0)
    shape = g.op("Concat", _const(g, [-1, channels]), height_width, axis_i=0)
    return g.op("Reshape", pixels, shape)


def _grids(g, sampling_locations, levels: int, points: int):
    """sampling_locations (bs, Q, nH, L, P, 2) in [0, 1] as GridSample's grids in [-1, 1], (bs * nH, Q, L * P, 2)."""
    dtype = _dtype(sampling_locations)
    grids = g.op("Sub", g.op("Mul", sampling_locations, _const(g, 2.0, dtype)), _const(g, 1.0, dtype))
    grids = g.op("Transpose", grids, perm_i=[0, 2, 1, 3, 4, 5])  # (bs, nH, Q, L, P, 2)
    queries = g.op("Slice", g.op("Shape", sampling_locations), _const(g, [1]), _const(g, [2]), _const(g, [0]))
    shape = g.op("Concat", _const(g, [-1]), queries, _const(g, [levels * points, 2]), axis_i=0)
    return g.op("Reshape", grids, shape)


def ms_deform_attn(g, value, spatial_shapes, level_start_index, sampling_locations, attention_weights, im2col_step):
    """spatialgrad::ms_deform_attn -> per level a GridSample of the level's image at its points, then the points
    weighted and summed (bs, Q, nH * C). The batch, the number of queries and the levels' sizes may be dynamic;
    im2col_step is ignored, as by the kernel."""
    _require_opset(g, "ms_deform_attn", 16, "GridSample")
    heads, channels = _fixed_dims(g, 0, [2, 3], "value")
    levels, points = _fixed_dims(g, 3, [3, 4], "sampling_locations")
    spatial_shapes = g.op("Cast", spatial_shapes, to_i=_INT64)
    level_start_index = g.op("Cast", level_start_index, to_i=_INT64)
    sampling_locations = _in_dtype_of(g, sampling_locations, value)
    attention_weights = _in_dtype_of(g, attention_weights, value)
    grids = _grids(g, sampling_locations, levels, points)
    sampled = []
    for level in range(levels):
        image = _level_image(g, value, spatial_shapes, level_start_index, level, levels, channels)
        grid = g.op("Slice", grids, _const(g, [level * points]), _const(g, [(level + 1) * points]), _const(g, [2]))
        sampled.append(_grid_sample(g, image, grid, "bilinear", "zeros", False))  # (bs * nH, C, Q, P)
    sampled = g.op("Concat", *sampled, axis_i=3)  # (bs * nH, C, Q, L * P), level-major as the weights
    weights = g.op("Transpose", attention_weights, perm_i=[0, 2, 1, 3, 4])  # (bs, nH, Q, L, P)
    weights = g.op("Reshape", weights, _const(g, [-1, 1, 0, levels * points]))  # 0: keeps Q
    summed = g.op("ReduceSum", g.op("Mul", sampled, weights), _const(g, [3]), keepdims_i=0)  # (bs * nH, C, Q)
    out = g.op("Reshape", summed, _const(g, [-1, heads * channels, 0]))  # (bs, nH * C, Q)
    return g.op("Transpose", out, perm_i=[0, 2, 1])


_SYMBOLICS = {"avg_pool2d": avg_pool2d, "upsample_bilinear2d": upsample_bilinear2d,
              "grid_sampler_2d": grid_sampler_2d, "roi_align": roi_align, "ms_deform_attn": ms_deform_attn}


# For every opset: below each operator's minimum its function raises the error that names it.
for _name, _symbolic in _SYMBOLICS.items():
    torch.onnx.register_custom_op_symbolic(f"spatialgrad::{_name}", _symbolic, _LOWEST_OPSET)
del _name, _symbolic
