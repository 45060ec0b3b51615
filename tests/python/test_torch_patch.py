"""spatialgrad.torch.patch(): existing PyTorch/torchvision code routed to spatialgrad, and back."""
import random
import sys
import threading
import time
import warnings

import pytest

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")

import torch.nn.functional as F  # noqa: E402

import spatialgrad.torch as sgt  # noqa: E402
from spatialgrad import _strict  # noqa: E402
from helpers import count_patch_calls  # noqa: E402

ROUTED = [(F, "grid_sample"), (F, "interpolate"), (F, "upsample"), (F, "upsample_bilinear"), (F, "avg_pool2d"),
          (torchvision.ops, "roi_align")]
# Every name patch() replaces: the above and the names torchvision's own modules call.
REPLACED = ROUTED + [(sys.modules["torchvision.ops.roi_align"], "roi_align"),
                     (sys.modules["torchvision.ops.poolers"], "roi_align")]


@pytest.fixture
def calls(monkeypatch):
    """Counts the spatialgrad functions the replacements call."""
    return count_patch_calls(monkeypatch, ("sg_grid_sample", "sg_upsample_bilinear2d", "sg_avg_pool2d", "sg_roi_align"))


def originals():
    return {(m, n): getattr(m, n) for m, n in REPLACED}


def test_routed_functions_are_spatialgrads_and_come_back():
    before = originals()
    with sgt.patch():
        for module, name in ROUTED:
            assert getattr(module, name).__module__.startswith("spatialgrad"), name
    assert originals() == before


def test_results_equal_pytorchs_and_gradients_flow(calls):
    torch.manual_seed(0)
    x = torch.rand(2, 3, 9, 8, dtype=torch.float64, requires_grad=True)
    grid = (torch.rand(2, 4, 5, 2, dtype=torch.float64) * 2.2 - 1.1)
    boxes = torch.tensor([[0, 1.0, 1.5, 6.0, 7.0], [1, 0.5, 0.0, 4.0, 3.0]], dtype=torch.float64)
    modules = [torch.nn.AvgPool2d(3, 2, 1), torch.nn.Upsample(scale_factor=2, mode="bilinear"),
               torch.nn.UpsamplingBilinear2d(size=(5, 7)), torchvision.ops.RoIAlign((2, 2), 0.5, 2, aligned=True)]

    def run():
        outs = [F.grid_sample(x, grid, mode="bicubic", align_corners=True),
                F.interpolate(x, size=(11, 6), mode="bilinear", align_corners=False),
                F.avg_pool2d(x, 2, ceil_mode=True), torchvision.ops.roi_align(x, boxes, 3, 0.5, 2, True)]
        outs += [m(x) if not isinstance(m, torchvision.ops.RoIAlign) else m(x, boxes) for m in modules]
        return outs

    expected = run()
    expected_grads = torch.autograd.grad(sum(o.square().sum() for o in expected), x)[0]
    with sgt.patch():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = run()
    grads = torch.autograd.grad(sum(o.square().sum() for o in got), x)[0]
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(grads, expected_grads)
    assert calls == {"sg_grid_sample": 1, "sg_upsample_bilinear2d": 3, "sg_avg_pool2d": 2, "sg_roi_align": 2}


def test_what_is_not_covered_falls_through(calls):
    x = torch.rand(1, 2, 6, 6)
    with sgt.patch():
        F.interpolate(x, scale_factor=2, mode="nearest")          # another mode
        F.interpolate(torch.rand(1, 2, 4, 4, 4), scale_factor=2, mode="trilinear")
        F.interpolate(x, size=(3, 3), mode="bilinear", antialias=True)
        assert F.avg_pool2d(torch.ones(1, 2, 6, 6, dtype=torch.int64), 2).dtype == torch.int64  # an integer dtype
        F.avg_pool2d(x, 2)  # ours
        F.grid_sample(torch.rand(1, 1, 4, 4, 4), torch.rand(1, 2, 2, 2, 3), align_corners=False)  # 5-D
        with pytest.raises(RuntimeError, match=r"^avg_pool2d\(\): expected padding"):  # rejected by both: our
            F.avg_pool2d(x, 2, padding=2)                                          # message, PyTorch's type
    assert calls == {"sg_avg_pool2d": 2}  # the float call, and the rejected one before PyTorch raised


def test_tracing_without_the_native_operators_falls_through(calls, monkeypatch):
    """The Python path would record a Python call (not savable): a trace records PyTorch's operator instead.
    (With the native operators, the trace records spatialgrad's: tests/python/test_torch_jit.py.)"""
    monkeypatch.setattr(sgt, "native", False)
    with sgt.patch():
        traced = torch.jit.trace(lambda t: F.avg_pool2d(t, 2), (torch.rand(1, 2, 6, 6),), check_trace=False)
    assert calls == {}
    assert "aten::avg_pool2d" in str(traced.graph)


def test_originals_come_back_after_an_exception():
    before = originals()
    with pytest.raises(KeyError):
        with sgt.patch():
            raise KeyError("boom")
    assert originals() == before


