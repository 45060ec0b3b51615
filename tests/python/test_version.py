"""The version is written once (VERSION) and read by CMake, the package metadata and __version__."""
import importlib.metadata
import os
from pathlib import Path

import pytest

import spatialgrad


def _source_version() -> str:
    root = os.environ.get("SPATIALGRAD_SOURCE_DIR")
    if not root:
        pytest.skip("SPATIALGRAD_SOURCE_DIR is not set (make python-test sets it)")
    return Path(root, "VERSION").read_text().strip()


def test_version_is_the_version_file():
    version = _source_version()
    assert spatialgrad.__version__ == version
    assert importlib.metadata.version("spatialgrad") == version


def test_version_looks_like_a_release():
    parts = spatialgrad.__version__.split(".")
    assert len(parts) == 3 and all(p.isdigit() for p in parts)
