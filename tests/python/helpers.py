"""Checks shared by the operator test files."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import spatialgrad as sg

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

requires_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")

# What floating point promises when two implementations compute the same formula: results of differently
# ordered sums agree to a few ulps of the magnitudes summed.
TOLERANCE = {np.float64: dict(rtol=1e-10, atol=1e-12), np.float32: dict(rtol=2e-5, atol=2e-6)}
# float32's unit roundoff: one rounding to nearest changes a value by at most this fraction of it.
FLOAT32_UNIT_ROUNDOFF = 2.0**-24


def tol(dtype) -> dict:
    return TOLERANCE[np.dtype(dtype).type]


def sampling_tolerance(dtype, coordinate_max: float, sensitivity: float) -> dict:
    """tol(dtype) for results sampled at coordinates an implementation computes, where float32 promises less:
    computed in float32 (as PyTorch 2 does for upsampling; 1.13 and spatialgrad compute them in float64), a
    coordinate up to coordinate_max is off by up to FLOAT32_UNIT_ROUNDOFF of it, which moves a result by that
    times `sensitivity` (the most a result changes per unit of coordinate)."""
    tolerance = tol(dtype)
    if np.dtype(dtype) == np.float32:
        tolerance = dict(tolerance, atol=tolerance["atol"] + FLOAT32_UNIT_ROUNDOFF * coordinate_max * sensitivity)
    return tolerance


def assert_no_less_accurate(ours: np.ndarray, theirs: np.ndarray, exact: np.ndarray, magnitude: np.ndarray,
                            what: str = "") -> None:
    """ours (float32) is at least as close to `exact` (float64) as theirs, in its largest and in its total error,
    up to one float32 ulp (two unit roundoffs) of `magnitude`, what each element combines (the same computation on
    absolute values): the other implementation may round in another order or fuse a multiply and an add, and so
    land on the neighbouring float."""
    ours_error, their_error = np.abs(ours - exact), np.abs(theirs - exact)
    slack = 2 * FLOAT32_UNIT_ROUNDOFF * magnitude
    assert ours_error.max() <= their_error.max() + slack.max(), (what, "max", ours_error.max(), their_error.max())
    assert ours_error.sum() <= their_error.sum() + slack.sum(), (what, "sum", ours_error.sum(), their_error.sum())


def assert_adjoint(forward, backward, x: np.ndarray, g: np.ndarray, rtol: float = 1e-12) -> None:
    """<backward(g), x> == <g, forward(x)> for an operator linear in x (float64)."""
    lhs = float(np.vdot(backward(g), x))
    rhs = float(np.vdot(g, forward(x)))
    scale = max(abs(lhs), abs(rhs), float(np.abs(g).sum() * np.abs(x).max()) * 1e-3, 1e-300)
    assert abs(lhs - rhs) <= rtol * scale, f"adjoint mismatch: <J^T g, x> = {lhs!r}, <g, J x> = {rhs!r}"


def finite_difference(fn, x: np.ndarray, g: np.ndarray, indices, eps: float = 1e-6) -> np.ndarray:
    """Central differences of <g, fn(x)> with respect to x at the given flat indices (float64)."""
    out = []
    flat = x.reshape(-1)
    for i in indices:
        saved = flat[i]
        flat[i] = saved + eps
        plus = np.vdot(g, fn(x))
        flat[i] = saved - eps
        minus = np.vdot(g, fn(x))
        flat[i] = saved
        out.append((plus - minus) / (2 * eps))
    return np.array(out)


def same_bits_for_thread_counts(fn, counts=(1, 2)) -> None:
    """fn() returns an array or a tuple of arrays; all thread counts must give identical bytes."""
    results = []
    for n in counts:
        sg.set_num_threads(n)
        out = fn()
        results.append(out if isinstance(out, tuple) else (out,))
    sg.set_num_threads(0)
    for other in results[1:]:
        for a, b in zip(results[0], other):
            if a is None:
                assert b is None
                continue
            assert a.dtype == b.dtype and a.shape == b.shape
            assert a.tobytes() == b.tobytes(), "results differ between thread counts"


def negative_strided(x: np.ndarray, axis: int) -> np.ndarray:
    """The same logical values as x, stored reversed along `axis` (a negative-stride view)."""
    flipped = np.ascontiguousarray(np.flip(x, axis=axis))
    view = np.flip(flipped, axis=axis)
    assert view.strides[axis] < 0
    return view


def non_contiguous(x: np.ndarray) -> np.ndarray:
    """The same values as x in a strided (every other element) view."""
    big = np.zeros(x.shape[:-1] + (2 * x.shape[-1],), dtype=x.dtype)
    big[..., ::2] = x
    view = big[..., ::2]
    assert not view.flags.c_contiguous
    return view


PROBE_TIMEOUT_S = 60


def run_probe(code: str, timeout: float = PROBE_TIMEOUT_S) -> subprocess.CompletedProcess:
    """Runs `code` in a new interpreter in its own process group, killed whole (forked children too) on a
    hang: an abort or a hang fails the calling test instead of the suite."""
    with subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, start_new_session=True) as probe:
        try:
            stdout, stderr = probe.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(probe.pid, signal.SIGKILL)
            stdout, stderr = probe.communicate()
            pytest.fail(f"the probe hung (killed after {timeout} s); its output: {stdout!r} {stderr!r}")
    return subprocess.CompletedProcess(probe.args, probe.returncode, stdout, stderr)


def count_patch_calls(monkeypatch, names):
    """Counts the calls spatialgrad.torch.patch()'s replacements make to the spatialgrad functions `names`
    ("sg_<adapter>", e.g. "sg_roi_align": the adapter, spied on in its operator's module, where the replacement
    calls it); returns the live {name: count} dict."""
    import spatialgrad.torch as sgt

    counts = {}
    for name in names:
        adapter = name[len("sg_"):]
        module = sys.modules[getattr(sgt, adapter).__globals__["__name__"]]  # (its __module__ is spatialgrad.torch)
        original = getattr(module, adapter)

        def spy(*args, _name=name, _original=original, **kwargs):
            counts[_name] = counts.get(_name, 0) + 1
            return _original(*args, **kwargs)
        monkeypatch.setattr(module, adapter, spy)
    return counts


def best_cpu_seconds(fn, repeats=7):
    """The least CPU time of the calling thread over `repeats` calls of fn (after one warm-up call). With
    spatialgrad on one thread the kernels run on the calling thread, so this is robust to a busy machine:
    the tests that check how a cost grows with the work compare such times."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.thread_time()
        fn()
        best = min(best, time.thread_time() - start)
    return best


# Prepended to probes that bound their memory: address_space() is what the process maps now, and
# limit_address_space(extra) caps it at that plus `extra` bytes (the arrays a call makes and the scratch
# bound of docs/operators.md), so that a kernel whose scratch grows past it fails with MemoryError.
ADDRESS_SPACE_PRELUDE = """
import resource


def address_space():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))


def limit_address_space(extra):
    limit = address_space() + extra
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
"""
