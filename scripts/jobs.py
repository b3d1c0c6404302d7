"""One notebook run, as the runner and the GPU machine's check both see it.

A `Job` is one run to make: a notebook, its variant parameters, the variant matrix's entry, the profile. Around it,
what either runner needs and neither should write twice: the parameters papermill passes (those the notebook
declares), what the record was made from (`inputs`, which `--resume` compares), the kernel's environment, the kill
of a run's whole process tree, and `outcome()`, which turns what a run left in its staging folder into the record
that `results.finalize` stores. Standard library, `psutil` (the kill) and the project's own modules only: the GPU
machine's check imports it without papermill or Jupyter.

Words: a *run* is one execution of one notebook with one set of parameters (a Job); the *run id* names one
invocation of the runner, which makes many runs (results/<machine>/runs/<run id>.json); a notebook's *variant
parameters* are the papermill parameters of its variants (Keras's backend, DenseNet's mode).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from scripts import suite
from scripts.results import Identity, RecordError, failed
from support import env, frameworks, hardware, params, precision, records, tasks

FINAL = ("ok",) + precision.STATUSES  # what --resume keeps: a result, or a combination that cannot run
INPUT_CHANGES = {
    "notebook": "the notebook changed",
    "support": "support/ changed",
    "pins": "its environment's pins changed",
    "hardware": "it ran on other hardware",
    "timed": "it ran untimed (--jobs above 1)",
}


@dataclass
class Job:
    """One notebook run to make."""

    task: str
    framework: str
    parameters: dict  # the notebook's variant parameters, e.g. {"backend": "jax"} (suite.variants)
    notebook: Path
    matrix: dict = field(default_factory=dict)  # the variant matrix's parameters, {} for the baseline
    profile: str = ""  # resolved for this notebook: run_all.resolve_profiles()
    stopped: str | None = None  # why it cannot run here (its GPU environment cannot compute)
    cpu_reason: str | None = None  # on a GPU machine, why it runs on the CPU (its record says so)
    data: str | None = None  # what its `data` parameter gets, for tasks that have one

    @property
    def identity(self) -> Identity:
        return Identity.of(self.task, self.framework, self.parameters, self.matrix)

    @property
    def variant(self) -> str:
        return self.identity.variant

    @property
    def key(self) -> str:
        return self.identity.key

    @property
    def title(self) -> str:
        return self.identity.title

    @property
    def environment(self) -> str:
        return suite.run_environment(self.framework, self.parameters)


def notebook_parameters(job: Job, record_path: Path, parity: bool = False) -> dict:
    """What papermill passes to the notebook: of the runner's parameters, those it declares."""
    offered = {
        "profile": job.profile,
        "record_path": str(Path(record_path).resolve()),
        "data": job.data,
        **({"parity": True} if parity else {}),
        **job.parameters,
        **job.matrix,
    }
    declared = suite.declared_parameters(job.notebook)
    return {name: value for name, value in offered.items() if name in declared and value is not None}


def missing_parameters(job: Job, parameters: dict) -> str | None:
    """The failed run's error where the notebook's parameters cell lacks one every notebook declares."""
    missing = [name for name in tasks.COMMON_PARAMETERS if name not in parameters]
    if not missing:
        return None
    return (
        f"{suite.shown(job.notebook)} declares no {', '.join(missing)} in its cell tagged 'parameters'; every "
        f"notebook declares {', '.join(tasks.COMMON_PARAMETERS)}"
    )


def inputs(job: Job, parameters: dict, *, support: str, hardware_name: str, timed: bool, pins: bool = True) -> dict:
    """What the record was made from: --resume reruns a notebook when any of these changed. `pins` False: the
    machine's own packages, no lock set (the GPU machine's check)."""
    lock = suite.lock_file(job.environment) if pins else None
    return {
        "parameters": {k: v for k, v in parameters.items() if k != "record_path"},
        "notebook": suite.digest(job.notebook),
        "support": support,
        "pins": suite.digest(lock, suite.REQUIREMENTS / f"{job.environment}-constraints.txt") if lock else None,
        "lock_set": lock.stem if lock else None,
        "hardware": hardware_name,
        "timed": timed,
    }


