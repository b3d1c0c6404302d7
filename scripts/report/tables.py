"""results.csv, sweeps.csv and results.md: every table of one machine's rows (per task, the variant matrix, the
batch-size sweeps, several devices), each first as data (`results_table`, `variant_table`, ... return a
`text.Table` of plain cells) and then rendered (`text.markdown_table`; the reader renders `results_table` as HTML).
What each column means: docs/methodology.md.
"""

from __future__ import annotations

import csv
from pathlib import Path

from support import tasks
from support.files import atomic_write, replacing
from support.records import METRICS

from . import operators, profiles
from .peaks import calibration_section
from .rows import (
    BAND,
    COLUMNS,
    TASK_TITLES,
    baseline,
    comparable,
    device_rows,
    groups,
    has_curves,
    has_device_memory,
    is_inference,
    line_title,
    matrix_rows,
    row_title,
    scaling,
    sweep_rows,
)
from .text import (
    EMPTY,
    NOT_COMPARABLE,
    Span,
    Table,
    Text,
    code,
    column_table,
    fmt,
    fmt_metric,
    fmt_mib,
    fmt_ms,
    fmt_pct,
    fmt_range_ms,
    markdown,
    markdown_table,
    spans,
    strong,
)

SWEEP_COLUMNS = (
    "task",
    "framework",
    "variant",
    "profile",
    "precision",
    "compilation",
    "batch_size",
    "samples_per_s",
    "median_s",
    "p95_s",
    "cv",
    "n",
    "first_s",
    "stopped",
)


# --- the CSV files ---------------------------------------------------------------------------------------------------


def write_csv(rows: list[dict], path: Path) -> None:
    def text(key, value):
        if value is None:
            return ""
        if key == "curve":
            return ";".join(f"{v:.6g}" for v in value)
        return value

    with replacing(path) as tmp, open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows({k: text(k, v) for k, v in r.items()} for r in rows)


def write_sweeps_csv(rows: list[dict], path: Path) -> None:
    """One row per batch size of every sweep."""
    with replacing(path) as tmp, open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=SWEEP_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for r in rows:
            for size in (r.get("sweep") or {}).get("sizes", []):
                writer.writerow({**{k: r.get(k) for k in SWEEP_COLUMNS}, **size, "stopped": r["sweep"]["stopped"]})


# --- cells -----------------------------------------------------------------------------------------------------------


def timed_cell(r: dict, text: str) -> str:
    """A time or a rate, marked not comparable where the row's quality is outside its band."""
    return text + (NOT_COMPARABLE if text != EMPTY and not comparable(r) else "")


def metric_cell(r: dict) -> Text:
    """The accuracy or AUC, with a flag when it lies outside its task's band."""
    if r["band"] == "outside":
        return Span(f"{fmt_metric(r['value'])} "), strong("outside band")
    return fmt_metric(r["value"])


def parameters_cell(r: dict, reference: int | None) -> str:
    """The count, and its difference from PyTorch's where there is one."""
    n = r["n_parameters"]
    if n is None or reference is None or n == reference or r["framework"] == "pytorch":
        return fmt(n)
    return f"{fmt(n)} ({n - reference:+,})"


def status_cell(r: dict, limit: int = 200) -> Text:
    """ok, or the status and the start of its reason (an error, an unsupported combination's why), cut after a
    whole word (the record holds it whole)."""
    if r["status"] == "ok":
        return "ok"
    reason = " ".join((r["error"] or "").split())
    if len(reason) > limit:
        reason = reason[:limit].rsplit(" ", 1)[0] + " …"
    return strong(r["status"].replace("_", " ")), Span(f": {reason}")


def not_comparable_note(rows: list[dict]) -> str:
    return (
        f"{NOT_COMPARABLE} Not comparable: the row's {rows[0]['metric']} lies outside the band around the other "
        "frameworks', and a time counts only with its quality (as in MLPerf)."
    )


# --- results.md ------------------------------------------------------------------------------------------------------


