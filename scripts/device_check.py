#!/usr/bin/env python3
"""A GPU machine's check in one call: its versions, its peak per precision, and the notebooks at `full`.

    python3 scripts/device_check.py --out $OUT                          # on a GPU machine (docs/devices.md)
    python3 scripts/device_check.py --out /tmp/dc --profile tiny --budget-s 300 --only pytorch,jax

Made for a machine that has only its own Python with torch, JAX, Flax and optax (no papermill, no Jupyter,
no Keras, no network, a few minutes): it needs the standard library, what that machine has, and the wheels
scripts/device_wheels.sh downloads into .device/wheels beforehand (carried along with the repository).

1. The carried wheels: each distribution in .device/wheels that this Python lacks is installed with
   `pip install --no-index --no-deps --target .device/site` (a folder already prepared there is used as it
   is) and put on sys.path and every child's PYTHONPATH.
2. The versions it runs on (Python, torch with CUDA, cuDNN and NCCL, the GPU and its driver, JAX, Flax,
   optax, Keras, ONNX...), printed and kept.
3. The GPU's peak matmul TFLOP/s per precision (torch, n = 8192, warm-up, the median of 7 repeats of 20
   synchronised calls): fp32 with TF32 off (`cuda/float32`, what scripts/calibrate.py measures), tf32, bf16,
   fp16; the CPU's float32 peak as calibrate.py measures it; the true-float32 check (a float32 matmul
   against float64: about 1e-6 relative error with TF32 off, about 1e-3 with it on, both reported, and
   JAX's default float32 matmul likewise). The shape is calibrate.py's, so the report can use it.
4. torch.distributed with both backends ("cpu:gloo,cuda:nccl"): two ranks where there are two GPUs, else
   one; a CPU and a CUDA tensor each broadcast and all-reduced.
5. The notebooks, without papermill: each one's code cells in order, in one fresh namespace, in a child
   process of its own, with the runner's parameters injected after the cell tagged `parameters` as papermill
   does (IPython's `display` is print; `%` and `!` lines are skipped), its output to a log and a time limit
   (past it, every thread's stack, its workers' too, goes to the log before the kill).
   In order until the budget runs out, for each task (cnn_cifar10, gru_imdb, resnet50_features,
   densenet_chestxray in mode ram, then loader): PyTorch, JAX, Keras on torch, Keras on JAX, at `full` on
   synthetic data, float32, the epochs cut by DLROSETTA_PARAMS (support.params: DEFAULT_OVERRIDES below);
   `--order framework` puts every task of PyTorch first, then JAX's, and so on. A run that would not fit in
   what is left of the budget (ESTIMATE_S, scaled by how the runs so far compared with theirs) is skipped,
   and the summary says so.

Into --out, rewritten after every step so that nothing done is lost: `device_check.log` (all output),
`summary.json` (versions, calibration, each run's status, seconds and headline) and `records.tar.gz`: the
records, logs and executed notebooks in the results/<machine>/ layout (with runs/<run>.json holding the
calibration, as scripts/run_all.py writes it), so that `tar xzf records.tar.gz` at the repository root
drops them in place.
"""
from __future__ import annotations

import argparse
import ast
import builtins
import contextlib
import io
import json
import linecache
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback
import types
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEVICE = ROOT / ".device"            # the carried wheels (.device/wheels) and where they are installed (.device/site)

# What each task's notebooks run with at the `full` profile here (support.params' DLROSETTA_PARAMS): one epoch
# timed after the warm-up epoch, on the profile's whole synthetic dataset; DenseNet-121's loader mode on 512
# synthetic images (the ram mode holds ram_n_train = 2048 as the profile says).
DEFAULT_OVERRIDES = {"cnn_cifar10": "epochs=2", "gru_imdb": "epochs=2", "resnet50_features": "",
                     "densenet_chestxray": "epochs=2,n_train=512,n_test=256"}

# The runs, in priority order: (task, its variant parameters), then per task (framework, label, parameters).
TASK_ORDER = (("cnn_cifar10", {}), ("gru_imdb", {}), ("resnet50_features", {}),
              ("densenet_chestxray", {"mode": "ram"}), ("densenet_chestxray", {"mode": "loader"}))
FRAMEWORK_ORDER = (("pytorch", "pytorch", {}), ("jax", "jax", {}), ("keras", "keras-torch", {"backend": "torch"}),
                   ("keras", "keras-jax", {"backend": "jax"}))
CHOICES = ("pytorch", "jax", "keras-torch", "keras-jax", "keras")

# Seconds one run is expected to take on one H100 at `full` with DEFAULT_OVERRIDES (start-up, imports, data,
# compilation, the two epochs, the measurement and the ONNX export together): guesses until a run has
# measured them (summary.json's seconds). A run is started only where its guess fits in what is left.
ESTIMATE_S = {
    "cnn_cifar10": {"pytorch": 45, "jax": 60, "keras-torch": 60, "keras-jax": 70},
    "gru_imdb": {"pytorch": 40, "jax": 60, "keras-torch": 110, "keras-jax": 70},
    "resnet50_features": {"pytorch": 90, "jax": 60, "keras-torch": 60, "keras-jax": 70},
    "densenet_chestxray/ram": {"pytorch": 60, "jax": 120, "keras-torch": 90, "keras-jax": 140},
    "densenet_chestxray/loader": {"pytorch": 90, "jax": 150, "keras-torch": 120, "keras-jax": 170},
}
SMALL_ESTIMATE_S = 20          # the cpu and tiny profiles: each notebook's own limit is then what is left
RESERVE_S = 15                 # kept back from the budget for the summary and the archive
SCALE_BOUNDS = (0.4, 2.5)      # how far the runs so far may scale the next run's estimate (run_jobs)
LOG_CAP = 200_000              # characters of one notebook's log copied into device_check.log (head and tail)
VERSIONS = ("torch", "torchvision", "triton", "jax", "jaxlib", "jax-cuda13-plugin", "jax-cuda12-plugin", "flax",
            "optax", "orbax-checkpoint", "keras", "optree", "namex", "numpy", "ml-dtypes", "onnx", "onnxruntime",
            "onnxscript", "onnx-ir", "jax2onnx", "scikit-learn", "psutil", "cupy-cuda13x", "tensorflow", "papermill")


