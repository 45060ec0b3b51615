"""spatialgrad.ascend: every rule of the table at its boundary on each chip where it differs (the last accepted
value passes, the first rejected one is reported), strict() over every NumPy function, and the torch layer."""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import spatialgrad as sg
from spatialgrad import ascend, functional
from spatialgrad._registry import OPS, as_tuple, backward, pullback_call
from spatialgrad import _strict

import op_cases

CHIPS = ["910", "910B", "910_93", "310P", "950"]
DTYPES = ["float16", "bfloat16", "float32", "float64"]


def array(shape, dtype="float32"):
    """An array of `shape` without memory behind it: the check reads shapes and dtypes only."""
    if dtype == "bfloat16":
        return np.broadcast_to(np.zeros((), sg.BFLOAT16_BITS), shape)
    return np.broadcast_to(np.zeros((), dtype), shape)


# ---- one call builder per operator, from the quantities the rules test ------------------------------------

def grid_sampler(dtype="float32", mode="bilinear", mask=(True, True)):
    return ("grid_sampler_2d_backward", (array((1, 2, 3, 3), dtype), array((1, 2, 4, 4), dtype),
                                         array((1, 3, 3, 2), dtype)), dict(mode=mode, output_mask=mask))


def deform(dtype="float32", channels=8, num_heads=2, num_levels=1, num_queries=3, num_points=2):
    value = array((1, 16 * num_levels, num_heads, channels), dtype)
    shapes = np.tile(np.array([[4, 4]], np.int64), (num_levels, 1))
    starts = np.arange(num_levels, dtype=np.int64) * 16
    loc = array((1, num_queries, num_heads, num_levels, num_points, 2), dtype)
    weight = array((1, num_queries, num_heads, num_levels, num_points), dtype)
    grad = array((1, num_queries, num_heads * channels), dtype)
    return "ms_deform_attn_backward", (value, shapes, starts, loc, weight, grad), {}


def roi(dtype="float32", sampling_ratio=0, spatial_scale=1.0):
    return ("roi_align_backward", (array((1, 2, 2, 2), dtype), array((1, 5), dtype), (1, 2, 6, 6), 2, 2,
                                   spatial_scale, sampling_ratio, True), {})


def upsample(dtype="float32", output_size=(6, 6), scales=(0.0, 0.0), align_corners=False, layout="NCHW"):
    input_size = (1, 3, 3, 1) if layout == "NHWC" else (1, 1, 3, 3)
    grad_shape = (1, *output_size, 1) if layout == "NHWC" else (1, 1, *output_size)
    return ("upsample_bilinear2d_backward", (array(grad_shape, dtype), output_size, input_size),
            dict(scales_h=scales[0], scales_w=scales[1], align_corners=align_corners, layout=layout))


def avg_pool(dtype="float32", kernel=(4, 4), padding=(0, 0), divisor_override=None):
    return ("avg_pool2d_backward", (array((1, 1, 2, 2), dtype), array((1, 1, 8, 8), dtype), kernel),
            dict(padding=padding, divisor_override=divisor_override))


def findings(call, chip):
    op, args, kwargs = call
    return ascend.check(op, *args, chip=chip, **kwargs)


def broken(call, chip):
    """(argument, value, rejects) of each finding."""
    return [(f.argument, f.value, f.rejects) for f in findings(call, chip)]


