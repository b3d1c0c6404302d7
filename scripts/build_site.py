#!/usr/bin/env python
"""Build the side-by-side reader: a static site that shows each step of a task in every framework.

    python -m scripts.build_site                        # this machine's results -> results/<machine>/site/
    python -m scripts.build_site --machine cpu-2c-intel-xeon --profile cpu --out /tmp/site

One page per task: its results table (the report's own table data, `report.tables.results_table`, as HTML) and
plot from the machine's latest run, then one row per
section heading (`## Data`, `## Model`, ...) and one column per framework, with the markdown and
the syntax-highlighted code of that section; checkboxes choose which frameworks to show (the URL's
hash keeps the choice: `cnn_cifar10.html#pytorch,jax`). An index page has a matrix of the notebooks
and how their last run went. Plain HTML, one CSS and one JS file: open index.html from disk, no
server needed. Links to the notebooks, executed copies and plots are relative, so the site works
where it is built (by default inside the results folder it reads).

The rows come from PyTorch's headings: `suite.check_headings` makes the build fail with an error
that names any notebook whose headings differ, so the parallel structure cannot rot.

The concordance page (`concordance.html`) looks things up by concept instead: one table per task,
one row per concept (define the model, move to the device, loss, ...; `CONCEPTS`), one column per
framework, holding the notebook cells tagged `concept:<name>` (Jupyter cell tags), each linked to
its place on the task page. A notebook that lacks a concept another notebook of its task tags, or
a tag outside `CONCEPTS`, stops the build with an error naming the notebook: where a framework does
a step implicitly or not at all, its notebook tags the markdown cell that says so.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from urllib.parse import quote

from scripts import report, suite
from scripts.report.plots import headline_plot
from scripts.report.readme import headline_profile
from scripts.report.rows import TASK_TITLES, baseline
from scripts.report.tables import provenance, results_table
from scripts.report.text import spans
from scripts.results import Identity, Layout
from support.files import atomic_write

TEMPLATES = Path(__file__).resolve().parent / "site_templates"
INTRODUCTION = "Introduction"  # the row for the cells above a notebook's first `## ` heading
CONCEPT_TAG = "concept:"
# The concordance's rows, in order: tag suffix -> what a learner looks up. Each concept lives in one place, the
# same in every notebook of a task (docs/contributing.md has the map): its first tagged cell stands under the same
# `## ` heading in each, and the concepts' first cells come in the same order (several tags on one cell are a tie).
CONCEPTS = {
    "this-machine": "This machine's settings",
    "device": "Device and seed",
    "hyperparameters": "Hyperparameters",
    "input-pipeline": "Input pipeline",
    "mixed-precision": "Precision policy",
    "model": "Define the model",
    "operations": "The operations (operator benchmarks)",
    "initialise": "Initialise the weights",
    "build": "Build, place and summarise",
    "data-parallel": "Data parallelism on several devices",
    "loss": "Loss and optimizer",
    "sync": "Synchronise and time a call",
    "warmup": "Warm-up, calibrated count and repeats",
    "compile": "Compile",
    "gradient": "Gradients",
    "optimizer-step": "Optimizer step",
    "eval-mode": "Evaluation mode",
    "no-grad": "Inference without gradients",
    "metrics": "Metrics",
    "train-mode": "Training mode",
    "training-loop": "Training loop with validation",
    "evaluate": "Evaluate, overall and per class",
    "save": "Save",
    "load": "Load",
    "resume": "Resume training",
    "export": "Export",
}
# Concepts whose section is checked but not their order: data parallelism acts in several places (a strategy's
# scope around the model in TensorFlow, a wrapper around the built model in PyTorch, the updater in Chainer).
UNORDERED = {"data-parallel"}
PYGMENTS_STYLE = "default"


def label(stem: str) -> str:
    return suite.label(stem)


def href(target: Path, out_dir: Path) -> str:
    """A relative URL from the site folder to a file, so that links work from disk (file://)."""
    return quote(Path(os.path.relpath(Path(target).resolve(), out_dir.resolve())).as_posix())


def slug(title: str) -> str:
    return "s-" + (re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") or "section")


class Renderer:
    """The notebooks' Markdown cells (markdown-it, CommonMark with tables) and Python code (Pygments) as HTML."""

    def __init__(self):
        from markdown_it import MarkdownIt
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import PythonLexer

        self.markdown_it = MarkdownIt("commonmark", {"html": False}).enable("table")
        self.lexer, self.formatter = PythonLexer(), HtmlFormatter(style=PYGMENTS_STYLE)

    def markdown(self, text: str) -> str:
        return self.markdown_it.render(text)

    def code(self, source: str) -> str:
        from pygments import highlight

        return highlight(source, self.lexer, self.formatter)

    def css(self) -> str:
        return self.formatter.get_style_defs(".highlight")


def cell_anchor(framework: str, cell_id: str) -> str:
    """The id of a notebook cell on its task page, which the concordance links to."""
    return f"cell-{framework}-{cell_id}"


def concepts(path: Path, cell) -> list[str]:
    """The concepts a cell is tagged with (`concept:<name>`); a tag outside CONCEPTS is a ValueError
    naming the notebook and the cell."""
    found = []
    for tag in cell.metadata.get("tags", []):
        if not tag.startswith(CONCEPT_TAG):
            continue
        if tag[len(CONCEPT_TAG) :] not in CONCEPTS:
            raise ValueError(
                f"{suite.shown(path)}: cell {cell.get('id')!r} has the tag {tag!r}, which is no concept; "
                f"the concepts are {', '.join(CONCEPT_TAG + c for c in CONCEPTS)}"
            )
        found.append(tag[len(CONCEPT_TAG) :])
    return found


def sections(path: Path, render: Renderer) -> dict[str, list[dict]]:
    """A notebook's cells as HTML, grouped by the `## ` heading above them (the heading line itself
    goes to the row's title). Cells above the first heading form the INTRODUCTION row. Each cell
    carries its anchor on the task page and its concepts (a split markdown cell, on its first part)."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    found: dict[str, list[dict]] = {}
    current = INTRODUCTION
    for position, cell in enumerate(nb.cells):
        anchor, tagged = cell_anchor(path.stem, cell.get("id", "")), concepts(path, cell)
        if cell.cell_type == "code":
            if cell.source.strip():
                tag = "parameters" if "parameters" in cell.metadata.get("tags", []) else ""
                found.setdefault(current, []).append(
                    {
                        "kind": "code",
                        "html": render.code(cell.source),
                        "tag": tag,
                        "anchor": anchor,
                        "concepts": tagged,
                        "position": position,
                    }
                )
            continue
        if cell.cell_type != "markdown":
            continue
        text: list[str] = []
        for line in cell.source.splitlines() + ["## "]:  # a sentinel heading flushes the last lines
            if not line.startswith("## "):
                text.append(line)
                continue
            if "\n".join(text).strip():
                found.setdefault(current, []).append(
                    {
                        "kind": "markdown",
                        "html": render.markdown("\n".join(text)),
                        "anchor": anchor,
                        "concepts": tagged,
                        "position": position,
                    }
                )
                anchor, tagged = "", []
            text = []
            if line.strip() != "##":
                current = line[3:].strip()
    return found


def concordance(page: dict, notebooks: Path) -> dict:
    """One task's table, from its page's cells: its concepts (every concept any of its notebooks tags,
    in CONCEPTS order) by framework, each cell with its section. A notebook without a cell for one
    of them is a ValueError that names it, the concept, and the notebooks that have it."""
    task, frameworks = page["task"], [c["framework"] for c in page["columns"]]
    cells: dict[str, dict[str, list[dict]]] = {f: {} for f in frameworks}
    for row in page["rows"]:
        for f in frameworks:
            for cell in row["cells"][f]:
                for concept in cell["concepts"]:
                    cells[f].setdefault(concept, []).append({**cell, "section": row["title"]})
    tagged = [c for c in CONCEPTS if any(c in cells[f] for f in frameworks)]
    for f in frameworks:
        for concept in tagged:
            if concept not in cells[f]:
                others = ", ".join(f"{g}.ipynb" for g in frameworks if concept in cells[g])
                raise ValueError(
                    f"{suite.shown(notebooks / task / f'{f}.ipynb')} has no cell tagged "
                    f"'{CONCEPT_TAG}{concept}' ({CONCEPTS[concept]}), which {others} tag; tag the cell "
                    "that does it, or the markdown cell that says why this framework needs none"
                )
    check_places(
        task,
        {f: {c: (cells[f][c][0]["section"], cells[f][c][0]["position"]) for c in tagged} for f in frameworks},
        notebooks,
    )
    return {
        "task": task,
        "title": page["title"],
        "id": f"t-{task}",
        "rows": [{"concept": c, "title": CONCEPTS[c], "cells": {f: cells[f][c] for f in frameworks}} for c in tagged],
    }


def check_places(task: str, places: dict[str, dict[str, tuple[str, int]]], notebooks: Path) -> None:
    """Each concept in the same place in every notebook of a task: `places` is framework -> concept -> (the `## `
    heading over its first tagged cell, that cell's position in the notebook). A concept under another heading
    than in the first notebook (PyTorch's, as for the headings), or two concepts in the opposite order to another
    notebook's (ties, one cell with both tags, agree with either order), is a ValueError naming the notebook."""
    frameworks = sorted(places, key=lambda f: f != "pytorch")
    reference = frameworks[0]
    shown = {f: suite.shown(notebooks / task / f"{f}.ipynb") for f in frameworks}
    for f in frameworks[1:]:
        for concept, (section, _) in places[f].items():
            theirs = places[reference][concept][0]
            if section != theirs:
                raise ValueError(
                    f"{shown[f]}: '{CONCEPT_TAG}{concept}' ({CONCEPTS[concept]}) first stands under "
                    f"'## {section}', where {reference}.ipynb has it under '## {theirs}'; every notebook "
                    "of a task keeps each concept in one place (docs/contributing.md: the concept map)"
                )
    ordered = [c for c in places[reference] if c not in UNORDERED]
    for witness in frameworks:
        at = places[witness]
        for f in frameworks:
            if f == witness:
                continue
            for a in ordered:
                for b in ordered:
                    if at[a][1] < at[b][1] and places[f][b][1] < places[f][a][1]:
                        raise ValueError(
                            f"{shown[f]}: '{CONCEPT_TAG}{b}' ({CONCEPTS[b]}) comes before '{CONCEPT_TAG}{a}' "
                            f"({CONCEPTS[a]}), where {witness}.ipynb has it after; every notebook of a task keeps "
                            "its concepts in one order (docs/contributing.md: the concept map)"
                        )


def latest_profile(rows: list[dict]) -> str | None:
    """The profile of the newest record (the latest run), else the most complete one present."""
    dated = [r for r in rows if r.get("date")]
    return max(dated, key=lambda r: r["date"])["profile"] if dated else headline_profile(rows)


def runs(task: str, stem: str, task_rows: list[dict], machine_dir: Path, out_dir: Path) -> list[dict]:
    """One entry per run of a notebook (its variants) in the task's rows: status, error, executed copy."""
    found = {r["identity"]: r for r in task_rows}
    out = []
    for parameters in suite.stem_variants(task, stem):
        run = Identity.of(task, suite.notebook_framework(stem), parameters)
        variant = run.line
        r = found.get(run) or {"status": "not run", "error": None, "executed_notebook": None}
        executed = machine_dir / r["executed_notebook"] if r["executed_notebook"] else None
        out.append(
            {
                "variant": variant,
                "status": r["status"],
                "error": r["error"] or "",
                "executed": href(executed, out_dir) if executed and executed.exists() else None,
            }
        )
    return out


def task_page(
    task: str,
    notebooks: Path,
    rows: list[dict],
    profile: str | None,
    machine_dir: Path,
    out_dir: Path,
    render: Renderer,
) -> dict:
    """Everything a task page shows: results, columns (frameworks) and rows (sections)."""
    headings = [h[3:].strip() for h in suite.check_headings(task, notebooks)]
    frameworks = suite.stems(task, notebooks)  # one column per notebook (MXNet's Module API has its own)
    cells = {f: sections(notebooks / task / f"{f}.ipynb", render) for f in frameworks}
    titles = ([INTRODUCTION] if any(INTRODUCTION in c for c in cells.values()) else []) + headings
    task_rows = baseline([r for r in rows if r["task"] == task and r["profile"] == profile])
    plot = Layout(machine_dir).plots(str(profile)) / f"{headline_plot(task)}.png"
    return {
        "task": task,
        "title": TASK_TITLES.get(task, task),
        "columns": [
            {
                "framework": f,
                "label": label(f),
                "notebook": href(notebooks / task / f"{f}.ipynb", out_dir),
                "runs": runs(task, f, task_rows, machine_dir, out_dir),
            }
            for f in frameworks
        ],
        "default": ",".join(frameworks[:2]),
        "rows": [{"title": t, "id": slug(t), "cells": {f: cells[f].get(t, []) for f in frameworks}} for t in titles],
        "provenance": provenance(task_rows, machine_dir.name) if task_rows else "",
        "table": results_table(task_rows) if task_rows else None,
        "plot": href(plot, out_dir) if task_rows and plot.exists() else None,
    }


def index_matrix(tasks: list[str], pages: dict[str, dict], notebooks: Path = suite.NOTEBOOKS) -> list[dict]:
    """Rows = frameworks, cells = tasks: does the notebook exist, and how did each of its runs end."""
    matrix = []
    for f in dict.fromkeys(stem for task in tasks for stem in suite.stems(task, notebooks)):
        cells = []
        for task in tasks:
            column = next((c for c in pages[task]["columns"] if c["framework"] == f), None)
            if column is None:
                cells.append(None)
                continue
            chosen = pages[task]["default"] if f == "pytorch" else f"pytorch,{f}"
            cells.append({"task": task, "href": f"{task}.html#{chosen}", "runs": column["runs"]})
        if any(cells):
            matrix.append({"framework": f, "label": label(f), "cells": cells})
    return matrix


def check(notebooks: Path = suite.NOTEBOOKS) -> list[str]:
    """The reader's checks of the notebooks alone (no results needed), one error line per task that fails them:
    the same headings (suite.check_headings), known concept tags, every concept in every notebook of its task,
    each in its place and order (check_places)."""
    render, errors = Renderer(), []
    for task in [t for t in suite.TASKS if any((notebooks / t).glob("*.ipynb"))]:
        try:
            concordance(task_page(task, notebooks, [], None, notebooks, notebooks, render), notebooks)
        except ValueError as err:
            errors.append(str(err))
    return errors


def build(
    machine_dir: Path,
    out_dir: Path | None = None,
    profile: str | None = None,
    notebooks: Path = suite.NOTEBOOKS,
    rows: list[dict] | None = None,
) -> Path:
    """Write the site for one machine's results (default: <machine_dir>/site); return its index.html."""
    import jinja2

    machine_dir = Path(machine_dir)
    out_dir = Path(out_dir or Layout(machine_dir).site)
    if rows is None:  # the runner passes the rows report.build has just loaded
        rows = report.load_rows(machine_dir) if (machine_dir / "records").is_dir() else []
    profile = profile or latest_profile(rows)
    render = Renderer()
    tasks = [t for t in suite.TASKS if any((notebooks / t).glob("*.ipynb"))]
    pages = {t: task_page(t, notebooks, rows, profile, machine_dir, out_dir, render) for t in tasks}
    tables = [concordance(pages[t], notebooks) for t in tasks]  # checked before anything is written
    frameworks = list(dict.fromkeys(stem for t in tasks for stem in suite.stems(t, notebooks)))
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters["spans"] = spans  # the report's text, for text.html's macros
    common = {"tasks": [(t, pages[t]["title"]) for t in tasks], "machine": machine_dir.name, "profile": profile}
    out_dir.mkdir(parents=True, exist_ok=True)
    results_md = Layout(machine_dir).markdown
    profile_rows = [r for r in rows if r["profile"] == profile]
    atomic_write(
        out_dir / "index.html",
        environment.get_template("index.html").render(
            common,
            matrix=index_matrix(tasks, pages, notebooks),
            page="index",
            provenance=provenance(profile_rows, machine_dir.name) if profile_rows else "",
            results_md=href(results_md, out_dir) if results_md.exists() else None,
        ),
    )
    for task, page in pages.items():
        atomic_write(out_dir / f"{task}.html", environment.get_template("task.html").render(common, **page, page=task))
    atomic_write(
        out_dir / "concordance.html",
        environment.get_template("concordance.html").render(
            common,
            page="concordance",
            tables=tables,
            columns=[{"framework": f, "label": label(f)} for f in frameworks],
            default=",".join(frameworks[:2]),
        ),
    )
    css = (TEMPLATES / "site.css").read_text() + f"\n/* Pygments, style '{PYGMENTS_STYLE}' */\n" + render.css() + "\n"
    atomic_write(out_dir / "site.css", css)
    atomic_write(out_dir / "site.js", (TEMPLATES / "site.js").read_bytes())
    return out_dir / "index.html"


def default_machine(results: Path) -> str:
    """This machine's results folder where it exists, else the only one there is."""
    from support import env

    here = env.machine_name()
    found = sorted(p.name for p in results.iterdir() if (p / "records").is_dir()) if results.is_dir() else []
    if here in found or not found:
        return here
    if len(found) == 1:
        return found[0]
    raise SystemExit(
        f"build_site.py: no results for this machine ({here}) under {results}; "
        f"choose one with --machine: {', '.join(found)}"
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--results", type=Path, default=suite.ROOT / "results", help="results folder (default results/)")
    p.add_argument("--machine", help="results subfolder to read (default: this machine's, else the only one)")
    p.add_argument(
        "--profile", choices=suite.PROFILES, help="profile whose results to show (default: the latest run's)"
    )
    p.add_argument("--out", type=Path, help="where to write the site (default results/<machine>/site/)")
    p.add_argument("--notebooks", type=Path, default=suite.NOTEBOOKS, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    machine = args.machine or default_machine(args.results)
    try:
        index = build(args.results / machine, args.out, args.profile, args.notebooks)
    except ValueError as err:
        print(f"build_site.py: {err}", file=sys.stderr)
        return 1
    print(f"wrote the side-by-side reader: open {index}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
