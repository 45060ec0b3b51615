import itertools

import numpy as np
import pytest

import spatialgrad as sg
from helpers import (assert_adjoint, assert_no_less_accurate, negative_strided, non_contiguous, requires_torch,
                     same_bits_for_thread_counts, sampling_tolerance, tol, torch)

if torch is not None:
    import torch.nn.functional as F

IN_SIZES = [(1, 1), (1, 4), (3, 5), (6, 6), (7, 2)]
OUT_SIZES = [(1, 1), (2, 3), (6, 6), (9, 13), (4, 1)]


def nhwc(x):
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1))


def nchw(x):
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2))


def aten_reference(x, g, out_size, align_corners, scales):
    """torch.ops.aten forward and backward; scales None = not given (the contract's <= 0)."""
    sh, sw = scales
    y = torch.ops.aten.upsample_bilinear2d(torch.from_numpy(x), list(out_size), align_corners, sh, sw)
    gi = torch.ops.aten.upsample_bilinear2d_backward(torch.from_numpy(g), list(out_size), list(x.shape), align_corners,
                                                     sh, sw)
    return y.numpy(), gi.numpy()


def scale_choices(in_hw, out_hw, torch_safe=False):
    """Not given, consistent with the sizes (what interpolate(scale_factor=...) passes), and arbitrary.

    With torch_safe, the arbitrary scales keep every source index below `in`: torch 1.13 does not clamp
    floor(src) and reads out of bounds otherwise (see test_large_ratio_clamps_to_the_last_input).
    """
    yield None, None
    yield out_hw[0] / in_hw[0], out_hw[1] / in_hw[1]
    if torch_safe:
        yield 1.6 * out_hw[0] / in_hw[0], 2.5 * out_hw[1] / in_hw[1]
        yield 1.3 * out_hw[0] / in_hw[0], None
    else:
        yield 0.37, 2.6
        yield 1.7, None


def ours(x, g, out_size, align_corners, scales, layout="NCHW"):
    sh, sw = (0.0 if s is None else s for s in scales)
    y = sg.upsample_bilinear2d(x, out_size, (sh, sw), align_corners, layout=layout)
    gi = sg.upsample_bilinear2d_backward(g, out_size, x.shape, align_corners, sh, sw, layout=layout)
    return y, gi


