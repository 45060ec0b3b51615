"""Each operator's forward + backward alone and with 1 and 2 busy processes on the machine, ours against PyTorch's.

A training process is never alone: CPU-bound DataLoader workers and other jobs share the cores. For each load
(0, 1, 2 busy processes, each a Python loop that this script starts before the timings and kills by its pid
after them) it times, alternating call by call in this process, PyTorch's fwd+bwd (autograd), ours called from
PyTorch (spatialgrad.torch, autograd) and ours called from NumPy (the forward and backward functions). It prints
the medians and each side's slowdown against its time alone; the target (issue 32) is that our slowdown is no
larger than PyTorch's on the same call ("ok", else "SLOWER"). The "fair share" column is the slowdown an even
share of the cores among the runnable threads would give our 2-thread calls: where it is already above PyTorch's
measured slowdown (torchvision's roi_align runs on one thread, which a busy process does not slow down on two
cores) the verdict says "SLOWER (fair share)": no scheduling of ours can meet the target there. The "lost" column
is the time each call lost beyond its fair share, in ms (time under load minus fair share x time at the first
load, "alone" by default): the scheduler's delays in absolute terms, which a ratio weighs more heavily in a short
call than in a long one.

    python bench/load.py [--ops avg_pool2d,...] [--loads 0,1,2] [--threads 2] [--calls 200] [--max-time 4]
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import time_alternately, versions_line  # noqa: E402

SIDES = ["torch", "ours torch", "ours numpy"]


def _autograd_step(forward: Callable, inputs: List, grad):
    """fwd+bwd through autograd: forward(*inputs), then the gradients of every input."""
    def step():
        for t in inputs:
            t.grad = None
        forward(*inputs).backward(grad)
    return step


def avg_pool2d_case(rng, torch, F, sg, sgt) -> Dict[str, Callable]:
    x = rng.standard_normal((8, 32, 64, 64)).astype(np.float32)
    g = rng.standard_normal((8, 32, 32, 32)).astype(np.float32)
    tx, tg = torch.from_numpy(x).requires_grad_(), torch.from_numpy(g)
    return {"torch": _autograd_step(lambda t: F.avg_pool2d(t, 3, 2, 1), [tx], tg),
            "ours torch": _autograd_step(lambda t: sgt.avg_pool2d(t, 3, 2, 1), [tx], tg),
            "ours numpy": lambda: (sg.avg_pool2d(x, 3, 2, 1), sg.avg_pool2d_backward(g, x, 3, 2, 1))}


def upsample_case(rng, torch, F, sg, sgt) -> Dict[str, Callable]:
    x = rng.standard_normal((8, 32, 64, 64)).astype(np.float32)
    g = rng.standard_normal((8, 32, 128, 128)).astype(np.float32)
    tx, tg = torch.from_numpy(x).requires_grad_(), torch.from_numpy(g)
    return {"torch": _autograd_step(lambda t: F.interpolate(t, scale_factor=2, mode="bilinear"), [tx], tg),
            "ours torch": _autograd_step(lambda t: sgt.upsample_bilinear2d(t, scale_factor=2), [tx], tg),
            "ours numpy": lambda: (sg.upsample_bilinear2d(x, scale_factor=2),
                                   sg.upsample_bilinear2d_backward(g, (128, 128), x.shape))}


def grid_sample_case(rng, torch, F, sg, sgt) -> Dict[str, Callable]:
    x = rng.standard_normal((8, 32, 64, 64)).astype(np.float32)
    grid = rng.uniform(-1, 1, (8, 64, 64, 2)).astype(np.float32)
    g = rng.standard_normal((8, 32, 64, 64)).astype(np.float32)
    tx, tgrid, tg = torch.from_numpy(x).requires_grad_(), torch.from_numpy(grid).requires_grad_(), torch.from_numpy(g)
    return {"torch": _autograd_step(lambda a, b: F.grid_sample(a, b, align_corners=False), [tx, tgrid], tg),
            "ours torch": _autograd_step(lambda a, b: sgt.grid_sample(a, b, align_corners=False), [tx, tgrid], tg),
            "ours numpy": lambda: (sg.grid_sample(x, grid), sg.grid_sampler_2d_backward(g, x, grid))}


def roi_align_case(rng, torch, F, sg, sgt) -> Dict[str, Callable]:
    import torchvision

    x = rng.standard_normal((2, 256, 64, 64)).astype(np.float32)
    corners = np.sort(rng.uniform(0, 63, (128, 2, 2)), axis=1)
    boxes = np.concatenate([rng.integers(0, 2, (128, 1)), corners[:, 0], corners[:, 1]], 1).astype(np.float32)
    g = rng.standard_normal((128, 256, 7, 7)).astype(np.float32)
    tx, tboxes, tg = torch.from_numpy(x).requires_grad_(), torch.from_numpy(boxes), torch.from_numpy(g)
    return {"torch": _autograd_step(lambda t: torchvision.ops.roi_align(t, tboxes, 7, 1.0, 2, True), [tx], tg),
            "ours torch": _autograd_step(lambda t: sgt.roi_align(t, tboxes, 7, 1.0, 2, True), [tx], tg),
            "ours numpy": lambda: (sg.roi_align(x, boxes, 7, 1.0, 2, True),
                                   sg.roi_align_backward(g, boxes, x.shape, 7, 7, 1.0, 2, True))}


def ms_deform_attn_case(rng, torch, F, sg, sgt) -> Dict[str, Callable]:
    levels = np.array([(64, 64), (32, 32), (16, 16), (8, 8)], np.int64)
    areas = levels[:, 0] * levels[:, 1]
    starts = np.cumsum(areas) - areas
    value = rng.standard_normal((2, int(areas.sum()), 8, 32)).astype(np.float32)
    loc = rng.uniform(0, 1, (2, 1000, 8, 4, 4, 2)).astype(np.float32)
    attn = rng.uniform(0, 1, (2, 1000, 8, 4, 4)).astype(np.float32)
    grad = rng.standard_normal((2, 1000, 256)).astype(np.float32)
    tensors = [torch.from_numpy(a).requires_grad_() for a in (value, loc, attn)]
    tshapes, tstarts, tg = torch.from_numpy(levels), torch.from_numpy(starts), torch.from_numpy(grad)
    return {"torch": _autograd_step(lambda v, l, a: sgt.ms_deform_attn_reference(v, tshapes, l, a), tensors, tg),
            "ours torch": _autograd_step(lambda v, l, a: sgt.ms_deform_attn(v, tshapes, tstarts, l, a), tensors, tg),
            "ours numpy": lambda: (sg.ms_deform_attn(value, levels, starts, loc, attn),
                                   sg.ms_deform_attn_backward(value, levels, starts, loc, attn, grad))}


CASES = {
    "avg_pool2d k3 s2 p1 (8,32,64,64)": ("avg_pool2d", avg_pool2d_case),
    "upsample x2 (8,32,64,64)": ("upsample_bilinear2d", upsample_case),
    "grid_sample bilinear (8,32,64,64) grid 64^2": ("grid_sampler_2d", grid_sample_case),
    "roi_align (2,256,64,64) 128 boxes 7x7": ("roi_align", roi_align_case),
    "ms_deform_attn bs2 64..8 Q1000": ("ms_deform_attn", ms_deform_attn_case),
}
# Threads PyTorch's side runs on where it is not torch.get_num_threads(): torchvision's CPU roi_align (forward
# and backward) is one plain loop.
TORCH_SIDE_THREADS = {"roi_align (2,256,64,64) 128 boxes 7x7": 1}


def fair_share(threads: int, busy: int, cores: int) -> float:
    """The slowdown of a call on `threads` threads beside `busy` busy processes when the scheduler shares the
    cores evenly among the runnable threads: 1 while they fit on the cores, else (threads + busy) / cores."""
    return max(1.0, (threads + busy) / cores) / max(1.0, threads / cores)


class BusyProcesses:
    """`count` CPU-bound Python processes (a DataLoader worker's kind of load), killed by pid on exit."""

    def __init__(self, count: int):
        self.count = count
        self.pids: List[int] = []

    def __enter__(self):
        for _ in range(self.count):
            self.pids.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]).pid)
        time.sleep(0.5 if self.count else 0.0)  # let them reach the cores
        return self

    def __exit__(self, *exc):
        for pid in self.pids:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        self.pids.clear()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", default="", help="comma-separated operators (default: all)")
    parser.add_argument("--loads", default="0,1,2", help="numbers of busy processes")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--calls", type=int, default=200, help="most fwd+bwd calls per side, case and load")
    parser.add_argument("--max-time", type=float, default=4.0, help="seconds per case and load (all sides)")
    args = parser.parse_args()
    import torch
    import torch.nn.functional as F

    import spatialgrad as sg
    import spatialgrad.torch as sgt

    torch.set_num_threads(args.threads)
    sg.set_num_threads(args.threads)
    wanted = [o for o in args.ops.split(",") if o]
    cases = {name: build for name, (op, build) in CASES.items() if not wanted or op in wanted}
    loads = [int(n) for n in args.loads.split(",")]
    rng = np.random.default_rng(0)
    calls = {name: build(rng, torch, F, sg, sgt) for name, build in cases.items()}
    print(versions_line())
    print(f"{args.threads} threads, "
          f"{os.cpu_count()} cores, load average before: {os.getloadavg()[0]:.2f}, "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset)')}")
    medians: Dict[int, Dict[str, List[float]]] = {}
    for load in loads:
        with BusyProcesses(load):
            medians[load] = {name: time_alternately([fns[s] for s in SIDES], min_time=args.max_time,
                                                    max_repeats=args.calls, min_repeats=15, warmup=3)
                             for name, fns in calls.items()}
    print_table(medians, loads, args.threads, os.cpu_count() or 1)
    return 0


