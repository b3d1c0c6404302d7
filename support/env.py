"""The machine and software a result was measured on, and where caches go.

`describe()` gathers what every record carries (Python, numpy, OS, CPU, git commit, date)
plus what the notebook passes about its framework; `machine_name()` names the results folder.
Standard library at import time (numpy is imported by `describe()` alone), so that
`support.tasks` can be read before any environment exists.
"""
from __future__ import annotations

import datetime as _dt
import importlib
import os
import platform
import re
import shutil
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
        "XDG_CACHE_HOME": str(cache / "xdg"),        # what libraries keep in ~/.cache (onnxruntime's device id)
        "MXNET_HOME": str(cache / "mxnet"),
        "CHAINER_DATASET_ROOT": str(cache / "chainer"),
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
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def _slug(text: str) -> str:
    text = re.sub(r"\((r|tm)\)|\bcpu\b|processor|@.*|\d+-core", "", text.lower())
    text = re.sub(r"\bfamily (\d+), model (\d+), stepping (\d+)", r"f\1m\2s\3", text)
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-")


def machine_name() -> str:
    """A folder name for this machine's results: the GPUs' model and count where there are GPUs,
    then the cores and the CPU model, e.g. `cpu-2c-intel-xeon-platinum-8488c`,
    `cpu-2c-amd-epyc-f26m2s1` (a VM that hides the model number) or `nvidia-h100-x1-cpu-16c-...`; a CPU capped
    to an older ISA (support.hardware: DLROSETTA_CPU_ISA, oneDNN's caps) is another machine, `...-isa-avx2`."""
    from support import hardware

    cpu = hardware.Cpu()
    host = f"cpu-{os.cpu_count()}c-{_slug(cpu_model())}" + (f"-isa-{cpu.level}" if cpu.cap else "")
    gpus = gpu_names()
    return f"{_slug(gpus[0])}-x{len(gpus)}-{host}" if gpus else host


def git_commit(root: Path = ROOT) -> str:
    """The checkout's commit, with `-dirty` where the project's SOURCES (tracked, or new and not
    ignored) differ from it; 'unknown' outside a git checkout."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=root,
                                capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", *SOURCES], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (commit + ("-dirty" if dirty else "")) or "unknown"


def peak_host_memory() -> int | None:
    """The peak resident memory of this process so far, in bytes (None where the OS does not say)."""
    try:
        import resource
    except ImportError:          # Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) * (1 if sys.platform == "darwin" else 1024)   # macOS counts bytes, Linux KiB


def _installed(package: str) -> str | None:
    """The installed version of a package, without importing it (None where it is not installed)."""
    from importlib import metadata
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _torch(torch) -> dict:
    gpu = torch.cuda.is_available()
    return {"framework": "torch", "threads": torch.get_num_threads(),
            "device": torch.cuda.get_device_name() if gpu else "cpu",
            "cuda": torch.version.cuda if gpu else None, "cudnn": torch.backends.cudnn.version() if gpu else None}


def _tensorflow(tf) -> dict:
    gpus = tf.config.list_physical_devices("GPU")
    build = tf.sysconfig.get_build_info()
    return {"framework": "tensorflow", "threads": os.cpu_count(),   # a thread per core unless configured
            "device": tf.config.experimental.get_device_details(gpus[0]).get("device_name", "gpu") if gpus else "cpu",
            "cuda": build.get("cuda_version") if gpus else None, "cudnn": build.get("cudnn_version") if gpus else None}


def _jax(jax) -> dict:
    devices = jax.devices()
    gpu = jax.default_backend() == "gpu"
    versions = {name: _installed(name) for name in ("jaxlib", "flax", "optax")}
    return {"framework": "jax", "threads": os.cpu_count(), "device": devices[0].device_kind if gpu else "cpu",
            "n_devices": len(devices), "backend": jax.default_backend(),
            **versions, "xla_flags": os.environ.get("XLA_FLAGS"),
            "xla_platform": importlib.import_module("jax.extend.backend").get_backend().platform_version if gpu else None}


def _keras(keras) -> dict:
    backend = keras.backend.backend()
    lib = sys.modules[backend]
    inner = PROBES[backend](lib)
    return {"framework": "keras", "threads": inner["threads"], "device": inner["device"], "backend": backend,
            "backend_version": lib.__version__, "xla_flags": os.environ.get("XLA_FLAGS")}


def _mxnet(mx) -> dict:
    gpu = mx.context.num_gpus() > 0
    features = mx.runtime.Features()
    threads = os.environ.get("OMP_NUM_THREADS")
    return {"framework": "mxnet", "threads": int(threads) if threads else None,
            "device": gpu_names()[0] if gpu else "cpu", "mkldnn": features.is_enabled("MKLDNN"),
            "cuda": features.is_enabled("CUDA") if gpu else None}


def _chainer(chainer) -> dict:
    gpu = chainer.backends.cuda.available
    cupy = chainer.backends.cuda.cupy if gpu else None
    try:
        from threadpoolctl import threadpool_info
        pools = [pool for pool in threadpool_info() if pool["user_api"] == "blas"]
        blas = next((pool for pool in pools if "numpy" in pool["filepath"]), pools[0]) if pools else None
    except ImportError:
        blas = None
    return {"framework": "chainer", "threads": blas["num_threads"] if blas else None,
            "device": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode() if gpu else "cpu",
            "cupy": cupy.__version__ if gpu else None,
            "blas": f"{blas['internal_api']} {blas['version']} {blas['architecture']}" if blas else None,
            "ideep": chainer.backends.intel64.is_ideep_available()}


# How describe() asks each framework (the module a notebook imported) for its device and threads.
PROBES = {"torch": _torch, "tensorflow": _tensorflow, "jax": _jax, "keras": _keras, "mxnet": _mxnet,
          "chainer": _chainer}


def describe(framework, **extra) -> dict:
    """Everything a record says about where it was measured: the framework (the imported module,
    e.g. `env.describe(torch)`; its device, threads and GPU libraries are read from it), this
    machine, the software and the commit. `extra` adds or overrides fields (None: left out)."""
    import numpy as np

    name = framework.__name__.split(".")[0]
    if name not in PROBES:
        raise ValueError(f"env.describe: no probe for the module {name!r}; pass one of {', '.join(PROBES)}")
    fields = {**PROBES[name](framework), **extra}
    info = {
        "framework": fields.pop("framework"),
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
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    return info


def show(info: dict) -> None:
    """Print `describe()`'s answer as the notebook's versions table."""
    width = max(map(len, info))
    for key, value in info.items():
        print(f"{key:<{width}}  {value}")
    sys.stdout.flush()
