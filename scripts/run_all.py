#!/usr/bin/env python
"""Run every notebook headless in its own kernel, then build the results tables.

    python -m scripts.run_all                          # the whole suite at this machine's profile
    python -m scripts.run_all --task cnn_cifar10 --framework pytorch --profile tiny
    python -m scripts.run_all --resume                 # skip what has an ok record made from the same inputs
    python -m scripts.run_all --data ~/datasets        # a folder holding cifar-10-python.tar.gz, imdb.npz, chestxray14/
    python -m scripts.run_all --profile tiny --parity  # also check every model against the numpy reference
    python -m scripts.run_all --profile tiny --jobs 2  # smoke runs two at a time (recorded as not timed)
    python -m scripts.run_all --report-only            # rebuild tables, plots, README and reader only

The pipeline: pick the notebooks (task x framework x variant) and each one's profile -> run
each with papermill in its kernel, one at a time so that timings never share the machine,
passing only the parameters the notebook declares -> each notebook writes one JSON record into
a staging folder -> when the run has ended its record, executed notebook and log replace the
previous ones together (an interrupted run leaves the previous ones untouched); a notebook that
raises, times out or kills its kernel gets a failed record with its error, and the suite goes on
-> `report.build` writes results.csv, results.md, plots and the README table -> `build_site.build`
writes the side-by-side reader (site/index.html and a page per task).

Everything lands in results/<machine>/: records/<profile>/, executed/<profile>/ (the notebooks
with their outputs), logs/<profile>/, results.csv, results.md, plots/, site/. One runner at a
time holds a results folder (a lock file, .runner.lock): a second one stops with an error.
"""

from __future__ import annotations

import fnmatch
import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from scripts import build_site, papermill_rank, report, results, runner_cli, suite
from scripts.jobs import (
    FINAL,
    Job,
    inputs,
    job_environment,
    kernel_environment,
    kill_tree,
    missing_parameters,
    notebook_parameters,
    outcome,
    why_rerun,
)
from scripts.results import Layout, RecordError
from support import env, frameworks, hardware, params, precision, tasks

DEFAULT_TIMEOUT = {"tiny": 600, "cpu": 1800, "full": 6 * 3600}


def parse_args(argv=None):
    """The runner's arguments, checked (scripts/runner_cli.py), with this module's usage as its help."""
    return runner_cli.parse_args(argv, __doc__)


def matrices(args, task: str, framework: str, parameters: dict) -> list[dict]:
    """The variant matrix for one notebook variant: every precision x compilation (x device count, for a task
    that trains on several devices) asked for, and beside each, with --batch-size, a run of the sweep (its
    own run, so that no sweep's large batches reach the memory or the times of another row), in the task's
    sweep modes only. A compilation equal to the framework's
    default is dropped (that run is the baseline), so no run repeats another under a second name."""
    # Whether the notebook's framework computes on a GPU decides some defaults (Keras on TensorFlow): a GPU listed
    # and this line's environment built for it (its CUDA lock set), as its probe will find before the run.
    if not tasks.get(task).matrix:  # its notebooks measure every precision and compilation themselves
        return [{}]
    gpu = args.gpu and gpu_lock_set(suite.gpu_probe_key(framework, parameters)) is not None
    sweep_modes = tasks.get(task).sweep_modes
    sweeps = bool(args.batch_sizes) and (not sweep_modes or parameters.get("mode") in sweep_modes)
    counts = args.device_counts if tasks.get(task).parallel else [tasks.DEVICES_DEFAULT]
    out = []
    for chosen in args.precisions:
        for compilation in args.compilations:
            for devices in counts:
                default = precision.default(suite.compilation_key(framework, parameters, gpu, devices), task)
                matrix = {"precision": chosen, "compilation": compilation}
                matrix = {
                    k: v
                    for k, v in matrix.items()
                    if v != tasks.VARIANT_PARAMETERS[k] and not (k == "compilation" and v == default)
                }
                matrix.update({"devices": devices} if devices != tasks.DEVICES_DEFAULT else {})
                for entry in (matrix, {**matrix, "batch_sizes": args.batch_sizes}) if sweeps else (matrix,):
                    if entry not in out:
                        out.append(entry)
    if tasks.get(task).band and {} in out:  # the baseline again on the next seeds (--seeds), right after it
        at = out.index({}) + 1
        out[at:at] = [{"seed": params.seed(task) + k} for k in range(1, args.seeds)]
    return out


