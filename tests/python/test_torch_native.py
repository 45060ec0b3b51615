"""The native PyTorch operators (libspatialgrad_torch, ``torch.ops.spatialgrad.*``) behind spatialgrad.torch: the same
bits as the Python path over the NumPy API, C++ autograd to second order, PyTorch's thread pool, and the core's
error kinds as Python exceptions. The Python path (``spatialgrad.torch.native`` False) is the reference here."""
import os

import pytest

from helpers import run_probe

torch = pytest.importorskip("torch")
import spatialgrad.torch as sgt  # noqa: E402
from spatialgrad.torch import _common  # noqa: E402

pytestmark = pytest.mark.skipif(not sgt.native and os.environ.get("SPATIALGRAD_REQUIRE_TORCH") != "1",
                                reason="libspatialgrad_torch was not built (no libtorch)")

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def _inputs(dtype, *shapes_and_ranges, seed=0):
    generator = torch.Generator().manual_seed(seed)
    tensors = []
    for shape, low, high in shapes_and_ranges:
        t = torch.rand(shape, generator=generator, dtype=torch.float64) * (high - low) + low
        tensors.append(t.to(dtype).requires_grad_())
    return tensors


def _deform_tables():
    return torch.tensor([[4, 4], [2, 3]]), torch.tensor([0, 16])


# name -> (inputs(dtype): the differentiable tensors, call(*tensors))
CASES = {
    "avg_pool2d": (lambda d: _inputs(d, ((2, 3, 9, 9), -1, 1)),
                   lambda x: sgt.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False)),
    "avg_pool2d_3d_ceil": (lambda d: _inputs(d, ((3, 7, 8), -1, 1)),
                           lambda x: sgt.avg_pool2d(x, (2, 3), ceil_mode=True, divisor_override=5)),
    "upsample_bilinear2d": (lambda d: _inputs(d, ((2, 3, 5, 7), -1, 1)),
                            lambda x: sgt.upsample_bilinear2d(x, size=(9, 11))),
    "upsample_channels_last": (
        lambda d: [t.detach().to(memory_format=torch.channels_last).requires_grad_()
                   for t in _inputs(d, ((2, 4, 5, 6), -1, 1))],
        lambda x: sgt.upsample_bilinear2d(x, scale_factor=1.7, align_corners=True)),
    "grid_sample": (lambda d: _inputs(d, ((2, 3, 6, 7), -1, 1), ((2, 4, 5, 2), -1.1, 1.1)),
                    lambda x, g: sgt.grid_sample(x, g, align_corners=False)),
    "grid_sample_bicubic_border": (lambda d: _inputs(d, ((1, 2, 6, 5), -1, 1), ((1, 3, 4, 2), -1.2, 1.2)),
                                   lambda x, g: sgt.grid_sample(x, g, "bicubic", "border", align_corners=True)),
    "roi_align": (lambda d: _inputs(d, ((2, 3, 10, 12), -1, 1)),
                  lambda x: sgt.roi_align(x, torch.tensor([[0, 1.0, 1.5, 9.0, 7.0], [1, 0.5, 2.0, 5.0, 9.5]],
                                                          dtype=x.dtype), 3, 0.5, -1, True)),
    "ms_deform_attn": (lambda d: _inputs(d, ((1, 22, 2, 4), -1, 1), ((1, 3, 2, 2, 3, 2), 0, 1), ((1, 3, 2, 2, 3), 0, 1)),
                       lambda v, loc, w: sgt.ms_deform_attn(v, *_deform_tables(), loc, w)),
}


def _forward_and_gradients(name, dtype):
    make, call = CASES[name]
    tensors = make(dtype)
    out = call(*tensors)
    grad_output = torch.rand(out.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64).to(dtype)
    return [out, *torch.autograd.grad(out, tensors, grad_output)]


def _bits(t):
    return t.detach().contiguous().view(torch.int16 if t.element_size() == 2 else torch.uint8)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(CASES))
