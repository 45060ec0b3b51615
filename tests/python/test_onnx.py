"""ONNX export of every spatialgrad operator (issue 45), through torch.onnx.export (TorchScript-based).

Each case is exported once. One test checks its graph on every release: onnx.checker (with shape inference),
standard ONNX operators only, the operator it maps to. Another runs it in ONNX Runtime and compares with PyTorch
eager, on the traced inputs and, where axes are dynamic, on inputs of other sizes. Debian 12 has no onnxruntime
package: there the runtime comparisons skip, saying so, and the graph checks still run. Then: the errors for what
ONNX cannot express, patch() changing no op type of a model's graph, the nn modules and three models. PyTorch
1.13 cannot export F.affine_grid (ONNX's AffineGrid is opset 20; its exporter stops at 17): there the models'
grids are exported as the same matrix product (examples/export_onnx.py's export, which these tests use).
"""
import contextlib
import gc
import importlib.util
import io
import itertools
import os
import sys
import warnings
from pathlib import Path
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import spatialgrad.torch as sgt  # noqa: E402

try:
    import onnx
except ImportError:  # pragma: no cover - scripts/bootstrap.sh installs python3-onnx on both releases
    onnx = None
try:
    import onnxruntime
except ImportError:  # Debian 12
    onnxruntime = None

_REQUIRED = os.environ.get("SPATIALGRAD_REQUIRE_TORCH") == "1"
if onnx is None and _REQUIRED:
    raise ImportError("SPATIALGRAD_REQUIRE_TORCH=1 but onnx is not installed (scripts/bootstrap.sh installs "
                      "python3-onnx)")
pytestmark = [
    pytest.mark.skipif(onnx is None, reason="onnx is not installed (Debian: python3-onnx)"),
    pytest.mark.skipif(not sgt.native and not _REQUIRED, reason="libspatialgrad_torch was not built: traces record "
                       "no spatialgrad:: operators to export"),
]
needs_runtime = pytest.mark.skipif(
    onnxruntime is None, reason="onnxruntime is not installed (Debian 12 has no python3-onnxruntime package): the "
    "exported graph is checked by onnx.checker in the graph test beside this one, but not run")

# float32: ONNX Runtime's outputs agree with PyTorch eager's to this fraction of the output's largest magnitude.
RELATIVE_BOUND = 1e-4

ROOT = Path(__file__).resolve().parents[2]
PYTORCH_2 = int(torch.__version__.split(".")[0]) >= 2
OPSET = 20 if PYTORCH_2 else 16  # the highest each exporter writes that the models need (1.13 stops at 17)


def _load_example(name: str):
    """An example script as a module (the export helpers and models of examples/export_onnx.py)."""
    examples = str(ROOT / "examples")
    if examples not in sys.path:
        sys.path.insert(0, examples)  # its own imports (train_tiny_detector)
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


example = _load_example("export_onnx")
detector = importlib.import_module("train_tiny_detector")  # the one export_onnx imported


def tensors(*shapes, seed=0) -> List[torch.Tensor]:
    """Uniform [0, 1) tensors of the given shapes, from a fixed seed."""
    generator = torch.Generator().manual_seed(seed)
    return [torch.rand(shape, generator=generator) for shape in shapes]


class Call(torch.nn.Module):
    """A function of tensors as a module: forward(*tensors) = function(*tensors, *args, **kwargs)."""

    def __init__(self, function: Callable, *args, **kwargs):
        super().__init__()
        self.function, self.args, self.kwargs = function, args, kwargs

    def forward(self, *inputs):
        return self.function(*inputs, *self.args, **self.kwargs)


class Case(NamedTuple):
    model: torch.nn.Module
    inputs: Tuple[torch.Tensor, ...]
    operator: str  # the ONNX operator the call maps to
    opset: int = 16
    dynamic_axes: Optional[Dict[int, Dict[int, str]]] = None  # input index -> {axis: name}
    other_inputs: Tuple[Tuple[torch.Tensor, ...], ...] = ()  # run too: sizes the dynamic axes allow


def names(count: int) -> List[str]:
    return [f"input{i}" for i in range(count)]


