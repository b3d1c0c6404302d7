"""The README's results: one compact table per task from each framework line's most complete profile, put between
the README's results markers (`update_readme`); and the machines side by side, `results/index.md` and the README's
machines markers (`write_machines`). What the columns mean: docs/methodology.md.
"""

from __future__ import annotations

import csv
from pathlib import Path

from scripts import suite
from scripts.results import Layout
from support import tasks
from support.files import atomic_write
from support.records import METRICS

from . import operators
from .rows import FRAMEWORK_ORDER, PROFILE_ORDER, TASK_TITLES, has_device_memory, is_inference, number, row_title
from .tables import provenance, timed_cell
from .text import (
    EMPTY,
    NOT_COMPARABLE,
    Span,
    Table,
    code,
    em,
    fmt,
    fmt_metric,
    fmt_mib,
    fmt_ms,
    fmt_pct,
    markdown,
    markdown_table,
)

README_START, README_END = "<!-- results:start -->", "<!-- results:end -->"
MACHINES_START, MACHINES_END = "<!-- machines:start -->", "<!-- machines:end -->"


# --- the README table ------------------------------------------------------------------------------------------------


def headline_profile(rows: list[dict]) -> str | None:
    """The most complete profile present: full, else cpu, else tiny."""
    present = {r["profile"] for r in rows}
    return next((p for p in suite.PROFILES if p in present), None)


def readme_rows(rows: list[dict]) -> list[dict]:
    """Per framework and variant, the rows of the most complete profile it has (full, else cpu, else
    tiny). On a GPU machine a framework whose build sees no GPU runs `cpu` beside the others' `full`."""
    best: dict[tuple, str] = {}
    for r in rows:
        line = (r["framework"], r["api"])
        if line not in best or PROFILE_ORDER.get(r["profile"], 99) < PROFILE_ORDER.get(best[line], 99):
            best[line] = r["profile"]
    return [r for r in rows if best[(r["framework"], r["api"])] == r["profile"]]


def shows_metric(r: dict) -> bool:
    """Whether the README shows this row's metric (DenseNet's RAM mode times the steps only)."""
    task = tasks.TASKS.get(r["task"])
    return bool(task and task.metric and (not task.metric_modes or r["mode"] in task.metric_modes))


def readme_step_cell(r: dict) -> str:
    if r["status"] != "ok":
        return r["status"]
    if not r["timed"]:
        return "not timed"
    if r["step_median_s"] is None:
        return EMPTY
    spread = ", ".join(
        part
        for part in (
            f"IQR {fmt_ms(r['step_iqr_s'], 2)}" if r["step_iqr_s"] is not None else "",
            f"n={r['step_n']}" if r["step_n"] else "",
        )
        if part
    )
    return timed_cell(r, fmt_ms(r["step_median_s"])) + (f" ({spread})" if spread else "")


def readme_task_table(rows: list[dict]) -> Table:
    """One task's compact table: a line per framework and variant; a line that did not run shows its name (and
    profile) and status only."""
    inference = is_inference(rows[0]["task"])
    mixed = len({r["profile"] for r in rows}) > 1
    device = has_device_memory(rows)
    metric = {"accuracy": "accuracy", "auc": "AUC"}.get(METRICS.get(rows[0]["task"]) or "")
    columns = [
        ("framework", False, row_title),
        *([("profile", False, lambda r: r["profile"])] if mixed else []),
        ("batch ms" if inference else "step ms", True, readme_step_cell),
        *([("p95 ms", True, lambda r: fmt_ms(r["step_p95_s"]))] if inference else []),
        (
            "images/s" if inference else "compute samples/s",
            True,
            lambda r: timed_cell(r, fmt(r["compute_samples_per_s"])),
        ),
        *([] if inference else [("end-to-end samples/s", True, lambda r: timed_cell(r, fmt(r["e2e_samples_per_s"])))]),
        ("first batch s" if inference else "first step s", True, lambda r: fmt(r["first_step_s"])),
        ("compile s", True, lambda r: fmt(r["compile_s"])),
        ("host MiB", True, lambda r: fmt_mib(r["host_peak_bytes"])),
        *([("GPU MiB", True, lambda r: fmt_mib(r["device_peak_bytes"]))] if device else []),
        ("GFLOP/s", True, lambda r: timed_cell(r, fmt(r["gflops"]))),
        ("MFU", True, lambda r: timed_cell(r, fmt_pct(r["mfu"]))),
        *(
            [
                (
                    metric,
                    True,
                    lambda r: (
                        (fmt_metric(r["value"]) + (" !" if r["band"] == "outside" else ""))
                        if r["status"] == "ok" and shows_metric(r)
                        else EMPTY
                    ),
                )
            ]
            if metric
            else []
        ),
    ]
    table = Table(
        [head for head, _, _ in columns],
        [right for _, right, _ in columns],
        [
            [show(r) if r["status"] == "ok" or i < 2 + mixed else EMPTY for i, (_, _, show) in enumerate(columns)]
            for r in rows
        ],
    )
    # the inference runtime a deployment would pick instead: ONNX Runtime on PyTorch's exported graph, same batch
    reference = next((r for r in rows if r["framework"] == "pytorch" and r.get("onnxruntime_samples_per_s")), None)
    if inference and reference and reference["timed"]:
        cells = [EMPTY] * len(columns)
        cells[0] = "ONNX Runtime (PyTorch's export)"
        cells[[head for head, _, _ in columns].index("images/s")] = fmt(reference["onnxruntime_samples_per_s"])
        if mixed:
            cells[1] = reference["profile"]
        table.rows.append(cells)
    return table


