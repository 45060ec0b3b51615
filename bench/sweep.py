"""The shape sweep: every operator, forward and backward, on the shapes users run, against its anchor.

For each row (the tables are in bench/sweep_ops/<op>.py) it prints our time and the anchor's (medians, timed
alternately in this process; calls slower than 1.5 s are timed once), the ratio anchor / ours (below 1.0x we
are slower: flagged SLOW), our scratch memory (the resident memory a call adds at its peak, beyond the
arrays it returns), the bound on it, max(64 MiB, 25% of inputs + outputs) (flagged MEM when over), and the
anchor's scratch measured the same way. Rows of issue 31's table are marked with *. At the end: the rows
below 1.0x, the median ratio and the rows over the memory bound. Exit status 0 unless --strict (then 1 if
any row is slow, over the bound or fails).

Memory is measured with the kernel's peak-RSS counter: with our memory cache emptied and free heap memory
returned to the OS, "5" is written to /proc/self/clear_refs (VmHWM := VmRSS), the call runs once, and its
scratch is VmHWM - VmRSS before - the resident bytes of the returned arrays (mincore: pages of zeros never
written were never counted). A self-test at start measures a call known to use 48 MiB. The address space is
limited (see --memory-limit), so a call that needs too much raises MemoryError (reported on its row) instead
of waking the OOM killer.

    python bench/sweep.py [--ops grid_sampler_2d,...] [--filter 8000] [--threads 2] [--min-time 0.4] [--quick]
                          [--json sweep.json] [--strict]

make sweep writes --json bench/results/pytorch-<major.minor>/sweep[-<run>].json, which
scripts/render_performance.py turns into docs/performance.md. The file (format 1, results_document below):

    {"kind": "sweep", "format": 1,
     "meta": {"threads": int, "min_time": float, "quick": bool, "memory_measured": bool, "machine": str,
              "spatialgrad", "torch", "torchvision", "numpy", "python", "system", "cpu", "cpus": str
              (bench/common.py versions())},
     "rows": [{"op": str, "shape": str (the row's description), "direction": "forward" | "backward",
               "table": bool (a starred row), "anchor": str, "ours_ms", "anchor_ms", "ratio": float | null
               (ratio = anchor_ms / ours_ms; null when a side failed), "scratch_mib",
               "anchor_scratch_mib": float | null (null: not measured), "bound_mib", "io_mib": float,
               "over_bound": bool, "error", "anchor_error": str | null}, ...]}
"""
from __future__ import annotations

import argparse
import ctypes
import gc
import importlib
import os
import platform
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import nbytes, operators, time_pair, versions, versions_line, write_json  # noqa: E402

OPS = operators()  # each with bench/sweep_ops/<name>.py
DIRECTIONS = ("forward", "backward")
MIB = 1 << 20
BOUND_FLOOR = 64 * MIB  # issue 31: scratch <= max(64 MiB, 25% of inputs + outputs)
BOUND_SHARE = 0.25
SINGLE_CALL_SECONDS = 1.5  # a side this slow is timed by its one memory-measuring call
HUGE_PIXELS = 4096 * 4096  # rows with a larger plane are left out by --quick


# ---- memory ------------------------------------------------------------------------------------------------

def proc_bytes(path: str, field: str) -> int:
    """A "Field:  <n> kB" line of /proc/self/status (VmRSS, VmHWM, VmSize) or /proc/meminfo, in bytes."""
    with open(path) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


def status_bytes(field: str) -> int:
    return proc_bytes("/proc/self/status", field)


def returned_arrays(result) -> list:
    """The arrays or tensors a call returned (one, or a tuple of them and None)."""
    items = result if isinstance(result, (tuple, list)) else (result,)
    return [a for a in items if a is not None]


LIBC = ctypes.CDLL(None, use_errno=True)
PAGE = os.sysconf("SC_PAGE_SIZE")