def export(model: torch.nn.Module, inputs: tuple, opset: int = 16, dynamic_axes=None, patched: bool = False):
    """The ONNX model torch.onnx.export writes (examples/export_onnx.py's export: dynamo=False on PyTorch 2.x).
    With dynamic input axes, every output axis is dynamic."""
    axes = {f"input{i}": dims for i, dims in (dynamic_axes or {}).items()}
    if dynamic_axes:
        with torch.no_grad():
            axes["output"] = {axis: f"output{axis}" for axis in range(model(*inputs).dim())}
    buffer = io.BytesIO()
    with sgt.patch() if patched else contextlib.nullcontext():
        example.export(model, inputs, buffer, opset=opset, input_names=names(len(inputs)), output_names=["output"],
                       dynamic_axes=axes or None)
    return onnx.load_from_string(buffer.getvalue())


def run(model_proto, inputs) -> torch.Tensor:
    session = onnxruntime.InferenceSession(model_proto.SerializeToString(), providers=["CPUExecutionProvider"])
    (output,) = session.run(None, {name: t.numpy() for name, t in zip(names(len(inputs)), inputs)})
    return torch.from_numpy(output)


def assert_matches(got: torch.Tensor, expected: torch.Tensor) -> None:
    assert got.shape == expected.shape
    scale = max(float(expected.abs().max()), 1e-12)
    error = float((got - expected).abs().max())
    assert error <= RELATIVE_BOUND * scale, f"max |ONNX Runtime - eager| = {error:.3g}, output scale {scale:.3g}"


def op_types(model_proto) -> List[str]:
    """The graph's operators in order, without its Constants (data, placed where each exporter emits them)."""
    return [node.op_type for node in model_proto.graph.node if node.op_type != "Constant"]


def assert_standard_graph(model_proto, operator: str) -> None:
    onnx.checker.check_model(model_proto, full_check=True)
    assert all(node.domain in ("", "ai.onnx") for node in model_proto.graph.node), op_types(model_proto)
    assert operator in op_types(model_proto)


# ---- the cases: each operator in every mode it has --------------------------------------------------------------

def _avg_pool2d_cases():
    x, small, unbatched = tensors((2, 3, 8, 10), (1, 2, 5, 5), (3, 7, 9), seed=1)
    cases = {}
    # kernel 3, stride 2 on 8 x 10: with ceil_mode the last window passes the padded input's end on both axes.
    for padding, ceil_mode, count_include_pad, divisor in itertools.product((0, 1), (False, True), (True, False),
                                                                            (None, 5)):
        kwargs = dict(padding=padding, ceil_mode=ceil_mode, count_include_pad=count_include_pad,
                      divisor_override=divisor)
        cases["avg_pool2d-" + "-".join(f"{k}={v}" for k, v in kwargs.items())] = Case(
            Call(sgt.avg_pool2d, 3, 2, **kwargs), (x,), "AveragePool")
    cases["avg_pool2d-ceil-last-window-dropped"] = Case(  # PyTorch drops a window starting in the padding: 3 x 3
        Call(sgt.avg_pool2d, 2, 2, 1, True), (small,), "AveragePool")
    cases["avg_pool2d-stride1-ceil"] = Case(Call(sgt.avg_pool2d, 3, 1, 1, True, False), (x,), "AveragePool")
    cases["avg_pool2d-rectangular"] = Case(Call(sgt.avg_pool2d, (3, 2), (2, 1), (1, 0)), (x,), "AveragePool")
    cases["avg_pool2d-unbatched"] = Case(Call(sgt.avg_pool2d, 2, padding=1), (unbatched,), "AveragePool")
    cases["avg_pool2d-opset11"] = Case(Call(sgt.avg_pool2d, 3, 2, 1, True), (x,), "AveragePool", opset=11)
    cases["avg_pool2d-dynamic-batch"] = Case(Call(sgt.avg_pool2d, 3, 2, 1, True), (x,), "AveragePool",
                                             dynamic_axes={0: {0: "batch"}},
                                             other_inputs=((x[:1],), (x.repeat(2, 1, 1, 1),)))
    return cases


