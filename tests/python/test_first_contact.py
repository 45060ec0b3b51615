"""What a new user meets first (issue 36): each numbered finding pinned by the message or behaviour it now has.

Every message is in the form "op(): expected X, but got Y", names the argument the user passed and stays under
300 characters whatever the input.
"""
import inspect
import re
import warnings
from pathlib import Path

import numpy as np
import pytest

import spatialgrad as sg
from spatialgrad import _core
from spatialgrad.autograd import vjp
from helpers import torch
from op_cases import valid_call

ROOT = Path(__file__).resolve().parents[2]
needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")


def raised(call, kind=Exception) -> str:
    with pytest.raises(kind) as info:
        call()
    message = str(info.value)
    assert len(message) < 300, message
    return message


# ---- 1. patch's documentation is public and its references exist ----------------------------------------------

@needs_torch
def test_1_patch_names_its_operators_publicly():
    import spatialgrad.torch as sgt
    assert "OPERATORS" in sgt.__all__
    doc = inspect.getdoc(sgt.patch)
    assert re.findall(r"^``(\w+)``\s{2,}", doc, re.M) == list(sgt.OPERATORS)  # its table's rows, in order
    assert ":data:`spatialgrad.torch.OPERATORS`" in doc and "_patch" not in doc and "module documentation" not in doc
    for names in ("torchvision.ops.roi_align", "F.interpolate", "F.avg_pool2d", "F.grid_sample", "antialias"):
        assert names in doc  # what is replaced and what falls through, in help(patch) itself


# ---- 2. ms_deform_attn_reference takes no level_start_index, and says so ------------------------------------------

@needs_torch
def test_2_reference_called_like_ms_deform_attn_says_what_it_takes():
    import spatialgrad.torch as sgt
    value, loc, w = torch.rand(1, 20, 2, 4), torch.rand(1, 3, 2, 2, 2, 2), torch.rand(1, 3, 2, 2, 2)
    shapes, starts = torch.tensor([[4, 4], [2, 2]]), torch.tensor([0, 16])
    message = raised(lambda: sgt.ms_deform_attn_reference(value, shapes, starts, loc, w), TypeError)
    assert message == ("ms_deform_attn_reference(): expected 4 arguments (value, spatial_shapes, sampling_locations, "
                       "attention_weights; no level_start_index, unlike ms_deform_attn), but got 5")
    assert "no ``level_start_index``" in inspect.getdoc(sgt.ms_deform_attn_reference)
    torch.testing.assert_close(sgt.ms_deform_attn_reference(value, shapes, loc, w),
                               sgt.ms_deform_attn(value, shapes, starts, loc, w))


# ---- 3. one meaning of sampling_ratio <= 0 (adaptive) in the NumPy and PyTorch APIs -----------------------------

X = np.random.default_rng(3).random((2, 3, 12, 12))
BOXES = np.array([[0, 1.0, 1.5, 9.0, 7.0], [1, 0.0, 2.0, 11.0, 11.0]])


@pytest.mark.parametrize("ratio", [-1, -7])
def test_3_negative_sampling_ratio_is_adaptive_in_numpy(ratio):
    adaptive = sg.roi_align(X, BOXES, 3, sampling_ratio=0)
    np.testing.assert_array_equal(sg.roi_align(X, BOXES, 3, sampling_ratio=ratio), adaptive)
    g = np.ones_like(adaptive)
    np.testing.assert_array_equal(sg.roi_align_backward(g, BOXES, X.shape, 3, 3, 1.0, ratio, True),
                                  sg.roi_align_backward(g, BOXES, X.shape, 3, 3, 1.0, 0, True))


@needs_torch
def test_3_code_moved_between_the_apis_gives_the_same_result():
    import spatialgrad.torch as sgt
    ours = sgt.roi_align(torch.from_numpy(X), torch.from_numpy(BOXES), 3)  # torchvision's defaults: -1, False
    np.testing.assert_array_equal(ours.numpy(), sg.roi_align(X, BOXES, 3, sampling_ratio=-1, aligned=False))


