"""ONNX export of the ``spatialgrad::`` operators: what their symbolic functions for ``torch.onnx.export`` (the
TorchScript-based exporter of PyTorch 1.13 and 2.x; on 2.x pass ``dynamo=False``) share, and their registration
when ``spatialgrad.torch`` is imported.

A traced call of a spatialgrad function (or of a function ``patch()`` routes) is recorded as a ``spatialgrad::``
node; each operator's module (``spatialgrad.torch._<name>``) maps it to standard ONNX operators in its ``ONNX``
function, so that any ONNX runtime runs the result (docs/pytorch.md, "Export to ONNX", lists them). What an ONNX
operator cannot express raises ``torch.onnx.errors.OnnxExporterError`` naming the function, the argument and the
opset needed; nothing is exported approximately.
"""
from typing import List, Optional

import torch
from torch.onnx.errors import OnnxExporterError

# Registered from this opset up, so that an export at a lower opset reaches the checks below (which name the
# opset needed) instead of PyTorch's "unsupported operator".
_LOWEST_OPSET = 7

INT64 = torch.onnx.TensorProtoDataType.INT64
_DTYPES = {"Float": torch.float32, "Double": torch.float64, "Half": torch.float16, "BFloat16": torch.bfloat16}

# GridSample-20 renamed bilinear and bicubic.
_INTERPOLATION_20 = {"bilinear": "linear", "nearest": "nearest", "bicubic": "cubic"}

def fail(function: str, expected: str, got: str) -> OnnxExporterError:
    return OnnxExporterError(f"spatialgrad.torch.{function}() export to ONNX: expected {expected}, but got {got}")


def require_opset(g, function: str, opset: int, operators: str, because: str = "") -> None:
    if g.opset < opset:
        raise fail(function, f"opset_version >= {opset} ({operators}{because})", f"opset_version={g.opset}")


def python_value(value):
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
        items = [python_value(item) for item in node.inputs()]
        return value if any(isinstance(item, torch._C.Value) for item in items) else items
    return value


def constant(value, function: str, argument: str):
    """A constant argument, or an error naming it (the ONNX attributes it becomes are fixed in the graph)."""
    result = python_value(value)
    if isinstance(result, torch._C.Value):
        raise fail(function, f"{argument} to be a constant of the traced call", "a value computed in the graph")
    return result


def pair(values) -> List:
    """One entry or two (the adapters pass an int or a float as one) as two."""
    values = values if isinstance(values, (list, tuple)) else [values]
    return [values[0], values[-1]]


def known_sizes(value) -> List[Optional[int]]:
    """A tensor value's sizes as its type knows them: None for an unknown or dynamic one, [] for an unknown rank."""
    sizes = value.type().varyingSizes() if isinstance(value.type(), torch._C.TensorType) else None
    return list(sizes) if sizes is not None else []


def traced_sizes(g, input_index: int) -> List[Optional[int]]:
    """The sizes of an input of the traced call, as traced: static wherever the ONNX values' shapes may be unknown
    (inferred from Reshapes of computed shapes), also along the dynamic axes (fixed sizes only are read here)."""
    return known_sizes(g.original_node.inputsAt(input_index))


def const(g, values, dtype=torch.int64):
    """A Constant node of `values` (a number or a list)."""
    return g.op("Constant", value_t=torch.tensor(values, dtype=dtype))


def slice_of(g, value, start: int, end: int, axis: int):
    """value[start:end] along axis (constant bounds)."""
    return g.op("Slice", value, const(g, [start]), const(g, [end]), const(g, [axis]))


def unsqueeze(g, value, axes: List[int]):
    return g.op("Unsqueeze", value, const(g, axes)) if g.opset >= 13 else g.op("Unsqueeze", value, axes_i=axes)


def squeeze(g, value, axes: List[int]):
    return g.op("Squeeze", value, const(g, axes)) if g.opset >= 13 else g.op("Squeeze", value, axes_i=axes)


def dtype_of(value) -> torch.dtype:
    return _DTYPES.get(value.type().scalarType(), torch.float32)


_ONNX_FLOATS = {"Float": torch.onnx.TensorProtoDataType.FLOAT, "Double": torch.onnx.TensorProtoDataType.DOUBLE,
                "Half": torch.onnx.TensorProtoDataType.FLOAT16, "BFloat16": torch.onnx.TensorProtoDataType.BFLOAT16}


def in_dtype_of(g, tensor, like):
    """``tensor`` cast to ``like``'s dtype where both are known and differ (the operator casts mixed dtypes, as
    mmcv does), else as it is."""
    have, want = tensor.type().scalarType(), like.type().scalarType()
    if have is None or want is None or have == want or want not in _ONNX_FLOATS:
        return tensor
    return g.op("Cast", tensor, to_i=_ONNX_FLOATS[want])


def omitted(g):
    """An omitted optional input of Resize, as PyTorch writes its roi and scales: "" from opset 13, an empty
    tensor before."""
    if g.opset < 13:
        return const(g, [], torch.float32)
    absent = g.op("prim::Constant")
    absent.setType(torch._C.OptionalType.ofTensor())
    return absent


def grid_sample_node(g, input, grid, mode: str, padding_mode: str, align_corners: bool):
    if g.opset >= 20:
        mode = _INTERPOLATION_20[mode]
    return g.op("GridSample", input, grid, align_corners_i=int(align_corners), mode_s=mode,
                padding_mode_s=padding_mode)


def register(modules) -> None:
    """Registers the ONNX function of each operator module that has one (``ONNX``) for ``spatialgrad::<name>``,
    for every opset: below an operator's minimum its function raises the error that names the opset needed."""
    for module in modules:
        if hasattr(module, "ONNX"):
            name = module.__name__.rsplit("._", 1)[1]
            torch.onnx.register_custom_op_symbolic(f"spatialgrad::{name}", module.ONNX, _LOWEST_OPSET)