def _upsample_cases():
    (x,) = tensors((2, 3, 5, 7), seed=2)
    cases = {}
    for align_corners in (False, True):
        for label, kwargs in (("size-up", dict(size=(11, 9))), ("size-down", dict(size=(3, 4))),
                              ("size-one", dict(size=1)), ("scale-2", dict(scale_factor=2.0)),
                              ("scales-1.7-0.6", dict(scale_factor=(1.7, 0.6))),
                              ("recompute-scale", dict(scale_factor=1.7, recompute_scale_factor=True))):
            cases[f"upsample_bilinear2d-{label}-align_corners={align_corners}"] = Case(
                Call(sgt.upsample_bilinear2d, align_corners=align_corners, **kwargs), (x,), "Resize")
    cases["upsample_bilinear2d-opset11"] = Case(Call(sgt.upsample_bilinear2d, (9, 8), align_corners=False), (x,),
                                                "Resize", opset=11)
    cases["upsample_bilinear2d-dynamic-batch"] = Case(
        Call(sgt.upsample_bilinear2d, scale_factor=2.0, align_corners=False), (x,), "Resize",
        dynamic_axes={0: {0: "batch"}}, other_inputs=((x[:1],),))
    return cases


def _grid_sample_cases():
    # Locations up to 30% beyond the image on each side: every padding mode is exercised.
    x, grid = tensors((2, 3, 6, 7), (2, 5, 4, 2), seed=3)
    grid = grid * 2.6 - 1.3
    cases = {}
    for mode, padding_mode, align_corners in itertools.product(("bilinear", "nearest", "bicubic"),
                                                               ("zeros", "border", "reflection"), (False, True)):
        cases[f"grid_sample-{mode}-{padding_mode}-align_corners={align_corners}"] = Case(
            Call(sgt.grid_sample, mode, padding_mode, align_corners), (x, grid), "GridSample")
    other_x, other_grid = tensors((3, 3, 6, 7), (3, 2, 9, 2), seed=4)
    cases["grid_sample-dynamic-batch-and-points"] = Case(
        Call(sgt.grid_sample, "bilinear", "border", False), (x, grid), "GridSample",
        dynamic_axes={0: {0: "batch"}, 1: {0: "batch", 1: "rows", 2: "columns"}},
        other_inputs=((other_x, other_grid * 2.6 - 1.3),))
    if PYTORCH_2:  # GridSample-20 names the modes linear and cubic
        for mode in ("bilinear", "bicubic"):
            cases[f"grid_sample-{mode}-opset20"] = Case(Call(sgt.grid_sample, mode, "reflection", True), (x, grid),
                                                       "GridSample", opset=20)
    return cases


