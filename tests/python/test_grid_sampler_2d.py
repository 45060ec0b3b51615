import itertools

import numpy as np
import pytest

import spatialgrad as sg
from helpers import (assert_adjoint, best_cpu_seconds, finite_difference, negative_strided, non_contiguous,
                     requires_torch, same_bits_for_thread_counts, tol, torch)

MODES = ["bilinear", "nearest", "bicubic"]
PADDINGS = ["zeros", "border", "reflection"]
COMBOS = list(itertools.product(range(3), range(3), [False, True]))
COMBO_IDS = [f"{MODES[m]}-{PADDINGS[p]}-{'align' if a else 'noalign'}" for m, p, a in COMBOS]


def torch_forward(x, grid, mode, padding, align):
    return torch.ops.aten.grid_sampler_2d(torch.from_numpy(x), torch.from_numpy(grid), mode, padding, align).numpy()


def torch_backward(g, x, grid, mode, padding, align, mask=(True, True)):
    gi, gg = torch.ops.aten.grid_sampler_2d_backward(torch.from_numpy(g), torch.from_numpy(x), torch.from_numpy(grid),
                                                     mode, padding, align, list(mask))
    return (gi.numpy() if mask[0] else None), (gg.numpy() if mask[1] else None)


def grad_tol(dtype, ref):
    """Grid gradients sum C products scaled by W/2: compare relative to their magnitude."""
    scale = float(np.abs(ref).max()) if ref.size else 1.0
    if np.dtype(dtype) == np.float64:
        return dict(rtol=1e-10, atol=1e-12 * max(scale, 1.0))
    return dict(rtol=1e-4, atol=2e-6 * max(scale, 1.0))


# ---- parity with torch.ops.aten (all 18 combinations, float64 and float32) -------------------------------

@requires_torch
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("mode, padding, align", COMBOS, ids=COMBO_IDS)
def test_parity_with_torch(mode, padding, align, dtype, rng):
    for in_shape, out_hw in [((2, 3, 5, 7), (4, 6)), ((1, 4, 1, 1), (3, 2)), ((3, 2, 9, 4), (11, 13)),
                             ((2, 5, 16, 16), (20, 18))]:
        n, c = in_shape[:2]
        x = rng.standard_normal(in_shape).astype(dtype)
        grid = rng.uniform(-1.3, 1.3, (n, *out_hw, 2)).astype(dtype)
        g = rng.standard_normal((n, c, *out_hw)).astype(dtype)
        y = sg.grid_sample(x, grid, mode, padding, align)
        gi, gg = sg.grid_sampler_2d_backward(g, x, grid, mode, padding, align)
        y_ref = torch_forward(x, grid, mode, padding, align)
        gi_ref, gg_ref = torch_backward(g, x, grid, mode, padding, align)
        assert y.dtype == gi.dtype == gg.dtype == dtype
        msg = str((in_shape, out_hw))
        np.testing.assert_allclose(y, y_ref, **tol(dtype), err_msg=msg)
        np.testing.assert_allclose(gi, gi_ref, **tol(dtype), err_msg=msg)
        np.testing.assert_allclose(gg, gg_ref, **grad_tol(dtype, gg_ref), err_msg=msg)


