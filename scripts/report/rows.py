"""A machine's records as rows: one per record, flattened into results.csv's columns (`row`), in table order; the
accuracy band (`mark_band`, `flagged`); which rows each table takes (`baseline`, `matrix_rows`, `sweep_rows`,
`device_rows`). What the columns and the band mean: docs/methodology.md ("From records to tables").
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from statistics import median

from scripts import results, suite
from scripts.results import Identity, Layout
from support import tasks
from support.records import METRICS, RecordError

COLUMNS = (
    "task",
    "framework",
    "variant",
    "line",
    "matrix",
    "precision",
    "compilation",
    "status",
    "profile",
    "data",
    "timed",
    "run",
    # end to end: the record's `timing` (epochs with their input pipeline; ResNet-50: batches)
    "unit",
    "median_s",
    "q1_s",
    "q3_s",
    "iqr_s",
    "cv",
    "n_timed",
    "warmup_s",
    "e2e_samples_per_s",
    # steady state: the record's `steps` (ResNet-50: its batches again), per step
    "step_median_s",
    "step_q1_s",
    "step_q3_s",
    "step_iqr_s",
    "step_min_s",
    "step_max_s",
    "step_p95_s",
    "step_cv",
    "step_n",
    "steps_per_repeat",
    "batch",
    "compute_samples_per_s",
    "onnxruntime_samples_per_s",  # ONNX Runtime on the run's exported graph and batch (the reference runtime)
    "first_step_s",
    "compile_s",
    "host_peak_bytes",
    "device_peak_bytes",
    "flops_per_sample",
    "gflops",
    "peak_gflops",
    "mfu",
    "metric",
    "value",
    "band",
    "curve",
    "n_parameters",
    "framework_version",
    "parity_error",
    "devices",
    "global_batch",
    "data_parallel_error",
    "data_parallel_abs",
    "python",
    "numpy",
    "device",
    "threads",
    "cuda",
    "cudnn",
    "machine",
    "git_commit",
    "date",
    "wall_s",
    "error",
)
# Every column that holds a time or a rate: empty for a run that shared the machine (not timed).
TIMING_COLUMNS = (
    "median_s",
    "q1_s",
    "q3_s",
    "iqr_s",
    "cv",
    "n_timed",
    "warmup_s",
    "e2e_samples_per_s",
    "step_median_s",
    "step_q1_s",
    "step_q3_s",
    "step_iqr_s",
    "step_min_s",
    "step_max_s",
    "step_p95_s",
    "step_cv",
    "step_n",
    "compute_samples_per_s",
    "onnxruntime_samples_per_s",
    "first_step_s",
    "compile_s",
    "gflops",
    "mfu",
)
TASK_TITLES = {name: task.title for name, task in tasks.TASKS.items()}
PROFILE_ORDER = {p: i for i, p in enumerate(suite.PROFILES)}
FRAMEWORK_ORDER = {f: i for i, f in enumerate(suite.FRAMEWORKS)}

# How far a framework's final accuracy or AUC may sit from the median of the frameworks' (support.tasks).
# They train the same model on the same data with the same schedule, so what is left is the seed and
# the initialiser: at the tiny and cpu profiles (a few hundred samples) that moves accuracy by a few
# points. DenseNet's AUC is only checked on the full profile: the smaller ones score too few images.
BAND = {name: task.band for name, task in tasks.TASKS.items() if task.band}
BAND_EPOCHS = 2  # the band judges the best of the metric over a run's last this many epochs (its curve)
BAND_PROFILES = {name: task.band_profiles for name, task in tasks.TASKS.items()}


# --- records to rows ----------------------------------------------------------------------------------------------


def number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def is_inference(task: str) -> bool:
    known = tasks.TASKS.get(task)
    return bool(known and known.unit == "batch")


def load_records(machine_dir: Path) -> list[dict]:
    """Every record under machine_dir/records/<profile>/; one that cannot be read, or that is filed
    under another key or profile than its identity's, becomes a failed row naming the file and the problem."""
    out = []
    for path in Layout(machine_dir).record_files():
        try:
            record = results.read(path)
            own = {"key": results.identity(record).key, "profile": record["profile"]}
            if own != {"key": path.stem, "profile": path.parent.name}:
                raise RecordError(
                    f"{path}: the record is of {own['key']} at profile {own['profile']} but is filed "
                    f"as {path.stem} at {path.parent.name}: move it, or run that notebook again"
                )
            out.append(record)
        except (OSError, RecordError) as err:
            out.append(unreadable_row(path, str(err)))
    return out


