"""The types users' checkers read agree with what the package does (issue 46): the binding's stub with the
binding (mypy's stubtest), and the hints with the calls the README documents (mypy over a user's script, against
the installed package, which ships py.typed). mypy is one of the packages scripts/bootstrap.sh installs."""
import re
import subprocess
import sys
import textwrap

import pytest

NUMPY_USER = """
    import numpy as np
    import spatialgrad as sg
    from spatialgrad.autograd import vjp

    x = np.random.rand(1, 2, 8, 8)
    grid = np.random.uniform(-1, 1, (1, 4, 4, 2))
    out, pullback = vjp(sg.grid_sample, x, grid)
    grad_x, grad_grid = pullback(np.ones_like(out))
    # second order: a backward as the op, and a tuple with None (zeros) as grad_out
    grads, pullback2 = vjp(sg.grid_sampler_2d_backward, np.ones((1, 2, 4, 4)), x, grid)
    second = pullback2((np.ones_like(grads[0]), None))
    same, pullback3 = vjp("avg_pool2d", x, 2)
    sg.set_num_threads(2)
    level: str = sg.simd_level()
"""

TORCH_USER = """
    import torch
    import spatialgrad.torch as sgt

    x = torch.rand(1, 2, 8, 8)
    boxes = torch.tensor([[0, 0.0, 0.0, 4.0, 4.0]])
    y: torch.Tensor = sgt.roi_align(x, boxes, (2, 2))
    z = sgt.roi_align(x, [boxes[:, 1:]], 2, spatial_scale=0.5, sampling_ratio=-1, aligned=True)
    w = sgt.avg_pool2d(x, (2, 2), stride=[2, 2], padding=0)
    u = sgt.upsample_bilinear2d(x, scale_factor=2.0, align_corners=False)
    reveal_type(sgt.roi_align)
"""


def run(*args, cwd):
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def mypy_user_errors(tmp_path, name, source):
    """mypy's messages about the user's script (the package's own internals are not the user's to fix, and
    mypy does not report them for an installed package)."""
    script = tmp_path / f"{name}.py"
    script.write_text(textwrap.dedent(source))
    out = run("mypy", "--cache-dir", str(tmp_path / "cache"), "--python-executable", sys.executable, script.name,
              cwd=tmp_path)
    assert "error: Cannot find implementation or library stub" not in out.stdout, out.stdout
    return [line for line in out.stdout.splitlines() if line.startswith(script.name)]


def test_the_stub_of_the_binding_matches_the_binding(tmp_path):
    out = run("mypy.stubtest", "spatialgrad._core", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_numpy_calls_the_readme_documents_type_check(tmp_path):
    assert mypy_user_errors(tmp_path, "numpy_user", NUMPY_USER) == []


def test_the_torch_adapters_arguments_are_typed(tmp_path):
    pytest.importorskip("torch")
    lines = mypy_user_errors(tmp_path, "torch_user", TORCH_USER)
    errors = [line for line in lines if ": error:" in line]
    assert errors == []
    revealed = next(line for line in lines if "Revealed type" in line)
    # output_size is an int or a sequence of them, not an unresolved name (BroadcastingList2) or Any; mypy
    # writes the union as Union[a, b] (Debian 12's 1.0) or a | b (Debian 13's 1.15, for Python 3.10 and later)
    output_size = re.search(r"output_size: (.*?), spatial_scale", revealed).group(1)
    assert output_size in ("Union[builtins.int, typing.Sequence[builtins.int]]",
                           "builtins.int | typing.Sequence[builtins.int]"), revealed