@requires_torch
@pytest.mark.parametrize("seed", range(4))
def test_parity_with_torch_random_shapes(seed):
    rng = np.random.default_rng(seed)
    for _ in range(12):
        mode, padding, align = int(rng.integers(3)), int(rng.integers(3)), bool(rng.integers(2))
        dtype = [np.float32, np.float64][int(rng.integers(2))]
        n, c, h, w = (int(v) for v in rng.integers(1, [4, 6, 20, 20]))
        ho, wo = (int(v) for v in rng.integers(1, 40, size=2))
        x = rng.standard_normal((n, c, h, w)).astype(dtype)
        grid = rng.uniform(-2.5, 2.5, (n, ho, wo, 2)).astype(dtype)
        g = rng.standard_normal((n, c, ho, wo)).astype(dtype)
        msg = str((mode, padding, align, dtype, (n, c, h, w), (ho, wo)))
        np.testing.assert_allclose(sg.grid_sample(x, grid, mode, padding, align), torch_forward(x, grid, mode, padding, align),
                                   **tol(dtype), err_msg=msg)
        gi, gg = sg.grid_sampler_2d_backward(g, x, grid, mode, padding, align)
        gi_ref, gg_ref = torch_backward(g, x, grid, mode, padding, align)
        np.testing.assert_allclose(gi, gi_ref, **tol(dtype), err_msg=msg)
        np.testing.assert_allclose(gg, gg_ref, **grad_tol(dtype, gg_ref), err_msg=msg)


@requires_torch
@pytest.mark.parametrize("align", [False, True])
def test_nearest_picks_torchs_pixel_at_exact_half_pixels(align):
    # affine-style grids land on exact half pixels, where round-half-to-even decides.
    x = np.arange(2 * 6 * 8, dtype=np.float32).reshape(1, 2, 6, 8)
    for wo in [16, 15, 9, 4]:
        xs = np.linspace(-1, 1, wo, dtype=np.float32)
        ys = np.linspace(-1, 1, 7, dtype=np.float32)
        grid = np.stack(np.meshgrid(xs, ys), -1)[None].astype(np.float32)
        for padding in range(3):
            np.testing.assert_array_equal(sg.grid_sample(x, grid, "nearest", padding, align),
                                          torch_forward(x, grid, 1, padding, align))


@requires_torch
def test_parity_at_standard_shape_float32(rng):
    x = rng.standard_normal((8, 32, 64, 64)).astype(np.float32)
    grid = rng.uniform(-1.1, 1.1, (8, 64, 64, 2)).astype(np.float32)
    g = rng.standard_normal((8, 32, 64, 64)).astype(np.float32)
    np.testing.assert_allclose(sg.grid_sample(x, grid), torch_forward(x, grid, 0, 0, False), **tol(np.float32))
    gi, gg = sg.grid_sampler_2d_backward(g, x, grid)
    gi_ref, gg_ref = torch_backward(g, x, grid, 0, 0, False)
    np.testing.assert_allclose(gi, gi_ref, **tol(np.float32))
    np.testing.assert_allclose(gg, gg_ref, **grad_tol(np.float32, gg_ref))


# ---- adjoint and finite differences ----------------------------------------------------------------------

@pytest.mark.parametrize("mode, padding, align", COMBOS, ids=COMBO_IDS)
def test_adjoint_input_grad(mode, padding, align, rng):
    x = rng.standard_normal((2, 3, 7, 6))
    grid = rng.uniform(-1.4, 1.4, (2, 5, 9, 2))
    g = rng.standard_normal((2, 3, 5, 9))
    assert_adjoint(lambda v: sg.grid_sample(v, grid, mode, padding, align),
                   lambda v: sg.grid_sampler_2d_backward(v, x, grid, mode, padding, align, (True, False))[0], x, g)


def smooth_grid(rng, shape, H, W, padding, align):
    """Grid values whose pixel coordinates stay >= 0.15 px away from integers (bilinear and bicubic kinks) and,
    for reflection without align_corners, from half integers (the reflection edges)."""
    def axis(size, count):
        if padding == 0:
            whole = rng.integers(-2, size + 1, count)
        elif padding == 1:
            whole = rng.integers(0, max(size - 1, 1), count)  # inside the clip range
        else:
            whole = rng.integers(-2 * size, 3 * size, count)  # several reflections
        frac = rng.uniform(0.15, 0.35, count) + 0.5 * rng.integers(0, 2, count)
        u = whole + frac
        return (2 * u / (size - 1) - 1) if align else ((2 * u + 1) / size - 1)

    n, ho, wo = shape
    count = n * ho * wo
    return np.stack([axis(W, count), axis(H, count)], -1).reshape(n, ho, wo, 2)


