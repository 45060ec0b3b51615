"""functorch.vmap over every spatialgrad.torch function (native operators): forward, vjp, and vmap of vjp
(per-sample gradients), each against a loop over the samples."""
import pytest

torch = pytest.importorskip("torch")
functorch = pytest.importorskip("functorch")

import spatialgrad.torch as sgt  # noqa: E402
from helpers import run_probe  # noqa: E402
from test_torch_jit import OPERATORS, calls  # noqa: E402

pytestmark = pytest.mark.skipif(not sgt.native, reason="spatialgrad was built without libtorch: no native operators")

BATCH = 3


def batched_inputs(op):
    """The function of `op` and BATCH samples of each of its inputs, stacked along a new first dimension."""
    function, inputs = calls()[op]
    generator = torch.Generator().manual_seed(5)
    return function, [torch.stack([t] + [t + 0.1 * torch.rand(t.shape, generator=generator, dtype=t.dtype)
                                         for _ in range(BATCH - 1)]) for t in inputs]


def per_sample(function, batched):
    """`function` applied to each sample in a loop, the results stacked."""
    return torch.stack([function(*sample) for sample in zip(*batched)])


@pytest.mark.parametrize("op", OPERATORS)
def test_vmap_forward(op):
    function, batched = batched_inputs(op)
    assert torch.equal(functorch.vmap(function)(*batched), per_sample(function, batched))


@pytest.mark.parametrize("op", OPERATORS)
def test_vmap_of_vjp_gives_per_sample_gradients(op):
    function, batched = batched_inputs(op)
    cotangents = torch.rand_like(per_sample(function, batched))

    def pullback(cotangent, *inputs):
        _, vjp = functorch.vjp(function, *inputs)
        return vjp(cotangent)

    got = functorch.vmap(pullback)(cotangents, *batched)
    for index, sample in enumerate(zip(*batched)):
        sample = [t.detach().requires_grad_() for t in sample]
        expected = torch.autograd.grad(function(*sample), sample, cotangents[index])
        for a, b in zip(got, expected):
            torch.testing.assert_close(a[index], b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("op", OPERATORS)
def test_vjp_of_vmap(op):
    function, batched = batched_inputs(op)
    out, vjp = functorch.vjp(functorch.vmap(function), *batched)
    cotangent = torch.rand_like(out)
    inputs = [t.detach().requires_grad_() for t in batched]
    expected = torch.autograd.grad(per_sample(function, inputs), inputs, cotangent)
    for a, b in zip(vjp(cotangent), expected):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("op", OPERATORS)
def test_vmap_of_grad_of_another_input(op):
    """The operator's batched inputs need no gradient inside functorch.grad (taken with respect to a weight):
    the autograd kernel must still hand them on to the batching kernel."""
    function, batched = batched_inputs(op)
    weight = torch.rand_like(per_sample(function, batched)[0])
    got = functorch.vmap(lambda *inputs: functorch.grad(lambda w: (w * function(*inputs)).sum())(weight))(*batched)
    assert torch.equal(got, per_sample(function, batched))


def test_every_operator_has_a_batching_kernel():
    """define_operator (csrc/torch/common.h) gives each operator its batching kernel: one without it would run
    functorch's logging fallback."""
    operators = {name for name in torch._C._dispatch_get_registrations_for_dispatch_key("")
                 if name.startswith("spatialgrad::")}
    assert {f"spatialgrad::{op}" for op in OPERATORS} <= operators
    missing = [name for name in operators if not torch._C._dispatch_has_kernel_for_dispatch_key(name,
                                                                                               "FuncTorchBatched")]
    assert not missing


def test_vmap_prints_nothing():
    """functorch's per-sample fallback logs "There is a performance drop..." for each operator without a
    batching rule (through glog, to stderr, not Python's warnings); none is printed for ours."""
    probe = run_probe("""
        import functorch, torch
        import spatialgrad.torch as sgt
        x = torch.rand(3, 1, 2, 8, 8, requires_grad=True)
        out, vjp = functorch.vjp(functorch.vmap(lambda t: sgt.avg_pool2d(t, 2)), x)
        vjp(torch.ones_like(out))
        print("done")
    """)
    assert probe.returncode == 0 and "done" in probe.stdout, probe.stderr
    assert probe.stderr == "", probe.stderr