def test_3_the_core_and_c_api_keep_the_npu_rule():
    """aclnnRoiAlignV2 (SPEC.md): samplingRatio >= 0, a negative one is an error; the mapping is Python's."""
    message = raised(lambda: _core.roi_align(X, BOXES, [3], 1.0, -1, True), ValueError)
    assert message == "roi_align(): expected sampling_ratio >= 0, but got -1"


# ---- 4. a non-array argument: one short line, for every NumPy entry point -------------------------------------

def test_4_a_long_list_gives_one_short_line():
    big = np.zeros((1, 3, 64, 64)).tolist()  # pybind11 printed all of it: about 25 KB
    message = raised(lambda: sg.avg_pool2d(big, 2), TypeError)
    assert message == "avg_pool2d(): expected input to be a NumPy array, but got list (convert it with numpy.asarray)"


def _array_arguments(function):
    return [name for name, p in inspect.signature(function).parameters.items()
            if p.annotation in ("np.ndarray", "Optional[np.ndarray]")]


@pytest.mark.parametrize("name", sg.functional.__all__)
def test_4_every_array_argument_of_every_function_is_named(name):
    function = getattr(sg, name)
    for argument in _array_arguments(function):
        if argument in ("input", "grad_output") and name.startswith("upsample"):
            continue  # checked before the core sees it, with its own message (below)
        kwargs = valid_call(name)
        kwargs[argument] = [[1.0, 2.0]]
        message = raised(lambda: function(**kwargs), TypeError)
        assert message.startswith(f"{name}(): expected {argument} to be a NumPy array, but got list"), message
    assert raised(lambda: sg.upsample_bilinear2d([[1.0]], 2), TypeError) == \
        "upsample_bilinear2d(): expected input to be a NumPy array, but got list"


LONG = list(range(5000))


@pytest.mark.parametrize("call", [
    lambda: sg.avg_pool2d(X, [1.5] * 5000),
    lambda: sg.avg_pool2d(X, LONG),
    lambda: sg.roi_align(X, BOXES, LONG),
    lambda: sg.roi_align(X, BOXES, 2, spatial_scale="x" * 5000),
    lambda: sg.grid_sample(X, np.zeros((2, 2, 2, 2)), mode="x" * 5000),
    lambda: sg.upsample_bilinear2d(X, LONG),
    lambda: sg.upsample_bilinear2d(X, scale_factor=[1.5] * 5000),
    lambda: sg.grid_sampler_2d_backward(np.zeros((2, 3, 2, 2)), X, np.zeros((2, 2, 2, 2)), output_mask=5),
    lambda: vjp("x" * 5000, X),
], ids=["kernel floats", "kernel list", "roi output_size", "scale string", "mode", "upsample size", "scale list",
        "output_mask", "vjp op"])
def test_messages_stay_short_whatever_the_input(call):
    raised(call)  # asserts < 300 characters (they were 5-29 KB)


@needs_torch
def test_patch_messages_stay_short_whatever_the_input():
    import spatialgrad.torch as sgt
    assert raised(lambda: sgt.patch(["conv2d"] * 5000), ValueError).endswith("'conv2d', ...]")


# ---- 5. the per-image box list format is checked as the user wrote it -------------------------------------------

@needs_torch
def test_5_a_k5_tensor_in_the_list_format_is_named_as_passed():
    import spatialgrad.torch as sgt
    message = raised(lambda: sgt.roi_align(torch.rand(1, 2, 8, 8), [torch.tensor([[0, 1.0, 1, 5, 5]])], 7),
                     ValueError)
    assert message == ("spatialgrad.torch.roi_align(): expected boxes as a list of (L, 4) tensors (x1, y1, x2, y2), "
                       "one per image, but got boxes[0] of shape (1, 5) (pass (K, 5) rows with the batch index as one "
                       "tensor, not in a list)")


# ---- 6. MultiScaleDeformableAttention.forward checks its inputs ------------------------------------------------