def test_native_results_are_the_bits_of_the_python_path(name, dtype, monkeypatch):
    native = _forward_and_gradients(name, dtype)
    monkeypatch.setattr(sgt, "native", False)
    python = _forward_and_gradients(name, dtype)
    for ours, reference in zip(native, python):
        assert ours.dtype == reference.dtype and ours.shape == reference.shape
        assert ours.is_contiguous() == reference.is_contiguous()
        assert torch.equal(_bits(ours), _bits(reference))


def test_the_adapters_call_the_native_operators():
    x = torch.rand(1, 2, 8, 8, requires_grad=True)
    y = sgt.avg_pool2d(x, 2)
    assert "AvgPool2d" in y.grad_fn.name()  # a C++ node, not _SpatialgradFunction's Python one
    (g,) = torch.autograd.grad(y.sum(), x, create_graph=True)
    assert "AvgPool2dBackward" in g.grad_fn.name()


@pytest.mark.parametrize("name", ["avg_pool2d", "upsample_bilinear2d", "roi_align", "grid_sample", "ms_deform_attn"])
def test_second_order_never_enters_python(name, monkeypatch):
    def refuse(*args):
        raise AssertionError("the Python autograd.Function was called")

    monkeypatch.setattr(_common._SpatialgradFunction, "apply", refuse)
    make, call = CASES[name]
    tensors = make(torch.float64)
    grads = torch.autograd.grad(call(*tensors).pow(2).sum(), tensors, create_graph=True)
    second = torch.autograd.grad(sum(g.pow(2).sum() for g in grads), tensors, allow_unused=True)
    assert any(s is not None and s.abs().sum() > 0 for s in second)


@pytest.mark.parametrize("name", ["grid_sample", "ms_deform_attn"])
def test_third_order_raises_the_python_paths_message(name):
    make, call = CASES[name]
    tensors = make(torch.float64)
    last = tensors[-1]
    g = torch.autograd.grad(call(*tensors).pow(2).sum(), last, create_graph=True)[0]
    h = torch.autograd.grad(g.pow(2).sum(), last, create_graph=True)[0]
    with pytest.raises(RuntimeError, match=f"^spatialgrad.torch: spatialgrad: .*_double_backward has no derivative "
                                           f".*third-order gradients of {name} are not implemented"):
        h.sum().backward()


def test_the_backward_computes_only_requested_gradients():
    x, grid = _inputs(torch.float64, ((1, 2, 5, 5), -1, 1), ((1, 3, 3, 2), -1, 1))
    g = torch.ones(1, 2, 3, 3, dtype=torch.float64)
    grad_input, grad_grid = torch.ops.spatialgrad.grid_sampler_2d_backward(g, x, grid, 0, 0, False, [False, True])
    assert grad_input is None and grad_grid.shape == grid.shape
    d = torch.ops.spatialgrad.grid_sampler_2d_double_backward(None, torch.ones_like(grid), g, x, grid, 0, 0, False,
                                                              [True, False, False])
    assert d[0].shape == g.shape and d[1] is None and d[2] is None
    x.detach_()
    sgt.grid_sample(x, grid, align_corners=False).sum().backward()
    assert x.grad is None and grid.grad is not None


# ---- errors: the core's kinds as the same Python exceptions and messages -------------------------------------

def _python_path_error(monkeypatch, call):
    monkeypatch.setattr(sgt, "native", False)
    try:
        call()
    except Exception as error:  # noqa: BLE001 - the very exception is what is compared
        return error
    finally:
        monkeypatch.setattr(sgt, "native", True)
    raise AssertionError("the Python path accepted the call")


HUGE_PLANE = (torch.empty(1, 0, 1, 2**31), torch.zeros(1, 1, 1, 2))  # no elements, W past int32

