"""The native operators under PyTorch 2's program capture and checks, on every kernel of torch.ops.spatialgrad:
fake (meta) kernels, torch.library.opcheck, torch.compile (fullgraph, static and dynamic shapes), torch.export, and
autocast. Each test runs wherever the PyTorch version has the feature (meta tensors and autocast on 1.13 too)."""
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import spatialgrad.torch as sgt  # noqa: E402
from op_cases import native_calls  # noqa: E402
from test_torch_jit import OPERATORS, calls, library_path  # noqa: E402

pytestmark = pytest.mark.skipif(not sgt.native, reason="spatialgrad was built without libtorch: no native operators")

has_opcheck = pytest.mark.skipif(not hasattr(torch.library, "opcheck"),
                                 reason=f"torch.library.opcheck is PyTorch 2.4's (this is {torch.__version__})")
has_compile = pytest.mark.skipif(not hasattr(getattr(torch, "compiler", None), "is_compiling"),
                                 reason=f"torch.compile of the adapters needs PyTorch 2.3 (this is {torch.__version__})")
has_export = pytest.mark.skipif(not hasattr(getattr(torch, "export", None), "save"),
                                reason=f"torch.export is PyTorch 2's (this is {torch.__version__})")


def _calls():
    return native_calls(np.random.default_rng(20261128))


def _case_id(case):
    index, (name, _) = case
    return f"{name}-{index}"


CASES = list(enumerate(_calls()))


def _kernels():
    """Every kernel registered in torch.ops.spatialgrad."""
    names = torch._C._dispatch_get_registrations_for_dispatch_key("")
    return sorted(name.split("::")[1] for name in names if name.startswith("spatialgrad::"))


def test_every_kernel_has_shared_cases_and_a_fake_kernel():
    assert set(_kernels()) == {name for _, (name, _) in CASES}
    missing = [k for k in _kernels() if not torch._C._dispatch_has_kernel_for_dispatch_key(f"spatialgrad::{k}", "Meta")]
    assert not missing


def _on(device, value):
    if isinstance(value, torch.Tensor):
        return value.detach().to(device)
    return value


def _outputs(result):
    return list(result) if isinstance(result, tuple) else [result]


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_meta_tensors_get_the_cpu_kernels_sizes_dtypes_and_strides(case):
    """The fake kernel, run on meta tensors, describes exactly what the CPU kernel returns."""
    _, (name, args) = case
    op = getattr(torch.ops.spatialgrad, name)
    with torch.no_grad():
        real = _outputs(op(*args))
    meta = _outputs(op(*[_on("meta", a) for a in args]))
    assert len(meta) == len(real)
    for m, r in zip(meta, real):
        assert (m is None) == (r is None)
        if r is not None:
            assert m.device.type == "meta"
            assert (m.shape, m.dtype, m.stride()) == (r.shape, r.dtype, r.stride())


def test_the_functions_take_meta_tensors_as_torch_does():
    x, grid = torch.empty(2, 3, 16, 12, device="meta"), torch.empty(2, 5, 7, 2, device="meta")
    boxes = torch.empty(4, 5, device="meta")
    assert sgt.avg_pool2d(x, 3, 2, 1).shape == F.avg_pool2d(x, 3, 2, 1).shape
    assert sgt.upsample_bilinear2d(x, scale_factor=1.5).shape == F.interpolate(x, scale_factor=1.5, mode="bilinear").shape
    assert sgt.grid_sample(x, grid, align_corners=False).shape == F.grid_sample(x, grid, align_corners=False).shape
    assert sgt.roi_align(x, boxes, (3, 2)).shape == (4, 3, 3, 2)
    value, loc, weights = (torch.empty(2, 20, 2, 4, device="meta"), torch.empty(2, 7, 2, 2, 3, 2, device="meta"),
                           torch.empty(2, 7, 2, 2, 3, device="meta"))
    shapes, starts = torch.tensor([[4, 4], [2, 2]]), torch.tensor([0, 16])
    out = sgt.ms_deform_attn(value, shapes.to("meta"), starts.to("meta"), loc, weights)
    assert (out.device.type, out.shape) == ("meta", (2, 7, 8))


@has_opcheck
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_opcheck(case):
    """Schema, autograd registration, fake kernel, and AOT dispatch with static and dynamic shapes."""
    _, (name, args) = case
    torch.library.opcheck(getattr(torch.ops.spatialgrad, name), args)


# ---- torch.compile ----------------------------------------------------------------------------------------------


