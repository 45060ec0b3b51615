import numpy as np
import pytest

import spatialgrad as sg
from helpers import assert_adjoint, best_cpu_seconds, finite_difference, negative_strided, non_contiguous, \
    requires_torch, same_bits_for_thread_counts, tol, torch

if torch is not None:
    from spatialgrad.torch import ms_deform_attn_reference

STANDARD_LEVELS = [(64, 64), (32, 32), (16, 16), (8, 8)]


def level_tables(shapes, dtype=np.int64):
    shapes = np.array(shapes, dtype=dtype).reshape(-1, 2)
    areas = shapes[:, 0].astype(np.int64) * shapes[:, 1]
    starts = (np.cumsum(areas) - areas).astype(dtype)
    return shapes, starts, int(areas.sum())


def make_inputs(rng, bs, shapes, heads, channels, queries, points, dtype=np.float64, lo=-0.15, hi=1.15,
                index_dtype=np.int64):
    """Random inputs; by default some points fall outside the levels (x, y outside [0, 1])."""
    spatial_shapes, starts, spatial = level_tables(shapes, index_dtype)
    levels = len(spatial_shapes)
    value = rng.standard_normal((bs, spatial, heads, channels)).astype(dtype)
    loc = rng.uniform(lo, hi, (bs, queries, heads, levels, points, 2)).astype(dtype)
    attn = rng.uniform(0, 1, (bs, queries, heads, levels, points)).astype(dtype)
    return value, spatial_shapes, starts, loc, attn


def off_grid_locations(rng, shape, spatial_shapes):
    """Locations whose pixel coordinates x*W - 0.5, y*H - 0.5 sit at least 0.15 away from any integer and
    from the range bounds -1, W, H, where bilinear sampling has kinks. Cells -1 and W-1 are the border
    bands with absent corners; about 5% of the coordinates lie outside the level (cells -2 and W)."""
    levels = spatial_shapes.shape[0]
    loc = np.empty(shape)
    for level in range(levels):
        h, w = (int(v) for v in spatial_shapes[level])
        for axis, size in ((0, w), (1, h)):
            cells = rng.integers(-1, size, shape[:3] + (shape[4],))
            outside = rng.uniform(size=cells.shape) < 0.05
            cells[outside] = rng.choice([-2, size], size=int(outside.sum()))
            frac = rng.uniform(0.15, 0.85, cells.shape)
            loc[:, :, :, level, :, axis] = (cells + frac + 0.5) / size
    return loc


SHAPES = [
    dict(bs=2, shapes=[(5, 7), (3, 2), (1, 1)], heads=3, channels=5, queries=7, points=3),
    dict(bs=1, shapes=[(1, 1)], heads=1, channels=1, queries=4, points=1),
    dict(bs=2, shapes=[(8, 6), (4, 3)], heads=2, channels=13, queries=9, points=4),
    dict(bs=1, shapes=[(16, 16), (8, 8), (4, 4), (2, 2)], heads=4, channels=32, queries=40, points=4),
]


def reference(value, spatial_shapes, loc, attn, grad_output):
    """Forward and autograd backward of the grid_sample composition."""
    tv, tl, ta = (torch.from_numpy(np.ascontiguousarray(a)).requires_grad_() for a in (value, loc, attn))
    out = ms_deform_attn_reference(tv, spatial_shapes, tl, ta)
    out.backward(torch.from_numpy(grad_output))
    return out.detach().numpy(), tv.grad.numpy(), tl.grad.numpy(), ta.grad.numpy()


@pytest.mark.parametrize("case", range(len(SHAPES)))
def test_adjoint_in_value(case, rng):
    value, shapes, starts, loc, attn = make_inputs(rng, **SHAPES[case])
    g = rng.standard_normal(sg.ms_deform_attn(value, shapes, starts, loc, attn).shape)
    assert_adjoint(lambda v: sg.ms_deform_attn(v, shapes, starts, loc, attn),
                   lambda gg: sg.ms_deform_attn_backward(value, shapes, starts, loc, attn, gg)[0], value, g)


