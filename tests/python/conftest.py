"""Shared pytest configuration. Tests import the *installed* spatialgrad (run pytest from outside the repo)."""
import os

import numpy as np
import pytest

try:
    import torch
except ImportError:  # pragma: no cover - CI installs torch
    torch = None

try:
    from hypothesis import HealthCheck, settings
except ImportError:  # pragma: no cover - CI installs python3-hypothesis
    settings = None

if settings is not None:
    # "ci" (the default): a fixed budget and a fixed seed (derandomize), no example database written.
    # SPATIALGRAD_HYPOTHESIS_PROFILE=thorough searches twenty times longer, still reproducibly.
    common = dict(deadline=None, database=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
    settings.register_profile("ci", max_examples=150, **common)
    settings.register_profile("thorough", max_examples=3000, **common)
    settings.load_profile(os.environ.get("SPATIALGRAD_HYPOTHESIS_PROFILE", "ci"))


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