def _graphs_of(function, *inputs, dynamic=False):
    """`function` compiled with fullgraph=True by a backend that records each FX graph TorchDynamo gives it (and
    runs it eagerly through AOTAutograd, as inductor would: so the backward is traced too), its outputs and the
    graphs."""
    from torch._dynamo.backends.common import aot_autograd

    graphs = []

    def record(graph_module, example_inputs):
        graphs.append(graph_module.graph)
        return graph_module

    compiled = torch.compile(function, fullgraph=True, dynamic=dynamic,
                             backend=aot_autograd(fw_compiler=record, bw_compiler=record))
    return compiled, graphs


def _spatialgrad_calls(graph):
    return [str(node.target) for node in graph.nodes
            if node.op == "call_function" and str(node.target).startswith("spatialgrad.")]


@has_compile
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("op", OPERATORS)
def test_compile_fullgraph_gives_the_eager_outputs_and_gradients(op, dynamic):
    torch._dynamo.reset()
    function, inputs = calls()[op]
    inputs = [t.requires_grad_() for t in inputs]
    eager = function(*inputs)
    eager_grads = torch.autograd.grad(eager.square().sum(), inputs)
    compiled, graphs = _graphs_of(function, dynamic=dynamic)
    out = compiled(*inputs)
    grads = torch.autograd.grad(out.square().sum(), inputs)
    assert torch.equal(out, eager)
    for a, b in zip(grads, eager_grads):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    forward, backward = graphs
    assert _spatialgrad_calls(forward) == [f"spatialgrad.{op}.default"]  # one node per call, nothing added
    assert _spatialgrad_calls(backward) == [f"spatialgrad.{op}_backward.default"]


@has_compile
def test_compile_with_the_default_backend():
    torch._dynamo.reset()
    x = torch.rand(2, 3, 16, 16, requires_grad=True)
    function = lambda t: sgt.avg_pool2d(sgt.upsample_bilinear2d(t, scale_factor=2, align_corners=False), 3, 2, 1)  # noqa
    out = torch.compile(function, fullgraph=True)(x)
    assert torch.equal(out, function(x))
    (grad,) = torch.autograd.grad(out.sum(), x)
    (expected,) = torch.autograd.grad(function(x).sum(), x)
    torch.testing.assert_close(grad, expected)


@has_compile
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_compile_the_nn_modules(dynamic):
    torch._dynamo.reset()
    torch.manual_seed(0)
    pool = sgt.nn.RoIAlign((3, 2), spatial_scale=0.5, sampling_ratio=2, aligned=True)
    attention = sgt.nn.MultiScaleDeformableAttention(embed_dims=16, num_heads=2, num_levels=2, num_points=2,
                                                     dropout=0.0, batch_first=True)
    x = torch.rand(2, 16, 12, 10, requires_grad=True)
    boxes = [torch.tensor([[1.0, 2.0, 15.0, 20.0]]), torch.tensor([[0.0, 0.0, 9.0, 9.0], [3.0, 1.0, 18.0, 6.0]])]
    shapes, starts = torch.tensor([[12, 10], [6, 5]]), torch.tensor([0, 120])
    query, value = torch.rand(2, 5, 16, requires_grad=True), torch.rand(2, 150, 16, requires_grad=True)
    reference = torch.rand(2, 5, 2, 2)

    def model(x, query, value):
        pooled = pool(x, boxes)
        attended = attention(query, value=value, reference_points=reference, spatial_shapes=shapes,
                             level_start_index=starts)
        return pooled.square().sum() + attended.square().sum()

    compiled, graphs = _graphs_of(model, dynamic=dynamic)
    eager = model(x, query, value)
    out = compiled(x, query, value)
    torch.testing.assert_close(out, eager, rtol=1e-6, atol=1e-6)
    for a, b in zip(torch.autograd.grad(out, [x, query, value]), torch.autograd.grad(eager, [x, query, value])):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert sorted(_spatialgrad_calls(graphs[0])) == ["spatialgrad.ms_deform_attn.default",
                                                     "spatialgrad.roi_align.default"]


@has_compile
def test_compile_a_torchvision_model_under_patch():
    torchvision = pytest.importorskip("torchvision")
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torchvision.models.segmentation.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None,
                                                                     num_classes=3).eval()
    images = torch.rand(1, 3, 64, 64)
    expected = model(images)["out"]
    with sgt.patch():
        eager = model(images)["out"]
        compiled, graphs = _graphs_of(lambda t: model(t)["out"])
        out = compiled(images)
    torch.testing.assert_close(eager, expected, rtol=1e-4, atol=1e-5)  # (PyTorch's bilinear rounds otherwise)
    assert torch.equal(out, eager)
    assert "spatialgrad.upsample_bilinear2d.default" in _spatialgrad_calls(graphs[0])


