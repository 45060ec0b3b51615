"""The aclnn C API as a user meets it: ``cmake --install`` into a fresh prefix, every program in
examples/aclnn/ compiled with the issue's command line (``g++ prog.cpp -I<prefix>/include
-L<prefix>/lib -lspatialgrad_aclnn``) and run, and its printed results compared with the NumPy API.

Needs the source tree: the Makefile sets SPATIALGRAD_SOURCE_DIR to the repository root. The build
directory (incremental between runs) is SPATIALGRAD_ACLNN_BUILD_DIR, default <source>/build/aclnn-examples.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import spatialgrad as sg

SOURCE_DIR = os.environ.get("SPATIALGRAD_SOURCE_DIR")
pytestmark = pytest.mark.skipif(
    not SOURCE_DIR,
    reason="SPATIALGRAD_SOURCE_DIR is not set: these tests build and install the aclnn library from the "
    "repository (the Makefile sets it to the repository root)",
)

# What each example in examples/aclnn/ prints, computed with the NumPy API from the same inputs the
# program hard-codes: {printed array name: expected values}. Every example must have an entry.


def _avgpool2d_backward() -> dict:
    grad_output = np.array([1, 2, 3, 4, 5, 6, 0.5, -1, 1.5, -2, 2.5, -3], np.float32).reshape(1, 2, 2, 3)
    self = np.ones((1, 2, 4, 5), np.float32)
    grad_input = sg.avg_pool2d_backward(grad_output, self, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1),
                                        ceil_mode=False, count_include_pad=False, divisor_override=None)
    return {"gradInputResultData": grad_input}


def _grid_sampler2d_backward() -> dict:
    # The seed page's sample: bilinear, zeros padding, align_corners=False, both gradients.
    grad_output = np.ones((1, 1, 3, 3), np.float32)
    input = np.arange(1, 41, dtype=np.float32).reshape(1, 1, 5, 8)
    grid = np.array([-1, -1, 0, -1, 1, -1, -1, 0, 0, 0, 1, 0, -1, 1, 0, 1, 1, 1], np.float32).reshape(1, 3, 3, 2)
    input_grad, grid_grad = sg.grid_sampler_2d_backward(grad_output, input, grid, mode="bilinear",
                                                        padding_mode="zeros", align_corners=False,
                                                        output_mask=(True, True))
    return {"inputGradResultData": input_grad, "gridGradResultData": grid_grad}


def _roi_align_v2_backward() -> dict:
    # docs/operators.md (RoIAlign)'s worked example (the CANN page's): its expected rows are checked here too.
    grad_output = np.array([4.5, 6.5, 8.5, 16.5, 18.5, 20.5, 28.5, 30.5, 32.5], np.float32).reshape(1, 1, 3, 3)
    boxes = np.array([[0, -2, -2, 22, 22]], np.float32)
    grad_input = sg.roi_align_backward(grad_output, boxes, (1, 1, 6, 6), pooled_height=3, pooled_width=3,
                                       spatial_scale=0.25, sampling_ratio=2, aligned=False)
    rows = np.repeat(np.array([[1.125, 1.125, 1.625, 1.625, 2.125, 2.125],
                               [4.125, 4.125, 4.625, 4.625, 5.125, 5.125],
                               [7.125, 7.125, 7.625, 7.625, 8.125, 8.125]], np.float32), 2, axis=0)
    np.testing.assert_array_equal(grad_input.reshape(6, 6), rows)
    return {"gradInputResultData": grad_input}


def _upsample_bilinear_2d_backward_v2() -> dict:
    grad_out = (np.arange(1 * 2 * 4 * 5) % 7).astype(np.float32).reshape(1, 2, 4, 5) - np.float32(2.5)
    out = sg.upsample_bilinear2d_backward(grad_out, (4, 5), (1, 2, 2, 3), align_corners=False, scales_h=2.0,
                                          scales_w=0.0, layout="NCHW")
    return {"outResultData": out}


def _multi_scale_deformable_attention_grad() -> dict:
    bs, keys, heads, channels, queries, levels, points = 1, 6, 2, 8, 2, 2, 2

    def filled(shape, fn):
        i = np.arange(int(np.prod(shape)), dtype=np.int64)
        return fn(i).astype(np.float32).reshape(shape)

    # The same float32 arithmetic as the C++ loops (each step exact or rounded once, like C).
    value = filled((bs, keys, heads, channels), lambda i: (i % 11).astype(np.float32) * np.float32(0.25) - np.float32(1))
    location = filled((bs, queries, heads, levels, points, 2),
                      lambda i: ((i * 37) % 100).astype(np.float32) / np.float32(100))
    attn_weight = filled((bs, queries, heads, levels, points), lambda i: (i % 4 + 1).astype(np.float32) * np.float32(0.125))
    grad_output = filled((bs, queries, heads * channels),
                         lambda i: (i % 5).astype(np.float32) * np.float32(0.5) - np.float32(1))
    spatial_shapes = np.array([[2, 2], [1, 2]], np.int64)
    level_start_index = np.array([0, 4], np.int64)
    grad_value, grad_location, grad_attn_weight = sg.ms_deform_attn_backward(
        value, spatial_shapes, level_start_index, location, attn_weight, grad_output)
    assert np.count_nonzero(grad_location) > 0 and np.count_nonzero(grad_attn_weight) > 0
    return {"gradValueResultData": grad_value, "gradLocationResultData": grad_location,
            "gradAttnWeightResultData": grad_attn_weight}


EXPECTED = {
    "avgpool2d_backward.cpp": _avgpool2d_backward,
    "grid_sampler2d_backward.cpp": _grid_sampler2d_backward,
    "multi_scale_deformable_attention_grad.cpp": _multi_scale_deformable_attention_grad,
    "roi_align_v2_backward.cpp": _roi_align_v2_backward,
    "upsample_bilinear_2d_backward_v2.cpp": _upsample_bilinear_2d_backward_v2,
}

# Headers the issue names, each declaring its two functions.
HEADERS = {
    "aclnn_avgpool2d_backward.h": "aclnnAvgPool2dBackward",
    "aclnn_grid_sampler2d_backward.h": "aclnnGridSampler2DBackward",
    "aclnn_multi_scale_deformable_attention_grad.h": "aclnnMultiScaleDeformableAttentionGrad",
    "aclnn_roi_align_v2_backward.h": "aclnnRoiAlignV2Backward",
    "aclnn_upsample_bilinear_2d_backward_v2.h": "aclnnUpsampleBilinear2dBackwardV2",
}

LINE = re.compile(r"^(\w+)\[(\d+)\] is: (\S+)$")


def _run(cmd, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    assert result.returncode == 0, f"{' '.join(map(str, cmd))} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    return result


def _examples_dir() -> Path:
    return Path(SOURCE_DIR) / "examples" / "aclnn"


@pytest.fixture(scope="module")
def prefix(tmp_path_factory) -> Path:
    """A clean install prefix holding what `cmake --install` puts there."""
    cmake = shutil.which("cmake")
    assert cmake, "cmake is required to build the aclnn library"
    build = Path(os.environ.get("SPATIALGRAD_ACLNN_BUILD_DIR", Path(SOURCE_DIR) / "build" / "aclnn-examples"))
    _run([cmake, "-S", SOURCE_DIR, "-B", str(build), "-DCMAKE_BUILD_TYPE=Release", "-DSPATIALGRAD_BUILD_ACLNN=ON",
          "-DSPATIALGRAD_BUILD_TESTS=OFF", "-DSPATIALGRAD_BUILD_BENCHMARKS=OFF", "-DSPATIALGRAD_BUILD_PYTHON=OFF",
          "-DSPATIALGRAD_SANITIZE=OFF"])
    _run([cmake, "--build", str(build), "--target", "spatialgrad_aclnn", "-j", os.environ.get("JOBS", "2")])
    out = tmp_path_factory.mktemp("prefix")
    _run([cmake, "--install", str(build), "--prefix", str(out)])
    return out


def _parse(stdout: str) -> dict:
    arrays: dict = {}
    for line in stdout.splitlines():
        match = LINE.match(line.strip())
        if not match:
            continue
        name, index, value = match.group(1), int(match.group(2)), float(match.group(3))
        values = arrays.setdefault(name, [])
        assert index == len(values), f"{name}[{index}] printed out of order"
        values.append(value)
    return {name: np.array(values) for name, values in arrays.items()}


def _check_output(stdout: str, example: str) -> None:
    printed = _parse(stdout)
    expected = EXPECTED[example]()
    assert set(printed) == set(expected), f"{example} printed {sorted(printed)}, expected {sorted(expected)}"
    for name, want in expected.items():
        want = np.asarray(want, dtype=np.float64).reshape(-1)
        assert printed[name].shape == want.shape, f"{name}: {printed[name].size} values, expected {want.size}"
        # printf("%f") keeps 6 decimals.
        np.testing.assert_allclose(printed[name], want, rtol=1e-5, atol=2e-6, err_msg=f"{example}: {name}")


def test_every_example_is_checked():
    examples = sorted(p.name for p in _examples_dir().glob("*.cpp"))
    assert examples, "no examples found"
    assert examples == sorted(EXPECTED), "add each example's expected output to EXPECTED"


# SHA-256 of the sample program on the CANN page aclnnGridSampler2DBackward (shared/seeds), from its
# first #include to the end: the example must stay that program, unchanged.
SEED_SAMPLE = ("grid_sampler2d_backward.cpp", "cb647b6ae1c7c2e5ce42d796a7bc9607cdb2c961333e02466665a010989f16d1")


def test_seed_sample_is_unchanged():
    name, digest = SEED_SAMPLE
    text = (_examples_dir() / name).read_text(encoding="utf-8")
    program = text[text.index("#include <iostream>"):]
    assert hashlib.sha256(program.encode("utf-8")).hexdigest() == digest, (
        f"{name} must be the CANN page's sample verbatim (below its header comment)")


def test_install_layout(prefix):
    assert (prefix / "include" / "acl" / "acl.h").is_file()
    for header, api in HEADERS.items():
        text = (prefix / "include" / "aclnnop" / header).read_text()
        assert f"{api}GetWorkspaceSize(" in text and f"{api}(" in text, header
    assert (prefix / "lib" / "libspatialgrad_aclnn.so").exists()
    assert (prefix / "lib" / "cmake" / "spatialgrad" / "spatialgradConfig.cmake").is_file()
    # Only the C API is exported: the core stays internal.
    nm = shutil.which("nm")
    assert nm, "nm (binutils) is required"
    symbols = _run([nm, "-D", "--defined-only", str(prefix / "lib" / "libspatialgrad_aclnn.so")]).stdout.split()
    names = [s for s in symbols[2::3]]
    assert "aclrtMalloc" in names
    for api in HEADERS.values():
        assert api in names and f"{api}GetWorkspaceSize" in names, api
    assert all(name.startswith("acl") for name in names), [n for n in names if not n.startswith("acl")]


@pytest.mark.parametrize("example", sorted(EXPECTED))
def test_example_prints_numpy_results(prefix, example, tmp_path):
    compiler = shutil.which("g++")
    assert compiler, "g++ is required"
    exe = tmp_path / Path(example).stem
    # The command line, verbatim apart from -o.
    _run([compiler, str(_examples_dir() / example), f"-I{prefix / 'include'}", f"-L{prefix / 'lib'}",
          "-lspatialgrad_aclnn", "-o", str(exe)])
    env = dict(os.environ, LD_LIBRARY_PATH=str(prefix / "lib"))
    _check_output(_run([str(exe)], env=env).stdout, example)


def test_headers_are_valid_c(prefix, tmp_path):
    compiler = shutil.which("gcc")
    assert compiler, "gcc is required"
    headers = sorted(p.relative_to(prefix / "include") for p in (prefix / "include").rglob("*.h"))
    source = tmp_path / "all.c"
    source.write_text("".join(f'#include "{h.as_posix()}"\n' for h in headers) + "int main(void) { return ACL_SUCCESS; }\n")
    _run([compiler, "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", f"-I{prefix / 'include'}",
          "-fsyntax-only", str(source)])


def test_find_package_consumer(prefix, tmp_path):
    """find_package(spatialgrad) -> spatialgrad::aclnn, from the prefix alone."""
    project = tmp_path / "consumer"
    project.mkdir()
    example = _examples_dir() / "avgpool2d_backward.cpp"
    (project / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\n"
        "project(consumer CXX)\n"
        "find_package(spatialgrad 0.1 REQUIRED)\n"
        f'add_executable(example "{example.as_posix()}")\n'
        "target_link_libraries(example PRIVATE spatialgrad::aclnn)\n")
    build = tmp_path / "build"
    _run(["cmake", "-S", str(project), "-B", str(build), f"-DCMAKE_PREFIX_PATH={prefix}"])
    _run(["cmake", "--build", str(build)])
    _check_output(_run([str(build / "example")]).stdout, "avgpool2d_backward.cpp")
