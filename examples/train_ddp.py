"""Train the tiny detector (examples/train_tiny_detector.py) with DistributedDataParallel on the gloo backend.

Each process reads its shard of the data through a DataLoader with worker processes (which blur the images
with spatialgrad.torch.avg_pool2d: the operators run in forked workers too), and DDP averages the gradients.
Before training, the script checks that the averaged gradients of one step equal those of a single process
on the same global batch (float64).

    python examples/train_ddp.py [--world-size 2] [--steps 20]          # spawns the processes itself
    torchrun --nproc_per_node 2 examples/train_ddp.py --steps 20         # or let torchrun start them

On several machines, start the same script on each with torchrun's rendezvous, e.g.
``torchrun --nnodes 2 --nproc_per_node 4 --node_rank <0|1> --rdzv_backend c10d --rdzv_endpoint <host>:29400
examples/train_ddp.py``.
"""
from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_tiny_detector import OBJECTS, SpatialgradOps, TinyDetector, make_batch  # noqa: E402

import spatialgrad.torch as sgt  # noqa: E402


class Squares(Dataset):
    """Sample i: one image of make_batch's kind, from a generator seeded by i (the same on every process)."""

    def __init__(self, size: int, dtype: torch.dtype):
        self.size, self.dtype = size, dtype

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int):
        images, boxes, colours = make_batch(torch.Generator().manual_seed(1000 + index), batch=1, dtype=self.dtype)
        images = sgt.avg_pool2d(images, 3, 1, 1, count_include_pad=False)  # a blur, in the worker process
        return images[0], boxes[:, 1:], colours[0]


def collate(samples):
    """Images stacked; boxes (K, 5) with the index of each image in the batch."""
    images = torch.stack([s[0] for s in samples])
    boxes = torch.cat([torch.cat([torch.full((OBJECTS, 1), float(b), dtype=s[1].dtype), s[1]], 1)
                       for b, s in enumerate(samples)])
    return images, boxes, torch.stack([s[2] for s in samples])


def loader(dataset, batch_size: int, rank: int, world: int) -> DataLoader:
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=False)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=2, collate_fn=collate)


def new_model(dtype: torch.dtype) -> TinyDetector:
    torch.manual_seed(0)  # the same initial weights on every process (DDP also broadcasts rank 0's)
    return TinyDetector(SpatialgradOps()).to(dtype)


def gradients_of_one_step(model, images, boxes, colours):
    model.zero_grad()
    F.mse_loss(model(images, boxes), colours).backward()
    return [p.grad.detach().clone() for p in model.parameters()]


def worker(rank: int, world: int, steps: int, batch: int, check_file: str) -> None:
    torch.set_num_threads(1)
    if not dist.is_initialized():
        dist.init_process_group("gloo", rank=rank, world_size=world)
    # The check: one float64 step of DDP; rank 0 saves the averaged gradients.
    data64 = loader(Squares(batch * world, torch.float64), batch, rank, world)
    ddp = DistributedDataParallel(new_model(torch.float64))
    grads = gradients_of_one_step(ddp, *next(iter(data64)))
    if rank == 0 and check_file:
        torch.save(grads, check_file)
    # Training, float32.
    model = DistributedDataParallel(new_model(torch.float32))
    optimiser = torch.optim.Adam(model.parameters(), lr=3e-3)
    data = loader(Squares(batch * world * steps, torch.float32), batch, rank, world)
    for step, (images, boxes, colours) in enumerate(data):
        optimiser.zero_grad()
        loss = F.mse_loss(model(images, boxes), colours)
        loss.backward()
        optimiser.step()
        if rank == 0 and (step % 5 == 0 or step == steps - 1):
            print(f"step {step:3d}  loss (rank 0's shard) {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


def single_process_gradients(batch: int, world: int):
    """The same first step on the global batch (all shards) in one process."""
    dataset = Squares(batch * world, torch.float64)
    # DistributedSampler without shuffling gives rank r the samples r, r + world, ...: the union is all of them.
    images, boxes, colours = collate([dataset[i] for i in range(len(dataset))])
    return gradients_of_one_step(new_model(torch.float64), images, boxes, colours)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=4, help="images per process and step")
    args = parser.parse_args()
    if "RANK" in os.environ:  # started by torchrun: it owns the processes and the rendezvous
        worker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args.steps, args.batch, "")
        return 0
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    with tempfile.TemporaryDirectory() as tmp:
        check_file = os.path.join(tmp, "ddp_grads.pt")
        mp.spawn(worker, args=(args.world_size, args.steps, args.batch, check_file), nprocs=args.world_size)
        ddp_grads = torch.load(check_file)
    reference = single_process_gradients(args.batch, args.world_size)
    worst = max(float((a - b).abs().max() / (b.abs().max() + 1e-12)) for a, b in zip(ddp_grads, reference))
    print(f"DDP ({args.world_size} processes, averaged) vs one process on the global batch: "
          f"largest relative gradient difference {worst:.2e}")
    ok = worst < 1e-9
    print("OK" if ok else "FAILED: the distributed gradients differ")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