@pytest.mark.parametrize("case", range(len(SHAPES)))
def test_finite_differences_locations_and_weights(case, rng):
    value, shapes, starts, loc, attn = make_inputs(rng, **SHAPES[case])
    loc = off_grid_locations(rng, loc.shape, shapes)
    out = sg.ms_deform_attn(value, shapes, starts, loc, attn)
    g = rng.standard_normal(out.shape)
    _, grad_loc, grad_attn = sg.ms_deform_attn_backward(value, shapes, starts, loc, attn, g)
    loc_idx = rng.choice(loc.size, size=min(loc.size, 120), replace=False)
    fd_loc = finite_difference(lambda x: sg.ms_deform_attn(value, shapes, starts, x, attn), loc, g, loc_idx)
    np.testing.assert_allclose(grad_loc.reshape(-1)[loc_idx], fd_loc, rtol=1e-6, atol=1e-7)
    attn_idx = rng.choice(attn.size, size=min(attn.size, 60), replace=False)
    # Linear in the weights: a large step is exact and keeps rounding out of the difference.
    fd_attn = finite_difference(lambda a: sg.ms_deform_attn(value, shapes, starts, loc, a), attn, g, attn_idx, eps=0.1)
    np.testing.assert_allclose(grad_attn.reshape(-1)[attn_idx], fd_attn, rtol=1e-6, atol=1e-8)
    # The finite differences are not all zero: most points are inside and pass gradients.
    assert np.count_nonzero(fd_loc) >= len(loc_idx) // 2


def float32_tol(ref):
    # Both sides round the pixel coordinate x*W - 0.5 differently in float32 (grid_sample computes
    # ((2x - 1 + 1) * W - 1) / 2); allow a few ulps of the largest magnitude involved.
    return dict(rtol=1e-4, atol=1e-5 * max(1.0, float(np.abs(ref).max())))


@requires_torch
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", range(len(SHAPES)))
def test_parity_with_grid_sample_composition(case, dtype, rng):
    value, shapes, starts, loc, attn = make_inputs(rng, dtype=dtype, **SHAPES[case])
    g = rng.standard_normal((value.shape[0], loc.shape[1], value.shape[2] * value.shape[3])).astype(dtype)
    expected = reference(value, shapes, loc, attn, g)
    out = sg.ms_deform_attn(value, shapes, starts, loc, attn)
    grads = sg.ms_deform_attn_backward(value, shapes, starts, loc, attn, g)
    for name, actual, ref in zip(["output", "grad_value", "grad_loc", "grad_attn"], (out, *grads), expected):
        assert actual.dtype == dtype and actual.shape == ref.shape, name
        kw = tol(dtype) if dtype == np.float64 else float32_tol(ref)
        np.testing.assert_allclose(actual, ref, err_msg=name, **kw)


@requires_torch
@pytest.mark.parametrize("seed", range(4))
def test_parity_random_shapes(seed):
    rng = np.random.default_rng(seed)
    for _ in range(6):
        levels = int(rng.integers(1, 5))
        kw = dict(bs=int(rng.integers(1, 3)), shapes=[tuple(int(v) for v in rng.integers(1, 12, 2)) for _ in range(levels)],
                  heads=int(rng.integers(1, 5)), channels=int(rng.integers(1, 40)), queries=int(rng.integers(1, 30)),
                  points=int(rng.integers(1, 5)))
        value, shapes, starts, loc, attn = make_inputs(rng, **kw)
        g = rng.standard_normal((kw["bs"], kw["queries"], kw["heads"] * kw["channels"]))
        expected = reference(value, shapes, loc, attn, g)
        actual = (sg.ms_deform_attn(value, shapes, starts, loc, attn),
                  *sg.ms_deform_attn_backward(value, shapes, starts, loc, attn, g))
        for a, e in zip(actual, expected):
            np.testing.assert_allclose(a, e, err_msg=str(kw), **tol(np.float64))


@requires_torch
def test_parity_at_standard_shape_float32(rng):
    value, shapes, starts, loc, attn = make_inputs(rng, 2, STANDARD_LEVELS, 8, 32, 200, 4, np.float32, 0.0, 1.0)
    g = rng.standard_normal((2, 200, 256)).astype(np.float32)
    expected = reference(value, shapes, loc, attn, g)
    actual = (sg.ms_deform_attn(value, shapes, starts, loc, attn), *sg.ms_deform_attn_backward(value, shapes, starts,
                                                                                               loc, attn, g))
    for name, a, e in zip(["output", "grad_value", "grad_loc", "grad_attn"], actual, expected):
        np.testing.assert_allclose(a, e, err_msg=name, **float32_tol(e))


