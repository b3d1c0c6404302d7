"""The runner's command line (python -m scripts.run_all --help): its arguments, each checked with one line naming
the value and what to give instead, and what they resolve to (the tasks, frameworks and variant matrix asked for,
the device counts this machine can have, the data each task reads, and what every record of one invocation is made
from)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from scripts import suite
from scripts.suite import comma_list
from support import env, hardware, precision, tasks
from support.data import SOURCES as DATA_WORDS
from support.timing import batch_sizes as timing_sizes


def check_names(names: list[str] | None, valid, what: str, parser) -> list[str]:
    """Names given (comma-separated or repeated: comma_list), checked against `valid` with a one-line error;
    all of `valid` where none were given."""
    for n in names or []:
        if n not in valid:
            parser.exit(2, f"run_all.py: unknown {what} {n!r}; choose from: {', '.join(valid)}\n")
    return list(dict.fromkeys(names)) if names else list(valid)


def parse_data(items: list[str] | None, parser) -> dict[str, str]:
    """--data as {task: value} for every task whose notebooks take `data`: a word (auto, real,
    synthetic), a path (the dataset's file, or a folder holding the datasets' files), or TASK=PATH."""
    takes_data = [name for name, task in tasks.TASKS.items() if "data" in task.parameters]
    how = (
        f"give {', '.join(DATA_WORDS)}, a folder holding the datasets (cifar-10-python.tar.gz, imdb.npz, "
        f"chestxray14/), or TASK=PATH for one task ({', '.join(takes_data)})"
    )
    chosen = dict.fromkeys(takes_data, "auto")
    for item in items or []:
        name, _, value = item.partition("=") if item.split("=", 1)[0] in tasks.TASKS else ("", "", item)
        if name and name not in takes_data:
            parser.exit(2, f"run_all.py: --data {item}: the {name} notebooks read no dataset; {how}\n")
        if value not in DATA_WORDS:
            path = Path(value).expanduser()
            if not path.exists():
                parser.exit(2, f"run_all.py: --data {item}: {path} does not exist; {how}\n")
            value = str(path.resolve())  # notebooks run in their own folder: pass absolute paths
        chosen.update({name: value} if name else dict.fromkeys(takes_data, value))
    return chosen


def parse_args(argv=None, usage: str = "") -> argparse.Namespace:
    """The arguments as the runner uses them: names checked, the variant matrix and devices resolved, and what every
    record of this invocation is made from found once. `usage`: scripts/run_all.py's docstring, for --help."""
    p = argparse.ArgumentParser(
        prog="python -m scripts.run_all",
        description=usage.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=usage.split("\n\n", 2)[2] if usage.count("\n\n") >= 2 else None,
    )
    p.add_argument(
        "--task",
        type=comma_list,
        action="extend",
        help=f"task(s) to run, comma-separated (default: all of {', '.join(suite.TASKS)})",
    )
    p.add_argument(
        "--framework",
        type=comma_list,
        action="extend",
        help=f"framework(s) to run, comma-separated (default: all of {', '.join(suite.FRAMEWORKS)})",
    )
    p.add_argument(
        "--profile",
        default="auto",
        help="full, cpu, tiny, or auto (default): full for each notebook whose framework sees a GPU, "
        "cpu for the others",
    )
    p.add_argument(
        "--data",
        type=comma_list,
        action="extend",
        help="auto (default), real, synthetic, a dataset path or a folder holding the datasets' files, "
        "or TASK=PATH; comma-separated or repeated",
    )
    p.add_argument(
        "--parity",
        action="store_true",
        help="also run the parity step of the notebooks that have one: shared weights, "
        "outputs checked against the numpy reference (off by default: timed runs leave it off)",
    )
    p.add_argument(
        "--precision",
        type=comma_list,
        action="extend",
        help=f"the variant matrix's precisions, comma-separated: {', '.join(precision.PRECISIONS)} "
        "(default fp32, the baseline); tf32 and fp16 need a GPU, and a combination a framework "
        "cannot run is recorded as unsupported with its reason",
    )
    p.add_argument(
        "--compilation",
        type=comma_list,
        action="extend",
        help="the variant matrix's compilation settings, comma-separated: auto (default: each framework's "
        "own, the baseline), on, off; the one equal to a framework's default is its baseline run",
    )
    p.add_argument(
        "--batch-size",
        dest="batch_sizes",
        default="",
        help="beside each run, a run of the notebook's batch-size sweep, e.g. 1,64,max (max: doubling until "
        "memory or the profile's sweep_budget_s runs out); its rows are the variant 'sweep' "
        "(with --resume, the runs already recorded are not repeated)",
    )
    p.add_argument(
        "--devices",
        type=comma_list,
        default=[str(tasks.DEVICES_DEFAULT)],
        help="device counts to train on, data-parallel, comma-separated, e.g. 1,2,4, or all (default 1), "
        "for the tasks whose notebooks take `devices` (DenseNet-121); each count is a run of its own. "
        "Capped at this machine's GPUs, or without one at its cores: CPU devices share the cores, "
        "so there they prove the data-parallel code right, not faster",
    )
    p.add_argument(
        "--seeds",
        type=int,
        default=1,
        help="runs of each baseline of the tasks with an accuracy band (CNN, GRU, DenseNet-121): the task's "
        "seed and the next ones, each a row of its own (variant 'seed43'); the band judges each "
        "framework line by the mean over them (default 1: the task's seed alone)",
    )
    p.add_argument(
        "--only",
        type=comma_list,
        action="extend",
        metavar="KEYS",
        help="of the notebook runs planned, only those whose key (task__framework__variant, the record's "
        "name) matches one of these shell patterns, comma-separated, e.g. "
        "'gru_imdb__*,cnn_cifar10__pytorch__bf16'; a pattern that matches no planned run is an error",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="skip notebooks whose ok record was made from the same inputs (notebook, support/, pins, "
        "parameters, hardware); rerun the others, saying why",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="notebooks to run at once (default 1). Above 1 they share the machine, so their records "
        "are marked not timed and no table shows their times: for smoke tests",
    )
    p.add_argument(
        "--cpu-isa",
        choices=hardware.LEVELS,
        metavar="ISA",
        help=f"run as on a CPU of this ISA level ({', '.join(hardware.LEVELS)}): every framework capped "
        "(oneDNN's ONEDNN_/DNNL_MAX_CPU_ISA, ATen's ATEN_CPU_CAPABILITY, XLA's --xla_cpu_max_isa) and "
        "support.hardware told so (DLROSETTA_CPU_ISA), e.g. avx2 to see what an AVX2-only CPU's user "
        "sees; the results go to a folder of their own (<machine>-isa-<ISA>)",
    )
    p.add_argument("--timeout", type=int, help="seconds one notebook may run (default: tiny 600, cpu 1800, full 21600)")
    p.add_argument("--results", type=Path, default=suite.ROOT / "results", help="results folder (default results/)")
    p.add_argument(
        "--machine", default=None, help="name of this machine's results subfolder (default: derived from the hardware)"
    )
    p.add_argument("--notebooks", type=Path, default=suite.NOTEBOOKS, help=argparse.SUPPRESS)
    p.add_argument(
        "--readme",
        type=Path,
        default=suite.ROOT / "README.md",
        help="README whose results table to update (default README.md); --no-readme to leave it",
    )
    p.add_argument("--no-readme", dest="readme", action="store_const", const=None)
    p.add_argument(
        "--no-site",
        dest="site",
        action="store_false",
        help="do not rebuild the side-by-side reader (results/<machine>/site/) at the end",
    )
    p.add_argument("--report-only", action="store_true", help="run nothing; rebuild tables, plots, README and reader")
    p.add_argument("--list", action="store_true", help="print the notebooks that would run, and stop")
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.tasks = check_names(args.task, suite.TASKS, "task", p)
    args.frameworks = check_names(args.framework, list(suite.FRAMEWORKS), "framework", p)
    if args.profile not in ("auto",) + suite.PROFILES:
        p.exit(2, f"run_all.py: unknown profile {args.profile!r}; choose from: auto, {', '.join(suite.PROFILES)}\n")
    if args.jobs < 1:
        p.exit(2, f"run_all.py: --jobs {args.jobs}: give 1 or more notebooks at a time\n")
    if args.seeds < 1:
        p.exit(2, f"run_all.py: --seeds {args.seeds}: give 1 or more runs of each baseline\n")
    args.data = parse_data(args.data, p)
    args.only = args.only or []
    # Without the flag, the matrix is the baseline alone (check_names' own default would be every value).
    args.precisions = check_names(
        args.precision or [tasks.VARIANT_PARAMETERS["precision"]], precision.PRECISIONS, "precision", p
    )
    args.compilations = check_names(
        args.compilation or [tasks.VARIANT_PARAMETERS["compilation"]], precision.COMPILATIONS, "compilation", p
    )
    args.device_counts = parse_devices(args.devices, p)
    args.gpu = bool(env.gpu_names())  # nvidia-smi lists a GPU: the calibration and some defaults depend on it
    try:
        timing_sizes(args.batch_sizes)
    except ValueError as err:
        p.exit(2, f"run_all.py: --batch-size: {err}\n")
    args.timed = args.jobs == 1  # notebooks side by side share the machine: their times measure nothing
    if args.cpu_isa:  # before anything reads the machine: its name, the calibration, every kernel
        os.environ.update(hardware.caps(args.cpu_isa))
    # What every record of this run is made from besides its notebook and pins (see inputs()), found once.
    args.hardware = env.machine_name()
    args.support = suite.digest(*suite.support_files())
    args.run_id = time.strftime("%Y%m%dT%H%M%S")
    args.machine = args.machine or args.hardware
    return args


