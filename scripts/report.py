"""Turn a machine's JSON records into results.csv, Markdown tables, plots and the README table.

    python scripts/report.py results/<machine>     # rebuild the tables from the records there

Reads `records/<profile>/*.json` under the machine's folder (written by the notebooks, or by
the runner for a notebook that failed) and the run metadata `runs/<run>.json` the runner writes
(this machine's peak matmul GFLOP/s per precision before and after the suite, load averages, the
harness's own overhead), and writes, next to them:
- `results.csv`: one row per record, every profile (columns below);
- `results.md`: the machine calibration of every run the rows come from, then a table per profile
  and task: the steady-state step (median, IQR, min-max, n, CV), compute and end-to-end
  throughput, first step and compilation, peak memory, achieved GFLOP/s and MFU, the metric;
- `plots/<profile>/<task>.png`: throughput (compute, with the IQR of the step times as error bars,
  beside end to end), MFU, peak memory and the metric; `plots/<profile>/<task>-curve.png`: every
  framework's metric after each epoch (training tasks).
`update_readme()` puts one compact table per task, from each framework's most complete profile,
between the README's results markers.

Each row's numbers (support/records.py, schema 2):
- steady state (`step_*`): the record's `steps` (training steps on a batch already in memory, each
  repeat's time / its steps), or for an inference task its timed batches (`timing`);
- compute samples/s: `steps.samples_per_s` (inference: `timing.samples_per_s`); end to end:
  `timing.samples_per_s` over whole epochs, input pipeline included;
- GFLOP/s = FLOPs per sample (`flops.train`; inference: `flops.forward`) x compute samples/s / 1e9;
  MFU = that / the run's measured peak in the row's device and precision (`calibration.before
  ["cpu/float32"]`, `["cpu/bf16"]`, `["cuda/tf32"]`, ...: support.precision.peak_key). A run file
  missing or malformed, or one without that peak, leaves MFU empty and results.md says so.
Schema-1 records (written before these fields) show them empty ("—"), their `compile_s` too: it was
"first epoch minus median" in TensorFlow and Keras, not a compilation.

A record that cannot be read (not JSON, a field of the wrong type, filed under another name)
becomes a failed row that names the file and what is wrong; it never stops the build. A record
marked not timed (`run_all.py --jobs 2`) shows no time anywhere: its runs shared the machine.
Every file is written atomically (support.files). The tasks' titles, columns and bands come from
`support/tasks.py`.

Two cross-framework checks go into the tables rather than hiding a row:
- the band: every framework's accuracy (CNN, GRU) or AUC (DenseNet) should lie within its task's
  band of the median of the frameworks (same profile and data; a framework with several variants,
  Keras's backends, counts once, by its own median). What is compared is the better of the metric's
  last BAND_EPOCHS epochs in the run's curve, not the last epoch alone, so that one epoch's dip on one
  seed does not decide (a framework that learns worse sits low in both), while a curve still rising at
  the cpu profile's fourth epoch is judged by its end (their mean would judge it by its third); a row outside is flagged in results.md,
  the README table and the runner's output (`flagged()`), and its times are marked not comparable
  (†): as in MLPerf, a time counts only with its quality;
- structure: each row's parameter count beside its difference from PyTorch's, and the parity
  error (`max |outputs - numpy reference| / max |reference|` on shared weights) where the run
  had the parity step (`run_all.py --parity`).
"""
from __future__ import annotations

import csv
import json
import math
import re
import sys
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from scripts import suite  # noqa: E402
from support import precision as prec, tasks  # noqa: E402
from support.files import atomic_write, replacing  # noqa: E402
from support.records import METRICS, RecordError, read  # noqa: E402

COLUMNS = (
    "task", "framework", "variant", "line", "matrix", "precision", "compilation", "status", "profile", "data", "timed", "run",
    # end to end: the record's `timing` (epochs with their input pipeline; ResNet-50: batches)
    "unit", "median_s", "q1_s", "q3_s", "iqr_s", "cv", "n_timed", "warmup_s", "e2e_samples_per_s",
    # steady state: the record's `steps` (ResNet-50: its batches again), per step
    "step_median_s", "step_q1_s", "step_q3_s", "step_iqr_s", "step_min_s", "step_max_s", "step_p95_s", "step_cv",
    "step_n", "steps_per_repeat", "batch", "compute_samples_per_s",
    "first_step_s", "compile_s", "host_peak_bytes", "device_peak_bytes",
    "flops_per_sample", "gflops", "peak_gflops", "mfu",
    "metric", "value", "band", "curve", "n_parameters", "framework_version", "parity_error",
    "devices", "global_batch", "data_parallel_error", "data_parallel_abs",
    "python", "numpy", "device", "threads", "cuda", "cudnn", "machine", "git_commit", "date", "wall_s", "error")
# Every column that holds a time or a rate: empty for a run that shared the machine (not timed).
TIMING_COLUMNS = ("median_s", "q1_s", "q3_s", "iqr_s", "cv", "n_timed", "warmup_s", "e2e_samples_per_s",
                  "step_median_s", "step_q1_s", "step_q3_s", "step_iqr_s", "step_min_s", "step_max_s", "step_p95_s",
                  "step_cv", "step_n", "compute_samples_per_s", "first_step_s", "compile_s", "gflops", "mfu")
README_START, README_END = "<!-- results:start -->", "<!-- results:end -->"
TASK_TITLES = {name: task.title for name, task in tasks.TASKS.items()}
PROFILE_ORDER = {p: i for i, p in enumerate(suite.PROFILES)}
FRAMEWORK_ORDER = {f: i for i, f in enumerate(suite.FRAMEWORKS)}
EMPTY = "—"                 # a value the record does not have (schema 1, a failed run, an eager framework)
NOT_COMPARABLE = "†"        # beside the times of a row whose accuracy lies outside its band
DRIFT_LIMIT = 0.10          # warn when the peak measured after the suite differs from before by more
OVERHEAD_LIMIT = 0.01       # the harness's cost per lap should stay under this share of a step
MIB = 2 ** 20

# How far a framework's final accuracy or AUC may sit from the median of the frameworks' (support.tasks).
# They train the same model on the same data with the same schedule, so what is left is the seed and
# the initialiser: at the tiny and cpu profiles (a few hundred samples) that moves accuracy by a few
# points. DenseNet's AUC is only checked on the full profile: the smaller ones score too few images.
BAND = {name: task.band for name, task in tasks.TASKS.items() if task.band}
BAND_EPOCHS = 2     # the band judges the best of the metric over a run's last this many epochs (its curve)
SEED_RUN = re.compile(r"seed\d+")     # the matrix label of a baseline run again on another seed (--seeds)
BAND_PROFILES = {name: task.band_profiles for name, task in tasks.TASKS.items()}


def load_records(machine_dir: Path) -> list[dict]:
    """Every record under machine_dir/records/<profile>/; one that cannot be read, or that is filed
    under another task, framework, variant or profile than its own, becomes a failed row naming
    the file and the problem."""
    out = []
    for path in sorted((machine_dir / "records").glob("*/*.json")):
        try:
            record = read(path)
            filed = {"key": path.stem, "profile": path.parent.name}
            own = {"key": "__".join(filter(None, (record["task"], record["framework"], record["variant"]))),
                   "profile": record["profile"]}
            if own != filed:
                raise RecordError(f"{path}: the record is of {own['key']} at profile {own['profile']} but is filed "
                                  f"as {filed['key']} at {filed['profile']}: move it, or run that notebook again")
            out.append(record)
        except (OSError, RecordError) as err:
            task, _, rest = path.stem.partition("__")
            framework, _, variant = rest.partition("__")
            out.append({"task": task, "framework": framework or "?", "variant": variant, "status": "failed",
                        "profile": path.parent.name, "error": str(err)})
    return out


def number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def is_inference(task: str) -> bool:
    known = tasks.TASKS.get(task)
    return bool(known and known.unit == "batch")