def _boxes(count: int, seed: int) -> torch.Tensor:
    """(K, 5) rows on a 2-image batch of 12 x 14 maps at spatial_scale 0.5: boxes in image coordinates, some
    smaller than a pixel of the map, some reaching past its edges."""
    generator = torch.Generator().manual_seed(seed)
    corners = torch.rand(count, 2, generator=generator) * torch.tensor([30.0, 26.0]) - 1.0
    sizes = torch.rand(count, 2, generator=generator) * 14.0
    sizes[: count // 4] *= 0.05  # under a pixel: aligned=False makes them 1 pixel, aligned=True not
    batch = (torch.arange(count) % 2).float().unsqueeze(1)
    return torch.cat([batch, corners, corners + sizes], dim=1)


class RoIAlignFromList(torch.nn.Module):
    """roi_align with torchvision's other box format: one (L_i, 4) tensor per image."""

    def forward(self, input, boxes0, boxes1):
        return sgt.roi_align(input, [boxes0, boxes1], (3, 2), 0.5, 2, True)


def _roi_align_cases():
    (x,) = tensors((2, 4, 12, 14), seed=5)
    boxes = _boxes(12, seed=6)
    cases = {}
    for aligned, sampling_ratio in itertools.product((False, True), (-1, 0, 2)):
        cases[f"roi_align-aligned={aligned}-sampling_ratio={sampling_ratio}"] = Case(
            Call(sgt.roi_align, (3, 2), 0.5, sampling_ratio, aligned), (x, boxes), "RoiAlign")
    cases["roi_align-aligned=False-opset11"] = Case(Call(sgt.roi_align, 2, 0.5, 2, False), (x, boxes), "RoiAlign",
                                                    opset=11)
    cases["roi_align-list-of-boxes"] = Case(RoIAlignFromList(), (x, boxes[:5, 1:], boxes[5:, 1:]), "RoiAlign")
    cases["roi_align-dynamic-boxes"] = Case(
        Call(sgt.roi_align, (3, 2), 0.5, -1, True), (x, boxes), "RoiAlign", dynamic_axes={1: {0: "boxes"}},
        other_inputs=((x, _boxes(3, seed=7)), (x, _boxes(40, seed=8))))
    return cases


SHAPES = ((6, 5), (3, 3), (2, 1))


def _deform_inputs(batch: int, queries: int, shapes=SHAPES, heads: int = 2, channels: int = 4, points: int = 3,
                   seed: int = 9):
    """value, spatial_shapes, level_start_index, locations (10% beyond [0, 1]: zeros padding read) and weights."""
    spatial_shapes = torch.tensor(shapes, dtype=torch.int64)
    areas = spatial_shapes.prod(1)
    starts = torch.cat([areas.new_zeros(1), areas.cumsum(0)[:-1]])
    value, locations, weights = tensors((batch, int(areas.sum()), heads, channels),
                                        (batch, queries, heads, len(shapes), points, 2),
                                        (batch, queries, heads, len(shapes), points), seed=seed)
    return value, spatial_shapes, starts, locations * 1.2 - 0.1, weights


class DeformAttnFixedLevels(torch.nn.Module):
    """ms_deform_attn with the levels' sizes constants of the model."""

    def forward(self, value, locations, weights):
        spatial_shapes = torch.tensor(SHAPES, dtype=torch.int64)
        starts = torch.tensor([0, 30, 39], dtype=torch.int64)
        return sgt.ms_deform_attn(value, spatial_shapes, starts, locations, weights)


def _ms_deform_attn_cases():
    value, shapes, starts, locations, weights = _deform_inputs(2, 7)
    call = Call(sgt.ms_deform_attn)
    other_levels = _deform_inputs(1, 4, shapes=((4, 8), (2, 4), (1, 2)), seed=10)
    cases = {
        "ms_deform_attn-levels-as-inputs": Case(call, (value, shapes, starts, locations, weights), "GridSample"),
        "ms_deform_attn-levels-as-constants": Case(DeformAttnFixedLevels(), (value, locations, weights), "GridSample"),
        "ms_deform_attn-dynamic-batch-queries-and-levels": Case(
            call, (value, shapes, starts, locations, weights), "GridSample",
            dynamic_axes={0: {0: "batch", 1: "values"}, 3: {0: "batch", 1: "queries"}, 4: {0: "batch", 1: "queries"}},
            other_inputs=(other_levels, _deform_inputs(3, 11, seed=11))),
        # float64 points and weights with a float32 value: the operator casts them to value's dtype, as mmcv
        "ms_deform_attn-mixed-dtypes": Case(call, (value, shapes, starts, locations.double(), weights.double()),
                                            "GridSample"),
    }
    if PYTORCH_2:
        cases["ms_deform_attn-opset20"] = Case(call, (value, shapes, starts, locations, weights), "GridSample",
                                               opset=20)
    return cases


CASES = {**_avg_pool2d_cases(), **_upsample_cases(), **_grid_sample_cases(), **_roi_align_cases(),
         **_ms_deform_attn_cases()}
_EXPORTED: Dict[str, object] = {}


def exported(name: str):
    if name not in _EXPORTED:
        case = CASES[name]
        _EXPORTED[name] = export(case.model, case.inputs, case.opset, case.dynamic_axes)
    return _EXPORTED[name]


@pytest.mark.parametrize("name", CASES)
def test_graph(name):
    assert_standard_graph(exported(name), CASES[name].operator)


@needs_runtime
@pytest.mark.parametrize("name", CASES)
def test_runtime_matches_eager(name):
    case = CASES[name]
    for inputs in (case.inputs,) + case.other_inputs:
        with torch.no_grad():
            expected = case.model(*inputs)
        assert_matches(run(exported(name), inputs), expected)


def test_every_operator_and_mode_has_cases():
    for operator in ("avg_pool2d", "upsample_bilinear2d", "grid_sample", "roi_align", "ms_deform_attn"):
        assert any(name.startswith(operator + "-") for name in CASES), operator
    assert sum(name.startswith("grid_sample-") and "opset" not in name and "dynamic" not in name
               for name in CASES) == 18  # 3 modes x 3 paddings x 2 align_corners


def test_avg_pool2d_ceil_mode_writes_explicit_end_padding():
    """ONNX's ceil_mode differs from PyTorch's at the last window: the windows are written as padding."""
    pool = next(node for node in exported("avg_pool2d-padding=1-ceil_mode=True-count_include_pad=False-"
                                          "divisor_override=None").graph.node if node.op_type == "AveragePool")
    attributes = {a.name: onnx.helper.get_attribute_value(a) for a in pool.attribute}
    assert attributes["ceil_mode"] == 0 and attributes["pads"] == [1, 1, 2, 2]


def test_roi_align_coordinate_modes():
    for aligned, mode in ((False, b"output_half_pixel"), (True, b"half_pixel")):
        graph = exported(f"roi_align-aligned={aligned}-sampling_ratio=-1").graph
        (node,) = [node for node in graph.node if node.op_type == "RoiAlign"]
        attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        assert attributes["coordinate_transformation_mode"] == mode and attributes["sampling_ratio"] == 0


# ---- what ONNX cannot express: errors naming the function, the argument and the opset ----------------------------

def _export_error(model, inputs, opset, **kwargs) -> str:
    """The message of the export's OnnxExporterError. The error is not kept: its traceback holds Python wrappers
    of the exporter's graph, which PyTorch 1.13 frees, and a later export would then meet the stale wrappers
    ("Unable to cast from non-held to held instance"; the same with PyTorch's own export errors)."""
    try:
        export(model, inputs, opset, **kwargs)
    except torch.onnx.errors.OnnxExporterError as error:
        message = str(error)
        error.__traceback__ = None
    else:
        pytest.fail("the export did not raise")
    gc.collect()
    return message


@pytest.mark.parametrize("name, opset, needed", [
    ("grid_sample-bilinear-zeros-align_corners=False", 15, 16),
    ("ms_deform_attn-levels-as-inputs", 15, 16),
    ("roi_align-aligned=True-sampling_ratio=2", 15, 16),
    ("roi_align-aligned=False-sampling_ratio=2", 9, 10),
    ("upsample_bilinear2d-size-up-align_corners=True", 10, 11),
    ("avg_pool2d-padding=1-ceil_mode=True-count_include_pad=True-divisor_override=None", 10, 11),
])
def test_too_low_an_opset_names_the_opset_needed(name, opset, needed):
    case = CASES[name]
    message = _export_error(case.model, case.inputs, opset)
    function = name.split("-")[0]
    assert f"spatialgrad.torch.{function}() export to ONNX" in message
    assert f"opset_version >= {needed}" in message and f"opset_version={opset}" in message
    if function == "roi_align" and needed == 16:
        assert "aligned=True" in message


def test_avg_pool2d_ceil_mode_with_dynamic_height_is_refused():
    (x,) = tensors((1, 2, 8, 10))
    message = _export_error(Call(sgt.avg_pool2d, 3, 2, 1, True), (x,), 16, dynamic_axes={0: {2: "height"}})
    assert "ceil_mode=True" in message and "dynamic axes 2 and 3" in message


def test_avg_pool2d_ceil_mode_with_stride_1_allows_dynamic_sizes():
    (x,) = tensors((1, 2, 8, 10))
    model = export(Call(sgt.avg_pool2d, 3, 1, 1, True), (x,), 16, dynamic_axes={0: {2: "height", 3: "width"}})
    assert_standard_graph(model, "AveragePool")


# ---- patch(): the same op types as PyTorch's and torchvision's own export ---------------------------------------

class TorchCalls(torch.nn.Module):
    """Every PyTorch and torchvision function patch() routes, in the modes PyTorch exports."""

    def __init__(self):
        super().__init__()
        import torchvision

        self.pool = torch.nn.AvgPool2d(3, 2, 1, ceil_mode=False, count_include_pad=False)
        self.upsample = torch.nn.Upsample(scale_factor=2.0, mode="bilinear", align_corners=True)
        self.roi = torchvision.ops.RoIAlign((2, 2), 0.5, 2, aligned=True)
        self.roi_align = torchvision.ops.roi_align

    def forward(self, x, grid, boxes):
        pooled = F.avg_pool2d(x, 2) + F.avg_pool2d(x, 3, 2, 1)[..., :4, :5]
        up = F.interpolate(pooled, size=(8, 10), mode="bilinear", align_corners=False) + self.upsample(pooled)
        sampled = F.grid_sample(up, grid, mode="bilinear", padding_mode="border", align_corners=False)
        pooled_boxes = self.roi(up, boxes) + self.roi_align(up, [boxes[:3, 1:], boxes[3:, 1:]], 2, 0.5, 2, True)
        return (sampled.sum((2, 3)) + pooled_boxes.sum((1, 2, 3)).sum() + self.pool(x).mean((2, 3))).sum(1)


def test_patch_changes_no_op_type():
    x, grid = tensors((2, 3, 8, 10), (2, 4, 5, 2), seed=12)
    inputs = (x, grid * 2 - 1, _boxes(6, seed=13))
    model = TorchCalls()
    patched = export(model, inputs, patched=True)
    assert_standard_graph(patched, "RoiAlign")
    assert op_types(patched) == op_types(export(model, inputs))


def test_patch_records_spatialgrad_operators_when_tracing():
    """What the test above compares goes through spatialgrad's symbolic functions."""
    x, grid = tensors((2, 3, 8, 10), (2, 4, 5, 2), seed=12)
    with sgt.patch(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph = torch.jit.trace(TorchCalls(), (x, grid * 2 - 1, _boxes(6, seed=13))).inlined_graph
    recorded = {node.kind() for node in graph.nodes() if node.kind().startswith("spatialgrad::")}
    assert recorded == {"spatialgrad::avg_pool2d", "spatialgrad::upsample_bilinear2d",
                        "spatialgrad::grid_sampler_2d", "spatialgrad::roi_align"}


@needs_runtime
def test_patched_model_matches_in_runtime():
    x, grid = tensors((2, 3, 8, 10), (2, 4, 5, 2), seed=12)
    inputs = (x, grid * 2 - 1, _boxes(6, seed=13))
    model = TorchCalls()
    with torch.no_grad():
        expected = model(*inputs)
    assert_matches(run(export(model, inputs, patched=True), inputs), expected)


# ---- the nn modules and three models ----------------------------------------------------------------------------

class MultiScalePooling(torch.nn.Module):
    """spatialgrad.torch.nn.MultiScaleRoIAlign over two levels, the image size fixed."""

    def __init__(self):
        super().__init__()
        self.pool = sgt.nn.MultiScaleRoIAlign(["p2", "p3"], 3, sampling_ratio=2)

    def forward(self, p2, p3, boxes0, boxes1):
        return self.pool({"p2": p2, "p3": p3}, [boxes0, boxes1], [(64, 64), (64, 64)])


def _multiscale_boxes(seed: int):
    generator = torch.Generator().manual_seed(seed)
    corners = torch.rand(6, 2, generator=generator) * 30
    sizes = torch.tensor([[4.0, 5.0], [8, 6], [30, 20], [12, 40], [5, 5], [33, 30]])  # small ones: p2, large: p3
    return torch.cat([corners, corners + sizes], 1)


def _detector_inputs(seed: int):
    images, boxes, _ = detector.make_batch(torch.Generator().manual_seed(seed), batch=2)
    return images, boxes


def _stn_inputs(seed: int, batch: int = 2):
    return tuple(tensors((batch, 1, 28, 28), seed=seed))


class SpatialTransformer(torch.nn.Module):
    """A spatial transformer network: a localisation net predicts theta, F.affine_grid and F.grid_sample warp
    the input (spatialgrad.torch.grid_sample, or F.grid_sample under patch()), a classifier reads the result."""

    def __init__(self, sample: Callable):
        super().__init__()
        self.sample = sample
        self.localisation = torch.nn.Sequential(torch.nn.Conv2d(1, 8, 5), torch.nn.ReLU(), torch.nn.AvgPool2d(4),
                                                torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 6))
        torch.nn.init.normal_(self.localisation[-1].weight, std=0.05)
        with torch.no_grad():
            self.localisation[-1].bias.copy_(torch.tensor([0.9, 0.1, 0.05, -0.1, 0.8, -0.05]))
        self.classify = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                            torch.nn.Linear(4 * 26 * 26, 10))

    def forward(self, x):
        theta = self.localisation(x).view(-1, 2, 3)
        grid = F.affine_grid(theta, list(x.shape), align_corners=False)
        return self.classify(self.sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False))


