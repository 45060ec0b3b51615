"""Benchmark cases and timing shared by bench/compare.py and the per-operator files in bench/ops/."""
from __future__ import annotations

import gc
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Optional


@dataclass
class Case:
    """One operator, variant and direction, timed against a baseline in the same process."""

    op: str
    variant: str
    direction: str  # "forward" or "backward"
    ours: Callable[[], object]
    baseline: Optional[Callable[[], object]]
    baseline_name: str
    bytes_moved: int  # minimal bytes read + written by any implementation (the memory floor)


def nbytes(*arrays) -> int:
    """Total bytes of NumPy arrays or torch tensors."""
    total = 0
    for a in arrays:
        total += a.nbytes if hasattr(a, "nbytes") else a.element_size() * a.numel()
    return total


def time_pair(first: Callable[[], object], second: Optional[Callable[[], object]], min_time: float = 0.4,
              max_repeats: int = 60, min_repeats: int = 7):
    """Median seconds of two functions, timed alternately so that machine noise hits both alike."""
    funcs = [f for f in (first, second) if f is not None]
    for f in funcs:  # warm up: page faults, lazy init, caches
        f()
        f()
    samples = [[] for _ in funcs]
    start = time.perf_counter()
    repeats = 0
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        while repeats < min_repeats or (time.perf_counter() - start < min_time and repeats < max_repeats):
            for f, s in zip(funcs, samples):
                t0 = time.perf_counter()
                f()
                s.append(time.perf_counter() - t0)
            repeats += 1
    finally:
        if gc_was_enabled:
            gc.enable()
    medians = [statistics.median(s) for s in samples]
    return medians[0], (medians[1] if second is not None else None)
