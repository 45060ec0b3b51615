"""Second-order gradients: every backward is itself differentiable (issue: gradient penalties, Hessian-vector
products). gradgradcheck in float64 through the torch adapters, parity with PyTorch where it has double
backward, central differences of vjp applied to each backward in the NumPy API, and the clear error of a
third derivative of grid_sample / ms_deform_attn."""
import itertools
import os
import sys
from pathlib import Path

import numpy as np
import pytest

import spatialgrad as sg
from spatialgrad.autograd import differentiable_ops, vjp
from op_cases import backward_cases, cases

torch = pytest.importorskip("torch")
import spatialgrad.torch as sgt  # noqa: E402

CASES = {name: (arrays, options) for name, arrays, options in cases(np.random.default_rng(7))}


def t(a, requires_grad=True):
    return torch.from_numpy(np.array(a)).requires_grad_(requires_grad)


def gradgradcheck(fn, inputs):
    # nondet_tol=0: the kernels are deterministic, so any difference between two runs is a bug.
    assert torch.autograd.gradgradcheck(fn, inputs, nondet_tol=0.0, atol=1e-6, rtol=1e-5)


# ---- grid_sample ---------------------------------------------------------------------------------------

def grid_case(seed, margin=1.15):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 2, 5, 6))
    grid = rng.uniform(-margin, margin, size=(2, 3, 4, 2))
    return t(x), t(grid)


@pytest.mark.parametrize("mode,padding,align", list(itertools.product(
    ["bilinear", "bicubic", "nearest"], ["zeros", "border", "reflection"], [False, True])))
def test_grid_sample_gradgradcheck(mode, padding, align):
    x, grid = grid_case(3)
    gradgradcheck(lambda a, b: sgt.grid_sample(a, b, mode=mode, padding_mode=padding, align_corners=align), (x, grid))


@pytest.mark.parametrize("wrt", ["input", "grid"])
def test_grid_sample_gradgradcheck_of_one_input(wrt):
    x, grid = grid_case(4)
    if wrt == "input":
        gradgradcheck(lambda a: sgt.grid_sample(a, grid.detach(), mode="bicubic"), (x,))
    else:
        gradgradcheck(lambda b: sgt.grid_sample(x.detach(), b, mode="bicubic", padding_mode="reflection"), (grid,))


def test_grid_sample_gradient_penalty_reaches_the_input():
    """issue 20's repro: the penalty's gradient reaches x (it was silently zero), and equals a composition of
    PyTorch ops that has a double backward (bilinear sampling written with gather)."""
    x, grid = grid_case(5, margin=0.9)
    gg = torch.autograd.grad(sgt.grid_sample(x, grid).sum(), grid, create_graph=True)[0]
    (gg.square().sum() + 0 * x.sum()).backward()
    assert x.grad.abs().sum() > 0

    xr, gr = x.detach().clone().requires_grad_(), grid.detach().clone().requires_grad_()
    ggr = torch.autograd.grad(bilinear_zeros_reference(xr, gr).sum(), gr, create_graph=True)[0]
    (ggr.square().sum() + 0 * xr.sum()).backward()
    torch.testing.assert_close(x.grad, xr.grad)
    torch.testing.assert_close(gg, ggr)


def bilinear_zeros_reference(x, grid):
    """grid_sample(bilinear, zeros, align_corners=False) from differentiable torch ops: the example's."""
    source = os.environ.get("SPATIALGRAD_SOURCE_DIR", str(Path(__file__).resolve().parents[2]))
    sys.path.insert(0, os.path.join(source, "examples"))
    try:
        from gradient_penalty import gather_grid_sample
    finally:
        sys.path.pop(0)
    return gather_grid_sample(x, grid)


def test_third_derivative_of_grid_sample_raises():
    x, grid = grid_case(6)
    gg = torch.autograd.grad(sgt.grid_sample(x, grid).pow(2).sum(), grid, create_graph=True)[0]
    h = torch.autograd.grad(gg.pow(2).sum(), grid, create_graph=True)[0]
    with pytest.raises(RuntimeError, match="third-order gradients of grid_sample are not implemented"):
        h.sum().backward()


