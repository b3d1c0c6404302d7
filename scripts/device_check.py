"""A GPU machine's check in one call: its versions, its peak per precision, and the notebooks at `full`.

    python3 -m scripts.device_check --out $OUT                  # on a GPU machine, at the repository's root
    python3 -m scripts.device_check --out /tmp/dc --profile tiny --budget-s 300 --only pytorch,jax

Made for a machine that has only its own Python with torch, JAX, Flax and optax (no papermill, no Jupyter, no
Keras, no jsonschema, no network, a few minutes): it needs the standard library, what that machine has, and the
wheels scripts/device_wheels.sh downloads into .device/wheels beforehand (carried along with the repository).
What is its own: the plan and the budget (here), the offline wheels and the versions (scripts/device_env.py), the
GPU probes (scripts/device_probes.py), and running notebooks without papermill (scripts/device_run.py, each in
scripts/notebook_exec.py's child process); a run's record and files go the runner's way (scripts/jobs.py,
scripts/results.py), as scripts/run_all.py's do.

1. The carried wheels this Python lacks are installed with `pip install --no-index --no-deps --target
   .device/site` (a folder already prepared there is used as it is), a site directory of this process
   (site.addsitedir) and on every child's PYTHONPATH. Only then are scripts.jobs and scripts.results imported
   (support.records checks records against their JSON Schema).
2. The versions it runs on (Python, torch with CUDA, cuDNN and NCCL, the GPU and its driver, JAX, Keras...).
3. The GPU's peak matmul TFLOP/s per precision as scripts/calibrate.py measures it (n = 8192, the median of 7
   repeats of 20 synchronised calls: fp32 with TF32 off, tf32, bf16, fp16), the CPU's float32 peak, and the
   true-float32 check (a float32 matmul against float64: about 1e-6 relative error with TF32 off, 1e-3 with it
   on; JAX's default likewise). The peaks go to runs/<run id>.json as the runner's do.
4. torch.distributed with "cpu:gloo,cuda:nccl": two ranks where there are two GPUs, else one; a CPU and a CUDA
   tensor each broadcast and all-reduced.
5. The notebooks, without papermill: each one's code cells in order in one fresh namespace, in a child process
   of its own, the parameters the notebook declares (jobs.notebook_parameters) injected after the cell tagged
   `parameters` as papermill does (`display` is print; `%` and `!` lines are skipped), its output to its log,
   within a time limit (past it, every thread's stack, its workers' too, goes to the log before its process tree
   is killed). Each run is executed into its staging folder and stored by results.finalize from jobs.outcome
   (a run cut short leaves the previous record as it was). In order until the budget runs out, for each task
   (cnn_cifar10, gru_imdb, resnet50_features, densenet_chestxray in mode ram, then loader): PyTorch, JAX, Keras
   on torch, Keras on JAX, at `full` on synthetic data, float32, the epochs cut by DLROSETTA_PARAMS
   (DEFAULT_OVERRIDES); `--order framework` runs every task of PyTorch first, then JAX's, and so on. A run whose
   expected time (ESTIMATE_S, scaled by how the runs so far compared with theirs) does not fit in what is left
   of the budget is skipped, and the summary says so.

Into --out, rewritten after every step so that nothing done is lost: `device_check.log` (all output),
`summary.json` (versions, calibration, each run's status, seconds and headline) and `records.tar.gz`:
results/<machine>/ (records, logs, executed notebooks, runs/<run id>.json), so that `tar xzf records.tar.gz` at
the repository's root drops them in place.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

# The standard library, filelock (which that machine has) and support/ without its records: scripts.jobs and
# scripts.results are imported where they are used, after the carried wheels are on the path (support.records
# needs jsonschema).
from scripts import suite
from scripts.device_env import VERSIONS, install_wheels, versions
from scripts.device_probes import calibration_step, jax_step, process_group_step
from scripts.device_run import Check, copy_log, run_job
from support import env, hardware, tasks

if TYPE_CHECKING:
    from scripts import jobs

ROOT = suite.ROOT
DEVICE = ROOT / ".device"  # the carried wheels (.device/wheels) and where they are installed (.device/site)

# What each task's notebooks run with at the `full` profile here (support.params' DLROSETTA_PARAMS): one epoch
# timed after the warm-up epoch, on the profile's whole synthetic dataset; DenseNet-121's loader mode on 512
# synthetic images (the ram mode holds ram_n_train = 2048 as the profile says).
DEFAULT_OVERRIDES = {
    "cnn_cifar10": "epochs=2",
    "gru_imdb": "epochs=2",
    "resnet50_features": "",
    "densenet_chestxray": "epochs=2,n_train=512,n_test=256",
}

# The runs, in priority order: (task, its variant parameters), then per task (framework, label, parameters).
TASK_ORDER = (
    ("cnn_cifar10", {}),
    ("gru_imdb", {}),
    ("resnet50_features", {}),
    ("densenet_chestxray", {"mode": "ram"}),
    ("densenet_chestxray", {"mode": "loader"}),
)
FRAMEWORK_ORDER = (
    ("pytorch", "pytorch", {}),
    ("jax", "jax", {}),
    ("keras", "keras-torch", {"backend": "torch"}),
    ("keras", "keras-jax", {"backend": "jax"}),
)
CHOICES = ("pytorch", "jax", "keras-torch", "keras-jax", "keras")
SKIPPABLE = ("calibration", "jax", "process-group", "notebooks")

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
SMALL_ESTIMATE_S = 20  # the cpu and tiny profiles: each notebook's own limit is then what is left
RESERVE_S = 15  # kept back from the budget for the summary and the archive
SCALE_BOUNDS = (0.4, 2.5)  # how far the runs so far may scale the next run's estimate (run_jobs)
GPU_FIELDS = ("name", "driver_version", "memory.total", "compute_cap")  # what nvidia-smi is asked of each GPU


# --- the plan ---------------------------------------------------------------------------------------------------------


@dataclass
class Planned:
    """One run of the plan: the runner's Job (scripts.jobs.Job) and what the budget schedules it by."""

    job: jobs.Job
    label: str  # pytorch, jax, keras-torch, keras-jax: --only's names
    override: str = ""  # DLROSETTA_PARAMS for this run
    estimate_s: float = SMALL_ESTIMATE_S
    limit_s: float | None = None  # its own time limit (None: what is left of the budget)

    @property
    def key(self) -> str:
        return self.job.key


