"""Runs the README's Python snippets, so the API tour cannot drift from the code."""
import re
from pathlib import Path

import pytest

from helpers import torch

README = Path(__file__).resolve().parents[2] / "README.md"
SNIPPETS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def test_the_readme_has_snippets():
    assert len(SNIPPETS) >= 3


@pytest.mark.parametrize("index", range(len(SNIPPETS)))
def test_snippet_runs(index):
    code = SNIPPETS[index]
    if "import torch" in code and torch is None:
        pytest.skip("PyTorch is not installed")
    exec(compile(code, f"README.md python snippet {index}", "exec"), {"__name__": "readme"})