def results_table(rows: list[dict]) -> Table:
    """One task's rows: steady state, throughput, first step and compilation, memory, FLOP/s, the metric (results.md
    and the reader's task page)."""
    inference = is_inference(rows[0]["task"])
    metric = rows[0]["metric"] if METRICS.get(rows[0]["task"]) else None
    reference = next((r["n_parameters"] for r in rows if r["framework"] == "pytorch" and r["n_parameters"]), None)
    step = "batch" if inference else "step"
    columns = [  # (head, right-aligned, cell)
        ("framework", False, row_title),
        (
            "status",
            False,
            lambda r: (
                r["status"] if r["status"] == "ok" else (strong(r["status"]), Span(f": {(r['error'] or '')[:160]}"))
            ),
        ),
        (
            f"{step} ms (median)",
            True,
            lambda r: timed_cell(r, fmt_ms(r["step_median_s"])) if r["timed"] else "not timed",
        ),
        ("IQR ms", True, lambda r: fmt_ms(r["step_iqr_s"], 2)),
        ("min–max ms", True, lambda r: fmt_range_ms(r["step_min_s"], r["step_max_s"])),
        *([("p95 ms", True, lambda r: fmt_ms(r["step_p95_s"]))] if inference else []),
        ("n", True, lambda r: fmt(r["step_n"])),
        ("CV", True, lambda r: fmt_pct(r["step_cv"])),
        (
            "images/s" if inference else "compute samples/s",
            True,
            lambda r: timed_cell(r, fmt(r["compute_samples_per_s"])),
        ),
        *(
            [("ONNX Runtime images/s", True, lambda r: timed_cell(r, fmt(r["onnxruntime_samples_per_s"])))]
            if any(r.get("onnxruntime_samples_per_s") for r in rows)
            else []
        ),
        *(
            []
            if inference
            else [
                (
                    "s/epoch (IQR)",
                    True,
                    lambda r: (
                        timed_cell(r, fmt(r["median_s"]))
                        + (f" ({fmt(r['iqr_s'], 2)})" if r["iqr_s"] is not None else "")
                    ),
                ),
                ("end-to-end samples/s", True, lambda r: timed_cell(r, fmt(r["e2e_samples_per_s"]))),
            ]
        ),
        (f"first {step} s", True, lambda r: fmt(r["first_step_s"])),
        ("compile s", True, lambda r: fmt(r["compile_s"])),
        ("host MiB", True, lambda r: fmt_mib(r["host_peak_bytes"])),
        *([("device MiB", True, lambda r: fmt_mib(r["device_peak_bytes"]))] if has_device_memory(rows) else []),
        ("GFLOP/s", True, lambda r: timed_cell(r, fmt(r["gflops"]))),
        ("MFU", True, lambda r: timed_cell(r, fmt_pct(r["mfu"]))),
        *([(metric, True, metric_cell)] if metric else []),
        ("parameters (vs pytorch)", True, lambda r: parameters_cell(r, reference)),
        ("parity error", True, lambda r: EMPTY if r["parity_error"] is None else format(r["parity_error"], ".1e")),
        ("version", False, lambda r: r["framework_version"] or EMPTY),
        ("data", False, lambda r: r["data"] or EMPTY),
    ]
    return column_table(columns, rows, "" if all(comparable(r) for r in rows) else not_comparable_note(rows))


def environment_line(rows: list[dict]) -> Text:
    """The machine, its device and threads, Python, the commits and days of the rows that ran ('' if none ran)."""
    ok = [r for r in rows if r["status"] == "ok"]
    if not ok:
        return ""
    r = ok[0]
    days = sorted({x["date"][:10] for x in ok if x["date"]})
    when = f", {days[0]}" + (f" to {days[-1]}" if len(days) > 1 else "") if days else ""
    commits = list(dict.fromkeys(x["git_commit"] for x in ok if x["git_commit"]))  # runs of several commits
    commit = f"commit{'s' if len(commits) > 1 else ''} {', '.join(commits) or '-'}"
    return (
        Span("Machine "),
        code(r["machine"]),
        Span(f" ({r['device']}, {r['threads']} threads), Python {r['python']}, {commit}{when}"),
    )


def provenance(rows: list[dict], machine: str) -> Text:
    """Where one profile's rows come from: profile, machine, data kind, then environment_line()."""
    named = [
        part
        for i, p in enumerate(dict.fromkeys(r["profile"] for r in rows))
        for part in ([Span(", ")] if i else []) + [code(p)]
    ]
    kinds = sorted({r["data"] for r in rows if r["data"]})
    machine_line = environment_line(rows)
    return (
        Span("Profile "),
        *named,
        Span(" on "),
        code(machine),
        Span(f"; data: {', '.join(kinds) or '-'}."),
        *((Span(" "), *spans(machine_line), Span(".")) if machine_line else ()),
    )


