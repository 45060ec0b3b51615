"""The benchmarks say what they compare against: make bench (bench/compare.py, bench/per_call.py) and make sweep
(bench/sweep.py) print the PyTorch and torchvision versions first and write them into their JSON, whose format
(kind, format 1, meta, rows) scripts/render_performance.py reads: results of Debian 12's PyTorch 1.13 and Debian
13's 2.6 sit side by side in docs/performance.md."""
import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")

BENCH = os.path.join(os.environ.get("SPATIALGRAD_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", "..")),
                     "bench")


def run(script, *args):
    result = subprocess.run([sys.executable, os.path.join(BENCH, script), *args], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout


def expected_line():
    return f"against PyTorch {torch.__version__} and torchvision {torchvision.__version__} "


def assert_versions(stdout, document, kind):
    assert expected_line() in stdout.splitlines()[0], stdout[:300]
    assert (document["kind"], document["format"]) == (kind, 1), document
    meta = document["meta"]
    assert meta["torch"] == torch.__version__ and meta["torchvision"] == torchvision.__version__, meta
    assert meta["threads"] == 2 and meta["cpu"] and int(meta["cpus"]) >= 1, meta
    assert document["rows"], document


# The smallest run of each: one operator, one size or shape, short timing.
def test_per_call(tmp_path):
    stdout = run("per_call.py", "--ops", "avg_pool2d", "--sizes", "tiny", "--rounds", "1",
                 "--json", str(tmp_path / "per_call.json"))
    assert_versions(stdout, json.loads((tmp_path / "per_call.json").read_text()), "per_call")


def test_compare(tmp_path):
    stdout = run("compare.py", "--ops", "avg_pool2d", "--dtypes", "float16", "--min-time", "0",
                 "--json", str(tmp_path / "results" / "compare.json"))  # its folder made as needed
    assert_versions(stdout, json.loads((tmp_path / "results" / "compare.json").read_text()), "compare")


def test_sweep(tmp_path):
    stdout = run("sweep.py", "--ops", "avg_pool2d", "--filter", "(1,1,7,7)", "--quick", "--min-time", "0.01",
                 "--json", str(tmp_path / "sweep.json"))
    assert len([line for line in stdout.splitlines() if line.startswith("avg_pool2d") and "(1,1,7,7)" in line]) == 2
    assert_versions(stdout, json.loads((tmp_path / "sweep.json").read_text()), "sweep")


def test_results_go_to_one_folder_per_pytorch_release():
    result = subprocess.run([sys.executable, os.path.join(BENCH, "common.py"), "results-dir"], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    release = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    assert result.stdout.strip() == os.path.join(os.path.abspath(BENCH), "results", f"pytorch-{release}")