def print_table(medians: Dict[int, Dict[str, List[float]]], loads: List[int], threads: int, cores: int) -> None:
    """One row per case and side: median ms per load, slowdown against alone, the fair-share slowdown of the
    side's thread count, the ms lost beyond that share at each load, and the target's verdict ("SLOWER (fair
    share)" where even an even share of the cores would be slower than PyTorch's measured slowdown, as for a
    2-thread call against a 1-thread one)."""
    base = loads[0]
    heads = [f"{n} busy" if n else "alone" for n in loads]
    print(f"\nmedian fwd+bwd ms (slowdown against {heads[0]}); fair share: the slowdown if the scheduler shared the"
          f" {cores} cores evenly among the runnable threads")
    print(f"| call | side | {' | '.join(heads)} | fair share | lost (ms) | target |")
    print("|---|---|" + "---|" * len(loads) + "---|---|---|")
    for name in medians[base]:
        torch_slowdown = [medians[n][name][0] / medians[base][name][0] for n in loads]
        for i, side in enumerate(SIDES):
            times = [medians[n][name][i] for n in loads]
            cells = [f"{t * 1e3:.2f}" + (f" ({t / times[0]:.1f}x)" if n != base else "") for n, t in zip(loads, times)]
            side_threads = TORCH_SIDE_THREADS.get(name, threads) if side == "torch" else threads
            fair = [fair_share(side_threads, n, cores) / fair_share(side_threads, base, cores) for n in loads]
            verdict = ""
            if side != "torch":
                # Per load: slower than PyTorch's slowdown, and whether even the fair share is (then no scheduling
                # of ours could have met the target at that load).
                slower = [t / times[0] > s for t, s in zip(times, torch_slowdown)]
                excused = [f > s for f, s in zip(fair, torch_slowdown)]
                verdict = "ok"
                if any(slower):
                    verdict = "SLOWER (fair share)" if all(e for x, e in zip(slower, excused) if x) else "SLOWER"
            fair_cells = " / ".join(f"{f:.1f}x" for n, f in zip(loads, fair) if n != base)
            lost = [t - f * times[0] for n, t, f in zip(loads, times, fair) if n != base]
            lost_cells = " / ".join(f"{seconds * 1e3:.2f}" for seconds in lost)
            print(f"| {name} | {side} | {' | '.join(cells)} | {fair_cells} | {lost_cells} | {verdict} |")


if __name__ == "__main__":
    sys.exit(main())