class AttentionLayer(torch.nn.Module):
    """spatialgrad.torch.nn.MultiScaleDeformableAttention called with the tensors it attends over."""

    def __init__(self, attention: torch.nn.Module):
        super().__init__()
        self.attention = attention

    def forward(self, query, value, reference_points, spatial_shapes, level_start_index):
        return self.attention(query, value=value, reference_points=reference_points, spatial_shapes=spatial_shapes,
                              level_start_index=level_start_index)


def _models():
    torch.manual_seed(0)
    detr = example.DeformableEncoderLayer(dims=32, heads=4, levels=3, points=2, hidden=64)
    detr_inputs = tuple(example.encoder_inputs(2, 64, dims=32).values())
    detr_other = tuple(example.encoder_inputs(1, 96, dims=32, seed=1).values())
    detr_axes = {i: {0: "batch", 1: "tokens"} for i in range(3)}
    attention_inputs = (detr_inputs[0][:, :5],) + detr_inputs[:1] + (detr_inputs[2][:, :5],) + detr_inputs[3:]
    p2, p3 = tensors((2, 4, 16, 16), (2, 4, 8, 8), seed=14)
    return {
        "tiny-detector": Case(detector.TinyDetector(detector.SpatialgradOps()), _detector_inputs(20), "RoiAlign",
                              opset=OPSET, other_inputs=(_detector_inputs(21),)),
        "deformable-detr-encoder-layer": Case(detr, detr_inputs, "GridSample", opset=OPSET, dynamic_axes=detr_axes,
                                              other_inputs=(detr_other,)),
        "spatial-transformer": Case(SpatialTransformer(sgt.grid_sample), _stn_inputs(22), "GridSample", opset=OPSET,
                                    dynamic_axes={0: {0: "batch"}}, other_inputs=(_stn_inputs(23, batch=5),)),
        "nn.RoIAlign": Case(sgt.nn.RoIAlign((3, 2), 0.5, -1, aligned=True), (p2, _boxes(9, seed=15)), "RoiAlign",
                            dynamic_axes={1: {0: "boxes"}}, other_inputs=((p2, _boxes(2, seed=16)),)),
        "nn.MultiScaleRoIAlign": Case(MultiScalePooling(), (p2, p3, _multiscale_boxes(17), _multiscale_boxes(18)),
                                      "RoiAlign"),
        "nn.MultiScaleDeformableAttention": Case(AttentionLayer(detr.attention), attention_inputs, "GridSample"),
    }


