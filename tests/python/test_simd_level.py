"""The kernels' instruction level (docs/design.md, "Instruction levels"): spatialgrad.simd_level() names it, the
environment variable SPATIALGRAD_SIMD_LEVEL caps it, and every level gives the same bits (checked per operator by
the C++ suite, tests/cpp/test_simd_levels.cpp; here through the Python API, one process per level)."""
import os
import subprocess
import sys

import numpy as np
import pytest

import spatialgrad as sg

LEVELS = ("baseline", "avx2", "avx512")

# One call of each operator family that takes a different kernel per level: the grid sampler's point vectors
# (bilinear pairs, bicubic, nearest), pooling rows, upsampling lanes, half-precision conversions.
PROBE = """
import hashlib, sys, numpy as np, spatialgrad as sg
rng = np.random.default_rng(3)
x = rng.standard_normal((2, 3, 40, 37)).astype(np.float32)
grid = rng.uniform(-1.1, 1.1, (2, 19, 23, 2)).astype(np.float32)
out = [sg.grid_sample(x, grid, mode) for mode in ("bilinear", "bicubic", "nearest")]
out += [sg.avg_pool2d(x, 3, 1, 1), sg.upsample_bilinear2d(x, [61, 50]), sg.avg_pool2d(x.astype(np.float16), 2)]
out += [sg.upsample_bilinear2d(sg.to_bfloat16(x), [30, 20]).view(np.uint16)]
print(sg.simd_level(), hashlib.sha256(b"".join(a.tobytes() for a in out)).hexdigest())
"""


def run_probe(level):
    env = dict(os.environ, SPATIALGRAD_SIMD_LEVEL=level)
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    return done.stdout.split(), done.stderr


def test_simd_level_names_a_level():
    assert sg.simd_level() in LEVELS


def test_every_level_gives_the_same_bits_and_the_environment_caps_it():
    best = sg.simd_level() if "SPATIALGRAD_SIMD_LEVEL" not in os.environ else run_probe("")[0][0]
    digests = set()
    for level in LEVELS[:LEVELS.index(best) + 1]:
        (name, digest), _ = run_probe(level)
        assert name == level
        digests.add(digest)
    assert len(digests) == 1


def test_an_unknown_level_is_reported_and_ignored():
    (name, _), stderr = run_probe("avx1024")
    assert name == run_probe("")[0][0]
    assert "SPATIALGRAD_SIMD_LEVEL=avx1024 is not one of baseline, avx2, avx512: ignored" in stderr


@pytest.mark.parametrize("level", LEVELS)
def test_a_cap_above_the_cpu_takes_the_best_level_below_it(level):
    best = run_probe("")[0][0]
    (name, _), _ = run_probe(level)
    assert name == LEVELS[min(LEVELS.index(level), LEVELS.index(best))]
