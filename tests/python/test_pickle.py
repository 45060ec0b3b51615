"""Every public function and class pickles by reference (its module and name), so that multiprocessing can send
it, or a functools.partial of it, to worker processes, under the fork and the spawn start methods."""
import importlib
import inspect
import pickle

import pytest

from helpers import run_probe, torch

MODULES = ["spatialgrad", "spatialgrad.functional", "spatialgrad.autograd", "spatialgrad.ascend",
           "spatialgrad.bfloat16"] + (["spatialgrad.torch", "spatialgrad.torch.nn"] if torch else [])

PUBLIC = [(f"{module}.{name}", getattr(importlib.import_module(module), name))
          for module in MODULES for name in importlib.import_module(module).__all__]
FUNCTIONS_AND_CLASSES = [(qualname, obj) for qualname, obj in PUBLIC if callable(obj) or inspect.isclass(obj)]


def test_the_public_functions_are_found():
    names = {qualname for qualname, _ in FUNCTIONS_AND_CLASSES}
    assert {"spatialgrad.avg_pool2d", "spatialgrad.functional.grid_sampler_2d_backward", "spatialgrad.set_num_threads",
            "spatialgrad.autograd.vjp", "spatialgrad.ascend.strict", "spatialgrad.to_bfloat16"} <= names
    if torch:
        assert {"spatialgrad.torch.roi_align", "spatialgrad.torch.patch", "spatialgrad.torch.nn.RoIAlign"} <= names


@pytest.mark.parametrize("qualname,obj", FUNCTIONS_AND_CLASSES, ids=[q for q, _ in FUNCTIONS_AND_CLASSES])
def test_pickles_by_reference(qualname, obj):
    # By reference: what comes back is the very object (a copy by value would be another one).
    for protocol in (2, pickle.HIGHEST_PROTOCOL):
        assert pickle.loads(pickle.dumps(obj, protocol=protocol)) is obj, qualname


POOL_PROBE = """
    import functools, multiprocessing as mp, numpy as np, spatialgrad as sg
    rng = np.random.default_rng(7)
    images = [rng.random((1, 3, 12, 10), dtype=np.float32) for _ in range(4)]
    grid = rng.uniform(-1.1, 1.1, (1, 5, 6, 2)).astype(np.float32)
    sample = functools.partial(sg.grid_sample, grid=grid, mode="bicubic", align_corners=False)
    with mp.get_context(CONTEXT).Pool(2) as pool:
        sampled = pool.map(sample, images)
        pooled = pool.starmap(sg.avg_pool2d, [(x, 2) for x in images])
        threads = pool.apply(sg.get_num_threads)
    print("sampled", all(np.array_equal(a, sample(x)) for a, x in zip(sampled, images)))
    print("pooled", all(np.array_equal(a, sg.avg_pool2d(x, 2)) for a, x in zip(pooled, images)))
    print("threads", threads >= 1)
"""


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_a_pool_maps_the_numpy_functions(context):
    result = run_probe(f"CONTEXT = {context!r}\n" + inspect.cleandoc(POOL_PROBE))
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["sampled", "True", "pooled", "True", "threads", "True"], result.stdout


TORCH_POOL_PROBE = """
    import functools, multiprocessing as mp, torch, spatialgrad.torch as sgt
    generator = torch.Generator().manual_seed(3)
    images = [torch.rand(1, 2, 9, 8, generator=generator) for _ in range(3)]
    grid = torch.rand(1, 4, 5, 2, generator=generator) * 2 - 1
    sample = functools.partial(sgt.grid_sample, grid=grid, padding_mode="border", align_corners=True)
    with mp.get_context(CONTEXT).Pool(2) as pool:
        sampled = pool.map(sample, images)
    print("sampled", all(torch.equal(a, sample(x)) for a, x in zip(sampled, images)))
"""


@pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_a_pool_maps_the_torch_functions(context):
    result = run_probe(f"CONTEXT = {context!r}\n" + inspect.cleandoc(TORCH_POOL_PROBE), timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["sampled", "True"], result.stdout
