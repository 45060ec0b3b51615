import itertools
import textwrap

import numpy as np
import pytest

import spatialgrad as sg
from helpers import (ADDRESS_SPACE_PRELUDE, assert_adjoint, best_cpu_seconds, negative_strided, non_contiguous,
                     requires_torch, run_probe, same_bits_for_thread_counts, tol, torch)

if torch is not None:
    from torchvision.ops import roi_align as tv_roi_align


def make_boxes(rng, num_boxes, num_images, size, dtype=np.float64):
    """Boxes inside, partly outside, tiny (< 1 px), empty and inverted, with fractional batch indices."""
    xy = rng.uniform(-0.3 * size, 1.1 * size, (num_boxes, 2))
    wh = rng.uniform(0, 0.8 * size, (num_boxes, 2))
    wh[1::7] = rng.uniform(0, 0.5, (len(wh[1::7]), 2))  # tiny
    wh[2::7] = 0  # empty
    wh[3::11] *= -1  # inverted
    batch = rng.integers(0, num_images, num_boxes) + rng.uniform(0, 0.99, num_boxes)
    return np.concatenate([batch[:, None], xy, xy + wh], 1).astype(dtype)


def torch_reference(x, boxes, g, output_size, scale, ratio, aligned):
    tx = torch.from_numpy(x).requires_grad_()
    # torchvision truncates the batch index; ours are non-negative here, so floor == trunc.
    y = tv_roi_align(tx, torch.from_numpy(boxes), output_size, scale, ratio, aligned)
    y.backward(torch.from_numpy(g))
    return y.detach().numpy(), tx.grad.numpy()


SETTINGS = list(itertools.product([True, False], [0, 1, 2, 3], [1.0, 0.5, 0.25]))


@requires_torch
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("aligned, ratio, scale", SETTINGS)
def test_parity_with_torchvision(dtype, aligned, ratio, scale, rng):
    for shape, output_size in [((2, 19, 13, 17), (3, 4)), ((1, 3, 1, 1), 2), ((3, 5, 9, 6), 7)]:
        x = rng.standard_normal(shape).astype(dtype)
        boxes = make_boxes(rng, 30, shape[0], max(shape[2:]) / scale, dtype)
        ph, pw = (output_size, output_size) if isinstance(output_size, int) else output_size
        g = rng.standard_normal((30, shape[1], ph, pw)).astype(dtype)
        y_ref, gi_ref = torch_reference(x, boxes, g, output_size, scale, ratio, aligned)
        y = sg.roi_align(x, boxes, output_size, scale, ratio, aligned)
        gi = sg.roi_align_backward(g, boxes, shape, ph, pw, scale, ratio, aligned)
        assert y.dtype == dtype and gi.dtype == dtype and y.shape == y_ref.shape and gi.shape == shape
        np.testing.assert_allclose(y, y_ref, **tol(dtype), err_msg=str((shape, output_size)))
        np.testing.assert_allclose(gi, gi_ref, **tol(dtype), err_msg=str((shape, output_size)))


@requires_torch
@pytest.mark.parametrize("seed", range(4))
def test_parity_random_configurations(seed):
    rng = np.random.default_rng(seed)
    for _ in range(10):
        B, C, H, W = (int(v) for v in rng.integers([1, 1, 1, 1], [4, 40, 30, 30]))
        ph, pw = (int(v) for v in rng.integers(1, 8, 2))
        scale, ratio, aligned = float(rng.choice([1.0, 0.5, 0.25, 0.3])), int(rng.integers(0, 4)), bool(rng.integers(2))
        dtype = [np.float32, np.float64][int(rng.integers(2))]
        x = rng.standard_normal((B, C, H, W)).astype(dtype)
        boxes = make_boxes(rng, int(rng.integers(1, 40)), B, max(H, W) / scale, dtype)
        g = rng.standard_normal((len(boxes), C, ph, pw)).astype(dtype)
        y_ref, gi_ref = torch_reference(x, boxes, g, (ph, pw), scale, ratio, aligned)
        np.testing.assert_allclose(sg.roi_align(x, boxes, (ph, pw), scale, ratio, aligned), y_ref, **tol(dtype))
        np.testing.assert_allclose(sg.roi_align_backward(g, boxes, x.shape, ph, pw, scale, ratio, aligned), gi_ref,
                                   **tol(dtype))


