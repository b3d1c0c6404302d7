#!/usr/bin/env python
"""Run every notebook headless in its own kernel, then build the results tables.

    python scripts/run_all.py                          # the whole suite at this machine's profile
    python scripts/run_all.py --task cnn_cifar10 --framework pytorch --profile tiny
    python scripts/run_all.py --resume                 # skip what already has an ok record
    python scripts/run_all.py --profile tiny --parity  # also check every model against the numpy reference
    python scripts/run_all.py --report-only            # rebuild tables, plots, README and reader only

The pipeline: pick the notebooks (task x framework x variant) -> run each with papermill in
its kernel, one at a time so that timings never share the machine, passing the profile, the
data source and a record path as parameters -> each notebook writes one JSON record -> a
notebook that raises, times out or kills its kernel gets a failed record with its error, and
the suite goes on -> `report.build` writes results.csv, results.md, plots and the README table
-> `build_site.build` writes the side-by-side reader (site/index.html and a page per task).

Everything lands in results/<machine>/: records/<profile>/, executed/<profile>/ (the notebooks
with their outputs), logs/<profile>/, results.csv, results.md, plots/, site/.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from scripts import build_site, report, suite  # noqa: E402
from support import env  # noqa: E402
from support.parity import TASKS as PARITY_TASKS  # noqa: E402
from support.records import SCHEMA, RecordError, atomic_write_json, read  # noqa: E402

DEFAULT_TIMEOUT = {"tiny": 600, "cpu": 1800, "full": 6 * 3600}


@dataclass
class Job:
    task: str
    framework: str
    parameters: dict        # the variant's papermill parameters, e.g. {"backend": "jax"}
    notebook: Path

    @property
    def variant(self) -> str:
        return suite.variant_label(self.parameters)

    @property
    def key(self) -> str:
        return "__".join(filter(None, (self.task, self.framework, self.variant)))

    @property
    def title(self) -> str:
        return f"{self.task}/{self.framework}" + (f" ({self.variant})" if self.variant else "")


def split_names(values: list[str] | None, valid, what: str, parser) -> list[str]:
    """Comma-separated or repeated names, checked against `valid` with a one-line error."""
    names = [n for v in values or [] for n in v.split(",") if n]
    for n in names:
        if n not in valid:
            parser.exit(2, f"run_all.py: unknown {what} {n!r}; choose from: {', '.join(valid)}\n")
    return names or list(valid)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 2)[2])
    p.add_argument("--task", action="append", help=f"task(s) to run, comma-separated (default: all of {', '.join(suite.TASKS)})")
    p.add_argument("--framework", action="append",
                   help=f"framework(s) to run, comma-separated (default: all of {', '.join(suite.FRAMEWORKS)})")
    p.add_argument("--profile", default="auto",
                   help="full, cpu, tiny, or auto: full where nvidia-smi sees a GPU, cpu otherwise (default)")
    p.add_argument("--data", default="auto", help="auto, real or synthetic: passed to every notebook (default auto)")
    p.add_argument("--parity", action="store_true",
                   help=f"also run the parity step of the {', '.join(PARITY_TASKS)} notebooks: shared weights, "
                        "outputs checked against the numpy reference (off by default: timed runs leave it off)")
    p.add_argument("--resume", action="store_true", help="skip notebooks that already have an ok record for this profile")
    p.add_argument("--timeout", type=int, help="seconds one notebook may run (default: tiny 600, cpu 1800, full 21600)")
    p.add_argument("--results", type=Path, default=suite.ROOT / "results", help="results folder (default results/)")
    p.add_argument("--machine", default=None, help="name of this machine's results subfolder (default: derived from the hardware)")
    p.add_argument("--notebooks", type=Path, default=suite.NOTEBOOKS, help=argparse.SUPPRESS)
    p.add_argument("--readme", type=Path, default=suite.ROOT / "README.md",
                   help="README whose results table to update (default README.md); --no-readme to leave it")
    p.add_argument("--no-readme", dest="readme", action="store_const", const=None)
    p.add_argument("--no-site", dest="site", action="store_false",
                   help="do not rebuild the side-by-side reader (results/<machine>/site/) at the end")
    p.add_argument("--report-only", action="store_true", help="run nothing; rebuild tables, plots, README and reader")
    p.add_argument("--list", action="store_true", help="print the notebooks that would run, and stop")
    args = p.parse_args(argv)
    args.tasks = split_names(args.task, suite.TASKS, "task", p)
    args.frameworks = split_names(args.framework, list(suite.FRAMEWORKS), "framework", p)
    if args.profile not in ("auto",) + suite.PROFILES:
        p.exit(2, f"run_all.py: unknown profile {args.profile!r}; choose from: auto, {', '.join(suite.PROFILES)}\n")
    if args.data not in ("auto", "real", "synthetic"):
        p.exit(2, f"run_all.py: unknown data source {args.data!r}; choose from: auto, real, synthetic\n")
    if args.profile == "auto":
        args.profile = "full" if env.gpu_names() else "cpu"
    args.timeout = args.timeout or DEFAULT_TIMEOUT[args.profile]
    args.machine = args.machine or env.machine_name()
    return args


def plan(args) -> list[Job]:
    """Every (task, framework, variant) asked for whose notebook exists, in table order."""
    jobs = []
    for task in args.tasks:
        for framework in args.frameworks:
            notebook = args.notebooks / task / f"{framework}.ipynb"
            if notebook.exists():
                jobs += [Job(task, framework, run, notebook) for run in suite.variants(task, framework)]
    return jobs


def kernel_environment() -> dict:
    """The runner's environment plus the project's cache locations, for papermill and its kernels."""
    return {**os.environ, **env.project_environment(), "PYTHONUNBUFFERED": "1"}


def kill_tree(pid: int) -> None:
    """Kill papermill and its kernel (jupyter_client starts kernels in their own session)."""
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


def notebook_error(executed: Path, log: Path) -> str:
    """The exception a notebook stopped on ('ValueError: ... (cell 7)'), else the log's last words."""
    try:
        cells = json.loads(executed.read_text())["cells"]
        for i, cell in enumerate(cells):
            for out in cell.get("outputs", []):
                if out.get("output_type") == "error":
                    return f"{out['ename']}: {out['evalue']} (cell {i})"
    except (OSError, ValueError, KeyError):
        pass
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()] if log.exists() else []
    errors = [line for line in lines if "Error" in line or "died" in line]
    return (errors or lines or ["papermill failed without output"])[-1][:500]