# ---- autocast ---------------------------------------------------------------------------------------------------


def test_autocast_follows_the_policy_of_each_pytorch_counterpart():
    """grid_sample in float32 (aten's grid_sampler), roi_align computed in float32 and returned in the input's
    dtype (torchvision 0.21), avg_pool2d and upsample in the dtype they are given (aten's)."""
    x = torch.rand(1, 2, 8, 8).bfloat16().requires_grad_()
    grid = (torch.rand(1, 4, 5, 2) * 2 - 1).requires_grad_()
    boxes = torch.tensor([[0, 1.0, 1.0, 6.0, 5.0]])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        sampled = sgt.grid_sample(x, grid, align_corners=False)
        pooled = sgt.roi_align(x, boxes, 2, aligned=True)
        assert sgt.avg_pool2d(x, 2).dtype == F.avg_pool2d(x, 2).dtype == torch.bfloat16
        up = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
        assert sgt.upsample_bilinear2d(x, scale_factor=2, align_corners=False).dtype == up.dtype == torch.bfloat16
        assert F.grid_sample(x, grid, align_corners=False).dtype == torch.float32
    assert sampled.dtype == torch.float32
    assert torch.equal(sampled, sgt.grid_sample(x.float(), grid, align_corners=False))
    assert pooled.dtype == torch.bfloat16
    assert torch.equal(pooled, sgt.roi_align(x.float(), boxes, 2, aligned=True).bfloat16())
    sampled.sum().backward()  # the casts are recorded: each input's gradient in its own dtype
    assert (x.grad.dtype, grid.grad.dtype) == (torch.bfloat16, torch.float32)


def test_autocast_under_patch_computes_with_spatialgrad(monkeypatch):
    from helpers import count_patch_calls

    counts = count_patch_calls(monkeypatch, ["sg_grid_sample"])
    x, grid = torch.rand(1, 2, 8, 8).bfloat16(), torch.rand(1, 4, 5, 2) * 2 - 1
    with sgt.patch(), torch.autocast("cpu", dtype=torch.bfloat16):
        out = F.grid_sample(x, grid, align_corners=False)
    assert counts == {"sg_grid_sample": 1} and out.dtype == torch.float32
    assert torch.equal(out, sgt.grid_sample(x.float(), grid, align_corners=False))


# ---- torch.export -----------------------------------------------------------------------------------------------

EXAMPLE = os.path.join(os.environ.get("SPATIALGRAD_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", "..")),
                       "examples", "torch_export")


def _run(*command):
    done = subprocess.run([sys.executable, *command], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return done.stdout


@has_export
def test_export_save_and_load_in_a_fresh_process_give_the_same_output(tmp_path):
    """examples/torch_export: export.py prints the output, load.py (a new process) loads the archive and prints
    the same lines, with spatialgrad imported or with only libspatialgrad_torch loaded."""
    exported = _run(os.path.join(EXAMPLE, "export.py"), "--out", str(tmp_path))
    assert exported.startswith("shape: 2 2 3\n")
    assert _run(os.path.join(EXAMPLE, "load.py"), str(tmp_path)) == exported
    assert _run(os.path.join(EXAMPLE, "load.py"), str(tmp_path), "--library", library_path()) == exported


@has_export
def test_export_records_one_node_per_call_and_keeps_the_batch_dynamic():
    import importlib.util

    spec = importlib.util.spec_from_file_location("export_example", os.path.join(EXAMPLE, "export.py"))
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    deploy = example.deploy_model_module()
    torch.manual_seed(0)
    model = deploy.DeployModel().eval()
    batch = torch.export.Dim("batch", min=1, max=8)
    with torch.no_grad():
        program = torch.export.export(model, deploy.example_inputs(2),
                                      dynamic_shapes=({0: batch}, {0: deploy.OBJECTS * batch}))
        assert sorted(_spatialgrad_calls(program.graph)) == sorted(
            f"spatialgrad.{op}.default" for op in OPERATORS)
        three = deploy.example_inputs(3)
        assert torch.equal(program.module()(*three), model(*three))


@has_compile
def test_compile_a_call_with_default_arguments():
    """grid_sample's align_corners=None warning is the eager call's: TorchDynamo cannot put warnings.warn in a graph."""
    torch._dynamo.reset()
    x, grid = torch.rand(1, 2, 8, 8), torch.rand(1, 4, 4, 2) * 2 - 1
    compiled, graphs = _graphs_of(lambda a, g: sgt.grid_sample(a, g))
    with pytest.warns(UserWarning, match="align_corners=None means False"):
        expected = sgt.grid_sample(x, grid)
    assert torch.equal(compiled(x, grid), expected)