# ---- the table, rule by rule -------------------------------------------------------------------------------
# (op, argument, chips, builder of the last accepted call, builder of the first rejected, value reported, rejects)
BOUNDARIES = [
    ("grid_sampler_2d_backward", "interpolationMode", ["910", "910B", "910_93", "950"],
     grid_sampler(mode="nearest"), grid_sampler(mode="bicubic"), 2, True),
    ("ms_deform_attn_backward", "channels", ["910B", "910_93", "950"], deform(channels=8), deform(channels=12), 12,
     True),
    ("ms_deform_attn_backward", "channels", ["910B", "910_93", "950"], deform(channels=256), deform(channels=264),
     264, True),
    ("ms_deform_attn_backward", "num_queries", ["910B", "910_93", "950"], deform(num_queries=499999),
     deform(num_queries=500000), 500000, True),
    ("ms_deform_attn_backward", "num_levels", ["910B", "910_93", "950"], deform(num_levels=16),
     deform(num_levels=17), 17, True),
    ("ms_deform_attn_backward", "num_heads", ["910B", "910_93", "950"], deform(num_heads=16), deform(num_heads=17),
     17, True),
    ("ms_deform_attn_backward", "num_points", ["910B", "910_93", "950"], deform(num_points=16),
     deform(num_points=17), 17, True),
    ("roi_align_backward", "samplingRatio", ["910", "910B", "910_93", "950"], roi(sampling_ratio=0),
     roi(sampling_ratio=-1), -1, True),
    ("roi_align_backward", "spatialScale", ["910", "910B", "910_93", "950"],
     roi(spatial_scale=float(np.nextafter(np.float32(np.finfo(np.float32).tiny), np.float32(1)))),
     roi(spatial_scale=float(np.finfo(np.float32).tiny)), float(np.finfo(np.float32).tiny), True),
    ("upsample_bilinear2d_backward", "outputSize[0]", ["910B", "910_93"],
     upsample(output_size=(4, 6), scales=(1.5, 2.0)), upsample(output_size=(5, 6), scales=(1.5, 2.0)), 5, False),
    ("upsample_bilinear2d_backward", "outputSize[1]", ["910B", "910_93"],
     upsample(output_size=(6, 4), scales=(2.0, 1.5)), upsample(output_size=(6, 5), scales=(2.0, 1.5)), 5, False),
    ("avg_pool2d_backward", "padding[0]", CHIPS, avg_pool(kernel=(5, 4), padding=(2, 0)),
     avg_pool(kernel=(5, 4), padding=(3, 0)), 3, True),
    ("avg_pool2d_backward", "padding[1]", CHIPS, avg_pool(kernel=(4, 4), padding=(0, 2)),
     avg_pool(kernel=(4, 4), padding=(0, 3)), 3, True),
    ("avg_pool2d_backward", "divisorOverride", ["910", "310P"], avg_pool(divisor_override=255),
     avg_pool(divisor_override=256), 256, True),
    ("avg_pool2d_backward", "divisorOverride", ["910", "310P"], avg_pool(divisor_override=-255),
     avg_pool(divisor_override=-256), -256, True),
]


def _case_id(case):
    return f"{case[0]}-{case[1]}-{case[5]}"


@pytest.mark.parametrize("case", BOUNDARIES, ids=_case_id)
def test_rule_boundary(case):
    op, argument, chips, accepted, rejected, value, rejects = case
    for chip in CHIPS:
        assert [f for f in findings(accepted, chip) if f.argument == argument] == [], chip
        found = [f for f in findings(rejected, chip) if f.argument == argument]
        if chip in chips:
            assert [(f.value, f.rejects) for f in found] == [(value, rejects)], chip
            assert found[0].source.split()[0] in ("ops-cv", "ops-nn") and found[0].op == op
            assert f"on Ascend {chip}" in str(found[0]) and len(str(found[0])) < 300
        else:
            assert found == [], chip


# Which dtypes each backward takes, per chip (None: the operator does not exist on the chip).
def dtype_cases():
    A2 = ["float16", "bfloat16", "float32"]
    old = ["float16", "float32"]
    return [
        (grid_sampler, {"910": ["float16", "float32", "float64"], "910B": DTYPES,
                        "910_93": ["float16", "float32", "float64"], "310P": None,
                        "950": ["float16", "float32", "float64"]}),
        (deform, {"910": None, "910B": A2, "910_93": A2, "310P": None, "950": A2}),
        (roi, {"910": ["float32"], "910B": ["float32"], "910_93": ["float32"], "310P": None, "950": ["float32"]}),
        (upsample, {"910": old, "910B": A2, "910_93": A2, "310P": old, "950": A2}),
        (avg_pool, {"910": old, "910B": A2, "910_93": A2, "310P": old, "950": A2}),
    ]


@pytest.mark.parametrize("build, accepted", dtype_cases(), ids=lambda v: getattr(v, "__name__", ""))
def test_dtype_rules_on_every_chip(build, accepted):
    for chip, dtypes in accepted.items():
        for dtype in DTYPES:
            found = broken(build(dtype=dtype), chip)
            if dtypes is None:  # the operator does not exist there: that is the one finding
                assert found == [("chip", chip, True)], (chip, dtype)
            elif dtype in dtypes:
                assert [f for f in found if f[0] == "dtype" and f[2]] == [], (chip, dtype)
            else:
                assert ("dtype", dtype, True) in found, (chip, dtype)


def test_avg_pool2d_float32_is_computed_in_float16_on_910_and_310p():
    for chip in CHIPS:
        found = broken(avg_pool(dtype="float32"), chip)
        assert found == ([("dtype", "float32", False)] if chip in ("910", "310P") else []), chip
        assert broken(avg_pool(dtype="float16"), chip) == []


def test_upsample_scales_rule_compares_both_axes_once_a_scale_is_given():
    # floor(3 * 1.5) = 4: 5 is reported, with or without align_corners; a zero scale on the other axis fails too.
    assert broken(upsample(output_size=(5, 6), scales=(1.5, 2.0), align_corners=True), "910B") == [
        ("outputSize[0]", 5, False)]
    assert broken(upsample(output_size=(4, 6), scales=(1.5, 0.0)), "910B") == [("outputSize[1]", 6, False)]
    assert broken(upsample(output_size=(5, 6)), "910B") == []  # no scale: outputSize is used
    assert broken(upsample(output_size=(5, 6), scales=(1.5, 2.0), layout="NHWC"), "910B") == [
        ("outputSize[0]", 5, False)]


