#!/usr/bin/env python
"""Count each notebook's code lines and prose words, and how much of the learner's path is measurement harness.

    python -m scripts.notebook_lines            # a markdown table, one row per notebook
    python -m scripts.notebook_lines --json     # the same as JSON
    python -m scripts.notebook_lines --notebooks OTHER/notebooks   # another tree (e.g. an older commit's)
    python -m scripts.notebook_lines --leaks    # the benchmark reaching into a learner's path: prints each line, exit 1

A line counts when it holds code: blank lines and lines that are only a comment do not. A notebook has two parts:
the learner's path (everything before its `## Measurement` heading, or the whole notebook where it has none) and the
measurement part. In the learner's path a line is harness when it names the measurement plumbing: the run's `bench`, a
framework's `measure` module, or support's timing, records, precision, env, files and agreement checks (HARNESS), and
so is every line of a bracket such a line opens (a harness call written over several lines, `harness_lines`); a
formatted call of the framework's own that passes one harness argument (`jit_compile=bench.compiled`) counts that
line alone. Every line of a section that only measures counts too (HARNESS_SECTIONS: the older layout's timing,
batch-size, parity and record sections, which sat in the reader's path).
The issue's bar: at most 15% of the learner's path is harness. Words are the markdown cells' words, headings
included; `words_before_model` counts those above `## Model` (the reader's way in; the operator benchmarks' `## The
operations`).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from scripts import suite
from scripts.report.text import Table, markdown_table

MODEL_SECTIONS = ("## Model", "## The operations")  # the operator benchmarks' model is their operations
HARNESS = re.compile(r"\b(bench|measure|timing|records|prec|env|files)\.|\bagree\(|\bprecision_tolerance\b")
HARNESS_SECTIONS = ("## Time the training", "## Batch size", "## Parity", "## Record")
LIMIT = 0.15  # the largest share of harness lines the learner's path may have
WORDS_BEFORE_MODEL = 300  # the most prose a reader meets before the model


def harness_lines(lines: list[str]) -> int:
    """How many of these code lines are harness: each line that names it (HARNESS), and the lines of any bracket such
    a line leaves open, down to the line that closes it (or of a backslash continuation)."""
    count, depth, until = 0, 0, None  # until: the bracket depth at which a harness line's open brackets are closed
    for line in lines:
        code = line.split("#", 1)[0]
        opened = depth
        depth += sum(code.count(c) for c in "([{") - sum(code.count(c) for c in ")]}")
        inside = until is not None
        if HARNESS.search(line) or inside:
            count += 1
        if not inside and HARNESS.search(line) and (depth > opened or code.rstrip().endswith("\\")):
            until = opened
        elif inside and depth <= until and not code.rstrip().endswith("\\"):
            until = None
    return count


def code_lines(path: Path) -> dict[str, int | float]:
    """{'model', 'learner', 'harness', 'measurement', 'words', 'words_before_model', 'harness_share'}: the code lines in
    `## Model`, in the learner's path (the model's included), the harness lines among those, the measurement part's
    code lines, the prose words, those before `## Model`, and harness / learner."""
    counts = {"model": 0, "learner": 0, "harness": 0, "measurement": 0, "words": 0, "words_before_model": 0}
    section, seen_model, measuring = None, False, False
    for cell in json.loads(Path(path).read_text())["cells"]:
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] == "markdown":
            headings = [line.rstrip() for line in source.splitlines() if line.startswith("## ")]
            section = headings[-1] if headings else section
            seen_model = seen_model or any(h in MODEL_SECTIONS for h in headings)
            measuring = measuring or suite.MEASUREMENT in headings
            words = len(source.split())
            counts["words"] += words
            if not seen_model:
                counts["words_before_model"] += words
        elif cell["cell_type"] == "code":
            lines = [line for line in source.splitlines() if line.strip() and not line.strip().startswith("#")]
            if measuring:
                counts["measurement"] += len(lines)
                continue
            counts["learner"] += len(lines)
            counts["model"] += len(lines) if section in MODEL_SECTIONS else 0
            counts["harness"] += len(lines) if section in HARNESS_SECTIONS else harness_lines(lines)
    counts["harness_share"] = round(counts["harness"] / counts["learner"], 3) if counts["learner"] else 0.0
    return counts


# What belongs to the measurement part or to the one "This machine" cell (tagged THIS_MACHINE), never to the rest of
# the learner's path: the benchmark's stops and checks, records, and the machine-specific workarounds.
LEAKS = re.compile(
    r"\bbench\.(stop|first_call|agree|unavailable|onnx|hyperparameters|parity|steady_state|sweep|"
    r"throughput|data_parallel|initialisation)\b|\bmeasure\.(write|stop_\w+|initial_weights|variant)\b|"
    r"\brecords\.|XLA_FLAGS|OMP_NUM_THREADS|MXNET_CPU_PARALLEL_SIZE|set_flush_denormal|type_check\b"
)
THIS_MACHINE = "concept:this-machine"


def _precision_in_functions(source: str) -> list[str]:
    """The lines of `def` bodies that read the `precision` parameter (a precision branch inside a step or an
    evaluation function; the choice belongs in a value made outside it)."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:  # IPython syntax (%magic): nothing to parse here
        return []
    lines = source.splitlines()
    return [
        lines[node.lineno - 1].strip()
        for function in ast.walk(tree)
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for node in ast.walk(function)
        if isinstance(node, ast.Name) and node.id == "precision"
    ]