ERROR_CALLS = {
    "overflow": (OverflowError, lambda: sgt.grid_sample(*HUGE_PLANE, align_corners=False)),
    "value": (ValueError, lambda: sgt.avg_pool2d(torch.rand(1, 1, 4, 4), 2, padding=2)),
    "type": (TypeError, lambda: sgt.grid_sample(torch.rand(1, 1, 4, 4), torch.rand(1, 2, 2, 2, dtype=torch.float64),
                                                align_corners=False)),
    "index": (IndexError, lambda: sgt.roi_align(torch.rand(1, 1, 4, 4), torch.tensor([[3, 0.0, 0.0, 2.0, 2.0]]), 2)),
    "value_upsample": (ValueError, lambda: sgt.upsample_bilinear2d(torch.rand(1, 1, 4, 4), size=(0, 3))),
    "value_deform": (ValueError, lambda: sgt.ms_deform_attn(torch.rand(1, 21, 2, 4), *_deform_tables(),
                                                            torch.rand(1, 3, 2, 2, 3, 2), torch.rand(1, 3, 2, 2, 3))),
    "integer_dtype": (TypeError, lambda: sgt.avg_pool2d(torch.ones(1, 1, 4, 4, dtype=torch.int32), 2)),
}


@pytest.mark.skipif(not sgt.native, reason="the native operators did not load")
@pytest.mark.parametrize("kind", list(ERROR_CALLS))
def test_errors_have_the_python_paths_type_and_message(kind, monkeypatch):
    expected_type, call = ERROR_CALLS[kind]
    expected = _python_path_error(monkeypatch, call)
    assert type(expected) is expected_type
    with pytest.raises(expected_type) as raised:
        call()
    assert str(raised.value) == str(expected)


def test_the_operators_raise_the_core_kinds_directly():
    ops = torch.ops.spatialgrad
    with pytest.raises(ValueError, match=r"^avg_pool2d\(\): expected padding"):
        ops.avg_pool2d(torch.rand(1, 1, 4, 4), [2], [], [2])
    with pytest.raises(TypeError, match=r"^avg_pool2d\(\): expected input to be a tensor of float16, bfloat16, "
                                        r"float32 or float64, but got dtype int16"):
        ops.avg_pool2d(torch.ones(1, 1, 4, 4, dtype=torch.int16), [2], [], [0])
    with pytest.raises(IndexError, match=r"^roi_align\(\): "):
        ops.roi_align(torch.rand(1, 1, 4, 4), torch.tensor([[5, 0.0, 0.0, 2.0, 2.0]]), 1.0, 2, 2, 0, True)
    # PyTorch 1.13 has no c10 error type for OverflowError: the kind arrives as a RuntimeError, message kept
    # (the adapters then run the Python path, which raises the OverflowError: ERROR_CALLS["overflow"]).
    with pytest.raises(RuntimeError, match=r"^grid_sampler_2d\(\): expected input planes with H and W below"):
        ops.grid_sampler_2d(*HUGE_PLANE, 0, 0, False)


def test_an_argument_the_schema_does_not_take_runs_the_python_path():
    x = torch.rand(1, 2, 6, 6)
    import numpy as np
    assert torch.equal(sgt.avg_pool2d(x, np.int64(2)), sgt.avg_pool2d(x, 2))  # a NumPy integer
    with pytest.raises(ValueError, match=r"grid_sample\(\): expected mode to be one of"):
        sgt.grid_sample(x, torch.rand(1, 2, 2, 2), mode="linear", align_corners=False)


# ---- threads: PyTorch's pool, torch.set_num_threads, the same bits for any count --------------------------------

def _large_boxes():
    generator = torch.Generator().manual_seed(2)
    corners = torch.rand(40, 2, generator=generator) * 30
    sizes = torch.rand(40, 2, generator=generator) * 20 + 1
    index = torch.randint(0, 2, (40, 1), generator=generator).float()
    return torch.cat([index, corners, corners + sizes], dim=1)