def write_markdown(rows: list[dict], path: Path, machine: str, runs: dict[str, dict] | None = None) -> None:
    """The calibration of every run, a table per profile and task of the baselines, then the variant matrix."""
    parts = [
        f"# Results on `{machine}`",
        "",
        "Generated by `python -m scripts.report` from the JSON records beside this file; do not edit by hand. "
        "*Step*: the steady-state training step on a batch already in memory, after warm-up steps, timed in n "
        "repeats of a fixed number of steps: the median time per step, its interquartile range (IQR), the "
        "fastest and slowest repeat (min–max) and the coefficient of variation (CV) over the repeats; for "
        "ResNet-50 the timed batches, with the 95th-percentile latency (p95). *Compute samples/s*: the global "
        "batch over the median step; *end-to-end samples/s*: over whole epochs, input pipeline included "
        "(`s/epoch`: their median, with its IQR). *First step*: its total time, compilation included; "
        f"*compile*: the compilation alone where the framework compiles ({EMPTY}: it runs eagerly). *Host MiB*: "
        "the kernel's peak resident memory; *device MiB*: the accelerator allocator's peak. *GFLOP/s*: the "
        "model's FLOPs per sample (a training step; ResNet-50: a forward pass; `support/flops.py`) times compute "
        "samples/s; *MFU*: that over the run's measured peak (below). "
        f"{EMPTY}: not in the record (records of schema 1 predate these fields). "
        "*not timed*: the run shared the machine with another (`--jobs` above 1), so it shows no time. "
        "*Outside band*: the accuracy or AUC is further than "
        + ", ".join(f"{w} ({tasks.TASKS[t].short})" for t, w in BAND.items())
        + " from the median of the frameworks' (each framework counted once; DenseNet only at the full profile); "
        f"its times are marked {NOT_COMPARABLE} (not comparable). "
        "Parity error: the largest deviation from the numpy reference on shared weights, relative to the "
        "outputs' scale (`run_all.py --parity`; see LESSONS.md).",
        "",
    ]
    parts += calibration_section(rows, runs or {})
    for profile, task, task_rows in groups(baseline(rows)):
        if task == operators.TASK:
            parts += operators.section(task_rows, profile, operators.float32_peak(task_rows, runs or {}))
            continue
        images = f"![{task}](plots/{profile}/{task}.png)"
        if has_curves(task_rows):
            images += f" ![{task} learning curves](plots/{profile}/{task}-curve.png)"
        parts += [
            f"## {TASK_TITLES.get(task, task)} (profile `{profile}`)",
            "",
            markdown(environment_line(task_rows), one_line=True),
            "",
            markdown_table(results_table(task_rows)),
            "",
            images,
            "",
            *profiles.section(task_rows, task, profile),
        ]
    atomic_write(path, "\n".join(parts + variant_sections(rows)))


# --- the variant matrix: precision, compilation, batch-size sweeps, several devices ------------------------------


def variant_table(rows: list[dict]) -> Table:
    """One task's variant matrix: each framework line's baseline, then its variants (bf16, compiled, eager),
    with the speed-up of the compute throughput over the baseline, the MFU (each row over its own precision's
    peak), the metric, the compilation and parity."""
    metric = rows[0]["metric"] if METRICS.get(rows[0]["task"]) else None
    step = "batch" if is_inference(rows[0]["task"]) else "step"
    columns = [
        ("framework", False, line_title),
        ("variant", False, lambda r: r["matrix"] or "baseline"),
        ("precision", False, lambda r: r["precision"] or EMPTY),
        ("compiled", False, lambda r: {"on": "yes", "off": "no"}.get(r["compilation"], EMPTY)),
        ("status", False, status_cell),
        (f"{step} ms", True, lambda r: timed_cell(r, fmt_ms(r["step_median_s"])) if r["timed"] else "not timed"),
        (
            "images/s" if step == "batch" else "compute samples/s",
            True,
            lambda r: timed_cell(r, fmt(r["compute_samples_per_s"])),
        ),
        ("speed-up", True, lambda r: EMPTY if r["speedup"] is None else f"{r['speedup']:.2f}x"),
        ("MFU", True, lambda r: timed_cell(r, fmt_pct(r["mfu"]))),  # over the peak of the row's precision
        *([(metric, True, lambda r: metric_cell(r) if r["status"] == "ok" else EMPTY)] if metric else []),
        (f"first {step} s", True, lambda r: fmt(r["first_step_s"])),
        ("compile s", True, lambda r: fmt(r["compile_s"])),
        ("parity error", True, lambda r: EMPTY if r["parity_error"] is None else format(r["parity_error"], ".1e")),
    ]
    return column_table(columns, rows)


def sweep_table(rows: list[dict]) -> Table:
    """Per framework line and precision: samples/s and p95 latency at each batch size, and why the sweep stopped."""
    sizes = sorted({s["batch_size"] for r in rows for s in r["sweep"]["sizes"]})
    table = Table(
        ["framework", "variant", *(f"batch {b}" for b in sizes), "stopped"],
        [False, False, *(True for _ in sizes), False],
        [],
    )
    for r in rows:
        by_size = {s["batch_size"]: s for s in r["sweep"]["sizes"]}
        cells = [
            f"{fmt(by_size[b]['samples_per_s'])} ({fmt_ms(by_size[b]['p95_s'])} ms)" if b in by_size else EMPTY
            for b in sizes
        ]
        probed = r["sweep"].get("probed")
        stopped = r["sweep"]["stopped"] + (f" (probed {', '.join(map(str, probed))})" if probed else "")
        table.rows.append([line_title(r), r["matrix"], *cells, stopped])
    return table