@requires_torch
def test_parity_at_standard_shape_float32(rng):
    x = rng.standard_normal((2, 256, 64, 64)).astype(np.float32)
    wh = rng.uniform(1, 16, (512, 2))
    xy = rng.uniform(0, 64 - wh)
    boxes = np.concatenate([rng.integers(0, 2, (512, 1)), xy, xy + wh], 1).astype(np.float32)
    g = rng.standard_normal((512, 256, 7, 7)).astype(np.float32)
    y_ref, gi_ref = torch_reference(x, boxes, g, 7, 1.0, 2, True)
    np.testing.assert_allclose(sg.roi_align(x, boxes, 7, 1.0, 2, True), y_ref, **tol(np.float32))
    np.testing.assert_allclose(sg.roi_align_backward(g, boxes, x.shape, 7, 7, 1.0, 2, True), gi_ref, **tol(np.float32))


@pytest.mark.parametrize("aligned, ratio, scale", SETTINGS)
def test_adjoint(aligned, ratio, scale, rng):
    x = rng.standard_normal((2, 5, 12, 9))
    boxes = make_boxes(rng, 25, 2, 12 / scale)
    g = rng.standard_normal((25, 5, 3, 2))
    assert_adjoint(lambda v: sg.roi_align(v, boxes, (3, 2), scale, ratio, aligned),
                   lambda v: sg.roi_align_backward(v, boxes, x.shape, 3, 2, scale, ratio, aligned), x, g)


def test_ascend_worked_example():
    g = np.array([4.5, 6.5, 8.5, 16.5, 18.5, 20.5, 28.5, 30.5, 32.5], np.float32).reshape(1, 1, 3, 3)
    boxes = np.array([[0, -2, -2, 22, 22]], np.float32)
    gi = sg.roi_align_backward(g, boxes, (1, 1, 6, 6), 3, 3, 0.25, 2, False)
    pairs = np.array([[1.125, 1.625, 2.125], [4.125, 4.625, 5.125], [7.125, 7.625, 8.125]], np.float32)
    np.testing.assert_array_equal(gi[0, 0], np.repeat(np.repeat(pairs, 2, 0), 2, 1))


def test_defaults_are_aligned_and_adaptive(rng):
    x = rng.standard_normal((1, 2, 10, 10))
    boxes = np.array([[0, 1.2, 2.1, 7.7, 8.3]])
    np.testing.assert_array_equal(sg.roi_align(x, boxes, 3), sg.roi_align(x, boxes, (3, 3), 1.0, 0, True))
    assert not np.array_equal(sg.roi_align(x, boxes, 3), sg.roi_align(x, boxes, 3, aligned=False))


def test_threads_do_not_change_bits(rng):
    x = rng.standard_normal((2, 70, 40, 33)).astype(np.float32)
    boxes = make_boxes(rng, 300, 2, 40, np.float32)
    g = rng.standard_normal((300, 70, 5, 6)).astype(np.float32)
    same_bits_for_thread_counts(lambda: (sg.roi_align(x, boxes, (5, 6), 0.9, 0, True),
                                         sg.roi_align_backward(g, boxes, x.shape, 5, 6, 0.9, 0, True)), (1, 2, 3))


def test_strided_inputs_match(rng):
    x = rng.standard_normal((2, 5, 10, 9))
    boxes = make_boxes(rng, 12, 2, 10)
    y = sg.roi_align(x, boxes, (3, 2), 1.0, 2)
    g = rng.standard_normal(y.shape)
    gi = sg.roi_align_backward(g, boxes, x.shape, 3, 2, 1.0, 2, True)
    for variant in [negative_strided(x, 3), negative_strided(x, 1), non_contiguous(x), np.asfortranarray(x)]:
        np.testing.assert_array_equal(sg.roi_align(variant, boxes, (3, 2), 1.0, 2), y)
    for b in [np.asfortranarray(boxes), non_contiguous(boxes), negative_strided(boxes, 0), negative_strided(boxes, 1)]:
        np.testing.assert_array_equal(sg.roi_align(x, b, (3, 2), 1.0, 2), y)
    for variant in [negative_strided(g, 2), non_contiguous(g)]:
        np.testing.assert_array_equal(sg.roi_align_backward(variant, boxes, x.shape, 3, 2, 1.0, 2, True), gi)


