"""docs/performance.md, the README's performance summary and docs/bench.png are what scripts/render_performance.py
renders from the committed results (bench/results/pytorch-<release>/*.json); and the renderer puts each PyTorch
release in its own column and merges runs as its docstring says."""
import copy
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_renderer():
    spec = importlib.util.spec_from_file_location("render_performance", ROOT / "scripts" / "render_performance.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


render = load_renderer()


@pytest.fixture(scope="module")
def committed():
    return render.load()


def test_there_are_committed_results_of_every_kind(committed):
    assert committed, "no result files under bench/results/"
    for release, kinds in committed.items():
        assert set(kinds) == set(render.KINDS), (release, sorted(kinds))


def test_the_committed_page_is_rendered_from_the_committed_results(committed):
    page = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    assert page == render.render_page(committed), "docs/performance.md is stale: run make performance"


def test_the_readme_summary_is_rendered_from_the_committed_results(committed):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert render.readme_summary(committed) in readme, "README.md's performance summary is stale: run make performance"


def test_the_chart_was_rendered_from_the_committed_results(committed):
    texts = render.png_text(ROOT / "docs" / "bench.png")
    assert texts.get(render.CHART_KEY) == render.chart_digest(committed), \
        "docs/bench.png is stale: run make performance"


# ---- the renderer on made-up results ---------------------------------------------------------------------------

def meta(torch_version, **extra):
    return dict(torch=torch_version, torchvision="0.x", numpy="1.x", python="3.x", spatialgrad="0.1.0",
                system="Debian", cpu="cpu", cpus="2", threads=2, **extra)


def sweep_row(op, shape, direction, ours, anchor, scratch=1.0):
    return dict(op=op, shape=shape, direction=direction, table=False, anchor="torch", ours_ms=ours, anchor_ms=anchor,
                ratio=anchor / ours, scratch_mib=scratch, anchor_scratch_mib=0.0, bound_mib=64.0, io_mib=1.0,
                over_bound=False, error=None, anchor_error=None)


def compare_row(op, direction, ours, baseline):
    return dict(op=op, variant="v", direction=direction, dtype="float32", ours_ms=ours, baseline_ms=baseline,
                baseline="F.op", speedup=baseline / ours, floor_ms=0.5, x_floor=ours / 0.5)


def per_call_row(op, ours, theirs):
    return {"op": op, "size": "tiny", "shape": [1, 2, 8, 8], "theirs": "torch", "ours fwd": ours, "theirs fwd": theirs,
            "ours fwd+bwd": ours, "theirs fwd+bwd": theirs}


def write_release(folder: Path, version: str, ratio_scale: float, runs=1):
    folder.mkdir(parents=True)
    for run in range(1, runs + 1):
        slower = 1.0 + (run - 1)  # later runs are slower: the best of runs must pick the first
        documents = {
            "sweep": dict(kind="sweep", format=1, meta=meta(version, quick=False),
                          rows=[sweep_row("avg_pool2d", "(1,1,8,8)", "forward", 1.0 * slower, 2.0 * ratio_scale),
                                sweep_row("avg_pool2d", "(1,1,9,9)", "forward", 1.0 * slower, 4.0 * ratio_scale,
                                          scratch=float(run)),
                                sweep_row("avg_pool2d", "(1,1,8,8)", "backward", 1.0, 8.0)]),
            "compare": dict(kind="compare", format=1, meta=meta(version), rows=[compare_row("avg_pool2d", "forward",
                                                                                            1.0 * slower, 3.0)]),
            "per_call": dict(kind="per_call", format=1, meta=meta(version, native=True, rounds=3),
                             rows=[per_call_row("avg_pool2d", 2e-6 * slower, 4e-6)]),
        }
        for kind, document in documents.items():
            (folder / f"{kind}-{run}.json").write_text(json.dumps(document))


def test_one_column_per_release_in_version_order(tmp_path):
    write_release(tmp_path / "pytorch-2.6", "2.6.0", ratio_scale=2.0)
    write_release(tmp_path / "pytorch-1.13", "1.13.0a0", ratio_scale=1.0)
    results = render.load(tmp_path)
    assert list(results) == ["1.13", "2.6"]
    summary = render.summary_table(results)
    assert summary[0] == "| operator | direction | vs PyTorch 1.13: median / worst (rows) | vs PyTorch 2.6: median / " \
                         "worst (rows) |"
    forward = next(line for line in summary if line.startswith("| avg_pool2d | forward"))
    assert forward == "| avg_pool2d | forward | 3.00x / 2.00x (2) | 6.00x / 4.00x (2) |"
    page = render.render_page(results)
    assert "| PyTorch 1.13: ratio | PyTorch 2.6: ratio |" in page
    assert "| avg_pool2d | v | forward | F.op | 3.00x (2.00) | 3.00x (2.00) |" in page


def test_several_runs_take_each_sides_best_time_and_the_largest_scratch(tmp_path):
    write_release(tmp_path / "pytorch-1.13", "1.13.0a0", ratio_scale=1.0, runs=3)
    results = render.load(tmp_path)
    rows = render.merge_sweep(results["1.13"]["sweep"])
    row = next(r for r in rows if r["shape"] == "(1,1,9,9)")
    assert (row["ours_ms"], row["anchor_ms"], row["ratio"], row["scratch_mib"]) == (1.0, 4.0, 4.0, 3.0)
    assert len(rows) == 3
    assert "make bench: 3 runs; per call: 3 runs; make sweep: 3 runs" in render.render_page(results)


def test_a_release_without_some_results_shows_dashes(tmp_path):
    write_release(tmp_path / "pytorch-1.13", "1.13.0a0", ratio_scale=1.0)
    folder = tmp_path / "pytorch-2.6"
    folder.mkdir()
    document = dict(kind="sweep", format=1, meta=meta("2.6.0", quick=True),
                    rows=[sweep_row("roi_align", "(1,1,8,8)", "forward", 1.0, 5.0)])
    (folder / "sweep-1.json").write_text(json.dumps(document))
    results = render.load(tmp_path)
    summary = render.summary_table(results)
    assert "| roi_align | forward | - | 5.00x / 5.00x (1) |" in summary
    assert "| avg_pool2d | forward | 3.00x / 2.00x (2) | - |" in summary
    assert "make bench: no results" in render.render_page(results)


def test_a_failed_row_is_reported(tmp_path):
    write_release(tmp_path / "pytorch-1.13", "1.13.0a0", ratio_scale=1.0)
    path = tmp_path / "pytorch-1.13" / "sweep-1.json"
    document = json.loads(path.read_text())
    failed = copy.deepcopy(document["rows"][0])
    failed.update(shape="(1,1,99999,99999)", ratio=None, ours_ms=None, error="MemoryError: out of memory")
    document["rows"].append(failed)
    path.write_text(json.dumps(document))
    page = render.render_page(render.load(tmp_path))
    assert "1 failed" in page and "MemoryError: out of memory" in page


def test_an_unknown_file_is_an_error_that_names_it(tmp_path):
    (tmp_path / "pytorch-1.13").mkdir()
    (tmp_path / "pytorch-1.13" / "notes.json").write_text(json.dumps({"rows": []}))
    with pytest.raises(ValueError, match="notes.json: expected a result file"):
        render.load(tmp_path)


def test_the_readme_summary_replaces_only_its_block():
    block = render.SUMMARY_BEGIN + "\nnew\n" + render.SUMMARY_END
    readme = "before\n" + render.SUMMARY_BEGIN + "\nold\n" + render.SUMMARY_END + "\nafter\n"
    assert render.replace_summary(readme, block) == "before\n" + block + "\nafter\n"
    with pytest.raises(ValueError, match="expected the markers"):
        render.replace_summary("no markers", block)
