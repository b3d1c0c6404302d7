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

from support import tasks
from support.files import atomic_write
from support.params import as_dict
from support.timing import describe

SCHEMA = 1
STATUSES = ("ok", "failed", "timeout")
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
    "parity": (lambda v: isinstance(v, dict) and _number(v.get("max_rel_error")) and v["max_rel_error"] >= 0,
               "an object with max_rel_error a finite number >= 0"),
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
    if record["schema"] != SCHEMA:
        raise RecordError(f"record schema {record['schema']} is not {SCHEMA}")
    if record["task"] not in tasks.TASKS:
        raise RecordError(f"unknown task {record['task']!r}")
    for key in _ENVIRONMENT_STRINGS:
        value = record["environment"].get(key)
        _expect(f"environment.{key}", value, value is None or isinstance(value, str), "a string")
    if record["status"] != "ok":
        if not record.get("error"):
            raise RecordError(f"a {record['status']} record must say its error")
        return record
    if record["data"] is None:
        raise RecordError(f"data None is not one of {DATA_KINDS}")
    _validate_timing(record["timing"])
    metric = METRICS[record["task"]]
    if metric and not _number(record["metrics"].get(metric)):
        raise RecordError(f"{record['task']} records need metrics[{metric!r}] as a number")
    if not (isinstance(record["n_parameters"], int) and record["n_parameters"] > 0):
        raise RecordError(f"n_parameters {record['n_parameters']!r} is not a positive integer")
    return record


def _validate_timing(timing: dict) -> None:
    missing = [k for k in TIMING_REQUIRED if k not in timing]
    if missing:
        raise RecordError(f"timing lacks {', '.join(missing)}")
    _expect("timing.unit", timing["unit"], isinstance(timing["unit"], str), "a string")
    if not (_number(timing["median_s"]) and timing["median_s"] > 0):
        raise RecordError(f"timing median {timing['median_s']!r} is not a positive number")
    for key in ("iqr_s", "cv", "q1_s", "q3_s", "mean_s", "std_s", "min_s", "max_s"):
        if key in timing:
            _expect(f"timing.{key}", timing[key], _number(timing[key]) and timing[key] >= 0, "a number >= 0")
    n = timing["n"]
    _expect("timing.n", n, isinstance(n, int) and not isinstance(n, bool) and n >= 1, "an integer >= 1")
    for key in ("warmup_s", "laps_s"):
        laps = timing.get(key, [])
        _expect(f"timing.{key}", laps, isinstance(laps, list) and all(_number(x) for x in laps), "a list of numbers")
    rate = timing["samples_per_s"]
    _expect("timing.samples_per_s", rate, rate is None or (_number(rate) and rate >= 0), "a number >= 0 (or null)")


def write(path, *, task: str, framework: str, params, data: str, timing: dict, metrics: dict,
          n_parameters: int, environment: dict, variant: str = "", extra: dict | None = None) -> dict:
    """Validate and write the record of a successful run; with path None, only print it."""
    record = {"schema": SCHEMA, "task": task, "framework": framework, "variant": variant, "status": "ok",
              "profile": params.profile, "data": data, "params": as_dict(params), "timing": timing,
              "metrics": metrics, "n_parameters": int(n_parameters), "environment": environment,
              **(extra or {})}
    validate(record)
    shown = ", ".join(f"{k} {v:.4f}" for k, v in metrics.items() if isinstance(v, float))
    print(f"{task} / {framework}{' / ' + variant if variant else ''}: {describe(timing)}; {shown}")
    if path:
        atomic_write_json(path, record)
        print(f"record written to {path}")
    return record


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
