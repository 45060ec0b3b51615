"""Shared pytest configuration. Tests import the *installed* spatialgrad (run pytest from outside the repo)."""
import os

import numpy as np
import pytest

try:
    import torch
except ImportError:  # pragma: no cover - CI installs torch
    torch = None


def pytest_configure(config):
    if torch is None and os.environ.get("SPATIALGRAD_REQUIRE_TORCH") == "1":
        raise pytest.UsageError("SPATIALGRAD_REQUIRE_TORCH=1 but PyTorch is not installed: parity tests would be skipped")
    if torch is not None:
        torch.set_num_threads(2)


@pytest.fixture
def rng():
    """A freshly seeded generator per test, so every test is reproducible on its own."""
    return np.random.default_rng(20261122)


@pytest.fixture(autouse=True)
def _restore_threads():
    import spatialgrad as sg

    yield
    sg.set_num_threads(0)
