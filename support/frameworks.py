"""The frameworks: the one place that says what each framework is to the suite, as support/tasks.py does for tasks.

Standard library only: `scripts/setup_envs.py` reads it (through `scripts/suite.py`) with whatever Python 3 the
user has, before numpy exists. The runner, the report, the reader site, support.precision and the tests read
frameworks from here. Adding a framework is an entry here, its environment's pins (requirements/), its module
support/measure/<name>.py and its notebooks.

Each entry's `probe` is how `support.env.describe` reads a record's device, threads and GPU libraries from the
framework module the notebook imported: it is handed that module and never imports a framework itself, so this
registry stays importable anywhere.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Launcher:
    """How a framework starts a program once per device, each process a rank of a data-parallel run: data, so that
    adding a launcher is an entry here. The runner (scripts/run_all.py) runs `command` with the framework's
    environment's Python, `{n}` filled with the number of processes and `{log_dir}` with a folder for the launcher's
    own logs, followed by `scripts/papermill_rank.py FRAMEWORK NOTEBOOK OUTPUT [papermill options]`, which the
    launcher starts once per rank with the same arguments; papermill_rank reads the rank from `rank`, the
    environment variable the launcher sets in each process."""

    command: tuple[str, ...]  # after `<environment>/bin/python`: the launcher and its options, up to the script
    rank: str  # the environment variable that tells each process its rank (0 .. n-1)
    # a launcher that also starts the script as a coordinator of the ranks (msrun's scheduler): the variable and
    # value that mark that process, and the function (`module:name`) it calls there in place of the notebook
    coordinator: tuple[str, str] | None = None
    coordinate: str = ""

    def argv(self, n: int, log_dir: str, port: int) -> list[str]:
        """The launcher's arguments for n processes; `{port}`: a free port on this host for its rendezvous."""
        return [part.format(n=n, log_dir=log_dir, port=port) for part in self.command]


@dataclass(frozen=True)
class Framework:
    name: str  # the notebooks' file stem and the records' `framework`
    label: str  # how tables and the reader site name it
    environment: str  # the virtual environment (.venvs/<name>, kernel dlr-<name>) that runs its notebooks
    gpu_probe: str  # Python printing True where the installed build computes on the GPU, else False
    gpu_build: str  # what to do where the probe says False on a GPU machine (or why nothing can)
    compilation: str = "off"  # what `compilation="auto"` means (support.precision): its own default
    launcher: Launcher | None = None  # data parallelism as one process per device: how the runner starts each one
    module: str = ""  # the module its notebooks import, that support.env.describe is given ("": name)
    runs_on: str = ""  # the framework whose build and GPU probe it shares (an API style of it), "" for its own
    # variables its kernels alone get from the runner (scripts/jobs.py), each value under the project's cache
    # (`{cache}`): what would reach another framework's kernel too if support.env set it for all, each with its reason
    environ: tuple[tuple[str, str], ...] = ()
    probe: Callable[[object], dict] | None = None  # that module -> its device, threads and libraries (see above)

    @property
    def module_name(self) -> str:
        return self.module or self.name

    @property
    def gpu_probe_key(self) -> str:
        """The framework whose GPU probe decides for it: itself, or the one it runs on."""
        return self.runs_on or self.name


def _installed(package: str) -> str | None:
    """The installed version of a package, without importing it (None where it is not installed)."""
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _torch(torch) -> dict:
    gpu = torch.cuda.is_available()
    return {
        "threads": torch.get_num_threads(),
        "device": torch.cuda.get_device_name() if gpu else "cpu",
        "cuda": torch.version.cuda if gpu else None,
        "cudnn": torch.backends.cudnn.version() if gpu else None,
    }


def _tensorflow(tf) -> dict:
    gpus = tf.config.list_physical_devices("GPU")
    build = tf.sysconfig.get_build_info()
    return {
        "threads": os.cpu_count(),  # a thread per core unless configured
        "device": tf.config.experimental.get_device_details(gpus[0]).get("device_name", "gpu") if gpus else "cpu",
        "cuda": build.get("cuda_version") if gpus else None,
        "cudnn": build.get("cudnn_version") if gpus else None,
    }


def _jax(jax) -> dict:
    devices = jax.devices()
    gpu = jax.default_backend() == "gpu"
    versions = {name: _installed(name) for name in ("jaxlib", "flax", "optax")}
    platform = importlib.import_module("jax.extend.backend").get_backend().platform_version if gpu else None
    return {
        "threads": os.cpu_count(),
        "device": devices[0].device_kind if gpu else "cpu",
        "n_devices": len(devices),
        "backend": jax.default_backend(),
        **versions,
        "xla_flags": os.environ.get("XLA_FLAGS"),
        "xla_platform": platform,
    }