def readme_table(rows: list[dict], machine: str) -> str:
    """The provenance, a legend, then one table per task (support.tasks order), each line from its
    framework's most complete profile; a profile column appears where a task's lines' profiles differ."""
    rows = sorted(readme_rows(rows), key=lambda r: (FRAMEWORK_ORDER.get(r["framework"], 99), r["variant"] or ""))
    by_task = {task: [r for r in rows if r["task"] == task] for task in suite.TASKS}
    by_task.update({r["task"]: [x for x in rows if x["task"] == r["task"]] for r in rows if r["task"] not in by_task})
    mixed = any(len({r["profile"] for r in task_rows}) > 1 for task_rows in by_task.values())
    note = (
        f"{markdown(provenance(rows, machine), one_line=True)} "
        f"Details, spreads (IQR, min–max, CV), the machine calibration and plots: "
        f"[results/{machine}/results.md](results/{machine}/results.md)."
        + (
            " The lines come from different profiles (column `profile`): compare times only between lines of "
            "one profile."
            if mixed
            else ""
        )
        + (" `not timed`: the run shared the machine (`--jobs`)." if any(not r["timed"] for r in rows) else "")
    )
    legend = (
        "*Step ms*: the steady-state training step on a batch in memory, median over n repeats with its IQR "
        "(ResNet-50: one inference batch, with its 95th percentile); *compute samples/s*: what that step "
        "implies; "
        "*end-to-end samples/s*: whole epochs, input pipeline included; *first step s*: its total time, "
        f"compilation included; *compile s*: the compilation alone ({EMPTY}: the framework runs eagerly); "
        "*host MiB*: peak resident memory; *GFLOP/s*: the model's FLOPs per sample times compute samples/s; "
        "*MFU*: that over this machine's matmul peak in the row's precision, measured at the start of the run. "
        "Operator benchmarks: *add floor*, a call of the smallest element-wise add, the framework's own time; the "
        "best float32 GFLOP/s on the largest matmul and 3x3 convolution (forward plus backward); *large ops vs "
        "fastest*: the geometric mean of its time over the fastest line's on the operations above 1e9 FLOPs "
        "(its best mode). *ONNX Runtime (PyTorch's export)*: the ResNet-50 graph PyTorch's notebook exported, run in "
        "ONNX Runtime on the same batch in the same run, the inference runtime a deployment would pick."
        + (
            f" `!` and {NOT_COMPARABLE}: accuracy or AUC outside the band around the other frameworks', so the "
            "row's time is not comparable."
            if any(r["band"] == "outside" for r in rows)
            else ""
        )
    )
    parts = [note, "", legend]
    for task, task_rows in by_task.items():
        if task_rows:
            table = operators.readme_table(task_rows) if task == operators.TASK else readme_task_table(task_rows)
            parts += ["", f"### {TASK_TITLES.get(task, task)}", "", markdown_table(table)]
    return "\n".join(parts)


def update_readme(readme: Path, rows: list[dict], machine: str) -> None:
    text = readme.read_text()
    if README_START not in text or README_END not in text:
        raise SystemExit(f"{readme}: no {README_START} ... {README_END} markers to put the results between")
    before, rest = text.split(README_START, 1)
    after = rest.split(README_END, 1)[1]
    atomic_write(readme, f"{before}{README_START}\n{readme_table(rows, machine)}\n{README_END}{after}")


# --- machines side by side: results/index.md and the README ----------------------------------------------------------


