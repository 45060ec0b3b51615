"""Times spatialgrad and PyTorch side by side in one process at the standard shapes.

Prints, per operator and direction: our median time, the baseline's, the speed-up (baseline / ours)
and our time divided by the memory floor (minimal bytes moved / copy bandwidth measured in this run).
float16/bfloat16 rows (variant suffix fp16/bf16) are timed against our own float32 kernel and, where
PyTorch has a CPU kernel for that dtype, against it too. "2nd-order" rows (the vjp of a backward, which
PyTorch and mmcv do not have for these operators) are timed against our own first backward.

    python bench/compare.py [--ops avg_pool2d,...] [--dtypes float32,float16,bfloat16] [--threads 2]
                            [--min-time 0.4] [--json FILE]

make bench writes FILE = bench/results/pytorch-<major.minor>/compare[-<run>].json, which
scripts/render_performance.py turns into docs/performance.md. The file (format 1):

    {"kind": "compare", "format": 1,
     "meta": {"threads": int, "min_time": float, "bandwidth_gbs": float (the copy bandwidth),
              "spatialgrad", "torch", "torchvision", "numpy", "python", "system", "cpu", "cpus": str
              (bench/common.py versions()), "machine": str},
     "rows": [{"op": str, "variant": str, "direction": "forward" | "backward" | "2nd-order",
               "dtype": "float32" | "float16" | "bfloat16" (of our side),
               "ours_ms": float (median), "baseline_ms": float | null, "baseline": str (what it is; "ours
               float32" or "ours backward" for rows timed against our own kernels),
               "speedup": float | null (baseline_ms / ours_ms), "floor_ms": float (the memory floor),
               "x_floor": float (ours_ms / floor_ms)}, ...]}
"""
from __future__ import annotations

import argparse
import importlib
import platform
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import operators, time_pair, versions, versions_line, write_json  # noqa: E402

# Each operator of the table has bench/ops/<name>.py with cases(rng).
OPS = operators()


def copy_bandwidth(torch) -> float:
    """Bytes per second (read + write) of a large parallel copy, the best of a few runs."""
    src = torch.ones(64 * 1024 * 1024 // 4 * 4, dtype=torch.float32)  # 256 MiB
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - t0)
    return 2 * src.numel() * 4 / best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", default=",".join(OPS), help="comma-separated operators (default: all)")
    parser.add_argument("--dtypes", default="float32,float16,bfloat16",
                        help="comma-separated dtypes of our side (default: all)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--min-time", type=float, default=0.4, help="seconds of timing per case and side")
    parser.add_argument("--json", help="write the rows and the run's settings to this file (format above)")
    args = parser.parse_args()

    # The default environment (no OMP_WAIT_POLICY): importing spatialgrad.torch runs our NumPy calls on
    # PyTorch's pool, so PyTorch's spinning OpenMP workers no longer keep our second thread off its core
    # (docs/design.md, "Beside PyTorch's OpenMP threads").
    import torch

    import spatialgrad as sg
    import spatialgrad.torch  # noqa: F401

    torch.set_num_threads(args.threads)
    sg.set_num_threads(args.threads)
    bandwidth = copy_bandwidth(torch)
    print(versions_line())
    print(f"{args.threads} threads, copy bandwidth {bandwidth / 1e9:.1f} GB/s")
    header = f"{'operator':<22} {'variant':<24} {'dir':<8} {'ours ms':>9} {'base ms':>9} {'speed-up':>9} {'x floor':>8}  baseline"
    print(header)
    print("-" * len(header))
    rows = []
    for name in [n for n in args.ops.split(",") if n]:
        module = importlib.import_module(f"ops.{name}")
        for case in module.cases(np.random.default_rng(0)):
            if case.dtype not in args.dtypes.split(","):
                continue
            ours, base = time_pair(case.ours, case.baseline, min_time=args.min_time)
            floor = case.bytes_moved / bandwidth
            row = dict(op=case.op, variant=case.variant, direction=case.direction, dtype=case.dtype,
                       ours_ms=ours * 1e3,
                       baseline_ms=None if base is None else base * 1e3, baseline=case.baseline_name,
                       speedup=None if base is None else base / ours, floor_ms=floor * 1e3, x_floor=ours / floor)
            rows.append(row)
            base_s = "-" if base is None else f"{base * 1e3:9.2f}"
            speed_s = "-" if base is None else f"{base / ours:8.2f}x"
            print(f"{case.op:<22} {case.variant:<24} {case.direction:<8} {ours * 1e3:9.2f} {base_s:>9} {speed_s:>9} "
                  f"{ours / floor:7.2f}x  {case.baseline_name}", flush=True)

    if args.json:
        meta = dict(threads=args.threads, min_time=args.min_time, bandwidth_gbs=bandwidth / 1e9, **versions(),
                    machine=platform.machine())
        write_json(args.json, dict(kind="compare", format=1, meta=meta, rows=rows))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