def row(record: dict) -> dict:
    """Flatten one record into the CSV's columns (the MFU comes later, from the run's file: attach_peaks)."""
    timing, env = record.get("timing") or {}, record.get("environment") or {}
    metric = METRICS.get(record["task"]) or "images_per_s"
    value = (record.get("metrics") or {}).get(metric)
    inference = is_inference(record["task"])
    # The steady state: training steps on data in memory; an inference task's batches are its steps.
    steps = record.get("steps") or (timing if inference and record["status"] == "ok" else {})
    compute = steps.get("samples_per_s")
    if not steps:
        batch = None
    elif inference:
        batch = (record.get("params") or {}).get("batch_size")
    else:
        batch = compute * steps["median_s"] if number(compute) and number(steps.get("median_s")) else None
    flops = record.get("flops") or {}
    per_sample = flops.get("forward") if inference else flops.get("train")
    gflops = per_sample * compute / 1e9 if number(per_sample) and number(compute) else None
    memory = record.get("memory") or {}
    variant, matrix = record.get("variant", ""), suite.matrix_label(record.get("matrix") or {})
    line = variant[:-len(matrix)].rstrip("-") if matrix and variant.endswith(matrix) else variant
    out = {
        "task": record["task"], "framework": record["framework"], "variant": variant,
        # the notebook's own variant (Keras's backend, a mode) and the variant matrix's label ('' : baseline)
        "line": line, "matrix": matrix, "precision": record.get("precision"), "compilation": record.get("compilation"),
        "status": record["status"], "profile": record.get("profile"), "data": record.get("data"),
        "timed": record.get("timed", True), "run": record.get("run"),
        "unit": timing.get("unit"), "median_s": timing.get("median_s"), "q1_s": timing.get("q1_s"),
        "q3_s": timing.get("q3_s"), "iqr_s": timing.get("iqr_s"),
        "cv": timing.get("cv"), "n_timed": timing.get("n"),
        "warmup_s": (timing.get("warmup_s") or [None])[0], "e2e_samples_per_s": timing.get("samples_per_s"),
        "step_median_s": steps.get("median_s"), "step_q1_s": steps.get("q1_s"), "step_q3_s": steps.get("q3_s"),
        "step_iqr_s": steps.get("iqr_s"), "step_min_s": steps.get("min_s"), "step_max_s": steps.get("max_s"),
        "step_p95_s": steps.get("p95_s"), "step_cv": steps.get("cv"), "step_n": steps.get("n"),
        "steps_per_repeat": steps.get("steps_per_repeat"), "batch": batch, "compute_samples_per_s": compute,
        "first_step_s": record.get("first_step_s"),
        # Schema 1's compile_s was "first epoch minus median" in TensorFlow and Keras: not a compilation.
        "compile_s": record.get("compile_s") if (record.get("schema") or 0) >= 2 else None,
        "host_peak_bytes": memory.get("host_peak_bytes"), "device_peak_bytes": memory.get("device_peak_bytes"),
        "flops_per_sample": per_sample, "gflops": gflops, "peak_gflops": None, "mfu": None,
        "metric": metric, "value": value, "band": None, "curve": record.get("curve"),
        "n_parameters": record.get("n_parameters"),
        "parity_error": (record.get("parity") or {}).get("max_rel_error"),
        # data parallelism: the devices (the record's, else the matrix's) and the one-step check against one device
        "devices": record.get("devices") or (record.get("matrix") or {}).get("devices") or tasks.DEVICES_DEFAULT,
        "global_batch": record.get("global_batch_size"),
        "data_parallel_error": (record.get("data_parallel") or {}).get("max_rel_error"),
        "data_parallel_abs": (record.get("data_parallel") or {}).get("max_abs_diff"),
        "framework_version": env.get("framework_version"), "python": env.get("python"), "numpy": env.get("numpy"),
        "device": env.get("device"), "threads": env.get("threads"), "cuda": env.get("cuda"),
        "cudnn": env.get("cudnn"), "machine": env.get("machine"), "git_commit": env.get("git_commit"),
        "date": env.get("date"), "wall_s": record.get("wall_s"), "error": record.get("error"),
        "executed_notebook": record.get("executed_notebook"),      # not a CSV column: for the reader's links
        "sweep": record.get("sweep") if record.get("timed", True) else None,   # not a CSV column: sweeps.csv
    }
    if not out["timed"]:        # its runs shared the machine: no time of it is a measurement
        out.update(dict.fromkeys(TIMING_COLUMNS))
    return out


def sort_key(r: dict):
    return (PROFILE_ORDER.get(r["profile"], 99), suite.TASKS.index(r["task"]) if r["task"] in suite.TASKS else 99,
            FRAMEWORK_ORDER.get(r["framework"], 99), r["variant"] or "")


def mark_band(rows: list[dict]) -> None:
    """Set each row's `band` to 'in' or 'outside' (None where its task or profile has no band).
    A framework line run on several seeds (the runner's --seeds: rows 'seed43', ...) is judged by the mean over its
    seeds, its baseline and its seed rows alike. The centre is the median over frameworks, each framework counted
    once by the median of its own lines: Keras's three backends or MXNet's two APIs must not outvote the others."""
    groups_ = {}
    for r in rows:
        if (r["status"] == "ok" and r["task"] in BAND and r["value"] is not None
                and r["profile"] in BAND_PROFILES.get(r["task"], suite.PROFILES)):
            groups_.setdefault((r["profile"], r["task"], r["data"]), []).append(r)
    for (_, task, _), members in groups_.items():
        seeds = {}      # a framework line's baseline and its runs on other seeds
        for r in members:
            if not r["matrix"] or SEED_RUN.fullmatch(r["matrix"]):
                seeds.setdefault((r["framework"], r["line"]), []).append(r)
        for r in members:
            r["band_value"] = band_value(r)
        for family in seeds.values():
            mean = sum(band_value(r) for r in family) / len(family)
            for r in family:
                r["band_value"], r["band_seeds"] = mean, len(family)
        by_framework = {}
        for (framework, _), family in seeds.items():   # the centre is the baselines'; a variant is held to it
            if any(not r["matrix"] for r in family):
                by_framework.setdefault(framework, []).append(family[0]["band_value"])
        if len(by_framework) < 2:
            continue
        centre = median(median(values) for values in by_framework.values())
        for r in members:
            r["band"] = "outside" if abs(r["band_value"] - centre) > BAND[task] else "in"
            r["band_median"] = centre


def band_value(r: dict) -> float:
    """What the band judges: the better of the metric's last BAND_EPOCHS epochs in the row's curve (the metric
    itself where the run kept no curve)."""
    curve = [v for v in (r.get("curve") or []) if v is not None]
    return float(max(curve[-BAND_EPOCHS:])) if curve else r["value"]


def flagged(rows: list[dict]) -> list[str]:
    """One line per row outside its task's band, for the runner to print."""
    return [f"{r['task']}/{name(r)} ({r['profile']}): {r['metric']} {r['band_value']:.3f} (the better of its last "
            f"{BAND_EPOCHS} epochs" + (f", the mean over {r['band_seeds']} seeds" if r.get("band_seeds", 1) > 1 else "")
            + f") is more than {BAND[r['task']]} from the median {r['band_median']:.3f} of the frameworks"
            for r in rows if r["band"] == "outside"]


# --- the run metadata: the machine's peak FLOP/s, measured by the runner -----------------------------

def run_path(machine_dir: Path, run_id: str) -> Path:
    return machine_dir / "runs" / f"{run_id}.json"


def peak_key(r: dict) -> str:
    """The calibration a row's MFU divides by: its device's peak in its own precision ('cpu/float32',
    'cpu/bf16', 'cuda/tf32', ...); a run that measured no such peak leaves the row without MFU."""
    return prec.peak_key(r.get("device") or "", r.get("precision") or prec.BASELINE)


