#!/usr/bin/env python3
"""Renders docs/design.md's table of kernel strategies from csrc/src/detail/strategy.h, the one place they are
declared (each operator's SG_<OP>_STRATEGIES list: enumerator, name, when its cost model takes it).

    scripts/render_strategies.py          rewrite the table between the markers of docs/design.md
    scripts/render_strategies.py --check  exit 1 when the page differs from what it would write (tests run this)
"""
import argparse
import re
import sys
from pathlib import Path
from typing import List, Tuple

ROOT = Path(__file__).resolve().parents[1]
HEADER = ROOT / "csrc" / "src" / "detail" / "strategy.h"
PAGE = ROOT / "docs" / "design.md"
BEGIN = "<!-- strategies: generated from csrc/src/detail/strategy.h by scripts/render_strategies.py -->"
END = "<!-- end of the strategies -->"

LIST = re.compile(r"#define SG_([A-Z0-9_]+)_STRATEGIES\(X\)(.*?)(?=\n#define |\n// clang-format on)", re.S)
ROW = re.compile(r'X\((k\w+),\s*"(\w+)",\s*((?:"(?:[^"\\]|\\.)*"\s*)+)\)')


def strategies(header: str) -> List[Tuple[str, str, str]]:
    """(operator, strategy, when) for every row of every list, in the header's order."""
    rows = []
    for macro, body in LIST.findall(header):
        body = body.replace("\\\n", " ")
        found = ROW.findall(body)
        if not found:
            raise ValueError(f"strategy.h: SG_{macro}_STRATEGIES has no X(kName, \"name\", \"when\") rows")
        for _, name, when in found:
            text = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', when))
            rows.append((macro.lower(), name, text))
    if not rows:
        raise ValueError("strategy.h: no SG_<OP>_STRATEGIES lists")
    return rows


def table(rows: List[Tuple[str, str, str]]) -> str:
    lines = [BEGIN, "", "| operator | strategy | its cost model takes it |", "|---|---|---|"]
    lines += [f"| `{op}` | `{name}` | {when} |" for op, name, when in rows]
    return "\n".join(lines + ["", END])


def rendered(page: str, header: str) -> str:
    start, end = page.find(BEGIN), page.find(END)
    if start < 0 or end < start:
        raise ValueError(f"docs/design.md: expected the markers {BEGIN!r} and {END!r}")
    return page[:start] + table(strategies(header)) + page[end + len(END):]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when docs/design.md is stale")
    args = parser.parse_args()
    page = PAGE.read_text(encoding="utf-8")
    new = rendered(page, HEADER.read_text(encoding="utf-8"))
    if args.check:
        if new != page:
            print("docs/design.md: the strategy table is stale; run scripts/render_strategies.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
