"""Executes notebooks headlessly with the interpreter running this script, and fails if any cell fails.

    python scripts/run_notebook.py [--save-images DIR] examples/explore.ipynb [...]

The kernel is this interpreter (the project's venv), not the system-wide ``python3`` kernel, which would not see
the installed package. Outputs are not written back: the committed notebooks stay free of outputs.
``--save-images DIR`` writes the PNG figures the cells display to DIR/<notebook>_<n>.png (the README shows
them from docs/).
"""
from __future__ import annotations

import base64
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def save_images(notebook, stem: str, directory: Path) -> int:
    directory.mkdir(parents=True, exist_ok=True)
    count = 0
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            png = output.get("data", {}).get("image/png")
            if png:
                count += 1
                (directory / f"{stem}_{count}.png").write_bytes(base64.b64decode(png))
    return count


def main(paths: list[str]) -> int:
    images = None
    if paths[:1] == ["--save-images"]:
        images, paths = Path(paths[1]), paths[2:]
    if not paths:
        print(__doc__, file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as jupyter_dir:
        spec_dir = Path(jupyter_dir) / "kernels" / "spatialgrad-venv"
        spec_dir.mkdir(parents=True)
        spec = {"argv": [sys.executable, "-Xfrozen_modules=off", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "spatialgrad (venv)", "language": "python"}
        (spec_dir / "kernel.json").write_text(json.dumps(spec))
        os.environ["JUPYTER_PATH"] = jupyter_dir
        for path in paths:
            notebook = nbformat.read(path, as_version=4)
            start = time.perf_counter()
            client = NotebookClient(notebook, kernel_name="spatialgrad-venv", timeout=600,
                                    resources={"metadata": {"path": str(Path(path).resolve().parent)}})
            client.execute()  # raises CellExecutionError with the cell and its traceback on failure
            print(f"{path}: {len(notebook.cells)} cells ran in {time.perf_counter() - start:.1f} s")
            if images is not None:
                print(f"  {save_images(notebook, Path(path).stem, images)} figures written to {images}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