def resident_bytes(array) -> int:
    """Bytes of an array's or tensor's pages that are in memory (mincore). A result can hold pages never
    written (zeros straight from the OS): the peak never counted them, so they are not taken off it."""
    size = nbytes(array)
    if size == 0:
        return 0
    address = array.data_ptr() if hasattr(array, "data_ptr") else array.ctypes.data
    start = address - address % PAGE
    pages = (address + size - start + PAGE - 1) // PAGE
    flags = (ctypes.c_ubyte * pages)()
    if LIBC.mincore(ctypes.c_void_p(start), ctypes.c_size_t(pages * PAGE), flags) != 0:
        return size  # cannot tell: count all of it
    return min(size, int((np.frombuffer(flags, np.uint8) & 1).sum()) * PAGE)


class PeakMemory:
    """Calls a function once and measures the resident memory it added at its peak."""

    def __init__(self, release_caches):
        self.release_caches = release_caches
        try:
            self._reset_peak()
            self.available = True
        except OSError:  # no /proc/self/clear_refs (not Linux, or a kernel before 4.0)
            self.available = False

    @staticmethod
    def _reset_peak():
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")

    def call(self, fn):
        """(result, seconds, peak bytes above the resident memory before the call; None if unmeasured)."""
        self.release_caches()
        gc.collect()
        LIBC.malloc_trim(0)  # free heap memory a call could reuse unseen goes back to the OS
        if self.available:
            self._reset_peak()
        before = status_bytes("VmRSS")
        start = time.perf_counter()
        result = fn()
        seconds = time.perf_counter() - start
        peak = status_bytes("VmHWM") - before if self.available else None
        return result, seconds, peak

    def scratch(self, fn):
        """(result's arrays, seconds, peak bytes beyond the result's resident pages, or None if unmeasured)."""
        result, seconds, peak = self.call(fn)
        arrays = returned_arrays(result)
        if peak is not None:
            peak = max(peak - sum(resident_bytes(a) for a in arrays), 0)
        return arrays, seconds, peak

    def check(self) -> str:
        """The method's self-test: a call known to use 48 MiB of scratch while it holds its 16 MiB result
        and a 32 MiB result of zeros (pages not yet written)."""
        def known():
            result = (np.ones(16 * MIB // 8), np.zeros(32 * MIB // 8))
            scratch = np.ones(48 * MIB // 8)
            del scratch
            return result

        _, _, scratch = self.scratch(known)
        if scratch is None:
            return "memory: not measured (no /proc/self/clear_refs)"
        return f"memory method check: 48 MiB of scratch measured as {scratch / MIB:.1f} MiB"


def limit_address_space(gib: float) -> str:
    """Caps the address space at its current size plus min(gib, 85% of the memory available now)."""
    if gib <= 0:
        return "address space not limited"
    available = proc_bytes("/proc/meminfo", "MemAvailable")
    extra = int(min(gib * (1 << 30), 0.85 * available))
    limit = status_bytes("VmSize") + extra
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    return f"address space limited to {extra / (1 << 30):.1f} GiB above the start (MemoryError beyond)"


# ---- one row -----------------------------------------------------------------------------------------------

def probe(memory: PeakMemory, fn):
    """One measured call: (seconds, scratch bytes or None, bytes of the arrays it returned, error text)."""
    try:
        arrays, seconds, scratch = memory.scratch(fn)
    except Exception as error:  # MemoryError in particular: a finding, reported on the row
        message = str(error).splitlines()[0][:80] if str(error) else ""
        return None, None, 0, f"{type(error).__name__}: {message}"
    return seconds, scratch, nbytes(*arrays), None


def measure(pair, memory: PeakMemory, min_time: float) -> dict:
    """Memory of both sides (one call each), then their times: alternating medians, or that one call when
    a side takes SINGLE_CALL_SECONDS or more."""
    ours_s, scratch, out_bytes, error = probe(memory, pair.ours)
    anchor_s, anchor_scratch, _, anchor_error = probe(memory, pair.anchor)
    io_bytes = nbytes(*pair.inputs) + out_bytes
    bound = max(BOUND_FLOOR, BOUND_SHARE * io_bytes)
    row = dict(anchor=pair.anchor_name, io_mib=io_bytes / MIB, bound_mib=bound / MIB,
               scratch_mib=None if scratch is None else scratch / MIB,
               anchor_scratch_mib=None if anchor_scratch is None else anchor_scratch / MIB,
               over_bound=scratch is not None and scratch > bound, error=error, anchor_error=anchor_error,
               ours_ms=None if ours_s is None else ours_s * 1e3,
               anchor_ms=None if anchor_s is None else anchor_s * 1e3, ratio=None)
    if error or anchor_error:
        return row
    slowest = max(ours_s, anchor_s)
    if slowest < SINGLE_CALL_SECONDS:
        ours_s, anchor_s = time_pair(pair.ours, pair.anchor, min_time=min_time, warmup=1 if slowest < 0.05 else 0,
                                     min_repeats=7 if slowest < 0.05 else 3)
    row.update(ours_ms=ours_s * 1e3, anchor_ms=anchor_s * 1e3, ratio=anchor_s / ours_s)
    return row


# ---- printing ----------------------------------------------------------------------------------------------

HEADER = (f"{'operator':<19} {'shape':<62} {'dir':<8} {'ours ms':>9} {'anchor ms':>9} {'ratio':>7} "
          f"{'MiB':>7} {'bound':>6} {'anchor':>7}  flags")


def milliseconds(value) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if value < 1 else f"{value:.2f}" if value < 100 else f"{value:.0f}"


def mebibytes(value) -> str:
    return "-" if value is None else f"{value:.1f}" if value < 100 else f"{value:.0f}"


def flags(row: dict) -> str:
    out = []
    if row["ratio"] is not None and row["ratio"] < 1.0:
        out.append("SLOW")
    if row["over_bound"]:
        out.append("MEM")
    if row["error"]:
        out.append(f"ERROR {row['error']}")
    if row["anchor_error"]:
        out.append(f"anchor ERROR {row['anchor_error']}")
    return " ".join(out)


def format_row(row: dict) -> str:
    shape = ("* " if row["table"] else "  ") + row["shape"]
    ratio = "-" if row["ratio"] is None else f"{row['ratio']:.2f}x"
    return (f"{row['op']:<19} {shape:<62} {row['direction']:<8} {milliseconds(row['ours_ms']):>9} "
            f"{milliseconds(row['anchor_ms']):>9} {ratio:>7} {mebibytes(row['scratch_mib']):>7} "
            f"{mebibytes(row['bound_mib']):>6} {mebibytes(row['anchor_scratch_mib']):>7}  {flags(row)}")


def summary(rows: list) -> list:
    """The closing lines: rows below 1.0x, the median ratios, the table rows below 1.5x, memory, errors."""
    timed = [r for r in rows if r["ratio"] is not None]
    slow = [r for r in timed if r["ratio"] < 1.0]
    lines = [f"{len(rows)} rows, {len(timed)} timed: {len(slow)} below 1.0x"]
    if timed:
        medians = [f"median ratio {statistics.median(r['ratio'] for r in timed):.2f}x"]
        for direction in DIRECTIONS:
            ratios = [r["ratio"] for r in timed if r["direction"] == direction]
            if ratios:
                medians.append(f"{direction} {statistics.median(ratios):.2f}x")
        lines.append(", ".join(medians))
    groups = [("below 1.0x", slow), ("issue 31's table rows below 1.5x", [r for r in timed if r["table"] and
                                                                           r["ratio"] < 1.5]),
              ("scratch over the bound", [r for r in rows if r["over_bound"]]),
              ("errors", [r for r in rows if r["error"] or r["anchor_error"]])]
    for title, group in groups:
        lines.append(f"{title}: {len(group)}")
        lines += ["  " + format_row(r).strip() for r in group]
    return lines


# ---- main --------------------------------------------------------------------------------------------------

def selected(op: str, shape: str, pattern: str) -> bool:
    return not pattern or any(pattern in f"{op} {shape} {d}" for d in DIRECTIONS)


def run_row(op: str, module, table_row, rng, args, memory: PeakMemory) -> list:
    """Builds one row's arrays, measures its directions (printing each) and lets the arrays go."""
    shape = table_row.describe()
    out = []
    for direction, pair in module.build(table_row, rng).items():
        if args.filter and args.filter not in f"{op} {shape} {direction}":
            continue
        row = dict(op=op, shape=shape, direction=direction, table=table_row.table,
                   **measure(pair, memory, args.min_time))
        print(format_row(row), flush=True)
        out.append(row)
    return out


def run(args, memory: PeakMemory) -> list:
    rows = []
    rng = np.random.default_rng(0)
    for op in [n for n in args.ops.split(",") if n]:
        module = importlib.import_module(f"sweep_ops.{op}")
        for table_row in module.ROWS:
            huge = table_row.plane[0] * table_row.plane[1] > HUGE_PIXELS
            if selected(op, table_row.describe(), args.filter) and not (args.quick and huge):
                rows += run_row(op, module, table_row, rng, args, memory)
    return rows


def levels(torch, sg) -> dict:
    """The instruction levels both sides run at: spatialgrad's kernels' and PyTorch's CPU capability."""
    capability = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", lambda: None)()
    return dict(simd_level=sg.simd_level(), torch_cpu_capability=capability)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", default=",".join(OPS), help="comma-separated operators (default: all)")
    parser.add_argument("--filter", default="", help="only rows whose 'operator shape direction' contains this")
    parser.add_argument("--threads", type=int, default=2, help="threads of both sides (default 2)")
    parser.add_argument("--min-time", type=float, default=0.4, help="seconds of alternating timing per row")
    parser.add_argument("--quick", action="store_true",
                        help="0.1 s per row and no plane beyond 4096x4096 (a quick look, noisier)")
    parser.add_argument("--json", help="write the rows and the run's settings to this file")
    parser.add_argument("--memory-limit", type=float, default=16,
                        help="GiB of address space the run may add (capped at 85%% of the available memory; 0: "
                             "no limit)")
    parser.add_argument("--strict", action="store_true", help="exit 1 if a row is below 1.0x, over the bound or fails")
    args = parser.parse_args()
    if args.quick:
        args.min_time = min(args.min_time, 0.1)

    # The default environment (no OMP_WAIT_POLICY). PyTorch's OpenMP workers spin for a while after each of its
    # calls (libgomp's default) and kept our pool's second thread off its core (nearest grid_sample
    # (8,3,256,256) forward 2.07 ms against 1.14 ms with PASSIVE): importing spatialgrad.torch runs our NumPy
    # calls on PyTorch's pool instead, on the same threads (docs/design.md, "NumPy calls on PyTorch's pool").
    import torch

    import spatialgrad as sg
    import spatialgrad.torch  # noqa: F401

    torch.set_num_threads(args.threads)
    sg.set_num_threads(args.threads)
    memory = PeakMemory(sg.clear_memory_cache)
    print(versions_line())
    print(f"{args.threads} threads, float32; "
          f"ratio = anchor ms / ours ms; MiB = our scratch beyond inputs and outputs, bound = max(64 MiB, 25% of "
          f"inputs + outputs), anchor = its scratch; * = a row of issue 31's table")
    level = levels(torch, sg)
    load_at_start = os.getloadavg()
    print(f"spatialgrad's kernels at SIMD level {level['simd_level']}; PyTorch's CPU capability "
          f"{level['torch_cpu_capability']}; load average {load_at_start[0]:.2f}")
    print(memory.check())
    print(limit_address_space(args.memory_limit))
    print(HEADER)
    print("-" * len(HEADER))
    start = time.perf_counter()
    rows = run(args, memory)
    print("-" * len(HEADER))
    print("\n".join(summary(rows)))
    seconds = time.perf_counter() - start
    print(f"{seconds:.0f} s")
    if args.json:
        document = results_document(args, memory, rows)
        document["meta"].update(level, load_average_start=list(load_at_start), load_average_end=list(os.getloadavg()))
        write_json(args.json, document)
        print(f"wrote {args.json}")
    failed = any((r["ratio"] is not None and r["ratio"] < 1.0) or r["over_bound"] or r["error"] for r in rows)
    return 1 if args.strict and failed else 0


# ---- the result file ---------------------------------------------------------------------------------------

def results_document(args, memory: PeakMemory, rows: list) -> dict:
    """The --json document (its format is in the module docstring): the run's settings and versions, the rows."""
    meta = dict(threads=args.threads, min_time=args.min_time, quick=args.quick, **versions(),
                machine=platform.machine(), memory_measured=memory.available)
    return dict(kind="sweep", format=1, meta=meta, rows=rows)


if __name__ == "__main__":
    raise SystemExit(main())