@pytest.mark.parametrize("mode", [0, 2], ids=["bilinear", "bicubic"])
@pytest.mark.parametrize("padding", range(3), ids=PADDINGS)
@pytest.mark.parametrize("align", [False, True])
def test_finite_differences_grid_grad(mode, padding, align, rng):
    H, W = 6, 7
    x = rng.standard_normal((2, 3, H, W))
    grid = smooth_grid(rng, (2, 4, 5), H, W, padding, align)
    g = rng.standard_normal((2, 3, 4, 5))
    _, gg = sg.grid_sampler_2d_backward(g, x, grid, mode, padding, align, (False, True))
    idx = np.arange(grid.size)
    numeric = finite_difference(lambda v: sg.grid_sample(x, v, mode, padding, align), grid, g, idx)
    np.testing.assert_allclose(gg.reshape(-1), numeric, rtol=1e-6, atol=1e-7)
    if padding == 1:
        assert np.any(gg != 0)


def test_nearest_grid_grad_is_zero(rng):
    x = rng.standard_normal((2, 3, 5, 5))
    grid = rng.uniform(-1.2, 1.2, (2, 4, 4, 2))
    gi, gg = sg.grid_sampler_2d_backward(rng.standard_normal((2, 3, 4, 4)), x, grid, "nearest")
    assert gg.shape == grid.shape and not gg.any() and gi.any()


# ---- modes, output_mask, strides, empty tensors, threads -----------------------------------------------

def test_mode_names_and_integers_are_equivalent(rng):
    x = rng.standard_normal((1, 2, 5, 6))
    grid = rng.uniform(-1.2, 1.2, (1, 3, 4, 2))
    g = rng.standard_normal((1, 2, 3, 4))
    for (i, m), (j, p) in itertools.product(enumerate(MODES), enumerate(PADDINGS)):
        np.testing.assert_array_equal(sg.grid_sample(x, grid, m, p), sg.grid_sample(x, grid, i, j))
        np.testing.assert_array_equal(sg.grid_sample(x, grid, m, p), sg.grid_sample(x, grid, np.int64(i), np.int32(j)))
        for a, b in zip(sg.grid_sampler_2d_backward(g, x, grid, m, p), sg.grid_sampler_2d_backward(g, x, grid, i, j)):
            np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(sg.grid_sample(x, grid), sg.grid_sample(x, grid, "bilinear", "zeros", False))


@pytest.mark.parametrize("bad", ["linear", "Bilinear", "", 3, -1, 1.0, None, True, (0,)])
def test_bad_mode_values(bad):
    x, grid = np.zeros((1, 1, 2, 2)), np.zeros((1, 1, 1, 2))
    with pytest.raises(ValueError, match=r"grid_sample\(\): expected mode to be one of 'bilinear' \(0\), 'nearest' \(1\), "
                                         r"'bicubic' \(2\), but got"):
        sg.grid_sample(x, grid, mode=bad)
    with pytest.raises(ValueError, match=r"expected padding_mode to be one of 'zeros' \(0\), 'border' \(1\), "
                                         r"'reflection' \(2\), but got"):
        sg.grid_sample(x, grid, padding_mode=bad)
    with pytest.raises(ValueError, match=r"grid_sampler_2d_backward\(\): expected mode to be one of"):
        sg.grid_sampler_2d_backward(np.zeros((1, 1, 1, 1)), x, grid, mode=bad)