def machine_devices() -> tuple[int, str]:
    """How many devices a data-parallel run can have here, and what they are: the GPUs `nvidia-smi` lists,
    else one CPU device per core."""
    gpus = len(env.gpu_names())
    if gpus:
        return gpus, f"{gpus} GPU{'s' if gpus > 1 else ''}"
    cores = os.cpu_count() or 1
    return cores, f"{cores} CPU core{'s' if cores > 1 else ''} and no GPU"


def parse_devices(items: list[str], parser) -> list[int]:
    """--devices: counts >= 1 or `all`; those above what this machine has are left out, saying so."""
    for item in items:
        if item != "all" and not (item.isdigit() and int(item) >= 1):
            parser.exit(2, f"run_all.py: --devices {item!r}: give whole numbers of at least 1, or all (e.g. 1,2,4)\n")
    if items in ([], [str(tasks.DEVICES_DEFAULT)]):
        return [tasks.DEVICES_DEFAULT]
    available, what = machine_devices()
    counts = []
    for item in items:
        n = available if item == "all" else int(item)
        if n > available:
            print(f"run_all.py: --devices {n} left out: this machine has {what}")
        elif n not in counts:
            counts.append(n)
    if not counts:
        parser.exit(2, f"run_all.py: --devices {','.join(items)!r}: no count fits this machine ({what})\n")
    return counts