def test_upsample_without_resizing_is_not_checked():
    # gradOut shaped like inputSize: the op_api skips its dtype check.
    assert broken(upsample(dtype="float64", output_size=(3, 3)), "910B") == []
    assert broken(upsample(dtype="float64", output_size=(3, 4)), "910B") == [("dtype", "float64", True)]


def test_numpy_integer_sizes():
    assert broken(avg_pool(kernel=np.int64(4), padding=np.int64(3)), "910B") == [("padding[0]", 3, True),
                                                                                ("padding[1]", 3, True)]
    assert broken(upsample(output_size=np.array([5, 6]), scales=(1.5, 2.0)), "910B") == [("outputSize[0]", 5, False)]


def test_grid_sampler_without_gradients_is_not_checked():
    # The op_api returns success before any check when output_mask asks for nothing.
    assert broken(grid_sampler(mode="bicubic", mask=(False, False)), "910B") == []
    assert broken(grid_sampler(mode="bicubic", mask=(False, True)), "910B") == [("interpolationMode", 2, True)]


def test_the_boundary_tests_cover_every_rule():
    covered = {(case[0], case[1]) for case in BOUNDARIES} | {(op, "dtype") for op in functional.__all__}
    covered |= {(op, "chip") for op in functional.__all__}
    missing = [(r["op"], r["argument"]) for r in ascend.rules() if (r["op"], r["argument"]) not in covered]
    assert missing == []
    assert all(set(r["chips"]) <= set(CHIPS) for r in ascend.rules())


def test_forwards_and_second_order_kernels_have_no_rules():
    rng = np.random.default_rng(0)
    for name, arrays, options in op_cases.cases(rng):
        for chip in CHIPS:
            assert ascend.check(name, *arrays, chip=chip, **options) == []


def test_findings_carry_the_documented_attributes():
    (f,) = findings(deform(channels=12), "910B")
    assert (f.rule, f.argument, f.value, f.rejects) == ("channels % 8 == 0", "channels", 12, True)
    assert f.source.endswith("aclnn_multi_scale_deformable_attention_grad.cpp")
    assert str(f) == f.message and f.message.startswith("ms_deform_attn_backward(): on Ascend 910B the NPU rejects")


def test_unknown_chip_and_operator():
    with pytest.raises(ValueError, match=r"expected chip to be one of '910', '910B', '910_93', '310P', '950', "
                                         r"but got '910C'"):
        findings(deform(), "910C")
    with pytest.raises(ValueError, match="'910B'"):
        with ascend.strict("Ascend910B"):
            pass
    assert _strict.chip is None
    with pytest.raises(ValueError, match="expected the name of a spatialgrad function"):
        ascend.check("conv2d", chip="910B")
    with pytest.raises(TypeError):
        ascend.check("roi_align_backward", np.zeros(1), nonsense=1, chip="910B")
    assert ascend.chips() == CHIPS


# ---- strict(): every NumPy function ------------------------------------------------------------------------

def real(call):
    """The call with real (writable, random) arrays, so that it runs."""
    op, args, kwargs = call
    rng = np.random.default_rng(1)
    out = [rng.uniform(0.1, 0.9, a.shape).astype(a.dtype) if isinstance(a, np.ndarray) and a.dtype.kind == "f"
           else a for a in args]
    return op, out, kwargs


def run(call):
    op, args, kwargs = real(call)
    return getattr(sg, op)(*args, **kwargs)


def test_strict_raises_on_rejected_calls_and_restores():
    call = real(grid_sampler(mode="bicubic"))
    with ascend.strict("910B"):
        with pytest.raises(ascend.AscendCompatibilityError, match=r"expected interpolationMode 0 \(bilinear\)") as e:
            getattr(sg, call[0])(*call[1], **call[2])
        assert isinstance(e.value, ValueError) and e.value.findings[0].argument == "interpolationMode"
        with ascend.strict("310P"):  # nests: the innermost chip applies
            with pytest.raises(ascend.AscendCompatibilityError, match="does not exist there"):
                run(grid_sampler())
        run(grid_sampler())
    assert _strict.chip is None
    run(grid_sampler(mode="bicubic"))


def test_strict_contexts_left_out_of_order_leave_no_check():
    # As threads leave them: the first entered is left first. Each context's check lasts exactly as long as it.
    first, second = ascend.strict("910B"), ascend.strict("310P", rejected="warn")
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert (_strict.chip, _strict.raise_rejected) == ("310P", False)
    second.__exit__(None, None, None)
    assert (_strict.chip, _strict.raise_rejected) == (None, True)
    run(grid_sampler(mode="bicubic"))


