"""Training steps of real model shapes, PyTorch's operators against ours, in the default environment and with
OMP_WAIT_POLICY=PASSIVE.

Three models, each built twice with the same weights, one on PyTorch's operators and one on spatialgrad.torch's,
trained with SGD; their steps (forward, loss, backward, optimiser step) are timed one by one, alternating:
- a Deformable-DETR encoder: 2 layers, d 256, 8 heads, 4 levels 64^2..8^2, 4 points, batch 2 (ms_deform_attn;
  PyTorch's side is mmcv's grid_sample fallback);
- a spatial transformer: a localisation net predicts an affine grid that warps the batch (32, 3, 96, 96)
  before a small classifier (grid_sample);
- an FPN-style decoder over four levels of 256 channels, 128^2..16^2, batch 2: lateral 1x1 convolutions,
  bilinear top-down upsampling, 3x3 output convolutions and avg_pool2d downsampling (a bottom-up path and P6).
OMP_WAIT_POLICY is read when PyTorch's OpenMP runtime starts, so each environment runs in a child process; the
children alternate (default, passive, default, ...). The target (issue 32): each model's step with our
operators in the default environment within 5% of its time with OMP_WAIT_POLICY=PASSIVE.

    python bench/e2e.py [--rounds 2] [--steps 8] [--threads 2] [--models detr,stn,fpn]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Dict, List

MODELS = ["detr", "stn", "fpn"]


def build_models(name: str, torch, ours: bool):
    """The model `name` on our operators (ours) or PyTorch's, and its batch; the same weights either way."""
    import spatialgrad.torch as sgt
    import torch.nn.functional as F
    from torch import nn

    class Ops:
        grid_sample = staticmethod(sgt.grid_sample if ours else F.grid_sample)
        avg_pool2d = staticmethod(sgt.avg_pool2d if ours else F.avg_pool2d)

        @staticmethod
        def upsample(x, size):
            if ours:
                return sgt.upsample_bilinear2d(x, size=size)
            return F.interpolate(x, size=size, mode="bilinear", align_corners=False)

        @staticmethod
        def ms_deform_attn(value, shapes, starts, loc, attn):
            if ours:
                return sgt.ms_deform_attn(value, shapes, starts, loc, attn)
            return sgt.ms_deform_attn_reference(value, shapes, loc, attn)

    class EncoderLayer(nn.Module):
        def __init__(self, d=256, heads=8, levels=4, points=4):
            super().__init__()
            self.heads, self.levels, self.points = heads, levels, points
            self.offsets = nn.Linear(d, heads * levels * points * 2)
            self.weights = nn.Linear(d, heads * levels * points)
            self.value = nn.Linear(d, d)
            self.out = nn.Linear(d, d)
            self.ffn = nn.Sequential(nn.Linear(d, 1024), nn.ReLU(), nn.Linear(1024, d))
            self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)

        def forward(self, src, reference, shapes, starts):
            bs, tokens, d = src.shape
            shape = (bs, tokens, self.heads, self.levels, self.points)
            value = self.value(src).view(bs, tokens, self.heads, d // self.heads)
            wh = torch.stack([shapes[:, 1], shapes[:, 0]], -1).to(src.dtype)
            loc = reference[:, :, None, :, None, :] + self.offsets(src).view(*shape, 2) / wh[None, None, None, :, None]
            attn = self.weights(src).view(bs, tokens, self.heads, -1).softmax(-1).view(shape)
            src = self.norm1(src + self.out(Ops.ms_deform_attn(value, shapes, starts, loc, attn)))
            return self.norm2(src + self.ffn(src))

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([EncoderLayer(), EncoderLayer()])

        def forward(self, src, reference, shapes, starts):
            for layer in self.layers:
                src = layer(src, reference, shapes, starts)
            return src.square().mean()

    class SpatialTransformer(nn.Module):
        def __init__(self):
            super().__init__()
            self.localise = nn.Sequential(nn.Conv2d(3, 8, 7, 2, 3), nn.ReLU(), nn.MaxPool2d(2),
                                          nn.Conv2d(8, 16, 5, 2, 2),
                                          nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(256, 6))
            nn.init.zeros_(self.localise[-1].weight)
            with torch.no_grad():
                self.localise[-1].bias.copy_(torch.tensor([0.9, 0.1, 0.0, -0.1, 0.9, 0.0]))
            self.classify = nn.Sequential(nn.Conv2d(3, 32, 3, 2, 1), nn.ReLU(), nn.Conv2d(32, 64, 3, 2, 1), nn.ReLU(),
                                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))

        def forward(self, images, labels):
            theta = self.localise(images).view(-1, 2, 3)
            grid = F.affine_grid(theta, list(images.shape), align_corners=False)
            warped = Ops.grid_sample(images, grid, align_corners=False)
            return F.cross_entropy(self.classify(warped), labels)

    class FPNDecoder(nn.Module):
        def __init__(self, channels=256, levels=4):
            super().__init__()
            self.lateral = nn.ModuleList([nn.Conv2d(channels, 128, 1) for _ in range(levels)])
            self.output = nn.ModuleList([nn.Conv2d(128, 128, 3, 1, 1) for _ in range(levels)])

        def forward(self, features):
            laterals = [conv(f) for conv, f in zip(self.lateral, features)]
            for i in range(len(laterals) - 1, 0, -1):  # top-down: upsample the coarser level onto the finer
                laterals[i - 1] = laterals[i - 1] + Ops.upsample(laterals[i], laterals[i - 1].shape[-2:])
            outs = [conv(x) for conv, x in zip(self.output, laterals)]
            for i in range(1, len(outs)):  # bottom-up: pool the finer level onto the coarser
                outs[i] = outs[i] + Ops.avg_pool2d(outs[i - 1], 3, 2, 1)
            p6 = Ops.avg_pool2d(outs[-1], 2, 2)
            return sum(o.square().mean() for o in outs) + p6.square().mean()

    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(1)
    if name == "detr":
        shapes = torch.tensor([(64, 64), (32, 32), (16, 16), (8, 8)])
        areas = shapes[:, 0] * shapes[:, 1]
        starts = torch.cumsum(areas, 0) - areas
        centres = [torch.stack(torch.meshgrid((torch.arange(h) + 0.5) / h, (torch.arange(w) + 0.5) / w,
                                              indexing="ij")[::-1], -1).view(-1, 2) for h, w in shapes.tolist()]
        reference = torch.cat(centres)[None, :, None, :].expand(2, -1, 4, 2).contiguous()
        return Encoder(), (torch.randn(2, int(areas.sum()), 256, generator=generator), reference, shapes, starts)
    if name == "stn":
        return SpatialTransformer(), (torch.randn(32, 3, 96, 96, generator=generator),
                                      torch.randint(0, 10, (32,), generator=generator))
    features = [torch.randn(2, 256, 128 >> i, 128 >> i, generator=generator) for i in range(4)]
    return FPNDecoder(), (features,)