MODELS = _models()
_EXPORTED_MODELS: Dict[str, object] = {}


def exported_model(name: str):
    if name not in _EXPORTED_MODELS:
        case = MODELS[name]
        _EXPORTED_MODELS[name] = export(case.model, case.inputs, case.opset, case.dynamic_axes)
    return _EXPORTED_MODELS[name]


@pytest.mark.parametrize("name", MODELS)
def test_model_graph(name):
    assert_standard_graph(exported_model(name), MODELS[name].operator)


@needs_runtime
@pytest.mark.parametrize("name", MODELS)
def test_model_matches_eager_in_runtime(name):
    case = MODELS[name]
    for inputs in (case.inputs,) + case.other_inputs:
        with torch.no_grad():
            expected = case.model.eval()(*inputs)
        assert_matches(run(exported_model(name), inputs), expected)


@pytest.mark.parametrize("build", [lambda: detector.TinyDetector(detector.TorchOps()),
                                   lambda: SpatialTransformer(F.grid_sample)],
                         ids=["tiny-detector", "spatial-transformer"])
def test_models_under_patch_keep_their_op_types(build):
    """The models built from PyTorch's and torchvision's functions export the same op types under patch()."""
    torch.manual_seed(0)
    model = build().eval()
    inputs = _detector_inputs(20) if isinstance(model, detector.TinyDetector) else _stn_inputs(22)
    assert op_types(export(model, inputs, OPSET, patched=True)) == op_types(export(model, inputs, OPSET))