def peak(meta: dict, key: str, when: str = "before") -> float | None:
    """calibration[when][key].gflops where it is a positive number, else None."""
    entry = ((meta.get("calibration") or {}).get(when) or {}).get(key)
    gflops = entry.get("gflops") if isinstance(entry, dict) else None
    return float(gflops) if number(gflops) and gflops > 0 else None


def load_runs(machine_dir: Path, rows: list[dict]) -> dict[str, dict]:
    """{run id: {"path", "meta" (None when unusable), "problem" (why, or None)}} for every run the rows name."""
    runs = {}
    for run_id in dict.fromkeys(r["run"] for r in rows if r.get("run")):
        path, meta, problem = run_path(machine_dir, run_id), None, None
        if not re.fullmatch(r"[\w.-]+", run_id):
            problem = "not a run id"
        else:
            try:
                meta = json.loads(path.read_text(encoding="utf-8"))
                if not isinstance(meta, dict) or not isinstance(meta.get("calibration"), dict) or not all(
                        isinstance(v, dict) for v in meta["calibration"].values()):
                    meta, problem = None, "malformed (no calibration object)"
            except FileNotFoundError:
                problem = "missing"
            except (OSError, UnicodeDecodeError, ValueError) as err:
                problem = f"not readable JSON ({' '.join(str(err).split())[:80]})"
        runs[run_id] = {"path": path, "meta": meta, "problem": problem}
    return runs


def attach_peaks(rows: list[dict], runs: dict[str, dict]) -> None:
    """Each row's peak GFLOP/s (its run's calibration before the suite) and MFU = achieved / peak."""
    for r in rows:
        run = runs.get(r.get("run") or "")
        if r["gflops"] is None or run is None or run["meta"] is None:
            continue
        r["peak_gflops"] = peak(run["meta"], peak_key(r))
        if r["peak_gflops"]:
            r["mfu"] = r["gflops"] / r["peak_gflops"]


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


# --- formatting ---------------------------------------------------------------------------------------

def table_line(cells) -> str:
    """One Markdown table row of already formatted cells."""
    return "| " + " | ".join(cells) + " |"


def table_head(columns) -> list[str]:
    """A Markdown table's head and alignment row from (head, right-aligned, cell) columns."""
    return [table_line(head for head, _, _ in columns),
            "|" + "|".join("---:" if right else "---" for _, right, _ in columns) + "|"]


def cell(value) -> str:
    """Text that stays inside one Markdown table cell: `|` escaped, line breaks turned into spaces."""
    return " ".join(str(value).split()).replace("|", "\\|")