def child(args) -> int:
    """Times alternating training steps of each model, both sides, in this environment; prints JSON."""
    import torch

    import spatialgrad as sg

    torch.set_num_threads(args.threads)
    sg.set_num_threads(args.threads)
    results: Dict[str, Dict[str, List[float]]] = {}
    for name in args.models.split(","):
        sides = {side: build_models(name, torch, ours=side == "ours") for side in ("torch", "ours")}
        steps = {}
        for side, (model, batch) in sides.items():
            optimiser = torch.optim.SGD(model.parameters(), lr=1e-4)

            def step(model=model, batch=batch, optimiser=optimiser):
                optimiser.zero_grad()
                model(*batch).backward()
                optimiser.step()
            steps[side] = step
        times: Dict[str, List[float]] = {side: [] for side in steps}
        for i in range(args.steps + 2):  # the first two steps warm up (allocations, lazy initialisation)
            for side, step in steps.items():
                start = time.perf_counter()
                step()
                if i >= 2:
                    times[side].append(time.perf_counter() - start)
        results[name] = times
    print(json.dumps(results))
    return 0


def run_child(args, passive: bool) -> Dict[str, Dict[str, List[float]]]:
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    if passive:
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    command = [sys.executable, __file__, "--child", "--steps", str(args.steps), "--threads", str(args.threads),
               "--models", args.models]
    output = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2, help="child processes per environment, alternated")
    parser.add_argument("--steps", type=int, default=8, help="timed steps per model, side and child")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    print(f"{args.threads} threads, {os.cpu_count()} cores, load average before: {os.getloadavg()[0]:.2f}; "
          f"{args.rounds} children per environment, {args.steps} steps per model and side each")
    samples = {env: {} for env in ("default", "passive")}
    for _ in range(args.rounds):
        for env in samples:
            for name, sides in run_child(args, passive=env == "passive").items():
                for side, times in sides.items():
                    samples[env].setdefault(name, {}).setdefault(side, []).extend(times)
    print(f"load average after: {os.getloadavg()[0]:.2f}\n")
    print("median step ms; speed-up = PyTorch's step / ours; target: ours default / ours passive <= 1.05; the last "
          "column divides that by PyTorch's default / passive (what the environment does to our operators alone)")
    print("| model | PyTorch default | ours default | speed-up | PyTorch passive | ours passive | speed-up "
          "| PyTorch default / passive | ours default / passive | target | ours against PyTorch's |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name in samples["default"]:
        med = {env: {side: statistics.median(samples[env][name][side]) for side in ("torch", "ours")}
               for env in samples}
        ratio = med["default"]["ours"] / med["passive"]["ours"]
        torch_ratio = med["default"]["torch"] / med["passive"]["torch"]
        cells = []
        for env in ("default", "passive"):
            cells += [f"{med[env]['torch'] * 1e3:.1f}", f"{med[env]['ours'] * 1e3:.1f}",
                      f"{med[env]['torch'] / med[env]['ours']:.2f}x"]
        verdict = "ok" if ratio <= 1.05 else "MISSED"
        cells += [f"{torch_ratio:.3f}", f"{ratio:.3f}", verdict, f"{ratio / torch_ratio:.3f}"]
        print(f"| {name} | {' | '.join(cells)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
