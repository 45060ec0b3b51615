"""Benchmark cases and timing shared by bench/compare.py and the per-operator files in bench/ops/."""
from __future__ import annotations

import gc
import importlib
import json
import os
import platform
import statistics
import time
import tomllib
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np


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
    dtype: str = "float32"  # of our side


def operators() -> List[str]:
    """The operators, in the operator table's order (operators.toml): one bench/ops/<name>.py and one
    bench/sweep_ops/<name>.py each."""
    table = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "operators.toml")
    with open(table, "rb") as f:
        return list(tomllib.load(f)["operators"])


def versions() -> Dict[str, str]:
    """What a run measures and compares against, and where: spatialgrad, PyTorch, torchvision (the roi_align
    baseline), NumPy and Python by name ("not installed" for a package that is not), the system, the CPU's model
    name and the number of CPUs the process may run on."""
    found = {}
    for name in ("spatialgrad", "torch", "torchvision", "numpy"):
        try:
            found[name] = importlib.import_module(name).__version__
        except ImportError:
            found[name] = "not installed"
    found["python"] = platform.python_version()
    try:
        found["system"] = platform.freedesktop_os_release()["PRETTY_NAME"]
    except (AttributeError, OSError, KeyError):  # Python < 3.10, or no os-release
        found["system"] = platform.platform()
    found["cpu"] = cpu_model()
    found["cpus"] = str(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count())
    return found


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (platform.processor() is often empty on Linux)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def results_dir() -> str:
    """Where make bench and make sweep keep their JSON: bench/results/pytorch-<major.minor>/, one folder per
    PyTorch release compared against (scripts/render_performance.py reads every folder)."""
    import torch

    release = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", f"pytorch-{release}")


def write_json(path: str, document: dict) -> None:
    """Writes a result file (its folder made if missing), keys in a stable order for reviewable diffs."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as out:
        json.dump(document, out, indent=1, sort_keys=True)
        out.write("\n")


def versions_line() -> str:
    """versions() as the line a benchmark prints first."""
    v = versions()
    return (f"spatialgrad {v['spatialgrad']} against PyTorch {v['torch']} and torchvision {v['torchvision']} "
            f"(NumPy {v['numpy']}, Python {v['python']}, {v['system']})")


def nbytes(*arrays) -> int:
    """Total bytes of NumPy arrays or torch tensors."""
    total = 0
    for a in arrays:
        total += a.nbytes if hasattr(a, "nbytes") else a.element_size() * a.numel()
    return total


def time_pair(first: Callable[[], object], second: Optional[Callable[[], object]], min_time: float = 0.4,
              max_repeats: int = 60, min_repeats: int = 7, warmup: int = 2):
    """Median seconds of two functions, timed alternately so that machine noise hits both alike."""
    medians = time_alternately([f for f in (first, second) if f is not None], min_time, max_repeats, min_repeats,
                               warmup)
    return medians[0], (medians[1] if second is not None else None)


def time_alternately(funcs: Sequence[Callable[[], object]], min_time: float = 0.4, max_repeats: int = 60,
                     min_repeats: int = 7, warmup: int = 2) -> List[float]:
    """Median seconds of each function, called in turn (one call each per round) so that machine noise hits
    all alike: at least min_repeats rounds, then more until min_time has passed or max_repeats rounds ran."""
    for f in funcs:  # warm up: page faults, lazy init, caches
        for _ in range(warmup):
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
    return [statistics.median(s) for s in samples]


# ---- float16 / bfloat16 rows --------------------------------------------------------------------------------

HALF_FORMATS = {"float16": "fp16", "bfloat16": "bf16"}


def in_format(a, fmt: str):
    """A float32 NumPy array rounded to float16 or (marked) bfloat16; other arrays unchanged."""
    import spatialgrad as sg

    if not isinstance(a, np.ndarray) or a.dtype != np.float32:
        return a
    return a.astype(np.float16) if fmt == "float16" else sg.to_bfloat16(a)


def torch_in_format(t, fmt: str):
    import torch

    return t.to(torch.float16 if fmt == "float16" else torch.bfloat16) if t.is_floating_point() else t


def torch_call(fn: Callable, tensors: Sequence, fmt: str, *args) -> Callable[[], object]:
    """fn(*tensors, *args) with the tensors converted to fmt once, beforehand (what torch_half_kernels times)."""
    converted = [torch_in_format(t, fmt) for t in tensors]
    return lambda: fn(*converted, *args)


def torch_half_kernels(call: Callable[[str], Callable[[], object]]) -> Dict[str, Callable[[], object]]:
    """PyTorch's kernel in each half format where the installed PyTorch has one: call(fmt) returns the call on
    tensors converted to fmt (torch_in_format); a format whose call raises (PyTorch 1.13 lacks most
    half-precision CPU kernels of these operators; 2.x has them) is left out. For half_cases' torch_baselines."""
    kernels = {}
    for fmt in HALF_FORMATS:
        try:
            fn = call(fmt)
            fn()
        except (RuntimeError, NotImplementedError):
            continue
        kernels[fmt] = fn
    return kernels


def half_cases(op: str, variant: str, direction: str, fn: Callable, arrays: Sequence, bytes_moved32: int,
               torch_baselines: Optional[Dict[str, Callable[[], object]]] = None,
               torch_name: str = "") -> List[Case]:
    """fn(*arrays) in float16 and bfloat16, timed against our own float32 fn(*arrays) (issue 8's bar: at most
    1.3x slower, and no slower at all for the memory-bound backward passes), and against PyTorch's kernel in
    the same dtype where torch_baselines[fmt] is given (torch_half_kernels: PyTorch 2.x has them, 1.13 few)."""
    out = []
    for fmt, short in HALF_FORMATS.items():
        half = [in_format(a, fmt) for a in arrays]
        ours = lambda half=half: fn(*half)  # noqa: E731
        name = f"{variant} {short}"
        out.append(Case(op, name, direction, ours, lambda: fn(*arrays), "ours float32", bytes_moved32 // 2, fmt))
        if torch_baselines and fmt in torch_baselines:
            out.append(Case(op, name, direction, ours, torch_baselines[fmt], f"{torch_name} {fmt}",
                            bytes_moved32 // 2, fmt))
    return out


if __name__ == "__main__":  # make bench / make sweep ask where the results go
    import sys

    if sys.argv[1:] != ["results-dir"]:
        raise SystemExit("usage: python bench/common.py results-dir")
    print(results_dir())
