"""Deploy what you trained: export models built on spatialgrad to ONNX and run them in ONNX Runtime.

1. The tiny detector of examples/train_tiny_detector.py (all five operators) trains two steps, is exported with
   torch.onnx.export, checked with onnx.checker and run in ONNX Runtime on a new batch; the largest difference
   from PyTorch eager is printed.
2. A Deformable-DETR encoder layer (spatialgrad.torch.nn.MultiScaleDeformableAttention, its levels' sizes inputs
   of the graph) is exported with a dynamic batch and image size, run on two image sizes, and its forward timed
   in ONNX Runtime beside PyTorch eager (the cost of ms_deform_attn's decomposition into standard operators).

ONNX Runtime is optional: Debian 13 has python3-onnxruntime, Debian 12 has none (there the graphs are checked
but not run, and the example says so). Opset 20 on PyTorch 2.x, 16 on PyTorch 1.13, whose exporter stops at 17
and has no F.affine_grid (ONNX's AffineGrid is opset 20): there the detector's grid is exported as the matrix
product F.affine_grid computes (affine_grid_in_standard_ops, swapped in for the export only).

    python examples/export_onnx.py [--out DIR] [--threads N]
"""
from __future__ import annotations

import argparse
import contextlib
import inspect
import os
import tempfile
import time
import warnings
from unittest import mock

import torch
import torch.nn as nn
import torch.nn.functional as F

import spatialgrad.torch as sgt
from train_tiny_detector import THREADS, SpatialgradOps, TinyDetector, make_batch

try:
    import onnx
except ImportError:  # pragma: no cover - scripts/bootstrap.sh installs python3-onnx
    onnx = None
try:
    import onnxruntime
except ImportError:  # Debian 12
    onnxruntime = None

# float32: ONNX Runtime's outputs agree with PyTorch eager's to this fraction of the output's largest magnitude.
RELATIVE_BOUND = 1e-4
# PyTorch 2.x exports up to opset 20 (GridSample-20, AffineGrid), 1.13 up to 17.
OPSET = 20 if int(torch.__version__.split(".")[0]) >= 2 else 16


def export(model: nn.Module, args: tuple, path: str, opset: int = OPSET, **kwargs) -> None:
    """torch.onnx.export with the TorchScript-based exporter (dynamo=False where PyTorch has the choice), the
    model in eval mode, PyTorch's tracer warnings silenced (the shapes they mention are the traced ones)."""
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        kwargs["dynamo"] = False
    with warnings.catch_warnings(), _affine_grid_exportable(opset):
        warnings.simplefilter("ignore")
        torch.onnx.export(model.eval(), args, path, opset_version=opset, **kwargs)


def affine_grid_in_standard_ops(theta: torch.Tensor, size, align_corners=None) -> torch.Tensor:
    """F.affine_grid of a 2-D size (N, C, H, W): the pixel centres' normalised (x, y, 1) times theta^T."""
    _, _, height, width = (int(s) for s in size)

    def axis(steps: int) -> torch.Tensor:  # a constant of the graph (PyTorch 1.13 exports linspace as float64)
        if steps == 1:
            return torch.zeros(1, dtype=theta.dtype)
        ends = 1.0 if align_corners else (steps - 1) / steps
        return torch.tensor([-ends + 2 * ends * i / (steps - 1) for i in range(steps)], dtype=theta.dtype)

    ys, xs = torch.meshgrid(axis(height), axis(width), indexing="ij")
    base = torch.stack([xs, ys, torch.ones_like(xs)], dim=-1).view(1, height * width, 3)
    return (base @ theta.transpose(1, 2)).view(-1, height, width, 2)


def _affine_grid_exportable(opset: int):
    """Below opset 20 (no AffineGrid), F.affine_grid as the matrix product while exporting."""
    if opset >= 20:
        return contextlib.nullcontext()
    return mock.patch.object(F, "affine_grid", affine_grid_in_standard_ops)


def largest_difference(path: str, inputs: dict, expected: torch.Tensor) -> float:
    """max |ONNX Runtime - eager| over the output, as a fraction of the output's largest magnitude."""
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {name: value.numpy() for name, value in inputs.items()})
    scale = max(float(expected.abs().max()), 1e-12)
    return float((torch.from_numpy(got) - expected).abs().max()) / scale


class DeformableEncoderLayer(nn.Module):
    """Deformable DETR's encoder layer: multi-scale deformable self-attention over the flattened levels, then a
    feed-forward block, each with a residual and LayerNorm (post-norm, as in the paper)."""

    def __init__(self, dims: int = 64, heads: int = 4, levels: int = 3, points: int = 4, hidden: int = 128):
        super().__init__()
        self.attention = sgt.nn.MultiScaleDeformableAttention(dims, heads, levels, points, dropout=0.0,
                                                              batch_first=True)
        self.norm1, self.norm2 = nn.LayerNorm(dims), nn.LayerNorm(dims)
        self.ffn = nn.Sequential(nn.Linear(dims, hidden), nn.ReLU(), nn.Linear(hidden, dims))

    def forward(self, src, pos, reference_points, spatial_shapes, level_start_index):
        src = self.norm1(self.attention(src, value=src, query_pos=pos, reference_points=reference_points,
                                        spatial_shapes=spatial_shapes, level_start_index=level_start_index))
        return self.norm2(src + self.ffn(src))


ENCODER_INPUTS = ["src", "pos", "reference_points", "spatial_shapes", "level_start_index"]


