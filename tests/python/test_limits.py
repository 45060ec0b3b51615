"""Parameters far beyond the data: every call gives a result or a clear error, in time and memory bounded
by the input and output (before: process aborts from exceptions inside target_clones functions, seconds
and gigabytes of scratch growing with the kernel size or stride, an int64 overflow in the output size).
Each probe runs in a fresh interpreter with a timeout and a memory limit, so an abort, a hang or an
unbounded allocation fails the test instead of the suite."""
import textwrap

import numpy as np
import pytest

import spatialgrad as sg
from helpers import ADDRESS_SPACE_PRELUDE, requires_torch, run_probe, torch

PROBE_HEADER = """
import resource, numpy as np, spatialgrad as sg
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))  # 2 GiB: scratch that grows with k fails
"""


def probe(code: str) -> str:
    result = run_probe(PROBE_HEADER + textwrap.dedent(code), timeout=30)
    assert result.returncode == 0, f"exit {result.returncode}: {result.stderr[-2000:]}"
    return result.stdout


def test_the_issue_repros_return_instead_of_aborting():
    out = probe("""
        x = np.ones((1, 1, 8, 8), np.float32)
        y = sg.avg_pool2d(x, 2, stride=2**40)
        g = sg.avg_pool2d_backward(np.ones_like(y), x, 2, stride=2**40)
        print("stride 2^40 backward", g.shape, float(g.sum()))
        one = np.ones((1, 1, 1, 1), np.float32)
        print("kernel 2^33", sg.avg_pool2d(one, 2**33, padding=2**32).shape)
        print("kernel 2^62", sg.avg_pool2d(one, 2**62, padding=2**61).shape)
        print("stride 2^63-1 ceil", sg.avg_pool2d(x, 2, stride=2**63 - 1, ceil_mode=True).shape)
    """)
    assert "stride 2^40 backward (1, 1, 8, 8)" in out
    assert "kernel 2^33 (1, 1, 1, 1)" in out and "kernel 2^62 (1, 1, 1, 1)" in out
    assert "stride 2^63-1 ceil (1, 1, 1, 1)" in out


def test_huge_kernels_and_strides_take_milliseconds():
    out = probe("""
        import time
        t0 = time.perf_counter()
        one = np.ones((1, 1, 1, 1), np.float32)
        for k in (2**24, 2**29, 2**40):
            sg.avg_pool2d(one, k, padding=k // 2)
            sg.avg_pool2d_backward(one, one, k, padding=k // 2)
        x = np.ones((1, 1, 8, 8), np.float32)
        sg.avg_pool2d_backward(sg.avg_pool2d(x, 2, stride=2**24), x, 2, stride=2**24)
        print("seconds", time.perf_counter() - t0)
    """)
    assert float(out.split()[-1]) < 2.0, out


def test_roi_align_backward_without_rois_gives_zeros_for_any_pooled_size():
    out = probe("""
        g = np.zeros((0, 3, 2**20, 2**20), np.float32)
        gi = sg.roi_align_backward(g, np.zeros((0, 5), np.float32), (2, 3, 5, 5), 2**20, 2**20, 1.0, 0, True)
        print(gi.shape, bool((gi == 0).all()))
    """)
    assert "(2, 3, 5, 5) True" in out


@requires_torch
# (PyTorch rejects strides of 2^31 and more: those are checked against naive loops in test_avg_pool2d.cpp.)
@pytest.mark.parametrize("H,W,k,s,p,ceil", [(1, 1, 2**24, None, 2**23, False), (8, 7, 2**20, 1, 2**19, False),
                                            (6, 9, 3, 2**24, 1, True), (5, 5, 2, 2**30, 1, True)])
@pytest.mark.parametrize("count_include_pad", [True, False])
def test_huge_parameters_match_pytorch(H, W, k, s, p, ceil, count_include_pad):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, H, W))
    kwargs = dict(kernel_size=k, stride=s, padding=p, ceil_mode=ceil, count_include_pad=count_include_pad)
    tx = torch.from_numpy(x).requires_grad_()
    ty = torch.nn.functional.avg_pool2d(tx, **kwargs)
    y = sg.avg_pool2d(x, **kwargs)
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-12, atol=1e-300)
    g = rng.standard_normal(y.shape)
    ty.backward(torch.from_numpy(g))
    np.testing.assert_allclose(sg.avg_pool2d_backward(g, x, **kwargs), tx.grad.numpy(), rtol=1e-12, atol=1e-300)


def test_grid_sample_planes_past_int32_pixels_run_and_rows_past_int32_raise():
    # A 46342 x 46342 plane (a broadcast view: no memory behind it) has more pixels than int32 numbers:
    # it runs (the plane strategy numbers rows and columns, not pixels); the backward's 8.6 GB input
    # gradient is refused by the allocator inside the probe's 2 GiB, and a row of 2^31 pixels by the
    # kernel's int32 columns, before allocating.
    out = probe("""
        x = np.broadcast_to(np.float32(2.5), (1, 1, 46342, 46342))
        grid = np.zeros((1, 1, 1, 2), np.float32)
        print("forward", sg.grid_sample(x, grid).ravel().tolist())
        try:
            sg.grid_sampler_2d_backward(np.ones((1, 1, 1, 1), np.float32), x, grid)
        except MemoryError:
            print("backward MemoryError")
        wide = np.broadcast_to(np.float32(1), (1, 1, 1, 2**31))
        for call in (lambda: sg.grid_sample(wide, grid),
                     lambda: sg.grid_sampler_2d_backward(np.ones((1, 1, 1, 1), np.float32), wide, grid)):
            try:
                call()
            except OverflowError as e:
                print(e)
    """)
    assert "forward [2.5]" in out and "backward MemoryError" in out
    assert "grid_sampler_2d(): expected input planes with H and W below 2^31 - 2" in out
    assert "grid_sampler_2d_backward(): expected input planes with H and W below 2^31 - 2" in out


