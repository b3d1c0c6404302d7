"""The results layer: what a run is, where its files live, and the record's last word.

One notebook run is named by its `Identity`: structured fields (task, framework, the framework's API or Keras's
backend, the task's mode, precision, compilation, devices, sweep, seed), stored in its record as `identity` and
never decoded from a string or a file name. Its labels (the variant `jax-ram-bf16`, the key
`densenet_chestxray__keras__jax-ram-bf16` that names its files) are made from those fields, one way only.

`Layout` is the results folder of one machine, `results/<machine>/`:

    records/<profile>/<key>.json            the record (superseded/<key>.json: an ok record a failed run replaced)
    executed/<profile>/<task>/<notebook>    the executed notebook, with its outputs
    executed/<profile>/<task>/<name>.trace.json.gz  the profiler's trace of a training run (support.profiles)
    logs/<profile>/<key>.log                papermill's log
    runs/<run id>.json                      the runner's metadata of one invocation (calibration, load, argv)
    .staging/<profile>/<key>/               a run in progress: the same files, swapped in when it ends
    results.csv, results.md, plots/, site/  the report and the reader, made from the records

`hold()` keeps one runner per results folder (a `filelock` lock); `finalize()` is the only writer of a stored
record: the notebook writes what it measured into the staging folder, and finalize adds what the runner knows
(identity, run id, wall time, inputs, file names), swaps the executed notebook, log and trace in, keeps an ok record
that a failed run would replace, and writes the record atomically. The runner (scripts/run_all.py) and the GPU
machine's check (scripts/device_check.py) both finish each run through it.

Records written before schema 3 carry no `identity`: `identity()` migrates them as it reads them (see
`legacy_identity`), and `python -m scripts.results migrate results/` writes it into them in place, once.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import socket
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from scripts import suite
from support import precision, records, tasks
from support.records import RecordError, atomic_write_json

COMPILATION_LABELS = {"on": "compiled", "off": "eager"}  # a compilation asked for, in the variant's label
LOCK_NAME = ".runner.lock"
HOLDER_NAME = ".runner"  # who holds the lock, for the refusal's line (filelock truncates the lock file itself)
STAGING = ".staging"


# --- a run's identity ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Identity:
    """What one notebook run is: the notebook (task, framework, its API or Keras's backend, the task's mode) and
    the variant matrix's entries (precision, compilation as asked, devices, a batch-size sweep, another seed).
    Defaults are the baseline: fp32, each framework's own compilation, one device, no sweep, the task's seed."""

    task: str
    framework: str
    api: str = ""  # the framework's API (MXNet: gluon, module) or Keras's backend; "" where it has one
    mode: str = ""  # the task's mode (DenseNet-121: loader, ram); "" for a task without modes
    precision: str = precision.BASELINE
    compilation: str = tasks.VARIANT_PARAMETERS["compilation"]  # as asked: auto (the framework's own), on, off
    devices: int = tasks.DEVICES_DEFAULT
    sweep: bool = False  # the run of the batch-size sweep beside the baseline (run_all.py --batch-size)
    seed: int | None = None  # None: the task's own seed; else a baseline run again on this one (--seeds)

    @classmethod
    def of(cls, task: str, framework: str, parameters: dict | None = None, matrix: dict | None = None) -> Identity:
        """From the notebook's variant parameters (suite.variants: {"backend": "jax", "mode": "ram"}) and the
        variant matrix's (run_all.matrices: precision, compilation, devices, seed, batch_sizes)."""
        parameters, matrix = parameters or {}, matrix or {}
        api = [str(v) for k, v in parameters.items() if k != "mode"]
        return cls(
            task,
            framework,
            api=api[0] if api else "",
            mode=str(parameters.get("mode", "")),
            precision=matrix.get("precision", precision.BASELINE),
            compilation=matrix.get("compilation", tasks.VARIANT_PARAMETERS["compilation"]),
            devices=int(matrix.get("devices", tasks.DEVICES_DEFAULT)),
            sweep=bool(matrix.get("batch_sizes")),
            seed=matrix.get("seed"),
        )

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    @property
    def line(self) -> str:
        """The notebook's own variant, e.g. 'jax-ram' ('' for a notebook that runs once)."""
        return "-".join(filter(None, (self.api, self.mode)))

    @property
    def matrix_label(self) -> str:
        """'' for the baseline, else e.g. 'bf16', 'compiled', 'bf16-eager', '2dev', 'seed43', 'sweep'."""
        parts = [self.precision] if self.precision != precision.BASELINE else []
        parts += [COMPILATION_LABELS[self.compilation]] if self.compilation in COMPILATION_LABELS else []
        parts += [f"{self.devices}dev"] if self.devices != tasks.DEVICES_DEFAULT else []
        parts += [f"seed{self.seed}"] if self.seed is not None else []
        return "-".join(parts + (["sweep"] if self.sweep else []))

    @property
    def variant(self) -> str:
        """The notebook's variant and the matrix's label together, e.g. 'jax-ram-bf16' ('' : the baseline)."""
        return "-".join(filter(None, (self.line, self.matrix_label)))

    @property
    def key(self) -> str:
        """task__framework__variant: the name of the run's record and log."""
        return "__".join(filter(None, (self.task, self.framework, self.variant)))

    @property
    def title(self) -> str:
        return f"{self.task}/{self.framework}" + (f" ({self.variant})" if self.variant else "")

    @property
    def baseline(self) -> bool:
        """Whether this is a notebook's baseline run (the variant matrix at its defaults, the task's seed)."""
        return self.matrix_label == ""