def test_output_mask_returns_none_for_unrequested(rng):
    x = rng.standard_normal((2, 3, 5, 6))
    grid = rng.uniform(-1.2, 1.2, (2, 4, 3, 2))
    g = rng.standard_normal((2, 3, 4, 3))
    for mode in MODES:
        gi, gg = sg.grid_sampler_2d_backward(g, x, grid, mode)
        gi_only = sg.grid_sampler_2d_backward(g, x, grid, mode, output_mask=(True, False))
        gg_only = sg.grid_sampler_2d_backward(g, x, grid, mode, output_mask=[False, True])
        assert gi_only[1] is None and gg_only[0] is None
        np.testing.assert_array_equal(gi_only[0], gi)
        np.testing.assert_array_equal(gg_only[1], gg)
        assert sg.grid_sampler_2d_backward(g, x, grid, mode, output_mask=(False, False)) == (None, None)


def test_strided_inputs_need_no_copy_and_match(rng):
    x = rng.standard_normal((2, 3, 8, 9))
    grid = rng.uniform(-1.2, 1.2, (2, 5, 7, 2))
    g = rng.standard_normal((2, 3, 5, 7))
    for mode, padding in itertools.product(range(3), range(3)):
        y = sg.grid_sample(x, grid, mode, padding)
        gi, gg = sg.grid_sampler_2d_backward(g, x, grid, mode, padding)
        grid_planar = np.ascontiguousarray(grid.transpose(0, 3, 1, 2)).transpose(0, 2, 3, 1)  # (N, 2, Ho, Wo) storage
        for xv in [x, negative_strided(x, 3), negative_strided(x, 1), non_contiguous(x), np.asfortranarray(x)]:
            for gridv in [grid, negative_strided(grid, 3), grid_planar, np.asfortranarray(grid)]:
                np.testing.assert_array_equal(sg.grid_sample(xv, gridv, mode, padding), y)
                for gv in [g, negative_strided(g, 2)]:
                    gi2, gg2 = sg.grid_sampler_2d_backward(gv, xv, gridv, mode, padding)
                    np.testing.assert_array_equal(gi2, gi)
                    np.testing.assert_array_equal(gg2, gg)
        assert y.flags.c_contiguous and gi.flags.c_contiguous and gg.flags.c_contiguous


def test_empty_tensors_give_shaped_zero_results(rng):
    for in_shape, grid_shape in [((0, 3, 4, 4), (0, 2, 2, 2)), ((2, 0, 4, 4), (2, 3, 5, 2)), ((2, 3, 4, 4), (2, 0, 5, 2)),
                                 ((2, 3, 4, 4), (2, 5, 0, 2))]:
        x = rng.standard_normal(in_shape).astype(np.float32)
        grid = rng.uniform(-1, 1, grid_shape).astype(np.float32)
        y = sg.grid_sample(x, grid)
        assert y.shape == (in_shape[0], in_shape[1], grid_shape[1], grid_shape[2]) and y.dtype == np.float32
        for mode in MODES:
            gi, gg = sg.grid_sampler_2d_backward(np.ones(y.shape, np.float32), x, grid, mode)
            assert gi.shape == in_shape and gg.shape == grid_shape
            assert not gi.any() and not gg.any()


def test_one_by_one_input(rng):
    x = rng.standard_normal((1, 2, 1, 1))
    grid = np.zeros((1, 1, 1, 2))
    for mode in MODES:
        for padding in PADDINGS:
            np.testing.assert_allclose(sg.grid_sample(x, grid, mode, padding, True)[..., 0, 0], x[..., 0, 0])


@pytest.mark.parametrize("n", [1, 3, 8])
def test_threads_do_not_change_bits(n, rng):
    x = rng.standard_normal((n, 12, 21, 19)).astype(np.float32)
    grid = rng.uniform(-1.2, 1.2, (n, 33, 35, 2)).astype(np.float32)
    g = rng.standard_normal((n, 12, 33, 35)).astype(np.float32)
    for mode, padding in [(0, 0), (0, 2), (1, 1), (2, 0), (2, 1)]:
        same_bits_for_thread_counts(lambda: (sg.grid_sample(x, grid, mode, padding),
                                             *sg.grid_sampler_2d_backward(g, x, grid, mode, padding)), (1, 2, 3))


