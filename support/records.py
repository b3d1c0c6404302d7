"""One JSON record per notebook run: what ran, on what, how fast, how well, made from what.

Notebooks end with `records.write(record_path, ...)`; the runner reads the records back, adds
what only it knows (`wall_s`, the run's `inputs`, whether it was `timed`, its `identity`), writes
failed records for notebooks that did not get that far, and builds the tables from them. Writes are
atomic (support.files), so a record is whole or absent. A record's shape is published as a JSON
Schema, docs/record.schema.json, with a description of every field; `validate` checks a record
against it (jsonschema) and then the few rules that cross fields, so a malformed record is refused
with one line naming the field, never a TypeError further on.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import jsonschema

from support import env, flops, tasks
from support.files import atomic_write
from support.params import as_dict
from support.precision import STATUSES as STOPPED
from support.precision import Unsupported
from support.timing import describe

# Schema 2 adds what a benchmark-grade row needs: the steady-state steps, the first step and the
# compilation apart, the peak memory, the FLOPs per sample and the metric after every epoch.
# Schema 3 adds the run's `identity` (its structured fields) and `key`, written by the runner.
# Records of every earlier schema are still read; their rows show the later columns empty.
SCHEMA = 3
SCHEMAS = (1, 2, 3)
STATUSES = ("ok", "failed", "timeout") + STOPPED  # STOPPED: a combination that cannot run (support.precision)
DATA_KINDS = ("real", "synthetic")
# The metric each task's table shows beside the time (None: the task measures speed only).
METRICS = {name: task.metric for name, task in tasks.TASKS.items()}
SCHEMA_PATH = Path(__file__).resolve().parents[1] / "docs" / "record.schema.json"


class RecordError(ValueError):
    pass


def atomic_write_json(path, obj) -> None:
    atomic_write(path, json.dumps(obj, indent=1, sort_keys=False, default=str) + "\n")


def _number(value) -> bool:
    """A JSON number: an int or a finite float, never a bool (JSON has no NaN or Infinity)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def trace_path(record_path) -> Path:
    """The profiler's trace of the run whose record is `record_path` (support.measure.Bench.profile), beside it:
    records/cpu/cnn_cifar10__pytorch.json -> records/cpu/cnn_cifar10__pytorch.trace.json.gz; the runner moves it
    beside the executed notebook (scripts/results.py)."""
    path = Path(record_path)
    return path.with_name(f"{path.stem}.trace.json.gz")


@functools.cache
def schema() -> dict:
    """The published JSON Schema of a record (docs/record.schema.json)."""
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


@functools.cache
def _validator() -> jsonschema.protocols.Validator:
    """A draft 2020-12 validator of the schema whose numbers are finite and whose integers are ints, as
    Python's json writes them (it would write NaN, and 1.0 is a float here)."""
    base = jsonschema.Draft202012Validator
    checker = base.TYPE_CHECKER.redefine("number", lambda _, value: _number(value)).redefine(
        "integer", lambda _, value: _integer(value)
    )
    return jsonschema.validators.extend(base, type_checker=checker)(schema())


def _kind(value) -> str:
    return "null" if value is None else type(value).__name__


_PLURALS = {"number": "numbers", "integer": "integers", "string": "strings", "object": "objects"}


def _wanted(subschema: dict) -> str:
    """What a (sub)schema asks for, in words: 'a number > 0', 'one of real, synthetic (or null)', ..."""
    or_null = ""
    if "enum" in subschema:
        values = [value for value in subschema["enum"] if value is not None]
        or_null = " (or null)" if None in subschema["enum"] else ""
        return f"one of {', '.join(map(str, values))}{or_null}"
    kinds = subschema.get("type", [])
    kinds = [kinds] if isinstance(kinds, str) else list(kinds)
    if "null" in kinds:
        kinds.remove("null")
        or_null = " (or null)"
    kind = kinds[0] if kinds else None
    if kind in ("number", "integer"):
        words = "a number" if kind == "number" else "an integer"
        if "exclusiveMinimum" in subschema:
            words += f" > {subschema['exclusiveMinimum']}"
        elif "minimum" in subschema:
            words += f" >= {subschema['minimum']}"
    elif kind == "array":
        item = subschema.get("items", {}).get("type")
        words = (
            "a list"
            + (f" of {_PLURALS[item]}" if item in _PLURALS else "")
            + (" (at least one)" if subschema.get("minItems") else "")
        )
    else:
        words = {
            "string": "a non-empty string" if subschema.get("minLength") else "a string",
            "boolean": "true or false",
            "object": "an object",
        }.get(kind, "valid")
    return words + or_null