def legacy_identity(record: dict) -> Identity:
    """The identity of a record written before schema 3, which has none: the variant-matrix fields from its
    `matrix` object, the notebook's variant (API or backend, mode) from the papermill parameters in its
    `inputs`, and, for the variants a notebook file of its own runs without a parameter (MXNet's Module API,
    suite.NOTEBOOK_VARIANTS) or a record without inputs, from its variant label less the matrix's label, split
    in suite.VARIANTS' order. The one place a label is decoded; only records of schema 1 and 2 come here."""
    matrix = record.get("matrix") or {}
    if record.get("devices", 1) != 1 and "devices" not in matrix:
        matrix = {**matrix, "devices": record["devices"]}
    identity = Identity.of(record["task"], record["framework"], {}, matrix)
    names = [
        name
        for (task, framework), (name, _) in suite.VARIANTS.items()
        if task in ("*", record["task"]) and framework in ("*", record["framework"])
    ]
    given = ((record.get("inputs") or {}).get("parameters") or {}) if isinstance(record.get("inputs"), dict) else {}
    if names and not all(name in given for name in names):
        label, tail = record.get("variant") or "", identity.matrix_label
        line = label[: -len(tail)].rstrip("-") if tail and label.endswith(tail) else label
        given = dict(zip(names, line.split("-"), strict=False))
    return Identity.of(record["task"], record["framework"], {n: given[n] for n in names if given.get(n)}, matrix)


def identity(record: dict) -> Identity:
    """A record's identity: its `identity` fields (schema 3); a record made before has them migrated."""
    if "identity" in record:  # its fields' types were checked with the record (docs/record.schema.json)
        run = Identity(**record["identity"])
        if (run.task, run.framework) != (record.get("task"), record.get("framework")):
            raise RecordError(
                f"its identity is of {run.task}/{run.framework}, but the record says "
                f"{record.get('task')}/{record.get('framework')}"
            )
        return run
    if record.get("schema", records.SCHEMA) >= 3:
        raise RecordError(
            "a schema-3 record must carry its identity (task, framework, api, mode, precision, "
            "compilation, devices, sweep, seed): it was not written by results.finalize"
        )
    return legacy_identity(record)


