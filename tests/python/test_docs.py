"""The user-facing pages stay true and about the software: README.md, CHANGELOG.md and docs/*.md.

- Every ```python block runs (a fresh namespace each). A block right after `<!-- doc-test: requires PyTorch 2
  (why) -->` runs only where PyTorch 2 is (Debian 13 in CI); one after `<!-- doc-test: not run (why) -->` is not
  run, and the marker says why. Blocks that import PyTorch, torchvision or onnx skip, saying so, where the package
  is missing (`make test` makes a missing PyTorch an error instead).
- Every relative link points at a file that exists, and an anchor at a heading of that file.
- No clock time, date, issue number or word about how the project was worked on.
- The README stays a front page (at most 250 lines); the CHANGELOG's latest version is VERSION's.
"""
import importlib.util
import re
import sys
import types
from pathlib import Path

import pytest

from helpers import torch

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md"] + sorted((ROOT / "docs").glob("*.md"))
MARKER = re.compile(r"<!-- doc-test: (requires PyTorch 2|not run) \((.+?)\) -->\s*$")


def python_blocks(page: Path):
    """(page, line number, marker or None, code) for each ```python block."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks, index = [], 0
    while index < len(lines):
        if lines[index].strip() == "```python":
            start = index + 1
            end = next(i for i in range(start, len(lines)) if lines[i].strip() == "```")
            previous = lines[index - 1] if index > 0 else ""
            marker = MARKER.match(previous.strip())
            blocks.append((page, start, marker.groups() if marker else None, "\n".join(lines[start:end]) + "\n"))
            index = end
        index += 1
    return blocks


BLOCKS = [block for page in PAGES for block in python_blocks(page)]


def block_id(block):
    page, line, _, _ = block
    return f"{page.relative_to(ROOT)}:{line}"


def test_the_pages_have_python_blocks():
    pages = {block[0].name for block in BLOCKS}
    assert {"README.md", "numpy.md", "pytorch.md", "ascend.md"} <= pages, pages


def test_every_marker_is_right_above_a_python_block():
    for page in PAGES:
        lines = page.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines):
            if line.strip().startswith("<!-- doc-test"):
                assert MARKER.match(line.strip()), f"{page.name}:{number + 1}: unknown marker {line!r}"
                assert lines[number + 1].strip() == "```python", f"{page.name}:{number + 1}: no python block below"


def missing_package(code: str):
    for name in ("torch", "torchvision", "onnx"):
        if re.search(rf"^\s*(import|from)\s+[\w, ]*\b{name}\b", code, flags=re.M):
            if importlib.util.find_spec(name) is None:
                return name
    return None


@pytest.mark.parametrize("block", BLOCKS, ids=block_id)
def test_python_block_runs(block):
    page, line, marker, code = block
    if marker is not None:
        kind, why = marker
        if kind == "not run":
            pytest.skip(f"marked not run: {why}")
        if torch is None or int(torch.__version__.split(".")[0]) < 2:
            pytest.skip(f"needs PyTorch 2 ({why}); this is {getattr(torch, '__version__', 'no PyTorch')}")
    missing = missing_package(code)
    if missing is not None:
        pytest.skip(f"{missing} is not installed")
    # A module of its own, registered while it runs: torch.compile looks the block's functions' module up.
    module = types.ModuleType("doc_block")
    sys.modules[module.__name__] = module
    try:
        exec(compile(code, f"{page.relative_to(ROOT)} python block at line {line}", "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]


# ---- links ---------------------------------------------------------------------------------------------------

LINK = re.compile(r"\]\(([^)\s]+)\)")


def without_code(text: str) -> str:
    """The page without fenced blocks and inline code (where link-like and time-like text is not prose)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def anchors(page: Path):
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces to hyphens."""
    found = set()
    for heading in re.findall(r"^#+ (.+)$", without_fences(page.read_text(encoding="utf-8")), flags=re.M):
        found.add(re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-"))
    return found


def without_fences(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_links_resolve(page):
    for target in LINK.findall(without_code(page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not checked offline
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        assert resolved.exists(), f"{page.name}: link to {target}: no such file"
        if anchor:
            assert anchor in anchors(resolved), f"{page.name}: link to {target}: no such heading"


# ---- what the pages are about --------------------------------------------------------------------------------

FORBIDDEN = {
    "a clock time": r"\b([01]?\d|2[0-3]):[0-5]\d\b|\b(UTC|GMT)\b",
    "a date": r"\b(19|20)\d\d-[01]\d-[0-3]\d\b",
    "an issue number": r"\bissues?\s+#?\d+|(?<![\w/&])#\d+\b",
    "the work process": r"\bsessions?\b|\bengineers?\b|\bquiet host\b|\bbusy host\b|\bshared host\b|"
                        r"\bload average|\bthe lead\b|\breviews?\b|\breviewers?\b",
}


def test_the_forbidden_patterns_catch_what_they_should():
    samples = {"a clock time": "quiet host, 11:00 and 11:20 UTC", "a date": "measured 2026-11-26",
               "an issue number": "issue 33's 2.7x is out of reach", "the work process": "after the fourth session"}
    for what, sample in samples.items():
        assert re.search(FORBIDDEN[what], sample, flags=re.I), what
    for harmless in ("aten::upsample_bilinear2d", "a ratio of 1.5x at 64 -> 128", "[performance](#performance)"):
        assert not any(re.search(p, harmless, flags=re.I) for p in FORBIDDEN.values()), harmless


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_clock_times_issue_numbers_or_work_process(page):
    text = without_code(page.read_text(encoding="utf-8"))
    for what, pattern in FORBIDDEN.items():
        for match in re.finditer(pattern, text, flags=re.I):
            line = text[:match.start()].count("\n") + 1
            pytest.fail(f"{page.name}, line {line} (outside code): {what}: {match.group(0)!r}")


def test_the_readme_is_a_front_page():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, len(lines)


def test_the_changelog_starts_with_the_current_version():
    version = (ROOT / "VERSION").read_text().strip()
    headings = re.findall(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(encoding="utf-8"), flags=re.M)
    assert headings and headings[0] == version, (headings[:1], version)


def test_the_strategy_table_lists_every_strategy():
    """docs/design.md's table of kernel strategies (generated from operators.toml: its freshness is
    test_generated_files') has a row for each of the 16 strategies of the five operators."""
    page = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(\w+)` \| `(\w+)` \| ", page, flags=re.M)
    assert {op for op, _ in rows} == {"avg_pool2d", "grid_sampler_2d", "ms_deform_attn", "roi_align",
                                      "upsample_bilinear2d"}
    assert len(set(rows)) == len(rows) == 16