def encoder_inputs(batch: int, image: int, levels: int = 3, dims: int = 64, seed: int = 0) -> dict:
    """The inputs of the encoder layer for `batch` images of `image` x `image` pixels at strides 8, 16, 32..."""
    generator = torch.Generator().manual_seed(seed)
    shapes = torch.tensor([[-(-image // 2 ** (3 + level))] * 2 for level in range(levels)], dtype=torch.int64)
    areas = shapes.prod(1)
    starts = torch.cat([areas.new_zeros(1), areas.cumsum(0)[:-1]])
    tokens = int(areas.sum())
    return dict(src=torch.randn(batch, tokens, dims, generator=generator),
                pos=torch.randn(batch, tokens, dims, generator=generator),
                reference_points=torch.rand(batch, tokens, levels, 2, generator=generator),
                spatial_shapes=shapes, level_start_index=starts)


ENCODER_DYNAMIC_AXES = {"src": {0: "batch", 1: "tokens"}, "pos": {0: "batch", 1: "tokens"},
                        "reference_points": {0: "batch", 1: "tokens"}, "out": {0: "batch", 1: "tokens"}}


def median_times(runs, repeats: int = 30) -> list:
    """The median time of each function, their calls alternating one by one (so that a shared machine's load,
    which comes and goes, weighs on all of them alike), after a warm-up call of each."""
    times = [[] for _ in runs]
    for repeat in range(repeats + 1):
        for run, samples in zip(runs, times):
            start = time.perf_counter()
            run()
            if repeat:
                samples.append(time.perf_counter() - start)
    return [sorted(samples)[len(samples) // 2] for samples in times]


def detector(directory: str) -> bool:
    torch.manual_seed(0)
    model = TinyDetector(SpatialgradOps())
    optimiser = torch.optim.Adam(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(1)
    for step in range(2):
        images, boxes, colours = make_batch(generator)
        optimiser.zero_grad()
        loss = F.mse_loss(model(images, boxes), colours)
        loss.backward()
        optimiser.step()
        print(f"step {step}  loss {loss.item():.4f}")
    path = os.path.join(directory, "tiny_detector.onnx")
    images, boxes, _ = make_batch(generator)
    export(model, (images, boxes), path, input_names=["images", "boxes"], output_names=["colours"])
    check("tiny detector", path)
    return onnxruntime is None or compare("a new batch", path, dict(images=images, boxes=boxes), model(images, boxes))


def check(name: str, path: str) -> None:
    onnx.checker.check_model(onnx.load(path), full_check=True)
    print(f"{name}: exported to {path} (opset {OPSET}), passed onnx.checker" + (
        "" if onnxruntime else "; not run: onnxruntime is not installed (Debian 12 has no python3-onnxruntime)"))


def compare(name: str, path: str, inputs: dict, expected: torch.Tensor) -> bool:
    difference = largest_difference(path, inputs, expected.detach())
    print(f"  {name}: ONNX Runtime {onnxruntime.__version__} against PyTorch eager: largest difference "
          f"{difference:.2e} of the output's scale (bound {RELATIVE_BOUND:.0e})")
    return difference <= RELATIVE_BOUND


def encoder(directory: str) -> bool:
    torch.manual_seed(0)
    model = DeformableEncoderLayer().eval()
    path = os.path.join(directory, "deformable_encoder_layer.onnx")
    export(model, tuple(encoder_inputs(1, 128).values()), path, input_names=ENCODER_INPUTS, output_names=["out"],
           dynamic_axes=ENCODER_DYNAMIC_AXES)
    check("Deformable-DETR encoder layer (traced: 1 image of 128x128 pixels)", path)
    if onnxruntime is None:
        return True
    ok = True
    for batch, image in ((2, 128), (1, 256)):  # another batch, another image size (another number of tokens)
        inputs = encoder_inputs(batch, image, seed=image)
        with torch.no_grad():
            expected = model(*inputs.values())
        images = f"{batch} image{'s' if batch > 1 else ''} of {image}x{image} ({inputs['src'].shape[1]} tokens)"
        ok &= compare(images, path, inputs, expected)
    time_encoder(model, path, encoder_inputs(2, 256))
    return ok


def time_encoder(model: nn.Module, path: str, inputs: dict) -> None:
    threads = torch.get_num_threads()
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    feed = {name: value.numpy() for name, value in inputs.items()}
    with torch.no_grad():
        eager, runtime = median_times([lambda: model(*inputs.values()), lambda: session.run(None, feed)])
    plural = "s" if threads > 1 else ""
    print(f"encoder layer forward, batch 2, {inputs['src'].shape[1]} tokens, {threads} thread{plural} each (median of "
          f"30, calls alternating): PyTorch eager with spatialgrad {eager * 1e3:.2f} ms, ONNX Runtime "
          f"{runtime * 1e3:.2f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="directory for the .onnx files (default: a temporary one)")
    parser.add_argument("--threads", type=int, default=THREADS,
                        help=f"threads of PyTorch and of ONNX Runtime (default {THREADS})")
    args = parser.parse_args()
    if onnx is None:
        print("onnx is not installed (Debian: python3-onnx; scripts/bootstrap.sh installs it)")
        return 1
    torch.set_num_threads(args.threads)
    with contextlib.ExitStack() as stack:
        directory = args.out or stack.enter_context(tempfile.TemporaryDirectory())
        os.makedirs(directory, exist_ok=True)
        ok = detector(directory) & encoder(directory)
    print("OK" if ok else f"FAILED: a difference exceeds {RELATIVE_BOUND:.0e} of the output's scale")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
