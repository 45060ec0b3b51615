"""float16 and bfloat16: every operator, forward and backward.

The contract (README, "Data types"): a half-precision input is widened exactly to float32, all arithmetic and
accumulation is float32 -- the very code of the float32 kernels -- and each output element is rounded once,
to nearest even. The tests check that contract directly (bit for bit against our float32 kernels), then its
consequence, the error against a float64 reference, and compare that error with PyTorch's own half-precision
CPU kernels where they exist.

The bound on the error against float64. Inputs are quantized first, so both sides see the same numbers; the
remaining error of an output element y is
  * one rounding to the storage format: at most u |y|, u = 2^-11 (float16) or 2^-8 (bfloat16), plus, in
    float16, half the smallest subnormal (2^-25) for |y| < 2^-14 (bfloat16 subnormals are float32's);
  * the float32 arithmetic before it: sums of at most a few hundred terms and weights computed from float32
    coordinates, each with relative error ~2^-24, so at most ~2^-16 of the magnitudes involved. We bound it
    by 2^-14 max|y| over the tensor: four times that, and still well below one float16 ulp of the larger
    elements, so a second rounding, truncation or half-precision accumulation would exceed the bound.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest

import spatialgrad as sg
from helpers import requires_torch, same_bits_for_thread_counts
from op_cases import cases as small_cases
from spatialgrad._registry import backward, lookup

try:
    import torch
    import torch.nn.functional as TF
    import torchvision
except ImportError:  # pragma: no cover - CI installs torch
    torch = None


@dataclass(frozen=True)
class Format:
    name: str
    unit_roundoff: float
    quantize: Callable[[np.ndarray], np.ndarray]  # float64/32 -> this format (round to nearest even)
    widen: Callable[[np.ndarray], np.ndarray]  # this format -> float32 (exact)
    subnormal_half_ulp: float

    def bits(self, a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(a).view(np.uint16)


FLOAT16 = Format("float16", 2.0**-11, lambda a: np.asarray(a).astype(np.float16),
                 lambda a: a.astype(np.float32), 2.0**-25)
BFLOAT16 = Format("bfloat16", 2.0**-8, sg.to_bfloat16, sg.bfloat16_to_float32, 0.0)
FORMATS = [FLOAT16, BFLOAT16]
ACCUMULATION_SLACK = 2.0**-14


def quantize_arrays(fmt: Format, arrays):
    """Floating arrays in the format; integer arrays (level tables) as they are."""
    return [fmt.quantize(a) if np.asarray(a).dtype.kind == "f" else a for a in arrays]


def widen_arrays(fmt: Format, arrays, dtype):
    return [fmt.widen(a).astype(dtype) if a.dtype.itemsize == 2 else a for a in arrays]


def op_cases(rng):
    """(id, op name, arrays, options): every mode of every operator, at shapes larger than a tile."""
    out = []
    x = rng.standard_normal((2, 3, 17, 15))
    for opts in (dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
                 dict(kernel_size=2), dict(kernel_size=(3, 2), stride=1, padding=(1, 0), divisor_override=5)):
        out.append((f"avg_pool2d-{len(out)}", "avg_pool2d", [x], opts))
    x = rng.standard_normal((2, 5, 9, 11))
    for opts in (dict(output_size=(17, 20)), dict(output_size=(17, 20), align_corners=True),
                 dict(scale_factor=1.7, layout="NHWC"), dict(output_size=(4, 6))):
        arr = np.ascontiguousarray(x.transpose(0, 2, 3, 1)) if opts.get("layout") == "NHWC" else x
        out.append((f"upsample-{len(out)}", "upsample_bilinear2d", [arr], opts))
    x = rng.standard_normal((2, 3, 9, 10))
    grid = rng.uniform(-1.2, 1.2, (2, 7, 8, 2))
    for i, mode in enumerate(("bilinear", "nearest", "bicubic")):
        for j, padding in enumerate(("zeros", "border", "reflection")):
            out.append((f"grid_sample-{mode}-{padding}", "grid_sample", [x, grid],
                        dict(mode=mode, padding_mode=padding, align_corners=(i + j) % 2 == 1)))
    x = rng.standard_normal((2, 4, 20, 24))
    corners = rng.uniform(0, 20, (6, 2, 2))
    boxes = np.concatenate([rng.integers(0, 2, (6, 1)), corners.min(axis=1), corners.max(axis=1)], axis=1)
    for opts in (dict(output_size=(3, 4), spatial_scale=1.0, sampling_ratio=2, aligned=True),
                 dict(output_size=5, spatial_scale=0.5, sampling_ratio=0, aligned=False)):
        out.append((f"roi_align-{len(out)}", "roi_align", [x, boxes], opts))
    shapes = np.array([[8, 9], [4, 5], [2, 3]], np.int64)
    areas = shapes.prod(axis=1)
    starts = np.cumsum(areas) - areas
    bs, queries, heads, points, channels = 2, 7, 2, 3, 12
    value = rng.standard_normal((bs, int(areas.sum()), heads, channels))
    loc = rng.uniform(-0.1, 1.1, (bs, queries, heads, len(shapes), points, 2))
    attn = rng.uniform(0, 1, (bs, queries, heads, len(shapes), points))
    out.append(("ms_deform_attn", "ms_deform_attn", [value, shapes, starts, loc, attn], {}))
    return out


CASES = op_cases(np.random.default_rng(8))


def each_case_and_format(cases):
    """Parametrizes a test over the given cases and both formats."""
    def decorate(test):
        test = pytest.mark.parametrize("case", cases, ids=[c[0] for c in cases])(test)
        return pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)(test)
    return decorate


def run(name, arrays, options, grad_output):
    """Forward output and the gradients of every differentiable array (None elsewhere)."""
    spec = lookup(name)
    named = dict(zip(spec.arrays, arrays))
    bound = spec.bind(arrays, options)[1]
    out = spec.forward(**named, **bound)
    if grad_output is None:
        return out, ()
    return out, backward(spec, grad_output, named, bound, spec.differentiable)


def quantized_problem(fmt: Format, name, arrays, options, rng):
    """The arrays in the format and a random output gradient in the format."""
    qarrays = quantize_arrays(fmt, arrays)
    out, _ = run(name, qarrays, options, None)
    return qarrays, fmt.quantize(rng.standard_normal(out.shape))


def half_and_references(fmt: Format, name, arrays, options, rng):
    """Our results in the format, our float32 results and float64 results, all on the same quantized data."""
    qarrays, grad_output = quantized_problem(fmt, name, arrays, options, rng)
    half = run(name, qarrays, options, grad_output)
    single = run(name, widen_arrays(fmt, qarrays, np.float32), options, fmt.widen(grad_output))
    double = run(name, widen_arrays(fmt, qarrays, np.float64), options, fmt.widen(grad_output).astype(np.float64))
    flat = lambda r: [r[0], *[g for g in r[1] if g is not None]]  # noqa: E731
    return flat(half), flat(single), flat(double)


def error_bound(fmt: Format, reference: np.ndarray) -> np.ndarray:
    scale = float(np.abs(reference).max()) if reference.size else 0.0
    return fmt.unit_roundoff * np.abs(reference) + ACCUMULATION_SLACK * scale + fmt.subnormal_half_ulp


@each_case_and_format(CASES)
def test_one_rounding_of_the_float32_result(case, fmt, rng):
    """The half-precision kernels are the float32 kernels with one round-to-nearest-even store."""
    _, name, arrays, options = case
    half, single, _ = half_and_references(fmt, name, arrays, options, rng)
    for ours, f32 in zip(half, single):
        assert ours.dtype.itemsize == 2 and ours.shape == f32.shape
        np.testing.assert_array_equal(fmt.bits(ours), fmt.bits(fmt.quantize(f32)))


@each_case_and_format(CASES)
def test_error_against_float64_within_the_format_bound(case, fmt, rng):
    _, name, arrays, options = case
    half, _, double = half_and_references(fmt, name, arrays, options, rng)
    for ours, ref in zip(half, double):
        err = np.abs(fmt.widen(ours).astype(np.float64) - ref)
        bound = error_bound(fmt, ref)
        worst = np.unravel_index(np.argmax(err - bound), err.shape) if err.size else None
        assert np.all(err <= bound), f"{fmt.name}: error {err[worst]:.3g} > bound {bound[worst]:.3g} at {worst}"
        # and the rounding really is the dominant term: relative errors of the order of u
        big = np.abs(ref) > 0.1 * np.abs(ref).max() if ref.size else np.zeros(0, bool)
        if big.any():
            assert float(np.max(err[big] / np.abs(ref[big]))) <= fmt.unit_roundoff * 1.1


@each_case_and_format(CASES[::3])
def test_threads_do_not_change_bits(case, fmt, rng):
    _, name, arrays, options = case
    qarrays, grad_output = quantized_problem(fmt, name, arrays, options, rng)

    def both():
        forward, grads = run(name, qarrays, options, grad_output)
        return (forward, *grads)

    same_bits_for_thread_counts(both)


def test_strided_nhwc_half_rows_match_contiguous(rng):
    # NHWC views whose channels are not innermost take the per-pixel row conversion; same bits as dense rows.
    x = rng.standard_normal((2, 5, 9, 7)).astype(np.float16).transpose(0, 2, 3, 1)
    g = rng.standard_normal((2, 5, 6, 11)).astype(np.float16).transpose(0, 2, 3, 1)
    forward = lambda a: sg.upsample_bilinear2d(a, (6, 11), layout="NHWC")
    backward = lambda a: sg.upsample_bilinear2d_backward(a, (6, 11), x.shape, layout="NHWC")
    for fn, a in [(forward, x), (backward, g)]:
        strided, dense = fn(a), fn(np.ascontiguousarray(a))
        assert strided.dtype == np.float16
        np.testing.assert_array_equal(strided.view(np.uint16), dense.view(np.uint16))


def test_float16_accumulates_in_float32_not_in_float16():
    # 4 x 60000 overflows float16 (max 65504); a float32 sum averages back to 60000 exactly.
    x = np.full((1, 1, 2, 2), 60000, np.float16)
    assert sg.avg_pool2d(x, 2)[0, 0, 0, 0] == np.float16(60000)
    # 2048 + 1 + 1 + ... is stuck at 2048 in float16 (ulp 2); in float32 the ones add up.
    x = np.ones((1, 1, 1, 64), np.float16)
    x[..., 0] = 2048
    assert sg.avg_pool2d(x, (1, 64), divisor_override=1)[0, 0, 0, 0] == np.float16(2048 + 63)


def test_overflow_rounds_to_inf_and_nan_inf_propagate():
    # 2x2 windows at stride 1 on a 5x5 input: the inner 3x3 pixels receive 4 x 60000 > 65504, the corners
    # receive 60000 once.
    g = np.full((1, 1, 4, 4), 60000, np.float16)
    grad = sg.avg_pool2d_backward(g, np.zeros((1, 1, 5, 5), np.float16), 2, stride=1, divisor_override=1)
    assert np.all(np.isposinf(grad[0, 0, 1:4, 1:4]))
    assert np.all(grad[0, 0, [0, 0, 4, 4], [0, 4, 0, 4]] == np.float16(60000))
    for fmt in FORMATS:
        x = fmt.quantize(np.arange(16.0).reshape(1, 1, 4, 4))
        wide = fmt.widen(x)
        wide[0, 0, 0, 0], wide[0, 0, 3, 3] = np.nan, np.inf
        y = fmt.widen(sg.avg_pool2d(fmt.quantize(wide), 2))
        assert np.isnan(y[0, 0, 0, 0]) and np.isposinf(y[0, 0, 1, 1])
        assert np.all(np.isfinite(y[0, 0, [0, 1], [1, 0]]))


def test_float16_subnormals_are_exact_inputs_and_rounded_outputs():
    tiny = np.float16(2.0**-24)  # the smallest float16 subnormal
    x = np.array([tiny * k for k in range(16)], np.float16).reshape(1, 1, 4, 4)
    y = sg.avg_pool2d(x, 2)
    expected = (x.astype(np.float64).reshape(2, 2, 2, 2).transpose(0, 2, 1, 3).reshape(4, 4).mean(axis=1))
    np.testing.assert_array_equal(y.reshape(-1), expected.astype(np.float16))  # numpy rounds to nearest even too


def test_ml_dtypes_bfloat16_arrays_when_installed():
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes is not a Debian package; marked bits are tested")
    x = np.random.default_rng(3).standard_normal((1, 2, 6, 6)).astype(ml_dtypes.bfloat16)
    y = sg.avg_pool2d(x, 2)
    assert y.dtype == x.dtype
    np.testing.assert_array_equal(y.view(np.uint16), sg.avg_pool2d(sg.bfloat16_bits(x.view(np.uint16)), 2))


def test_bfloat16_marking_helpers():
    bits = sg.to_bfloat16(np.array([1.0, -2.5, np.inf, np.nan, 1 + 2.0**-8, 1 + 3 * 2.0**-8], np.float32))
    assert sg.is_bfloat16(bits) and bits.dtype == sg.BFLOAT16_BITS
    back = sg.bfloat16_to_float32(bits)
    np.testing.assert_array_equal(back[:3], [1.0, -2.5, np.inf])
    assert np.isnan(back[3])
    assert back[4] == 1.0 and back[5] == 1 + 4 * 2.0**-8  # ties to even
    assert not sg.is_bfloat16(np.zeros(3, np.uint16)) and not sg.is_bfloat16(np.zeros(3, np.float16))
    with pytest.raises(TypeError, match=r"expected input to be a NumPy array of float16, bfloat16, float32 or "
                                        r"float64 .*uint16"):
        sg.avg_pool2d(np.zeros((1, 1, 4, 4), np.uint16), 2)  # unmarked bits are not guessed to be bfloat16
    with pytest.raises(TypeError, match=r"expected a bfloat16 array, but got dtype float32"):
        sg.bfloat16_to_float32(np.zeros(2, np.float32))
    with pytest.raises(TypeError, match=r"expected a uint16 or int16 array"):
        sg.bfloat16_bits(np.zeros(2, np.float32))


def test_a_float16_array_carrying_the_bfloat16_marker_is_float16():
    # The marker survives astype and views; it counts only on the uint16/int16 bit-pattern carriers.
    x = sg.to_bfloat16(np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)).astype(
        np.dtype(np.float16, metadata={"spatialgrad": "bfloat16"}))
    assert x.dtype == np.float16 and x.dtype.metadata
    assert not sg.is_bfloat16(x)
    y = sg.avg_pool2d(x, 2)
    assert y.dtype == np.float16 and not sg.is_bfloat16(y)
    np.testing.assert_array_equal(y.astype(np.float32), sg.avg_pool2d(x.astype(np.float32), 2).astype(np.float16))
    swapped = sg.bfloat16_bits(np.zeros(2, np.uint16)).view(np.dtype(">u2", metadata={"spatialgrad": "bfloat16"}))
    assert not sg.is_bfloat16(swapped)  # a non-native carrier is not read as bfloat16 either


# ---- PyTorch: the adapter in half precision, and torch's own half-precision CPU kernels ------------------


def torch_dtype(fmt: Format):
    return torch.float16 if fmt is FLOAT16 else torch.bfloat16


@requires_torch
@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_torch_adapter_gradients_match_float64(fmt, rng):
    from spatialgrad import torch as st

    def to_torch(a: np.ndarray, dtype):
        return torch.from_numpy(fmt.widen(a)).to(dtype) if a.dtype.itemsize == 2 else torch.from_numpy(a)

    for name, arrays, options in small_cases(rng):
        spec = lookup(name)
        qarrays = quantize_arrays(fmt, arrays)
        grad_output = fmt.quantize(rng.standard_normal(spec.forward(*qarrays, **options).shape))
        results = []
        for dtype in (torch_dtype(fmt), torch.float64):
            tensors = [to_torch(a, dtype).requires_grad_(d) for a, d in zip(qarrays, spec.differentiable)]
            kwargs = dict(size=options["output_size"]) if name == "upsample_bilinear2d" else options  # torch's name
            out = getattr(st, name)(*tensors, **kwargs)
            out.backward(to_torch(grad_output, dtype))
            results.append([out] + [t.grad for t in tensors if t.requires_grad])
        for ours, exact in zip(*results):
            assert ours.dtype == torch_dtype(fmt), name
            exact = exact.detach().numpy()
            err = np.abs(ours.detach().double().numpy() - exact)
            assert np.all(err <= error_bound(fmt, exact)), name


def torch_half_results(fmt: Format, name, qarrays, options, grad_output):
    """PyTorch's own CPU kernels in the format (forward, input gradient), or None if it has none."""
    dtype = torch_dtype(fmt)
    x = torch.from_numpy(fmt.widen(qarrays[0])).to(dtype).requires_grad_()
    if name == "avg_pool2d":
        out = TF.avg_pool2d(x, **options)
    elif name == "upsample_bilinear2d":
        if options.get("layout") == "NHWC":
            x_nchw = x.permute(0, 3, 1, 2)
            kw = dict(scale_factor=options["scale_factor"], mode="bilinear", align_corners=False)
            out = TF.interpolate(x_nchw, **kw).permute(0, 2, 3, 1)
        else:
            out = TF.interpolate(x, size=options["output_size"], mode="bilinear",
                                 align_corners=options.get("align_corners", False))
    elif name == "roi_align":
        boxes = torch.from_numpy(fmt.widen(qarrays[1])).to(dtype)
        out = torchvision.ops.roi_align(x, boxes, **options)
    elif name == "grid_sample":
        grid = torch.from_numpy(fmt.widen(qarrays[1])).to(dtype)
        out = TF.grid_sample(x, grid, **options)
    else:
        return None
    out.backward(torch.from_numpy(fmt.widen(grad_output)).to(dtype))
    return [out.detach().float().numpy(), x.grad.float().numpy()]