# Inputs large enough that the kernels split their work into several tasks.
LARGE_CASES = {
    "avg_pool2d": (lambda: _inputs(torch.float32, ((4, 16, 64, 64), -1, 1)), lambda x: sgt.avg_pool2d(x, 3, 2, 1)),
    "upsample_bilinear2d": (lambda: _inputs(torch.float32, ((4, 16, 32, 32), -1, 1)),
                            lambda x: sgt.upsample_bilinear2d(x, size=(67, 61))),
    "grid_sample": (lambda: _inputs(torch.float32, ((4, 8, 48, 48), -1, 1), ((4, 40, 40, 2), -1.1, 1.1)),
                    lambda x, g: sgt.grid_sample(x, g, align_corners=False)),
    "roi_align": (lambda: _inputs(torch.float32, ((2, 16, 40, 40), -1, 1)),
                  lambda x: sgt.roi_align(x, _large_boxes(), 7, 1.0, 2, True)),
    "ms_deform_attn": (lambda: _inputs(torch.float32, ((2, 320, 4, 8), -1, 1), ((2, 100, 4, 2, 4, 2), 0, 1),
                                       ((2, 100, 4, 2, 4), 0, 1)),
                       lambda v, loc, w: sgt.ms_deform_attn(v, torch.tensor([[16, 16], [8, 8]]),
                                                            torch.tensor([0, 256]), loc, w)),
}


@pytest.mark.parametrize("name", list(LARGE_CASES))
def test_bits_do_not_depend_on_torch_threads_or_the_executor(name, monkeypatch):
    make, call = LARGE_CASES[name]

    def run():
        tensors = make()
        out = call(*tensors)
        return [out, *torch.autograd.grad(out, tensors, torch.ones_like(out) / 3)]

    previous = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = run()
        torch.set_num_threads(2)
        two = run()
    finally:
        torch.set_num_threads(previous)
    monkeypatch.setattr(sgt, "native", False)  # the Python path: spatialgrad's pool, 2 threads
    ours = run()
    assert all(torch.equal(a, b) and torch.equal(a, c) for a, b, c in zip(one, two, ours))


def test_native_and_numpy_calls_run_on_torchs_pool():
    # In a fresh process no parallel region has run: libgomp starts its one worker (2 threads) on the first, our
    # pool its worker on its first call. Inputs come from NumPy so that no PyTorch operator runs in parallel
    # first. (Compiled without -fopenmp, ATen's inline at::parallel_for ran every native call on one thread.)
    result = run_probe("""
        import os, numpy as np, torch, spatialgrad as sg, spatialgrad.torch as sgt
        from spatialgrad import _core
        torch.set_num_threads(2); sg.set_num_threads(2)
        threads = lambda: len(os.listdir("/proc/self/task"))
        array = np.random.default_rng(0).random((8, 32, 128, 128), dtype=np.float32)
        x = torch.from_numpy(array)
        start = threads()
        for _ in range(3):
            sgt.avg_pool2d(x, 3)
        native = threads()
        for _ in range(3):
            sg.avg_pool2d(array, 3)
        numpy = threads()
        _core._use_host_executor(None)  # back to spatialgrad's pool: its worker starts
        sg.avg_pool2d(array, 3)
        print(sgt.native, start, native, numpy, threads())
    """)
    assert result.returncode == 0, result.stderr
    loaded, start, native, numpy, own_pool = result.stdout.split()
    assert loaded == "True"
    assert int(native) == int(start) + 1, "the native operators run on PyTorch's OpenMP pool (its one worker)"
    assert int(numpy) == int(native), "NumPy calls run on PyTorch's pool too once spatialgrad.torch is imported"
    assert int(own_pool) > int(numpy), "without the host executor NumPy calls run on spatialgrad's pool"


def test_the_host_executor_takes_only_pytorchs_pool():
    from spatialgrad import _core
    with pytest.raises(TypeError, match="capsule named 'spatialgrad.Executor'"):
        _core._use_host_executor(object())


