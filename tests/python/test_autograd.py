import numpy as np
import pytest

import spatialgrad as sg
from spatialgrad import _registry
from spatialgrad.autograd import differentiable_ops, vjp
from helpers import finite_difference
from op_cases import DIFFERENTIABLE, backward_cases, cases

CASES = {name: (arrays, options) for name, arrays, options in cases(np.random.default_rng(7))}


def test_every_forward_is_covered():
    # the forwards; their backwards' pullbacks are checked in test_second_order.py (with PyTorch)
    assert set(CASES) == {name for name in differentiable_ops() if not name.endswith("_backward")}
    assert set(CASES) == set(DIFFERENTIABLE)


def test_every_forward_has_one_differentiable_backward_with_a_case():
    ops = differentiable_ops()
    backwards = {name for name, _, _ in backward_cases(np.random.default_rng(11), CASES)}
    assert len(ops) == len(set(ops))
    assert set(ops) == set(CASES) | backwards
    # one differentiable backward per forward, each belonging to it in the operator table
    assert len(backwards) == len(CASES)
    assert {_registry._FIRST_OF[name] for name in backwards} == set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_pullback_matches_finite_differences(name):
    arrays, options = CASES[name]
    op = getattr(sg, name)
    out, pullback = vjp(op, *arrays, **options)
    np.testing.assert_array_equal(out, op(*arrays, **options))
    g = np.random.default_rng(1).standard_normal(out.shape)
    grads = pullback(g)
    assert len(grads) == len(arrays)
    for i, (grad, differentiable) in enumerate(zip(grads, DIFFERENTIABLE[name])):
        if not differentiable:
            assert grad is None
            continue
        assert grad.shape == arrays[i].shape and grad.dtype == arrays[i].dtype

        def f(x, i=i):
            args = list(arrays)
            args[i] = x
            return op(*args, **options)

        x = arrays[i].copy()
        idx = np.random.default_rng(2).choice(x.size, size=min(x.size, 25), replace=False)
        numeric = finite_difference(f, x, g, idx)
        np.testing.assert_allclose(grad.reshape(-1)[idx], numeric, rtol=1e-6, atol=1e-8, err_msg=f"{name} arg {i}")


def test_names_and_functions_are_both_accepted():
    arrays, options = CASES["avg_pool2d"]
    out1, pb1 = vjp("avg_pool2d", *arrays, **options)
    out2, pb2 = vjp(sg.avg_pool2d, *arrays, **options)
    np.testing.assert_array_equal(out1, out2)
    g = np.ones_like(out1)
    np.testing.assert_array_equal(pb1(g)[0], pb2(g)[0])


def test_unknown_operator_and_bad_gradient_shape():
    with pytest.raises(ValueError, match=r"expected one of the differentiable operators .* but got 'conv2d'"):
        vjp("conv2d", np.zeros((1, 1, 2, 2)))
    with pytest.raises(ValueError, match="but got"):
        vjp(np.sum, np.zeros(3))
    out, pullback = vjp(sg.avg_pool2d, np.zeros((1, 1, 4, 4)), 2)
    with pytest.raises(ValueError, match=r"avg_pool2d pullback: expected grad_out of shape \(1, 1, 2, 2\), but got \(1, 1, 2\)"):
        pullback(np.zeros((1, 1, 2)))


def test_positional_options_are_bound_like_the_forward():
    x = np.random.default_rng(3).standard_normal((1, 2, 6, 6))
    out, pullback = vjp(sg.avg_pool2d, x, 3, 1, 1)  # kernel_size, stride, padding positionally
    np.testing.assert_array_equal(pullback(np.ones_like(out))[0],
                                  sg.avg_pool2d_backward(np.ones_like(out), x, 3, 1, 1))