def test_single_batch_uses_threads_and_stays_exact(rng):
    # N = 1: the backward splits points (grid gradient) and channels (input gradient) across the threads.
    x = rng.standard_normal((1, 32, 64, 64)).astype(np.float32)
    grid = rng.uniform(-1.1, 1.1, (1, 64, 64, 2)).astype(np.float32)
    g = rng.standard_normal((1, 32, 64, 64)).astype(np.float32)
    same_bits_for_thread_counts(lambda: (sg.grid_sample(x, grid), *sg.grid_sampler_2d_backward(g, x, grid)))


# ---- NaN / Inf / huge grid values ----------------------------------------------------------------------

BAD_VALUES = [np.nan, np.inf, -np.inf, 1e30, -1e30]


def torch_defines(mode, padding, value):
    """torch 1.13's CPU backward reads out of bounds for bilinear border/reflection with NaN (and Inf for
    reflection); everything else it computes deterministically."""
    if mode != 0 or padding == 0:
        return True
    return np.isfinite(value) or (padding == 1 and not np.isnan(value))


@requires_torch
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("mode, padding, align", COMBOS, ids=COMBO_IDS)
def test_non_finite_grid_values_match_torch(mode, padding, align, dtype, rng):
    x = rng.standard_normal((1, 2, 4, 5)).astype(dtype)
    for value in BAD_VALUES:
        if padding == 2 and np.isfinite(value):
            continue  # see test_reflection_of_huge_coordinates_is_exact
        grid = rng.uniform(-1.2, 1.2, (1, 3, 4, 2)).astype(dtype)
        grid[0, 0, 1, 0] = value
        grid[0, 1, 2, 1] = value
        grid[0, 2, 3] = value
        g = rng.standard_normal((1, 2, 3, 4)).astype(dtype)
        np.testing.assert_allclose(sg.grid_sample(x, grid, mode, padding, align), torch_forward(x, grid, mode, padding, align),
                                   **tol(dtype), err_msg=str(value))
        gi, gg = sg.grid_sampler_2d_backward(g, x, grid, mode, padding, align)
        if torch_defines(mode, padding, value):
            gi_ref, gg_ref = torch_backward(g, x, grid, mode, padding, align)
            np.testing.assert_allclose(gi, gi_ref, **tol(dtype), err_msg=str(value))
            np.testing.assert_allclose(gg, gg_ref, **grad_tol(dtype, np.nan_to_num(gg_ref)), err_msg=str(value))
        else:
            # Our choice where torch is undefined: the coordinate clamps like the forward's (so input_grad
            # stays the adjoint of the forward) and its gradient is 0.
            assert np.isfinite(gi).all()
            assert gg[0, 0, 1, 0] == 0 and gg[0, 1, 2, 1] == 0 and not gg[0, 2, 3].any()
            x64, grid64 = x.astype(np.float64), grid.astype(np.float64)
            assert_adjoint(lambda v: sg.grid_sample(v, grid64, mode, padding, align),
                           lambda v: sg.grid_sampler_2d_backward(v, x64, grid64, mode, padding, align, (True, False))[0],
                           x64, g.astype(np.float64))


