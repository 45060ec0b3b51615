"""Exports the small detector head of examples/torchscript_deploy (all five spatialgrad operators) with
torch.export, PyTorch 2's successor of TorchScript, and saves it as a .pt2 archive.

torch.export traces the model with TorchDynamo into one graph of ATen and spatialgrad operators (one
torch.ops.spatialgrad.* node per call: the fake kernels give it the shapes). The batch size is a dynamic
dimension: the saved program runs on any number of images. Writes to --out:
- model.pt2: the exported program (torch.export.save);
- inputs.pt: the example inputs (images, boxes) of torch.save;
and prints the model's output on them, in the format of examples/torchscript_deploy ("shape: ..." then one
value per line, %.9g). load.py, beside this file, loads the archive in a new process and prints the same.

    python examples/torch_export/export.py --out DIR
    python examples/torch_export/load.py DIR        # the same lines
"""
from __future__ import annotations

import argparse
import importlib.util
import os

import torch


def deploy_model_module():
    """examples/torchscript_deploy/export.py as a module (its DeployModel and example inputs)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "torchscript_deploy", "export.py")
    spec = importlib.util.spec_from_file_location("torchscript_deploy_export", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="directory for model.pt2 and inputs.pt")
    args = parser.parse_args()
    if not hasattr(torch, "export") or not hasattr(torch.export, "save"):
        raise SystemExit(f"torch.export needs PyTorch 2.1 or later (this is {torch.__version__})")
    deploy = deploy_model_module()
    torch.manual_seed(0)
    model = deploy.DeployModel().eval()
    images, boxes = deploy.example_inputs()
    # Boxes: OBJECTS per image. (At most 8 images: F.affine_grid's check min(size) > 0 guards the batch to at most
    # the model's width, 8 channels.)
    batch = torch.export.Dim("batch", min=1, max=8)
    with torch.no_grad():  # an inference program: no gradient is recorded while tracing
        program = torch.export.export(model, (images, boxes),
                                      dynamic_shapes=({0: batch}, {0: deploy.OBJECTS * batch}))
    os.makedirs(args.out, exist_ok=True)
    torch.export.save(program, os.path.join(args.out, "model.pt2"))
    torch.save((images, boxes), os.path.join(args.out, "inputs.pt"))
    with torch.no_grad():
        print(deploy.format_output(program.module()(images, boxes)))


if __name__ == "__main__":
    main()