def why_rerun(previous: dict | None, now: dict) -> str | None:
    """None where `previous` is an ok record made from the inputs `now`; else why it must run again."""
    if previous is None:
        return "no record yet"
    if previous["status"] not in FINAL:
        return f"its last run ended {previous['status']}"
    before = previous.get("inputs")
    if not isinstance(before, dict):
        return "its record predates input tracking"
    for key, reason in INPUT_CHANGES.items():
        if before.get(key) != now[key]:
            return reason
    old, new = before.get("parameters") or {}, now["parameters"]
    changed = [
        f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)
    ]
    return f"its parameters changed ({', '.join(changed)})" if changed else None


def kernel_environment(jobs: int = 1) -> dict:
    """The runner's environment plus the project's cache locations, for papermill and its kernels.
    With several notebooks at once, each kernel gets its share of the cores and OpenMP threads that
    sleep rather than spin while they wait: two kernels of two spinning threads on two cores made
    MXNet's tiny DenseNet 10x slower (67 s against 7 s alone)."""
    shared = {}
    if jobs > 1:
        threads = str(max(1, (os.cpu_count() or 1) // jobs))
        shared = {
            "OMP_NUM_THREADS": threads,
            "OPENBLAS_NUM_THREADS": threads,
            "MKL_NUM_THREADS": threads,
            "OMP_WAIT_POLICY": "PASSIVE",
        }
    outside = {k: v for k, v in os.environ.items() if k != params.OVERRIDE_VARIABLE}  # the profiles as they are
    return {**outside, **env.project_environment(), "PYTHONUNBUFFERED": "1", **shared}


def job_environment(job: Job, jobs: int = 1) -> dict:
    """The kernel's environment for one run: kernel_environment(), and for a run of the baseline on another seed
    (--seeds) that seed, through support.params' override."""
    environment = kernel_environment(jobs)
    for variable, value in frameworks.get(job.framework).environ:  # its kernels' own (support/frameworks.py)
        environment[variable] = value.format(cache=environment["DLROSETTA_CACHE"])
    if "seed" in job.matrix:
        environment[params.OVERRIDE_VARIABLE] = f"seed={job.matrix['seed']}"
    return environment


def kill_tree(pid: int) -> None:
    """Kill a run's process and every process under it (papermill and its kernel, a notebook and its workers)."""
    import psutil

    try:
        parent = psutil.Process(pid)
        procs = parent.children(recursive=True) + [parent]
    except psutil.NoSuchProcess:
        return
    for proc in procs:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=10)


def outcome(job: Job, status: str, error: str | None, staged_record: Path, machine: str) -> dict:
    """The record of a run that has ended, before results.finalize: the notebook's own where it ran to the end
    (or stopped on a combination it cannot run, saying why); else a failed, timeout or unsupported record that
    says what happened. `status`: how the process ended (ok, failed, timeout)."""
    run = job.identity
    record = None
    if status == "ok":
        try:
            record = records.read(staged_record)
        except (OSError, RecordError) as err:
            status, error = "failed", f"the notebook finished but left no valid record: {err}"
    elif status == "failed" and staged_record.exists():
        try:  # a precision or compilation the framework cannot run: the notebook wrote why, then stopped
            record = records.read(staged_record)
            status = record["status"] if record["status"] in precision.STATUSES else status
        except (OSError, RecordError):
            pass
    missing_kernel = hardware.kernel_failure(run.precision, error) if status == "failed" else None
    if missing_kernel:  # the framework's kernels for this CPU lack the precision: its words, never a failure
        record = failed(run, job.profile, machine, "unsupported", missing_kernel)
        record["precision"] = run.precision
    elif status not in FINAL or record is None:
        record = failed(run, job.profile, machine, status, error or status)
    return record