def unreadable_row(path: Path, error: str) -> dict:
    """The failed row of a record that cannot be read: its file name is all there is to name it by, so its task and
    framework are the name's first two parts and the rest shows as its variant."""
    task, _, rest = path.stem.partition("__")
    framework, _, variant = rest.partition("__")
    return {
        "task": task,
        "framework": framework or "?",
        "variant": variant,
        "status": "failed",
        "profile": path.parent.name,
        "error": error,
        "identity": Identity(task, framework or "?").as_dict(),
    }


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
    run = Identity(**record["identity"]) if "identity" in record else results.identity(record)
    out = {
        "task": record["task"],
        "framework": record["framework"],
        "variant": run.variant if "schema" in record else record.get("variant", ""),  # an unreadable file: its name
        # the notebook's own variant (Keras's backend, a mode) and the variant matrix's label ('' : baseline)
        "line": run.line,
        "matrix": run.matrix_label,
        "api": run.api,
        "mode": run.mode,
        "seed": run.seed,
        "identity": run,  # not a CSV column: what the tables select rows by
        "precision": record.get("precision"),
        "compilation": record.get("compilation"),
        "status": record["status"],
        "profile": record.get("profile"),
        "data": record.get("data"),
        "timed": record.get("timed", True),
        "run": record.get("run"),
        "unit": timing.get("unit"),
        "median_s": timing.get("median_s"),
        "q1_s": timing.get("q1_s"),
        "q3_s": timing.get("q3_s"),
        "iqr_s": timing.get("iqr_s"),
        "cv": timing.get("cv"),
        "n_timed": timing.get("n"),
        "warmup_s": (timing.get("warmup_s") or [None])[0],
        "e2e_samples_per_s": timing.get("samples_per_s"),
        "step_median_s": steps.get("median_s"),
        "step_q1_s": steps.get("q1_s"),
        "step_q3_s": steps.get("q3_s"),
        "step_iqr_s": steps.get("iqr_s"),
        "step_min_s": steps.get("min_s"),
        "step_max_s": steps.get("max_s"),
        "step_p95_s": steps.get("p95_s"),
        "step_cv": steps.get("cv"),
        "step_n": steps.get("n"),
        "steps_per_repeat": steps.get("steps_per_repeat"),
        "batch": batch,
        "compute_samples_per_s": compute,
        "onnxruntime_samples_per_s": (record.get("onnxruntime") or {}).get("samples_per_s"),
        "first_step_s": record.get("first_step_s"),
        # Schema 1's compile_s was "first epoch minus median" in TensorFlow and Keras: not a compilation.
        "compile_s": record.get("compile_s") if (record.get("schema") or 0) >= 2 else None,
        "host_peak_bytes": memory.get("host_peak_bytes"),
        "device_peak_bytes": memory.get("device_peak_bytes"),
        "flops_per_sample": per_sample,
        "gflops": gflops,
        "peak_gflops": None,
        "mfu": None,
        "metric": metric,
        "value": value,
        "band": None,
        "curve": record.get("curve"),
        "n_parameters": record.get("n_parameters"),
        "parity_error": (record.get("parity") or {}).get("max_rel_error"),
        # data parallelism: the devices (the record's, else the matrix's) and the one-step check against one device
        "devices": record.get("devices") or run.devices,
        "global_batch": record.get("global_batch_size"),
        "data_parallel_error": (record.get("data_parallel") or {}).get("max_rel_error"),
        "data_parallel_abs": (record.get("data_parallel") or {}).get("max_abs_diff"),
        "framework_version": env.get("framework_version"),
        "python": env.get("python"),
        "numpy": env.get("numpy"),
        "device": env.get("device"),
        "threads": env.get("threads"),
        "cuda": env.get("cuda"),
        "cudnn": env.get("cudnn"),
        "machine": env.get("machine"),
        "git_commit": env.get("git_commit"),
        "date": env.get("date"),
        "wall_s": record.get("wall_s"),
        "error": record.get("error"),
        "executed_notebook": record.get("executed_notebook"),  # not a CSV column: for the reader's links
        "sweep": record.get("sweep") if record.get("timed", True) else None,  # not a CSV column: sweeps.csv
        # not a CSV column: the operator benchmarks' measurements (scripts/report/operators.py)
        "operators": record.get("operators") if record.get("timed", True) else None,
        # not CSV columns: where the training step goes (scripts/report/profiles.py) and its trace file
        "breakdown": record.get("breakdown") if record.get("timed", True) else None,
        "trace": record.get("trace"),
    }
    if not out["timed"]:  # its runs shared the machine: no time of it is a measurement
        out.update(dict.fromkeys(TIMING_COLUMNS))
    return out