def parse_overrides(values: list[str]) -> dict:
    """--params TASK:NAME=VALUE,...: replaces DEFAULT_OVERRIDES for that task ('TASK:' for none)."""
    chosen = {}
    for value in values:
        task, sep, spec = value.partition(":")
        if not sep or task not in tasks.TASKS:
            raise SystemExit(
                f"device_check: --params {value!r}: give TASK:NAME=VALUE,... with TASK one of {', '.join(tasks.TASKS)}"
            )
        chosen[task] = spec
    return chosen


def plan(
    profile: str,
    only: list[str],
    task_names: list[str],
    overrides: dict,
    notebooks: Path = suite.NOTEBOOKS,
    order: str = "task",
) -> list[Planned]:
    """The runs in priority order whose notebook exists, filtered by --only (pytorch, jax, keras-torch,
    keras-jax, keras) and --tasks; each the runner's Job, so the keys are scripts/run_all.py's. Order `task`:
    every framework of the first task, then of the next (TASK_ORDER x FRAMEWORK_ORDER); `framework`: every task
    of PyTorch first, then of JAX, and so on (wider, where the budget runs out before the last task)."""
    from scripts.jobs import Job

    planned = []
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
        job = Job(task, framework, runs[0], notebook, profile=profile, data=data)
        planned.append(Planned(job, label, override, estimate, limit))
    return planned


# --- the budget: the plan's runs in order while it lasts --------------------------------------------------------------


