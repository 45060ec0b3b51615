"""torch.func (functorch on PyTorch 1.13) over every spatialgrad.torch function: vmap, grad, vjp, jacrev and their
compositions, each against per-sample loops or torch.autograd; on the native operators and, where PyTorch's
autograd.Function supports the transforms (PyTorch 2), on the Python path too. No warnings."""
import warnings

import pytest

torch = pytest.importorskip("torch")
try:  # PyTorch 2: functorch's transforms are torch.func (functorch.* prints a deprecation warning)
    from torch.func import grad, jacrev, vjp, vmap
    TRANSFORMS = "torch.func"
except ImportError:  # PyTorch 1.13
    functorch = pytest.importorskip("functorch")
    from functorch import grad, jacrev, vjp, vmap
    TRANSFORMS = "functorch"

import spatialgrad.torch as sgt  # noqa: E402
from spatialgrad.torch import _common  # noqa: E402
from helpers import run_probe  # noqa: E402
from test_torch_jit import OPERATORS, calls  # noqa: E402

pytestmark = [pytest.mark.skipif(not sgt.native, reason="spatialgrad was built without libtorch: no native operators"),
              pytest.mark.filterwarnings("error")]

BATCH = 3


@pytest.fixture(params=["native", "python"])
def path(request, monkeypatch):
    """Each test on the native operators and on the Python autograd.Function (where the transforms take it)."""
    if request.param == "python":
        if not _common._FUNCTORCH_READY:
            pytest.skip(f"{TRANSFORMS} of torch {torch.__version__} takes no autograd.Function")
        monkeypatch.setattr(sgt, "native", False)
    return request.param


def batched_inputs(op):
    """The function of `op` and BATCH samples of each of its inputs, stacked along a new first dimension."""
    function, inputs = calls()[op]
    generator = torch.Generator().manual_seed(5)
    return function, [torch.stack([t] + [t + 0.1 * torch.rand(t.shape, generator=generator, dtype=t.dtype)
                                         for _ in range(BATCH - 1)]) for t in inputs]


def per_sample(function, batched):
    """`function` applied to each sample in a loop, the results stacked."""
    return torch.stack([function(*sample) for sample in zip(*batched)])


def autograd_of(function, inputs, cotangent):
    inputs = [t.detach().requires_grad_() for t in inputs]
    return torch.autograd.grad(function(*inputs), inputs, cotangent)


@pytest.mark.parametrize("op", OPERATORS)
def test_vmap_forward(op, path):
    function, batched = batched_inputs(op)
    assert torch.equal(vmap(function)(*batched), per_sample(function, batched))


@pytest.mark.parametrize("op", OPERATORS)
def test_grad_is_autograds(op, path):
    function, inputs = calls()[op]
    argnums = tuple(range(len(inputs)))
    got = grad(lambda *a: function(*a).square().sum(), argnums=argnums)(*inputs)
    out = function(*inputs)
    for a, b in zip(got, autograd_of(function, inputs, 2 * out)):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("op", OPERATORS)
def test_jacrev_rows_are_autograds(op, path):
    function, inputs = calls()[op]
    argnums = tuple(range(len(inputs)))
    jacobians = jacrev(lambda *a: function(*a).flatten()[:4], argnums=argnums)(*inputs)
    for row in range(4):
        cotangent = torch.zeros_like(function(*inputs)).flatten()
        cotangent[row] = 1
        for jacobian, expected in zip(jacobians, autograd_of(function, inputs, cotangent.view_as(function(*inputs)))):
            torch.testing.assert_close(jacobian[row], expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("op", OPERATORS)
def test_vmap_of_vjp_gives_per_sample_gradients(op, path):
    function, batched = batched_inputs(op)
    cotangents = torch.rand_like(per_sample(function, batched))

    def pullback(cotangent, *inputs):
        _, pull = vjp(function, *inputs)
        return pull(cotangent)

    got = vmap(pullback)(cotangents, *batched)
    for index, sample in enumerate(zip(*batched)):
        for a, b in zip(got, autograd_of(function, sample, cotangents[index])):
            torch.testing.assert_close(a[index], b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("op", OPERATORS)
def test_vjp_of_vmap(op, path):
    function, batched = batched_inputs(op)
    out, pull = vjp(vmap(function), *batched)
    cotangent = torch.rand_like(out)
    for a, b in zip(pull(cotangent), autograd_of(lambda *t: per_sample(function, t), batched, cotangent)):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("op", OPERATORS)
def test_vmap_of_grad_of_another_input(op, path):
    """The operator's batched inputs need no gradient inside grad (taken with respect to a weight): the autograd
    kernel must still hand them on to the batching kernel."""
    function, batched = batched_inputs(op)
    weight = torch.rand_like(per_sample(function, batched)[0])
    got = vmap(lambda *inputs: grad(lambda w: (w * function(*inputs)).sum())(weight))(*batched)
    assert torch.equal(got, per_sample(function, batched))


@pytest.mark.parametrize("op", OPERATORS)
def test_gradcheck_with_batched_gradients(op, path):
    """PyTorch's own checks, batched gradients (vmap over the backward) and second order included. gradcheck
    batches with autograd's legacy vmap, which the Python path's NumPy views cannot take (no batching rule for
    detach): there it checks unbatched gradients (torch.func's vmap, above, takes its vmap rule)."""
    function, inputs = calls()[op]
    inputs = [t.detach().requires_grad_() for t in inputs]
    batched = path == "native"
    with warnings.catch_warnings():  # PyTorch 2.6's gradcheck batches with its legacy vmap, which warns about itself
        warnings.filterwarnings("ignore", message="Please use `torch.vmap`", category=FutureWarning)
        assert torch.autograd.gradcheck(function, inputs, check_batched_grad=batched)
        assert torch.autograd.gradgradcheck(function, inputs, check_batched_grad=batched)


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
    transforms = "torch.func as transforms" if TRANSFORMS == "torch.func" else "functorch as transforms"
    probe = run_probe(f"""
        import {transforms}, torch
        import spatialgrad.torch as sgt
        x = torch.rand(3, 1, 2, 8, 8, requires_grad=True)
        out, vjp = transforms.vjp(transforms.vmap(lambda t: sgt.avg_pool2d(t, 2)), x)
        vjp(torch.ones_like(out))
        print("done")
    """)
    assert probe.returncode == 0 and "done" in probe.stdout, probe.stderr
    assert probe.stderr == "", probe.stderr
