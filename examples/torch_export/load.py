"""Loads the program examples/torch_export/export.py saved and runs it on the saved inputs, in a process of its
own; prints the output in export.py's format (the same lines).

The archive holds the graph, not the operators: the process registers torch.ops.spatialgrad.* first, by importing
spatialgrad.torch (which also gives the operators' fake kernels, for re-exporting or compiling the program), or, in a
process without the spatialgrad package, torch.ops.load_library(<path of libspatialgrad_torch.so>) (--library),
which is enough to run it.

    python examples/torch_export/load.py DIR [--library PATH]
"""
from __future__ import annotations

import argparse
import os

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("directory", help="where export.py wrote model.pt2 and inputs.pt")
    parser.add_argument("--library", help="load libspatialgrad_torch.so from here instead of importing spatialgrad")
    args = parser.parse_args()
    if args.library:
        torch.ops.load_library(args.library)
    else:
        import spatialgrad.torch  # noqa: F401  (registers torch.ops.spatialgrad.*)
    program = torch.export.load(os.path.join(args.directory, "model.pt2"))
    images, boxes = torch.load(os.path.join(args.directory, "inputs.pt"))
    with torch.no_grad():
        out = program.module()(images, boxes)
    print("shape: " + " ".join(str(s) for s in out.shape))
    print("\n".join("%.9g" % v for v in out.detach().double().flatten().tolist()))


if __name__ == "__main__":
    main()