def test_empty_inputs_give_shaped_zeros(rng):
    x = rng.standard_normal((2, 3, 5, 5)).astype(np.float32)
    no_boxes = np.zeros((0, 5), np.float32)
    y = sg.roi_align(x, no_boxes, (2, 3))
    assert y.shape == (0, 3, 2, 3) and y.dtype == np.float32
    gi = sg.roi_align_backward(y, no_boxes, x.shape, 2, 3, 1.0, 0, True)
    assert gi.shape == x.shape and not gi.any()
    box = np.array([[0, 0, 0, 2, 2]], np.float32)
    assert sg.roi_align(np.zeros((1, 0, 5, 5), np.float32), box, 2).shape == (1, 0, 2, 2)
    # An image without pixels: every sample falls outside it.
    y0 = sg.roi_align(np.zeros((1, 2, 0, 4), np.float32), box, 2)
    assert y0.shape == (1, 2, 2, 2) and not y0.any()


def test_non_finite_boxes_contribute_nothing(rng):
    x = rng.standard_normal((1, 3, 8, 8))
    boxes = np.array([[0, np.nan, 1, 4, 4], [0, 1, 1, np.inf, 4], [0, -np.inf, 1, 4, 4], [0, 1, 1, 4, np.nan],
                      [0, 1e300, -1e300, 1e300, 1e300]])
    for aligned in (True, False):
        for ratio in (0, 2):
            assert not sg.roi_align(x, boxes, 2, 1.0, ratio, aligned).any()
            g = rng.standard_normal((5, 3, 2, 2))
            assert not sg.roi_align_backward(g, boxes, x.shape, 2, 2, 1.0, ratio, aligned).any()


def test_box_far_larger_than_the_image_is_fast_and_exact(rng):
    # ceil(2e6 / 2) = 1e6 samples per bin and axis (1e12 per bin): only those near the image are visited.
    x = rng.standard_normal((1, 1, 6, 5))
    boxes = np.array([[0, -1e6, -1e6, 1e6, 1e6]])
    y = sg.roi_align(x, boxes, 2)
    g = np.ones_like(y)
    gi = sg.roi_align_backward(g, boxes, x.shape, 2, 2, 1.0, 0, True)
    assert np.vdot(gi, x) == pytest.approx(float(y.sum()), rel=1e-12)
    assert 0 < abs(y[0, 0, 1, 1]) < 1e-9


# ---- issue 31: the shapes users run, each kernel, bounded memory, cost linear in the work ----------------------

def image_boxes(rng, num_boxes, num_images, height, width, smallest, largest):
    """Boxes of smallest..largest pixels per side inside a height x width image (image coordinates)."""
    wh = np.minimum(rng.uniform(smallest, largest, (num_boxes, 2)), [width, height])
    xy = rng.uniform(0, [width, height] - wh)
    batch = rng.integers(0, num_images, num_boxes)
    return np.concatenate([batch[:, None], xy, xy + wh], 1).astype(np.float32)


# (input shape, boxes, box sides in image pixels, pooled size, sampling_ratio, spatial_scale, aligned): shapes
# the cost model (docs/design.md, issue 31: roi_align) gives to each kernel.
KERNEL_SHAPES = [
    ((1, 3, 400, 400), 32, (10, 300), 14, 2, 1.0, False),  # crops from an image: direct
    ((1, 1, 1500, 1500), 6, (4, 24), 7, 0, 1.0, True),  # a few small crops of a large plane: direct
    ((2, 64, 40, 40), 200, (16, 400), 7, 0, 1 / 16, True),  # a feature level of a detector: packed
    ((1, 16, 60, 60), 400, (2, 30), 7, 2, 1.0, False),  # one lane block, one image: packed, shared patches
]


@requires_torch
@pytest.mark.parametrize("case", KERNEL_SHAPES, ids=lambda c: "x".join(map(str, c[0])))
def test_parity_and_thread_bits_on_the_shapes_of_each_kernel(case, rng):
    shape, num_boxes, (smallest, largest), pooled, ratio, scale, aligned = case
    x = rng.standard_normal(shape).astype(np.float32)
    boxes = image_boxes(rng, num_boxes, shape[0], shape[2] / scale, shape[3] / scale, smallest, largest)
    g = rng.standard_normal((num_boxes, shape[1], pooled, pooled)).astype(np.float32)
    y_ref, gi_ref = torch_reference(x, boxes, g, pooled, scale, ratio if ratio > 0 else -1, aligned)
    run = lambda: (sg.roi_align(x, boxes, pooled, scale, ratio, aligned),  # noqa: E731
                   sg.roi_align_backward(g, boxes, shape, pooled, pooled, scale, ratio, aligned))
    y, gi = run()
    np.testing.assert_allclose(y, y_ref, **tol(np.float32))
    np.testing.assert_allclose(gi, gi_ref, **tol(np.float32))
    same_bits_for_thread_counts(run, (1, 2, 3))