def leaks(path: Path) -> list[str]:
    """`<notebook>: cell <n>: <line>` for each line of the learner's path (above `## Measurement`, outside the cell
    tagged `concept:this-machine`) that the benchmark or a machine's workaround put there (LEAKS), and each line of
    a function there that branches on `precision`."""
    found, measuring = [], False
    for n, cell in enumerate(json.loads(Path(path).read_text())["cells"]):
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] == "markdown":
            measuring = measuring or suite.MEASUREMENT in [line.rstrip() for line in source.splitlines()]
            continue
        if measuring or cell["cell_type"] != "code" or THIS_MACHINE in cell.get("metadata", {}).get("tags", []):
            continue
        hits = [line.strip() for line in source.splitlines() if LEAKS.search(line.split("#", 1)[0])]
        hits += [f"{line}  (precision inside a function)" for line in _precision_in_functions(source)]
        found += [f"{suite.shown(Path(path))}: cell {n}: {line}" for line in hits]
    return found


def table(notebooks: Path = suite.NOTEBOOKS) -> dict[str, dict]:
    return {f"{path.parent.name}/{path.stem}": code_lines(path) for path in sorted(notebooks.glob("*/*.ipynb"))}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of a markdown table")
    parser.add_argument("--notebooks", type=Path, default=suite.NOTEBOOKS, help="the notebooks folder to count")
    parser.add_argument(
        "--leaks",
        action="store_true",
        help="list the learner's-path lines that belong to the "
        "measurement part or the 'This machine' cell; exit 1 if there are any",
    )
    args = parser.parse_args(argv)
    if args.leaks:
        found = [line for path in sorted(args.notebooks.glob("*/*.ipynb")) for line in leaks(path)]
        print("\n".join(found) or "no benchmark or workaround line in any learner's path")
        raise SystemExit(1 if found else 0)
    counts = table(args.notebooks)
    if args.json:
        print(json.dumps(counts, indent=1))
        return
    print(
        markdown_table(
            Table(
                [
                    "notebook",
                    "model lines",
                    "learner's path lines",
                    "harness in it",
                    "share",
                    "measurement lines",
                    "words",
                    "words before Model",
                ],
                [False, *[True] * 7],
                [
                    [
                        name,
                        str(n["model"]),
                        str(n["learner"]),
                        str(n["harness"]),
                        f"{100 * n['harness_share']:.0f}%" + ("" if n["harness_share"] <= LIMIT else " (over 15%)"),
                        str(n["measurement"]),
                        str(n["words"]),
                        str(n["words_before_model"]),
                    ]
                    for name, n in counts.items()
                ],
            )
        )
    )


if __name__ == "__main__":
    main()