def sort_key(r: dict):
    return (
        PROFILE_ORDER.get(r["profile"], 99),
        suite.TASKS.index(r["task"]) if r["task"] in suite.TASKS else 99,
        FRAMEWORK_ORDER.get(r["framework"], 99),
        r["variant"] or "",
    )


def groups(rows: list[dict]):
    """(profile, task, rows) in table order."""
    keys = sorted(
        {(r["profile"], r["task"]) for r in rows},
        key=lambda k: (PROFILE_ORDER.get(k[0], 99), suite.TASKS.index(k[1]) if k[1] in suite.TASKS else 99),
    )
    for profile, task in keys:
        yield profile, task, [r for r in rows if (r["profile"], r["task"]) == (profile, task)]


def row_title(r: dict) -> str:
    """The row's framework and its whole variant: 'keras (jax-bf16)'."""
    return r["framework"] + (f" ({r['variant']})" if r["variant"] else "")


def line_title(r: dict) -> str:
    """The row's framework line, without the variant matrix's label: 'keras (jax)'."""
    return r["framework"] + (f" ({r['line']})" if r["line"] else "")


# --- the accuracy band --------------------------------------------------------------------------------------------


def mark_band(rows: list[dict]) -> None:
    """Set each row's `band` to 'in' or 'outside' (None where its task or profile has no band).
    A framework line run on several seeds (the runner's --seeds: rows 'seed43', ...) is judged by the mean over its
    seeds, its baseline and its seed rows alike. The centre is the median over frameworks, each framework counted
    once by the median of its own lines: Keras's three backends or MXNet's two APIs must not outvote the others."""
    groups_ = {}
    for r in rows:
        if (
            r["status"] == "ok"
            and r["task"] in BAND
            and r["value"] is not None
            and r["profile"] in BAND_PROFILES.get(r["task"], suite.PROFILES)
        ):
            groups_.setdefault((r["profile"], r["task"], r["data"]), []).append(r)
    for (_, task, _), members in groups_.items():
        seeds = {}  # a framework line's baseline and its runs on other seeds
        for r in members:
            if dataclasses.replace(r["identity"], seed=None).baseline:  # the baseline, or it again on another seed
                seeds.setdefault((r["framework"], r["line"]), []).append(r)
        for r in members:
            r["band_value"] = band_value(r)
        for family in seeds.values():
            mean = sum(band_value(r) for r in family) / len(family)
            for r in family:
                r["band_value"], r["band_seeds"] = mean, len(family)
        by_framework = {}
        for (framework, _), family in seeds.items():  # the centre is the baselines'; a variant is held to it
            if any(r["identity"].baseline for r in family):
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
    return [
        f"{r['task']}/{row_title(r)} ({r['profile']}): {r['metric']} {r['band_value']:.3f} (the better of its last "
        f"{BAND_EPOCHS} epochs"
        + (f", the mean over {r['band_seeds']} seeds" if r.get("band_seeds", 1) > 1 else "")
        + f") is more than {BAND[r['task']]} from the median {r['band_median']:.3f} of the frameworks"
        for r in rows
        if r["band"] == "outside"
    ]


