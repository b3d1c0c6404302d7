"""One JSON record per notebook run: what ran, on what, how fast, how well, made from what.

Notebooks end with `records.write(record_path, ...)`; the runner reads the records back, adds
what only it knows (`wall_s`, the run's `inputs`, whether it was `timed`), writes failed records
for notebooks that did not get that far, and builds the tables from them. Writes are atomic
(support.files), so a record is whole or absent. `validate` checks every field's type, so a
malformed record is refused with one line naming the field, never a TypeError further on.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from support import env, flops, tasks
from support.precision import PRECISIONS, STATUSES as STOPPED, Unsupported
from support.files import atomic_write
from support.params import as_dict
from support.timing import describe

# Schema 2 adds what a benchmark-grade row needs: the steady-state steps, the first step and the
# compilation apart, the peak memory, the FLOPs per sample and the metric after every epoch.
# Schema 1 records (written before) are still read; their rows show those columns empty.
SCHEMA = 2
SCHEMAS = (1, 2)
STATUSES = ("ok", "failed", "timeout") + STOPPED     # STOPPED: a combination that cannot run (support.precision)
DATA_KINDS = ("real", "synthetic")
# The metric each task's table shows beside the time (None: the task measures speed only).
METRICS = {name: task.metric for name, task in tasks.TASKS.items()}
REQUIRED = ("schema", "task", "framework", "variant", "status", "profile", "data", "params", "timing",
            "metrics", "n_parameters", "environment")
TIMING_REQUIRED = ("unit", "median_s", "iqr_s", "cv", "n", "warmup_s", "samples_per_s")


class RecordError(ValueError):
    pass


def atomic_write_json(path, obj) -> None:
    atomic_write(path, json.dumps(obj, indent=1, sort_keys=False, default=str) + "\n")


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _kind(value) -> str:
    return "null" if value is None else type(value).__name__


def _expect(where: str, value, ok: bool, wanted: str) -> None:
    if not ok:
        raise RecordError(f"{where} is {_kind(value)} {json.dumps(value, default=str)[:60]}, not {wanted}")


# Top-level fields: (is it well typed, what it should be). Runner-added fields are optional.
_FIELDS = {
    "schema": (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    "task": (lambda v: isinstance(v, str), "a string"),
    "framework": (lambda v: isinstance(v, str) and v != "", "a framework name"),
    "variant": (lambda v: isinstance(v, str), "a string"),
    "status": (lambda v: v in STATUSES, f"one of {', '.join(STATUSES)}"),
    "profile": (lambda v: v in tasks.PROFILES, f"one of {', '.join(tasks.PROFILES)}"),
    "data": (lambda v: v is None or v in DATA_KINDS, f"one of {', '.join(DATA_KINDS)} (or null)"),
    "params": (lambda v: isinstance(v, dict), "an object"),
    "timing": (lambda v: isinstance(v, dict), "an object"),
    "metrics": (lambda v: isinstance(v, dict), "an object"),
    "n_parameters": (lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)), "an integer"),
    "environment": (lambda v: isinstance(v, dict), "an object"),
    "error": (lambda v: v is None or isinstance(v, str), "a string"),
    "wall_s": (lambda v: _number(v) and v >= 0, "a number >= 0"),
    "compile_s": (lambda v: v is None or (_number(v) and v >= 0), "a number >= 0"),
    "timed": (lambda v: isinstance(v, bool), "true or false"),
    "inputs": (lambda v: isinstance(v, dict), "an object"),
    "first_step_s": (lambda v: _number(v) and v > 0, "a number > 0"),
    "steps": (lambda v: isinstance(v, dict), "an object"),
    "memory": (lambda v: isinstance(v, dict) and all(v.get(k) is None or (isinstance(v[k], int) and v[k] > 0)
                                                     for k in ("host_peak_bytes", "device_peak_bytes")),
               "an object with host_peak_bytes and device_peak_bytes, each a positive integer or null"),
    "flops": (lambda v: isinstance(v, dict) and _number(v.get("forward")) and v["forward"] > 0
              and (v.get("train") is None or (_number(v["train"]) and v["train"] > 0)),
              "an object with forward (and train) FLOPs per sample, positive numbers"),
    "curve": (lambda v: isinstance(v, list) and len(v) > 0 and all(_number(x) for x in v), "a list of numbers"),
    "parity": (lambda v: isinstance(v, dict) and _number(v.get("max_rel_error")) and v["max_rel_error"] >= 0,
               "an object with max_rel_error a finite number >= 0"),
    # data parallelism (support.params.devices, support.parity.data_parallel): how many devices, the global batch
    **{k: (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1, "an integer >= 1")
       for k in ("devices", "global_batch_size")},
    "data_parallel": (lambda v: isinstance(v, dict) and isinstance(v.get("devices"), int) and v["devices"] >= 2
                      and _number(v.get("max_rel_error")) and v["max_rel_error"] >= 0
                      and _number(v.get("max_abs_diff")) and _number(v.get("tolerance")),
                      "an object with devices (2 or more), max_abs_diff, max_rel_error and tolerance"),
    "precision": (lambda v: v in PRECISIONS, f"one of {', '.join(PRECISIONS)}"),
    "compilation": (lambda v: v in ("on", "off"), "on or off"),
    "matrix": (lambda v: isinstance(v, dict), "an object"),
    "sweep": (lambda v: isinstance(v, dict) and isinstance(v.get("sizes"), list) and isinstance(v.get("stopped"), str)
              and all(isinstance(row, dict) and isinstance(row.get("batch_size"), int) and row["batch_size"] > 0
                      and _number(row.get("samples_per_s")) and _number(row.get("median_s"))
                      and _number(row.get("p95_s")) for row in v["sizes"]),
              "an object with sizes (rows of batch_size, samples_per_s, median_s, p95_s) and stopped (why it ended)"),
    **{k: (lambda v: isinstance(v, str), "a string") for k in ("executed_notebook", "log", "superseded", "run")},
}
_ENVIRONMENT_STRINGS = ("machine", "date", "git_commit", "framework_version", "python", "numpy", "device", "cpu")


def validate(record) -> dict:
    """Raise RecordError naming the first problem; return the record when it is well formed."""
    if not isinstance(record, dict):
        raise RecordError(f"a record is a JSON object, not {_kind(record)}")
    missing = [k for k in REQUIRED if k not in record]
    if missing:
        raise RecordError(f"record lacks {', '.join(missing)}")
    for key, (ok, wanted) in _FIELDS.items():
        if key in record:
            _expect(key, record[key], ok(record[key]), wanted)
    if record["schema"] not in SCHEMAS:
        raise RecordError(f"record schema {record['schema']} is not one of {', '.join(map(str, SCHEMAS))}")
    if record["task"] not in tasks.TASKS:
        raise RecordError(f"unknown task {record['task']!r}")
    for key in _ENVIRONMENT_STRINGS:
        value = record["environment"].get(key)
        _expect(f"environment.{key}", value, value is None or isinstance(value, str), "a string")
    if record["status"] != "ok":
        if not record.get("error"):
            raise RecordError(f"a {record['status'].replace('_', ' ')} record must say its "
                          f"{'error' if record['status'] in ('failed', 'timeout') else 'reason (error)'}")
        return record
    if record["data"] is None:
        raise RecordError(f"data None is not one of {DATA_KINDS}")
    _validate_timing(record["timing"])
    metric = METRICS[record["task"]]
    if metric and not _number(record["metrics"].get(metric)):
        raise RecordError(f"{record['task']} records need metrics[{metric!r}] as a number")
    if not (isinstance(record["n_parameters"], int) and record["n_parameters"] > 0):
        raise RecordError(f"n_parameters {record['n_parameters']!r} is not a positive integer")
    if record["schema"] >= 2:
        _validate_benchmark(record)
    return record


def _validate_benchmark(record: dict) -> None:
    """Schema 2: the fields of a benchmark-grade row."""
    task = tasks.get(record["task"])
    needed = ["first_step_s", "memory", "flops"] + (["steps"] if task.unit == "epoch" else []) + (
        ["curve"] if task.metric else [])
    missing = [k for k in needed if k not in record]
    if missing:
        raise RecordError(f"record lacks {', '.join(missing)}")
    if "steps" in record:
        _validate_timing(record["steps"], "steps")
        if record["steps"]["n"] < 2:
            raise RecordError(f"steps.n is {record['steps']['n']}: the steady state needs several repeats")
        if not _number(record["steps"].get("samples_per_s")):
            raise RecordError("steps.samples_per_s is not a number: pass samples= (the global batch)")
        for key in ("loss_first", "loss_last"):       # the loss on the steady state's batch (timing.learned)
            if key in record["steps"]:
                _expect(f"steps.{key}", record["steps"][key], _number(record["steps"][key]), "a finite number")
    if task.metric and not math.isclose(record["curve"][-1], record["metrics"][task.metric], rel_tol=1e-6,
                                        abs_tol=1e-9):
        raise RecordError(f"curve ends at {record['curve'][-1]!r}, not at the final {task.metric} "
                          f"{record['metrics'][task.metric]!r}")


def _validate_timing(timing: dict, name: str = "timing") -> None:
    missing = [k for k in TIMING_REQUIRED if k not in timing]
    if missing:
        raise RecordError(f"{name} lacks {', '.join(missing)}")
    _expect(f"{name}.unit", timing["unit"], isinstance(timing["unit"], str), "a string")
    if not (_number(timing["median_s"]) and timing["median_s"] > 0):
        raise RecordError(f"{name} median {timing['median_s']!r} is not a positive number")
    for key in ("iqr_s", "cv", "q1_s", "q3_s", "mean_s", "std_s", "min_s", "max_s", "p95_s"):
        if key in timing:
            _expect(f"{name}.{key}", timing[key], _number(timing[key]) and timing[key] >= 0, "a number >= 0")
    n = timing["n"]
    _expect(f"{name}.n", n, isinstance(n, int) and not isinstance(n, bool) and n >= 1, "an integer >= 1")
    for key in ("warmup_s", "laps_s"):
        laps = timing.get(key, [])
        _expect(f"{name}.{key}", laps, isinstance(laps, list) and all(_number(x) for x in laps), "a list of numbers")
    if "laps_s" in timing and len(timing["laps_s"]) != n:
        raise RecordError(f"{name}.laps_s holds {len(timing['laps_s'])} laps, not n = {n}")
    rate = timing["samples_per_s"]
    _expect(f"{name}.samples_per_s", rate, rate is None or (_number(rate) and rate >= 0), "a number >= 0 (or null)")


def write(path, *, task: str, framework: str, params, data: str, timing: dict, metrics: dict,
          n_parameters: int, environment: dict, first_step_s: float, compile_s: float | None = None,
          steps: dict | None = None, curve: list | None = None, device_peak_bytes: int | None = None,
          precision: str = "fp32", compilation: str = "off", sweep: dict | None = None, variant: str = "",
          extra: dict | None = None) -> dict:
    """Validate and write the record of a successful run; with path None, only print it.

    timing: the end-to-end laps (`Stopwatch.summary()`: epochs, or batches for inference);
    steps: the steady-state steps on data in memory (`timing.steady_state`, training tasks);
    first_step_s: the first step's total time, any compilation in it included;
    compile_s: the compilation alone where the framework compiles (None: it runs eagerly);
    curve: the metric after every epoch (its last value is `metrics`' own);
    device_peak_bytes: the accelerator allocator's peak (None on the CPU);
    precision: what the run computed in (support.precision); compilation: 'on' where it ran compiled;
    sweep: the batch-size sweep (`timing.sweep`), where one was asked for.
    The host's peak resident memory and the model's FLOPs per sample are added here.
    """
    if task not in tasks.TASKS:
        raise RecordError(f"unknown task {task!r}")
    record = {"schema": SCHEMA, "task": task, "framework": framework, "variant": variant, "status": "ok",
              "profile": params.profile, "data": data, "params": as_dict(params), "timing": timing,
              "metrics": metrics, "n_parameters": int(n_parameters), "environment": environment,
              "precision": precision, "compilation": compilation,
              "first_step_s": float(first_step_s), "compile_s": None if compile_s is None else float(compile_s),
              "memory": {"host_peak_bytes": env.peak_host_memory(),
                         "device_peak_bytes": None if device_peak_bytes is None else int(device_peak_bytes)},
              "flops": flops.per_sample(task, params),
              **({"steps": steps} if steps is not None else {}),
              **({"curve": [float(v) for v in curve]} if curve is not None else {}),
              **({"sweep": sweep} if sweep else {}),
              **(extra or {})}
    validate(record)
    shown = ", ".join(f"{k} {v:.4f}" for k, v in metrics.items() if isinstance(v, float))
    how = f" [{precision}, compilation {compilation}]"
    print(f"{task} / {framework}{' / ' + variant if variant else ''}{how}: {describe(timing)}; {shown}")
    if steps is not None:
        print(f"steady state: {describe(steps)}")
    return _save(path, record)


def _save(path, record: dict) -> dict:
    """Write a validated record atomically where `path` says (None: only printed) and return it."""
    if path:
        atomic_write_json(path, record)
        print(f"record written to {path}")
    return record


def failed(task: str, framework: str, variant: str, profile: str, machine: str, status: str, error: str,
           matrix: dict | None = None) -> dict:
    """The record a runner writes for a notebook that left none (it failed, timed out or was killed): the
    run's names, its status and the one-line `error`; no timing, no metrics."""
    import time

    return {"schema": SCHEMA, "task": task, "framework": framework, "variant": variant, "status": status,
            "profile": profile, "data": None, "params": {}, "timing": {}, "metrics": {}, "n_parameters": None,
            "environment": {"machine": machine, "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")},
            "matrix": matrix or {}, "error": error}