def test_reflection_of_huge_coordinates_is_exact():
    # the contract's reflection takes an exact fmod; torch's CPU kernel computes |x| - trunc(|x| / 2span) * 2span,
    # which has no correct digits left at 1e30. Check against exact rational arithmetic instead.
    from fractions import Fraction

    W = 5
    x = np.arange(1, W + 1, dtype=np.float64).reshape(1, 1, 1, W)  # value = 1 + column: interpolation is exact
    for align in [False, True]:
        for gx in [1e30, -1e30, 3.0e17 + 64, 2.0 ** 70 + 2.0 ** 20]:
            u = (gx + 1) * ((W - 1) / 2) if align else (gx + 1) * (W / 2) - 0.5  # the kernel's unnormalise
            low, span = (Fraction(0), Fraction(W - 1)) if align else (Fraction(-1, 2), Fraction(W))
            r = Fraction(abs(u - float(low))) % (2 * span)  # in = |ix - low| rounds once, as the contract's formula does
            coord = float(min(max((r if r <= span else 2 * span - r) + low, 0), W - 1))
            y = sg.grid_sample(x, np.array([[[[gx, 0.0]]]]), "bilinear", "reflection", align)
            np.testing.assert_allclose(y[0, 0, 0, 0], 1 + coord, rtol=1e-12, err_msg=str((align, gx)))


# ---- validation: one test per rule of docs/operators.md (Grid sampling) ----------------------------------------------------------

X = np.zeros((2, 3, 4, 5), np.float32)
GRID = np.zeros((2, 6, 7, 2), np.float32)
G = np.zeros((2, 3, 6, 7), np.float32)


def both(fn_forward, fn_backward, error, message):
    with pytest.raises(error, match=message):
        fn_forward()
    with pytest.raises(error, match=message):
        fn_backward()


def test_mode_range_errors_from_the_core():
    from spatialgrad import _core

    with pytest.raises(ValueError, match=r"grid_sampler_2d\(\): expected interpolation_mode in \{0 \(bilinear\), "
                                         r"1 \(nearest\), 2 \(bicubic\)\}, but got 3"):
        _core.grid_sampler_2d(X, GRID, 3, 0, False)
    with pytest.raises(ValueError, match=r"grid_sampler_2d_backward\(\): expected padding_mode in \{0 \(zeros\), "
                                         r"1 \(border\), 2 \(reflection\)\}, but got -1"):
        _core.grid_sampler_2d_backward(G, X, GRID, 0, -1, False, [True, True])


def test_rank_errors():
    both(lambda: sg.grid_sample(X[0], GRID), lambda: sg.grid_sampler_2d_backward(G, X[0], GRID), ValueError,
         r"expected input to be 4-D \(N, C, H, W\), but got 3-D shape \(3, 4, 5\)")
    both(lambda: sg.grid_sample(X, GRID[0]), lambda: sg.grid_sampler_2d_backward(G, X, GRID[0]), ValueError,
         r"expected grid to be 4-D \(N, Ho, Wo, 2\), but got 3-D shape \(6, 7, 2\)")
    with pytest.raises(ValueError, match=r"grid_sampler_2d_backward\(\): expected grad_output to be 4-D, but got 3-D"):
        sg.grid_sampler_2d_backward(G[0], X, GRID)


def test_batch_size_errors():
    both(lambda: sg.grid_sample(X, GRID[:1]), lambda: sg.grid_sampler_2d_backward(G, X, GRID[:1]), ValueError,
         r"expected grid to have the batch size of input \(2\), but got 1")
    with pytest.raises(ValueError, match=r"expected grad_output to have the batch size of input \(2\), but got 1"):
        sg.grid_sampler_2d_backward(G[:1], X, GRID)


def test_channel_error():
    with pytest.raises(ValueError, match=r"expected grad_output to have the channels of input \(3\), but got 2"):
        sg.grid_sampler_2d_backward(G[:, :2], X, GRID)


def test_grad_output_spatial_size_error():
    with pytest.raises(ValueError, match=r"expected grad_output's spatial size to equal grid's \(Ho, Wo\) = \(6, 7\), "
                                         r"but got \(6, 6\)"):
        sg.grid_sampler_2d_backward(G[..., :6], X, GRID)


def test_grid_last_dimension_error():
    grid3 = np.zeros((2, 6, 7, 3), np.float32)
    both(lambda: sg.grid_sample(X, grid3), lambda: sg.grid_sampler_2d_backward(G, X, grid3), ValueError,
         r"expected grid's last dimension to be 2 \(x, y\), but got grid of shape \(2, 6, 7, 3\)")