# --- the results folder --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """One machine's results folder and every path in it (the module docstring draws the tree)."""

    root: Path  # results/<machine>

    @property
    def machine(self) -> str:
        return self.root.name

    def record(self, profile: str, run: Identity) -> Path:
        return self.root / "records" / profile / f"{run.key}.json"

    def superseded(self, profile: str, run: Identity) -> Path:
        return self.root / "records" / profile / "superseded" / f"{run.key}.json"

    def executed(self, profile: str, run: Identity) -> Path:
        """The executed notebook, named after its framework's notebook and variant: executed/cpu/cnn_cifar10/
        keras-jax-bf16.ipynb."""
        return (
            self.root
            / "executed"
            / profile
            / run.task
            / f"{run.framework}{'-' + run.variant if run.variant else ''}.ipynb"
        )

    def log(self, profile: str, run: Identity) -> Path:
        return self.root / "logs" / profile / f"{run.key}.log"

    def trace(self, profile: str, run: Identity) -> Path:
        """The profiler's trace, beside the executed notebook: executed/cpu/cnn_cifar10/pytorch.trace.json.gz."""
        executed = self.executed(profile, run)
        return executed.with_name(f"{executed.stem}.trace.json.gz")

    def paths(self, profile: str, run: Identity) -> dict[str, Path]:
        """Where a finished run's record, executed notebook, log and profiler trace are."""
        return {
            "record": self.record(profile, run),
            "executed": self.executed(profile, run),
            "log": self.log(profile, run),
            "trace": self.trace(profile, run),
        }

    def staging(self, profile: str, run: Identity) -> Path:
        """The folder a run in progress writes in: the files of `paths`, under the same names."""
        return self.root / STAGING / profile / run.key

    def staged(self, profile: str, run: Identity) -> dict[str, Path]:
        """The staging folder's files, named as `paths` names them, but the trace, which the notebook names after
        its record (support.records.trace_path)."""
        folder = self.staging(profile, run)
        staged = {name: folder / path.name for name, path in self.paths(profile, run).items()}
        return {**staged, "trace": records.trace_path(staged["record"])}

    @contextmanager
    def fresh_staging(self, profile: str, run: Identity):
        """The staging folder of a run about to start, emptied of anything an earlier run left, and removed when
        the block ends however it ends (finalize has moved out what is kept); yields `staged`'s paths."""
        folder = self.staging(profile, run)
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        try:
            yield self.staged(profile, run)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def record_files(self) -> list[Path]:
        """Every stored record (records/<profile>/*.json; the superseded ones sit a level below)."""
        return sorted((self.root / "records").glob("*/*.json"))

    def run_file(self, run_id: str) -> Path:
        return self.root / "runs" / f"{run_id}.json"

    def relative(self, path: Path) -> str:
        return str(Path(path).relative_to(self.root))

    # what the report and the reader make from the records
    @property
    def csv(self) -> Path:
        return self.root / "results.csv"

    @property
    def sweeps_csv(self) -> Path:
        return self.root / "sweeps.csv"

    @property
    def markdown(self) -> Path:
        return self.root / "results.md"

    def plots(self, profile: str) -> Path:
        return self.root / "plots" / profile

    @property
    def site(self) -> Path:
        return self.root / "site"


@contextmanager
def hold(layout: Layout, argv: list[str], program: str = "run_all.py"):
    """Hold the results folder for this runner (a `filelock` lock, released when the process ends, however it
    ends); a second runner gets SystemExit with one line naming the holder."""
    from filelock import FileLock, Timeout

    layout.root.mkdir(parents=True, exist_ok=True)
    lock, holder = FileLock(layout.root / LOCK_NAME), layout.root / HOLDER_NAME
    try:
        lock.acquire(blocking=False)
    except Timeout:
        who = (holder.read_text().strip() if holder.exists() else "") or "a process that has not said who it is"
        raise SystemExit(
            f"{program}: {layout.root} is in use by another runner ({who}); two runs on one machine "
            f"share its CPU and spoil each other's timings: wait for it to end, or stop it"
        ) from None
    try:
        holder.write_text(
            f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')}: "
            f"{program} {' '.join(argv)}".strip()
        )
        yield
    finally:
        holder.unlink(missing_ok=True)
        lock.release()


# --- the run metadata: one file per invocation of the runner ----------------------------------------------------


def write_run(layout: Layout, meta: dict) -> Path:
    """Write runs/<run id>.json (atomic): the calibration, loads and arguments of one invocation."""
    path = layout.run_file(meta["run"])
    atomic_write_json(path, meta)
    return path