def write_stopped(path, *, task: str, framework: str, params, environment: dict, precision: str, compilation: str,
                  status: str, reason: str, variant: str = "") -> dict:
    """The record of a run that a precision or compilation it cannot run stopped (support.precision.stop):
    its status ('unsupported' or 'not_applicable') and the reason in `error`. With path None, only printed."""
    record = {"schema": SCHEMA, "task": task, "framework": framework, "variant": variant, "status": status,
              "profile": params.profile, "data": None, "params": as_dict(params), "timing": {}, "metrics": {},
              "n_parameters": None, "environment": environment, "precision": precision,
              "compilation": compilation, "error": reason}
    validate(record)
    print(f"{task} / {framework}{' / ' + variant if variant else ''}: {status.replace('_', ' ')} "
          f"({precision}, compilation {compilation}): {reason}")
    return _save(path, record)


def stop(path, reason: str, *, task: str, framework: str, params, environment: dict, precision: str,
         compilation: str, status: str = "unsupported", variant: str = ""):
    """Write the record of a combination that cannot run (with `path` None, only say so), then raise
    support.precision.Unsupported, which ends the notebook: nothing runs as something it was not asked to be."""
    if status not in STOPPED:
        raise ValueError(f"status {status!r} is not one of {', '.join(STOPPED)}")
    write_stopped(path, task=task, framework=framework, params=params, environment=environment,
                  precision=precision, compilation=compilation, status=status, reason=reason, variant=variant)
    raise Unsupported(f"{status.replace('_', ' ')}: {reason}")


def read(path) -> dict:
    """The record at `path`, validated; else RecordError naming the file and what is wrong."""
    path = Path(path)
    try:
        return validate(json.loads(path.read_text(encoding="utf-8")))
    except json.JSONDecodeError as err:
        raise RecordError(f"{path}: not JSON ({err})") from None
    except UnicodeDecodeError as err:
        raise RecordError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    except RecordError as err:
        raise RecordError(f"{path}: {err}") from None
