import itertools

import numpy as np
import pytest

import spatialgrad as sg
from helpers import (ADDRESS_SPACE_PRELUDE, assert_adjoint, finite_difference, negative_strided, non_contiguous,
                     requires_torch, run_probe, same_bits_for_thread_counts, tol, torch)

if torch is not None:
    import torch.nn.functional as F


def settings():
    """Every combination of the pooling parameters on small odd and even sizes."""
    for k, s, p, ceil, cip, div in itertools.product(
        [1, 2, 3, (3, 2), (2, 4)], [None, 1, 2, (2, 3)], [0, 1, (1, 0)], [False, True], [False, True], [None, 3, -2]
    ):
        kk = (k, k) if isinstance(k, int) else k
        pp = (p, p) if isinstance(p, int) else p
        if pp[0] > kk[0] // 2 or pp[1] > kk[1] // 2:
            continue
        yield dict(kernel_size=k, stride=s, padding=p, ceil_mode=ceil, count_include_pad=cip, divisor_override=div)


SETTINGS = list(settings())


def torch_reference(x, g, kw):
    tx = torch.from_numpy(x).requires_grad_()
    y = F.avg_pool2d(tx, **kw)
    y.backward(torch.from_numpy(g))
    return y.detach().numpy(), tx.grad.numpy()


@pytest.mark.parametrize("kw", SETTINGS, ids=[str(i) for i in range(len(SETTINGS))])
def test_adjoint(kw, rng):
    x = rng.standard_normal((2, 3, 7, 6))
    g = rng.standard_normal(sg.avg_pool2d(x, **kw).shape)
    assert_adjoint(lambda v: sg.avg_pool2d(v, **kw), lambda v: sg.avg_pool2d_backward(v, x, **kw), x, g)


def test_finite_differences(rng):
    kw = dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)
    x = rng.standard_normal((1, 2, 6, 5))
    g = rng.standard_normal(sg.avg_pool2d(x, **kw).shape)
    analytic = sg.avg_pool2d_backward(g, x, **kw).reshape(-1)
    idx = np.arange(x.size)
    np.testing.assert_allclose(finite_difference(lambda v: sg.avg_pool2d(v, **kw), x, g, idx), analytic[idx], rtol=1e-7,
                               atol=1e-9)


@requires_torch
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_parity_with_torch_sweep(dtype, rng):
    for kw in SETTINGS:
        for shape in [(2, 3, 7, 6), (3, 5, 8), (1, 1, 1, 1), (1, 2, 2, 9)]:
            x = rng.standard_normal(shape).astype(dtype)
            try:
                out_shape = F.avg_pool2d(torch.from_numpy(x), **kw).shape
            except RuntimeError:
                # torch rejects (input smaller than the kernel): so must we.
                with pytest.raises(ValueError, match="expected an output of at least 1x1"):
                    sg.avg_pool2d(x, **kw)
                continue
            g = rng.standard_normal(out_shape).astype(dtype)
            y_ref, gi_ref = torch_reference(x, g, kw)
            y = sg.avg_pool2d(x, **kw)
            gi = sg.avg_pool2d_backward(g, x, **kw)
            assert y.dtype == dtype and gi.dtype == dtype
            np.testing.assert_allclose(y, y_ref, **tol(dtype), err_msg=str((kw, shape)))
            np.testing.assert_allclose(gi, gi_ref, **tol(dtype), err_msg=str((kw, shape)))


