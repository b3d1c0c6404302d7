"""One JSON record per notebook run: what ran, on what, how fast, how well.

Notebooks end with `records.write(record_path, ...)`; the runner reads the records back,
adds failed ones for notebooks that did not get that far, and builds the tables from them.
Writes are atomic (a temporary file renamed into place), so a record is whole or absent.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

from support.params import TASKS, as_dict
from support.timing import describe

SCHEMA = 1
STATUSES = ("ok", "failed", "timeout")
DATA_KINDS = ("real", "synthetic")
# The metric each task's table shows beside the time (None: the task measures speed only).
METRICS = {"cnn_cifar10": "accuracy", "gru_imdb": "accuracy", "densenet_chestxray": "auc",
           "resnet50_features": None}
REQUIRED = ("schema", "task", "framework", "variant", "status", "profile", "data", "params", "timing",
            "metrics", "n_parameters", "environment")
TIMING_REQUIRED = ("unit", "median_s", "iqr_s", "cv", "n", "warmup_s", "samples_per_s")


class RecordError(ValueError):
    pass


def atomic_write_json(path, obj) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=False, default=str) + "\n")
    tmp.replace(path)


def validate(record: dict) -> dict:
    """Raise RecordError naming the first problem; return the record when it is well formed."""
    missing = [k for k in REQUIRED if k not in record]
    if missing:
        raise RecordError(f"record lacks {', '.join(missing)}")
    if record["schema"] != SCHEMA:
        raise RecordError(f"record schema {record['schema']} is not {SCHEMA}")
    if record["task"] not in TASKS:
        raise RecordError(f"unknown task {record['task']!r}")
    if record["status"] not in STATUSES:
        raise RecordError(f"status {record['status']!r} is not one of {STATUSES}")
    if record["status"] != "ok":
        if not record.get("error"):
            raise RecordError(f"a {record['status']} record must say its error")
        return record
    if record["data"] not in DATA_KINDS:
        raise RecordError(f"data {record['data']!r} is not one of {DATA_KINDS}")
    timing = record["timing"]
    missing = [k for k in TIMING_REQUIRED if k not in timing]
    if missing:
        raise RecordError(f"timing lacks {', '.join(missing)}")
    if not (timing["median_s"] > 0 and math.isfinite(timing["median_s"])):
        raise RecordError(f"timing median {timing['median_s']!r} is not a positive number")
    metric = METRICS[record["task"]]
    if metric and not isinstance(record["metrics"].get(metric), (int, float)):
        raise RecordError(f"{record['task']} records need metrics[{metric!r}] as a number")
    if not (isinstance(record["n_parameters"], int) and record["n_parameters"] > 0):
        raise RecordError(f"n_parameters {record['n_parameters']!r} is not a positive integer")
    parity = record.get("parity")
    if parity is not None:     # the optional parity step's result (support.parity)
        error = parity.get("max_rel_error") if isinstance(parity, dict) else None
        if not (isinstance(error, (int, float)) and math.isfinite(error) and error >= 0):
            raise RecordError(f"parity {parity!r} needs max_rel_error as a finite number >= 0")
    return record


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
    path = Path(path)
    try:
        return validate(json.loads(path.read_text()))
    except (json.JSONDecodeError, RecordError) as err:
        raise RecordError(f"{path}: {err}") from None