def comparable(r: dict) -> bool:
    """False for a row whose accuracy or AUC lies outside its band: its time counts for nothing."""
    return r["band"] != "outside"


def has_device_memory(rows: list[dict]) -> bool:
    return any(r.get("device_peak_bytes") for r in rows)


def has_curves(rows: list[dict]) -> bool:
    return any(r["status"] == "ok" and r.get("curve") for r in rows)


# --- which rows each table takes: the baselines, the variant matrix, sweeps, several devices -----------------------


def baseline(rows: list[dict]) -> list[dict]:
    """The rows of baseline runs (no variant of the matrix): the main tables, the README and the reader."""
    return [r for r in rows if r["identity"].baseline]


def speedup(r: dict, rows: list[dict]) -> float | None:
    """Compute samples/s over that of the same framework line's baseline (same task, profile and data)."""

    def same(x: dict) -> tuple:
        return x["task"], x["profile"], x["framework"], x["line"], x["data"]

    base = next((b for b in rows if b["identity"].baseline and b["status"] == "ok" and same(b) == same(r)), None)
    if (
        base is None
        or r["status"] != "ok"
        or not (number(r["compute_samples_per_s"]) and number(base["compute_samples_per_s"]))
    ):
        return None
    return r["compute_samples_per_s"] / base["compute_samples_per_s"]


def matrix_rows(task_rows: list[dict]) -> list[dict]:
    """The rows of the variant table: every line that has a variant, its baseline first; sweeps and runs on
    several devices apart (their own tables)."""
    runs = [r for r in task_rows if not r["identity"].sweep and r["identity"].devices == tasks.DEVICES_DEFAULT]
    lines = {(r["framework"], r["line"]) for r in runs if r["matrix"]}
    chosen = [dict(r, speedup=speedup(r, task_rows)) for r in runs if (r["framework"], r["line"]) in lines]
    return sorted(
        chosen, key=lambda r: (FRAMEWORK_ORDER.get(r["framework"], 99), r["line"], r["matrix"] != "", r["matrix"])
    )


def sweep_rows(task_rows: list[dict]) -> list[dict]:
    return [r for r in task_rows if r.get("sweep") and r["status"] == "ok"]


def device_rows(task_rows: list[dict]) -> list[tuple[dict, dict | None]]:
    """(run on several devices, the same line's run on one device or None) for each run on several devices of
    the default precision and compilation, in table order."""

    def same(r: dict) -> tuple:
        return (r["framework"], r["line"], r["precision"], r["compilation"], r["data"])

    single = {same(r): r for r in task_rows if r["identity"].baseline}
    several = [
        r
        for r in task_rows
        if r["identity"].devices != tasks.DEVICES_DEFAULT
        and dataclasses.replace(r["identity"], devices=tasks.DEVICES_DEFAULT).baseline
    ]
    several.sort(key=lambda r: (FRAMEWORK_ORDER.get(r["framework"], 99), r["line"], r["devices"]))
    return [(r, single.get(same(r))) for r in several]


def scaling(several: dict, one: dict | None) -> tuple[float | None, float | None]:
    """(speed-up, scaling efficiency) of the time per epoch: one device's over several's, and that per device."""
    if (
        one is None
        or not (number(one["median_s"]) and number(several["median_s"]))
        or "ok" != several["status"]
        or "ok" != one["status"]
    ):
        return None, None
    speed = one["median_s"] / several["median_s"]
    return speed, speed / several["devices"]