def parity_tolerances(x, g, out_hw):
    """(forward, backward) tolerances against PyTorch (helpers.sampling_tolerance; NCHW): source coordinates lie in
    [0, in). A weight moves with its coordinate, one axis at a time: an output moves by up to 2 max|x| per unit,
    per axis; a grad_input element by 2 max|g| for each output that reads it (at most out // in + 2 per axis)."""
    coordinate = max(x.shape[-2:])
    readers = np.prod([o // i + 2 for i, o in zip(x.shape[-2:], out_hw)])
    return (sampling_tolerance(x.dtype, coordinate, 2 * 2 * float(np.abs(x).max())),
            sampling_tolerance(x.dtype, coordinate, 2 * readers * 2 * float(np.abs(g).max())))


def assert_as_accurate_as_aten(x, g, out_hw, align_corners, scales, ours_results, aten_results):
    """Our float32 forward and backward are at least as close to float64 as PyTorch's (helpers)."""
    exact = ours(x.astype(np.float64), g.astype(np.float64), out_hw, align_corners, scales)
    magnitude = ours(np.abs(x.astype(np.float64)), np.abs(g.astype(np.float64)), out_hw, align_corners, scales)
    for what, a, b, e, m in zip(("forward", "backward"), ours_results, aten_results, exact, magnitude):
        assert_no_less_accurate(a, b, e, m, f"{what} {x.shape} -> {out_hw} {align_corners} {scales}")


# ---- adjoint: the backward is the transpose of the forward -------------------------------------------------------

@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_adjoint(layout, align_corners, rng):
    for in_hw, out_hw in itertools.product(IN_SIZES, OUT_SIZES):
        for scales in scale_choices(in_hw, out_hw):
            shape = (2, 3) + in_hw if layout == "NCHW" else (2,) + in_hw + (3,)
            out_shape = (2, 3) + out_hw if layout == "NCHW" else (2,) + out_hw + (3,)
            x = rng.standard_normal(shape)
            g = rng.standard_normal(out_shape)
            sh, sw = (0.0 if s is None else s for s in scales)
            assert_adjoint(
                lambda v: sg.upsample_bilinear2d(v, out_hw, (sh, sw), align_corners, layout),
                lambda v: sg.upsample_bilinear2d_backward(v, out_hw, shape, align_corners, sh, sw, layout),
                x, g)


# ---- parity with PyTorch -----------------------------------------------------------------------------------------

@requires_torch
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("align_corners", [False, True])
def test_parity_with_aten_sweep(dtype, align_corners, rng):
    for in_hw, out_hw in itertools.product(IN_SIZES, OUT_SIZES):
        for scales in scale_choices(in_hw, out_hw, torch_safe=True):
            x = rng.standard_normal((2, 3) + in_hw).astype(dtype)
            g = rng.standard_normal((2, 3) + out_hw).astype(dtype)
            y_ref, gi_ref = aten_reference(x, g, out_hw, align_corners, scales)
            y, gi = ours(x, g, out_hw, align_corners, scales)
            assert y.dtype == dtype and gi.dtype == dtype
            msg = str((in_hw, out_hw, scales, align_corners))
            forward_tol, backward_tol = parity_tolerances(x, g, out_hw)
            np.testing.assert_allclose(y, y_ref, **forward_tol, err_msg=msg)
            np.testing.assert_allclose(gi, gi_ref, **backward_tol, err_msg=msg)
            if dtype == np.float32:
                assert_as_accurate_as_aten(x, g, out_hw, align_corners, scales, (y, gi), (y_ref, gi_ref))
            # NHWC gives the same numbers, transposed.
            y_l, gi_l = ours(nhwc(x), nhwc(g), out_hw, align_corners, scales, layout="NHWC")
            np.testing.assert_array_equal(nchw(y_l), y)
            np.testing.assert_array_equal(nchw(gi_l), gi)


@requires_torch
@pytest.mark.parametrize("seed", range(4))
def test_parity_with_aten_random(seed):
    rng = np.random.default_rng(seed)
    for _ in range(25):
        in_hw = tuple(int(v) for v in rng.integers(1, 40, size=2))
        out_hw = tuple(int(v) for v in rng.integers(1, 40, size=2))
        align_corners = bool(rng.integers(2))
        # Given scales at most as large a ratio as in/out (torch 1.13 reads out of bounds beyond that).
        scales = tuple(float(o / i * rng.uniform(1.0, 3.0)) if rng.integers(2) else None
                       for i, o in zip(in_hw, out_hw))
        dtype = [np.float32, np.float64][int(rng.integers(2))]
        shape = (int(rng.integers(1, 3)), int(rng.integers(1, 6))) + in_hw
        x = rng.standard_normal(shape).astype(dtype)
        g = rng.standard_normal(shape[:2] + out_hw).astype(dtype)
        y_ref, gi_ref = aten_reference(x, g, out_hw, align_corners, scales)
        y, gi = ours(x, g, out_hw, align_corners, scales)
        msg = str((shape, out_hw, scales, align_corners, dtype))
        forward_tol, backward_tol = parity_tolerances(x, g, out_hw)
        np.testing.assert_allclose(y, y_ref, **forward_tol, err_msg=msg)
        np.testing.assert_allclose(gi, gi_ref, **backward_tol, err_msg=msg)
        if dtype == np.float32:
            assert_as_accurate_as_aten(x, g, out_hw, align_corners, scales, (y, gi), (y_ref, gi_ref))


@requires_torch
@pytest.mark.parametrize("in_shape,out_hw,align_corners,scales", [
    ((2, 3, 64, 64), (128, 128), True, (None, None)),      # the shape: ratio 63/127, coordinates to 63
    ((1, 1, 3, 29), (16, 4), True, (None, None)),          # ratios 2/15 and 28/3, which float32 cannot hold
    ((2, 4, 26, 2), (4, 9), True, (None, None)),
    ((1, 3, 21, 38), (9, 14), True, (None, None)),
    ((1, 4, 10, 37), (23, 2), False, (3.2703164761690204, 0.1180757363558473))])  # 1 / scale
def test_float32_as_accurate_as_aten(in_shape, out_hw, align_corners, scales):
    # Shapes where a ratio or coordinate rounded to float32 (PyTorch) costs the most, or where it happens to land
    # on whole pixels, which a float32 ratio in float64 coordinates (spatialgrad before) missed by its rounding.
    rng = np.random.default_rng(19)
    x = rng.standard_normal(in_shape).astype(np.float32)
    g = rng.standard_normal(in_shape[:2] + out_hw).astype(np.float32)
    assert_as_accurate_as_aten(x, g, out_hw, align_corners, scales, ours(x, g, out_hw, align_corners, scales),
                               aten_reference(x, g, out_hw, align_corners, scales))


@requires_torch
@pytest.mark.parametrize("align_corners", [False, True])
def test_inf_and_nan_propagate_like_torch(align_corners, rng):
    # Zero-weight taps still multiply (0 * Inf = NaN), as in PyTorch, also for a kept size (identity).
    x = rng.standard_normal((1, 2, 4, 5))
    x[0, 0, 1, 2], x[0, 1, 3, 4] = np.inf, np.nan
    for out_hw in [(4, 5), (4, 9), (7, 5), (2, 3)]:
        g = rng.standard_normal((1, 2) + out_hw)
        g[0, 0, 1, 1], g[0, 1, -1, -1] = -np.inf, np.nan
        y_ref, gi_ref = aten_reference(x, g, out_hw, align_corners, (None, None))
        y, gi = ours(x, g, out_hw, align_corners, (None, None))
        np.testing.assert_allclose(y, y_ref, **tol(np.float64), err_msg=str(out_hw))
        np.testing.assert_allclose(gi, gi_ref, **tol(np.float64), err_msg=str(out_hw))


@requires_torch
@pytest.mark.parametrize("scale_factor", [2, 0.5, (1.5, 3), (0.3, 2.25), 1])
@pytest.mark.parametrize("align_corners", [False, True])
def test_scale_factor_only_matches_interpolate(scale_factor, align_corners, rng):
    x = rng.standard_normal((2, 3, 11, 8))
    ref = F.interpolate(torch.from_numpy(x), scale_factor=scale_factor, mode="bilinear", align_corners=align_corners,
                        recompute_scale_factor=False).numpy()
    y = sg.upsample_bilinear2d(x, scale_factor=scale_factor, align_corners=align_corners)
    assert y.shape == ref.shape
    np.testing.assert_allclose(y, ref, **tol(np.float64))
    pair = scale_factor if isinstance(scale_factor, tuple) else (scale_factor, scale_factor)
    assert y.shape[2:] == (int(np.floor(11 * pair[0])), int(np.floor(8 * pair[1])))


@requires_torch
def test_output_size_and_scale_factor_together(rng):
    # output_size fixes the shape, the factors the ratio (1 / factor), as aten's scales_h/scales_w.
    x = rng.standard_normal((1, 2, 5, 6))
    y = sg.upsample_bilinear2d(x, (9, 4), (2.0, 0.75))
    ref = torch.ops.aten.upsample_bilinear2d(torch.from_numpy(x), [9, 4], False, 2.0, 0.75).numpy()
    np.testing.assert_allclose(y, ref, **tol(np.float64))
    assert not np.allclose(y, sg.upsample_bilinear2d(x, (9, 4)))  # the scales did change the result
    # A scale <= 0 counts as not given.
    np.testing.assert_array_equal(sg.upsample_bilinear2d(x, (9, 4), (0.0, -1.0)), sg.upsample_bilinear2d(x, (9, 4)))


@requires_torch
@pytest.mark.parametrize("align_corners", [False, True])
def test_parity_channels_last_at_standard_shape_float32(align_corners, rng):
    # Large enough (output 16 MiB, grad_input 4 MiB) for the non-temporal store paths.
    x = rng.standard_normal((4, 64, 64, 64), dtype=np.float32)
    g = rng.standard_normal((4, 64, 128, 128), dtype=np.float32)
    tx = torch.from_numpy(x).contiguous(memory_format=torch.channels_last)
    tg = torch.from_numpy(g).contiguous(memory_format=torch.channels_last)
    y_ref = F.interpolate(tx, size=(128, 128), mode="bilinear", align_corners=align_corners)
    gi_ref = torch.ops.aten.upsample_bilinear2d_backward(tg, [128, 128], list(x.shape), align_corners, None, None)
    x_l, g_l = tx.permute(0, 2, 3, 1).numpy(), tg.permute(0, 2, 3, 1).numpy()
    y = sg.upsample_bilinear2d(x_l, 128, align_corners=align_corners, layout="NHWC")
    gi = sg.upsample_bilinear2d_backward(g_l, 128, x_l.shape, align_corners, layout="nhwc")
    forward_tol, backward_tol = parity_tolerances(x, g, (128, 128))
    np.testing.assert_allclose(nchw(y), y_ref.numpy(), **forward_tol)
    np.testing.assert_allclose(nchw(gi), gi_ref.numpy(), **backward_tol)
    # NCHW at the same shape: the same numbers.
    np.testing.assert_array_equal(sg.upsample_bilinear2d(x, 128, align_corners=align_corners), nchw(y))
    np.testing.assert_array_equal(sg.upsample_bilinear2d_backward(g, 128, x.shape, align_corners), nchw(gi))
    assert_as_accurate_as_aten(x, g, (128, 128), align_corners, (None, None), (nchw(y), nchw(gi)),
                               (y_ref.numpy(), gi_ref.numpy()))


def test_large_ratio_clamps_to_the_last_input(rng):
    # 1 / scale far above in / out: sources beyond the last input clamp to it (docs/operators.md (Bilinear upsampling): i0 = min(floor(src), in - 1),
    # l1 clamped to [0, 1]). torch 1.13 reads past the input here, so this is checked against the formula.
    x = rng.standard_normal((1, 1, 1, 4))
    y = sg.upsample_bilinear2d(x, (1, 8), (0.0, 0.25))  # ratio 4: src = 4 * (d + 0.5) - 0.5
    src = np.maximum(4 * (np.arange(8) + 0.5) - 0.5, 0)
    expected = np.interp(np.minimum(src, 3), np.arange(4), x[0, 0, 0])
    np.testing.assert_allclose(y[0, 0, 0], expected, rtol=1e-12)
    assert (y[0, 0, 0, 1:] == x[0, 0, 0, 3]).all()
    for scale in [1e-300, 5e-324]:  # ratio huge or infinite: still in bounds, still finite
        y = sg.upsample_bilinear2d(x, (3, 8), (scale, scale))
        assert (y == x[0, 0, 0, 3]).all()
        gi = sg.upsample_bilinear2d_backward(np.ones((1, 1, 3, 8)), (3, 8), x.shape, False, scale, scale)
        np.testing.assert_array_equal(gi[0, 0, 0], [0, 0, 0, 24])


# ---- layouts, strides, edge cases --------------------------------------------------------------------------------

def test_nhwc_equals_transposed_nchw(rng):
    x = rng.standard_normal((2, 5, 9, 7)).astype(np.float32)
    g = rng.standard_normal((2, 5, 4, 15)).astype(np.float32)
    for align_corners, scales in [(False, None), (True, None), (False, (0.5, 2.5))]:
        y = sg.upsample_bilinear2d(x, (4, 15), scales, align_corners)
        gi = sg.upsample_bilinear2d_backward(g, (4, 15), x.shape, align_corners, *(scales or (0.0, 0.0)))
        # NHWC-contiguous copies, and NHWC views of the NCHW memory (channels not innermost).
        for xl, gl in [(nhwc(x), nhwc(g)), (x.transpose(0, 2, 3, 1), g.transpose(0, 2, 3, 1))]:
            yl = sg.upsample_bilinear2d(xl, (4, 15), scales, align_corners, layout="NHWC")
            gil = sg.upsample_bilinear2d_backward(gl, (4, 15), xl.shape, align_corners, *(scales or (0.0, 0.0)),
                                                  layout="NHWC")
            assert yl.shape == (2, 4, 15, 5) and gil.shape == (2, 9, 7, 5)
            np.testing.assert_array_equal(nchw(yl), y)
            np.testing.assert_array_equal(nchw(gil), gi)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_strided_inputs_need_no_copy_and_match(layout, rng):
    x = rng.standard_normal((2, 3, 10, 9))
    y = sg.upsample_bilinear2d(x, (7, 13), layout=layout)
    g = rng.standard_normal(y.shape)
    gi = sg.upsample_bilinear2d_backward(g, (7, 13), x.shape, layout=layout)
    for variant in [negative_strided(x, 3), negative_strided(x, 1), negative_strided(x, 2), non_contiguous(x),
                    np.asfortranarray(x)]:
        np.testing.assert_array_equal(sg.upsample_bilinear2d(variant, (7, 13), layout=layout), y)
    for variant in [negative_strided(g, 2), negative_strided(g, 3), non_contiguous(g), np.asfortranarray(g)]:
        np.testing.assert_array_equal(sg.upsample_bilinear2d_backward(variant, (7, 13), x.shape, layout=layout), gi)
    assert sg.upsample_bilinear2d(x[:, :, ::2], 5, layout=layout).flags.c_contiguous


def test_sizes_one_and_identity(rng):
    x = rng.standard_normal((2, 3, 1, 1))
    # l0 * v + l1 * v with l0 + l1 = 1: v up to rounding.
    np.testing.assert_allclose(sg.upsample_bilinear2d(x, (4, 5)), np.broadcast_to(x, (2, 3, 4, 5)), rtol=1e-15)
    g = rng.standard_normal((2, 3, 4, 5))
    np.testing.assert_allclose(sg.upsample_bilinear2d_backward(g, (4, 5), x.shape), g.sum(axis=(2, 3), keepdims=True))
    # Same size: a copy whatever the scales or align_corners.
    x = rng.standard_normal((1, 2, 6, 7)).astype(np.float32)
    for align_corners in [False, True]:
        np.testing.assert_array_equal(sg.upsample_bilinear2d(x, (6, 7), (0.3, 4.0), align_corners), x)
        np.testing.assert_array_equal(sg.upsample_bilinear2d_backward(x, (6, 7), x.shape, align_corners, 0.3, 4.0), x)


@pytest.mark.parametrize("layout, shape, out_shape", [
    ("NCHW", (0, 3, 4, 4), (0, 3, 6, 5)),
    ("NCHW", (2, 0, 4, 4), (2, 0, 6, 5)),
    ("NHWC", (0, 4, 4, 3), (0, 6, 5, 3)),
    ("NHWC", (2, 4, 4, 0), (2, 6, 5, 0)),
])
def test_empty_batch_or_channels(layout, shape, out_shape):
    x = np.zeros(shape, np.float32)
    y = sg.upsample_bilinear2d(x, (6, 5), layout=layout)
    assert y.shape == out_shape and y.dtype == np.float32
    gi = sg.upsample_bilinear2d_backward(y, (6, 5), shape, layout=layout)
    assert gi.shape == shape and gi.dtype == np.float32
    assert sg.upsample_bilinear2d(x, scale_factor=2, layout=layout).shape[0] == shape[0]


def test_downsampling_writes_zero_gradient_where_nothing_is_read(rng):
    g = rng.standard_normal((1, 1, 2, 2))
    gi = sg.upsample_bilinear2d_backward(g, (2, 2), (1, 1, 10, 10))
    read = np.zeros((10, 10), bool)
    read[np.ix_([2, 3, 7, 8], [2, 3, 7, 8])] = True
    assert not gi[0, 0][~read].any()
    np.testing.assert_allclose(gi.sum(), g.sum())


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_threads_do_not_change_bits(layout, rng):
    x = rng.standard_normal((2, 37, 29, 19) if layout == "NHWC" else (2, 19, 37, 29)).astype(np.float32)
    y = sg.upsample_bilinear2d(x, (61, 47), layout=layout)
    g = rng.standard_normal(y.shape).astype(np.float32)
    same_bits_for_thread_counts(lambda: (sg.upsample_bilinear2d(x, (61, 47), layout=layout),
                                         sg.upsample_bilinear2d_backward(g, (61, 47), x.shape, layout=layout)), (1, 2, 3))


def test_single_plane_uses_threads_and_stays_exact(rng):
    x = rng.standard_normal((1, 1, 150, 170))
    g = rng.standard_normal((1, 1, 301, 257))
    same_bits_for_thread_counts(lambda: (sg.upsample_bilinear2d(x, (301, 257)),
                                         sg.upsample_bilinear2d_backward(g, (301, 257), x.shape)))


def test_layout_is_case_insensitive(rng):
    x = rng.standard_normal((1, 4, 5, 2))
    ref = sg.upsample_bilinear2d(x, 3, layout="NHWC")
    for name in ["nhwc", "Nhwc", "nHwC"]:
        np.testing.assert_array_equal(sg.upsample_bilinear2d(x, 3, layout=name), ref)
    np.testing.assert_array_equal(sg.upsample_bilinear2d(x, 3, layout="nchw"), sg.upsample_bilinear2d(x, 3))


# ---- validation: one test per rule of docs/operators.md (Bilinear upsampling) --------------------------------------------------------------------

X = np.zeros((1, 2, 4, 4), np.float32)
G = np.zeros((1, 2, 8, 8), np.float32)
FWD = r"upsample_bilinear2d\(\): "
BWD = r"upsample_bilinear2d_backward\(\): "


@pytest.mark.parametrize("call, message", [
    (lambda: sg.upsample_bilinear2d(X, 8, layout="NWHC"), FWD + r'expected layout "NCHW" or "NHWC", but got "NWHC"'),
    (lambda: sg.upsample_bilinear2d_backward(G, 8, X.shape, layout="CHW"),
     BWD + r'expected layout "NCHW" or "NHWC", but got "CHW"'),
    (lambda: sg.upsample_bilinear2d(X[0], 8), FWD + r"expected input to be 4-D \(N, C, H, W\), but got 3-D tensor"),
    (lambda: sg.upsample_bilinear2d(X[0], 8, layout="NHWC"), FWD + r"expected input to be 4-D \(N, H, W, C\)"),
    (lambda: sg.upsample_bilinear2d(X, (8, 8, 8)), FWD + r"expected output_size to have 2 entries \(H, W\), but got 3"),
    (lambda: sg.upsample_bilinear2d(X, [8]), FWD + r"expected output_size to have 2 entries \(H, W\), but got 1"),
    (lambda: sg.upsample_bilinear2d(X, (0, 8)), FWD + r"expected output_size entries >= 1, but got \[0, 8\]"),
    (lambda: sg.upsample_bilinear2d(X, -3), FWD + r"expected output_size entries >= 1, but got \[-3, -3\]"),
    (lambda: sg.upsample_bilinear2d(np.zeros((1, 2, 0, 4)), 8),
     FWD + r"expected input \(N, C, H, W\) with N, C >= 0 and H, W >= 1, but got \[1, 2, 0, 4\]"),
    (lambda: sg.upsample_bilinear2d(X, scale_factor=0.1),
     FWD + r"expected output sizes floor\(input size \* scale factor\) >= 1, but got floor\(4 \* 0.1\) = 0 for H"),
    (lambda: sg.upsample_bilinear2d(X, scale_factor=(2, 0)),
     FWD + r"expected scale factors that are finite and > 0 when no output_size is given, but got \(2, 0\)"),
    (lambda: sg.upsample_bilinear2d(X, scale_factor=float("inf")), FWD + r"expected scale factors that are finite"),
    (lambda: sg.upsample_bilinear2d(X, scale_factor=(1, 2, 3)),
     FWD + r"expected scale_factor to have 2 entries \(H, W\), but got 3"),
    (lambda: sg.upsample_bilinear2d(X), FWD + r"expected output_size or scale_factor, but got neither"),
    (lambda: sg.upsample_bilinear2d_backward(G[0], 8, X.shape), BWD + r"expected grad_output to be 4-D, but got 3-D"),
    (lambda: sg.upsample_bilinear2d_backward(G, 8, (2, 4, 4)),
     BWD + r"expected input_size to have 4 entries \(N, C, H, W\), but got 3 \(\[2, 4, 4\]\)"),
    (lambda: sg.upsample_bilinear2d_backward(G, 8, (1, 4, 4, 2, 1), layout="NHWC"),
     BWD + r"expected input_size to have 4 entries \(N, H, W, C\), but got 5"),
    (lambda: sg.upsample_bilinear2d_backward(G, (8, 8, 1), X.shape),
     BWD + r"expected output_size to have 2 entries \(H, W\), but got 3"),
    (lambda: sg.upsample_bilinear2d_backward(G, (8, 0), X.shape), BWD + r"expected output_size entries >= 1"),
    (lambda: sg.upsample_bilinear2d_backward(G, 8, (1, 2, 0, 4)),
     BWD + r"expected input_size \(N, C, H, W\) with N, C >= 0 and H, W >= 1, but got \[1, 2, 0, 4\]"),
    (lambda: sg.upsample_bilinear2d_backward(G, 8, (-1, 2, 4, 4)),
     BWD + r"expected input_size \(N, C, H, W\) with N, C >= 0 and H, W >= 1, but got \[-1, 2, 4, 4\]"),
    (lambda: sg.upsample_bilinear2d_backward(G, (8, 7), X.shape),
     BWD + r"expected grad_output of shape \(1, 2, 8, 7\), but got \(1, 2, 8, 8\)"),
    (lambda: sg.upsample_bilinear2d_backward(G, 8, (1, 3, 4, 4)),
     BWD + r"expected grad_output of shape \(1, 3, 8, 8\), but got \(1, 2, 8, 8\)"),
    (lambda: sg.upsample_bilinear2d_backward(G, 8, (1, 4, 4, 2), layout="NHWC"),
     BWD + r"expected grad_output of shape \(1, 8, 8, 2\), but got \(1, 2, 8, 8\)"),
])
def test_value_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize("call, message", [
    (lambda: sg.upsample_bilinear2d(X.astype(np.int64), 8), FWD + r"expected input to be float16, bfloat16, float32 or float64, but got int64"),
    (lambda: sg.upsample_bilinear2d(X.astype(np.complex64), 8),
     r"expected input to be a NumPy array of float16, bfloat16, float32 or float64 .*complex64"),
    (lambda: sg.upsample_bilinear2d_backward(G.astype(np.int32), 8, X.shape),
     BWD + r"expected grad_output to be float16, bfloat16, float32 or float64, but got int32"),
    (lambda: sg.upsample_bilinear2d(X.tolist(), 8), FWD + r"expected input to be a NumPy array, but got list"),
    (lambda: sg.upsample_bilinear2d_backward(None, 8, X.shape), BWD + r"expected grad_output to be a NumPy array"),
    (lambda: sg.upsample_bilinear2d(X, 8, layout=1), FWD + r"expected layout to be a string"),
    (lambda: sg.upsample_bilinear2d_backward(G, 8, X.shape, layout=None), BWD + r"expected layout to be a string"),
    (lambda: sg.upsample_bilinear2d(X, 2.5), FWD + r"expected output_size to be an int or a sequence of ints"),
    (lambda: sg.upsample_bilinear2d(X, scale_factor="2"), FWD + r"expected scale_factor to be a number or a pair"),
    (lambda: sg.upsample_bilinear2d_backward(G, 8, X.shape, scales_h=(1, 2)),
     BWD + r"expected scales_h to be a number or None"),
])
def test_type_errors(call, message):
    with pytest.raises(TypeError, match=message):
        call()


def test_scales_none_means_not_given(rng):
    g = rng.standard_normal((1, 2, 8, 8))
    ref = sg.upsample_bilinear2d_backward(g, 8, (1, 2, 4, 4))
    np.testing.assert_array_equal(sg.upsample_bilinear2d_backward(g, 8, (1, 2, 4, 4), scales_h=None, scales_w=-1.0), ref)
    np.testing.assert_array_equal(sg.upsample_bilinear2d(g, 4, (None, 0.0)), sg.upsample_bilinear2d(g, 4))