# --- running one notebook without papermill (the child process) ------------------------------------------------

def inject_parameters(notebook: dict, parameters: dict) -> dict:
    """papermill's semantics: a code cell tagged `injected-parameters` assigning each parameter, right after the
    cell tagged `parameters` (at the top where there is none); an earlier injected cell is replaced."""
    cells = [c for c in notebook["cells"] if "injected-parameters" not in c.get("metadata", {}).get("tags", [])]
    source = "# Parameters\n" + "".join(f"{name} = {value!r}\n" for name, value in parameters.items())
    injected = {"cell_type": "code", "execution_count": None, "metadata": {"tags": ["injected-parameters"]},
                "outputs": [], "source": source}
    tagged = [i for i, c in enumerate(cells) if "parameters" in c.get("metadata", {}).get("tags", [])]
    cells.insert(tagged[0] + 1 if tagged else 0, injected)
    return {**notebook, "cells": cells}


def without_magics(source: str) -> str:
    """The cell as Python: where it does not parse, its IPython lines (`%magic`, `%%cell magic`, `!shell`)
    become `pass` at their indentation, so the line numbers of a traceback still match."""
    try:
        ast.parse(source)
        return source
    except SyntaxError:
        pass
    lines = []
    for line in source.splitlines():
        stripped = line.lstrip()
        lines.append(line[:len(line) - len(stripped)] + "pass" if stripped.startswith(("%", "!")) else line)
    return "\n".join(lines)


class Tee(io.TextIOBase):
    """A stream that writes to the real one (the log) and keeps a copy (the cell's output)."""

    def __init__(self, stream):
        self.stream, self.copy = stream, io.StringIO()

    def write(self, text):
        self.stream.write(text)
        self.copy.write(text)
        return len(text)

    def flush(self):
        self.stream.flush()

    def fileno(self):
        return self.stream.fileno()

    def isatty(self):
        return False

    @property
    def encoding(self):
        return getattr(self.stream, "encoding", "utf-8")

    @property
    def buffer(self):
        return self.stream.buffer


def run_cell(code: str, namespace: dict, filename: str) -> None:
    """Execute a cell as IPython does: its last expression, if any and not ended by ';', is shown."""
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)   # tracebacks show the lines
    tree = ast.parse(code, filename)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr) and not code.rstrip().endswith(";"):
        last = ast.Expression(tree.body.pop().value)
    exec(compile(tree, filename, "exec"), namespace)
    if last is not None:
        value = eval(compile(last, filename, "eval"), namespace)
        if value is not None:
            namespace["_"] = value
            print(repr(value))


def execute_notebook(path: Path, executed: Path, parameters: dict) -> int:
    """Run the notebook's code cells in order in one fresh `__main__` namespace, the parameters injected;
    write the executed notebook (each cell's output) after every cell. 0 when every cell ran, else 1."""
    from scripts import suite
    notebook = inject_parameters(json.loads(Path(path).read_text(encoding="utf-8")), parameters)
    main = types.ModuleType("__main__")
    main.__dict__.update(__builtins__=builtins, display=lambda *objs, **_: print(*objs),
                         get_ipython=lambda: None)
    sys.modules["__main__"] = main        # as IPython: what a cell defines pickles as __main__.<name>
    sys.argv = [str(path)]
    executed = Path(executed)
    executed.parent.mkdir(parents=True, exist_ok=True)

    def save():
        tmp = executed.with_name(f".{executed.name}.tmp")
        tmp.write_text(json.dumps(notebook, indent=1, ensure_ascii=False), encoding="utf-8")
        tmp.replace(executed)

    count = 0
    for index, cell in enumerate(notebook["cells"]):
        if cell.get("cell_type") != "code":
            continue
        count += 1
        cell["execution_count"], cell["outputs"] = count, []
        print(f"--- cell {index} ---", flush=True)
        out, err = Tee(sys.__stdout__), Tee(sys.__stderr__)
        failure = None
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                run_cell(without_magics(suite.cell_source(cell)), main.__dict__, f"<cell {index}>")
        except SystemExit as stop:
            if stop.code not in (None, 0):
                failure = stop
        except BaseException as error:       # noqa: BLE001 (KeyboardInterrupt too: the cell stopped)
            failure = error
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
        for name, tee in (("stdout", out), ("stderr", err)):
            if tee.copy.getvalue():
                cell["outputs"].append({"output_type": "stream", "name": name, "text": tee.copy.getvalue()})
        if failure is not None:
            lines = traceback.format_exception(type(failure), failure, failure.__traceback__)
            sys.stderr.write("".join(lines))
            cell["outputs"].append({"output_type": "error", "ename": type(failure).__name__,
                                    "evalue": str(failure), "traceback": lines})
            print(f"device_check: cell {index} raised {type(failure).__name__}: {str(failure)[:300]}",
                  file=sys.stderr, flush=True)
            save()
            return 1
        save()
    return 0


# --- the parent: one run ----------------------------------------------------------------------------------