LARGE_PLANE_PROBE = """
import resource, numpy as np, spatialgrad as sg

def limit_scratch(output_bytes, in_out_bytes):
    # Address space for what is mapped now, the output, and the scratch bound of docs/operators.md.
    limit = address_space() + output_bytes + max(64 << 20, in_out_bytes // 4)
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY))

def unlimit():
    resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))

sg.set_num_threads(2)
N = 20000
# Sides of 7 * 64 pixels (but the last box): every sample position and weight is exact in float32, near 0 as
# near 20000, so the crops below give the same bits.
boxes = np.array([[0, 100, 100, 548, 548], [0, 19000, 50, 19448, 498], [0, 5000, 19000, 5448, 19448],
                  [0, 10, 10, 19990, 19990]], np.float32)
x = np.zeros((1, 1, N, N), np.float32)  # 1.6 GB
x[0, 0, ::7, ::5] = 1
# References from crops around each box (the boxes moved by whole pixels: the same sample positions).
crops = [(0, 0, 1024, 1024), (0, 18900, 1024, 20000), (18500, 4900, 20000, 5700)]
refs = []
for (r0, c0, r1, c1), box in zip(crops, boxes[:3]):
    moved = box - np.array([0, c0, r0, c0, r0], np.float32)
    refs.append(sg.roi_align(np.ascontiguousarray(x[:, :, r0:r1, c0:c1]), moved[None], 7, 1.0, 2, True))
limit_scratch(4 * 49 * 4, x.nbytes + boxes.nbytes + 4 * 49 * 4)
y = sg.roi_align(x, boxes, 7, 1.0, 2, True)
unlimit()
print("forward", y.shape, all(np.array_equal(y[i], refs[i][0]) for i in range(3)), y[3].any())
del x
g = np.ones_like(y)
g_refs = [sg.roi_align_backward(g[i:i + 1], (boxes[i] - np.array([0, c0, r0, c0, r0], np.float32))[None],
                                (1, 1, r1 - r0, c1 - c0), 7, 7, 1.0, 2, True)
          for i, (r0, c0, r1, c1) in enumerate(crops)]
limit_scratch(4 * N * N, 4 * N * N + g.nbytes + boxes.nbytes)
gi = sg.roi_align_backward(g[:3], boxes[:3], (1, 1, N, N), 7, 7, 1.0, 2, True)
unlimit()
same = all(np.array_equal(gi[:, :, r0:r1, c0:c1], ref) for (r0, c0, r1, c1), ref in zip(crops, g_refs))
outside = gi.copy(); [outside[:, :, r0:r1, c0:c1].fill(0) for (r0, c0, r1, c1) in crops]
print("backward", gi.shape, same, not outside.any())
"""


