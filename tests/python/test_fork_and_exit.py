"""Processes and threads around the operators: fork after use, a fork Pool, and interpreter exit while a
daemon thread is inside a kernel. Each probe runs in a fresh interpreter with a timeout, so a hang or an
abort fails the test instead of the suite."""
import textwrap

import pytest

from helpers import run_probe


def test_a_forked_child_runs_the_operators_after_the_parent_did():
    # The repro: with OpenMP's pool the child waited for the parent's threads for ever.
    result = run_probe("""
        import os, numpy as np, spatialgrad as sg
        sg.set_num_threads(2)
        x = np.random.default_rng(0).random((4, 16, 128, 128), dtype=np.float32)
        expected = sg.avg_pool2d(x, 3, 2, 1)
        pid = os.fork()
        if pid == 0:
            same = np.array_equal(sg.avg_pool2d(x, 3, 2, 1), expected)
            up = sg.upsample_bilinear2d(x, scale_factor=2)
            os._exit(0 if same and sg.get_num_threads() == 2 and up.shape == (4, 16, 256, 256) else 3)
        _, status = os.waitpid(pid, 0)
        print("child exit", os.waitstatus_to_exitcode(status))
        print("parent still works", np.array_equal(sg.avg_pool2d(x, 3, 2, 1), expected))
    """)
    assert result.returncode == 0, result.stderr
    assert "child exit 0" in result.stdout
    assert "parent still works True" in result.stdout


def test_a_fork_pool_runs_every_operator_after_the_parent_did():
    result = run_probe("""
        import multiprocessing as mp, numpy as np, spatialgrad as sg
        rng = np.random.default_rng(1)
        x = rng.random((2, 8, 32, 32), dtype=np.float32)
        grid = rng.uniform(-1, 1, (2, 16, 16, 2)).astype(np.float32)
        boxes = np.array([[0, 1.0, 2.0, 20.0, 25.0], [1, 4.0, 4.0, 30.0, 12.0]], np.float32)
        value = rng.random((1, 16 * 16 + 8 * 8, 2, 4), dtype=np.float32)
        shapes, starts = np.array([[16, 16], [8, 8]]), np.array([0, 256])
        loc = rng.random((1, 10, 2, 2, 3, 2), dtype=np.float32)
        attn = rng.random((1, 10, 2, 2, 3), dtype=np.float32)

        def run_all(_=None):
            return [sg.avg_pool2d(x, 2), sg.upsample_bilinear2d(x, scale_factor=2), sg.grid_sample(x, grid),
                    sg.roi_align(x, boxes, 7), sg.ms_deform_attn(value, shapes, starts, loc, attn)]

        expected = run_all()
        with mp.get_context("fork").Pool(2) as pool:
            results = pool.map(run_all, range(4))
        print("equal", all(np.array_equal(a, b) for r in results for a, b in zip(r, expected)))
    """)
    assert result.returncode == 0, result.stderr
    assert "equal True" in result.stdout


@pytest.mark.parametrize("attempt", range(3))
def test_interpreter_exit_while_daemon_threads_call_the_operators(attempt):
    # Short calls in a loop, so that threads come back from kernels while Python finalizes: Python (3.13 and
    # before) ends them with pthread_exit where they take the GIL back. Unwound through pybind11's GIL guard (a
    # destructor), that called std::terminate ("terminate called without an active exception", exit code 134);
    # unwound through the binding, the output array's destructor freed it without the GIL, which on Python 3.13
    # with NumPy 2 takes the GIL again (tracemalloc) and so called pthread_exit inside a destructor: the same
    # abort. Such threads are parked where they take the GIL back (csrc/python/numpy_view.h).
    result = run_probe("""
        import threading, time, numpy as np, spatialgrad as sg
        x = np.ones((1, 16, 64, 64), np.float32)
        started = threading.Event()
        def loop():
            while True:
                started.set()
                sg.avg_pool2d(x, 2)
        for _ in range(4):
            threading.Thread(target=loop, daemon=True).start()
        started.wait()
        time.sleep(0.05)
        print("exiting")
    """)
    assert "terminate called" not in result.stderr
    assert result.returncode == 0, result.stderr
    assert "exiting" in result.stdout


DATALOADER_PROBE = """
    import multiprocessing as mp, numpy as np, torch, spatialgrad as sg, spatialgrad.torch as sgt
    torch.set_num_threads(2)
    x = torch.rand(2, 3, 16, 16)
    grid = torch.rand(2, 8, 8, 2) * 2 - 1
    expected = sgt.grid_sample(x, grid)  # the parent uses the operators (and its pool) first

    class Augment(torch.utils.data.Dataset):
        def __len__(self):
            return 4
        def __getitem__(self, i):
            warped = sgt.grid_sample(x, grid)
            up = sgt.upsample_bilinear2d(warped, scale_factor=2)
            return torch.tensor([float(torch.equal(warped, expected)), up.shape[-1], sg.get_num_threads(),
                                 torch.get_num_threads()])

    def init(worker_id):
        if WORKER_SETS:
            sg.set_num_threads(3)

    loader = torch.utils.data.DataLoader(Augment(), batch_size=1, num_workers=2, worker_init_fn=init,
                                         multiprocessing_context=mp.get_context("fork"))
    for row in torch.cat(list(loader)).tolist():
        print("worker", row)
"""


@pytest.mark.parametrize("worker_sets", [False, True])
def test_dataloader_workers_follow_torch_threads_after_the_parent_used_the_ops(worker_sets):
    pytest.importorskip("torch")
    result = run_probe(f"WORKER_SETS = {worker_sets}\n" + textwrap.dedent(DATALOADER_PROBE))
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if line.startswith("worker")]
    assert len(rows) == 4, result.stdout
    # same result as the parent, upsampled, spatialgrad's threads = torch's in the worker (1), unless the
    # worker set its own count
    expected = "[1.0, 16.0, 3.0, 1.0]" if worker_sets else "[1.0, 16.0, 1.0, 1.0]"
    assert all(row == f"worker {expected}" for row in rows), result.stdout