def _keras(keras) -> dict:
    """Keras's device and threads are its backend's: the backend framework's probe, on the module Keras loaded."""
    backend = keras.backend.backend()
    lib = sys.modules[backend]
    inner = by_module(backend).probe(lib)
    return {
        "threads": inner["threads"],
        "device": inner["device"],
        "backend": backend,
        "backend_version": lib.__version__,
        "xla_flags": os.environ.get("XLA_FLAGS"),
    }


def _mxnet(mx) -> dict:
    from support import hardware  # nvidia-smi names the GPU, which MXNet does not

    gpu = mx.context.num_gpus() > 0
    features = mx.runtime.Features()
    threads = os.environ.get("OMP_NUM_THREADS")
    return {
        "threads": int(threads) if threads else None,
        "device": hardware.nvidia_smi("name")[0]["name"] if gpu else "cpu",
        "mkldnn": features.is_enabled("MKLDNN"),
        "cuda": features.is_enabled("CUDA") if gpu else None,
    }


def _chainer(chainer) -> dict:
    gpu = chainer.backends.cuda.available
    cupy = chainer.backends.cuda.cupy if gpu else None
    try:
        from threadpoolctl import threadpool_info

        pools = [pool for pool in threadpool_info() if pool["user_api"] == "blas"]
        blas = next((pool for pool in pools if "numpy" in pool["filepath"]), pools[0]) if pools else None
    except ImportError:
        blas = None
    return {
        "threads": blas["num_threads"] if blas else None,
        "device": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode() if gpu else "cpu",
        "cupy": cupy.__version__ if gpu else None,
        "blas": f"{blas['internal_api']} {blas['version']} {blas['architecture']}" if blas else None,
        "ideep": chainer.backends.intel64.is_ideep_available(),
    }


def _paddle(paddle) -> dict:
    gpu = paddle.device.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0
    return {
        "threads": int(os.environ["OMP_NUM_THREADS"]) if os.environ.get("OMP_NUM_THREADS") else os.cpu_count(),
        "device": paddle.device.cuda.get_device_name() if gpu else "cpu",
        "cuda": paddle.version.cuda() if gpu else None,
        "cudnn": paddle.version.cudnn() if gpu else None,
        "mkl": paddle.version.with_mkl,  # "ON" where the build links MKL (its oneDNN is a flag: FLAGS_use_mkldnn)
    }


def _mindspore(ms) -> dict:
    target = ms.get_context("device_target")
    return {
        "threads": int(os.environ["OMP_NUM_THREADS"]) if os.environ.get("OMP_NUM_THREADS") else os.cpu_count(),
        "device": target.lower() if target != "CPU" else "cpu",
        "mode": {ms.GRAPH_MODE: "graph", ms.PYNATIVE_MODE: "pynative"}.get(ms.get_context("mode")),
    }


# What a machine without the GPU build is told: the set-up builds the CUDA lock sets where nvidia-smi answers.
_SETUP = "run `python3 -m scripts.setup_envs` on this machine: where nvidia-smi answers it builds the CUDA lock sets"