def _attention(batch_first: bool):
    from spatialgrad.torch.nn import MultiScaleDeformableAttention
    module = MultiScaleDeformableAttention(16, 2, num_levels=2, num_points=2, batch_first=batch_first).eval()
    shapes, starts = torch.tensor([[16, 16], [8, 8]]), torch.tensor([0, 256])
    query, value, reference = torch.rand(2, 10, 16), torch.rand(2, 320, 16), torch.rand(2, 10, 2, 2)
    if not batch_first:
        query, value = query.transpose(0, 1), value.transpose(0, 1)
    return module, dict(query=query, value=value, reference_points=reference, spatial_shapes=shapes,
                        level_start_index=starts)


@needs_torch
@pytest.mark.parametrize("change,expected", [
    (dict(spatial_shapes=None), "expected spatial_shapes of shape (2, 2): (H, W) of each of the num_levels=2 levels "
                                "the module was built for, but got None"),
    (dict(level_start_index=None), "expected level_start_index of shape (2,): where each level starts in value, but "
                                   "got None"),
    (dict(reference_points=torch.rand(2, 10, 2) if torch else None),
     "expected reference_points of shape (2, 10, 2, 2 or 4): (bs, num_query, num_levels, point or box), but got "
     "(2, 10, 2)"),
    (dict(reference_points=torch.rand(2, 10, 2, 3) if torch else None),
     "expected reference_points of shape (2, 10, 2, 2 or 4): (bs, num_query, num_levels, point or box), but got "
     "(2, 10, 2, 3)"),
    (dict(spatial_shapes=torch.tensor([[16, 16], [8, 8], [4, 4]]) if torch else None,
          level_start_index=torch.tensor([0, 256, 320]) if torch else None),
     "expected spatial_shapes of shape (2, 2): (H, W) of each of the num_levels=2 levels the module was built for, "
     "but got (3, 2)"),
])
def test_6_missing_or_misshapen_inputs_are_named(change, expected):
    module, inputs = _attention(batch_first=True)
    message = raised(lambda: module(**dict(inputs, **change)), ValueError)
    assert message == f"MultiScaleDeformableAttention.forward(): {expected}"


@needs_torch
@pytest.mark.parametrize("batch_first", [True, False])
def test_6_the_other_layout_hints_at_batch_first(batch_first):
    module, inputs = _attention(batch_first)
    inputs.update(query=inputs["query"].transpose(0, 1), value=inputs["value"].transpose(0, 1))
    message = raised(lambda: module(**inputs), ValueError)
    if batch_first:
        assert message == ("MultiScaleDeformableAttention.forward(): expected value of shape (bs, 320, embed_dims) "
                           "with sum(H * W) = 320 entries, but got (320, 2, 16) (sequence-first tensors: construct "
                           "the module with batch_first=False)")
    else:
        assert message == ("MultiScaleDeformableAttention.forward(): expected value of shape (320, bs, embed_dims) "
                           "with sum(H * W) = 320 entries, but got (2, 320, 16) (batch-first tensors: construct "
                           "the module with batch_first=True)")


@needs_torch
def test_6_valid_inputs_in_both_layouts_agree():
    module, inputs = _attention(batch_first=True)
    other, _ = _attention(batch_first=False)
    other.load_state_dict(module.state_dict())
    sequence_first = dict(inputs, query=inputs["query"].transpose(0, 1), value=inputs["value"].transpose(0, 1))
    torch.testing.assert_close(other(**sequence_first).transpose(0, 1), module(**inputs))


# ---- 7. the module's documentation explains its arguments ------------------------------------------------------

@needs_torch
def test_7_multiscale_deformable_attention_documents_every_argument():
    from spatialgrad.torch.nn import MultiScaleDeformableAttention as Module
    doc, forward_doc = inspect.getdoc(Module), inspect.getdoc(Module.forward)
    for name in inspect.signature(Module.__init__).parameters:
        assert name == "self" or name in doc, name
    for name in inspect.signature(Module.forward).parameters:
        assert name in ("self", "kwargs") or name in forward_doc, name
    assert "eval()" in doc and "gradcheck" in doc and "dropout" in doc
    assert "(x, y)" in forward_doc and "(cx, cy, w, h)" in forward_doc  # reference_points: 2 or 4 coordinates
    assert not re.search(r"\bAs mmcv\b", doc + forward_doc)


