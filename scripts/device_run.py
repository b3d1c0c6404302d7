"""The GPU machine's check's state, and one notebook run within it the runner's way.

Check is what the whole check writes and knows (--out's device_check.log, summary.json and records.tar.gz; the
budget; the child processes' environment); run_job runs one planned notebook as scripts/run_all.py's run_job does,
without papermill (scripts.notebook_exec in a child process of its own, killed with every process under it past
its limit, their stacks first written to its log), and stores its record through results.finalize.
scripts.jobs and scripts.results are imported where they are used: on the GPU machine, only once the carried
wheels are installed (scripts/device_env.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from scripts import suite
from scripts.notebook_exec import STACKS_SIGNAL
from support import env, files, params

if TYPE_CHECKING:
    from scripts import results
    from scripts.device_check import Planned

NOTEBOOK = [sys.executable, "-m", "scripts.notebook_exec"]  # a notebook run without papermill
LOG_CAP = 200_000  # characters of one notebook's log copied into device_check.log (head and tail)


# --- the check's state ------------------------------------------------------------------------------------------------


@dataclass
class Check:
    """The whole check's state: where it writes, what it has found, how much time is left."""

    out: Path  # --out: device_check.log, summary.json, records.tar.gz
    results: Path  # <work>/results/<machine>: what records.tar.gz holds
    budget_s: float
    started: float = field(default_factory=time.monotonic)
    summary: dict = field(default_factory=dict)
    child_env: dict = field(default_factory=dict)
    run_id: str = field(default_factory=lambda: time.strftime("%Y%m%dT%H%M%S"))
    hardware: str = field(default_factory=env.machine_name)  # the records' inputs.hardware, as the runner's
    support: str = field(default_factory=lambda: suite.digest(*suite.support_files()))
    current: subprocess.Popen | None = None

    @property
    def layout(self) -> results.Layout:
        """results/<machine>/ as the runner lays it out."""
        from scripts.results import Layout

        return Layout(self.results)

    def left(self) -> float:
        return self.budget_s - (time.monotonic() - self.started)

    def say(self, text: str = "") -> None:
        print(text, flush=True)
        self.append_log(text)

    def append_log(self, text: str) -> None:
        with open(self.out / "device_check.log", "a", encoding="utf-8") as log:
            log.write(text if text.endswith("\n") else text + "\n")

    def save(self) -> None:
        self.summary["elapsed_s"] = round(time.monotonic() - self.started, 1)
        files.atomic_write(self.out / "summary.json", json.dumps(self.summary, indent=1, default=str) + "\n")

    def pack(self) -> None:
        """records.tar.gz: results/<machine>/ as it stands (no run in progress), the summary and log beside it in
        device_check/."""
        from scripts.results import STAGING

        try:
            extra = self.results / "device_check"
            extra.mkdir(parents=True, exist_ok=True)
            for name in ("summary.json", "device_check.log"):
                if (self.out / name).exists():
                    shutil.copyfile(self.out / name, extra / name)
            with files.replacing(self.out / "records.tar.gz") as tmp, tarfile.open(tmp, "w:gz") as tar:
                tar.add(
                    self.results,
                    arcname=f"results/{self.results.name}",
                    filter=lambda member: None if STAGING in Path(member.name).parts else member,
                )
        except OSError as err:
            self.say(f"records.tar.gz not written: {err}")


# --- one run ----------------------------------------------------------------------------------------------------------


def dump_stacks(proc: subprocess.Popen, wait_s: float = 2.0) -> None:
    """Before a run past its limit is killed: every process of its group (the notebook's child, and DataLoader
    workers forked from it) writes its threads' stacks to the log (faulthandler, registered in
    scripts.notebook_exec), so a hang says where it waited."""
    try:
        os.killpg(proc.pid, STACKS_SIGNAL)
    except (ProcessLookupError, PermissionError):
        return
    time.sleep(wait_s)


def execute(
    check: Check, notebook: Path, executed: Path, log: Path, parameters: dict, env: dict, timeout: float
) -> tuple[str, str | None]:
    """The notebook in a child process of its own, killed with every process under it after `timeout` seconds:
    (status, error)."""
    from scripts.jobs import kill_tree

    command = [*NOTEBOOK, str(notebook), str(executed), json.dumps(parameters)]
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w", encoding="utf-8") as handle:
        proc = subprocess.Popen(
            command,
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=notebook.parent,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        check.current = proc
        try:
            code = proc.wait(timeout=max(1.0, timeout))
        except subprocess.TimeoutExpired:
            dump_stacks(proc)
            kill_tree(proc.pid)
            return "timeout", (
                f"no result after {timeout:.0f} s (the device check's limit for this run); killed "
                "(its threads' stacks, and its workers', are at the end of its log)"
            )
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


def run_job(check: Check, planned: Planned, timeout: float) -> dict:
    """One notebook the runner's way (scripts/run_all.py's run_job): executed into the staging folder, its record
    stored by results.finalize; returns its summary entry. Interrupted, it leaves the previous record as it was."""
    from scripts import jobs, results

    job, layout = planned.job, check.layout
    run = job.identity
    child_env = {k: v for k, v in check.child_env.items() if k != params.OVERRIDE_VARIABLE}
    child_env.update({params.OVERRIDE_VARIABLE: planned.override} if planned.override else {})
    if job.framework == "keras" and "backend" in job.parameters:
        child_env["KERAS_BACKEND"] = job.parameters["backend"]  # the notebook sets it too, before its first import
    start = time.monotonic()
    with layout.fresh_staging(job.profile, run) as staged:
        parameters = jobs.notebook_parameters(job, staged["record"])
        error = jobs.missing_parameters(job, parameters)
        status, error = (
            ("failed", error)
            if error
            else execute(check, job.notebook, staged["executed"], staged["log"], parameters, child_env, timeout)
        )
        seconds = round(time.monotonic() - start, 1)
        record = results.finalize(
            layout,
            jobs.outcome(job, status, error, staged["record"], layout.machine),
            run,
            job.profile,
            staged=staged,
            run=check.run_id,
            wall_s=seconds,
            timed=True,
            inputs=jobs.inputs(
                job, parameters, support=check.support, hardware_name=check.hardware, timed=True, pins=False
            ),
            device_check={
                "params_override": planned.override or None,
                "packages": "the machine's own (no lock set): see device_check/summary.json",
            },
        )
    return {
        "key": job.key,
        "task": job.task,
        "framework": planned.label,
        "status": record["status"],
        "seconds": seconds,
        "estimate_s": planned.estimate_s,
        "override": planned.override or None,
        "headline": headline(record) if record["status"] == "ok" else {},
        "error": record.get("error") if record["status"] != "ok" else None,
        "record": f"results/{layout.machine}/{layout.relative(layout.record(job.profile, run))}",
    }


def copy_log(check: Check, planned: Planned) -> None:
    job = planned.job
    try:
        text = check.layout.log(job.profile, job.identity).read_text(errors="replace")
    except OSError:
        return
    if len(text) > LOG_CAP:
        text = (
            text[: LOG_CAP // 4]
            + f"\n[... {len(text) - LOG_CAP} characters left out ...]\n"
            + text[-3 * LOG_CAP // 4 :]
        )
    check.append_log(f"----- {job.key}: its log -----\n{text}\n----- end of {job.key} -----")
