"""What traced graphs record: one node per spatialgrad.torch call, as PyTorch's and torchvision's own functions
record one (torch.fx, torch.jit.trace), with no detach or conversion nodes that those do not record; and boxes
that require grad behave as torchvision's do (issue 43, items 6 and 7)."""
import collections
import warnings

import pytest

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")
import torch.nn.functional as F  # noqa: E402
from torchvision.models.feature_extraction import get_graph_node_names  # noqa: E402

import spatialgrad.torch as sgt  # noqa: E402

pytestmark = pytest.mark.skipif(not sgt.native, reason="spatialgrad was built without libtorch: no native operators")


def _inputs():
    generator = torch.Generator().manual_seed(43)
    x = torch.rand(2, 3, 8, 8, generator=generator)
    grid = torch.rand(2, 5, 4, 2, generator=generator) * 2.2 - 1.1
    rows = torch.tensor([[0, 1.0, 1.0, 6.0, 5.0], [1, 0.5, 2.0, 7.0, 7.5]])
    per_image = (torch.tensor([[1.0, 1.0, 6.0, 5.0]]), torch.tensor([[0.5, 2.0, 7.0, 7.5], [1.0, 1.0, 3.0, 3.0]]))
    return x, grid, rows, per_image


X, GRID, ROWS, PER_IMAGE = _inputs()

# torchvision's roi_align cannot be traced into with (K, 5) rows (it asserts on the Proxy's type): called by this
# name, torch.fx records it as one call, as torchvision's feature extraction records its pooling modules.
torchvision_roi_align = torchvision.ops.roi_align
torch.fx.wrap("torchvision_roi_align")

# name: (ours, PyTorch's or torchvision's, example inputs). Every function of tensors only.
CASES = {
    "avg_pool2d": (lambda x: sgt.avg_pool2d(x, 3, 2, 1, True, False), lambda x: F.avg_pool2d(x, 3, 2, 1, True, False),
                   (X,)),
    "upsample_size": (lambda x: sgt.upsample_bilinear2d(x, (5, 11), None, True),
                      lambda x: F.interpolate(x, (5, 11), None, "bilinear", True), (X,)),
    "upsample_scale": (lambda x: sgt.upsample_bilinear2d(x, scale_factor=1.5),
                       lambda x: F.interpolate(x, scale_factor=1.5, mode="bilinear"), (X,)),
    "grid_sample": (lambda x, grid: sgt.grid_sample(x, grid, "bicubic", "border", False),
                    lambda x, grid: F.grid_sample(x, grid, "bicubic", "border", False), (X, GRID)),
    "roi_align_rows": (lambda x, boxes: sgt.roi_align(x, boxes, (2, 3), 0.5, 2, True),
                       lambda x, boxes: torchvision_roi_align(x, boxes, (2, 3), 0.5, 2, True), (X, ROWS)),
    "roi_align_per_image": (lambda x, b0, b1: sgt.roi_align(x, [b0, b1], 2),
                            lambda x, b0, b1: torchvision.ops.roi_align(x, [b0, b1], 2), (X, *PER_IMAGE)),
}
# What the counterparts' call nodes are named (torch.fx targets, torch.jit.trace node kinds).
COUNTERPARTS = {"avg_pool2d", "interpolate", "grid_sample", "roi_align"}
COUNTERPART_KINDS = {"aten::avg_pool2d", "aten::upsample_bilinear2d", "aten::grid_sampler", "torchvision::roi_align"}


def _module(function, arity):
    """A module whose forward calls function on its `arity` tensor arguments (fx traces modules)."""
    class Calls(torch.nn.Module):
        pass
    names = ", ".join(f"t{i}" for i in range(arity))
    namespace = {"function": function}
    exec(f"def forward(self, {names}):\n    return function({names})", namespace)
    Calls.forward = namespace["forward"]
    return Calls()


def _fx_nodes(function, arity):
    """(op, target) of every node torch.fx records, the operator call as ("call", "OP")."""
    nodes = []
    for node in torch.fx.symbolic_trace(_module(function, arity)).graph.nodes:
        name = str(node.target)
        if name.startswith("spatialgrad.") or getattr(node.target, "__name__", None) in COUNTERPARTS:
            nodes.append(("call", "OP"))
        else:
            nodes.append((node.op, getattr(node.target, "__name__", name)))
    return nodes