@requires_torch
@pytest.mark.parametrize("seed", range(5))
def test_parity_with_torch_random_shapes(seed):
    rng = np.random.default_rng(seed)
    for _ in range(20):
        kh, kw_ = rng.integers(1, 6, size=2)
        kwargs = dict(
            kernel_size=(int(kh), int(kw_)),
            stride=tuple(int(v) for v in rng.integers(1, 5, size=2)),
            padding=(int(rng.integers(0, kh // 2 + 1)), int(rng.integers(0, kw_ // 2 + 1))),
            ceil_mode=bool(rng.integers(2)),
            count_include_pad=bool(rng.integers(2)),
            divisor_override=[None, int(rng.integers(-5, 6)) or None][int(rng.integers(2))],
        )
        shape = (int(rng.integers(1, 3)), int(rng.integers(1, 4)), int(rng.integers(kh, 20)), int(rng.integers(kw_, 20)))
        x = rng.standard_normal(shape)
        g = rng.standard_normal(F.avg_pool2d(torch.from_numpy(x), **kwargs).shape)
        y_ref, gi_ref = torch_reference(x, g, kwargs)
        np.testing.assert_allclose(sg.avg_pool2d(x, **kwargs), y_ref, **tol(np.float64), err_msg=str(kwargs))
        np.testing.assert_allclose(sg.avg_pool2d_backward(g, x, **kwargs), gi_ref, **tol(np.float64), err_msg=str(kwargs))


@requires_torch
def test_parity_aten_backward_at_standard_shape_float32(rng):
    x = rng.standard_normal((2, 8, 112, 112)).astype(np.float32)
    y = sg.avg_pool2d(x, 3, 2, 1)
    g = rng.standard_normal(y.shape).astype(np.float32)
    ref = torch.ops.aten.avg_pool2d_backward(torch.from_numpy(g), torch.from_numpy(x), [3, 3], [2, 2], [1, 1], False,
                                             True, None)
    np.testing.assert_allclose(sg.avg_pool2d_backward(g, x, 3, 2, 1), ref.numpy(), **tol(np.float32))
    np.testing.assert_allclose(y, F.avg_pool2d(torch.from_numpy(x), 3, 2, 1).numpy(), **tol(np.float32))


def test_three_dimensional_input_equals_batch_of_one(rng):
    x = rng.standard_normal((4, 9, 7))
    y3 = sg.avg_pool2d(x, 3, 2, 1, ceil_mode=True)
    y4 = sg.avg_pool2d(x[None], 3, 2, 1, ceil_mode=True)
    assert y3.shape == (4, 5, 4)
    np.testing.assert_array_equal(y3, y4[0])
    g = rng.standard_normal(y3.shape)
    np.testing.assert_array_equal(sg.avg_pool2d_backward(g, x, 3, 2, 1, ceil_mode=True),
                                  sg.avg_pool2d_backward(g[None], x[None], 3, 2, 1, ceil_mode=True)[0])


def test_strided_inputs_need_no_copy_and_match(rng):
    x = rng.standard_normal((2, 3, 10, 9))
    kw = dict(kernel_size=(3, 2), stride=(2, 1), padding=1)
    y = sg.avg_pool2d(x, **kw)
    g = rng.standard_normal(y.shape)
    gi = sg.avg_pool2d_backward(g, x, **kw)
    for variant in [negative_strided(x, 3), negative_strided(x, 1), non_contiguous(x), np.asfortranarray(x),
                    x.transpose(0, 1, 3, 2).copy().transpose(0, 1, 3, 2)]:
        np.testing.assert_array_equal(sg.avg_pool2d(variant, **kw), y)
    for variant in [negative_strided(g, 2), non_contiguous(g)]:
        np.testing.assert_array_equal(sg.avg_pool2d_backward(variant, x, **kw), gi)
    assert sg.avg_pool2d(x[:, :, ::2], 2).flags.c_contiguous


def test_one_by_one_and_empty(rng):
    x = rng.standard_normal((1, 1, 1, 1))
    np.testing.assert_array_equal(sg.avg_pool2d(x, 1), x)
    np.testing.assert_array_equal(sg.avg_pool2d(x, 2, padding=1, count_include_pad=False), np.full((1, 1, 1, 1), x[0, 0, 0, 0]))
    for shape, expected in [((0, 3, 4, 4), (0, 3, 2, 2)), ((2, 0, 4, 4), (2, 0, 2, 2)), ((0, 4, 4), (0, 2, 2))]:
        e = np.zeros(shape, np.float32)
        y = sg.avg_pool2d(e, 2)
        assert y.shape == expected and y.dtype == np.float32
        assert sg.avg_pool2d_backward(y, e, 2).shape == shape
    # An empty plane with padding: windows that cover nothing output zeros.
    y = sg.avg_pool2d(np.zeros((2, 0, 5)), 2, padding=1)
    assert y.shape == (2, 1, 3) and not y.any()


def test_threads_do_not_change_bits(rng):
    x = rng.standard_normal((2, 5, 37, 29)).astype(np.float32)
    g = rng.standard_normal(sg.avg_pool2d(x, 3, 2, 1).shape).astype(np.float32)
    same_bits_for_thread_counts(lambda: (sg.avg_pool2d(x, 3, 2, 1), sg.avg_pool2d_backward(g, x, 3, 2, 1)), (1, 2, 3))


def test_single_plane_uses_threads_and_stays_exact(rng):
    x = rng.standard_normal((1, 301, 257))
    g = rng.standard_normal(sg.avg_pool2d(x, 5, 1, 2).shape)
    same_bits_for_thread_counts(lambda: (sg.avg_pool2d(x, 5, 1, 2), sg.avg_pool2d_backward(g, x, 5, 1, 2)))


# ---- issue 31's strategies (docs/design.md): tiles of small planes, channels-last lanes, planes --------------------

def channels_last(a):
    """The same values as a 4-D array, stored channels-last (NHWC strides)."""
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


# Shapes on both sides of the cost model's crossovers: global pooling of a ResNet head (tiles), small and wide
# planes, few and many channels, 3-D inputs; each also channels-last where 4-D.
STRATEGY_SHAPES = [((4, 40, 7, 7), dict(kernel_size=7)), ((3, 21, 14, 14), dict(kernel_size=3, stride=1, padding=1)),
                   ((2, 19, 20, 17), dict(kernel_size=2, stride=2, ceil_mode=True)),
                   ((2, 24, 28, 28), dict(kernel_size=3, stride=2, padding=1, count_include_pad=False)),
                   ((2, 3, 40, 70), dict(kernel_size=2)), ((1, 70, 9, 9), dict(kernel_size=(3, 2), stride=(1, 2))),
                   ((1, 32, 70, 66), dict(kernel_size=2, divisor_override=3)), ((33, 7, 7), dict(kernel_size=7))]


@requires_torch
@pytest.mark.parametrize("shape, kw", STRATEGY_SHAPES, ids=[str(s) for s, _ in STRATEGY_SHAPES])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_strategies_match_torch_and_threads(shape, kw, layout, rng):
    if layout == "nhwc" and len(shape) == 3:
        pytest.skip("channels-last is a 4-D layout")
    x = rng.standard_normal(shape).astype(np.float32)
    g = rng.standard_normal(F.avg_pool2d(torch.from_numpy(x), **kw).shape).astype(np.float32)
    y_ref, gi_ref = torch_reference(x, g, kw)
    if layout == "nhwc":
        x, g = channels_last(x), channels_last(g)
    y, gi = sg.avg_pool2d(x, **kw), sg.avg_pool2d_backward(g, x, **kw)
    assert y.flags.c_contiguous and gi.flags.c_contiguous
    np.testing.assert_allclose(y, y_ref, **tol(np.float32))
    np.testing.assert_allclose(gi, gi_ref, **tol(np.float32))
    same_bits_for_thread_counts(lambda: (sg.avg_pool2d(x, **kw), sg.avg_pool2d_backward(g, x, **kw)), (1, 2, 3))


def test_layouts_give_the_same_bits(rng):
    # Every family computes the plane kernels' sums in their order: the layout of the input never changes bits.
    for shape, kw in STRATEGY_SHAPES:
        if len(shape) == 3:
            continue
        for dtype in (np.float32, np.float64, np.float16):
            x = rng.standard_normal(shape).astype(dtype)
            g = rng.standard_normal(sg.avg_pool2d(x, **kw).shape).astype(dtype)
            for xv, gv in [(channels_last(x), channels_last(g)), (non_contiguous(x), non_contiguous(g))]:
                np.testing.assert_array_equal(sg.avg_pool2d(xv, **kw), sg.avg_pool2d(x, **kw))
                np.testing.assert_array_equal(sg.avg_pool2d_backward(gv, xv, **kw), sg.avg_pool2d_backward(g, x, **kw))


# spatialgrad.torch's avg_pool2d and its backward lay out their outputs as aten's do: in the input's suggested
# memory format for a 4-D input (channels-last strides in, channels-last out, c10 deciding size-1 dimensions by
# the strides), contiguous for a 3-D one. (A channels-last result spares the next layer a conversion.)
MEMORY_FORMAT_CASES = {
    "channels_last": lambda: torch.rand(1, 3, 16, 16).to(memory_format=torch.channels_last),
    "channels_last_one_channel": lambda: torch.rand(2, 1, 8, 8).to(memory_format=torch.channels_last),
    "channels_last_one_pixel": lambda: torch.rand(2, 4, 1, 1).to(memory_format=torch.channels_last),
    "contiguous": lambda: torch.rand(2, 4, 8, 8),
    "nhwc_permuted": lambda: torch.rand(2, 8, 8, 4).permute(0, 3, 1, 2),
    "channels_last_sliced": lambda: torch.rand(2, 4, 8, 8).to(memory_format=torch.channels_last)[:, :, :, :6],
    "strided": lambda: torch.rand(2, 4, 8, 16)[:, :, :, ::2],
    "three_dimensional": lambda: torch.rand(4, 8, 8),
    "three_dimensional_transposed": lambda: torch.rand(8, 8, 4).permute(2, 0, 1),
}


@requires_torch
@pytest.mark.parametrize("name", list(MEMORY_FORMAT_CASES))
def test_torch_outputs_follow_the_input_memory_format_as_aten(name):
    import spatialgrad.torch as sgt

    assert sgt.native, "the native operators decide the memory format"
    torch.manual_seed(0)
    x = MEMORY_FORMAT_CASES[name]()
    k = 1 if x.shape[-1] == 1 else 2
    ours, reference = sgt.avg_pool2d(x, k), F.avg_pool2d(x, k)
    assert ours.stride() == reference.stride()
    torch.testing.assert_close(ours, reference)
    pooling = ([k, k], [k, k], [0, 0], False, True, None)
    for g in (torch.rand(reference.shape), torch.rand_like(reference)):  # contiguous, and laid out as the output
        ours = torch.ops.spatialgrad.avg_pool2d_backward(g, x, *pooling)
        reference = torch.ops.aten.avg_pool2d_backward(g, x, *pooling)
        assert ours.stride() == reference.stride()
        torch.testing.assert_close(ours, reference)


# A 20000 x 20000 float32 plane (1.6 GB), as PyTorch runs it, in a fresh interpreter whose address space is limited
# to what it holds (numpy, the library, the pool's threads, the arrays) plus the bound of docs/operators.md: a
# regression that allocates beyond it fails with MemoryError instead of exhausting the machine.
LARGE_PLANE_PROBE = """
import numpy as np, spatialgrad as sg
sg.set_num_threads(2)
small = np.ones((1, 1, 64, 64), np.float32)
sg.avg_pool2d_backward(sg.avg_pool2d(small, 2), small, 2)  # starts the pool's threads before the limit
n = 20000
shape, pooled = (1, 1, n, n), (1, 1, n // 2, n // 2)
data_bytes = 4 * (n * n + (n // 2) ** 2)
bound = max(64 << 20, data_bytes // 4)
if DIRECTION == "forward":
    x = np.ones(shape, np.float32)
    limit_address_space(4 * (n // 2) ** 2 + bound + (16 << 20))
    y = sg.avg_pool2d(x, 2)
    print("forward", y.shape, float(y[0, 0, ::997, ::991].min()), float(y[0, 0, ::997, ::991].max()))
else:
    g = np.ones(pooled, np.float32)
    x = np.broadcast_to(np.float32(0), shape)  # lends its shape only
    limit_address_space(4 * n * n + bound + (16 << 20))
    gi = sg.avg_pool2d_backward(g, x, 2)
    print("backward", gi.shape, float(gi[0, 0, ::997, ::991].min()), float(gi[0, 0, ::997, ::991].max()))
"""


@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_a_20000_square_plane_runs_within_the_memory_bound(direction):
    result = run_probe(ADDRESS_SPACE_PRELUDE + f"DIRECTION = {direction!r}\n" + LARGE_PLANE_PROBE, timeout=120)
    assert result.returncode == 0, f"exit {result.returncode}: {result.stderr[-2000:]}"
    value = "1.0" if direction == "forward" else "0.25"
    shape = "(1, 1, 10000, 10000)" if direction == "forward" else "(1, 1, 20000, 20000)"
    assert f"{direction} {shape} {value} {value}" in result.stdout, result.stdout


# ---- validation: one test per rule of docs/operators.md (Average pooling) -------------------------------------------------------------------

X = np.zeros((1, 2, 6, 6), np.float32)
G = np.zeros((1, 2, 3, 3), np.float32)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(kernel_size=()), r"avg_pool2d\(\): expected kernel_size to have 1 or 2 entries, but got 0"),
        (dict(kernel_size=(2, 2, 2)), r"expected kernel_size to have 1 or 2 entries, but got 3"),
        (dict(kernel_size=0), r"expected kernel_size entries > 0, but got \[0\]"),
        (dict(kernel_size=(2, -1)), r"expected kernel_size entries > 0"),
        (dict(kernel_size=2, stride=(1, 1, 1)), r"expected stride to have 0, 1 or 2 entries, but got 3"),
        (dict(kernel_size=2, stride=0), r"expected stride entries > 0, but got \[0\]"),
        (dict(kernel_size=2, padding=()), r"expected padding to have 1 or 2 entries, but got 0"),
        (dict(kernel_size=2, padding=-1), r"expected padding entries >= 0"),
        (dict(kernel_size=3, padding=2), r"expected padding to be at most half the kernel size, but got padding \[2\]"),
        (dict(kernel_size=(4, 2), padding=(2, 2)), r"at most half the kernel size"),
        (dict(kernel_size=7), r"expected an output of at least 1x1, but got 0x0"),
    ],
)
def test_parameter_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        sg.avg_pool2d(X, **kwargs)
    kw = dict(kwargs)
    with pytest.raises(ValueError, match=message.replace(r"avg_pool2d\(\)", r"avg_pool2d_backward\(\)")):
        sg.avg_pool2d_backward(G, X, **kw)