class RunFileError(ValueError):
    """A run file that cannot be used: `problem` says why in a few words, str() names the file too."""

    def __init__(self, path: Path, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path, self.problem = path, problem


def read_run(layout: Layout, run_id: str) -> dict:
    """runs/<run id>.json; RunFileError (one line naming the file) where it is missing or malformed."""
    path = layout.run_file(run_id)
    if not re.fullmatch(r"[\w.-]+", run_id):
        raise RunFileError(path, "not a run id")
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RunFileError(path, "missing") from None
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise RunFileError(path, f"not readable JSON ({' '.join(str(err).split())[:80]})") from None
    if (
        not isinstance(meta, dict)
        or not isinstance(meta.get("calibration"), dict)
        or not all(isinstance(v, dict) for v in meta["calibration"].values())
    ):
        raise RunFileError(path, "malformed (no calibration object)")
    return meta


# --- the record's last word ------------------------------------------------------------------------------------


def read(path) -> dict:
    """A stored record, validated, with its identity (migrated for a record made before schema 3)."""
    record = records.read(path)
    try:
        identity(record)
    except RecordError as err:
        raise RecordError(f"{path}: {err}") from None
    return record


def failed(run: Identity, profile: str, machine: str, status: str, error: str) -> dict:
    """The record of a run that left none of its own (it failed, timed out, was killed or could not start)."""
    return records.failed(run.task, run.framework, run.variant, profile, machine, status, error)


def finalize(
    layout: Layout, record: dict, run: Identity, profile: str, /, *, staged: dict[str, Path] | None = None, **runner
) -> dict:
    """Give a run's record its last word and store it with its executed notebook and log.

    `record` is what the notebook wrote (or `failed()`); `runner` is what only the runner knows: run (the run id),
    wall_s, timed, inputs, and anything of its own (cpu_reason, device_check). The identity and its labels are set
    here and nowhere else. `staged`: the executed notebook and log written in the staging folder (Layout.staged),
    swapped in first, the record last, so an interrupted swap never leaves a record beside another run's files;
    None where they were written in place. An ok record that a failed run replaces is kept under
    records/<profile>/superseded/, so no measurement is lost. Returns the stored record."""
    if (record["task"], record["framework"]) != (run.task, run.framework):
        raise RecordError(f"the record is of {record['task']}/{record['framework']}, not of {run.title}")
    paths = layout.paths(profile, run)
    record = {
        **record,
        "identity": run.as_dict(),
        "key": run.key,
        "variant": run.variant,
        "profile": profile,
        "executed_notebook": layout.relative(paths["executed"]),
        "log": layout.relative(paths["log"]),
        **({"trace": layout.relative(paths["trace"])} if staged is not None and staged["trace"].exists() else {}),
        **runner,
    }
    records.validate(record)
    previous = paths["record"]
    if record["status"] != "ok" and previous.exists():
        try:
            if records.read(previous)["status"] == "ok":  # e.g. a precision that ran before and no longer does
                kept = layout.superseded(profile, run)
                kept.parent.mkdir(exist_ok=True)
                previous.replace(kept)
                record["superseded"] = layout.relative(kept)
        except RecordError:
            pass
    for name in ("executed", "log", "trace") if staged is not None else ():
        paths[name].parent.mkdir(parents=True, exist_ok=True)
        if staged[name].exists():
            staged[name].replace(paths[name])
        else:
            paths[name].unlink(missing_ok=True)  # never leave an earlier run's copy beside this record
    atomic_write_json(previous, record)
    return record


# --- migrating records made before schema 3 --------------------------------------------------------------------


def migrate(results: Path) -> list[Path]:
    """Rewrite every record under results/<machine>/records/ that has no identity with the one legacy_identity
    gives it (`identity` and `key` added, `matrix` folded into them, its schema number and measurements as they
    were), atomically; return the files rewritten.
    A record filed under another key than its identity's is left alone and named on stderr."""
    changed = []
    for path in sorted(results.glob("*/records/*/*.json")) + sorted(results.glob("*/records/*/superseded/*.json")):
        try:
            record = records.read(path)
        except RecordError as err:
            print(f"left as it is: {err}", file=sys.stderr)
            continue
        if "identity" in record:
            continue
        run = legacy_identity(record)
        if run.key != path.stem:
            print(f"left as it is: {path} holds {run.key}", file=sys.stderr)
            continue
        record = {**record, "identity": run.as_dict(), "key": run.key, "variant": run.variant}  # schema kept
        record.pop("matrix", None)
        atomic_write_json(path, records.validate(record))
        changed.append(path)
    return changed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="The results layer's one command: migrate old records.")
    parser.add_argument("command", choices=["migrate"])
    parser.add_argument("results", type=Path, nargs="?", default=suite.ROOT / "results")
    args = parser.parse_args(argv)
    changed = migrate(args.results)
    print(f"{len(changed)} record(s) given their identity")
    return 0


if __name__ == "__main__":
    sys.exit(main())