# Each GPU probe computes one small sum on the first GPU and prints True where the answer is right; False where the
# build sees no GPU; it raises where it sees one but cannot compute there (a driver too old, a library missing).
FRAMEWORKS = {
    f.name: f
    for f in (
        Framework(
            "pytorch",
            "PyTorch",
            "modern",
            "import torch; print(torch.cuda.is_available() and (torch.ones(4, device='cuda') * 2).sum().item() == 8)",
            f"{_SETUP} (PyTorch's CUDA 13 wheel needs driver 580.65.06 or newer)",
            module="torch",
            probe=_torch,
            # DistributedDataParallel, launched by torchrun; --standalone: a free port on this host; --tee: each
            # rank's output reaches the log line by line, behind its rank
            launcher=Launcher(
                (
                    "-m",
                    "torch.distributed.run",
                    "--standalone",
                    "--nproc-per-node={n}",
                    "--tee=3",
                    "--log-dir={log_dir}",
                    "--log-line-prefix-template=[rank${{rank}}] ",
                ),
                "RANK",
            ),
        ),
        Framework(
            "tensorflow",
            "TensorFlow",
            "modern",
            "import tensorflow as tf; gpu = bool(tf.config.list_physical_devices('GPU'))\n"
            "if gpu:\n    with tf.device('/GPU:0'): gpu = float(tf.reduce_sum(tf.ones(4) * 2)) == 8\nprint(gpu)",
            f"{_SETUP} (TensorFlow's then runs in the `tensorflow` environment, on CUDA 12)",
            probe=_tensorflow,
        ),
        Framework(
            "tensorflow1",
            "TensorFlow 1.x graph",
            "modern",
            "",
            "",
            module="tensorflow",
            runs_on="tensorflow",
            probe=_tensorflow,
        ),  # tf.compat.v1: a graph run by a Session (Grappler, always); compilation="on" adds XLA's auto-clustering,
        # which TensorFlow 1.x leaves off and which measured slower for the CNN on this CPU
        Framework(
            "keras", "Keras 3", "modern", "", "", compilation="", probe=_keras
        ),  # asks its backend's framework (KERAS_BACKENDS)
        Framework(
            "jax",
            "JAX + Flax",
            "modern",
            "import jax, jax.numpy as jnp; gpus = [d for d in jax.devices() if d.platform == 'gpu']\n"
            "print(bool(gpus) and float((jax.device_put(jnp.ones(4), gpus[0]) * 2).sum()) == 8)",
            f"{_SETUP} (it adds jax[cuda13])",
            compilation="on",
            probe=_jax,
        ),
        Framework(
            "paddle",
            "PaddlePaddle",
            "paddle-mindspore",
            "import paddle; print(paddle.device.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0 "
            "and float((paddle.ones([4]).cuda() * 2).sum()) == 8)",
            "PaddlePaddle 3.x has no CUDA build on PyPI (paddlepaddle-gpu stops at 2.6.2, and Paddle's own index is "
            "not a registry this project installs from); this project pins the CPU build, so PaddlePaddle runs on the "
            "CPU",
            probe=_paddle,
            # `import paddle` creates ~/.cache/paddle/dataset and paddle.jit.to_static writes
            # ~/.cache/paddle/to_static_tmp/<pid>, both from os.path.expanduser('~'), with no variable of their own
            environ=(("HOME", "{cache}/home/paddle"),),
            # paddle.DataParallel, launched by paddle.distributed.launch (gloo on the CPU); rank 0's output reaches
            # the log, every rank's its log_dir/workerlog.<rank>; --max_restart=0: a failed rank is not restarted
            launcher=Launcher(
                (
                    "-m",
                    "paddle.distributed.launch",
                    "--nproc_per_node={n}",
                    "--max_restart=0",
                    "--log_dir={log_dir}",
                ),
                "PADDLE_TRAINER_ID",
            ),
        ),  # dynamic graph by default; compilation="on" is paddle.jit.to_static
        Framework(
            "mindspore",
            "MindSpore",
            "paddle-mindspore",
            "import mindspore as ms\ntry:\n    ms.set_device('GPU'); ok = float((ms.Tensor([1.0] * 4) * 2).sum()) == 8\n"
            "except RuntimeError:\n    ok = False  # its GPU plugin finds no CUDA 11 libcuda/libcudnn\nprint(ok)",
            "MindSpore 2.10's GPU plugin is built for CUDA 11 only (its wheel carries the CPU, CUDA 11 and Ascend "
            "plugins); this project runs MindSpore on the CPU",
            probe=_mindspore,
            # MindSpore logs through glog to stderr by default. In a kernel, @mindspore.jit on a large graph (the
            # GRU's 150 steps, DenseNet-121's training step) logs a line per graph node while it holds the GIL and
            # can fill ipykernel's stderr pipe until the kernel hangs: its log goes to files instead, errors included
            # (an error that stops a run is raised as a Python exception). PaddlePaddle's glog reads the same
            # variables, and its import hangs under them: MindSpore's kernels alone get them.
            environ=(
                ("GLOG_log_dir", "{cache}/mindspore/log"),
                ("GLOG_logtostderr", "0"),
                ("GLOG_stderrthreshold", "3"),
            ),
            # nn.DistributedGradReducer over mindspore.communication (its CPU collective library), launched by msrun:
            # a scheduler and n workers, each `python SCRIPT ...` with `python` taken from PATH (the runner puts the
            # environment's bin first). The scheduler runs the script too (MS_ROLE=MS_SCHED) and only calls
            # mindspore.communication.init(), which serves until the workers end; each worker's output goes to
            # log_dir/worker_<rank>.log; --join=True: msrun waits and fails where a process fails;
            # --cluster_time_out: a scheduler whose workers stop before init() (a refused variant) waits that long
            # (600 s by default); --master_port: msrun's default, 8118, would collide between two launches at once.
            launcher=Launcher(
                (
                    "-m",
                    "mindspore.parallel.cluster.run",
                    "--worker_num={n}",
                    "--local_worker_num={n}",
                    "--master_port={port}",
                    "--log_dir={log_dir}",
                    "--join=True",
                    "--cluster_time_out=120",
                ),
                "RANK_ID",
                coordinator=("MS_ROLE", "MS_SCHED"),
                coordinate="support.measure.mindspore:serve_ranks",
            ),
            # this project's choice, as MXNet's hybridize(): graph mode through @mindspore.jit (MindSpore's own
            # default is PyNative). On the 2-core Zen 5, compiled against PyNative: the CNN's step 0.33-0.37 against
            # 0.59 s, ResNet-50 18.6 against 10.0 images/s, DenseNet-121's step 2.57 against 3.04 s, and the GRU's
            # about 0.3 against 7 s (PyNative runs nn.GRU as a Python loop over the 150 steps' cells)
            compilation="on",
        ),  # compilation="off" is PyNative
        Framework(
            "mxnet",
            "MXNet",
            "legacy",
            "import mxnet as mx; print(mx.context.num_gpus() > 0 and (mx.nd.ones(4, ctx=mx.gpu(0)) * 2).sum().asscalar() == 8)",
            "MXNet 1.9.1, its last release, has GPU wheels only up to mxnet-cu117, built for compute capability "
            "up to 8.6 with CUDA 11.7; this project pins the CPU build in every lock set, so MXNet runs on the CPU",
            compilation="on",
            probe=_mxnet,
        ),
        Framework(
            "chainer",
            "Chainer",
            "legacy",
            "import chainer; ok = chainer.backends.cuda.available\n"
            "if ok:\n    import cupy; ok = float((cupy.ones(4) * 2).sum()) == 8\nprint(ok)",
            f"{_SETUP} (it adds CuPy for CUDA 11.8)",
            probe=_chainer,
        ),
    )
}
NAMES = tuple(FRAMEWORKS)

