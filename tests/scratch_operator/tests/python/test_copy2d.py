"""The scratch operator through every Python layer: NumPy, spatialgrad.autograd.vjp to second order, and
spatialgrad.torch's adapter with torch.autograd (gradcheck)."""
import numpy as np
import pytest

import spatialgrad as sg
from spatialgrad.autograd import vjp


def test_copy_and_its_backward():
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5))
    np.testing.assert_array_equal(sg.copy2d(x), x)
    np.testing.assert_array_equal(sg.copy2d_backward(x[:, :, ::-1]), x[:, :, ::-1])
    assert "copy2d" in sg.functional.OPERATOR_MODULES and sg.copy2d is sg.functional.copy2d


def test_vjp_of_the_forward_and_of_the_backward():
    rng = np.random.default_rng(1)
    x, g = rng.standard_normal((1, 2, 3, 3)), rng.standard_normal((1, 2, 3, 3))
    out, pullback = vjp(sg.copy2d, x)
    np.testing.assert_array_equal(out, x)
    np.testing.assert_array_equal(pullback(g)[0], g)
    _, pullback = vjp(sg.copy2d_backward, x)  # the backward's own vjp: the forward again
    np.testing.assert_array_equal(pullback(g)[0], g)


def test_errors_name_the_operator():
    with pytest.raises(ValueError, match=r"copy2d\(\): expected input to be 4-D"):
        sg.copy2d(np.zeros((2, 3), np.float32))


def test_the_torch_adapter_is_differentiable():
    torch = pytest.importorskip("torch")
    import spatialgrad.torch as sgt

    x = torch.rand(1, 2, 3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(sgt.copy2d, (x,))
    assert "copy2d" in sgt.__all__