# ---- ms_deform_attn ------------------------------------------------------------------------------------

def deform_inputs():
    value, shapes, starts, loc, attn = CASES["ms_deform_attn"][0]
    return t(value), torch.from_numpy(shapes), torch.from_numpy(starts), t(loc), t(attn)


def test_ms_deform_attn_gradgradcheck():
    value, shapes, starts, loc, attn = deform_inputs()
    gradgradcheck(lambda v, l, a: sgt.ms_deform_attn(v, shapes, starts, l, a), (value, loc, attn))


def test_third_derivative_of_ms_deform_attn_raises():
    value, shapes, starts, loc, attn = deform_inputs()
    g = torch.autograd.grad(sgt.ms_deform_attn(value, shapes, starts, loc, attn).pow(2).sum(), loc,
                            create_graph=True)[0]
    h = torch.autograd.grad(g.pow(2).sum(), loc, create_graph=True)[0]
    with pytest.raises(RuntimeError, match="third-order gradients of ms_deform_attn are not implemented"):
        h.sum().backward()


# ---- the linear operators: any order -------------------------------------------------------------------

@pytest.mark.parametrize("options", [dict(kernel_size=3, stride=2, padding=1),
                                     dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 0), ceil_mode=True,
                                          count_include_pad=False),
                                     dict(kernel_size=2, divisor_override=3)])
def test_avg_pool2d_double_backward_matches_pytorch(options):
    x = t(np.random.default_rng(8).standard_normal((2, 3, 7, 6)))
    gradgradcheck(lambda a: sgt.avg_pool2d(a, **options), (x,))
    xr = x.detach().clone().requires_grad_()
    for fn, inp in ((sgt.avg_pool2d, x), (torch.nn.functional.avg_pool2d, xr)):
        g = torch.autograd.grad(fn(inp, **options).pow(3).sum(), inp, create_graph=True)[0]
        h = torch.autograd.grad(g.pow(2).sum(), inp, create_graph=True)[0]
        h.sum().backward()  # third order: the linear backward differentiates into the forward again
    torch.testing.assert_close(x.grad, xr.grad)


@pytest.mark.parametrize("kwargs,channels_last", [(dict(size=(9, 5)), False), (dict(size=(4, 11), align_corners=True), False),
                                                  (dict(scale_factor=1.7), False), (dict(size=(9, 5)), True)])
def test_upsample_double_backward_matches_pytorch(kwargs, channels_last):
    x = t(np.random.default_rng(9).standard_normal((2, 3, 6, 7)))
    if channels_last:
        x = x.detach().to(memory_format=torch.channels_last).requires_grad_()
    gradgradcheck(lambda a: sgt.upsample_bilinear2d(a, **kwargs), (x,))
    xr = x.detach().clone().requires_grad_()
    ref = lambda a: torch.nn.functional.interpolate(a, mode="bilinear", align_corners=kwargs.get("align_corners", False),
                                                    **{k: v for k, v in kwargs.items() if k != "align_corners"})
    second = []
    for fn, inp in ((lambda a: sgt.upsample_bilinear2d(a, **kwargs), x), (ref, xr)):
        g = torch.autograd.grad(fn(inp).pow(3).sum(), inp, create_graph=True)[0]
        second.append(torch.autograd.grad(g.pow(2).sum(), inp)[0])
    torch.testing.assert_close(second[0], second[1])


@pytest.mark.parametrize("aligned,sampling_ratio", [(False, -1), (False, 2), (True, -1), (True, 3)])
def test_roi_align_gradgradcheck(aligned, sampling_ratio):
    x = t(np.random.default_rng(10).standard_normal((2, 3, 8, 9)))
    boxes = torch.tensor([[0, 1.3, 2.2, 5.6, 6.1], [1, 0.4, 0.7, 7.2, 5.9], [1, 2.0, 2.5, 2.4, 3.0]],
                         dtype=torch.float64)
    gradgradcheck(lambda a: sgt.roi_align(a, boxes, (3, 2), 0.9, sampling_ratio, aligned), (x,))


# ---- NumPy API: vjp of each backward against central differences ---------------------------------------