def test_grid_sample_on_a_20000_square_plane_keeps_scratch_bounded():
    # Issue 31: the channel tiles (32 bytes per pixel and thread, twice in the backward) had the OOM
    # killer end this call at 24 GB. The plane strategy's scratch follows the points: inside an address
    # space of what the interpreter uses now, plus the arrays (1.6 GB input, 1.6 GB input gradient), plus
    # the scratch bound (25% of them), both directions run, and give what a constant plane must.
    out = run_probe(ADDRESS_SPACE_PRELUDE + textwrap.dedent("""
        import os
        os.environ["SPATIALGRAD_MEMORY_CACHE_MB"] = "0"  # no blocks kept between the calls
        import resource, numpy as np, spatialgrad as sg

        sg.set_num_threads(2)
        rng = np.random.default_rng(0)
        grid = rng.uniform(-0.99, 0.99, (1, 256, 256, 2)).astype(np.float32)
        small = np.ones((1, 1, 8, 8), np.float32)
        sg.grid_sampler_2d_backward(sg.grid_sample(small, grid), small, grid)  # the pool's threads exist
        arrays = 2 * 20000 * 20000 * 4 + 2 * grid.nbytes + 2 * 256 * 256 * 4
        limit_address_space(arrays + max(64 << 20, arrays // 4))
        x = np.ones((1, 1, 20000, 20000), np.float32)
        y = sg.grid_sample(x, grid)
        print("forward", bool(np.allclose(y, 1, rtol=0, atol=1e-6)))
        gi, gg = sg.grid_sampler_2d_backward(np.ones_like(y), x, grid)
        print("backward", round(float(gi.sum(dtype=np.float64))), float(np.abs(gg).max()))
    """), timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "forward True" in out.stdout, out.stdout
    assert "backward 65536 0.0" in out.stdout, out.stdout


def test_upsample_runs_on_a_20000_squared_plane_within_the_scratch_bound():
    # Issue 31: scratch above inputs and outputs <= max(64 MiB, 25% of them) whatever the plane, and a
    # plane PyTorch can resize we resize. The address space is limited to what the interpreter uses now
    # plus the arrays plus that bound: a kernel whose scratch grows past it fails with MemoryError.
    out = run_probe(ADDRESS_SPACE_PRELUDE + textwrap.dedent("""
        import os
        os.environ["SPATIALGRAD_MEMORY_CACHE_MB"] = "0"  # no blocks kept between the calls
        import resource, numpy as np, spatialgrad as sg

        sg.set_num_threads(2)
        sg.upsample_bilinear2d_backward(sg.upsample_bilinear2d(np.ones((1, 1, 8, 8), np.float32), 4), 4,
                                        (1, 1, 8, 8))  # the pool's threads exist before the limit
        big, small = 20000 * 20000 * 4, 10000 * 10000 * 4
        limit_address_space(big + small + max(64 << 20, (big + small) // 4))
        x = np.ones((1, 1, 20000, 20000), np.float32)
        y = sg.upsample_bilinear2d(x, (10000, 10000))
        print("forward", y.shape, float(y[0, 0, 123, 4567]))
        del x
        gi = sg.upsample_bilinear2d_backward(y, (10000, 10000), (1, 1, 20000, 20000))
        print("backward", gi.shape, float(gi[0, 0, 246, 9134]), float(gi[0, 0, 19999, 19999]))
    """), timeout=120)
    assert out.returncode == 0, f"exit {out.returncode}: {out.stderr[-2000:]}"
    assert "forward (1, 1, 10000, 10000) 1.0" in out.stdout
    assert "backward (1, 1, 20000, 20000) 0.25 0.25" in out.stdout


def test_ms_deform_attn_on_a_large_level_keeps_scratch_bounded():
    # Issue 31: every thread copied a (batch, head) slice of value into a padded buffer, and the backward
    # accumulated the slice's gradient in a second one: 4 buffers of 268 MB at 2 threads here, whatever the
    # number of queries. A few queries now read value and add into grad_value where they are: both
    # directions run in an address space of what the probe holds, plus grad_value, plus 512 MiB.
    out = run_probe(ADDRESS_SPACE_PRELUDE + textwrap.dedent("""
        import resource, numpy as np, spatialgrad as sg
        sg.set_num_threads(2)
        H = W = 1448  # a 537 MB value: (1, H*W, 2 heads, 32 channels) float32
        value = np.ones((1, H * W, 2, 32), np.float32)
        rng = np.random.default_rng(0)
        loc = rng.uniform(0.25, 0.75, (1, 300, 2, 1, 4, 2)).astype(np.float32)  # every corner inside
        attn = rng.uniform(0, 1, (1, 300, 2, 1, 4)).astype(np.float32)
        shapes, starts = np.array([[H, W]]), np.array([0])
        limit_address_space(value.nbytes + (512 << 20))
        out = sg.ms_deform_attn(value, shapes, starts, loc, attn)
        print("forward", bool(np.allclose(out.reshape(1, 300, 2, 32), attn.sum(axis=(3, 4))[..., None], rtol=1e-5)))
        gv, gl, ga = sg.ms_deform_attn_backward(value, shapes, starts, loc, attn, np.ones_like(out))
        print("backward", bool(np.isclose(gv.sum(dtype=np.float64), 32 * attn.sum(dtype=np.float64), rtol=1e-5)),
              float(np.abs(gl).max()), bool(np.allclose(ga, 32, rtol=1e-5)))
    """), timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "forward True" in out.stdout, out.stdout
    assert "backward True 0.0 True" in out.stdout, out.stdout
