"""Turn a machine's JSON records into results.csv, sweeps.csv, results.md, plots and the README table.

    python -m scripts.report results/<machine>     # rebuild the tables and plots from the records there

Reads `records/<profile>/*.json` under the machine's folder and the run metadata `runs/<run>.json` the runner
writes, and writes next to them. One module per job: `rows` (records to rows, the accuracy band, which rows each
table takes), `peaks` (the run metadata, MFU, the machine calibration), `tables` (the CSV files and every table of
results.md), `plots`, `readme` (the README's table and results/index.md), `text` (cells as data, and their Markdown
and HTML renderings). What every number means, and how the report treats a malformed record or a run that shared
the machine: docs/methodology.md.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from scripts.results import Layout

from . import operators, profiles
from .peaks import attach_peaks, load_runs
from .plots import plot, plot_curves, plot_sweeps, plot_variants
from .readme import headline_profile, readme_table, update_readme, write_machines
from .rows import (
    TASK_TITLES,
    baseline,
    flagged,
    groups,
    load_records,
    mark_band,
    matrix_rows,
    row,
    sort_key,
    sweep_rows,
)
from .tables import provenance, write_csv, write_markdown, write_sweeps_csv

# What the runner, the reader and other tests use; each module's own names are imported from it.
__all__ = [
    "TASK_TITLES",
    "baseline",
    "build",
    "flagged",
    "headline_profile",
    "load",
    "load_rows",
    "main",
    "provenance",
    "readme_table",
    "write_machines",
]


def load(machine_dir: Path) -> tuple[list[dict], dict[str, dict]]:
    """Every record of one machine as a table row, in table order, with its band and MFU; and the runs."""
    rows = sorted((row(r) for r in load_records(machine_dir)), key=sort_key)
    mark_band(rows)
    runs = load_runs(machine_dir, rows)
    attach_peaks(rows, runs)
    return rows, runs


def load_rows(machine_dir: Path) -> list[dict]:
    """Every record of one machine as a table row, in table order, with its band and MFU marked."""
    return load(machine_dir)[0]


def build(machine_dir: Path, readme: Path | None = None) -> list[dict]:
    """Write results.csv, sweeps.csv, results.md and the plots for one machine; update the README if given.
    Returns every row; the tables of the baselines and of the variant matrix each take their own."""
    rows, runs = load(machine_dir)
    if not rows:
        print(f"no records under {machine_dir / 'records'}")
        return rows
    layout = Layout(machine_dir)
    write_csv(rows, layout.csv)
    write_sweeps_csv(rows, layout.sweeps_csv)
    write_markdown(rows, layout.markdown, layout.machine, runs)
    for profile, task, task_rows in groups(rows):
        title = f"{TASK_TITLES.get(task, task)} ({profile} profile, {machine_dir.name})"
        folder = layout.plots(profile)
        base_rows = baseline(task_rows)
        if task == operators.TASK:  # GFLOP/s against size per operation, and the floor
            operators.plot(base_rows, folder, title, operators.float32_peak(base_rows, runs))
            continue
        if base_rows:
            plot(base_rows, folder / f"{task}.png", title)
            plot_curves(base_rows, folder / f"{task}-curve.png", f"{title}: learning curves")
            profiles.plot(base_rows, folder / f"{task}-profile.png", f"{title}: where the step goes")
        plot_variants(matrix_rows(task_rows), folder / f"{task}-variants.png", f"{title}: variants")
        plot_sweeps(sweep_rows(task_rows), folder / f"{task}-batch.png", f"{title}: batch size")
    if readme:
        update_readme(readme, baseline(rows), machine_dir.name)
    print(f"wrote {machine_dir / 'results.csv'}, sweeps.csv, results.md and plots ({len(rows)} rows)")
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("machine_dir", type=Path, help="a machine's results folder, results/<machine>")
    args = parser.parse_args(argv)
    if not args.machine_dir.is_dir():
        raise SystemExit(
            f"{parser.prog}: {args.machine_dir} is no folder: give a machine's results folder, results/<machine>"
        )
    build(args.machine_dir)
    return 0