BACKWARD_CASES = {name + ("" if name != "grid_sampler_2d_backward" else "_" + o["mode"]): (name, a, o)
                  for name, a, o in backward_cases(np.random.default_rng(11), CASES)}


def test_every_backward_is_differentiable():
    # every function with a derivative has a case: the forwards in op_cases.cases, the backwards in
    # op_cases.backward_cases
    assert set(differentiable_ops()) == set(CASES) | {name for name, _, _ in BACKWARD_CASES.values()}
    assert all(name.endswith("_backward") for name, _, _ in BACKWARD_CASES.values())
    with pytest.raises(ValueError, match="expected one of the differentiable operators"):
        vjp("grid_sampler_2d_double_backward")


@pytest.mark.parametrize("case", sorted(BACKWARD_CASES))
def test_vjp_of_backward_matches_central_differences(case):
    name, arrays, options = BACKWARD_CASES[case]
    op = getattr(sg, name)
    out, pullback = vjp(op, *arrays, **options)
    outs = out if isinstance(out, tuple) else (out,)
    rng = np.random.default_rng(12)
    cot = tuple(rng.standard_normal(o.shape) for o in outs)
    grads = pullback(cot if isinstance(out, tuple) else cot[0])
    assert len(grads) == len(arrays)

    def objective(args):
        res = op(*args, **options)
        res = res if isinstance(res, tuple) else (res,)
        return sum(float(np.sum(c * r)) for c, r in zip(cot, res))

    checked = 0
    for i, grad in enumerate(grads):
        if grad is None:
            continue
        checked += 1
        assert grad.shape == np.shape(arrays[i])
        idx = np.random.default_rng(13).choice(grad.size, size=min(grad.size, 20), replace=False)
        for j in idx:
            args = [np.array(a, copy=True) for a in arrays]
            eps = 1e-6
            args[i].reshape(-1)[j] += eps
            plus = objective(args)
            args[i].reshape(-1)[j] -= 2 * eps
            minus = objective(args)
            np.testing.assert_allclose(grad.reshape(-1)[j], (plus - minus) / (2 * eps), rtol=1e-5, atol=1e-7,
                                       err_msg=f"{case} arg {i} element {j}")
    assert checked >= 1


def test_double_backward_kernels_validate_their_arguments():
    (x, grid), _ = CASES["grid_sample"]
    go = np.ones((2, 3, 4, 3))
    with pytest.raises(ValueError, match=r"grid_sampler_2d_double_backward\(\): expected output_mask to have 3 entries"):
        sg.grid_sampler_2d_double_backward(None, None, go, x, grid, output_mask=(True, True))
    with pytest.raises(ValueError, match=r"expected grad_grad_grid of shape \(2, 4, 3, 2\)"):
        sg.grid_sampler_2d_double_backward(None, np.ones((2, 4, 3, 3)), go, x, grid)
    with pytest.raises(TypeError, match="expected grad_grad_input to have the dtype of grad_output"):
        sg.grid_sampler_2d_double_backward(x.astype(np.float32), None, go, x, grid)
    d_go, d_x, d_grid = sg.grid_sampler_2d_double_backward(None, None, go, x, grid, output_mask=(True, False, True))
    assert d_x is None and not d_go.any() and not d_grid.any()
    arrays, _ = CASES["ms_deform_attn"]
    with pytest.raises(ValueError, match=r"ms_deform_attn_double_backward\(\): expected grad_grad_value of shape"):
        sg.ms_deform_attn_double_backward(*arrays, np.ones((2, 3, 8)), grad_grad_value=np.ones((1,)))


def test_second_order_is_the_same_for_any_thread_count():
    x, grid = (a.detach() for a in grid_case(14))
    go = torch.randn(2, 2, 3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    u, v = torch.randn_like(x), torch.randn_like(grid)
    results = []
    try:
        for threads in (1, 2, 3):
            sg.set_num_threads(threads)
            results.append(sg.grid_sampler_2d_double_backward(u.numpy(), v.numpy(), go.numpy(), x.numpy(),
                                                              grid.numpy(), mode="bicubic"))
    finally:
        sg.set_num_threads(0)
    for r in results[1:]:
        for a, b in zip(results[0], r):
            np.testing.assert_array_equal(a, b)
