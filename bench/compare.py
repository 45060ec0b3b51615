"""Times spatialgrad and PyTorch side by side in one process at the standard shapes.

Prints, per operator and direction: our median time, the baseline's, the speed-up (baseline / ours)
and our time divided by the memory floor (minimal bytes moved / copy bandwidth measured in this run).
float16/bfloat16 rows (variant suffix fp16/bf16) are timed against our own float32 kernel and, where
PyTorch has a CPU kernel for that dtype, against it too. "2nd-order" rows (the vjp of a backward, which
PyTorch and mmcv do not have for these operators) are timed against our own first backward. Writes bench/results/bench.json and
bench/results/bench.png.

    python bench/compare.py [--ops avg_pool2d,...] [--dtypes float32,float16,bfloat16] [--threads 2] [--min-time 0.4]
"""
from __future__ import annotations

import argparse
import importlib
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import time_pair, versions, versions_line  # noqa: E402

# Adding an operator: write bench/ops/<name>.py with cases(rng) and add its name here.
OPS = ["avg_pool2d", "upsample_bilinear2d", "grid_sampler_2d", "roi_align", "ms_deform_attn"]


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
    parser.add_argument("--out", default=str(HERE / "results"))
    args = parser.parse_args()

    # The default environment (no OMP_WAIT_POLICY): importing spatialgrad.torch runs our NumPy calls on
    # PyTorch's pool, so PyTorch's spinning OpenMP workers no longer keep our second thread off its core
    # (docs/design.md, "NumPy calls on PyTorch's pool").
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

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = dict(threads=args.threads, bandwidth_gbs=bandwidth / 1e9, **versions(), machine=platform.machine(),
                processor=platform.processor())
    (out / "bench.json").write_text(json.dumps(dict(meta=meta, rows=rows), indent=2))
    try:
        plot(rows, out / "bench.png")
    except ImportError:
        print("matplotlib is not installed: no chart written")
    print(f"wrote {out / 'bench.json'}")
    return 0


def plot(rows, path: Path) -> None:
    """Horizontal bars on a log scale: the speed-up over PyTorch per operator and variant, forward and
    backward side by side, a line at 1x, and our time's ratio to the memory floor written beside each bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in rows if r["speedup"] is not None and not r["baseline"].startswith("ours")]
    groups = {}  # (op, variant, dtype) -> {direction: row}, in bench order
    for r in rows:
        groups.setdefault((r["op"], r["variant"], r["dtype"]), {})[r["direction"]] = r
    colours = {"forward": "#3a7ca5", "backward": "#d9822b"}
    fig, ax = plt.subplots(figsize=(9, 0.42 * 2 * len(groups) + 1.5))
    labels, positions, y = [], [], 0.0
    for (op, variant, dtype), by_direction in groups.items():
        for k, direction in enumerate(("forward", "backward")):
            r = by_direction.get(direction)
            if r is None:
                continue
            ax.barh(y - 0.2 + 0.4 * k, r["speedup"], height=0.38, color=colours[direction],
                    label=direction if not positions else None)
            ax.text(r["speedup"] * 1.05, y - 0.2 + 0.4 * k, f"{r['speedup']:.1f}x  ({r['x_floor']:.1f}x floor)",
                    va="center", fontsize=7)
        labels.append(f"{op}  {variant}" + ("" if dtype == "float32" else f"  ({dtype})"))
        positions.append(y)
        y += 1.0
    ax.set_xscale("log")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks(positions)
    ax.set_yticklabels(labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("speed-up over the baseline (log scale)\n(in brackets: our time / memory floor)", fontsize=9)
    ax.set_title("spatialgrad vs PyTorch / torchvision / mmcv's fallback\nsame dtype, same process, 2 threads",
                 fontsize=9)
    handles = [matplotlib.patches.Patch(color=c, label=d) for d, c in colours.items()]
    ax.legend(handles=handles, loc="lower right", fontsize=8)
    ax.set_xlim(right=ax.get_xlim()[1] * 4)  # room for the labels
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