def test_empty_input_plane_error():
    for shape in [(2, 3, 0, 5), (2, 3, 4, 0)]:
        empty = np.zeros(shape, np.float32)
        both(lambda: sg.grid_sample(empty, GRID), lambda: sg.grid_sampler_2d_backward(G, empty, GRID), ValueError,
             r"expected input to have non-empty spatial dimensions \(H, W\), but got input of shape")


def test_output_mask_errors():
    with pytest.raises(ValueError, match=r"expected output_mask to have 2 entries \(grad_input, grad_grid\), but got 3"):
        sg.grid_sampler_2d_backward(G, X, GRID, output_mask=(True, True, False))
    with pytest.raises(ValueError, match=r"expected output_mask to have 2 entries \(grad_input, grad_grid\), but got 1"):
        sg.grid_sampler_2d_backward(G, X, GRID, output_mask=(True,))
    with pytest.raises(TypeError, match=r"expected output_mask to be a sequence of 2 bools"):
        sg.grid_sampler_2d_backward(G, X, GRID, output_mask=True)


def test_dtype_errors():
    both(lambda: sg.grid_sample(X, GRID.astype(np.float64)),
         lambda: sg.grid_sampler_2d_backward(G, X, GRID.astype(np.float64)), TypeError,
         r"expected grid to have the dtype of (input|grad_output) \(float32\), but got float64")
    with pytest.raises(TypeError, match=r"expected input to have the dtype of grad_output \(float64\), but got float32"):
        sg.grid_sampler_2d_backward(G.astype(np.float64), X, GRID)
    with pytest.raises(TypeError, match=r"grid_sampler_2d\(\): expected input to be float16, bfloat16, float32 or float64, but got int64"):
        sg.grid_sample(X.astype(np.int64), GRID.astype(np.int64))
    with pytest.raises(TypeError, match=r"expected grid to be a NumPy array of float16, bfloat16, float32 or float64 .*complex128"):
        sg.grid_sample(X, GRID.astype(np.complex128))


def test_cost_follows_the_points_not_the_plane(rng):
    # Issue 31: a 64^2 crop from a 2048^2 image took 268 ms (PyTorch: 0.11 ms) because every run of points
    # packed the whole plane again. With the points fixed, a plane 256 times larger may only add the
    # compulsory zero-filling of the input gradient; with the plane fixed, time grows with the points. One
    # thread, best of several runs, and margins of 4x (the regression was 2000x), so that a loaded machine
    # does not fail the test.
    previous = sg.get_num_threads()
    sg.set_num_threads(1)
    try:
        grid = rng.uniform(-1, 1, (1, 64, 64, 2)).astype(np.float32)
        g = rng.standard_normal((1, 3, 64, 64)).astype(np.float32)
        small = rng.standard_normal((1, 3, 128, 128)).astype(np.float32)
        large = rng.standard_normal((1, 3, 2048, 2048)).astype(np.float32)
        forward = [best_cpu_seconds(lambda x=x: sg.grid_sample(x, grid)) for x in (small, large)]
        assert forward[1] < 4 * forward[0] + 2e-3, forward
        fill = best_cpu_seconds(lambda: np.zeros_like(large).fill(1))
        backward = [best_cpu_seconds(lambda x=x: sg.grid_sampler_2d_backward(g, x, grid)) for x in (small, large)]
        assert backward[1] < 4 * (backward[0] + fill) + 2e-3, (backward, fill)
        more = rng.uniform(-1, 1, (1, 256, 256, 2)).astype(np.float32)  # 16x the points
        grown = best_cpu_seconds(lambda: sg.grid_sample(small, more))
        assert grown < 4 * 16 * forward[0] + 2e-3, (grown, forward)
    finally:
        sg.set_num_threads(previous)