def test_a_forked_child_runs_the_native_operators():
    result = run_probe("""
        import os, numpy as np, torch, spatialgrad as sg, spatialgrad.torch as sgt
        torch.set_num_threads(2)
        x = torch.rand(4, 16, 96, 96)
        expected = sgt.avg_pool2d(x, 3, 2, 1)  # the parent uses PyTorch's (OpenMP) pool first
        pid = os.fork()
        if pid == 0:  # the child has no OpenMP threads: spatialgrad's pool runs native and NumPy calls
            # (compared in NumPy: a parallel PyTorch operator, torch.equal on large tensors too, hangs here)
            same = np.array_equal(sgt.avg_pool2d(x, 3, 2, 1).numpy(), expected.numpy())
            same = same and np.array_equal(sg.avg_pool2d(x.numpy(), 3, 2, 1), expected.numpy())
            os._exit(0 if same else 3)
        _, status = os.waitpid(pid, 0)
        print("child exit", os.waitstatus_to_exitcode(status))
    """)
    assert result.returncode == 0, result.stderr
    assert "child exit 0" in result.stdout


# ---- the Python path -----------------------------------------------------------------------------------------

def test_the_python_path_still_works_without_the_library():
    result = run_probe("""
        import os
        os.environ["SPATIALGRAD_TORCH_NATIVE"] = "0"
        import torch, spatialgrad.torch as sgt
        x = torch.rand(1, 2, 8, 8, dtype=torch.float64, requires_grad=True)
        grid = (torch.rand(1, 3, 3, 2, dtype=torch.float64) * 2 - 1).requires_grad_()
        boxes = torch.tensor([[0, 1.0, 1.0, 6.0, 5.0]], dtype=torch.float64)
        outs = [sgt.avg_pool2d(x, 2), sgt.upsample_bilinear2d(x, scale_factor=2), sgt.roi_align(x, boxes, 2),
                sgt.grid_sample(x, grid, align_corners=False)]
        sum(o.sum() for o in outs).backward()
        ok = torch.autograd.gradgradcheck(lambda a, b: sgt.grid_sample(a, b, align_corners=False), (x, grid))
        print(sgt.native, type(outs[0].grad_fn).__name__, x.grad.shape, ok)
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "_SpatialgradFunctionBackward", "torch.Size([1,", "2,", "8,", "8])", "True"]


# ---- tensors the CPU kernels must not read directly, and edge arguments -------------------------------------

def test_special_tensors_go_through_the_dispatcher():
    # A negative view's memory holds -x, a ZeroTensor has no memory: the CPU kernel reading them directly gave
    # the wrong sign, or read a null pointer.
    x = torch.rand(1, 2, 8, 8)
    assert torch.equal(sgt.avg_pool2d(torch._neg_view(x), 2), sgt.avg_pool2d(-x, 2))
    assert torch.equal(sgt.avg_pool2d(torch._efficientzerotensor((1, 2, 8, 8)), 2), torch.zeros(1, 2, 4, 4))


def test_forward_mode_ad_raises_rather_than_dropping_the_tangent():
    import torch.autograd.forward_ad as forward_ad
    x = torch.rand(1, 2, 8, 8)
    with forward_ad.dual_level():
        dual = forward_ad.make_dual(x, torch.ones_like(x))
        with pytest.raises(RuntimeError, match="forward-mode differentiation .* is not implemented"):
            torch.ops.spatialgrad.avg_pool2d(dual, [2], [], [0], False, True, None)
        with pytest.raises(NotImplementedError, match="jvp"):
            sgt.avg_pool2d(dual, 2)


def test_an_explicit_memory_format_of_a_tensor_not_4d_is_reported():
    with pytest.raises(ValueError, match="expected grad_output to be 4-D"):
        torch.ops.spatialgrad.upsample_bilinear2d_backward(torch.rand(2, 3), [2, 3], [1, 1, 2, 2], False, None,
                                                           torch.channels_last)


def test_vmap_over_samples_of_no_images():
    import functorch
    out = functorch.vmap(lambda t: sgt.avg_pool2d(t, 2))(torch.rand(3, 0, 2, 8, 8))
    assert out.shape == (3, 0, 2, 4, 4)