def plan(args) -> list[Job]:
    """Every (task, framework, variant) asked for whose notebook exists, in table order; each notebook
    variant once per entry of the variant matrix (only the baseline when none is asked for); with --only,
    those whose key matches one of its patterns (a ValueError names a pattern that matches none)."""
    jobs = []
    for task in args.tasks:
        for framework in args.frameworks:
            for parameters in suite.variants(task, framework):
                notebook = suite.notebook_path(task, framework, parameters, args.notebooks)  # a variant's own file?
                if notebook.exists():
                    jobs += [
                        Job(task, framework, parameters, notebook, matrix=matrix, data=args.data.get(task))
                        for matrix in matrices(args, task, framework, parameters)
                    ]
    if not args.only:
        return jobs
    matches = {pattern: {job.key for job in jobs if fnmatch.fnmatchcase(job.key, pattern)} for pattern in args.only}
    unmatched = [pattern for pattern, keys in matches.items() if not keys]
    if unmatched:
        raise ValueError(
            f"--only {unmatched[0]}: no planned notebook run has a key that matches it (--list shows "
            f"the keys); add the --task, --framework, --precision, --compilation, --devices or "
            f"--batch-size that plan it"
        )
    chosen = set().union(*matches.values())
    return [job for job in jobs if job.key in chosen]


# --- which profile each notebook runs -----------------------------------------------------------


def probe_gpu(key: str) -> tuple[bool, str]:
    """Ask one framework, in the environment that runs its lines, to compute on the GPU: (answer, detail)."""
    python = suite.venv_python(suite.run_environment(key, {}))
    try:
        proc = subprocess.run(
            [str(python), "-c", suite.GPU_PROBES[key]],
            capture_output=True,
            text=True,
            timeout=300,
            env=kernel_environment(),
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError) as err:
        return False, f"the probe could not run ({err})"
    answer = proc.stdout.strip().splitlines()[-1:] == ["True"]
    if proc.returncode:
        return False, f"the probe failed: {(proc.stderr.strip().splitlines() or ['no output'])[-1]}"
    return answer, ""


def gpu_lock_set(key: str) -> str | None:
    """The CUDA lock set this machine built for probe key `key`'s environment where it puts that line on the GPU."""
    name = suite.chosen_lock_sets().get(suite.run_environment(key, {}))
    return name if name and key in suite.LOCK_SETS[name].gpu_lines else None


def resolve_profiles(jobs: list[Job], args) -> list[str]:
    """Give each job its profile and return the lines to print. `auto` is `cpu` without a GPU; on a
    GPU machine it is `full` for a notebook whose framework computes on the GPU (its probe) and `cpu`
    for one whose build has no GPU, with the reason in its record. A line whose environment was built
    for the GPU (a CUDA lock set) but cannot compute there is stopped with that error, not run on the CPU."""
    gpus = env.gpu_names() if args.profile == "auto" else []
    if args.profile != "auto" or not gpus:
        for job in jobs:
            job.profile = args.profile if args.profile != "auto" else "cpu"
        return ["profile auto: cpu (no GPU visible)"] if args.profile == "auto" else []
    keys = sorted({suite.gpu_probe_key(job.framework, job.parameters) for job in jobs})
    seen = {key: probe_gpu(key) for key in keys}
    lines = [f"profile auto: full where the framework computes on the GPU ({gpus[0]} x{len(gpus)}), cpu elsewhere"]
    stopped, reasons = {}, {}
    for key, (sees, detail) in seen.items():
        if sees:
            continue
        built = gpu_lock_set(key)
        if built:
            stopped[key] = (
                f"{suite.LABELS[key]} cannot compute on the GPU although its environment was built for "
                f"it (lock set {built}): {detail or 'its probe sees no GPU'}; likely a driver older than "
                f"CUDA {suite.LOCK_SETS[built].cuda} needs, CUDA_VISIBLE_DEVICES hiding the GPU, or an "
                "environment built on another machine: run `python3 -m scripts.setup_envs --force`"
            )
            lines.append(f"{key}: stopped: {stopped[key]}")
        else:
            reasons[key] = (
                f"{suite.LABELS[key]} runs on the CPU here{f' ({detail})' if detail else ''}: {suite.GPU_BUILDS[key]}"
            )
            lines.append(
                f"{key} sees no GPU{f' ({detail})' if detail else ''}: its notebooks run the cpu profile; "
                f"{suite.GPU_BUILDS[key]}"
            )
    for job in jobs:
        key = suite.gpu_probe_key(job.framework, job.parameters)
        job.profile = "full" if seen[key][0] else "cpu"
        job.stopped, job.cpu_reason = stopped.get(key), reasons.get(key)
    return lines