@dataclass
class Job:
    """One notebook run, named as scripts/run_all.py names it (task__framework__variant)."""
    task: str
    framework: str
    label: str                  # pytorch, jax, keras-torch, keras-jax
    run: dict                   # the variant's parameters, as scripts/suite.variants gives them
    notebook: Path
    profile: str
    data: str | None
    override: str = ""          # DLROSETTA_PARAMS for this run
    estimate_s: float = SMALL_ESTIMATE_S
    limit_s: float | None = None  # its own time limit (None: what is left of the budget)

    @property
    def variant(self) -> str:
        return "-".join(str(v) for v in self.run.values())

    @property
    def key(self) -> str:
        return "__".join(filter(None, (self.task, self.framework, self.variant)))

    def paths(self, out: Path) -> dict[str, Path]:
        name = f"{self.framework}{'-' + self.variant if self.variant else ''}.ipynb"
        return {"record": out / "records" / self.profile / f"{self.key}.json",
                "executed": out / "executed" / self.profile / self.task / name,
                "log": out / "logs" / self.profile / f"{self.key}.log"}


@dataclass
class Check:
    """The whole check's state: where it writes, what it has found, how much time is left."""
    out: Path                   # --out: device_check.log, summary.json, records.tar.gz
    results: Path               # <work>/results/<machine>: what records.tar.gz holds
    budget_s: float
    started: float = field(default_factory=time.monotonic)
    summary: dict = field(default_factory=dict)
    child_env: dict = field(default_factory=dict)
    run_id: str = field(default_factory=lambda: time.strftime("%Y%m%dT%H%M%S"))
    current: subprocess.Popen | None = None

    def left(self) -> float:
        return self.budget_s - (time.monotonic() - self.started)

    def say(self, text: str = "") -> None:
        print(text, flush=True)
        with open(self.out / "device_check.log", "a", encoding="utf-8") as log:
            log.write(text + "\n")

    def append_log(self, text: str) -> None:
        with open(self.out / "device_check.log", "a", encoding="utf-8") as log:
            log.write(text if text.endswith("\n") else text + "\n")

    def save(self) -> None:
        self.summary["elapsed_s"] = round(time.monotonic() - self.started, 1)
        tmp = self.out / ".summary.json.tmp"
        tmp.write_text(json.dumps(self.summary, indent=1, default=str) + "\n")
        tmp.replace(self.out / "summary.json")

    def pack(self) -> None:
        """records.tar.gz: results/<machine>/ as it stands, the summary and log beside it in device_check/."""
        try:
            extra = self.results / "device_check"
            extra.mkdir(parents=True, exist_ok=True)
            for name in ("summary.json", "device_check.log"):
                if (self.out / name).exists():
                    shutil.copyfile(self.out / name, extra / name)
            tmp = self.out / ".records.tar.gz.tmp"
            with tarfile.open(tmp, "w:gz") as tar:
                tar.add(self.results, arcname=f"results/{self.results.name}")
            tmp.replace(self.out / "records.tar.gz")
        except OSError as err:
            self.say(f"records.tar.gz not written: {err}")


STACKS_SIGNAL = signal.SIGUSR1      # a notebook child writes every thread's stack to its log on this signal


def dump_stacks(proc: subprocess.Popen, wait_s: float = 2.0) -> None:
    """Before a run past its limit is killed: every process of its group (the notebook's child, and DataLoader
    workers forked from it) writes its threads' stacks to the log (faulthandler, registered in run_child), so a
    hang says where it waited."""
    try:
        os.killpg(proc.pid, STACKS_SIGNAL)
    except (ProcessLookupError, PermissionError):
        return
    time.sleep(wait_s)


