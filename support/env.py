"""The machine and software a result was measured on, and where caches go.

`describe()` gathers what every record carries (Python, numpy, OS, CPU, git commit, date)
plus what the notebook passes about its framework, which its entry in support/frameworks.py reads from the
imported module (this module holds no framework code); `machine_name()` names the results folder.
Standard library at import time (numpy is imported by `describe()` alone), so that
`support.tasks` can be read before any environment exists.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# What a result is made from: a change here marks a record's commit `-dirty`; the README, results/
# and other files the runner writes do not.
SOURCES = ("notebooks", "support", "scripts", "requirements")


def cache_dir() -> Path:
    """The project's cache: $DLROSETTA_CACHE, else `.cache/` at the repository root."""
    return Path(os.environ.get("DLROSETTA_CACHE") or ROOT / ".cache")


def project_environment() -> dict:
    """Environment variables that keep every framework's files inside the project's cache."""
    cache = cache_dir()
    return {
        "DLROSETTA_CACHE": str(cache),
        "KERAS_HOME": str(cache / "keras"),
        "TORCH_HOME": str(cache / "torch"),
        "TORCHINDUCTOR_CACHE_DIR": str(cache / "torchinductor"),
        "TRITON_CACHE_DIR": str(cache / "triton"),
        "MPLCONFIGDIR": str(cache / "matplotlib"),
        "IPYTHONDIR": str(cache / "ipython"),
        "JUPYTER_RUNTIME_DIR": str(cache / "jupyter-runtime"),
        "XDG_CACHE_HOME": str(cache / "xdg"),  # what libraries keep in ~/.cache (onnxruntime's device id)
        "MXNET_HOME": str(cache / "mxnet"),
        "CHAINER_DATASET_ROOT": str(cache / "chainer"),
        # MindSpore writes into the working directory: rank_<id>/om/analyze_fail.ir where a graph fails to compile
        # (MS_OM_PATH), and, where asked for, its compile cache and saved graphs (its glog files: its registry
        # entry's `environ`, support/frameworks.py, as glog's variables reach PaddlePaddle too)
        "MS_OM_PATH": str(cache / "mindspore" / "om"),
        "MS_COMPILER_CACHE_PATH": str(cache / "mindspore" / "compiler-cache"),
        "MS_DEV_SAVE_GRAPHS_PATH": str(cache / "mindspore" / "graphs"),
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }


def use_project_cache() -> None:
    """Set each of `project_environment()` unless the user already set it."""
    for key, value in project_environment().items():
        os.environ.setdefault(key, value)


def _cpuinfo() -> dict:
    """The first processor's fields in /proc/cpuinfo ({} where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    fields = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    return fields


def cpu_model() -> str:
    """The CPU's model name; where a virtual machine hides the model number ('AMD EPYC'), the
    family, model and stepping numbers follow it, which tell CPU generations apart."""
    info = _cpuinfo()
    name = info.get("model name") or platform.processor() or platform.machine()
    if not re.search(r"\d", re.sub(r"\d+-core|@.*", "", name)) and info.get("cpu family"):
        name += f" (family {info['cpu family']}, model {info.get('model', '?')}, stepping {info.get('stepping', '?')})"
    return name


def gpu_names() -> list[str]:
    """NVIDIA GPUs as nvidia-smi names them ([] without a driver); no framework import."""
    # imported here: support.hardware reads /proc/cpuinfo through this module
    from support import hardware

    return [gpu["name"] for gpu in hardware.nvidia_smi("name")]


def _slug(text: str) -> str:
    text = re.sub(r"\((r|tm)\)|\bcpu\b|processor|@.*|\d+-core", "", text.lower())
    text = re.sub(r"\bfamily (\d+), model (\d+), stepping (\d+)", r"f\1m\2s\3", text)
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-")


def machine_name() -> str:
    """A folder name for this machine's results: the GPUs' model and count where there are GPUs,
    then the cores and the CPU model, e.g. `cpu-2c-intel-xeon-platinum-8488c`,
    `cpu-2c-amd-epyc-f26m2s1` (a VM that hides the model number) or `nvidia-h100-x1-cpu-16c-...`; a CPU capped
    to an older ISA by DLROSETTA_CPU_ISA (the runner's --cpu-isa) is another machine, `...-isa-avx2`; oneDNN's own
    caps without it cap one framework's kernels, not the machine (support.hardware.Cpu.declared)."""
    from support import hardware

    cpu = hardware.Cpu()
    host = f"cpu-{os.cpu_count()}c-{_slug(cpu_model())}" + (f"-isa-{cpu.declared}" if cpu.declared else "")
    gpus = gpu_names()
    return f"{_slug(gpus[0])}-x{len(gpus)}-{host}" if gpus else host


def git_commit(root: Path = ROOT) -> str:
    """The checkout's commit, with `-dirty` where the project's SOURCES (tracked, or new and not
    ignored) differ from it; 'unknown' outside a git checkout."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", *SOURCES], cwd=root, capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (commit + ("-dirty" if dirty else "")) or "unknown"


def peak_host_memory() -> int | None:
    """The peak resident memory of this process so far, in bytes (None where the OS does not say)."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) * (1 if sys.platform == "darwin" else 1024)  # macOS counts bytes, Linux KiB


def describe(framework, **extra) -> dict:
    """Everything a record says about where it was measured: the framework (the imported module,
    e.g. `env.describe(torch)`; its device, threads and GPU libraries are read from it by its entry's probe in
    support/frameworks.py), this
    machine, the software and the commit. `extra` adds or overrides fields (None: left out)."""
    import numpy as np

    from support import frameworks

    name = framework.__name__.split(".")[0]
    try:
        probe = frameworks.by_module(name).probe
    except ValueError as err:
        raise ValueError(f"env.describe: {err}") from None
    fields = {**probe(framework), **extra}
    info = {
        "framework": name,
        "framework_version": framework.__version__,
        "device": fields.pop("device"),
        "threads": fields.pop("threads"),
        **{key: value for key, value in fields.items() if value is not None},
        "python": platform.python_version(),
        "numpy": np.__version__,
        "os": f"{platform.system()} {platform.release()}",
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "gpus": gpu_names(),
        "machine": machine_name(),
        "git_commit": git_commit(),
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }
    return info


def show(info: dict) -> None:
    """Print `describe()`'s answer as the notebook's versions table."""
    width = max(map(len, info))
    for key, value in info.items():
        print(f"{key:<{width}}  {value}")
    sys.stdout.flush()
