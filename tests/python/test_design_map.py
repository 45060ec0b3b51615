"""docs/design.md's folder table matches the tree.

Each row of the table "Folders and files" names paths in its first column (a folder ends with "/") and, in
backticks in its second, the files of a folder row (relative to it; `{a,b}` alternatives, `<op>` for each
operator's name, `*` patterns, and subfolders ending with "/"). The checks: every path named exists (a named file
that is not in the row's folder may be a path from the repository's root, as in `docs/operators.md`), every
pattern matches a file, and every file git tracks is named by the row of its nearest listed folder (or is a file
row itself), so a new file or folder needs its row.
"""
import fnmatch
import itertools
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"
OPERATORS = ("avg_pool2d", "upsample_bilinear2d", "grid_sampler_2d", "roi_align", "ms_deform_attn")
EXTENSIONS = {"h", "cpp", "py", "pyi", "sh", "md", "txt", "in", "map", "ipynb", "json", "png", "toml", "typed"}


def table_rows():
    """(paths of the first column, backticked tokens of the second) per row of the folder table."""
    text = DESIGN.read_text(encoding="utf-8")
    section = text.split("## Folders and files", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = line.split(" | ")
        if not line.startswith("| `") or len(cells) < 2:
            continue
        rows.append((re.findall(r"`([^`]+)`", cells[0]), re.findall(r"`([^`]+)`", " | ".join(cells[1:]))))
    return rows


def expand(token: str):
    """`convert.{h,cpp}` -> convert.h, convert.cpp; `<op>.cpp` -> one per operator."""
    match = re.search(r"\{([^{}]+)\}", token)
    if match:
        return [t for alt in match.group(1).split(",")
                for t in expand(token[:match.start()] + alt + token[match.end():])]
    if "<op>" in token:
        return [t for op in OPERATORS for t in expand(token.replace("<op>", op))]
    return [token]


def is_path(token: str) -> bool:
    """A file name or pattern (a known extension), or a subfolder (a trailing slash); after expand()."""
    if token.endswith("/"):
        return re.fullmatch(r"[\w.*/-]+", token) is not None
    name = token.rsplit("/", 1)[-1]
    return re.fullmatch(r"[\w.*-]+", name) is not None and "." in name and name.rsplit(".", 1)[-1] in EXTENSIONS


def tracked_files():
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip(f"not a git checkout ({out.stderr.strip()})")
    return out.stdout.split()


ROWS = table_rows()


def folder_rows():
    """{folder: [expanded path tokens, relative to it]} for the rows whose first column is a folder."""
    folders = {}
    for paths, tokens in ROWS:
        for path in paths:
            if path.endswith("/"):
                folders.setdefault(path, []).extend(t for token in tokens for t in expand(token) if is_path(t))
    return folders


def test_the_table_is_found():
    assert len(ROWS) >= 20, ROWS


def test_every_named_path_exists():
    missing = []
    for paths, _ in ROWS:
        missing += [p for p in paths if not (ROOT / p).exists()]
    for folder, tokens in folder_rows().items():
        for token in tokens:
            if any(c in token for c in "*?"):
                if not list((ROOT / folder).glob(token)):
                    missing.append(f"{folder}{token} (matches nothing)")
            elif not (ROOT / folder / token).exists() and not (ROOT / token).exists():
                missing.append(f"{folder}{token}")
    assert not missing, f"docs/design.md names paths that do not exist: {missing}"


def covers(folder: str, tokens, relative: str) -> bool:
    for token in tokens:
        if token.endswith("/") and relative.startswith(token):
            return True
        if fnmatch.fnmatchcase(relative, token) and relative.count("/") == token.count("/"):
            return True
    return False


def test_every_tracked_file_is_in_its_folders_row():
    folders = folder_rows()
    file_rows = {p for paths, _ in ROWS for p in paths if not p.endswith("/")}
    unlisted = []
    for path in tracked_files():
        if path in file_rows:
            continue
        ancestors = [f for f in folders if path.startswith(f)]
        if not ancestors:
            unlisted.append(f"{path} (no row for its folder)")
            continue
        folder = max(ancestors, key=len)
        if not covers(folder, folders[folder], path[len(folder):]):
            unlisted.append(f"{path} (not named in the row of {folder})")
    assert not unlisted, f"docs/design.md's folder table does not name: {unlisted}"


def test_the_expansions():
    assert expand("convert.{h,cpp}") == ["convert.h", "convert.cpp"]
    assert expand("test_<op>.cpp")[0] == "test_avg_pool2d.cpp" and len(expand("test_<op>.cpp")) == 5
    assert list(itertools.chain(expand("grid_sampler_2d_{checks,coords}.h"))) == [
        "grid_sampler_2d_checks.h", "grid_sampler_2d_coords.h"]
    assert is_path("py.typed") and is_path("corpus/") and not is_path("spatialgrad._core")
    assert not is_path("torch.ops.spatialgrad.*") and not is_path("SG_CHECK")