# ---- 8. a vjp cotangent of another dtype is named as the cotangent ---------------------------------------------

def test_8_a_cotangent_of_another_dtype_is_named():
    x, grid = np.random.rand(1, 2, 4, 4).astype(np.float32), np.zeros((1, 3, 3, 2), np.float32)
    out, pullback = vjp(sg.grid_sample, x, grid)
    message = raised(lambda: pullback(np.ones(out.shape)), TypeError)
    assert message == ("grid_sample pullback: expected grad_out of the output's dtype (float32), but got float64 "
                       "(cast grad_out, or run the forward in the dtype you need)")
    out, pullback = vjp(sg.avg_pool2d, sg.to_bfloat16(x), 2)
    assert "expected grad_out of the output's dtype (bfloat16), but got float32" in \
        raised(lambda: pullback(np.ones(out.shape, np.float32)), TypeError)
    assert pullback(sg.to_bfloat16(np.ones(out.shape)))[0].shape == x.shape


# ---- 9. inside patch(), arguments both reject raise spatialgrad's message ---------------------------------------

@needs_torch
def test_9_a_call_both_reject_raises_our_message_as_the_original_type():
    import spatialgrad.torch as sgt
    x = torch.rand(1, 2, 8, 8)
    with sgt.patch():
        message = raised(lambda: torch.nn.functional.avg_pool2d(x, -2), RuntimeError)  # PyTorch's type
    assert message == "avg_pool2d(): expected kernel_size entries > 0, but got [-2]"  # not "pad should be at most"


@needs_torch
def test_9_what_the_original_accepts_it_still_computes(monkeypatch):
    """Arguments spatialgrad rejects but the original takes (a newer PyTorch, or a case we do not cover) go to it."""
    import torch.nn.functional as F
    import spatialgrad.torch as sgt
    monkeypatch.setattr(F, "avg_pool2d", lambda *args: "the original's result")
    with sgt.patch(["avg_pool2d"]):
        assert F.avg_pool2d(torch.rand(1, 2, 8, 8), -2) == "the original's result"


# ---- 10. the same warnings with and without patch() -------------------------------------------------------------

@needs_torch
def test_10_grid_sample_warns_about_align_corners_none_once():
    import spatialgrad.torch as sgt
    x, grid = torch.rand(1, 2, 4, 4), torch.zeros(1, 2, 2, 2)
    for call in (lambda: sgt.grid_sample(x, grid), lambda: torch.nn.functional.grid_sample(x, grid)):
        with sgt.patch(["grid_sample"]), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call()
        assert [str(w.message) for w in caught] == [
            "grid_sample: align_corners=None means False, as in PyTorch (which warns the same); pass it explicitly "
            "to silence this"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sgt.grid_sample(x, grid, align_corners=False)


# ---- 11. fair timing is explained where users time things ------------------------------------------------------

def test_11_the_docs_say_how_to_time_fairly():
    page = (ROOT / "docs" / "pytorch.md").read_text(encoding="utf-8")
    section = page.split("## Timing it yourself", 1)[1].split("\n## ", 1)[0]
    for needed in ("torch.set_num_threads", "spatialgrad.set_num_threads", "warm-up", "best"):
        assert needed in section, needed
    performance = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    assert "pytorch.md#timing-it-yourself" in performance


def test_11_the_detector_demo_says_how_it_times():
    source = (ROOT / "examples" / "train_tiny_detector.py").read_text(encoding="utf-8")
    assert "torch.set_num_threads(THREADS)" in source and "sg.set_num_threads(THREADS)" in source
    assert re.search(r"step time \(ms, median of .*threads", source)
