"""The native operators (torch.ops.spatialgrad) under PyTorch's program capture: torch.jit.trace, torch.jit.script
with save and load (in a fresh process that never imports spatialgrad), patch() while tracing, torch.fx."""
import io
import os
import warnings
from typing import List

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import spatialgrad  # noqa: E402
import spatialgrad.torch as sgt  # noqa: E402
from helpers import count_patch_calls, run_probe  # noqa: E402

pytestmark = pytest.mark.skipif(not sgt.native, reason="spatialgrad was built without libtorch: no native operators")

# The operators' names in torch.ops.spatialgrad, one per spatialgrad.torch function.
OPERATORS = ["avg_pool2d", "upsample_bilinear2d", "grid_sampler_2d", "roi_align", "ms_deform_attn"]


def calls(dtype=torch.float64):
    """{operator: (function of tensors only, its example tensors)}: every function with non-default options."""
    generator = torch.Generator().manual_seed(33)

    def rand(*shape):
        return torch.rand(*shape, generator=generator, dtype=dtype)

    boxes = torch.tensor([[0, 1.0, 1.0, 6.0, 5.0], [1, 0.5, 2.0, 7.0, 7.5]], dtype=dtype)
    shapes, starts = torch.tensor([[4, 4], [2, 2]]), torch.tensor([0, 16])
    return {
        "avg_pool2d": (lambda x: sgt.avg_pool2d(x, 3, 2, 1, True, False), (rand(2, 3, 8, 8),)),
        "upsample_bilinear2d": (lambda x: sgt.upsample_bilinear2d(x, (5, 11), None, True), (rand(2, 3, 8, 8),)),
        "grid_sampler_2d": (lambda x, grid: sgt.grid_sample(x, grid, "bilinear", "border", False),
                            (rand(2, 3, 8, 8), rand(2, 5, 4, 2) * 2.2 - 1.1)),
        "roi_align": (lambda x: sgt.roi_align(x, boxes, (2, 3), 0.5, 2, True), (rand(2, 3, 8, 8),)),
        "ms_deform_attn": (lambda value, locations, weights: sgt.ms_deform_attn(value, shapes, starts, locations,
                                                                               weights),
                           (rand(2, 20, 2, 3), rand(2, 5, 2, 2, 3, 2), rand(2, 5, 2, 2, 3))),
    }


def library_path() -> str:
    """libspatialgrad_torch.so, installed beside the package's extension."""
    return os.path.join(os.path.dirname(spatialgrad.__file__), "libspatialgrad_torch.so")


def round_trip(module):
    """`module` saved with torch.jit.save and loaded back."""
    buffer = io.BytesIO()
    torch.jit.save(module, buffer)
    buffer.seek(0)
    return torch.jit.load(buffer)


@pytest.mark.parametrize("op", OPERATORS)
def test_trace_records_the_operator_without_warnings_and_saves(op):
    function, inputs = calls()[op]
    inputs = [t.requires_grad_() for t in inputs]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the Python path gave six TracerWarnings (NumPy conversions)
        traced = torch.jit.trace(function, inputs)
    graph = str(traced.graph)
    assert f"spatialgrad::{op}" in graph and "prim::PythonOp" not in graph, graph
    loaded = round_trip(traced)
    expected = function(*inputs)
    got = loaded(*inputs)
    assert torch.equal(got, expected)
    cotangent = torch.rand_like(expected)
    for a, b in zip(torch.autograd.grad(got, inputs, cotangent), torch.autograd.grad(expected, inputs, cotangent)):
        assert torch.equal(a, b)


class EveryOperator(torch.nn.Module):
    """All five functions in one scripted module (TorchScript compiles the adapters' is_scripting() branches)."""

    def forward(self, x, grid, boxes, value, shapes, starts, locations, weights):
        y = sgt.avg_pool2d(x, 2) + sgt.upsample_bilinear2d(sgt.avg_pool2d(x, [4, 4]), scale_factor=2.0)
        return (y, sgt.upsample_bilinear2d(x, size=(5, 6), align_corners=True),
                sgt.roi_align(y, boxes, (2, 2), 1.0, 2, True), sgt.grid_sample(y, grid, "bicubic", "border", False),
                sgt.ms_deform_attn(value, shapes, starts, locations, weights))


def every_operator_inputs():
    generator = torch.Generator().manual_seed(7)
    x = torch.rand(2, 3, 8, 8, generator=generator, requires_grad=True)
    grid = torch.rand(2, 3, 5, 2, generator=generator) * 2 - 1
    boxes = torch.tensor([[0, 1.0, 1.0, 5.0, 5.0], [1, 0.0, 2.0, 3.0, 7.0]])
    value = torch.rand(1, 20, 2, 4, generator=generator, requires_grad=True)
    return (x, grid, boxes, value, torch.tensor([[4, 4], [2, 2]]), torch.tensor([0, 16]),
            torch.rand(1, 6, 2, 2, 3, 2, generator=generator), torch.rand(1, 6, 2, 2, 3, generator=generator))


def test_script_graph_calls_the_operators_not_python():
    graph = str(torch.jit.script(EveryOperator()).inlined_graph)
    for op in OPERATORS:
        assert f"spatialgrad::{op}" in graph, graph
    assert "prim::PythonOp" not in graph and "_from_script" not in graph, graph


@torch.jit.script
def scripted_argument_forms(x: torch.Tensor, boxes: List[torch.Tensor], grid: torch.Tensor, mode: str):
    return (sgt.roi_align(x, boxes, 2, 0.5, 2, False), sgt.upsample_bilinear2d(x, None, 1.7, False, True),
            sgt.avg_pool2d(x, 3, None, 1), sgt.grid_sample(x, grid, mode, "reflection", True))