def test_out_of_range_and_non_finite_points_contribute_nothing(rng):
    value, shapes, starts, loc, attn = make_inputs(rng, 1, [(4, 4), (2, 2)], 2, 3, 3, 4)
    # x*W - 0.5 and y*H - 0.5 must lie strictly inside (-1, W) and (-1, H); the bounds themselves are out.
    bad = [(-0.125, 0.5), (1.125, 0.5), (0.5, -0.125), (0.5, 1.125), (np.nan, 0.5), (0.5, np.nan), (np.inf, 0.5),
           (-np.inf, -np.inf), (1e30, 0.5), (0.5, -1e30)]
    flat = loc.reshape(-1, 2)
    flat[:len(bad)] = np.array(bad)
    flat[len(bad):] = np.nan
    g = rng.standard_normal((1, 3, 6))
    out = sg.ms_deform_attn(value, shapes, starts, loc, attn)
    gv, gl, ga = sg.ms_deform_attn_backward(value, shapes, starts, loc, attn, g)
    assert not out.any() and not gv.any() and not gl.any() and not ga.any()
    # Just inside the bound -1 a point reads its one present corner.
    flat[0] = (-0.12, 0.625)  # pixel coordinates (-0.98, 2.0) on the 4x4 level
    out = sg.ms_deform_attn(value, shapes, starts, loc, attn)
    a = attn.reshape(-1)[0]
    np.testing.assert_allclose(out[0, 0, :3], a * 0.02 * value[0, 2 * 4 + 0, 0], rtol=1e-12)


def test_int32_indices_and_lists_give_the_same_result(rng):
    value, shapes, starts, loc, attn = make_inputs(rng, 2, [(5, 3), (2, 2)], 2, 4, 6, 2)
    g = rng.standard_normal((2, 6, 8))
    out = sg.ms_deform_attn(value, shapes, starts, loc, attn)
    grads = sg.ms_deform_attn_backward(value, shapes, starts, loc, attn, g)
    for sh, st in [(shapes.astype(np.int32), starts.astype(np.int32)), (shapes.tolist(), starts.tolist()),
                   (shapes.astype(np.int32), starts)]:
        np.testing.assert_array_equal(sg.ms_deform_attn(value, sh, st, loc, attn), out)
        for a, b in zip(sg.ms_deform_attn_backward(value, sh, st, loc, attn, g), grads):
            np.testing.assert_array_equal(a, b)


def test_strided_inputs_give_identical_bits(rng):
    value, shapes, starts, loc, attn = make_inputs(rng, 2, [(6, 5), (3, 3)], 3, 6, 7, 3)
    g = rng.standard_normal((2, 7, 18))
    out = sg.ms_deform_attn(value, shapes, starts, loc, attn)
    grads = sg.ms_deform_attn_backward(value, shapes, starts, loc, attn, g)
    variants = [
        (negative_strided(value, 3), loc, attn, g),
        (non_contiguous(value), non_contiguous(loc), non_contiguous(attn), non_contiguous(g)),
        (np.asfortranarray(value), negative_strided(loc, 1), negative_strided(attn, 4), negative_strided(g, 2)),
        (value.transpose(0, 2, 1, 3).copy().transpose(0, 2, 1, 3), np.asfortranarray(loc), attn, np.asfortranarray(g)),
    ]
    shape_variants = [(shapes, starts), (np.asfortranarray(shapes), negative_strided(starts, 0)),
                      (non_contiguous(shapes), non_contiguous(starts))]
    for (v, l, a, gg), (sh, st) in zip(variants, shape_variants * 2):
        np.testing.assert_array_equal(sg.ms_deform_attn(v, sh, st, l, a), out)
        for actual, expected in zip(sg.ms_deform_attn_backward(v, sh, st, l, a, gg), grads):
            assert actual.flags.c_contiguous
            np.testing.assert_array_equal(actual, expected)


@pytest.mark.parametrize("bs, heads, channels, queries, points, shapes", [
    (0, 2, 3, 4, 2, [(3, 4)]), (2, 2, 3, 0, 2, [(3, 4), (1, 2)]), (2, 2, 0, 4, 2, [(3, 4)]),
    (2, 2, 3, 4, 0, [(3, 4)]), (2, 0, 3, 4, 2, [(3, 4)]), (2, 2, 3, 4, 2, []),
])
def test_empty_inputs_give_zero_filled_shaped_outputs(bs, heads, channels, queries, points, shapes, rng):
    value, sh, st, loc, attn = make_inputs(rng, bs, shapes, heads, channels, queries, points, np.float32)
    out = sg.ms_deform_attn(value, sh, st, loc, attn)
    assert out.shape == (bs, queries, heads * channels) and out.dtype == np.float32 and not out.any()
    g = np.ones(out.shape, np.float32)
    gv, gl, ga = sg.ms_deform_attn_backward(value, sh, st, loc, attn, g)
    for grad, ref in [(gv, value), (gl, loc), (ga, attn)]:
        assert grad.shape == ref.shape and grad.dtype == np.float32 and not grad.any()


