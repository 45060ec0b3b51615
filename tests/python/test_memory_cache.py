"""Large output arrays (and the float32 staging of half-precision inputs) are built on blocks kept for reuse
(csrc/src/detail/block_cache.h): a reused block must hold nothing of its past, a live array's block is never
handed out again, and the arrays behave like any other new array."""
import os
import subprocess
import sys

import numpy as np

import spatialgrad as sg


def address(a):
    return a.__array_interface__["data"][0]


def upsample(x):  # (2, 16, 64, 64) -> (2, 16, 128, 128): a 2 MB float32 output, above the 1 MB threshold
    return sg.upsample_bilinear2d(x, 128)


def test_large_outputs_are_ordinary_writeable_arrays(rng):
    x = rng.standard_normal((2, 16, 64, 64)).astype(np.float32)
    y = upsample(x)
    assert y.flags.c_contiguous and y.flags.writeable and y.flags.aligned
    assert y.dtype == np.float32 and y.shape == (2, 16, 128, 128)
    assert address(y) % 64 == 0
    y[0, 0, 0, 0] = 5.0
    assert y[0, 0, 0, 0] == 5.0
    # A marked bfloat16 input gives a marked bfloat16 output through the cached path as well.
    yb = sg.upsample_bilinear2d(sg.to_bfloat16(np.tile(x, (1, 2, 1, 1))), 128)
    assert sg.is_bfloat16(yb) and yb.nbytes >= 1 << 20


def test_a_reused_block_holds_the_new_result_only(rng):
    a = rng.standard_normal((2, 16, 64, 64)).astype(np.float32)
    b = rng.standard_normal((2, 16, 64, 64)).astype(np.float32) * 1e3
    expected = upsample(b).copy()  # in NumPy's own memory
    y = upsample(a)
    freed = address(y)
    del y
    again = upsample(b)
    assert address(again) == freed  # the block came back...
    np.testing.assert_array_equal(again, expected)  # ...with every element rewritten


def test_live_arrays_and_views_keep_their_blocks(rng):
    a = rng.standard_normal((2, 16, 64, 64)).astype(np.float32)
    y1 = upsample(a)
    kept = y1.copy()
    y2 = upsample(a * 2)
    assert address(y2) != address(y1)
    block = address(y2)
    view = y2[:, ::2]
    del y2
    y3 = upsample(a * 3)
    assert address(y3) != block
    np.testing.assert_array_equal(y1, kept)
    np.testing.assert_array_equal(view, upsample(a * 2)[:, ::2])


def test_small_outputs_stay_with_numpy(rng):
    y = sg.avg_pool2d(rng.standard_normal((1, 4, 16, 16)).astype(np.float32), 2)
    assert y.flags.owndata


def test_clear_memory_cache_frees_and_later_calls_still_work(rng):
    x = rng.standard_normal((2, 16, 64, 64)).astype(np.float32)
    expected = upsample(x).copy()
    sg.clear_memory_cache()
    np.testing.assert_array_equal(upsample(x), expected)


def test_cache_can_be_turned_off():
    code = (
        "import numpy as np, spatialgrad as sg\n"
        "x = np.arange(2 * 16 * 64 * 64, dtype=np.float32).reshape(2, 16, 64, 64) / 7\n"
        "a = sg.upsample_bilinear2d(x, 128).copy()\n"
        "for _ in range(3):\n"
        "    assert np.array_equal(sg.upsample_bilinear2d(x, 128), a)\n"
        "print('ok')\n"
    )
    for setting in ["0", "not-a-number", "1"]:
        env = dict(os.environ, SPATIALGRAD_MEMORY_CACHE_MB=setting)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd="/")
        assert out.returncode == 0 and out.stdout.strip() == "ok", (setting, out.stderr)