def fmt(value, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return EMPTY
    if isinstance(value, float):
        return f"{value:.{digits}g}" if abs(value) < 10 ** digits else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def fmt_metric(value) -> str:
    """Accuracy and AUC to three decimals; a throughput as fmt() does."""
    if isinstance(value, float) and value <= 1:
        return f"{value:.3f}"
    return fmt(value)


def fmt_ms(seconds, digits: int = 3) -> str:
    return fmt(None if seconds is None else seconds * 1000.0, digits)


def fmt_pct(fraction, digits: int = 2) -> str:
    return EMPTY if fraction is None else f"{fmt(100.0 * fraction, digits)}%"


def fmt_mib(n_bytes) -> str:
    return fmt(None if n_bytes is None else n_bytes / MIB)


def fmt_range_ms(low, high) -> str:
    return EMPTY if low is None or high is None else f"{fmt_ms(low)}–{fmt_ms(high)}"


def name(r: dict) -> str:
    return cell(r["framework"] + (f" ({r['variant']})" if r["variant"] else ""))


def comparable(r: dict) -> bool:
    """False for a row whose accuracy or AUC lies outside its band: its time counts for nothing."""
    return r["band"] != "outside"


def timed_cell(r: dict, text: str) -> str:
    """A time or a rate, marked not comparable where the row's quality is outside its band."""
    return text + (NOT_COMPARABLE if text != EMPTY and not comparable(r) else "")


def metric_cell(r: dict) -> str:
    """The accuracy or AUC, with a flag when it lies outside its task's band."""
    return fmt_metric(r["value"]) + (" **outside band**" if r["band"] == "outside" else "")


def parameters_cell(r: dict, reference: int | None) -> str:
    """The count, and its difference from PyTorch's where there is one."""
    n = r["n_parameters"]
    if n is None or reference is None or n == reference or r["framework"] == "pytorch":
        return fmt(n)
    return f"{fmt(n)} ({n - reference:+,})"


def not_comparable_note(rows: list[dict]) -> str:
    return (f"{NOT_COMPARABLE} Not comparable: the row's {rows[0]['metric']} lies outside the band around the other "
            "frameworks', and a time counts only with its quality (as in MLPerf).")


def has_device_memory(rows: list[dict]) -> bool:
    return any(r.get("device_peak_bytes") for r in rows)


# --- results.md -----------------------------------------------------------------------------------------

def task_table(rows: list[dict]) -> str:
    """One task's rows: steady state, throughput, first step and compilation, memory, FLOP/s, the metric."""
    inference = is_inference(rows[0]["task"])
    metric = rows[0]["metric"] if METRICS.get(rows[0]["task"]) else None
    reference = next((r["n_parameters"] for r in rows if r["framework"] == "pytorch" and r["n_parameters"]), None)
    step = "batch" if inference else "step"
    columns = [  # (head, right-aligned, cell)
        ("framework", False, name),
        ("status", False, lambda r: r["status"] if r["status"] == "ok"
         else f"**{r['status']}**: {cell((r['error'] or '')[:160])}"),
        (f"{step} ms (median)", True, lambda r: timed_cell(r, fmt_ms(r["step_median_s"])) if r["timed"]
         else "not timed"),
        ("IQR ms", True, lambda r: fmt_ms(r["step_iqr_s"], 2)),
        ("min–max ms", True, lambda r: fmt_range_ms(r["step_min_s"], r["step_max_s"])),
        *([("p95 ms", True, lambda r: fmt_ms(r["step_p95_s"]))] if inference else []),
        ("n", True, lambda r: fmt(r["step_n"])),
        ("CV", True, lambda r: fmt_pct(r["step_cv"])),
        ("images/s" if inference else "compute samples/s", True,
         lambda r: timed_cell(r, fmt(r["compute_samples_per_s"]))),
        *([] if inference else [
            ("s/epoch (IQR)", True, lambda r: timed_cell(r, fmt(r["median_s"])) + (
                f" ({fmt(r['iqr_s'], 2)})" if r["iqr_s"] is not None else "")),
            ("end-to-end samples/s", True, lambda r: timed_cell(r, fmt(r["e2e_samples_per_s"])))]),
        (f"first {step} s", True, lambda r: fmt(r["first_step_s"])),
        ("compile s", True, lambda r: fmt(r["compile_s"])),
        ("host MiB", True, lambda r: fmt_mib(r["host_peak_bytes"])),
        *([("device MiB", True, lambda r: fmt_mib(r["device_peak_bytes"]))] if has_device_memory(rows) else []),
        ("GFLOP/s", True, lambda r: timed_cell(r, fmt(r["gflops"]))),
        ("MFU", True, lambda r: timed_cell(r, fmt_pct(r["mfu"]))),
        *([(metric, True, metric_cell)] if metric else []),
        ("parameters (vs pytorch)", True, lambda r: parameters_cell(r, reference)),
        ("parity error", True, lambda r: EMPTY if r["parity_error"] is None else format(r["parity_error"], ".1e")),
        ("version", False, lambda r: cell(r["framework_version"] or EMPTY)),
        ("data", False, lambda r: cell(r["data"] or EMPTY)),
    ]
    lines = table_head(columns)
    lines += [table_line(show(r) for _, _, show in columns) for r in rows]
    if not all(comparable(r) for r in rows):
        lines += ["", not_comparable_note(rows)]
    return "\n".join(lines)


def groups(rows: list[dict]):
    """(profile, task, rows) in table order."""
    keys = sorted({(r["profile"], r["task"]) for r in rows},
                  key=lambda k: (PROFILE_ORDER.get(k[0], 99), suite.TASKS.index(k[1]) if k[1] in suite.TASKS else 99))
    for profile, task in keys:
        yield profile, task, [r for r in rows if (r["profile"], r["task"]) == (profile, task)]


def environment_line(rows: list[dict]) -> str:
    ok = [r for r in rows if r["status"] == "ok"]
    if not ok:
        return ""
    r = ok[0]
    days = sorted({x["date"][:10] for x in ok if x["date"]})
    when = f", {days[0]}" + (f" to {days[-1]}" if len(days) > 1 else "") if days else ""
    commits = list(dict.fromkeys(x["git_commit"] for x in ok if x["git_commit"]))   # runs of several commits
    commit = f"commit{'s' if len(commits) > 1 else ''} {', '.join(commits) or '-'}"
    return cell(f"Machine `{r['machine']}` ({r['device']}, {r['threads']} threads), Python {r['python']}, "
                f"{commit}{when}")


def has_curves(rows: list[dict]) -> bool:
    return any(r["status"] == "ok" and r.get("curve") for r in rows)


def calibration_section(rows: list[dict], runs: dict[str, dict]) -> list[str]:
    """Per run the rows come from: the peak GFLOP/s before and after the suite (a warning where they
    differ by more than DRIFT_LIMIT), the load averages, the harness overhead against the shortest step."""
    parts = ["## Machine calibration", "",
             "Each run measures this machine's peak GFLOP/s per precision (`scripts/calibrate.py`: a large matmul "
             "in every BLAS at hand and a oneDNN 3x3 convolution, the fastest kept, warm-up, then 7 repeats of the "
             "calls that fit each kernel's time budget, median; float32 and bfloat16 on the CPU, float32 with TF32 "
             "off, TF32, bfloat16 and float16 on a GPU, each only where the device computes it) before "
             "and after the suite; a row's MFU divides by the peak before in the row's own precision. "
             "A peak that moved by more than 10% means the machine was not equally fast throughout.", ""]
    if not runs:
        return parts + ["No row names a run of `run_all.py` (records written before the run metadata, or by a "
                        "notebook alone): no MFU.", ""]
    for run_id, run in runs.items():
        run_rows = [r for r in rows if r.get("run") == run_id]
        if run["meta"] is None:
            parts += [f"**No MFU for run `{run_id}`**: its run file `runs/{run_id}.json` is {run['problem']}; "
                      f"its {len(run_rows)} {'row shows' if len(run_rows) == 1 else 'rows show'} no MFU.", ""]
            continue
        meta = run["meta"]
        when = " to ".join(str(meta[k]) for k in ("started", "ended") if meta.get(k))
        wall = f", {fmt(float(meta['wall_s']))} s wall" if number(meta.get("wall_s")) else ""
        profiles = ", ".join(f"`{p}`" for p in meta.get("profiles") or []) if isinstance(
            meta.get("profiles"), list) else ""
        parts += [f"### Run `{run_id}`", "",
                  cell(f"Profiles {profiles or '-'}; {when or 'start unknown'}{wall}; "
                       f"{len(run_rows)} rows here; file `runs/{run_id}.json`."), ""]
        calibration = meta["calibration"]
        before, after = calibration.get("before") or {}, calibration.get("after") or {}
        keys = list(dict.fromkeys([*before, *after]))
        warnings = []
        if keys:
            parts += ["| device/dtype | peak GFLOP/s before | after | change | best lap before GFLOP/s | library |",
                      "|---|---:|---:|---:|---:|---|"]
            for key in keys:
                first, last = peak(meta, key, "before"), peak(meta, key, "after")
                change = last / first - 1 if first and last else None
                first_entry, last_entry = (e if isinstance(e, dict) else {} for e in (before.get(key), after.get(key)))
                best = first_entry.get("gflops_max")
                library = first_entry.get("library") or last_entry.get("library")
                parts.append(f"| {cell(key)} | {fmt(first)} | {fmt(last)} | "
                             f"{EMPTY if change is None else f'{100 * change:+.1f}%'} | "
                             f"{fmt(float(best)) if number(best) else EMPTY} | {cell(library or EMPTY)} |")
                if change is not None and round(abs(change), 9) > DRIFT_LIMIT:     # 10.0% exactly is not more
                    warnings.append(f"**WARNING**: the {key} peak moved from {fmt(first)} to {fmt(last)} GFLOP/s "
                                    f"({100 * change:+.1f}%) between the start and the end of run `{run_id}`, more "
                                    f"than {100 * DRIFT_LIMIT:.0f}%: the machine was not equally fast throughout "
                                    "(throttling, or another load); compare this run's times with care.")
            parts.append("")
        else:
            parts += ["No peak was measured in this run (the calibration failed): its rows show no MFU.", ""]
        if before and not after:
            parts += ["No peak after the suite (the run was interrupted, or the calibration failed): "
                      "no drift check.", ""]
        skipped = meta.get("calibration_errors") if isinstance(meta.get("calibration_errors"), dict) else {}
        parts += [cell(f"No {key} peak: {why}") for key, why in skipped.items()] + ([""] if skipped else [])
        missing = sorted({peak_key(r) for r in run_rows if r["gflops"] is not None and r["mfu"] is None})
        if before and missing:
            parts += [f"No {', '.join(missing)} peak in this run (runs before 2026-11-27 measured float32 only): "
                      "its rows in that precision on that device show no MFU.", ""]
        parts += warnings + ([""] if warnings else [])
        parts += [load_line(meta), "", overhead_line(meta, run_rows), ""]
    return parts


def load_line(meta: dict) -> str:
    def shown(load):
        if isinstance(load, list) and len(load) == 3 and all(number(x) for x in load):
            return ", ".join(f"{x:.2f}" for x in load)
        return "not measured"
    return (f"Load average (1, 5, 15 min): before {shown(meta.get('load_before'))}; "
            f"after {shown(meta.get('load_after'))}.")


def overhead_line(meta: dict, run_rows: list[dict]) -> str:
    """The harness's cost per lap, and its largest share of a steady-state step over the run's rows."""
    overhead = meta.get("harness_overhead_s")
    if not number(overhead):
        return "Harness overhead: not measured in this run."
    head = f"Harness overhead: {fmt(overhead * 1e6)} µs per timed lap (`support.timing.overhead`)"
    stepped = [r for r in run_rows if r["status"] == "ok" and number(r["step_median_s"]) and r["step_median_s"] > 0]
    if not stepped:
        return head + "; no timed step in this run to compare it with."
    worst = max(stepped, key=lambda r: overhead / r["step_median_s"])
    share = overhead / worst["step_median_s"]
    where = (f"{worst['task']}/{name(worst)} ({worst['profile']}), {fmt_ms(worst['step_median_s'])} ms per "
             f"{'batch' if is_inference(worst['task']) else 'step'}")
    if share < OVERHEAD_LIMIT:
        return (f"{head}; its largest share of a step over this run's rows is {fmt(share * 100, 2)}% ({where}): "
                "under 1%.")
    return (f"**WARNING**: {head[0].lower()}{head[1:]} is {fmt(share * 100, 2)}% of a step ({where}), not under 1%: "
            "the shortest steps' times carry the harness's own cost.")


def write_markdown(rows: list[dict], path: Path, machine: str, runs: dict[str, dict] | None = None) -> None:
    """The calibration of every run, a table per profile and task of the baselines, then the variant matrix."""
    parts = [f"# Results on `{machine}`", "",
             "Generated by `scripts/report.py` from the JSON records beside this file; do not edit by hand. "
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
             "outputs' scale (`run_all.py --parity`; see LESSONS.md).", ""]
    parts += calibration_section(rows, runs or {})
    for profile, task, task_rows in groups(baseline(rows)):
        images = f"![{task}](plots/{profile}/{task}.png)"
        if has_curves(task_rows):
            images += f" ![{task} learning curves](plots/{profile}/{task}-curve.png)"
        parts += [f"## {TASK_TITLES.get(task, task)} (profile `{profile}`)", "", environment_line(task_rows), "",
                  task_table(task_rows), "", images, ""]
    atomic_write(path, "\n".join(parts + variant_sections(rows)))


# --- plots ------------------------------------------------------------------------------------------------

def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _save(fig, path: Path) -> None:
    with replacing(path) as tmp:
        fig.savefig(tmp, dpi=100, format="png")


def throughput_error(r: dict) -> tuple[float, float]:
    """(below, above) the compute samples/s: the q3 and q1 step times converted to samples/s."""
    rate, batch, q1, q3 = r["compute_samples_per_s"], r["batch"], r["step_q1_s"], r["step_q3_s"]
    if not all(number(x) and x > 0 for x in (rate, batch, q1, q3)):
        return 0.0, 0.0
    return max(rate - batch / q3, 0.0), max(batch / q1 - rate, 0.0)


def plot(task_rows: list[dict], path: Path, title: str) -> None:
    """Throughput (compute with IQR error bars, end to end beside it), MFU, peak memory and the metric."""
    plt = _pyplot()
    from matplotlib.patches import Patch

    inference = is_inference(task_rows[0]["task"])
    metric = METRICS.get(task_rows[0]["task"])
    labels = [name(r) + ("" if comparable(r) else f" {NOT_COMPARABLE}") for r in task_rows]
    panels = 3 + bool(metric)
    fig, axes = plt.subplots(1, panels, figsize=(4.3 * panels, 0.5 * len(task_rows) + 2.0), sharey=True,
                             squeeze=False)
    ax_t, ax_u, ax_mem = axes[0][:3]
    y = list(range(len(task_rows)))
    handles, filled = {}, set()

    def missing(r):
        if r["status"] != "ok":
            return r["status"]
        return EMPTY if r["timed"] else "not timed"

    def bars(ax, values, offset, height, color, label, errors=None, text=fmt, hatch_flagged=True):
        shown = [v if number(v) else 0 for v in values]
        colors = [color if number(v) else "lightgrey" for v in values]
        drawn = ax.barh([i + offset for i in y], shown, height=height, color=colors,
                        xerr=errors, capsize=3 if errors else 0)
        if label:
            handles.setdefault(ax, []).append(Patch(color=color, label=label))
        if any(number(v) for v in values):
            filled.add(ax)
        for bar, r in zip(drawn, task_rows):
            if hatch_flagged and not comparable(r):
                bar.set_hatch("//")
        for i, (v, r) in enumerate(zip(values, task_rows)):
            right = shown[i] + (errors[1][i] if errors else 0)         # the label clears the error bar
            ax.text(right, i + offset, f" {text(v)}" if number(v) else f" {missing(r)}", va="center", fontsize=7)

    compute = [r["compute_samples_per_s"] for r in task_rows]
    errors = [list(e) for e in zip(*(throughput_error(r) for r in task_rows))]
    if inference:
        bars(ax_t, compute, 0, 0.7, "tab:blue", None, errors)
        ax_t.set_xlabel("images/s (bar: IQR of the batch times)")
    else:
        bars(ax_t, compute, -0.2, 0.4, "tab:blue", "compute: steady-state steps (bar: IQR)", errors)
        bars(ax_t, [r["e2e_samples_per_s"] for r in task_rows], 0.2, 0.4, "tab:orange", "end to end: epochs")
        ax_t.set_xlabel("samples/s")
    bars(ax_u, [None if r["mfu"] is None else 100 * r["mfu"] for r in task_rows], 0, 0.7, "tab:purple", None,
         text=lambda v: f"{fmt(v, 2)}%")
    ax_u.set_xlabel("MFU, % of the measured matmul peak in the row's precision")
    if has_device_memory(task_rows):
        bars(ax_mem, [r["host_peak_bytes"] and r["host_peak_bytes"] / MIB for r in task_rows], -0.2, 0.4,
             "tab:brown", "host (peak RSS)", hatch_flagged=False)
        bars(ax_mem, [r["device_peak_bytes"] and r["device_peak_bytes"] / MIB for r in task_rows], 0.2, 0.4,
             "tab:olive", "device (allocator peak)", hatch_flagged=False)
    else:
        bars(ax_mem, [r["host_peak_bytes"] and r["host_peak_bytes"] / MIB for r in task_rows], 0, 0.7,
             "tab:brown", None, hatch_flagged=False)
    ax_mem.set_xlabel("peak memory, MiB" + ("" if has_device_memory(task_rows) else " (host, resident)"))
    if metric:
        ax_m = axes[0][3]
        scored = [r["value"] if r["status"] == "ok" else None for r in task_rows]
        bars(ax_m, scored, 0, 0.7, "tab:green", None, text=fmt_metric, hatch_flagged=False)
        ax_m.set_xlabel(task_rows[0]["metric"] + ("" if all(comparable(r) for r in task_rows)
                                                 else f"  ({NOT_COMPARABLE}: outside the band, time not comparable)"))
    ax_t.set_yticks(y, labels)
    ax_t.invert_yaxis()
    for ax in axes[0]:
        if ax in filled:
            ax.margins(x=0.25)
            ax.set_xlim(left=0)
        else:                                       # nothing measured (schema-1 records, failed runs)
            ax.set_xlim(0, 1)
            ax.set_xticks([])
            ax.text(0.5, 0.5, "not in these records", transform=ax.transAxes, ha="center", color="grey")
        if ax in handles:
            ax.legend(handles=handles[ax], fontsize=7, loc="best")
    fig.suptitle(title)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def plot_curves(task_rows: list[dict], path: Path, title: str) -> bool:
    """Every framework's metric after each epoch; False (and nothing written) where no row has a curve."""
    curves = [r for r in task_rows if r["status"] == "ok" and r.get("curve")]
    if not curves:
        return False
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8.5, 4.5))
    colors = plt.get_cmap("tab10" if len(curves) <= 10 else "tab20").colors
    for i, r in enumerate(curves):
        epochs = range(1, len(r["curve"]) + 1)
        ax.plot(epochs, r["curve"], marker="o", markersize=3, color=colors[i % len(colors)],
                linestyle="-" if comparable(r) else "--",
                label=name(r) + ("" if comparable(r) else f" {NOT_COMPARABLE} outside band"))
    ax.set_xlabel("epoch")
    ax.set_ylabel(curves[0]["metric"])
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title(title)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)
    return True