def machine_rows(results: Path) -> dict[str, list[dict]]:
    """{machine folder: its baseline rows that ran}, from each results/<machine>/results.csv (what build wrote)."""
    found = {}
    for folder in sorted(p for p in results.iterdir() if Layout(p).csv.is_file()):
        with open(Layout(folder).csv, newline="", encoding="utf-8") as handle:
            rows = [
                r
                for r in csv.DictReader(handle)
                if r.get("status") == "ok" and not r.get("matrix") and number(_float(r.get("compute_samples_per_s")))
            ]
        if rows:
            found[folder.name] = rows
    return found


def _float(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def machines_tables(results: Path, reference: str | None = None, min_machines: int = 1) -> list[str]:
    """Per task and profile, each framework line's steady-state compute samples/s (ResNet-50: images/s) on every
    machine with records of that profile, and its ratio to the reference machine: `reference` where it has the
    profile, else the machine with the most lines of it (then by name). A machine's device is named under it.
    Only groups with at least `min_machines` machines."""
    found = machine_rows(results)
    parts = []
    groups = sorted(
        {(r["task"], r["profile"]) for rows in found.values() for r in rows},
        key=lambda g: (list(suite.TASKS).index(g[0]) if g[0] in suite.TASKS else 99, g[1]),
    )
    for task, profile in groups:
        machines = {
            m: {
                (r["framework"], r.get("line") or r.get("variant") or ""): r
                for r in rows
                if (r["task"], r["profile"]) == (task, profile)
            }
            for m, rows in found.items()
        }
        machines = {m: lines for m, lines in machines.items() if lines}
        if len(machines) < min_machines:
            continue
        ref = reference if reference in machines else min(machines, key=lambda m: (-len(machines[m]), m))
        lines = sorted(
            {key for lines in machines.values() for key in lines}, key=lambda k: (FRAMEWORK_ORDER.get(k[0], 99), k[1])
        )
        names = list(machines)
        table = Table(
            ["framework", *((code(m), Span(" (reference)" if m == ref else "")) for m in names)],
            [False, *(True for _ in names)],
            [[(em("device"),), *(next(iter(machines[m].values())).get("device") or EMPTY for m in names)]],
        )
        for key in lines:
            base = machines[ref].get(key)
            base_value = _float(base["compute_samples_per_s"]) if base else None
            cells = []
            for m in names:
                row = machines[m].get(key)
                value = _float(row["compute_samples_per_s"]) if row else None
                if value is None:
                    cells.append(EMPTY)
                elif m == ref or not base_value:
                    cells.append(fmt(value))
                else:
                    cells.append(f"{fmt(value)} (×{value / base_value:.2g})")
            table.rows.append([f"{key[0]} ({key[1]})" if key[1] else key[0], *cells])
        parts += [f"### {TASK_TITLES.get(task, task)}, profile `{profile}`", "", markdown_table(table), ""]
    return parts


def write_machines(results: Path, readme: Path | None = None, reference: str | None = None) -> Path:
    """results/index.md: every machine's results, and the machines side by side; where `readme` has the machines
    markers, the groups with two machines or more between them."""
    found = machine_rows(results)
    intro = (
        "Each task's framework lines on every machine in `results/` (the seed's tables put hardware in "
        "columns): steady-state compute samples/s (ResNet-50: images/s; higher is faster), and in brackets "
        "the ratio to the reference machine (the one with the most lines of that profile). Only lines of one "
        "profile compare: its batch sizes and data are the same on every machine."
    )
    listed = []
    for folder in sorted(p for p in results.iterdir() if Layout(p).csv.is_file()):
        m = folder.name
        listed.append(
            f"- [`{m}`]({m}/results.md): {len(found[m])} baseline lines"
            if m in found
            else f"- [`{m}`]({m}/results.md): no line with a steady-state step time (its records come before "
            "that measure; their epoch times are in its results.md), so it is not in the tables below"
        )
    index = [
        "# Results by machine",
        "",
        *listed,
        "",
        "## Machines side by side",
        "",
        intro,
        "",
        *machines_tables(results, reference),
    ]
    path = results / "index.md"
    atomic_write(path, "\n".join(index).rstrip() + "\n")
    if readme and readme.exists():
        text = readme.read_text()
        if MACHINES_START in text and MACHINES_END in text:
            tables = machines_tables(results, reference, min_machines=2)
            body = (
                [intro, "", *tables]
                if tables
                else [
                    "No profile has run on two machines yet: [results/index.md](results/index.md) lists each machine."
                ]
            )
            before, rest = text.split(MACHINES_START, 1)
            after = rest.split(MACHINES_END, 1)[1]
            atomic_write(readme, f"{before}{MACHINES_START}\n" + "\n".join(body).rstrip() + f"\n{MACHINES_END}{after}")
    return path
