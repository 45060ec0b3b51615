"""The TorchScript deployment example as a user runs it: examples/torchscript_deploy/export.py scripts and saves
the model; the C++ program beside it (its own CMake project: libtorch + libspatialgrad_torch) is built, loads
the saved model and runs it without Python; both print the output in one format, compared here.

Needs the source tree (SPATIALGRAD_SOURCE_DIR, set by the Makefile) and libtorch's CMake package. The build
directory (incremental between runs) is SPATIALGRAD_DEPLOY_BUILD_DIR, default <source>/build/torchscript-deploy.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import spatialgrad  # noqa: E402
import spatialgrad.torch as sgt  # noqa: E402

SOURCE_DIR = os.environ.get("SPATIALGRAD_SOURCE_DIR")
pytestmark = [
    pytest.mark.skipif(not SOURCE_DIR, reason="SPATIALGRAD_SOURCE_DIR is not set: the example is built from the "
                       "repository (the Makefile sets it to the repository root)"),
    pytest.mark.skipif(not sgt.native, reason="spatialgrad was built without libtorch: no native operators"),
]


def _run(command, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(command, capture_output=True, text=True, **kwargs)
    assert result.returncode == 0, f"{' '.join(map(str, command))} failed:\n{result.stdout}\n{result.stderr}"
    return result


def _parse(printed: str):
    """("shape: ..." line, values) of what export.py and the C++ program print."""
    lines = printed.strip().splitlines()
    assert lines and lines[0].startswith("shape:"), printed
    return lines[0], torch.tensor([float(v) for v in lines[1:]], dtype=torch.float64)


def _build_program() -> Path:
    cmake = shutil.which("cmake")
    assert cmake, "cmake is required to build the example"
    build = Path(os.environ.get("SPATIALGRAD_DEPLOY_BUILD_DIR", Path(SOURCE_DIR) / "build" / "torchscript-deploy"))
    library = Path(spatialgrad.__file__).parent / "libspatialgrad_torch.so"
    _run([cmake, "-S", str(Path(SOURCE_DIR) / "examples" / "torchscript_deploy"), "-B", str(build),
          "-DCMAKE_BUILD_TYPE=Release", f"-DSPATIALGRAD_TORCH_LIBRARY={library}"])
    _run([cmake, "--build", str(build), "-j", os.environ.get("JOBS", "2")])
    return build / "deploy"


def test_the_cpp_program_prints_what_python_prints(tmp_path):
    export = _run([sys.executable, str(Path(SOURCE_DIR) / "examples" / "torchscript_deploy" / "export.py"),
                   "--out", str(tmp_path)], cwd=tmp_path)
    program = _build_program()
    deployed = _run([str(program), str(tmp_path / "model.pt"), str(tmp_path / "inputs.pt")], cwd=tmp_path)
    (shape, expected), (shape_cpp, got) = _parse(export.stdout), _parse(deployed.stdout)
    assert shape_cpp == shape == "shape: 2 2 3"
    # The same kernels on the same inputs; libtorch's convolutions and matrix products may sum in another
    # order on another thread count, hence a tolerance.
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