# --- running one notebook -----------------------------------------------------------------------


@dataclass
class Active:
    """The runs in progress, so that an interrupt can stop every kernel and keep every old record."""

    stopping: threading.Event = field(default_factory=threading.Event)
    procs: set = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def stop(self) -> None:
        self.stopping.set()
        with self.lock:
            procs = list(self.procs)
        for proc in procs:
            kill_tree(proc.pid)


def run_job(job: Job, args, layout: Layout, active: Active) -> dict | None:
    """Run one notebook in a staging folder; when it has ended, results.finalize stores its record, executed
    notebook and log in place of the previous ones. Returns the record, or None where the run was interrupted (the
    previous record, notebook and log are then left as they were)."""
    run = job.identity
    with layout.fresh_staging(job.profile, run) as staged:
        parameters = notebook_parameters(job, staged["record"], parity=args.parity)
        start = time.time()
        error = missing_parameters(job, parameters) or job.stopped
        if error:
            status = "failed"
        else:
            status, error = execute(job, args, parameters, staged["executed"], staged["log"], active)
        if active.stopping.is_set():
            return None
        return results.finalize(
            layout,
            outcome(job, status, error, staged["record"], args.machine),
            run,
            job.profile,
            staged=staged,
            run=args.run_id,
            wall_s=round(time.time() - start, 1),
            timed=args.timed,
            inputs=inputs(job, parameters, support=args.support, hardware_name=args.hardware, timed=args.timed),
            **({"cpu_reason": job.cpu_reason} if job.cpu_reason else {}),
        )