# Keras runs on a backend (its notebooks' `backend` parameter): backend -> the framework whose GPU probe decides,
# and what `compilation="auto"` means on it: Keras's own `jit_compile="auto"` (Keras 3.15.1,
# `Trainer._resolve_auto_jit_compile`): off on torch; on TensorFlow off where TensorFlow sees no device but CPUs (and
# under a tf.distribute strategy), XLA otherwise; XLA on JAX. `<backend>-gpu` is the value where a GPU is visible.
KERAS_BACKENDS = {"tensorflow": "tensorflow", "jax": "jax", "torch": "pytorch"}
KERAS_COMPILATION = {"tensorflow": "off", "tensorflow-gpu": "on", "jax": "on", "torch": "off"}
# A task where a framework's default differs from its own: PyTorch's ResNet-50 inference is compiled with Inductor's
# freezing (it roughly halves the eager time; compiling the training steps gained nothing on a CPU).
TASK_COMPILATION = {
    ("pytorch", "resnet50_features"): "on",
    # PaddlePaddle's ResNet-50 inference through paddle.jit.to_static, whose static graph runs oneDNN's convolutions
    # (the dynamic graph's do not): 0.60-0.63 s a batch of 16 against 2.38 s on the 2-core Zen 5 (PERFORMANCE.md)
    ("paddle", "resnet50_features"): "on",
}


def get(name: str) -> Framework:
    if name not in FRAMEWORKS:
        raise ValueError(f"unknown framework {name!r}; choose from: {', '.join(NAMES)}")
    return FRAMEWORKS[name]


def by_module(module: str) -> Framework:
    """The framework whose notebooks import `module` ('torch' -> PyTorch); a ValueError of one line naming it."""
    found = next((f for f in FRAMEWORKS.values() if f.module_name == module), None)
    if found is None:
        raise ValueError(
            f"no framework imports the module {module!r}; the frameworks' modules are "
            f"{', '.join(f.module_name for f in FRAMEWORKS.values())}"
        )
    return found


def keras_compilation_key(backend: str, gpu: bool = False, devices: int = 1) -> str:
    """The DEFAULT_COMPILATION entry of a Keras run on `backend`: `keras-<backend>-gpu` where Keras's own "auto"
    differs on a GPU (TensorFlow: XLA) and the run is on one GPU (Keras leaves XLA off under a strategy), else
    `keras-<backend>`. The one rule for the runner (scripts/suite.py) and the notebooks (support.measure.keras)."""
    gpu_key = f"{backend}-gpu"
    return f"keras-{gpu_key}" if gpu and devices == 1 and gpu_key in KERAS_COMPILATION else f"keras-{backend}"


def default_compilation() -> dict:
    """support.precision.DEFAULT_COMPILATION: framework (Keras: keras-<backend>) or framework/task -> 'on'/'off'."""
    table = {name: f.compilation for name, f in FRAMEWORKS.items() if f.compilation}
    table.update({f"keras-{backend}": value for backend, value in KERAS_COMPILATION.items()})
    table.update({f"{name}/{task}": value for (name, task), value in TASK_COMPILATION.items()})
    return table
