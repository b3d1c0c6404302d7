#!/usr/bin/env python
"""Count each notebook's code lines (the model's, in its `## Model` section, and the rest) and prose words.

    python scripts/notebook_lines.py            # a markdown table, one row per notebook
    python scripts/notebook_lines.py --json     # the same as JSON

A line counts when it holds code: blank lines and lines that are only a comment do not. The rest
(the non-model lines) is what a reader wades through around the model: set-up, data, training,
timing, checks, the record; the project tracks it so that boilerplate shrinks rather than grows.
Words are the markdown cells' words, headings included: how much each notebook explains.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from scripts import suite  # noqa: E402

MODEL_SECTION = "## Model"


def code_lines(path: Path) -> dict[str, int]:
    """{'model': n, 'other': n, 'words': n}: the code lines inside the `## Model` section and outside
    it, and the words of the markdown cells."""
    counts, section = {"model": 0, "other": 0, "words": 0}, None
    for cell in json.loads(Path(path).read_text())["cells"]:
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] == "markdown":
            section = next((line.rstrip() for line in source.splitlines() if line.startswith("## ")), section)
            counts["words"] += len(source.split())
        elif cell["cell_type"] == "code":
            n = sum(1 for line in source.splitlines() if line.strip() and not line.strip().startswith("#"))
            counts["model" if section == MODEL_SECTION else "other"] += n
    return counts


def table(notebooks: Path = suite.NOTEBOOKS) -> dict[str, dict[str, int]]:
    return {f"{path.parent.name}/{path.stem}": code_lines(path) for path in sorted(notebooks.glob("*/*.ipynb"))}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of a markdown table")
    parser.add_argument("--notebooks", type=Path, default=suite.NOTEBOOKS, help="the notebooks folder to count")
    args = parser.parse_args(argv)
    counts = table(args.notebooks)
    if args.json:
        print(json.dumps(counts, indent=1))
        return
    print("| notebook | model lines | non-model lines | prose words |\n|---|---:|---:|---:|")
    for name, n in counts.items():
        print(f"| {name} | {n['model']} | {n['other']} | {n['words']} |")


if __name__ == "__main__":
    main()
