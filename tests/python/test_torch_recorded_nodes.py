"""Plain calls of avg_pool2d and grid_sample record a lighter graph node than torch::autograd::Function
(csrc/torch/common.h, RecordedNode; issue 33): it must behave as the Function's node did, and as PyTorch's own
nodes do: the same gradients bit for bit, saved tensors that are freed after backward, checked against in-place
changes and packed by saved-tensor hooks, zeros for an absent cotangent, and the second order through the
backward operator."""
import os

import pytest

torch = pytest.importorskip("torch")
import spatialgrad.torch as sgt  # noqa: E402

pytestmark = pytest.mark.skipif(not sgt.native and os.environ.get("SPATIALGRAD_REQUIRE_TORCH") != "1",
                                reason="libspatialgrad_torch was not built (no libtorch)")


def _pool(x):
    return sgt.avg_pool2d(x, 3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)


def _sample(x, grid):
    return sgt.grid_sample(x, grid, mode="bilinear", padding_mode="reflection", align_corners=True)


def _tensors(*shapes, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [(torch.rand(shape, generator=generator) * 2.2 - 1.1).requires_grad_() for shape in shapes]


CASES = {
    "avg_pool2d": (lambda: _tensors((1, 2, 8, 8)), _pool, "AvgPool2d"),
    "grid_sample": (lambda: _tensors((1, 2, 8, 8), (1, 5, 6, 2)), _sample, "GridSampler2d"),
}


def _backward_operator(name, cotangent, tensors):
    """The gradients the nodes compute, straight from the backward operator (what both nodes call)."""
    ops = torch.ops.spatialgrad
    with torch.no_grad():
        if name == "avg_pool2d":
            return [ops.avg_pool2d_backward(cotangent, tensors[0], [3, 3], [2, 2], [1, 1], True, False, None)]
        return list(ops.grid_sampler_2d_backward(cotangent, *tensors, 0, 2, True, [True, True]))


@pytest.mark.parametrize("name", CASES)
def test_plain_calls_record_the_lighter_node(name):
    make, call, node = CASES[name]
    y = call(*make())
    assert y.grad_fn.name() == "spatialgrad::" + node


@pytest.mark.parametrize("name", CASES)
def test_gradients_are_those_of_the_backward_operator(name):
    make, call, _ = CASES[name]
    tensors = make()
    y = call(*tensors)
    cotangent = torch.rand_like(y)
    for ours, expected in zip(torch.autograd.grad(y, tensors, cotangent), _backward_operator(name, cotangent, tensors)):
        assert torch.equal(ours, expected)


@pytest.mark.parametrize("name", CASES)
def test_a_second_backward_without_retain_graph_raises(name):
    make, call, _ = CASES[name]
    tensors = make()
    y = call(*tensors).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.backward()


@pytest.mark.parametrize("name", CASES)
def test_an_input_changed_in_place_after_the_call_is_reported(name):
    make, call, _ = CASES[name]
    tensors = make()
    leaf = tensors[0]
    x = leaf * 1  # a non-leaf that can change in place
    y = call(x, *tensors[1:]).sum()
    with torch.no_grad():
        x.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


@pytest.mark.parametrize("name", CASES)
def test_saved_tensor_hooks_pack_the_inputs(name):
    make, call, _ = CASES[name]
    tensors = make()
    packed = []

    def pack(t):
        packed.append(t.shape)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = call(*tensors)
    assert packed == [t.shape for t in tensors]
    y.sum().backward()


class _DropGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t):
        return t.clone()

    @staticmethod
    def backward(ctx, grad):
        return None


@pytest.mark.parametrize("name", CASES)
def test_an_absent_cotangent_gives_zero_gradients(name):
    make, call, _ = CASES[name]
    tensors = make()
    y = _DropGradient.apply(call(*tensors)).sum() + sum(t.sum() for t in tensors)
    grads = torch.autograd.grad(y, tensors)
    for g in grads:
        assert torch.equal(g, torch.ones_like(g))


@pytest.mark.parametrize("name", CASES)
def test_second_order_goes_through_the_backward_operator(name):
    make, call, _ = CASES[name]
    tensors = make()
    grads = torch.autograd.grad(call(*tensors).sum(), tensors, create_graph=True)
    assert "Backward" in grads[0].grad_fn.name()
    if name == "grid_sample":  # the grid's gradient is not constant: its own gradient flows
        (second,) = torch.autograd.grad(grads[1].sum(), tensors[1])
        assert second.shape == tensors[1].shape


@pytest.mark.parametrize("name", CASES)
def test_only_the_requested_gradient_is_computed(name):
    make, call, _ = CASES[name]
    tensors = make()
    for t in tensors[1:]:
        t.requires_grad_(False)
    (g,) = torch.autograd.grad(call(*tensors).sum(), tensors[:1])
    assert g.shape == tensors[0].shape