def free_port() -> int:
    """A TCP port free on this host now, for a launcher's rendezvous (two launches at once take two)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def execute(job: Job, args, parameters: dict, executed: Path, log: Path, active: Active) -> tuple[str, str | None]:
    """papermill in the notebook's kernel, within the time limit: (status, error)."""
    papermill_args = [
        str(job.notebook),
        str(executed),
        "--kernel",
        suite.kernel_name(job.environment),
        "--cwd",
        str(job.notebook.parent),
        "--parameters_yaml",
        json.dumps(parameters),
        "--log-output",
        "--no-progress-bar",
    ]
    cmd = [sys.executable, "-m", "papermill", *papermill_args]
    environment = job_environment(job, args.jobs)
    devices = parameters.get("devices", tasks.DEVICES_DEFAULT)
    if job.framework in suite.PROCESS_PER_DEVICE and devices > 1:
        # a papermill (and kernel) per device, each a rank of the framework's launcher (support/frameworks.py)
        launcher = frameworks.get(job.framework).launcher
        python = suite.venv_python(job.environment)
        cmd = [
            str(python),
            *launcher.argv(devices, str(executed.parent / "ranks"), free_port()),
            str(suite.ROOT / "scripts" / "papermill_rank.py"),
            job.framework,
            *papermill_args,
        ]
        # a launcher that starts `python` from PATH (msrun) starts the environment's
        environment["PATH"] = f"{python.parent}{os.pathsep}{environment.get('PATH', os.defpath)}"
    timeout = args.timeout or DEFAULT_TIMEOUT[job.profile]
    with open(log, "w") as log_file:
        # Its own session: a terminal's Ctrl-C reaches the runner alone, which stops the kernels itself
        # and knows the run was interrupted rather than failed.
        proc = subprocess.Popen(
            cmd,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=environment,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        with active.lock:
            active.procs.add(proc)
        try:
            code = proc.wait(timeout=timeout)
            return (
                ("ok", None)
                if code == 0
                else ("failed", suite.notebook_error(executed, log, papermill_rank.other_ranks(executed)))
            )
        except subprocess.TimeoutExpired:
            kill_tree(proc.pid)
            return "timeout", f"no result after {timeout} s (raise the limit with --timeout)"
        except BaseException:  # whatever stops this thread waiting, it leaves no kernel behind
            kill_tree(proc.pid)
            raise
        finally:
            with active.lock:
                active.procs.discard(proc)


def summary_line(record: dict) -> str:
    if record["status"] != "ok":
        return f"{record['status'].upper()}: {record['error']}"
    t = record["timing"]
    metrics = ", ".join(f"{k} {v:.3f}" for k, v in record["metrics"].items() if isinstance(v, float))
    timing = f"{t['median_s']:.3g} s per {t['unit']}" if record.get("timed", True) else "not timed"
    return f"ok: {timing}, {metrics}"


def run_suite(jobs: list[Job], args, layout: Layout) -> int:
    """Run the jobs (args.jobs at a time) under a progress bar; return how many failed or timed out
    (an unsupported or not applicable combination, recorded with its reason, is not a failure).
    Ctrl-C (or SIGTERM) stops every running kernel, keeps every record and raises KeyboardInterrupt."""
    from tqdm import tqdm

    bar = tqdm(total=len(jobs), unit="notebook", dynamic_ncols=True, file=sys.stdout)
    todo = []
    for job in jobs:
        if args.resume:
            parameters = notebook_parameters(job, Path("r"), parity=args.parity)
            now = inputs(job, parameters, support=args.support, hardware_name=args.hardware, timed=args.timed)
            reason = why_rerun(previous_record(job, layout), now)
            if reason is None:
                bar.write(f"{job.title}: already ok, skipped (--resume)")
                bar.update()
                continue
            bar.write(f"{job.title}: runs again (--resume): {reason}")
        todo.append(job)
    active, failures = Active(), 0
    pool = ThreadPoolExecutor(max_workers=args.jobs)
    try:
        futures = {pool.submit(run_job, job, args, layout, active): job for job in todo}
        for future in as_completed(futures):
            record = future.result()
            if record is None:
                continue
            failures += record["status"] not in FINAL
            bar.update()
            bar.write(f"{futures[future].title}: {summary_line(record)} [{record['wall_s']:.0f} s]")
    except BaseException:
        active.stop()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        bar.close()
    return failures


def previous_record(job: Job, layout: Layout) -> dict | None:
    try:
        return results.read(layout.record(job.profile, job.identity))
    except (OSError, RecordError):
        return None


# --- the results folder ---------------------------------------------------------------------------


def build_reader(out: Path, args, rows: list[dict], profile: str | None) -> bool:
    """Rebuild the side-by-side reader for this run's profile (else the latest one recorded);
    False, with the reason printed, where a notebook's headings differ from PyTorch's."""
    profile = profile if any(r["profile"] == profile for r in rows) else None
    try:
        index = build_site.build(out, profile=profile, notebooks=args.notebooks, rows=rows)
    except ValueError as err:
        print(f"the side-by-side reader was not built: {err}")
        return False
    print(f"wrote the side-by-side reader: open {index}")
    return True


@contextmanager
def sigterm_as_interrupt():
    """A SIGTERM (a CI timeout, `kill`) stops the run as Ctrl-C does: kernels stopped, records kept."""

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = (
        signal.signal(signal.SIGTERM, interrupt) if threading.current_thread() is threading.main_thread() else None
    )
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def main(argv=None) -> int:
    args = parse_args(argv)
    out = args.results / args.machine
    try:
        jobs = plan(args)
    except ValueError as err:
        print(f"run_all.py: {err}", file=sys.stderr)
        return 2
    if args.list or not args.report_only:
        for line in resolve_profiles(jobs, args):
            print(line)
        profiles = ", ".join(dict.fromkeys(job.profile for job in jobs)) or args.profile
        data = ", ".join(dict.fromkeys(args.data.values())) or "auto"
        print(
            f"{len(jobs)} notebook run(s), profile {profiles}, data {data}, "
            f"{args.jobs} at a time{' (not timed)' if args.jobs > 1 else ''}, results in {out}"
        )
    if args.list:
        for job in jobs:
            print(
                f"  {job.title} [{job.profile}]: {job.key}, {suite.shown(job.notebook)} in kernel "
                f"{suite.kernel_name(job.environment)}"
            )
        return 0
    try:
        with results.hold(Layout(out), args.argv):
            return run_and_report(jobs, args, Layout(out))
    except SystemExit as err:
        print(err, file=sys.stderr)
        return 2


# --- the run's metadata: the machine's peak before and after ---------------------------------------


def calibrate(gpu: bool) -> dict | None:
    """scripts/calibrate.py in the modern environment, in a process of its own (its threads and memory
    leave with it): peak matmul GFLOP/s per device and precision, the harness overhead, the load average.
    None, with one line saying why, where it cannot run: the rows then show no MFU. $DLROSETTA_CALIBRATION
    names a file holding a measurement made before (calibrate.py's output), used instead: the runner's
    tests, which need a figure but not this machine's."""
    recorded = os.environ.get("DLROSETTA_CALIBRATION")
    if recorded:
        try:
            return json.loads(Path(recorded).read_text())
        except (OSError, ValueError) as err:
            print(f"machine calibration failed (DLROSETTA_CALIBRATION={recorded}: {err}); this run's rows get no MFU")
            return None
    python = suite.venv_python("modern")
    command = [str(python if python.exists() else sys.executable), "-m", "scripts.calibrate"]
    try:
        done = subprocess.run(
            command + (["--cuda"] if gpu else []),
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, **env.project_environment()},
            cwd=suite.ROOT,
        )
        if done.returncode != 0:
            raise RuntimeError((done.stderr.strip().splitlines() or ["no output"])[-1])
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, RuntimeError, ValueError, IndexError) as err:
        print(f"machine calibration failed ({err}); this run's rows get no MFU")
        return None