def test_scripted_argument_forms_match_eager():
    """The native script branches convert what the adapters accept: boxes as a list per image, a recomputed
    scale factor, stride None, mode names (an unknown one raises the adapter's message)."""
    x = torch.rand(2, 3, 8, 8)
    boxes = [torch.tensor([[1.0, 1.0, 6.0, 5.0]]), torch.tensor([[0.0, 2.0, 7.0, 7.0], [2.0, 2.0, 4.0, 5.0]])]
    grid = torch.rand(2, 3, 4, 2) * 2 - 1
    expected = (sgt.roi_align(x, boxes, 2, 0.5, 2, False),
                sgt.upsample_bilinear2d(x, scale_factor=1.7, align_corners=False, recompute_scale_factor=True),
                sgt.avg_pool2d(x, 3, None, 1), sgt.grid_sample(x, grid, "bicubic", "reflection", True))
    for got, want in zip(scripted_argument_forms(x, boxes, grid, "bicubic"), expected):
        assert torch.equal(got, want)
    with pytest.raises(Exception, match=r"grid_sample\(\): expected mode to be one of 'bilinear' \(0\), "
                                        r"'nearest' \(1\), 'bicubic' \(2\), but got 'cubic'"):
        scripted_argument_forms(x, boxes, grid, "cubic")


FRESH_PROCESS = """
import sys
import torch

library, model, data = {library!r}, {model!r}, {data!r}
if {load_library!r}:
    torch.ops.load_library(library)
inputs, outputs, gradients = torch.load(data)
model = torch.jit.load(model)
got = model(*inputs)
total = sum((o * torch.arange(o.numel()).view(o.shape)).sum() for o in got)
got_gradients = torch.autograd.grad(total, [inputs[0], inputs[3]])
assert not [name for name in sys.modules if name.startswith("spatialgrad")], "spatialgrad was imported"
assert all(torch.equal(a, b) for a, b in zip(got, outputs)), "outputs differ"
assert all(torch.equal(a, b) for a, b in zip(got_gradients, gradients)), "gradients differ"
print("same outputs and gradients")
"""


def saved_model_and_data(tmp_path):
    """EveryOperator scripted and saved, and its inputs, outputs and gradients (by this process) saved."""
    model = torch.jit.script(EveryOperator())
    inputs = every_operator_inputs()
    outputs = model(*inputs)
    total = sum((o * torch.arange(o.numel()).view(o.shape)).sum() for o in outputs)
    gradients = torch.autograd.grad(total, [inputs[0], inputs[3]])
    paths = dict(library=library_path(), model=str(tmp_path / "model.pt"), data=str(tmp_path / "data.pt"))
    torch.jit.save(model, paths["model"])
    torch.save(([t.detach().requires_grad_(t.requires_grad) for t in inputs], [o.detach() for o in outputs],
                gradients), paths["data"])
    return paths


def test_scripted_model_runs_in_a_fresh_process_with_only_the_library(tmp_path):
    """torch alone, with libspatialgrad_torch loaded (no `import spatialgrad`), gives the same outputs and
    gradients: the saved model and its backward need no Python of ours."""
    paths = saved_model_and_data(tmp_path)
    probe = run_probe(FRESH_PROCESS.format(load_library=True, **paths))
    assert probe.returncode == 0 and "same outputs and gradients" in probe.stdout, probe.stderr
    without = run_probe(FRESH_PROCESS.format(load_library=False, **paths))  # the model does need the library
    assert without.returncode != 0 and "spatialgrad::" in without.stderr, without.stderr


def test_patch_routes_traced_calls_to_the_operators(monkeypatch):
    """patch() no longer steps aside while tracing: a traced F.avg_pool2d records spatialgrad::avg_pool2d."""
    counts = count_patch_calls(monkeypatch, ["sg_avg_pool2d", "sg_grid_sample"])
    x, grid = torch.rand(1, 2, 6, 6), torch.rand(1, 3, 3, 2) * 2 - 1
    with sgt.patch():
        traced = torch.jit.trace(lambda t, g: F.grid_sample(F.avg_pool2d(t, 2), g, align_corners=False), (x, grid),
                                 check_trace=False)  # (a check would call them again)
    assert counts == {"sg_avg_pool2d": 1, "sg_grid_sample": 1}
    graph = str(traced.graph)
    assert "spatialgrad::avg_pool2d" in graph and "spatialgrad::grid_sampler_2d" in graph, graph
    assert "aten::avg_pool2d" not in graph and "aten::grid_sampler" not in graph, graph
    expected = sgt.grid_sample(sgt.avg_pool2d(x, 2), grid, align_corners=False)
    assert torch.equal(round_trip(traced)(x, grid), expected)


class UsesEveryAdapter(torch.nn.Module):
    def forward(self, x, boxes, grid, value, shapes, starts, locations, weights):
        y = sgt.avg_pool2d(x, 2) + sgt.upsample_bilinear2d(sgt.avg_pool2d(x, 4), scale_factor=2)
        return (sgt.roi_align(y, boxes, 2).sum() + sgt.grid_sample(y, grid, align_corners=False).sum()
                + sgt.ms_deform_attn(value, shapes, starts, locations, weights).sum())


def test_fx_records_the_operators():
    """torch.fx.symbolic_trace traces through the adapters down to torch.ops.spatialgrad calls."""
    module = UsesEveryAdapter()
    traced = torch.fx.symbolic_trace(module)
    targets = {".".join(str(node.target).split(".")[:2]) for node in traced.graph.nodes if node.op == "call_function"}
    assert {f"spatialgrad.{op}" for op in OPERATORS} <= targets, traced.graph
    inputs = every_operator_inputs()
    args = (inputs[0], inputs[2], inputs[1], *inputs[3:])
    assert torch.equal(traced(*args), module(*args))