# --- the README table -------------------------------------------------------------------------------------

def headline_profile(rows: list[dict]) -> str | None:
    """The most complete profile present: full, else cpu, else tiny."""
    present = {r["profile"] for r in rows}
    return next((p for p in suite.PROFILES if p in present), None)


def split_variant(r: dict) -> tuple[str, str]:
    """(framework variant, task mode): 'jax-ram' -> ('jax', 'ram'); a task's mode is always last."""
    task = tasks.TASKS.get(r["task"])
    if task and task.modes:
        *rest, mode = (r["variant"] or "").split("-")
        return "-".join(rest), mode
    return r["variant"] or "", ""


def provenance(rows: list[dict], machine: str) -> str:
    """Where one profile's rows come from: profile, machine, data kind, then environment_line()."""
    profiles = ", ".join(f"`{p}`" for p in dict.fromkeys(r["profile"] for r in rows))
    kinds = sorted({r["data"] for r in rows if r["data"]})
    machine_line = environment_line(rows)
    return f"Profile {profiles} on `{machine}`; data: {', '.join(kinds) or '-'}." + (f" {machine_line}." if machine_line else "")


def readme_rows(rows: list[dict]) -> list[dict]:
    """Per framework and variant, the rows of the most complete profile it has (full, else cpu, else
    tiny). On a GPU machine a framework whose build sees no GPU runs `cpu` beside the others' `full`."""
    best: dict[tuple, str] = {}
    for r in rows:
        line = (r["framework"], split_variant(r)[0])
        if line not in best or PROFILE_ORDER.get(r["profile"], 99) < PROFILE_ORDER.get(best[line], 99):
            best[line] = r["profile"]
    return [r for r in rows if best[(r["framework"], split_variant(r)[0])] == r["profile"]]