def test_strict_warns_on_computed_differently_and_results_do_not_change():
    call = upsample(output_size=(5, 6), scales=(1.5, 2.0))
    op, args, kwargs = real(call)
    plain = getattr(sg, op)(*args, **kwargs)
    with ascend.strict("910B"), pytest.warns(ascend.AscendCompatibilityWarning, match=r"outputSize\[0\] = 5"):
        checked = getattr(sg, op)(*args, **kwargs)
    np.testing.assert_array_equal(plain, checked)
    with ascend.strict("910B"), warnings.catch_warnings():
        warnings.simplefilter("error")
        run(upsample(output_size=(4, 6), scales=(1.5, 2.0)))  # the last accepted: silent


def test_strict_rejected_warn_lists_every_call():
    with ascend.strict("910B", rejected="warn"), pytest.warns(ascend.AscendCompatibilityWarning) as record:
        run(grid_sampler(mode="bicubic"))
        run(deform(channels=12))
    assert [str(w.message).split("(")[0] for w in record] == ["grid_sampler_2d_backward", "ms_deform_attn_backward"]
    with pytest.raises(ValueError, match="expected rejected to be 'raise' or 'warn'"):
        with ascend.strict("910B", rejected="ignore"):
            pass


def test_strict_leaves_the_operators_own_errors_to_them():
    with ascend.strict("910B"), pytest.raises(TypeError, match="expected grad_output to be float16, .* but got int32"):
        sg.roi_align_backward(np.zeros((1, 2, 2, 2), np.int32), np.zeros((1, 5), np.int32), (1, 2, 6, 6), 2, 2,
                              1.0, 0, True)


def test_every_numpy_function_is_checked_under_strict(monkeypatch):
    seen = set()
    monkeypatch.setattr(_strict, "enforce", lambda op, arguments: seen.add(op))
    monkeypatch.setattr(_strict, "chip", "910B")
    rng = np.random.default_rng(0)
    for name, arrays, options in op_cases.cases(rng):
        spec = OPS[name]
        out = spec.forward(*arrays, **options)
        a, o = spec.bind(arrays, options)
        needs = list(spec.differentiable)
        call = pullback_call(spec, (np.ones_like(out),), a, o, needs)
        target = OPS[call.op]
        outputs = as_tuple(target.forward(**call.arrays, **call.options))
        cotangents = tuple(None if x is None else np.ones_like(x) for x in outputs)
        backward(target, cotangents if target.outputs > 1 else cotangents[0], call.arrays, call.options,
                 list(target.differentiable))
    assert seen == set(functional.__all__)


# ---- spatialgrad.torch --------------------------------------------------------------------------------------

def test_torch_patch_and_nn_modules_honour_the_check():
    torch = pytest.importorskip("torch")
    import spatialgrad.torch as sgt
    from spatialgrad.torch import nn as sgnn

    x = torch.rand(1, 2, 5, 5, requires_grad=True)
    grid = torch.rand(1, 3, 3, 2) * 2 - 1
    with sgt.patch(ascend="910B"):
        out = torch.nn.functional.grid_sample(x, grid, mode="bicubic", align_corners=False)  # the forward runs
        with pytest.raises(ascend.AscendCompatibilityError, match="interpolationMode"):
            out.sum().backward()
        attention = sgnn.MultiScaleDeformableAttention(embed_dims=24, num_heads=2, num_levels=1, num_points=2,
                                                       batch_first=True)
        query = torch.rand(1, 5, 24)
        value = torch.rand(1, 16, 24)
        shapes = torch.tensor([[4, 4]])
        starts = torch.tensor([0])
        ref = torch.rand(1, 5, 1, 2)
        out = attention(query, value=value, reference_points=ref, spatial_shapes=shapes, level_start_index=starts)
        with pytest.raises(ascend.AscendCompatibilityError, match="channels % 8 == 0, but got channels = 12"):
            out.sum().backward()
    assert _strict.chip is None
    out = torch.nn.functional.grid_sample(x, grid, mode="bicubic", align_corners=False)
    out.sum().backward()  # outside: as before
    with pytest.raises(ValueError, match="expected chip to be one of"):
        sgt.patch(ascend="910C")


def test_docs_table_lists_every_rule():
    docs = Path(__file__).resolve().parents[2] / "docs" / "ascend.md"
    rows = [line for line in docs.read_text(encoding="utf-8").splitlines() if line.startswith("| `")]
    expected = [f"| `{r['op']}` | {', '.join(r['chips'])} | `{r['argument']}` | {r['rule']} | "
                f"{'rejects' if r['rejects'] else 'computes differently'} | `{r['source']}` |" for r in ascend.rules()]
    assert rows == expected
