"""Joins saved sweep runs (bench/results/sweep-*.json, written by `make sweep`) into one markdown table.

One row per (operator, shape, direction) present in any run; per run, a ratio column (PyTorch's time / ours:
above 1.0x we are faster; below, in bold), headed by its release, PyTorch version and start time. Then, per run,
the rows below 1.0x and the median ratio. The format of the files: bench/results/README.md.

    python bench/sweep_table.py bench/results/sweep-debian12-*.json bench/results/sweep-debian13-*.json [--times]

--times adds our time and the anchor's (ms) beside each ratio.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

FORMAT = "spatialgrad-sweep/1"


def load(path: str) -> dict:
    run = json.loads(Path(path).read_text())
    if run.get("format") != FORMAT:
        raise SystemExit(f"{path}: not a {FORMAT} file (bench/results/README.md)")
    return run


def heading(run: dict) -> str:
    meta = run["meta"]
    return f"{meta['release']} PyTorch {meta['torch']} ({meta['started'][:16].replace('T', ' ')})"


def ratio_cell(row) -> str:
    if row is None:
        return ""
    if row["ratio"] is None:
        return "error" if row["error"] or row["anchor_error"] else "-"
    text = f"{row['ratio']:.2f}x"
    return f"**{text}**" if row["ratio"] < 1.0 else text


def milliseconds(value) -> str:
    return "-" if value is None else f"{value:.3f}" if value < 1 else f"{value:.2f}"


def table(runs: list, times: bool) -> list:
    keys, seen = [], set()
    for run in runs:
        for row in run["rows"]:
            key = (row["op"], row["shape"], row["direction"])
            if key not in seen:
                seen.add(key)
                keys.append(key)
    indexed = [{(r["op"], r["shape"], r["direction"]): r for r in run["rows"]} for run in runs]
    header = ["operator", "shape", "direction"]
    for run in runs:
        header += ([f"ours ms ({run['meta']['release']})", f"anchor ms ({run['meta']['release']})"] if times else [])
        header.append(heading(run))
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for key in keys:
        cells = list(key)
        for rows in indexed:
            row = rows.get(key)
            if times:
                cells += [milliseconds(row["ours_ms"]) if row else "", milliseconds(row["anchor_ms"]) if row else ""]
            cells.append(ratio_cell(row))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def summary(runs: list) -> list:
    lines = ["", "| run | SIMD level | PyTorch's capability | threads | rows | below 1.0x | median ratio | load |",
             "|---|---|---|---|---|---|---|---|"]
    for run in runs:
        meta, ratios = run["meta"], [r["ratio"] for r in run["rows"] if r["ratio"] is not None]
        median = f"{statistics.median(ratios):.2f}x" if ratios else "-"
        load = f"{meta['load_average_start'][0]:.1f} -> {meta['load_average_end'][0]:.1f}"
        lines.append(f"| {heading(run)} | {meta['simd_level']} | {meta['torch_cpu_capability'] or '-'} | "
                     f"{meta['threads']} | {len(run['rows'])} | {sum(r < 1.0 for r in ratios)} | {median} | {load} |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="saved sweep runs (JSON)")
    parser.add_argument("--times", action="store_true", help="our time and the anchor's beside each ratio")
    args = parser.parse_args()
    runs = [load(path) for path in args.runs]
    print("\n".join(table(runs, args.times) + summary(runs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
