"""Build glue: setuptools drives CMake to build the extension spatialgrad._core, and beside it the PyTorch
operators libspatialgrad_torch.so when CMake found libtorch (spatialgrad.torch loads them).

Metadata lives in pyproject.toml. CMake finds pybind11 from the system (Debian's pybind11-dev);
nothing is downloaded. SPATIALGRAD_CMAKE_ARGS adds extra CMake arguments.
"""
import os
import shlex
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeExtension(Extension):
    def __init__(self, name: str) -> None:
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        target = Path(self.get_ext_fullpath(ext.name)).resolve()
        build_dir = Path(self.build_temp).resolve() / "cmake"
        build_dir.mkdir(parents=True, exist_ok=True)
        configure = [
            "cmake",
            "-S", str(ROOT),
            "-B", str(build_dir),
            "-DCMAKE_BUILD_TYPE=Release",
            "-DSPATIALGRAD_BUILD_PYTHON=ON",
            f"-DPython_EXECUTABLE={sys.executable}",
            f"-DCMAKE_LIBRARY_OUTPUT_DIRECTORY={target.parent}",
            *shlex.split(os.environ.get("SPATIALGRAD_CMAKE_ARGS", "")),
        ]
        subprocess.run(configure, check=True)
        jobs = str(os.cpu_count() or 1)
        subprocess.run(["cmake", "--build", str(build_dir), "--target", "_core", "-j", jobs], check=True)
        targets = subprocess.run(["cmake", "--build", str(build_dir), "--target", "help"], check=True,
                                 capture_output=True, text=True).stdout
        if "spatialgrad_torch" in targets:  # configured only where find_package(Torch) succeeded
            subprocess.run(["cmake", "--build", str(build_dir), "--target", "spatialgrad_torch", "_torch_ops", "-j",
                            jobs], check=True)
        if not target.exists():
            raise RuntimeError(f"CMake did not produce {target}")


setup(ext_modules=[CMakeExtension("spatialgrad._core")], cmdclass={"build_ext": CMakeBuild})