def shows_metric(r: dict) -> bool:
    """Whether the README shows this row's metric (DenseNet's RAM mode times the steps only)."""
    task = tasks.TASKS.get(r["task"])
    return bool(task and task.metric and (not task.metric_modes or split_variant(r)[1] in task.metric_modes))


def readme_step_cell(r: dict) -> str:
    if r["status"] != "ok":
        return r["status"]
    if not r["timed"]:
        return "not timed"
    if r["step_median_s"] is None:
        return EMPTY
    spread = ", ".join(part for part in (f"IQR {fmt_ms(r['step_iqr_s'], 2)}" if r["step_iqr_s"] is not None else "",
                                         f"n={r['step_n']}" if r["step_n"] else "") if part)
    return timed_cell(r, fmt_ms(r["step_median_s"])) + (f" ({spread})" if spread else "")


def readme_task_table(rows: list[dict]) -> list[str]:
    """One task's compact table: a line per framework and variant."""
    inference = is_inference(rows[0]["task"])
    mixed = len({r["profile"] for r in rows}) > 1
    device = has_device_memory(rows)
    metric = {"accuracy": "accuracy", "auc": "AUC"}.get(METRICS.get(rows[0]["task"]) or "")
    columns = [
        ("framework", False, name),
        *([("profile", False, lambda r: r["profile"])] if mixed else []),
        ("batch ms" if inference else "step ms", True, readme_step_cell),
        *([("p95 ms", True, lambda r: fmt_ms(r["step_p95_s"]))] if inference else []),
        ("images/s" if inference else "compute samples/s", True,
         lambda r: timed_cell(r, fmt(r["compute_samples_per_s"]))),
        *([] if inference else [("end-to-end samples/s", True, lambda r: timed_cell(r, fmt(r["e2e_samples_per_s"])))]),
        ("first batch s" if inference else "first step s", True, lambda r: fmt(r["first_step_s"])),
        ("compile s", True, lambda r: fmt(r["compile_s"])),
        ("host MiB", True, lambda r: fmt_mib(r["host_peak_bytes"])),
        *([("GPU MiB", True, lambda r: fmt_mib(r["device_peak_bytes"]))] if device else []),
        ("GFLOP/s", True, lambda r: timed_cell(r, fmt(r["gflops"]))),
        ("MFU", True, lambda r: timed_cell(r, fmt_pct(r["mfu"]))),
        *([(metric, True, lambda r: (fmt_metric(r["value"]) + (" !" if r["band"] == "outside" else ""))
            if r["status"] == "ok" and shows_metric(r) else EMPTY)] if metric else []),
    ]
    lines = table_head(columns)
    for r in rows:
        lines.append(table_line(show(r) if r["status"] == "ok" or i < 2 + mixed else EMPTY
                                for i, (_, _, show) in enumerate(columns)))
    return lines


def readme_table(rows: list[dict], machine: str) -> str:
    """The provenance, a legend, then one table per task (support.tasks order), each line from its
    framework's most complete profile; a profile column appears where a task's lines' profiles differ."""
    rows = sorted(readme_rows(rows), key=lambda r: (FRAMEWORK_ORDER.get(r["framework"], 99), r["variant"] or ""))
    by_task = {task: [r for r in rows if r["task"] == task] for task in suite.TASKS}
    by_task.update({r["task"]: [x for x in rows if x["task"] == r["task"]] for r in rows if r["task"] not in by_task})
    mixed = any(len({r["profile"] for r in task_rows}) > 1 for task_rows in by_task.values())
    note = (f"{provenance(rows, machine)} "
            f"Details, spreads (IQR, min–max, CV), the machine calibration and plots: "
            f"[results/{machine}/results.md](results/{machine}/results.md)."
            + (" The lines come from different profiles (column `profile`): compare times only between lines of "
               "one profile." if mixed else "")
            + (" `not timed`: the run shared the machine (`--jobs`)." if any(not r["timed"] for r in rows) else ""))
    legend = ("*Step ms*: the steady-state training step on a batch in memory, median over n repeats with its IQR "
              "(ResNet-50: one inference batch, with its 95th percentile); *compute samples/s*: what that step "
              "implies; "
              "*end-to-end samples/s*: whole epochs, input pipeline included; *first step s*: its total time, "
              f"compilation included; *compile s*: the compilation alone ({EMPTY}: the framework runs eagerly); "
              "*host MiB*: peak resident memory; *GFLOP/s*: the model's FLOPs per sample times compute samples/s; "
              "*MFU*: that over this machine's matmul peak in the row's precision, measured at the start of the run."
              + (f" `!` and {NOT_COMPARABLE}: accuracy or AUC outside the band around the other frameworks', so the "
                 "row's time is not comparable." if any(r["band"] == "outside" for r in rows) else ""))
    parts = [note, "", legend]
    for task, task_rows in by_task.items():
        if task_rows:
            parts += ["", f"### {TASK_TITLES.get(task, task)}", "", *readme_task_table(task_rows)]
    return "\n".join(parts)


def update_readme(readme: Path, rows: list[dict], machine: str) -> None:
    text = readme.read_text()
    if README_START not in text or README_END not in text:
        raise SystemExit(f"{readme}: no {README_START} ... {README_END} markers to put the results between")
    before, rest = text.split(README_START, 1)
    after = rest.split(README_END, 1)[1]
    atomic_write(readme, f"{before}{README_START}\n{readme_table(rows, machine)}\n{README_END}{after}")


# --- machines side by side: results/index.md and the README ---------------------------------------------------

MACHINES_START, MACHINES_END = "<!-- machines:start -->", "<!-- machines:end -->"


def machine_rows(results: Path) -> dict[str, list[dict]]:
    """{machine folder: its baseline rows that ran}, from each results/<machine>/results.csv (what build wrote)."""
    found = {}
    for folder in sorted(p for p in results.iterdir() if (p / "results.csv").is_file()):
        with open(folder / "results.csv", newline="", encoding="utf-8") as handle:
            rows = [r for r in csv.DictReader(handle) if r.get("status") == "ok" and not r.get("matrix")
                    and number(_float(r.get("compute_samples_per_s")))]
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
    groups = sorted({(r["task"], r["profile"]) for rows in found.values() for r in rows},
                    key=lambda g: (list(suite.TASKS).index(g[0]) if g[0] in suite.TASKS else 99, g[1]))
    for task, profile in groups:
        machines = {m: {(r["framework"], r.get("line") or r.get("variant") or ""): r for r in rows
                        if (r["task"], r["profile"]) == (task, profile)} for m, rows in found.items()}
        machines = {m: lines for m, lines in machines.items() if lines}
        if len(machines) < min_machines:
            continue
        ref = reference if reference in machines else min(machines, key=lambda m: (-len(machines[m]), m))
        lines = sorted({key for lines in machines.values() for key in lines},
                       key=lambda k: (FRAMEWORK_ORDER.get(k[0], 99), k[1]))
        names = list(machines)
        devices = [cell(next(iter(machines[m].values())).get("device") or EMPTY) for m in names]
        parts += [f"### {TASK_TITLES.get(task, task)}, profile `{profile}`", "",
                  "| framework | " + " | ".join(f"`{m}`{' (reference)' if m == ref else ''}" for m in names) + " |",
                  "|---|" + "---:|" * len(names),
                  "| *device* | " + " | ".join(devices) + " |"]
        for key in lines:
            label = f"{key[0]} ({key[1]})" if key[1] else key[0]
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
            parts.append(f"| {cell(label)} | " + " | ".join(cells) + " |")
        parts.append("")
    return parts