def notebook_parameters(job: Job, args, record_path: Path) -> dict:
    """What papermill passes to the notebook's parameters cell."""
    parameters = {"profile": args.profile, "record_path": str(record_path.resolve()), **job.parameters}
    if job.task != "resnet50_features":
        parameters["data"] = args.data
    if args.parity and job.task in PARITY_TASKS:
        parameters["parity"] = True
    return parameters


def run_job(job: Job, args, out: Path) -> dict:
    """Run one notebook; return its record (the notebook's own, or a failed one made here)."""
    record_path = out / "records" / args.profile / f"{job.key}.json"
    executed = out / "executed" / args.profile / job.task / f"{job.framework}{'-' + job.variant if job.variant else ''}.ipynb"
    log = out / "logs" / args.profile / f"{job.key}.log"
    for path in (record_path, executed, log):
        path.parent.mkdir(parents=True, exist_ok=True)
    record_path.unlink(missing_ok=True)
    parameters = notebook_parameters(job, args, record_path)
    cmd = [sys.executable, "-m", "papermill", str(job.notebook), str(executed), "--kernel",
           suite.kernel_name(suite.FRAMEWORKS[job.framework]), "--cwd", str(job.notebook.parent),
           "--parameters_yaml", json.dumps(parameters), "--log-output", "--no-progress-bar"]
    start = time.time()
    with open(log, "w") as log_file:
        proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, env=kernel_environment(),
                                stdin=subprocess.DEVNULL)
        try:
            code = proc.wait(timeout=args.timeout)
            status, error = ("ok", None) if code == 0 else ("failed", notebook_error(executed, log))
        except subprocess.TimeoutExpired:
            kill_tree(proc.pid)
            status, error = "timeout", f"no result after {args.timeout} s (raise the limit with --timeout)"
        except BaseException:       # Ctrl-C: stop the notebook and its kernel too
            kill_tree(proc.pid)
            raise
    wall = time.time() - start
    if status == "ok":
        try:
            record = read(record_path)
        except (OSError, RecordError) as err:
            status, error = "failed", f"the notebook finished but left no valid record: {err}"
    if status != "ok":
        record = {"schema": SCHEMA, "task": job.task, "framework": job.framework, "variant": job.variant,
                  "status": status, "profile": args.profile, "data": None, "params": {}, "timing": {},
                  "metrics": {}, "n_parameters": None,
                  "environment": {"machine": args.machine, "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")},
                  "error": error}
    record.update(wall_s=round(wall, 1), executed_notebook=str(executed.relative_to(out)),
                  log=str(log.relative_to(out)))
    atomic_write_json(record_path, record)
    return record