def kill_group(proc: subprocess.Popen) -> None:
    """Stop a child and everything it started (its own process group: DataLoader workers, compilers)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def execute(check: Check, notebook: Path, executed: Path, log: Path, parameters: dict, env: dict,
            timeout: float) -> tuple[str, str | None]:
    """The notebook in a child process of its own, killed after `timeout` seconds: (status, error)."""
    from scripts import suite
    command = [sys.executable, str(Path(__file__).resolve()), "--child", "notebook", str(notebook), str(executed),
               json.dumps(parameters)]
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w", encoding="utf-8") as handle:
        proc = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=env, cwd=notebook.parent,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        check.current = proc
        try:
            code = proc.wait(timeout=max(1.0, timeout))
        except subprocess.TimeoutExpired:
            dump_stacks(proc)
            kill_group(proc)
            return "timeout", (f"no result after {timeout:.0f} s (the device check's limit for this run); killed "
                               "(its threads' stacks, and its workers', are at the end of its log)")
        finally:
            check.current = None
    if code == 0:
        return "ok", None
    return "failed", suite.notebook_error(executed, log) if code > 0 else f"killed by signal {-code}"


def headline(record: dict) -> dict:
    """The numbers a reader looks at first: time per epoch (or images/s), steady-state samples/s, the metric."""
    out = {}
    timing, steps, metrics = record.get("timing") or {}, record.get("steps") or {}, record.get("metrics") or {}
    if timing.get("median_s"):
        out[f"s_per_{timing.get('unit', 'lap')}"] = timing["median_s"]
    if steps.get("samples_per_s"):
        out["steady_samples_per_s"] = steps["samples_per_s"]
    out.update({k: v for k, v in metrics.items() if isinstance(v, (int, float))})
    if record.get("first_step_s"):
        out["first_step_s"] = record["first_step_s"]
    return out


def shown(numbers: dict) -> str:
    return ", ".join(f"{k} {v:.4g}" for k, v in numbers.items())


def run_job(check: Check, job: Job, timeout: float) -> dict:
    """One notebook: run it, read or make its record (as scripts/run_all.py does), return its summary entry."""
    from scripts import suite
    from support import records, precision
    paths = {k: p for k, p in job.paths(check.results).items()}
    for path in paths.values():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
    notebook = json.loads(job.notebook.read_text(encoding="utf-8"))
    declared = suite.declared_parameters(notebook)
    offered = {"profile": job.profile, "record_path": str(paths["record"].resolve()), "data": job.data, **job.run}
    parameters = {k: v for k, v in offered.items() if k in declared and v is not None}
    env = dict(check.child_env)
    env.pop("DLROSETTA_PARAMS", None)
    if job.override:
        env["DLROSETTA_PARAMS"] = job.override
    if job.framework == "keras" and "backend" in job.run:
        env["KERAS_BACKEND"] = job.run["backend"]       # the notebook sets it too, before its first import
    start = time.monotonic()
    missing = [name for name in ("profile", "record_path") if name not in parameters]
    if missing:
        status, error = "failed", f"{job.notebook.name} declares no {', '.join(missing)} in its cell tagged 'parameters'"
    else:
        status, error = execute(check, job.notebook, paths["executed"], paths["log"], parameters, env, timeout)
    seconds = round(time.monotonic() - start, 1)
    record = None
    if status == "ok":
        try:
            record = records.read(paths["record"])
        except (OSError, records.RecordError) as err:
            status, error = "failed", f"the notebook finished but left no valid record: {err}"
    elif status == "failed" and paths["record"].exists():
        try:        # a combination the framework cannot run: the notebook wrote why (records.stop), then stopped
            record = records.read(paths["record"])
            status = record["status"] if record["status"] in precision.STATUSES else status
        except (OSError, records.RecordError):
            pass
    if record is None or status not in ("ok",) + precision.STATUSES:
        record = records.failed(job.task, job.framework, job.variant, job.profile, check.results.name, status,
                                error or status)
    record.update(variant=job.variant, matrix={}, wall_s=seconds, timed=True, run=check.run_id,
                  inputs={"parameters": {k: v for k, v in parameters.items() if k != "record_path"},
                          "notebook": suite.digest(job.notebook),
                          "support": suite.digest(*suite.support_files(ROOT)),
                          "pins": None, "hardware": check.results.name, "timed": True},
                  executed_notebook=str(paths["executed"].relative_to(check.results)),
                  log=str(paths["log"].relative_to(check.results)),
                  device_check={"params_override": job.override or None,
                                "packages": "the machine's own (no lock set): see device_check/summary.json"})
    tmp = paths["record"].with_name(f".{paths['record'].name}.tmp")
    tmp.write_text(json.dumps(record, indent=1, default=str) + "\n")
    tmp.replace(paths["record"])
    entry = {"key": job.key, "task": job.task, "framework": job.label, "status": record["status"],
             "seconds": seconds, "estimate_s": job.estimate_s, "override": job.override or None,
             "headline": headline(record) if record["status"] == "ok" else {},
             "error": record.get("error") if record["status"] != "ok" else None,
             "record": str(paths["record"].relative_to(check.results.parent.parent))}
    return entry


def copy_log(check: Check, job: Job) -> None:
    log = job.paths(check.results)["log"]
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return
    if len(text) > LOG_CAP:
        text = text[:LOG_CAP // 4] + f"\n[... {len(text) - LOG_CAP} characters left out ...]\n" + text[-3 * LOG_CAP // 4:]
    check.append_log(f"----- {job.key}: {log.name} -----\n{text}\n----- end of {job.key} -----")


def run_jobs(check: Check, jobs: list[Job]) -> list[dict]:
    """Each job in order while the budget lasts: one whose expected time does not fit in what is left is
    skipped (said in the summary); one that runs gets what is left (less RESERVE_S), at most its own limit (at
    `full`, three times its estimate, at least two minutes). The expected time is the job's estimate scaled by
    how the runs so far that ended ok compared with theirs (the median ratio, within SCALE_BOUNDS), so a machine faster or
    slower than the guesses fits as many runs as it can. The summary and the archive are rewritten after
    every run."""
    entries = check.summary.setdefault("runs", [])
    skipped = check.summary.setdefault("skipped", [])
    for job in jobs:
        left = check.left() - RESERVE_S
        ratios = sorted(e["seconds"] / e["estimate_s"] for e in entries
                        if e.get("seconds") and e.get("estimate_s") and e["status"] == "ok")
        scale = min(max(ratios[len(ratios) // 2], SCALE_BOUNDS[0]), SCALE_BOUNDS[1]) if ratios else 1.0
        expected = job.estimate_s * scale
        if left < expected:
            reason = f"would not fit: about {expected:.0f} s expected, {int(max(left, 0))} s left of the budget"
            skipped.append({"key": job.key, "task": job.task, "framework": job.label, "reason": reason})
            check.say(f"SKIPPED {job.key}: {reason}")
            check.save()
            continue
        timeout = min(left, job.limit_s or left)
        check.say(f"running {job.key} ({job.notebook.relative_to(ROOT) if job.notebook.is_relative_to(ROOT) else job.notebook}"
                  f"{', DLROSETTA_PARAMS=' + job.override if job.override else ''}; limit {timeout:.0f} s)")
        try:
            entry = run_job(check, job, timeout)
        except Exception as err:      # noqa: BLE001  one run's trouble never loses the others
            entry = {"key": job.key, "task": job.task, "framework": job.label, "status": "failed",
                     "seconds": None, "error": f"device_check: {type(err).__name__}: {err}"}
        entries.append(entry)
        copy_log(check, job)
        what = shown(entry.get("headline") or {}) if entry["status"] == "ok" else entry.get("error")
        check.say(f"  {entry['status'].upper()} in {entry['seconds']} s: {what}")
        check.save()
        check.pack()
    return entries


# --- the parent: the plan ------------------------------------------------------------------------------------

def parse_overrides(values: list[str] | None) -> dict:
    """--params TASK:NAME=VALUE,...: replaces DEFAULT_OVERRIDES for that task ('TASK:' for none)."""
    from support import tasks
    chosen = {}
    for value in values or []:
        task, sep, spec = value.partition(":")
        if not sep or task not in tasks.TASKS:
            raise SystemExit(f"device_check.py: --params {value!r}: give TASK:NAME=VALUE,... with TASK one of "
                             f"{', '.join(tasks.TASKS)}")
        chosen[task] = spec
    return chosen


def plan(profile: str, only: list[str], task_names: list[str], overrides: dict,
         notebooks: Path = ROOT / "notebooks", order: str = "task") -> list[Job]:
    """The runs in priority order whose notebook exists, filtered by --only (pytorch, jax, keras-torch,
    keras-jax, keras) and --tasks; the variant parameters as scripts/suite.py gives them, so the keys are
    scripts/run_all.py's. Order `task`: every framework of the first task, then of the next (TASK_ORDER x
    FRAMEWORK_ORDER); `framework`: every task of PyTorch first, then of JAX, and so on (wider, where the
    budget runs out before the last task)."""
    from scripts import suite
    from support import tasks
    jobs = []
    pairs = [(t, f) for t in TASK_ORDER for f in FRAMEWORK_ORDER]
    if order == "framework":
        pairs = [(t, f) for f in FRAMEWORK_ORDER for t in TASK_ORDER]
    for (task, task_run), (framework, label, framework_run) in pairs:
        if task_names and task not in task_names:
            continue
        if only and label not in only and not (framework == "keras" and "keras" in only):
            continue
        wanted = {**framework_run, **task_run}
        runs = [r for r in suite.variants(task, framework) if all(r.get(k) == v for k, v in wanted.items())]
        if not runs:
            continue
        notebook = suite.notebook_path(task, framework, runs[0], notebooks)
        if not notebook.exists():
            continue
        mode = f"/{task_run['mode']}" if "mode" in task_run else ""
        estimate = ESTIMATE_S[task + mode][label] if profile == "full" else SMALL_ESTIMATE_S
        override = overrides.get(task, DEFAULT_OVERRIDES[task] if profile == "full" else "")
        data = "synthetic" if "data" in tasks.TASKS[task].parameters else None
        limit = max(3 * estimate, 120) if profile == "full" else None
        jobs.append(Job(task, framework, label, runs[0], notebook, profile, data, override, estimate, limit))
    return jobs


# --- the parent: the carried wheels, the versions, the calibration, the process group ---------------------------

def distribution_name(wheel: Path) -> str:
    return re.sub(r"[-_.]+", "-", wheel.name.split("-")[0]).lower()


def installed_version(name: str, paths: list[str] | None = None) -> str | None:
    from importlib import metadata
    try:
        if paths is None:
            return metadata.version(name)
        found = list(metadata.distributions(name=name, path=paths))
        return found[0].version if found else None
    except metadata.PackageNotFoundError:
        return None


def install_wheels(wheels: Path, site: Path, python: str = sys.executable, say=print) -> dict:
    """Install each carried wheel whose distribution this Python lacks into `site` (pip --no-index --no-deps
    --target; a wheel unpacked by zipfile where pip is missing), then put `site` first on sys.path. Without
    wheels, a `site` folder prepared beforehand is used as it is."""
    report = {"wheels": str(wheels), "site": str(site), "installed": [], "present": [], "error": None}
    files = sorted(wheels.glob("*.whl")) if wheels.is_dir() else []
    if files:
        check = subprocess.run([python, "-c", "import json, sys\nfrom importlib import metadata\nout = {}\n"
                                "for n in sys.argv[1:]:\n    try: out[n] = metadata.version(n)\n"
                                "    except metadata.PackageNotFoundError: out[n] = None\nprint(json.dumps(out))",
                                *[distribution_name(w) for w in files]], capture_output=True, text=True,
                               env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
        present = json.loads(check.stdout) if check.returncode == 0 else {}
        missing = [w for w in files if not present.get(distribution_name(w))]
        report["present"] = [f"{n} {v}" for n, v in present.items() if v]
        shutil.rmtree(site, ignore_errors=True)
        if missing:
            def pip(wheels):
                return subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
                                       "--no-compile", "--disable-pip-version-check", "--target", str(site),
                                       "--upgrade", *map(str, wheels)], capture_output=True, text=True)
            done = pip(missing)
            if done.returncode == 0:
                report["installed"] = [w.name for w in missing]
            elif "No module named pip" in done.stderr:      # a wheel is a zip of what goes into site-packages
                import zipfile
                for wheel in missing:
                    with zipfile.ZipFile(wheel) as z:
                        z.extractall(site)
                report.update(installed=[w.name for w in missing], unpacked_without_pip=True)
            else:               # one at a time, so that one wheel this machine refuses keeps none of the others out
                errors = []
                for wheel in missing:
                    one = pip([wheel])
                    if one.returncode == 0:
                        report["installed"].append(wheel.name)
                    else:
                        errors.append(f"{wheel.name}: {(one.stderr.strip().splitlines() or ['pip failed'])[-1]}")
                report["error"] = "; ".join(errors) or None
        say(f"carried wheels: installed {', '.join(report['installed']) or 'none'}"
            f"{'; already here: ' + ', '.join(report['present']) if report['present'] else ''}"
            f"{'; ERROR ' + report['error'] if report['error'] else ''}")
    elif site.is_dir():
        say(f"carried wheels: none in {wheels}; using the prepared {site}")
    else:
        say(f"carried wheels: none ({wheels} is absent): Keras and jax2onnx only if this machine has them")
    if site.is_dir() and str(site) not in sys.path:
        sys.path.insert(0, str(site))
    return report


def nvidia_smi() -> dict:
    fields = "name,driver_version,memory.total,compute_cap"
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as err:
        return {"gpus": [], "note": f"nvidia-smi: {err}"}
    gpus = [dict(zip(fields.split(","), (p.strip() for p in line.split(",")))) for line in out.splitlines() if line.strip()]
    return {"gpus": gpus}


def shm_free() -> int | None:
    """Free bytes in /dev/shm, where DataLoader workers hand batches over (a container's default 64 MiB holds
    about three of DenseNet-121's float32 batches of 32); None where there is none."""
    try:
        return shutil.disk_usage("/dev/shm").free
    except OSError:
        return None


def versions(site: Path) -> dict:
    """Python, the OS and every package the notebooks use, read without importing them."""
    paths = [str(site)] + sys.path if site.is_dir() else None
    return {"python": platform.python_version(), "executable": sys.executable,
            "os": f"{platform.system()} {platform.release()}", "cpu_count": os.cpu_count(),
            "shm_free_bytes": shm_free(),
            **{name: installed_version(name, paths) for name in VERSIONS}}


def child(check: Check, what: str, timeout: float, env: dict | None = None, extra: list[str] | None = None) -> dict:
    """scripts/device_check.py --child WHAT in a process of its own: the JSON on its last stdout line, its
    output kept in device_check.log; {"error": ...} where it fails."""
    command = [sys.executable, str(Path(__file__).resolve()), "--child", what, *(extra or [])]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=max(1.0, timeout),
                              env=env or check.child_env, cwd=ROOT, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as err:
        out = err.stdout.decode(errors="replace") if isinstance(err.stdout, bytes) else (err.stdout or "")
        check.append_log(f"----- {what} (timed out after {timeout:.0f} s) -----\n{out}")
        return {"error": f"no answer after {timeout:.0f} s"}
    check.append_log(f"----- {what} -----\n{done.stdout}{done.stderr}")
    lines = done.stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1])
    except (IndexError, ValueError):
        answer = {}
    if done.returncode != 0 or not isinstance(answer, dict):
        last = (done.stderr.strip().splitlines() or done.stdout.strip().splitlines() or ["no output"])[-1]
        return {**(answer if isinstance(answer, dict) else {}), "error": last[:500]}
    return answer


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def process_group_check(check: Check, gpus: int, timeout: float = 120) -> dict:
    """torch.distributed with "cpu:gloo,cuda:nccl" (gloo alone without CUDA): two ranks where there are two
    GPUs, else one, each a process of its own, as torchrun starts them."""
    world = 2 if gpus >= 2 else 1
    env = {**check.child_env, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": str(world)}
    command = [sys.executable, str(Path(__file__).resolve()), "--child", "rank"]
    procs = [subprocess.Popen(command, env={**env, "RANK": str(r), "LOCAL_RANK": str(r)}, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, cwd=ROOT, stdin=subprocess.DEVNULL,
                              start_new_session=True) for r in range(world)]
    ranks = []
    deadline = time.monotonic() + timeout
    for rank, proc in enumerate(procs):
        try:
            out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            kill_group(proc)
            out = f"rank {rank}: no answer after {timeout:.0f} s"
        check.append_log(f"----- process group, rank {rank} -----\n{out}")
        try:
            ranks.append(json.loads(out.strip().splitlines()[-1]))
        except (IndexError, ValueError):
            ranks.append({"rank": rank, "ok": False, "error": (out.strip().splitlines() or ["no output"])[-1][:300]})
    return {"world_size": world, "ok": all(r.get("ok") for r in ranks), "ranks": ranks}


# --- the children: torch (versions, peaks, true float32), jax, a rank --------------------------------------------

def nccl_version(torch) -> str | None:
    try:
        version = torch.cuda.nccl.version()
    except Exception:        # noqa: BLE001  a build without NCCL
        return None
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


def child_torch(profile: str) -> dict:
    import torch
    sys.path.insert(0, str(ROOT))
    from scripts import calibrate
    from support import precision

    small = profile != "full"           # the tiny and cpu profiles check the code path, not the peak
    cuda = torch.cuda.is_available()
    info = {"torch": torch.__version__, "cuda_available": cuda, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version() if cuda else None,
            "nccl": nccl_version(torch) if cuda else None,
            "devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else [],
            "capability": ".".join(map(str, torch.cuda.get_device_capability())) if cuda else None}
    measured = calibrate.measure(devices={"cpu": calibrate.KINDS["cpu"]}, **({"n": 1024} if small else {}))
    if cuda:
        gpu = calibrate.measure(devices={"cuda": calibrate.KINDS["cuda"]}, **({"n": 2048, "budget_s": 0.3} if small else {}))
        measured["peaks"].update(gpu["peaks"])
        measured.setdefault("errors", {}).update(gpu.get("errors", {}))
        torch.cuda.empty_cache()
    peaks, errors = measured["peaks"], measured.pop("errors", {})
    true32 = {"how": "float32 matmul against float64, Frobenius norm of the difference over the exact product's"}
    try:
        device = "cuda" if cuda else "cpu"
        n = 4096 if cuda and not small else 1024
        gen = torch.Generator(device=device).manual_seed(0)
        a, b = (torch.randn(n, n, device=device, generator=gen) for _ in range(2))
        exact = a.double() @ b.double()
        relative = {}
        for name, tf32 in (("tf32_off", False), ("tf32_on", True)):
            if tf32 and not cuda:
                continue
            if cuda:
                calibrate.set_tf32(torch, tf32)
            relative[name] = float(((a @ b).double() - exact).norm() / exact.norm())
        if cuda:
            calibrate.set_tf32(torch, False)
        true32.update(device=device, n=n, relative_error=relative, true_float32=relative["tf32_off"] < 1e-5)
    except Exception as err:      # noqa: BLE001
        errors["true_float32"] = f"{type(err).__name__}: {err}"
    precisions = {p: precision.peak_key("cuda", p) for p in precision.PEAK_KINDS}
    return {"torch": info, "calibration": {**measured,      # the peaks, the harness overhead, the load, the date
                                           "precisions": {k: v for k, v in precisions.items() if v in peaks},
                                           **({"errors": errors} if errors else {}),
                                           **({"note": "tiny or cpu profile: small matrices, not a peak"} if small else {})},
            "true_float32": true32 if "relative_error" in true32 else None}


def child_jax() -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    backend = jax.default_backend()
    devices = jax.devices()
    rng = np.random.default_rng(0)
    n = 2048
    a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
    exact = a.astype(np.float64) @ b.astype(np.float64)
    errors = {}
    for name, prec in (("default", None), ("highest", jax.lax.Precision.HIGHEST)):
        product = np.asarray(jnp.matmul(jnp.asarray(a), jnp.asarray(b), precision=prec), dtype=np.float64)
        errors[name] = float(np.linalg.norm(product - exact) / np.linalg.norm(exact))
    return {"jax": jax.__version__, "backend": backend, "devices": [str(d) for d in devices],
            "device_kind": devices[0].device_kind, "n_devices": len(devices),
            "matmul_float32_relative_error": errors, "n": n,
            "default_is_true_float32": errors["default"] < 1e-5,
            "jax_default_matmul_precision": str(getattr(jax.config, "jax_default_matmul_precision", None))}


def child_rank() -> dict:
    import datetime

    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    cuda = torch.cuda.is_available()
    backend = "cpu:gloo,cuda:nccl" if cuda else "gloo"
    if cuda:
        torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))
    checks = {}
    for device in ["cpu"] + (["cuda"] if cuda else []):
        t = torch.full((4,), float(rank + 1), device=device)
        dist.broadcast(t, src=0)                    # every rank now holds rank 0's ones
        broadcast_ok = bool((t == 1).all())
        dist.all_reduce(t)                          # sum over the ranks: world
        checks[device] = {"broadcast": broadcast_ok, "all_reduce": bool((t == world).all())}
    if cuda:
        torch.cuda.synchronize()
    dist.destroy_process_group()
    return {"rank": rank, "world_size": world, "backend": backend, "torch": torch.__version__,
            "nccl": nccl_version(torch) if cuda else None, "checks": checks,
            "ok": all(all(c.values()) for c in checks.values())}