def _jit_kinds(function, inputs):
    """The kinds of the nodes torch.jit.trace records (not constants), the operator's as "OP"."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torchvision's tracer warnings
        traced = torch.jit.trace(function, inputs, check_trace=False)
    kinds = [node.kind() for node in traced.graph.nodes() if node.kind() != "prim::Constant"]
    return ["OP" if k.startswith("spatialgrad::") or k in COUNTERPART_KINDS else k for k in kinds]


@pytest.mark.parametrize("case", [c for c in CASES if c != "roi_align_per_image"])
def test_fx_records_one_node_like_the_counterpart(case):
    ours, theirs, inputs = CASES[case]
    recorded = _fx_nodes(ours, len(inputs))
    assert recorded == _fx_nodes(theirs, len(inputs))
    assert recorded.count(("call", "OP")) == 1 and len(recorded) == len(inputs) + 2, recorded


def test_fx_records_no_box_conversion_torchvision_does_not():
    ours, theirs, inputs = CASES["roi_align_per_image"]
    recorded = collections.Counter(_fx_nodes(ours, len(inputs)))
    assert recorded[("call", "OP")] == 1
    assert not recorded - collections.Counter(_fx_nodes(theirs, len(inputs))), recorded


@pytest.mark.parametrize("case", CASES)
def test_traced_graphs_run_as_eager(case):
    ours, _, inputs = CASES[case]
    expected = ours(*inputs)
    assert torch.equal(torch.fx.symbolic_trace(_module(ours, len(inputs)))(*inputs), expected)
    assert torch.equal(torch.jit.trace(ours, inputs, check_trace=False)(*inputs), expected)


def test_fx_and_jit_trace_record_one_deformable_attention_node():
    # No PyTorch or torchvision counterpart (mmcv casts the points and weights to value's dtype inside its
    # Function; the operator does so too): one operator call and nothing else.
    shapes, starts = torch.tensor([[4, 4], [2, 2]]), torch.tensor([0, 16])
    ours = lambda v, loc, w: sgt.ms_deform_attn(v, shapes, starts, loc, w)  # noqa: E731
    recorded = _fx_nodes(ours, 3)
    assert [node for node in recorded if node[0] in ("call", "call_function", "call_method", "call_module")] == [
        ("call", "OP")], recorded
    inputs = (torch.rand(1, 20, 2, 4), torch.rand(1, 3, 2, 2, 2, 2), torch.rand(1, 3, 2, 2, 2))
    kinds = _jit_kinds(ours, inputs)
    assert kinds.count("OP") == 1 and "aten::to" not in kinds, kinds


def test_deformable_attention_casts_mixed_dtypes_as_mmcv():
    """A bfloat16 value with float32 points and weights (AMP): computed in value's dtype, each input's gradient in
    its own dtype."""
    shapes, starts = torch.tensor([[4, 4], [2, 2]]), torch.tensor([0, 16])
    value = torch.rand(1, 20, 2, 4).bfloat16().requires_grad_()
    loc, w = torch.rand(1, 3, 2, 2, 2, 2, requires_grad=True), torch.rand(1, 3, 2, 2, 2, requires_grad=True)
    out = sgt.ms_deform_attn(value, shapes, starts, loc, w)
    assert torch.equal(out, sgt.ms_deform_attn(value, shapes, starts, loc.bfloat16(), w.bfloat16()))
    grads = torch.autograd.grad(out.float().sum(), [value, loc, w])
    assert [g.dtype for g in grads] == [torch.bfloat16, torch.float32, torch.float32]


@pytest.mark.parametrize("case", CASES)
def test_jit_trace_records_what_the_counterpart_records(case):
    ours, theirs, inputs = CASES[case]
    recorded = _jit_kinds(ours, inputs)
    assert recorded == _jit_kinds(theirs, inputs)
    assert recorded.count("OP") == 1


class _PoolWrapper(torch.nn.Module):
    """torchvision's TestRoIAlign.test_is_leaf_node wraps the pooling module this way."""

    def __init__(self, pool):
        super().__init__()
        self.pool = pool

    def forward(self, x, boxes):
        return self.pool(x, boxes)


@pytest.mark.parametrize("pool", [sgt.nn.RoIAlign(3, 1.0, 2), torchvision.ops.RoIAlign(3, 1.0, 2)],
                         ids=["spatialgrad", "torchvision"])
def test_feature_extraction_sees_one_node_per_roi_align(pool):
    # torchvision's test: the graph's nodes are the inputs and one node for the pooling (x, boxes, the op).
    train_nodes, eval_nodes = get_graph_node_names(_PoolWrapper(pool))
    assert len(train_nodes) == len(eval_nodes) == 1 + 2, (train_nodes, eval_nodes)


@pytest.mark.parametrize("form", ["rows", "first image", "second image"])
def test_boxes_that_require_grad_make_an_output_that_does_as_torchvisions(form):
    def make_boxes():
        if form == "rows":
            return ROWS.clone().requires_grad_()
        boxes = [b.clone() for b in PER_IMAGE]
        boxes[0 if form == "first image" else 1].requires_grad_()
        return boxes

    results = []
    for function in (sgt.roi_align, torchvision.ops.roi_align):
        boxes = make_boxes()
        out = function(X, boxes, 3, 1.0, 2)  # X does not require grad
        if out.requires_grad:
            out.sum().backward()
        results.append((out.requires_grad, [b.grad for b in (boxes if isinstance(boxes, list) else [boxes])]))
    assert results[0] == results[1] == (True, [None] * (1 if form == "rows" else 2))