def torch_half_results_or_none(fmt: Format, name, qarrays, options, grad_output):
    """torch_half_results, or None where PyTorch (or torchvision) raises "not implemented": which kernels exist
    depends on the version (1.13 / 0.14: bfloat16 pooling and upsampling, float16 RoIAlign; 2.6 / 0.21: pooling,
    upsampling and grid sampling in both formats, RoIAlign in float16), so the call itself tells. Any other
    error fails the test."""
    try:
        return torch_half_results(fmt, name, qarrays, options, grad_output)
    except RuntimeError as error:
        if "not implemented" not in str(error):
            raise
        return None


@requires_torch
@each_case_and_format([c for c in CASES if c[1] != "ms_deform_attn"])
def test_no_less_accurate_than_torch_half_kernels(case, fmt, rng):
    _, name, arrays, options = case
    qarrays, grad_output = quantized_problem(fmt, name, arrays, options, rng)
    theirs = torch_half_results_or_none(fmt, name, qarrays, options, grad_output)
    if theirs is None:
        return  # PyTorch raised "not implemented" for this format: nothing to compare with
    ours = run(name, qarrays, options, grad_output)
    ours = [ours[0], ours[1][0]]
    exact = run(name, widen_arrays(fmt, qarrays, np.float64), options, fmt.widen(grad_output).astype(np.float64))
    exact = [exact[0], exact[1][0]]
    for what, a, b, ref in zip(("forward", "backward"), ours, theirs, exact):
        ours_err = np.abs(fmt.widen(a).astype(np.float64) - ref)
        torch_err = np.abs(b.astype(np.float64) - ref)
        # Both round a float32 value once at best, so compare the error sums, with a slack of one
        # rounding tie going the other way per thousand elements.
        slack = 1e-3 * fmt.unit_roundoff * float(np.abs(ref).sum())
        assert ours_err.sum() <= torch_err.sum() + slack, (what, ours_err.sum(), torch_err.sum())
        assert ours_err.max() <= torch_err.max() + ACCUMULATION_SLACK * float(np.abs(ref).max()), what