def run_child(argv: list[str]) -> int:
    what = argv[0]
    if what == "notebook":
        import faulthandler
        faulthandler.register(STACKS_SIGNAL, file=sys.__stderr__, all_threads=True, chain=False)
        return execute_notebook(Path(argv[1]), Path(argv[2]), json.loads(argv[3]))
    answer = {"torch": lambda: child_torch(argv[1] if len(argv) > 1 else "full"), "jax": child_jax,
              "rank": child_rank}[what]()
    print(json.dumps(answer, default=str), flush=True)
    return 0


# --- main ----------------------------------------------------------------------------------------------------

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--out", type=Path, required=True, help="folder for device_check.log, summary.json, records.tar.gz")
    p.add_argument("--budget-s", type=float, default=540,
                   help="seconds for the whole check (default 540: a 600 s device call, with room to pack)")
    p.add_argument("--profile", default="full", choices=("full", "cpu", "tiny"), help="the notebooks' profile (default full)")
    p.add_argument("--only", action="append", metavar="NAMES",
                   help=f"frameworks to run, comma-separated: {', '.join(CHOICES)} (keras: both backends); default all")
    p.add_argument("--tasks", action="append", metavar="NAMES", help="tasks to run, comma-separated (default all)")
    p.add_argument("--order", choices=("task", "framework"), default="task",
                   help="task (default): each task's four frameworks, task after task; framework: PyTorch on every "
                        "task first, then JAX, Keras on torch, Keras on JAX")
    p.add_argument("--params", action="append", metavar="TASK:NAME=VALUE,...",
                   help="DLROSETTA_PARAMS for one task's runs, replacing DEFAULT_OVERRIDES ('TASK:' for none)")
    p.add_argument("--work", type=Path, help="where results/<machine>/ is built (default: a new temporary folder)")
    p.add_argument("--wheels", type=Path, default=DEVICE / "wheels", help="carried wheels (default .device/wheels)")
    p.add_argument("--site", type=Path, default=DEVICE / "site", help="where they are installed (default .device/site)")
    p.add_argument("--skip", action="append", default=[], metavar="STEPS",
                   help="steps to leave out, comma-separated: calibration, jax, process-group, notebooks")
    p.add_argument("--machine", help="the results folder's name (default support.env.machine_name())")
    p.add_argument("--list", action="store_true", help="print the planned runs and stop")
    args = p.parse_args(argv)
    args.only = [n for v in args.only or [] for n in v.split(",") if n]
    for name in args.only:
        if name not in CHOICES:
            p.error(f"--only {name!r}: choose from {', '.join(CHOICES)}")
    args.tasks = [n for v in args.tasks or [] for n in v.split(",") if n]
    args.skip = {n for v in args.skip for n in v.split(",") if n}
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return run_child(argv[1:])
    sys.path.insert(0, str(ROOT))
    args = parse_args(argv)
    from support import env as support_env, tasks
    for name in args.tasks:
        if name not in tasks.TASKS:
            raise SystemExit(f"device_check.py: --tasks {name!r}: choose from {', '.join(tasks.TASKS)}")
    jobs = plan(args.profile, args.only, args.tasks, parse_overrides(args.params), order=args.order)
    if args.list:
        for job in jobs:
            print(f"{job.key}: {job.notebook.relative_to(ROOT)}, about {job.estimate_s} s"
                  f"{', DLROSETTA_PARAMS=' + job.override if job.override else ''}")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "device_check.log").write_text("")
    machine = args.machine or support_env.machine_name()
    work = args.work or Path(tempfile.mkdtemp(prefix="dlr-device-check-"))
    check = Check(out=args.out, results=work / "results" / machine, budget_s=args.budget_s)
    check.results.mkdir(parents=True, exist_ok=True)

    def interrupted(signum, frame):
        if check.current is not None:
            kill_group(check.current)
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, interrupted)

    check.summary = {"script": "scripts/device_check.py", "argv": argv, "run": check.run_id, "machine": machine,
                     "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "budget_s": args.budget_s,
                     "profile": args.profile, "host": socket.gethostname(), "git_commit": support_env.git_commit()}
    check.say(f"DL Rosetta device check {check.run_id}: {machine}, budget {args.budget_s:.0f} s, profile {args.profile}, "
              f"{len(jobs)} notebook runs planned; results in {check.results}")
    try:
        try:
            check.summary["wheels"] = install_wheels(args.wheels, args.site, say=check.say)
        except Exception as err:      # noqa: BLE001
            check.summary["wheels"] = {"error": f"{type(err).__name__}: {err}"}
            check.say(f"carried wheels: ERROR {err}")
        pythonpath = [str(ROOT)] + ([str(args.site)] if args.site.is_dir() else [])
        check.child_env = {**os.environ, **support_env.project_environment(), "PYTHONUNBUFFERED": "1",
                           "MPLBACKEND": os.environ.get("MPLBACKEND", "Agg"),
                           "PYTHONPATH": os.pathsep.join(pythonpath + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
        smi = nvidia_smi()
        check.summary["versions"] = {**versions(args.site), "nvidia_smi": smi}
        v = check.summary["versions"]
        check.say("versions: " + ", ".join(f"{k} {v[k]}" for k in ("python", *VERSIONS) if v.get(k)))
        for gpu in smi["gpus"]:
            check.say(f"GPU: {gpu.get('name')}, driver {gpu.get('driver_version')}, {gpu.get('memory.total')}, "
                      f"compute capability {gpu.get('compute_cap')}")
        if not smi["gpus"]:
            check.say(f"GPU: none seen by nvidia-smi{' (' + smi['note'] + ')' if smi.get('note') else ''}")
        check.save()

        if "calibration" not in args.skip:
            answer = child(check, "torch", min(300, max(check.left(), 1)), extra=[args.profile])
            check.summary["versions"]["torch_runtime"] = answer.get("torch")
            check.summary["calibration"] = answer.get("calibration") or {"error": answer.get("error")}
            check.summary["true_float32"] = answer.get("true_float32")
            tr = answer.get("torch") or {}
            if tr:
                check.say(f"torch {tr.get('torch')}: " + (
                    f"CUDA {tr.get('cuda')}, cuDNN {tr.get('cudnn')}, NCCL {tr.get('nccl')}, devices {tr.get('devices')} "
                    f"(compute capability {tr.get('capability')})" if tr.get("cuda_available") else
                    f"no CUDA device (a build for CUDA {tr.get('cuda')})"))
            peaks = (answer.get("calibration") or {}).get("peaks") or {}
            for key, peak in peaks.items():
                check.say(f"peak {key}: {peak['gflops'] / 1000:.2f} TFLOP/s (median of {peak['repeats']}, {peak['library']})")
            if "cuda/float32" not in peaks:
                check.say("no CUDA peak: " + ("torch sees no CUDA device" if tr and not tr.get("cuda_available")
                                             else answer.get("error", "the calibration failed")))
            t32 = answer.get("true_float32")
            if t32:
                check.say(f"true float32 ({t32['device']}, n {t32['n']}): relative error "
                          + ", ".join(f"{k} {e:.2e}" for k, e in t32["relative_error"].items()))
            if answer.get("error"):
                check.say(f"calibration ERROR: {answer['error']}")
            for key, error in ((answer.get("calibration") or {}).get("errors") or {}).items():
                check.say(f"calibration ERROR in {key}: {error}")
            cal = check.summary["calibration"]
            if cal.get("peaks"):
                meta = {"run": check.run_id, "profiles": [args.profile], "argv": ["scripts/device_check.py", *argv],
                        "timed": True, "started": check.summary["started"], "calibration": {"before": cal["peaks"]},
                        "load_before": cal.get("load"), "harness_overhead_s": cal.get("harness_overhead_s"),
                        "gpu": bool(smi["gpus"]), "device_check": True}
                (check.results / "runs").mkdir(parents=True, exist_ok=True)
                (check.results / "runs" / f"{check.run_id}.json").write_text(json.dumps(meta, indent=1) + "\n")
            check.save()
        if "jax" not in args.skip:
            answer = child(check, "jax", min(120, max(check.left(), 1)))
            check.summary["jax"] = answer
            if "error" in answer and "backend" not in answer:
                check.say(f"JAX: ERROR {answer['error']}")
            else:
                check.say(f"JAX {answer.get('jax')}: backend {answer.get('backend')}, {answer.get('device_kind')} "
                          f"x{answer.get('n_devices')}; float32 matmul relative error "
                          + ", ".join(f"{k} {e:.2e}" for k, e in (answer.get("matmul_float32_relative_error") or {}).items()))
            check.save()
        if "process-group" not in args.skip:
            answer = process_group_check(check, len(smi["gpus"]), timeout=min(120, max(check.left(), 1)))
            check.summary["process_group"] = answer
            backend = next((r.get("backend") for r in answer["ranks"] if r.get("backend")), "?")
            check.say(f"process group ({backend}, {answer['world_size']} rank{'s' if answer['world_size'] > 1 else ''}): "
                      + ("ok: broadcast and all_reduce of a CPU" + (" and a CUDA" if "nccl" in backend else "")
                         + " tensor" if answer["ok"] else "FAILED: " + "; ".join(
                             str(r.get("error") or r.get("checks")) for r in answer["ranks"])))
            check.save()
        check.pack()
        if "notebooks" not in args.skip:
            run_jobs(check, jobs)
    except KeyboardInterrupt:
        check.summary["interrupted"] = True
        check.say("interrupted: what ran is kept")
    finally:
        runs = check.summary.get("runs", [])
        counts = {}
        for entry in runs:
            counts[entry["status"]] = counts.get(entry["status"], 0) + 1
        check.summary["counts"] = {**counts, "skipped": len(check.summary.get("skipped", []))}
        check.say(f"done in {time.monotonic() - check.started:.0f} s: "
                  + ", ".join(f"{n} {s}" for s, n in check.summary["counts"].items()))
        check.save()
        check.pack()
    return 0 if not any(e["status"] in ("failed", "timeout") for e in check.summary.get("runs", [])) else 1


if __name__ == "__main__":
    sys.exit(main())