def test_rank_errors():
    with pytest.raises(ValueError, match=r"expected a 3-D \(C, H, W\) or 4-D \(N, C, H, W\) input, but got 2-D"):
        sg.avg_pool2d(np.zeros((6, 6)), 2)
    with pytest.raises(ValueError, match=r"expected a 3-D .* but got 5-D"):
        sg.avg_pool2d(np.zeros((1, 1, 1, 6, 6)), 2)
    with pytest.raises(ValueError, match=r"expected grad_output and grad_input to be both 3-D or both 4-D, but got 3-D and 4-D"):
        sg.avg_pool2d_backward(G[0], X, 2)


def test_grad_output_shape_must_match_output_size():
    with pytest.raises(ValueError, match=r"avg_pool2d_backward\(\): expected grad_output of shape \(1, 2, 3, 3\), but got \(1, 2, 2, 3\)"):
        sg.avg_pool2d_backward(np.zeros((1, 2, 2, 3), np.float32), X, 2)
    with pytest.raises(ValueError, match=r"expected grad_output of shape \(1, 2, 3, 3\), but got \(1, 3, 3, 3\)"):
        sg.avg_pool2d_backward(np.zeros((1, 3, 3, 3), np.float32), X, 2)


def test_dtype_errors():
    with pytest.raises(TypeError, match=r"avg_pool2d\(\): expected input to be float16, bfloat16, float32 or float64, but got int64"):
        sg.avg_pool2d(np.zeros((1, 1, 4, 4), np.int64), 2)
    with pytest.raises(TypeError, match=r"expected input to be a NumPy array of float16, bfloat16, float32 or float64 .*complex128"):
        sg.avg_pool2d(np.zeros((1, 1, 4, 4), np.complex128), 2)
    with pytest.raises(TypeError, match=r"native byte order"):
        sg.avg_pool2d(np.zeros((1, 1, 4, 4), ">f4"), 2)
    with pytest.raises(TypeError, match=r"expected input to have the dtype of grad_output \(float64\), but got float32"):
        sg.avg_pool2d_backward(G.astype(np.float64), X, 2)
    with pytest.raises(TypeError, match=r"expected kernel_size to be an int or a sequence of ints, but got 2.5"):
        sg.avg_pool2d(X, 2.5)
    with pytest.raises(TypeError, match=r"expected stride to be an int or a sequence of ints"):
        sg.avg_pool2d(X, 2, stride="2")


def test_divisor_override_zero_means_unset(rng):
    x = rng.standard_normal((1, 1, 4, 4))
    np.testing.assert_array_equal(sg.avg_pool2d(x, 2, divisor_override=0), sg.avg_pool2d(x, 2))
    np.testing.assert_allclose(sg.avg_pool2d(x, 2, divisor_override=-1), -4 * sg.avg_pool2d(x, 2))
