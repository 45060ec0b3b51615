"""The aclnn C API as a user meets it: ``cmake --install`` into a fresh prefix, every program in
examples/aclnn/ compiled with the issue's command line (``g++ prog.cpp -I<prefix>/include
-L<prefix>/lib -lspatialgrad_aclnn``) and run, and its printed results compared with the NumPy API.

Needs the source tree: the Makefile sets SPATIALGRAD_SOURCE_DIR to the repository root. The build
directory (incremental between runs) is SPATIALGRAD_ACLNN_BUILD_DIR, default <source>/build/aclnn-examples.
"""
from __future__ import annotations

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


EXPECTED = {
    "avgpool2d_backward.cpp": _avgpool2d_backward,
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


def test_install_layout(prefix):
    assert (prefix / "include" / "acl" / "acl.h").is_file()
    assert (prefix / "include" / "aclnnop" / "aclnn_avgpool2d_backward.h").is_file()
    assert (prefix / "lib" / "libspatialgrad_aclnn.so").exists()
    assert (prefix / "lib" / "cmake" / "spatialgrad" / "spatialgradConfig.cmake").is_file()
    # Only the C API is exported: the core stays internal.
    nm = shutil.which("nm")
    assert nm, "nm (binutils) is required"
    symbols = _run([nm, "-D", "--defined-only", str(prefix / "lib" / "libspatialgrad_aclnn.so")]).stdout.split()
    names = [s for s in symbols[2::3]]
    assert "aclnnAvgPool2dBackwardGetWorkspaceSize" in names and "aclrtMalloc" in names
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