# 20 queries sweep the value slices at 0.18 points per pixel: read where they are; 300 at 2.7: packed first.
@pytest.mark.parametrize("queries", [20, 300])
def test_threads_do_not_change_bits(queries, rng):
    value, shapes, starts, loc, attn = make_inputs(rng, 2, [(32, 32), (16, 16), (8, 8)], 8, 16, queries, 4,
                                                   np.float32)
    g = rng.standard_normal((2, queries, 128)).astype(np.float32)
    same_bits_for_thread_counts(lambda: (sg.ms_deform_attn(value, shapes, starts, loc, attn),
                                         *sg.ms_deform_attn_backward(value, shapes, starts, loc, attn, g)), (1, 2, 3))


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
def test_few_and_many_queries_give_the_same_bits_per_query(dtype, rng):
    # Issue 31: few points read value where it is, many copy each (batch, head) slice into a padded buffer
    # first (docs/design.md, "ms_deform_attn: packed or direct"); both give the same bits. A query's output
    # row and its points' gradients do not depend on the other queries, so the first 10 queries of a call
    # with 10 queries (0.2 points per pixel: direct) and of one with 2000 (38 per pixel: packed) must agree.
    value, shapes, starts, loc, attn = make_inputs(rng, 2, [(24, 20), (12, 10), (6, 5)], 4, 32, 2000, 4, dtype)
    g = rng.standard_normal((2, 2000, 128)).astype(dtype)
    few = (loc[:, :10], attn[:, :10])
    out_few = sg.ms_deform_attn(value, shapes, starts, *few)
    out_many = sg.ms_deform_attn(value, shapes, starts, loc, attn)
    assert out_few.tobytes() == out_many[:, :10].tobytes()
    _, gl_few, ga_few = sg.ms_deform_attn_backward(value, shapes, starts, *few, g[:, :10])
    _, gl_many, ga_many = sg.ms_deform_attn_backward(value, shapes, starts, loc, attn, g)
    assert gl_few.tobytes() == gl_many[:, :10].tobytes()
    assert ga_few.tobytes() == ga_many[:, :10].tobytes()


def test_cost_follows_the_points_not_the_value(rng):
    # Issue 31: the forward copied every (batch, head) slice of value into a padded buffer whatever the
    # number of queries (one query on Deformable-DETR's levels: 3.6 ms, PyTorch 0.42 ms), and the backward
    # also zeroed and copied back a gradient buffer. With the points fixed, a level 256 times larger may only
    # add the compulsory zero-filling of grad_value; with the level fixed, time grows with the points. One
    # thread, best of several runs, and margins of 4x, so that a loaded machine does not fail the test.
    previous = sg.get_num_threads()
    sg.set_num_threads(1)
    try:
        def inputs(level, queries):
            shapes, starts, spatial = level_tables([level])
            value = rng.standard_normal((1, spatial, 4, 32), dtype=np.float32)
            loc = rng.uniform(0, 1, (1, queries, 4, 1, 4, 2)).astype(np.float32)
            attn = rng.uniform(0, 1, (1, queries, 4, 1, 4)).astype(np.float32)
            return value, shapes, starts, loc, attn

        small, large = inputs((16, 16), 10), inputs((256, 256), 10)
        g = rng.standard_normal((1, 10, 128)).astype(np.float32)
        forward = [best_cpu_seconds(lambda a=a: sg.ms_deform_attn(*a)) for a in (small, large)]
        assert forward[1] < 4 * forward[0] + 2e-3, forward
        fill = best_cpu_seconds(lambda: np.zeros_like(large[0]).fill(1))
        backward = [best_cpu_seconds(lambda a=a: sg.ms_deform_attn_backward(*a, g)) for a in (small, large)]
        assert backward[1] < 4 * (backward[0] + fill) + 2e-3, (backward, fill)
        more = inputs((16, 16), 160)  # 16x the points
        grown = best_cpu_seconds(lambda: sg.ms_deform_attn(*more))
        assert grown < 4 * 16 * forward[0] + 2e-3, (grown, forward)
    finally:
        sg.set_num_threads(previous)