def test_nesting_start_stop_and_decorator():
    before = originals()
    outer = sgt.patch()
    outer.start()
    outer_grid_sample = F.grid_sample
    with sgt.patch(ops=["grid_sample"]):
        assert F.grid_sample is outer_grid_sample  # one replacement, shared (not a wrapper of the outer one)
        assert F.avg_pool2d.__module__.startswith("spatialgrad")
    assert F.grid_sample is outer_grid_sample
    outer.stop()
    assert originals() == before
    with pytest.raises(RuntimeError, match="expected a started patch"):
        outer.stop()

    @sgt.patch(ops=["avg_pool2d"])
    def pooled_module():
        return F.avg_pool2d.__module__, F.grid_sample.__module__

    assert pooled_module()[0].startswith("spatialgrad") and pooled_module()[1].startswith("torch")
    assert originals() == before


def test_unknown_operator_names_are_errors():
    with pytest.raises(ValueError, match=r"patch\(\): expected ops to be a list of roi_align, upsample_bilinear2d"):
        sgt.patch(ops=["conv2d"])
    with pytest.raises(ValueError, match="expected ops"):
        sgt.patch(ops="grid_sample")


def test_multiscale_roi_align_routes_through_torchvision():
    torch.manual_seed(1)
    pooler = torchvision.ops.MultiScaleRoIAlign(["p2", "p3"], 3, 2)
    features = {"p2": torch.rand(2, 4, 32, 32, dtype=torch.float64), "p3": torch.rand(2, 4, 16, 16, dtype=torch.float64)}
    boxes = [torch.tensor([[2.0, 3.0, 40.0, 50.0], [1.0, 1.0, 120.0, 100.0]], dtype=torch.float64),
             torch.tensor([[10.0, 12.0, 20.0, 30.0]], dtype=torch.float64)]
    shapes = [(128, 128), (128, 128)]
    expected = pooler(features, boxes, shapes)
    with sgt.patch():
        got = pooler(features, boxes, shapes)
    torch.testing.assert_close(got, expected)
    ours = sgt.nn.MultiScaleRoIAlign(["p2", "p3"], 3, 2)
    torch.testing.assert_close(ours(features, boxes, shapes), expected)


def _is_one_replacement_over_the_original(module, name, before):
    """The name holds a spatialgrad replacement whose original is PyTorch's or torchvision's function (no
    replacement of a replacement)."""
    function = getattr(module, name)
    return function.__module__.startswith("spatialgrad") and function.__wrapped_original__ is before[(module, name)]


def test_overlapping_patches_in_threads_leave_the_originals():
    # The probe: 4 threads x 200 blocks, overlapping at random. Each block sees one replacement over
    # the original, and the originals are back once every block has ended.
    before = originals()
    kinds = [dict(), dict(ops=["avg_pool2d"]), dict(ops=["roi_align", "grid_sample"]), dict(ascend="910B")]
    failures = []

    def blocks(seed):
        rng = random.Random(seed)
        for _ in range(200):
            kind = kinds[rng.randrange(len(kinds))]
            with sgt.patch(**kind):
                time.sleep(rng.random() * 1e-4)  # lets another thread enter or leave its block meanwhile
                ops = kind.get("ops", sgt.OPERATORS)
                names = [(F, "avg_pool2d")] if "avg_pool2d" in ops else [(F, "grid_sample")]
                if not all(_is_one_replacement_over_the_original(m, n, before) for m, n in names):
                    failures.append(kind)

    threads = [threading.Thread(target=blocks, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert originals() == before
    assert _strict.chip is None


def test_patches_stopped_out_of_order_leave_the_originals():
    before = originals()
    everything, sampling = sgt.patch(ascend="910B"), sgt.patch(ops=["grid_sample"], ascend="310P")
    everything.start()
    sampling.start()
    everything.stop()  # the first started stops first: the grid sampler stays routed, the rest comes back
    assert _is_one_replacement_over_the_original(F, "grid_sample", before)
    assert {key: f for key, f in originals().items() if key != (F, "grid_sample")} == \
        {key: f for key, f in before.items() if key != (F, "grid_sample")}
    assert _strict.chip == "310P"  # the check of the patch still active
    sampling.stop()
    assert originals() == before
    assert _strict.chip is None


def test_a_decorated_function_runs_in_threads_at_once():
    # A decorator is one patch object, started once per call: here by 4 threads whose calls overlap.
    before = originals()
    inside = threading.Barrier(4)

    @sgt.patch(ops=["avg_pool2d"])
    def pool(x):
        inside.wait(timeout=30)
        return F.avg_pool2d.__wrapped_original__ is before[(F, "avg_pool2d")], F.avg_pool2d(x, 2)

    results = []
    threads = [threading.Thread(target=lambda: results.append(pool(torch.ones(1, 1, 4, 4)))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [routed for routed, _ in results] == [True] * 4
    assert all(torch.equal(y, torch.ones(1, 1, 2, 2)) for _, y in results)
    assert originals() == before