def write_machines(results: Path, readme: Path | None = None, reference: str | None = None) -> Path:
    """results/index.md: every machine's results, and the machines side by side; where `readme` has the machines
    markers, the groups with two machines or more between them."""
    found = machine_rows(results)
    intro = ("Each task's framework lines on every machine in `results/` (the seed's tables put hardware in "
             "columns): steady-state compute samples/s (ResNet-50: images/s; higher is faster), and in brackets "
             "the ratio to the reference machine (the one with the most lines of that profile). Only lines of one "
             "profile compare: its batch sizes and data are the same on every machine.")
    listed = []
    for folder in sorted(p for p in results.iterdir() if (p / "results.csv").is_file()):
        m = folder.name
        listed.append(f"- [`{m}`]({m}/results.md): {len(found[m])} baseline lines" if m in found else
                      f"- [`{m}`]({m}/results.md): no line with a steady-state step time (its records come before "
                      "that measure; their epoch times are in its results.md), so it is not in the tables below")
    index = ["# Results by machine", "", *listed, "",
             "## Machines side by side", "", intro, "", *machines_tables(results, reference)]
    path = results / "index.md"
    atomic_write(path, "\n".join(index).rstrip() + "\n")
    if readme and readme.exists():
        text = readme.read_text()
        if MACHINES_START in text and MACHINES_END in text:
            tables = machines_tables(results, reference, min_machines=2)
            body = [intro, "", *tables] if tables else [
                "No profile has run on two machines yet: [results/index.md](results/index.md) lists each machine."]
            before, rest = text.split(MACHINES_START, 1)
            after = rest.split(MACHINES_END, 1)[1]
            atomic_write(readme, f"{before}{MACHINES_START}\n" + "\n".join(body).rstrip() + f"\n{MACHINES_END}{after}")
    return path


# --- the variant matrix: precision, compilation, batch-size sweeps ------------------------------------------

SWEEP_COLUMNS = ("task", "framework", "variant", "profile", "precision", "compilation", "batch_size",
                 "samples_per_s", "median_s", "p95_s", "cv", "n", "first_s", "stopped")


def baseline(rows: list[dict]) -> list[dict]:
    """The rows of baseline runs (no variant of the matrix): the main tables, the README and the reader."""
    return [r for r in rows if not r["matrix"]]


def speedup(r: dict, rows: list[dict]) -> float | None:
    """Compute samples/s over that of the same framework line's baseline (same task, profile and data)."""
    base = next((b for b in rows if not b["matrix"] and b["status"] == "ok" and (b["task"], b["profile"], b["framework"],
                 b["line"], b["data"]) == (r["task"], r["profile"], r["framework"], r["line"], r["data"])), None)
    if base is None or r["status"] != "ok" or not (number(r["compute_samples_per_s"]) and
                                                   number(base["compute_samples_per_s"])):
        return None
    return r["compute_samples_per_s"] / base["compute_samples_per_s"]


def line_name(r: dict) -> str:
    return cell(r["framework"] + (f" ({r['line']})" if r["line"] else ""))


def status_cell(r: dict) -> str:
    """A variant's status: ok, or the status and the start of its reason (an unsupported combination's, say), cut
    after a whole word (the record holds it whole)."""
    if r["status"] == "ok":
        return "ok"
    reason = " ".join((r["error"] or "").split())
    if len(reason) > 200:
        reason = reason[:200].rsplit(" ", 1)[0] + " …"
    return f"**{r['status'].replace('_', ' ')}**: {cell(reason)}"


def variant_table(rows: list[dict]) -> str:
    """One task's variant matrix: each framework line's baseline, then its variants (bf16, compiled, eager),
    with the speed-up of the compute throughput over the baseline, the MFU (each row over its own precision's
    peak), the metric, the compilation and parity."""
    metric = rows[0]["metric"] if METRICS.get(rows[0]["task"]) else None
    step = "batch" if is_inference(rows[0]["task"]) else "step"
    columns = [
        ("framework", False, line_name),
        ("variant", False, lambda r: cell(r["matrix"] or "baseline")),
        ("precision", False, lambda r: cell(r["precision"] or EMPTY)),
        ("compiled", False, lambda r: {"on": "yes", "off": "no"}.get(r["compilation"], EMPTY)),
        ("status", False, status_cell),
        (f"{step} ms", True, lambda r: timed_cell(r, fmt_ms(r["step_median_s"])) if r["timed"] else "not timed"),
        ("images/s" if step == "batch" else "compute samples/s", True,
         lambda r: timed_cell(r, fmt(r["compute_samples_per_s"]))),
        ("speed-up", True, lambda r: EMPTY if r["speedup"] is None else f"{r['speedup']:.2f}x"),
        ("MFU", True, lambda r: timed_cell(r, fmt_pct(r["mfu"]))),          # over the peak of the row's precision
        *([(metric, True, lambda r: metric_cell(r) if r["status"] == "ok" else EMPTY)] if metric else []),
        (f"first {step} s", True, lambda r: fmt(r["first_step_s"])),
        ("compile s", True, lambda r: fmt(r["compile_s"])),
        ("parity error", True, lambda r: EMPTY if r["parity_error"] is None else format(r["parity_error"], ".1e")),
    ]
    lines = table_head(columns)
    lines += [table_line(show(r) for _, _, show in columns) for r in rows]
    return "\n".join(lines)


def matrix_rows(task_rows: list[dict]) -> list[dict]:
    """The rows of the variant table: every line that has a variant, its baseline first; sweeps and runs on
    several devices apart (their own tables)."""
    runs = [r for r in task_rows if "sweep" not in r["matrix"].split("-") and r["devices"] == tasks.DEVICES_DEFAULT]
    lines = {(r["framework"], r["line"]) for r in runs if r["matrix"]}
    chosen = [dict(r, speedup=speedup(r, task_rows)) for r in runs if (r["framework"], r["line"]) in lines]
    return sorted(chosen, key=lambda r: (FRAMEWORK_ORDER.get(r["framework"], 99), r["line"], r["matrix"] != "",
                                         r["matrix"]))


def sweep_rows(task_rows: list[dict]) -> list[dict]:
    return [r for r in task_rows if r.get("sweep") and r["status"] == "ok"]


def sweep_table(rows: list[dict]) -> str:
    """Per framework line and precision: samples/s and p95 latency at each batch size, and why the sweep stopped."""
    sizes = sorted({s["batch_size"] for r in rows for s in r["sweep"]["sizes"]})
    unit = "batch" if is_inference(rows[0]["task"]) else "step"
    lines = table_head([("framework", False, None), ("variant", False, None),
                        *((f"batch {b}", True, None) for b in sizes), ("stopped", False, None)])
    for r in rows:
        by_size = {s["batch_size"]: s for s in r["sweep"]["sizes"]}
        cells = [f"{fmt(by_size[b]['samples_per_s'])} ({fmt_ms(by_size[b]['p95_s'])} ms)" if b in by_size else EMPTY
                 for b in sizes]
        probed = r["sweep"].get("probed")
        stopped = r["sweep"]["stopped"] + (f" (probed {', '.join(map(str, probed))})" if probed else "")
        lines.append(table_line([line_name(r), cell(r["matrix"]), *cells, cell(stopped)]))
    return (f"Each cell: samples/s at that batch size, and in brackets the 95th-percentile latency of one {unit} "
            "(`support.timing.sweep`: untimed warm-up steps, then single timed steps). Before each size, its host "
            "memory is bounded by the peak so far scaled by the batch; where that bound is too loose for a size "
            "asked for, the sizes in between are probed with one untimed step each.\n\n" + "\n".join(lines))


def device_rows(task_rows: list[dict]) -> list[tuple[dict, dict | None]]:
    """(run on several devices, the same line's run on one device or None) for each run on several devices of
    the default precision and compilation, in table order."""
    def same(r: dict) -> tuple:
        return (r["framework"], r["line"], r["precision"], r["compilation"], r["data"])
    single = {same(r): r for r in task_rows if r["devices"] == tasks.DEVICES_DEFAULT and not r["matrix"]}
    several = [r for r in task_rows if r["devices"] != tasks.DEVICES_DEFAULT and r["matrix"] == f"{r['devices']}dev"]
    several.sort(key=lambda r: (FRAMEWORK_ORDER.get(r["framework"], 99), r["line"], r["devices"]))
    return [(r, single.get(same(r))) for r in several]