def summary_line(record: dict) -> str:
    if record["status"] != "ok":
        return f"{record['status'].upper()}: {record['error']}"
    t = record["timing"]
    metrics = ", ".join(f"{k} {v:.3f}" for k, v in record["metrics"].items() if isinstance(v, float))
    return f"ok: {t['median_s']:.3g} s per {t['unit']}, {metrics}"


def run_suite(jobs: list[Job], args, out: Path) -> int:
    """Run the jobs one at a time under a progress bar; return how many did not end ok."""
    from tqdm import tqdm

    failures = 0
    bar = tqdm(jobs, unit="notebook", dynamic_ncols=True, file=sys.stdout)
    for job in bar:
        bar.set_postfix_str(job.title)
        done = out / "records" / args.profile / f"{job.key}.json"
        if args.resume and done.exists():
            try:
                if read(done)["status"] == "ok":
                    bar.write(f"{job.title}: already ok, skipped (--resume)")
                    continue
            except RecordError:
                pass
        record = run_job(job, args, out)
        failures += record["status"] != "ok"
        bar.write(f"{job.title}: {summary_line(record)} [{record['wall_s']:.0f} s]")
    return failures


def build_reader(out: Path, args, rows: list[dict]) -> bool:
    """Rebuild the side-by-side reader for this run's profile (else the latest one recorded);
    False, with the reason printed, where a notebook's headings differ from PyTorch's."""
    profile = args.profile if any(r["profile"] == args.profile for r in rows) else None
    try:
        index = build_site.build(out, profile=profile, notebooks=args.notebooks, rows=rows)
    except ValueError as err:
        print(f"the side-by-side reader was not built: {err}")
        return False
    print(f"wrote the side-by-side reader: open {index}")
    return True


def main(argv=None) -> int:
    args = parse_args(argv)
    out = args.results / args.machine
    jobs = plan(args)
    if args.list or not args.report_only:
        print(f"{len(jobs)} notebook run(s), profile {args.profile}, data {args.data}, results in {out}")
    if args.list:
        for job in jobs:
            print(f"  {job.title}: {job.notebook} in kernel {suite.kernel_name(suite.FRAMEWORKS[job.framework])}")
        return 0
    failures, reader_ok = 0, True
    try:
        if not args.report_only:
            failures = run_suite(jobs, args, out)
    except KeyboardInterrupt:
        print("interrupted: the records written so far are kept; --resume carries on from there")
        failures = -1
    finally:
        rows = report.build(out, args.readme)       # the tables always reflect every record there is
        for line in report.flagged([r for r in rows if r["profile"] == args.profile]):
            print(f"outside the band: {line}")
        if args.site:
            reader_ok = build_reader(out, args, rows)
    if failures < 0:
        return 130
    if failures:
        print(f"{failures} notebook(s) failed: see results.md and the logs under {out / 'logs' / args.profile}")
    return 1 if failures or not reader_ok else 0


if __name__ == "__main__":
    sys.exit(main())