def test_a_20000_squared_plane_runs_within_the_scratch_bound():
    # PyTorch runs these; before issue 31 the forward packed the sampled region (here the whole plane) 16
    # channels wide, 25.6 GB, and the backward kept such a patch per thread. Both now run under an address space
    # limit of what is mapped + the output + max(64 MiB, 25% of inputs and outputs), and give the values of the
    # same boxes on crops of the plane.
    result = run_probe(ADDRESS_SPACE_PRELUDE + textwrap.dedent(LARGE_PLANE_PROBE), timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "forward (4, 1, 7, 7) True True" in result.stdout, result.stdout
    assert "backward (1, 1, 20000, 20000) True True" in result.stdout, result.stdout


@pytest.fixture
def one_thread():
    sg.set_num_threads(1)
    yield
    sg.set_num_threads(0)


def test_with_the_boxes_fixed_a_larger_plane_adds_only_the_zero_fill(rng, one_thread):
    # 256 boxes of 4-64 px spread over a 256^2 and a 2048^2 image (64x the plane, the same samples). Before
    # issue 31 the kernels packed the images' sampled regions, here the whole planes: 64x the cost.
    boxes = image_boxes(rng, 256, 1, 256, 256, 4, 64)
    no_samples = boxes.copy()
    no_samples[:, 1:] = np.nan  # the same calls without samples: only the zero-fill of grad_input remains
    times = {}
    for side in (256, 2048):
        x = rng.standard_normal((1, 3, side, side)).astype(np.float32)
        g = rng.standard_normal((256, 3, 7, 7)).astype(np.float32)
        spread = boxes.copy()  # each box moved by whole pixels anywhere in the image
        spread[:, 1:] += np.tile(np.floor(rng.uniform(0, side - 255, (256, 2))), 2).astype(np.float32)
        times["forward", side] = best_cpu_seconds(lambda: sg.roi_align(x, spread, 7, 1.0, 2, True))
        times["backward", side] = best_cpu_seconds(lambda: sg.roi_align_backward(g, spread, x.shape, 7, 7, 1.0, 2, True))
        times["fill", side] = best_cpu_seconds(lambda: sg.roi_align_backward(g, no_samples, x.shape, 7, 7, 1.0, 2, True))
    # (Margins for a busy machine: the zero-fill of 50 MB alone varies 2x, and boxes spread over 64x the plane
    # read 64x as many pages, whose misses cost CPU time: 1.14 ms against 0.37 ms, 3.1x, while another process
    # loaded the memory. The regression this guards against costs 64x.)
    assert times["forward", 2048] < 6 * times["forward", 256], times
    assert times["backward", 2048] < 2 * times["fill", 2048] + 3 * times["backward", 256], times


def test_with_the_plane_fixed_the_cost_follows_the_boxes(rng, one_thread):
    x = rng.standard_normal((1, 3, 512, 512)).astype(np.float32)
    boxes = image_boxes(rng, 1024, 1, 512, 512, 4, 128)
    g = rng.standard_normal((1024, 3, 7, 7)).astype(np.float32)
    few = {d: best_cpu_seconds(f) for d, f in [("forward", lambda: sg.roi_align(x, boxes[:256], 7, 1.0, 2, True)),
                                          ("backward", lambda: sg.roi_align_backward(g[:256], boxes[:256], x.shape,
                                                                                     7, 7, 1.0, 2, True))]}
    many = {d: best_cpu_seconds(f) for d, f in [("forward", lambda: sg.roi_align(x, boxes, 7, 1.0, 2, True)),
                                           ("backward", lambda: sg.roi_align_backward(g, boxes, x.shape, 7, 7, 1.0,
                                                                                      2, True))]}
    assert many["forward"] < 8 * few["forward"], (few, many)  # 4x the boxes: 4x the work
    assert many["backward"] < 8 * few["backward"], (few, many)  # (plus the same zero-fill)


# ---- validation: one test per rule of docs/operators.md (RoIAlign) ---------------------------------------------------------------------

X = np.zeros((2, 3, 8, 8), np.float32)
BOXES = np.array([[0, 1, 1, 5, 5], [1, 0, 0, 3, 3], [1, 2, 2, 7, 6], [0, 0, 0, 8, 8]], np.float32)
G = np.zeros((4, 3, 2, 2), np.float32)


def both(**overrides):
    """The forward and the backward with the same (possibly bad) parameters."""
    kw = dict(spatial_scale=1.0, sampling_ratio=0, aligned=True)
    kw.update(overrides)
    boxes = kw.pop("boxes", BOXES)
    yield lambda: sg.roi_align(X, boxes, 2, **kw)
    yield lambda: sg.roi_align_backward(G, boxes, X.shape, 2, 2, kw["spatial_scale"], kw["sampling_ratio"], kw["aligned"])


@pytest.mark.parametrize("scale", [0.0, -0.5, np.inf, -np.inf, np.nan])
def test_spatial_scale_must_be_positive_and_finite(scale):
    for call, op in zip(both(spatial_scale=scale), ["roi_align", "roi_align_backward"]):
        with pytest.raises(ValueError, match=rf"^{op}\(\): expected spatial_scale to be finite and > 0, but got"):
            call()


def test_negative_sampling_ratio_is_adaptive():
    """torchvision's -1 means adaptive in the NumPy API too (issue 36); the C API keeps the NPU's >= 0 rule."""
    for negative, adaptive in zip(both(sampling_ratio=-1), both(sampling_ratio=0)):
        np.testing.assert_array_equal(negative(), adaptive())


@pytest.mark.parametrize("index", [2.0, -0.5, -1.0, np.nan, np.inf, 1e30])
def test_batch_index_out_of_range_raises_index_error(index):
    boxes = BOXES.copy()
    boxes[2, 0] = index
    for call in both(boxes=boxes):
        with pytest.raises(IndexError, match=r"expected the batch index of ROI 2 \(boxes\[2, 0\]\) to be in \[0, 2\), but got"):
            call()


def test_batch_index_is_floored():
    boxes = BOXES.copy()
    boxes[:, 0] = [0.0, 1.999, 1.5, 0.7]
    np.testing.assert_array_equal(sg.roi_align(X + np.arange(2, dtype=np.float32)[:, None, None, None], boxes, 2),
                                  np.broadcast_to(np.array([0, 1, 1, 0], np.float32)[:, None, None, None], (4, 3, 2, 2)))


def test_boxes_shape_errors():
    for bad in [np.zeros((4, 4), np.float32), np.zeros((4,), np.float32), np.zeros((1, 4, 5), np.float32)]:
        with pytest.raises(ValueError, match=r"roi_align\(\): expected boxes of shape \(K, 5\) with rows \(batch_index, x1, y1, x2, y2\)"):
            sg.roi_align(X, bad, 2)
        with pytest.raises(ValueError, match=r"roi_align_backward\(\): expected boxes of shape \(K, 5\)"):
            sg.roi_align_backward(G, bad, X.shape, 2, 2, 1.0, 0, True)


def test_rank_and_size_errors():
    with pytest.raises(ValueError, match=r"roi_align\(\): expected input to be 4-D \(B, C, H, W\), but got 3-D shape \(3, 8, 8\)"):
        sg.roi_align(X[0], BOXES, 2)
    with pytest.raises(ValueError, match=r"expected output_size to have 1 or 2 entries, but got 3"):
        sg.roi_align(X, BOXES, (2, 2, 2))
    with pytest.raises(ValueError, match=r"expected pooled_height and pooled_width >= 0, but got 2 and -1"):
        sg.roi_align(X, BOXES, (2, -1))
    with pytest.raises(ValueError, match=r"roi_align_backward\(\): expected grad_output to be 4-D, but got 3-D"):
        sg.roi_align_backward(G[0], BOXES, X.shape, 2, 2, 1.0, 0, True)


def test_backward_consistency_errors():
    with pytest.raises(ValueError, match=r"expected input_shape to have 4 entries \(B, C, H, W\), but got 3 \(\[2, 3, 8\]\)"):
        sg.roi_align_backward(G, BOXES, (2, 3, 8), 2, 2, 1.0, 0, True)
    with pytest.raises(ValueError, match=r"expected input_shape entries >= 0, but got \[2, 3, -8, 8\]"):
        sg.roi_align_backward(G, BOXES, (2, 3, -8, 8), 2, 2, 1.0, 0, True)
    with pytest.raises(ValueError, match=r"expected boxes to have one row per ROI of grad_output \(4\), but got 3 rows"):
        sg.roi_align_backward(G, BOXES[:3], X.shape, 2, 2, 1.0, 0, True)
    with pytest.raises(ValueError, match=r"expected grad_output of pooled size \(pooled_height, pooled_width\) = \(2, 3\), but got 2x2"):
        sg.roi_align_backward(G, BOXES, X.shape, 2, 3, 1.0, 0, True)
    with pytest.raises(ValueError, match=r"expected grad_output to have the 4 channels of input_shape \(2, 4, 8, 8\), but got 3"):
        sg.roi_align_backward(G, BOXES, (2, 4, 8, 8), 2, 2, 1.0, 0, True)


def test_dtype_errors():
    with pytest.raises(TypeError, match=r"roi_align\(\): expected boxes to have the dtype of input \(float32\), but got float64"):
        sg.roi_align(X, BOXES.astype(np.float64), 2)
    with pytest.raises(TypeError, match=r"roi_align_backward\(\): expected boxes to have the dtype of grad_output \(float32\), but got float64"):
        sg.roi_align_backward(G, BOXES.astype(np.float64), X.shape, 2, 2, 1.0, 0, True)
    with pytest.raises(TypeError, match=r"roi_align\(\): expected input to be float16, bfloat16, float32 or float64, but got int64"):
        sg.roi_align(X.astype(np.int64), BOXES.astype(np.int64), 2)
    with pytest.raises(TypeError, match=r"expected sampling_ratio to be an int, but got 1.5"):
        sg.roi_align(X, BOXES, 2, sampling_ratio=1.5)
    with pytest.raises(TypeError, match=r"expected output_size to be an int or a sequence of ints"):
        sg.roi_align(X, BOXES, 2.0)
    with pytest.raises(TypeError, match=r"expected spatial_scale to be a float, but got 'x'"):
        sg.roi_align(X, BOXES, 2, spatial_scale="x")