def test_ascend_device_limits_are_not_errors(rng):
    # C % 8 != 0, C > 256, nH > 16, P > 16, L > 16: the NPU refuses these, the CPU does not.
    value, shapes, starts, loc, attn = make_inputs(rng, 1, [(1, 2)] * 17, 17, 257, 2, 17, np.float32)
    out = sg.ms_deform_attn(value, shapes, starts, loc, attn)
    assert out.shape == (1, 2, 17 * 257) and out.any()


# ---- validation: every rule of docs/operators.md (Multi-scale deformable attention) plus the checks the NPU leaves out ------------------------------------

def valid_inputs():
    shapes, starts, _ = level_tables([(4, 4), (2, 2)])
    return dict(value=np.zeros((2, 20, 3, 4), np.float32), spatial_shapes=shapes, level_start_index=starts,
                sampling_locations=np.zeros((2, 5, 3, 2, 2, 2), np.float32),
                attention_weights=np.zeros((2, 5, 3, 2, 2), np.float32))


def call_both(error, message, **changes):
    """Both directions reject the inputs changed by `changes` with `error` and `message`."""
    args = valid_inputs()
    args.update(changes)
    with pytest.raises(error, match=r"ms_deform_attn\(\): " + message):
        sg.ms_deform_attn(**args)
    with pytest.raises(error, match=r"ms_deform_attn_backward\(\): " + message):
        sg.ms_deform_attn_backward(**args, grad_output=np.zeros((2, 5, 12), np.float32))


def test_valid_inputs_pass():
    args = valid_inputs()
    assert sg.ms_deform_attn(**args).shape == (2, 5, 12)
    sg.ms_deform_attn_backward(**args, grad_output=np.zeros((2, 5, 12), np.float32))


@pytest.mark.parametrize("changes, message", [
    (dict(value=np.zeros((2, 20, 12), np.float32)), r"expected value to be 4-D, but got 3-D tensor of shape \(2, 20, 12\)"),
    (dict(spatial_shapes=np.array([4, 4, 2, 2])), r"expected spatial_shapes to be 2-D, but got 1-D"),
    (dict(spatial_shapes=np.array([[4, 4, 1], [2, 2, 1]])), r"expected spatial_shapes of shape \(L, 2\), but got \(2, 3\)"),
    (dict(level_start_index=np.array([[0], [16]])), r"expected level_start_index to be 1-D, but got 2-D"),
    (dict(sampling_locations=np.zeros((2, 5, 3, 2, 4), np.float32)), r"expected sampling_locations to be 6-D, but got 5-D"),
    (dict(sampling_locations=np.zeros((2, 5, 3, 2, 2, 3), np.float32)),
     r"expected sampling_locations of shape \(bs, Q, nH, L, P, 2\), but got last dimension 3"),
    (dict(attention_weights=np.zeros((2, 5, 3, 4), np.float32)), r"expected attention_weights to be 5-D, but got 4-D"),
])
def test_rank_errors(changes, message):
    call_both(ValueError, message, **changes)


@pytest.mark.parametrize("changes, message", [
    (dict(sampling_locations=np.zeros((3, 5, 3, 2, 2, 2), np.float32)),
     r"expected sampling_locations of shape \(bs, Q, nH, L, P, 2\) = \(2, 5, 3, 2, 2, 2\) \(bs, nH from value, "
     r"L from spatial_shapes\), but got \(3, 5, 3, 2, 2, 2\)"),
    (dict(sampling_locations=np.zeros((2, 5, 4, 2, 2, 2), np.float32)), r"expected sampling_locations of shape .* but got \(2, 5, 4,"),
    (dict(sampling_locations=np.zeros((2, 5, 3, 3, 2, 2), np.float32)), r"expected sampling_locations of shape .* but got \(2, 5, 3, 3,"),
    (dict(attention_weights=np.zeros((2, 6, 3, 2, 2), np.float32)),
     r"expected attention_weights of shape \(bs, Q, nH, L, P\) = \(2, 5, 3, 2, 2\) \(the first five dimensions of "
     r"sampling_locations\), but got \(2, 6, 3, 2, 2\)"),
    (dict(attention_weights=np.zeros((2, 5, 3, 2, 3), np.float32)), r"expected attention_weights of shape .* but got \(2, 5, 3, 2, 3\)"),
    (dict(level_start_index=np.array([0, 16, 20])),
     r"expected level_start_index of shape \(L,\) = \(2,\) \(one entry per level of spatial_shapes\), but got \(3,\)"),
])
def test_inconsistent_size_errors(changes, message):
    call_both(ValueError, message, **changes)