def scaling(several: dict, one: dict | None) -> tuple[float | None, float | None]:
    """(speed-up, scaling efficiency) of the time per epoch: one device's over several's, and that per device."""
    if one is None or not (number(one["median_s"]) and number(several["median_s"])) or \
            "ok" != several["status"] or "ok" != one["status"]:
        return None, None
    speed = one["median_s"] / several["median_s"]
    return speed, speed / several["devices"]


def devices_table(pairs: list[tuple[dict, dict | None]]) -> str:
    """The seed's multi-device table: per framework line and mode, the time per epoch on one device and on N,
    the speed-up and the scaling efficiency, the compute throughput on each, and the data-parallel check."""
    def check(r: dict) -> str:
        if r["data_parallel_error"] is None:
            return EMPTY
        return f"{r['data_parallel_error']:.1e} ({r['data_parallel_abs']:.1e})"
    columns = [
        ("framework", False, lambda r, o: line_name(dict(r, line=split_variant(dict(r, variant=r["line"]))[0]))),
        ("mode", False, lambda r, o: cell(split_variant(dict(r, variant=r["line"]))[1] or EMPTY)),
        ("devices", True, lambda r, o: str(r["devices"])),
        ("global batch", True, lambda r, o: fmt(r["global_batch"])),
        ("status", False, lambda r, o: status_cell(r)),
        ("s/epoch, 1 device", True, lambda r, o: EMPTY if o is None else timed_cell(o, fmt(o["median_s"]))),
        ("s/epoch", True, lambda r, o: timed_cell(r, fmt(r["median_s"]))),
        ("speed-up", True, lambda r, o: EMPTY if scaling(r, o)[0] is None else f"{scaling(r, o)[0]:.2f}x"),
        ("efficiency", True, lambda r, o: EMPTY if scaling(r, o)[1] is None else fmt_pct(scaling(r, o)[1])),
        ("compute samples/s, 1 device", True, lambda r, o: EMPTY if o is None else timed_cell(
            o, fmt(o["compute_samples_per_s"]))),
        ("compute samples/s", True, lambda r, o: timed_cell(r, fmt(r["compute_samples_per_s"]))),
        ("data-parallel check", True, lambda r, o: check(r)),
    ]
    lines = table_head([(head, right, None) for head, right, _ in columns])
    lines += [table_line(show(r, o) for _, _, show in columns) for r, o in pairs]
    return "\n".join(lines)


def devices_section(task: str, profile: str, pairs: list[tuple[dict, dict | None]]) -> list[str]:
    cpu = all((r["device"] or "cpu") == "cpu" for r, _ in pairs)
    where = ("These ran on CPU devices, which share the same cores: on this machine the table proves the data-parallel "
             "code correct, not faster. On a machine with N GPUs the same command (`run_all.py --devices 1,N`) "
             "measures real scaling." if cpu else
             "These ran on GPUs: the speed-up is the scaling of the framework's data parallelism on this machine.")
    return [f"## Several devices: {TASK_TITLES.get(task, task)} (profile `{profile}`)", "",
            "Each run on N devices against the same framework line on one device: the batch size is per device, so "
            "the global batch is N times larger and an epoch over the same images takes 1/N of the steps. "
            "*Speed-up*: the time per epoch on one device over that on N; *efficiency*: the speed-up per device. "
            "*Data-parallel check*: one plain SGD step on N devices against the same step on one device, from the "
            "same weights and on the same global batch (`support.parity.data_parallel`): the largest parameter "
            "difference relative to the largest update, and in brackets the largest difference itself. " + where,
            "", devices_table(pairs), ""]


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
        parts += [f"## Variants: {TASK_TITLES.get(task, task)} (profile `{profile}`)", ""]
        if chosen:
            parts += ["*Speed-up*: compute samples/s over the same framework line's baseline (fp32, the framework's "
                      "default compilation). A combination a framework or device cannot run is listed with its "
                      "reason, never run as another.", "", variant_table(chosen), "",
                      f"![{task} variants](plots/{profile}/{task}-variants.png)", ""]
        if sweeps:
            parts += [f"### Batch size ({TASK_TITLES.get(task, task)}, profile `{profile}`)", "", sweep_table(sweeps), "",
                      f"![{task} batch sizes](plots/{profile}/{task}-batch.png)", ""]
    return parts


def write_sweeps_csv(rows: list[dict], path: Path) -> None:
    """One row per batch size of every sweep."""
    with replacing(path) as tmp, open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=SWEEP_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for r in rows:
            for size in (r.get("sweep") or {}).get("sizes", []):
                writer.writerow({**{k: r.get(k) for k in SWEEP_COLUMNS}, **size, "stopped": r["sweep"]["stopped"]})


def plot_variants(chosen: list[dict], path: Path, title: str) -> bool:
    """A bar per framework line and variant: its speed-up over the line's baseline (1 = as fast)."""
    bars = [r for r in chosen if r["matrix"] and r["speedup"] is not None]
    if not bars:
        return False
    plt = _pyplot()
    labels = [f"{r['framework']}{' ' + r['line'] if r['line'] else ''}: {r['matrix']}" for r in bars]
    fig, ax = plt.subplots(figsize=(8, 0.4 * len(bars) + 1.5))
    colours = {label: plt.cm.tab10(i % 10) for i, label in enumerate(dict.fromkeys(r["matrix"] for r in bars))}
    ax.barh(range(len(bars)), [r["speedup"] for r in bars], color=[colours[r["matrix"]] for r in bars])
    for i, r in enumerate(bars):
        ax.text(r["speedup"], i, f" {r['speedup']:.2f}x", va="center", fontsize=8)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks(range(len(bars)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("speed-up over the baseline (compute samples/s)")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)
    return True


def plot_sweeps(sweeps: list[dict], path: Path, title: str) -> bool:
    """Throughput and 95th-percentile latency against the batch size, a line per framework line."""
    if not sweeps:
        return False
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for r in sweeps:
        sizes = r["sweep"]["sizes"]
        label = f"{r['framework']}{' ' + r['line'] if r['line'] else ''}" + (
            f" {r['matrix'].replace('-sweep', '').replace('sweep', '')}".rstrip())
        left.plot([s["batch_size"] for s in sizes], [s["samples_per_s"] for s in sizes], marker="o", label=label)
        right.plot([s["batch_size"] for s in sizes], [1e3 * s["p95_s"] for s in sizes], marker="o", label=label)
    for ax, what in ((left, "samples/s"), (right, "p95 latency, ms")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch size")
        ax.set_ylabel(what)
        ax.grid(True, which="both", alpha=0.3)
    left.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)
    return True


# --- building ---------------------------------------------------------------------------------------------

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
    write_csv(rows, machine_dir / "results.csv")
    write_sweeps_csv(rows, machine_dir / "sweeps.csv")
    base = baseline(rows)
    write_markdown(rows, machine_dir / "results.md", machine_dir.name, runs)
    for profile, task, task_rows in groups(rows):
        title = f"{TASK_TITLES.get(task, task)} ({profile} profile, {machine_dir.name})"
        folder = machine_dir / "plots" / profile
        base_rows = baseline(task_rows)
        if base_rows:
            plot(base_rows, folder / f"{task}.png", title)
            plot_curves(base_rows, folder / f"{task}-curve.png", f"{title}: learning curves")
        plot_variants(matrix_rows(task_rows), folder / f"{task}-variants.png", f"{title}: variants")
        plot_sweeps(sweep_rows(task_rows), folder / f"{task}-batch.png", f"{title}: batch size")
    if readme:
        update_readme(readme, base, machine_dir.name)
    print(f"wrote {machine_dir / 'results.csv'}, sweeps.csv, results.md and plots ({len(rows)} rows)")
    return rows


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python scripts/report.py results/<machine>")
    build(Path(sys.argv[1]))