def _where(path) -> str:
    """A field's path as the message names it: `timing.median_s`, `sweep.sizes[0].batch_size`."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _message(error: jsonschema.ValidationError, record) -> str:
    """jsonschema's error as the one line a record's reader needs: the field, what it is, what it should be."""
    path, instance, subschema = list(error.absolute_path), error.instance, error.schema
    where = _where(path) or "record"
    if not path and error.validator == "type":
        return f"a record is a JSON object, not {_kind(instance)}"
    if error.absolute_schema_path[0] == "else":  # a record that did not end ok: its `error` is missing or empty
        status = record["status"]
        return (
            f"a {status.replace('_', ' ')} record must say its "
            f"{'error' if status in ('failed', 'timeout') else 'reason (error)'}"
        )
    if error.validator == "required":
        return f"{where} lacks {', '.join(key for key in error.validator_value if key not in instance)}"
    if error.validator == "additionalProperties":
        unknown = sorted(set(instance) - set(subschema.get("properties", {})))
        return f"{where} has unknown {', '.join(unknown)}"
    shown = "" if instance is None else " " + json.dumps(instance, default=str)[:60]
    return f"{where} is {_kind(instance)}{shown}, not {_wanted(subschema)}"


def validate(record) -> dict:
    """Raise RecordError naming the first problem; return the record when it is well formed.

    First the published schema (docs/record.schema.json; jsonschema's best error, in one line), then what it
    cannot say: the task is a known one, an ok record carries its task's metric and, from schema 2, the
    benchmark's fields its task needs, its curve ends at that metric, and `laps_s` holds `n` laps."""
    errors = list(_validator().iter_errors(record))
    # what every record needs first; only then what its status asks (the schema's if/then/else)
    errors = [e for e in errors if e.absolute_schema_path[0] not in ("then", "else")] or errors
    error = jsonschema.exceptions.best_match(errors)
    if error is not None:
        raise RecordError(_message(error, record))
    if record["task"] not in tasks.TASKS:
        raise RecordError(f"unknown task {record['task']!r}")
    if record["status"] != "ok":
        return record
    task = tasks.get(record["task"])
    if task.metric and not _number(record["metrics"].get(task.metric)):
        raise RecordError(f"{task.name} records need metrics[{task.metric!r}] as a number")
    if task.unit != "call" and not _integer(record["n_parameters"]):
        raise RecordError(f"n_parameters is {json.dumps(record['n_parameters'])}, not an integer >= 1")
    if record["schema"] >= 2:
        needed = (
            ["first_step_s", "memory"]
            + (["flops"] if task.unit != "call" else [])
            + (["steps"] if task.unit == "epoch" else [])
            + (["curve"] if task.metric else [])
        )
        needed += ["operators"] if task.unit == "call" else []
        missing = [key for key in needed if key not in record]
        if missing:
            raise RecordError(f"record lacks {', '.join(missing)}")
        if task.metric and not math.isclose(
            record["curve"][-1], record["metrics"][task.metric], rel_tol=1e-6, abs_tol=1e-9
        ):
            raise RecordError(
                f"curve ends at {record['curve'][-1]!r}, not at the final {task.metric} "
                f"{record['metrics'][task.metric]!r}"
            )
    for name in ("timing", "steps"):
        laps, n = record.get(name, {}).get("laps_s"), record.get(name, {}).get("n")
        if laps is not None and len(laps) != n:
            raise RecordError(f"{name}.laps_s holds {len(laps)} laps, not n = {n}")
    return record


def write(
    path,
    *,
    task: str,
    framework: str,
    params,
    data: str,
    timing: dict,
    metrics: dict,
    n_parameters: int,
    environment: dict,
    first_step_s: float,
    compile_s: float | None = None,
    steps: dict | None = None,
    curve: list | None = None,
    device_peak_bytes: int | None = None,
    precision: str = "fp32",
    compilation: str = "off",
    sweep: dict | None = None,
    variant: str = "",
    extra: dict | None = None,
) -> dict:
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
    record = {
        "schema": SCHEMA,
        "task": task,
        "framework": framework,
        "variant": variant,
        "status": "ok",
        "profile": params.profile,
        "data": data,
        "params": as_dict(params),
        "timing": timing,
        "metrics": metrics,
        "n_parameters": None if n_parameters is None else int(n_parameters),
        "environment": environment,
        "precision": precision,
        "compilation": compilation,
        "first_step_s": float(first_step_s),
        "compile_s": None if compile_s is None else float(compile_s),
        "memory": {
            "host_peak_bytes": env.peak_host_memory(),
            "device_peak_bytes": None if device_peak_bytes is None else int(device_peak_bytes),
        },
        **({"flops": flops.per_sample(task, params)} if tasks.get(task).unit != "call" else {}),
        **({"steps": steps} if steps is not None else {}),
        **({"curve": [float(v) for v in curve]} if curve is not None else {}),
        **({"sweep": sweep} if sweep else {}),
        **(extra or {}),
    }
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


def failed(
    task: str,
    framework: str,
    variant: str,
    profile: str,
    machine: str,
    status: str,
    error: str,
) -> dict:
    """The record a runner writes for a notebook that left none (it failed, timed out or was killed): the
    run's names, its status and the one-line `error`; no timing, no metrics."""
    import time

    return {
        "schema": SCHEMA,
        "task": task,
        "framework": framework,
        "variant": variant,
        "status": status,
        "profile": profile,
        "data": None,
        "params": {},
        "timing": {},
        "metrics": {},
        "n_parameters": None,
        "environment": {"machine": machine, "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")},
        "error": error,
    }