def run_jobs(check: Check, plan: list[Planned]) -> list[dict]:
    """Each run in order while the budget lasts: one whose expected time does not fit in what is left is
    skipped (said in the summary); one that runs gets what is left (less RESERVE_S), at most its own limit (at
    `full`, three times its estimate, at least two minutes). The expected time is the run's estimate scaled by
    how the runs so far that ended ok compared with theirs (the median ratio, within SCALE_BOUNDS), so a machine
    faster or slower than the guesses fits as many runs as it can. The summary and the archive are rewritten after
    every run."""
    entries = check.summary.setdefault("runs", [])
    skipped = check.summary.setdefault("skipped", [])
    for planned in plan:
        job = planned.job
        left = check.left() - RESERVE_S
        ratios = sorted(
            e["seconds"] / e["estimate_s"]
            for e in entries
            if e.get("seconds") and e.get("estimate_s") and e["status"] == "ok"
        )
        scale = min(max(ratios[len(ratios) // 2], SCALE_BOUNDS[0]), SCALE_BOUNDS[1]) if ratios else 1.0
        expected = planned.estimate_s * scale
        if left < expected:
            reason = f"would not fit: about {expected:.0f} s expected, {int(max(left, 0))} s left of the budget"
            skipped.append({"key": job.key, "task": job.task, "framework": planned.label, "reason": reason})
            check.say(f"SKIPPED {job.key}: {reason}")
            check.save()
            continue
        timeout = min(left, planned.limit_s or left)
        check.say(
            f"running {job.key} ({suite.shown(job.notebook)}"
            f"{', DLROSETTA_PARAMS=' + planned.override if planned.override else ''}; limit {timeout:.0f} s)"
        )
        try:
            entry = run_job(check, planned, timeout)
        except Exception as err:  # noqa: BLE001  one run's trouble never loses the others
            entry = {
                "key": job.key,
                "task": job.task,
                "framework": planned.label,
                "status": "failed",
                "seconds": None,
                "error": f"device_check: {type(err).__name__}: {err}",
            }
        entries.append(entry)
        copy_log(check, planned)
        what = (
            ", ".join(f"{k} {v:.4g}" for k, v in entry.get("headline", {}).items())
            if entry["status"] == "ok"
            else entry.get("error")
        )
        check.say(f"  {entry['status'].upper()} in {entry['seconds']} s: {what}")
        check.save()
        check.pack()
    return entries


# --- main -------------------------------------------------------------------------------------------------------------


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="python3 -m scripts.device_check",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    names = {"type": suite.comma_list, "action": "extend", "default": [], "metavar": "NAMES"}
    p.add_argument("--out", type=Path, required=True, help="folder for device_check.log, summary.json, records.tar.gz")
    p.add_argument(
        "--budget-s",
        type=float,
        default=540,
        help="seconds for the whole check (default 540: a 600 s device call, with room to pack)",
    )
    p.add_argument(
        "--profile", default="full", choices=("full", "cpu", "tiny"), help="the notebooks' profile (default full)"
    )
    p.add_argument(
        "--only",
        **names,
        help=f"frameworks to run, comma-separated: {', '.join(CHOICES)} (keras: both backends); default all",
    )
    p.add_argument("--tasks", **names, help="tasks to run, comma-separated (default all)")
    p.add_argument(
        "--order",
        choices=("task", "framework"),
        default="task",
        help="task (default): each task's four frameworks, task after task; framework: PyTorch on every "
        "task first, then JAX, Keras on torch, Keras on JAX",
    )
    p.add_argument(
        "--params",
        action="append",
        default=[],
        metavar="TASK:NAME=VALUE,...",
        help="DLROSETTA_PARAMS for one task's runs, replacing DEFAULT_OVERRIDES ('TASK:' for none)",
    )
    p.add_argument("--work", type=Path, help="where results/<machine>/ is built (default: a new temporary folder)")
    p.add_argument("--wheels", type=Path, default=DEVICE / "wheels", help="carried wheels (default .device/wheels)")
    p.add_argument("--site", type=Path, default=DEVICE / "site", help="where they are installed (default .device/site)")
    p.add_argument("--skip", **names, help=f"steps to leave out, comma-separated: {', '.join(SKIPPABLE)}")
    p.add_argument("--machine", help="the results folder's name (default support.env.machine_name())")
    p.add_argument("--list", action="store_true", help="print the planned runs and stop")
    args = p.parse_args(argv)
    for option, given, allowed in (
        ("--only", args.only, CHOICES),
        ("--tasks", args.tasks, tuple(tasks.TASKS)),
        ("--skip", args.skip, SKIPPABLE),
    ):
        for name in given:
            if name not in allowed:
                p.error(f"{option} {name!r}: choose from {', '.join(allowed)}")
    args.overrides = parse_overrides(args.params)
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.list:
        for planned in plan(args.profile, args.only, args.tasks, args.overrides, order=args.order):
            print(
                f"{planned.key}: {suite.shown(planned.job.notebook)}, about {planned.estimate_s} s"
                f"{', DLROSETTA_PARAMS=' + planned.override if planned.override else ''}"
            )
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "device_check.log").write_text("")
    hardware_name = env.machine_name()
    machine = args.machine or hardware_name
    work = args.work or Path(tempfile.mkdtemp(prefix="dlr-device-check-"))
    check = Check(out=args.out, results=work / "results" / machine, budget_s=args.budget_s, hardware=hardware_name)
    check.results.mkdir(parents=True, exist_ok=True)
    check.summary = {
        "script": "python3 -m scripts.device_check",
        "argv": argv,
        "run": check.run_id,
        "machine": machine,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "budget_s": args.budget_s,
        "profile": args.profile,
        "host": socket.gethostname(),
        "git_commit": env.git_commit(),
    }
    check.say(
        f"DL Rosetta device check {check.run_id}: {machine}, budget {args.budget_s:.0f} s, profile "
        f"{args.profile}; results in {check.results}"
    )

    def interrupted(signum, frame):
        if check.current is not None:
            from scripts.jobs import kill_tree

            kill_tree(check.current.pid)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)

    try:
        check.summary["wheels"] = install_wheels(args.wheels, args.site, say=check.say)
    except Exception as err:  # noqa: BLE001
        check.summary["wheels"] = {"error": f"{type(err).__name__}: {err}"}
        check.say(f"carried wheels: ERROR {err}")
    try:
        from scripts import jobs

        runs = plan(args.profile, args.only, args.tasks, args.overrides, order=args.order)
    except Exception as err:  # noqa: BLE001  e.g. support.records' jsonschema, which the carried wheels bring
        check.summary["error"] = (
            f"device_check: the runner's modules do not import here ({type(err).__name__}: "
            f"{err})"
            + (
                ": run scripts/device_wheels.sh beforehand and carry .device along"
                if isinstance(err, ImportError)
                else ""
            )
        )
        check.say(check.summary["error"])
        check.save()
        return 2

    pythonpath = [str(ROOT)] + ([str(args.site)] if args.site.is_dir() else [])
    check.child_env = {
        **jobs.kernel_environment(),
        "MPLBACKEND": os.environ.get("MPLBACKEND", "Agg"),
        "PYTHONPATH": os.pathsep.join(
            pythonpath + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        ),
    }
    check.summary["planned"] = [planned.key for planned in runs]
    try:
        gpus = hardware.nvidia_smi(*GPU_FIELDS)
        check.summary["versions"] = {**versions(args.site), "gpus": gpus}
        v = check.summary["versions"]
        check.say("versions: " + ", ".join(f"{k} {v[k]}" for k in ("python", *VERSIONS) if v.get(k)))
        for gpu in gpus:
            check.say(
                f"GPU: {gpu['name']}, driver {gpu['driver_version']}, {gpu['memory.total']} MiB, "
                f"compute capability {gpu['compute_cap']}"
            )
        check.say(f"{len(runs)} notebook runs planned" + ("" if gpus else "; GPU: none seen by nvidia-smi"))
        check.save()
        for step, do in (
            ("calibration", lambda: calibration_step(check, args, argv, gpus)),
            ("jax", lambda: jax_step(check)),
            ("process-group", lambda: process_group_step(check, gpus)),
        ):
            if step not in args.skip:
                do()
                check.save()
        check.pack()
        if "notebooks" not in args.skip:
            run_jobs(check, runs)
    except KeyboardInterrupt:
        check.summary["interrupted"] = True
        check.say("interrupted: what ran is kept")
    finally:
        counts = Counter(entry["status"] for entry in check.summary.get("runs", []))
        check.summary["counts"] = {**counts, "skipped": len(check.summary.get("skipped", []))}
        check.say(
            f"done in {time.monotonic() - check.started:.0f} s: "
            + ", ".join(f"{n} {s}" for s, n in check.summary["counts"].items())
        )
        check.save()
        check.pack()
    return 0 if not any(e["status"] in ("failed", "timeout") for e in check.summary.get("runs", [])) else 1


if __name__ == "__main__":
    sys.exit(main())