def start_run(jobs: list[Job], args, layout: Layout) -> dict:
    """Measure the machine before the suite and write results/<machine>/runs/<run>.json."""
    gpu = args.gpu
    print("measuring this machine's peak matmul FLOP/s per precision (scripts/calibrate.py)")
    before = calibrate(gpu)
    meta = {
        "run": args.run_id,
        "profiles": sorted({job.profile for job in jobs if job.profile}),
        "argv": args.argv,
        "timed": args.timed,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "calibration": {"before": before["peaks"]} if before else {},
        "load_before": before["load"] if before else list(os.getloadavg()),
        "harness_overhead_s": before["harness_overhead_s"] if before else None,
        "gpu": gpu,
        "hardware": before.get("hardware") if before else hardware.describe(),
        "calibration_errors": before.get("errors", {}) if before else {},
    }  # a peak not measured, and why
    print(f"  {hardware.summary()}")
    if before:
        for key, peak in before["peaks"].items():
            print(f"  {key}: {peak['gflops']:.1f} GFLOP/s (median of {peak['repeats']}, {peak['library']})")
        for key, why in before.get("errors", {}).items():
            print(f"  {key}: {why}")
    results.write_run(layout, meta)
    return meta


def end_run(meta: dict, layout: Layout, started: float) -> None:
    """Measure the machine again after the suite (begun at time.monotonic() `started`): the same
    workload, so a drift shows in results.md."""
    after = calibrate(meta["gpu"])
    meta.update(
        {
            "ended": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "wall_s": time.monotonic() - started,
            "load_after": after["load"] if after else list(os.getloadavg()),
        }
    )
    if after:
        meta["calibration"]["after"] = after["peaks"]
        for key, peak in after["peaks"].items():
            first = meta["calibration"].get("before", {}).get(key)
            change = f" ({100 * (peak['gflops'] / first['gflops'] - 1):+.1f}% from the start)" if first else ""
            print(f"  {key} after the suite: {peak['gflops']:.1f} GFLOP/s{change}")
    results.write_run(layout, meta)


def run_and_report(jobs: list[Job], args, layout: Layout) -> int:
    out = layout.root
    failures, reader_ok = 0, True
    try:
        if not args.report_only:
            with sigterm_as_interrupt():
                started = time.monotonic()
                meta = start_run(jobs, args, layout)
                failures = run_suite(jobs, args, layout)
                end_run(meta, layout, started)
    except KeyboardInterrupt:
        print(
            "interrupted: every record written before is kept, and the runs in progress left the previous "
            "ones untouched; --resume carries on from there"
        )
        failures = -1
    finally:
        rows = report.build(out, args.readme)  # the tables always reflect every record there is
        if rows:
            report.write_machines(out.parent, args.readme)  # results/index.md: the machines side by side
        # this run's profiles; with --report-only, the one asked for (auto: every profile there is)
        profiles = [job.profile for job in jobs if job.profile] or (
            [args.profile] if args.profile != "auto" else list(suite.PROFILES)
        )
        for line in report.flagged([r for r in rows if r["profile"] in profiles]):
            print(f"outside the band: {line}")
        if args.site:
            reader_ok = build_reader(out, args, rows, profiles[0] if len(set(profiles)) == 1 else None)
    if failures < 0:
        return 130
    if failures:
        print(f"{failures} notebook(s) failed: see results.md and the logs under {out / 'logs'}")
    return 1 if failures or not reader_ok else 0


if __name__ == "__main__":
    sys.exit(main())