def write_stopped(
    path,
    *,
    task: str,
    framework: str,
    params,
    environment: dict,
    precision: str,
    compilation: str,
    status: str,
    reason: str,
    variant: str = "",
) -> dict:
    """The record of a run that a precision or compilation it cannot run stopped (support.precision.stop):
    its status ('unsupported' or 'not_applicable') and the reason in `error`. With path None, only printed."""
    record = {
        "schema": SCHEMA,
        "task": task,
        "framework": framework,
        "variant": variant,
        "status": status,
        "profile": params.profile,
        "data": None,
        "params": as_dict(params),
        "timing": {},
        "metrics": {},
        "n_parameters": None,
        "environment": environment,
        "precision": precision,
        "compilation": compilation,
        "error": reason,
    }
    validate(record)
    print(
        f"{task} / {framework}{' / ' + variant if variant else ''}: {status.replace('_', ' ')} "
        f"({precision}, compilation {compilation}): {reason}"
    )
    return _save(path, record)


def stop(
    path,
    reason: str,
    *,
    task: str,
    framework: str,
    params,
    environment: dict,
    precision: str,
    compilation: str,
    status: str = "unsupported",
    variant: str = "",
):
    """Write the record of a combination that cannot run (with `path` None, only say so), then raise
    support.precision.Unsupported, which ends the notebook: nothing runs as something it was not asked to be."""
    if status not in STOPPED:
        raise ValueError(f"status {status!r} is not one of {', '.join(STOPPED)}")
    write_stopped(
        path,
        task=task,
        framework=framework,
        params=params,
        environment=environment,
        precision=precision,
        compilation=compilation,
        status=status,
        reason=reason,
        variant=variant,
    )
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
