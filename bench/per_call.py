"""Per call: each operator through spatialgrad.torch against PyTorch's own, forward and forward+backward.

On tiny inputs the fixed cost of a call (argument checks, dispatch, autograd bookkeeping) dominates; on small
ones it still shows. Two sizes, as (N, C, H, W) of the image input:
- tiny (1, 2, 8, 8) and small (2, 16, 32, 32);
- avg_pool2d: kernel 2; upsample: to twice the size, bilinear, align_corners=False; grid_sample: a grid of the
  input's size, bilinear, zeros; roi_align: 4 boxes per image, 4x4 bins, sampling_ratio 2, aligned (against
  torchvision.ops.roi_align); ms_deform_attn: two levels (H, W) and (H/2, W/2), 2 heads of C channels, H*W/4
  queries, 4 points (against spatialgrad.torch.ms_deform_attn_reference, mmcv's grid_sample fallback).
Forward runs on inputs that do not require grad; forward+backward on inputs that do, through
torch.autograd.grad (no .grad accumulation). Both sides run on the same threads (--threads, default 2), are
warmed up, then timed in alternating rounds (the order swaps every round); each round times a loop of calls
and divides; the table shows the best round (the shared host wakes threads late: a median would time the
host). The environment is left as it is (make bench sets no OMP_WAIT_POLICY). Works on either path of
spatialgrad.torch (native operators or the Python autograd.Function); the header says which is active.

    python bench/per_call.py [--ops avg_pool2d,...] [--sizes tiny,small] [--rounds 9] [--threads 2] [--json FILE]
                             [--compile]

--compile (PyTorch 2) times both sides' functions compiled with torch.compile (ours with fullgraph=True; theirs
may break the graph; each compiled once, before its warm-up): what a call costs inside a compiled model, to
compare with the eager table (it prints only: the result files hold eager calls).

make bench writes FILE = bench/results/pytorch-<major.minor>/per_call[-<run>].json, which
scripts/render_performance.py turns into docs/performance.md. The file (format 1):

    {"kind": "per_call", "format": 1,
     "meta": {"native": bool (the native operators were active), "threads": int, "rounds": int,
              "spatialgrad", "torch", "torchvision", "numpy", "python", "system", "cpu", "cpus": str
              (bench/common.py versions())},
     "rows": [{"op": str, "size": "tiny" | "small", "shape": [N, C, H, W], "theirs": str (the baseline),
               "ours fwd", "theirs fwd", "ours fwd+bwd", "theirs fwd+bwd": float (best seconds per call)}, ...]}
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Callable, Dict, List, Tuple

# The default environment (no OMP_WAIT_POLICY), as a training script runs: the native operators and, once
# spatialgrad.torch is imported, our NumPy calls run on PyTorch's pool.

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import spatialgrad  # noqa: E402
import spatialgrad.torch as sgt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import versions, versions_line, write_json  # noqa: E402

SIZES = {"tiny": (1, 2, 8, 8), "small": (2, 16, 32, 32)}
LOOP_SECONDS = 0.004  # each round's loop: long enough for perf_counter, short enough to dodge interruptions


def _inputs(requires_grad: bool, *tensors: torch.Tensor) -> List[torch.Tensor]:
    return [t.requires_grad_(requires_grad) for t in tensors]


def avg_pool2d_case(shape, grad):
    (x,) = _inputs(grad, torch.rand(shape))
    return [x], (lambda a: sgt.avg_pool2d(a, 2)), (lambda a: F.avg_pool2d(a, 2))


def upsample_case(shape, grad):
    (x,) = _inputs(grad, torch.rand(shape))
    size = (2 * shape[2], 2 * shape[3])
    return ([x], (lambda a: sgt.upsample_bilinear2d(a, size=size, align_corners=False)),
            (lambda a: F.interpolate(a, size=size, mode="bilinear", align_corners=False)))


def grid_sample_case(shape, grad):
    n, _, h, w = shape
    x, grid = _inputs(grad, torch.rand(shape), torch.rand(n, h, w, 2) * 2.2 - 1.1)
    options = dict(mode="bilinear", padding_mode="zeros", align_corners=False)
    return [x, grid], (lambda a, g: sgt.grid_sample(a, g, **options)), (lambda a, g: F.grid_sample(a, g, **options))


def roi_align_case(shape, grad):
    import torchvision

    n, _, h, w = shape
    generator = torch.Generator().manual_seed(0)
    corners = torch.rand(4 * n, 2, 2, generator=generator) * torch.tensor([w - 1.0, h - 1.0])
    boxes = torch.cat([torch.arange(n).repeat_interleave(4)[:, None].float(), corners.min(1).values,
                       corners.max(1).values + 1], dim=1)
    (x,) = _inputs(grad, torch.rand(shape))
    options = dict(output_size=(4, 4), spatial_scale=1.0, sampling_ratio=2, aligned=True)
    return ([x], (lambda a: sgt.roi_align(a, boxes, **options)),
            (lambda a: torchvision.ops.roi_align(a, boxes, **options)))


def ms_deform_attn_case(shape, grad):
    n, c, h, w = shape
    heads, levels, points, queries = 2, 2, 4, h * w // 4
    shapes = torch.tensor([[h, w], [h // 2, w // 2]])
    starts = torch.tensor([0, h * w])
    value, locations, weights = _inputs(
        grad, torch.rand(n, h * w + (h // 2) * (w // 2), heads, c),
        torch.rand(n, queries, heads, levels, points, 2), torch.rand(n, queries, heads, levels, points))
    return ([value, locations, weights], (lambda v, l, a: sgt.ms_deform_attn(v, shapes, starts, l, a)),
            (lambda v, l, a: sgt.ms_deform_attn_reference(v, shapes, l, a)))


CASES: Dict[str, Callable] = {"avg_pool2d": avg_pool2d_case, "upsample_bilinear2d": upsample_case,
                              "grid_sample": grid_sample_case, "roi_align": roi_align_case,
                              "ms_deform_attn": ms_deform_attn_case}
THEIRS = {"roi_align": "torchvision", "ms_deform_attn": "mmcv fallback"}


def forward_call(function: Callable, inputs: List[torch.Tensor]) -> Callable[[], object]:
    return lambda: function(*inputs)


def forward_backward_call(function: Callable, inputs: List[torch.Tensor]) -> Callable[[], object]:
    cotangent = torch.rand_like(function(*inputs))

    def call():
        return torch.autograd.grad(function(*inputs), inputs, cotangent)
    return call


def seconds_per_call(call: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - start) / calls


def best_per_call(ours: Callable[[], object], theirs: Callable[[], object], rounds: int) -> Tuple[float, float]:
    """The best per-call seconds of each side over alternating rounds (each a loop of LOOP_SECONDS)."""
    calls = []
    for call in (ours, theirs):  # warm-up, then a loop length that fills LOOP_SECONDS
        for _ in range(3):
            call()
        calls.append(max(1, int(LOOP_SECONDS / max(seconds_per_call(call, 5), 1e-7))))
    best = [float("inf"), float("inf")]
    for round_index in range(rounds):
        order = (0, 1) if round_index % 2 == 0 else (1, 0)
        for side in order:
            call = (ours, theirs)[side]
            best[side] = min(best[side], seconds_per_call(call, calls[side]))
    return best[0], best[1]


def measure(op: str, size: str, rounds: int, compiled: bool = False) -> dict:
    row = {"op": op, "size": size, "shape": SIZES[size], "theirs": THEIRS.get(op, "torch")}
    for direction, grad, wrap in (("fwd", False, forward_call), ("fwd+bwd", True, forward_backward_call)):
        inputs, ours, theirs = CASES[op](SIZES[size], grad)
        if compiled:  # theirs may break the graph (mmcv's fallback reads the level sizes with .item())
            ours, theirs = torch.compile(ours, fullgraph=True, dynamic=False), torch.compile(theirs, dynamic=False)
        with torch.enable_grad():
            seconds = best_per_call(wrap(ours, inputs), wrap(theirs, inputs), rounds)
        row[f"ours {direction}"], row[f"theirs {direction}"] = seconds
    return row


def markdown(rows: List[dict]) -> str:
    lines = ["| operator | input | ours fwd | theirs fwd | ratio | ours fwd+bwd | theirs fwd+bwd | ratio |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cells = [f"{r['op']} ({r['theirs']})", "(" + ",".join(map(str, r["shape"])) + ")"]
        for direction in ("fwd", "fwd+bwd"):
            ours, theirs = r[f"ours {direction}"], r[f"theirs {direction}"]
            cells += [f"{ours * 1e6:.1f} us", f"{theirs * 1e6:.1f} us", f"{theirs / ours:.2f}x"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", default=",".join(CASES), help="comma-separated operators (default: all)")
    parser.add_argument("--sizes", default=",".join(SIZES), help="comma-separated sizes: tiny, small")
    parser.add_argument("--rounds", type=int, default=9, help="alternating rounds per row (the best is shown)")
    parser.add_argument("--threads", type=int, default=2, help="threads of both sides")
    parser.add_argument("--json", help="also write the rows and the run's settings to this file (format above)")
    parser.add_argument("--compile", action="store_true", help="both sides under torch.compile")
    args = parser.parse_args()
    if args.compile and (args.json or not hasattr(torch, "compile")):
        parser.error("--compile needs PyTorch 2 and prints only (the result files hold eager calls): drop --json")
    ops, sizes = args.ops.split(","), args.sizes.split(",")
    unknown = [op for op in ops if op not in CASES] + [s for s in sizes if s not in SIZES]
    if unknown:
        parser.error(f"expected --ops from {', '.join(CASES)} and --sizes from {', '.join(SIZES)}, but got {unknown}")
    torch.set_num_threads(args.threads)
    spatialgrad.set_num_threads(args.threads)
    path = "native operators (torch.ops.spatialgrad)" if getattr(sgt, "native", False) else "Python autograd.Function"
    print(versions_line())
    print(f"spatialgrad.torch path: {path}; {args.threads} threads both, "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}, best of {args.rounds} alternated rounds;"
          f" ratio = theirs / ours (> 1: ours faster){'; both sides under torch.compile' if args.compile else ''}",
          flush=True)
    rows = [measure(op, size, args.rounds, args.compile) for op in ops for size in sizes]
    print(markdown(rows))
    if args.json:
        meta = dict(native=bool(getattr(sgt, "native", False)), threads=args.threads, rounds=args.rounds, **versions())
        write_json(args.json, dict(kind="per_call", format=1, meta=meta, rows=rows))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