def devices_table(pairs: list[tuple[dict, dict | None]]) -> Table:
    """The seed's multi-device table: per framework line and mode, the time per epoch on one device and on N,
    the speed-up and the scaling efficiency, the compute throughput on each, and the data-parallel check."""

    def check(r: dict) -> str:
        if r["data_parallel_error"] is None:
            return EMPTY
        return f"{r['data_parallel_error']:.1e} ({r['data_parallel_abs']:.1e})"

    columns = [
        ("framework", False, lambda r, o: line_title(dict(r, line=r["api"]))),
        ("mode", False, lambda r, o: r["mode"] or EMPTY),
        ("devices", True, lambda r, o: str(r["devices"])),
        ("global batch", True, lambda r, o: fmt(r["global_batch"])),
        ("status", False, lambda r, o: status_cell(r)),
        ("s/epoch, 1 device", True, lambda r, o: EMPTY if o is None else timed_cell(o, fmt(o["median_s"]))),
        ("s/epoch", True, lambda r, o: timed_cell(r, fmt(r["median_s"]))),
        ("speed-up", True, lambda r, o: EMPTY if scaling(r, o)[0] is None else f"{scaling(r, o)[0]:.2f}x"),
        ("efficiency", True, lambda r, o: EMPTY if scaling(r, o)[1] is None else fmt_pct(scaling(r, o)[1])),
        (
            "compute samples/s, 1 device",
            True,
            lambda r, o: EMPTY if o is None else timed_cell(o, fmt(o["compute_samples_per_s"])),
        ),
        ("compute samples/s", True, lambda r, o: timed_cell(r, fmt(r["compute_samples_per_s"]))),
        ("data-parallel check", True, lambda r, o: check(r)),
    ]
    return Table(
        [head for head, _, _ in columns],
        [right for _, right, _ in columns],
        [[show(r, o) for _, _, show in columns] for r, o in pairs],
    )


def devices_section(task: str, profile: str, pairs: list[tuple[dict, dict | None]]) -> list[str]:
    cpu = all((r["device"] or "cpu") == "cpu" for r, _ in pairs)
    where = (
        "These ran on CPU devices, which share the same cores: on this machine the table proves the data-parallel "
        "code correct, not faster. On a machine with N GPUs the same command (`run_all.py --devices 1,N`) "
        "measures real scaling."
        if cpu
        else "These ran on GPUs: the speed-up is the scaling of the framework's data parallelism on this machine."
    )
    return [
        f"## Several devices: {TASK_TITLES.get(task, task)} (profile `{profile}`)",
        "",
        "Each run on N devices against the same framework line on one device: the batch size is per device, so "
        "the global batch is N times larger and an epoch over the same images takes 1/N of the steps. "
        "*Speed-up*: the time per epoch on one device over that on N; *efficiency*: the speed-up per device. "
        "*Data-parallel check*: one plain SGD step on N devices against the same step on one device, from the "
        "same weights and on the same global batch (`support.parity.data_parallel`): the largest parameter "
        "difference relative to the largest update, and in brackets the largest difference itself. " + where,
        "",
        markdown_table(devices_table(pairs)),
        "",
    ]


def variant_sections(rows: list[dict]) -> list[str]:
    """results.md's part on the variant matrix: per profile and task, the variant table, the sweeps and the
    runs on several devices."""
    parts = []
    for profile, task, task_rows in groups(rows):
        pairs = device_rows(task_rows)
        parts += devices_section(task, profile, pairs) if pairs else []
        chosen, sweeps = matrix_rows(task_rows), sweep_rows(task_rows)
        if not chosen and not sweeps:
            continue
        title = TASK_TITLES.get(task, task)
        parts += [f"## Variants: {title} (profile `{profile}`)", ""]
        if chosen:
            parts += [
                "*Speed-up*: compute samples/s over the same framework line's baseline (fp32, the framework's "
                "default compilation). A combination a framework or device cannot run is listed with its "
                "reason, never run as another.",
                "",
                markdown_table(variant_table(chosen)),
                "",
                f"![{task} variants](plots/{profile}/{task}-variants.png)",
                "",
            ]
        if sweeps:
            unit = "batch" if is_inference(task) else "step"
            parts += [
                f"### Batch size ({title}, profile `{profile}`)",
                "",
                f"Each cell: samples/s at that batch size, and in brackets the 95th-percentile latency of one "
                f"{unit} (`support.timing.sweep`: untimed warm-up steps, then single timed steps). Before each "
                "size, its host memory is bounded by the peak so far scaled by the batch; where that bound is "
                "too loose for a size asked for, the sizes in between are probed with one untimed step each.",
                "",
                markdown_table(sweep_table(sweeps)),
                "",
                f"![{task} batch sizes](plots/{profile}/{task}-batch.png)",
                "",
            ]
    return parts
