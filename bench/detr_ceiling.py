"""The Deformable-DETR encoder step of bench/e2e.py with ms_deform_attn made free: the most any operator could do.

Three versions of the step, alternating one by one: PyTorch's (mmcv's grid_sample fallback), ours, and "free",
where the operator is replaced by a view of `value` (no sampling at all; the gradient reaches value only, so the
offset and weight projections skip their backward: an upper bound). PyTorch's step divided by the free one is
the ceiling of any speed-up from the operator; the rest of the step (linear layers, layer norms) is PyTorch's.

    python bench/detr_ceiling.py [--steps 6] [--threads 2]
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    import torch

    import e2e
    import spatialgrad as sg
    import spatialgrad.torch as sgt

    torch.set_num_threads(args.threads)
    sg.set_num_threads(args.threads)
    real = sgt.ms_deform_attn
    free = lambda value, shapes, starts, locations, weights: value.flatten(2)  # noqa: E731
    sides = {}
    for side in ("torch", "ours", "free"):
        model, batch = e2e.build_models("detr", torch, ours=side != "torch")
        sides[side] = (model, batch, torch.optim.SGD(model.parameters(), lr=1e-4))
    times = {side: [] for side in sides}
    for step in range(args.steps + 1):  # the first step warms up
        for side, (model, batch, optimiser) in sides.items():
            sgt.ms_deform_attn = free if side == "free" else real  # build_models' Ops reads it at each call
            start = time.perf_counter()
            optimiser.zero_grad()
            model(*batch).backward()
            optimiser.step()
            if step:
                times[side].append(time.perf_counter() - start)
    sgt.ms_deform_attn = real
    median = {side: statistics.median(t) * 1e3 for side, t in times.items()}
    print("median step ms: " + ", ".join(f"{side} {ms:.1f}" for side, ms in median.items()))
    print(f"speed-up ours {median['torch'] / median['ours']:.2f}x; ceiling (operator free) "
          f"{median['torch'] / median['free']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