@pytest.mark.parametrize("changes, message", [
    (dict(spatial_shapes=np.array([[4, 4], [0, 2]])), r"expected spatial_shapes entries \(H, W\) >= 1, but got \(0, 2\) at level 1"),
    (dict(spatial_shapes=np.array([[4, -4], [2, 2]])), r"expected spatial_shapes entries \(H, W\) >= 1, but got \(4, -4\) at level 0"),
    (dict(spatial_shapes=np.array([[4, 4], [2, 3]])),
     r"expected value.shape\[1\] to be 22 \(the sum of H\*W over spatial_shapes\), but got 20"),
    (dict(value=np.zeros((2, 21, 3, 4), np.float32)), r"expected value.shape\[1\] to be 20 .* but got 21"),
    (dict(level_start_index=np.array([0, 15])),
     r"expected level_start_index\[1\] to be 16 \(the sum of H\*W over the levels before it\), but got 15"),
    (dict(level_start_index=np.array([1, 17])), r"expected level_start_index\[0\] to be 0 .* but got 1"),
])
def test_level_table_errors(changes, message):
    call_both(ValueError, message, **changes)


def test_level_area_overflow():
    call_both(OverflowError, r"expected sizes whose product fits in int64",
              spatial_shapes=np.array([[2**32, 2**32], [2, 2]]))


@pytest.mark.parametrize("changes, message", [
    (dict(value=np.zeros((2, 20, 3, 4), np.int32)), r"expected value to be float16, bfloat16, float32 or float64, but got int32"),
    (dict(value=np.zeros((2, 20, 3, 4), np.int16)), r"expected value to be a NumPy array of float16, bfloat16, float32 or float64 .*int16"),
    (dict(sampling_locations=np.zeros((2, 5, 3, 2, 2, 2))),
     r"expected sampling_locations to have the dtype of value \(float32\), but got float64"),
    (dict(attention_weights=np.zeros((2, 5, 3, 2, 2))),
     r"expected attention_weights to have the dtype of value \(float32\), but got float64"),
    (dict(spatial_shapes=np.array([[4, 4], [2, 2]], np.float32)), r"expected spatial_shapes to be int32 or int64, but got float32"),
    (dict(spatial_shapes=np.array([[4, 4], [2, 2]], np.int16)), r"expected spatial_shapes to be int32 or int64, but got int16"),
    (dict(spatial_shapes=np.array([[4, 4], [2, 2]], np.uint64)), r"expected spatial_shapes to be int32 or int64, but got uint64"),
    (dict(level_start_index=np.array([0, 16], np.float64)), r"expected level_start_index to be int32 or int64, but got float64"),
    (dict(level_start_index=np.array([0, 16], np.uint8)), r"expected level_start_index to be int32 or int64, but got uint8"),
])
def test_dtype_errors(changes, message):
    call_both(TypeError, message, **changes)


def test_grad_output_errors():
    args = valid_inputs()
    with pytest.raises(ValueError, match=r"ms_deform_attn_backward\(\): expected grad_output to be 3-D, but got 4-D"):
        sg.ms_deform_attn_backward(**args, grad_output=np.zeros((2, 5, 3, 4), np.float32))
    with pytest.raises(ValueError, match=r"expected grad_output of shape \(bs, Q, nH\*C\) = \(2, 5, 12\), but got \(2, 5, 13\)"):
        sg.ms_deform_attn_backward(**args, grad_output=np.zeros((2, 5, 13), np.float32))
    with pytest.raises(ValueError, match=r"expected grad_output of shape .* but got \(2, 4, 12\)"):
        sg.ms_deform_attn_backward(**args, grad_output=np.zeros((2, 4, 12), np.float32))
    with pytest.raises(TypeError, match=r"expected grad_output to have the dtype of value \(float32\), but got float64"):
        sg.ms_deform_attn_backward(**args, grad_output=np.zeros((2, 5, 12)))
    with pytest.raises(TypeError, match=r"expected grad_output to be a NumPy array of float16, bfloat16, float32 or float64"):
        sg.ms_deform_attn_backward(**args, grad_output=np.zeros((2, 5, 12), np.complex64))
