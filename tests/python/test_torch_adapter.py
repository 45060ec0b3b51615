import numpy as np
import pytest

from helpers import requires_torch, torch
from op_cases import cases

pytestmark = requires_torch

if torch is not None:
    import torch.nn.functional as F
    import torchvision

    import spatialgrad.torch as sgt
    from spatialgrad.torch import _common, ms_deform_attn_reference

CASES = {name: (arrays, options) for name, arrays, options in cases(np.random.default_rng(11))}


def torch_args(name):
    """The op's tensors (differentiable ones requiring grad) and the spatialgrad.torch keyword options."""
    arrays, options = CASES[name]
    tensors = [torch.from_numpy(a.copy()) for a in arrays]
    for t in tensors:
        if t.is_floating_point():
            t.requires_grad_()
    if name == "roi_align":
        tensors[1].requires_grad_(False)
        options = dict(options, aligned=True)
    if name == "upsample_bilinear2d":
        options = dict(size=options["output_size"])
    return tensors, options


def reference(name, tensors, options):
    """The same computation with PyTorch / torchvision ops (mmcv's grid_sample formula for MSDA)."""
    if name == "avg_pool2d":
        return F.avg_pool2d(*tensors, **options)
    if name == "upsample_bilinear2d":
        return F.interpolate(tensors[0], size=options["size"], mode="bilinear", align_corners=False)
    if name == "grid_sample":
        return F.grid_sample(*tensors, mode="bilinear", padding_mode="zeros", align_corners=False)
    if name == "roi_align":
        return torchvision.ops.roi_align(*tensors, **options)
    value, shapes, _, loc, attn = tensors
    return ms_deform_attn_reference(value, shapes, loc, attn)


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradcheck_float64(name):
    tensors, options = torch_args(name)
    fn = getattr(sgt, name)
    assert torch.autograd.gradcheck(lambda *ts: fn(*ts, **options), tensors, eps=1e-6, atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_reference_ops_inside_a_model(name):
    tensors, options = torch_args(name)
    ref_tensors = [t.detach().clone().requires_grad_(t.requires_grad) for t in tensors]
    weight = torch.linspace(-1, 1, 7, dtype=torch.float64)

    def model(op_out):  # a small head after the operator: tanh, a learned-like weighting, a sum
        flat = torch.tanh(op_out).reshape(-1)
        return (flat * weight.repeat(flat.numel() // 7 + 1)[: flat.numel()]).sum()

    ours = getattr(sgt, name)(*tensors, **options)
    ref = reference(name, ref_tensors, options)
    torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-12)
    model(ours).backward()
    model(ref).backward()
    for t, r in zip(tensors, ref_tensors):
        if t.requires_grad:
            torch.testing.assert_close(t.grad, r.grad, rtol=1e-9, atol=1e-11)


def test_zero_copy_for_cpu_tensors():
    x = torch.randn(2, 3, 8, 8)
    assert _common.to_numpy(x, "op", "x").ctypes.data == x.data_ptr()
    strided = x[:, :, ::2]
    assert _common.to_numpy(strided, "op", "x").ctypes.data == strided.data_ptr()
    y = sgt.avg_pool2d(x, 2)
    # the output tensor wraps the array the kernel wrote: no copy on the way out either
    assert y.is_contiguous() and y.shape == (2, 3, 4, 4)


def test_only_requested_gradients_are_computed(monkeypatch):
    import dataclasses
    import functools

    from spatialgrad._registry import OPS

    calls = []
    spec = OPS["grid_sampler_2d_backward"]

    @functools.wraps(spec.forward)
    def spy(*args, output_mask=(True, True), **kwargs):
        calls.append(tuple(output_mask))
        return spec.forward(*args, output_mask=output_mask, **kwargs)

    monkeypatch.setitem(OPS, "grid_sampler_2d_backward", dataclasses.replace(spec, forward=spy))
    monkeypatch.setattr(sgt, "native", False)  # the Python path (test_torch_native.py checks the native one)
    x = torch.randn(1, 2, 5, 5, dtype=torch.float64)
    grid = (torch.rand(1, 3, 3, 2, dtype=torch.float64) * 2 - 1).requires_grad_()
    sgt.grid_sample(x, grid).sum().backward()
    assert calls == [(False, True)]
    assert x.grad is None and grid.grad is not None


def test_double_backward_is_differentiated():
    # (test_second_order.py checks the values; here: the second pass reaches x at all.)
    x = torch.randn(1, 1, 4, 4, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(sgt.avg_pool2d(x, 2).pow(2).sum(), x, create_graph=True)
    g.pow(2).sum().backward()
    assert x.grad.abs().sum() > 0


def test_non_cpu_tensors_raise_on_the_python_path(monkeypatch):
    """NumPy cannot view them (the native operators give meta tensors meta outputs: test_torch_compile.py)."""
    monkeypatch.setattr(sgt, "native", False)
    x = torch.empty(1, 1, 4, 4, device="meta")
    with pytest.raises(ValueError, match=r"spatialgrad.torch.avg_pool2d\(\): expected input to be a CPU tensor, but got device meta"):
        sgt.avg_pool2d(x, 2)


def test_upsample_keeps_channels_last_and_accepts_scale_factor():
    x = torch.randn(2, 3, 5, 6).to(memory_format=torch.channels_last).requires_grad_()
    ours = sgt.upsample_bilinear2d(x, scale_factor=1.7)
    ref = F.interpolate(x.detach(), scale_factor=1.7, mode="bilinear", align_corners=False)
    assert ours.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(ours, ref)
    ours.sum().backward()
    assert x.grad.shape == x.shape


def test_roi_align_accepts_a_list_of_boxes_per_image():
    x = torch.randn(2, 3, 12, 12, dtype=torch.float64)
    boxes = [torch.tensor([[1.0, 1.0, 8.0, 9.0]], dtype=torch.float64),
             torch.tensor([[0.5, 2.0, 6.0, 6.5], [3.0, 3.0, 11.0, 10.0]], dtype=torch.float64)]
    torch.testing.assert_close(sgt.roi_align(x, boxes, 3, sampling_ratio=2),
                               torchvision.ops.roi_align(x, boxes, 3, sampling_ratio=2))
