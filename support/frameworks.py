"""The frameworks: the one place that says what each framework is to the suite, as support/tasks.py does for tasks.

Standard library only: `scripts/setup_envs.py` reads it (through `scripts/suite.py`) with whatever Python 3 the
user has, before numpy exists. The runner, the report, the reader site, support.precision and the tests read
frameworks from here. Adding a framework is an entry here, its environment's pins (requirements/), its module
support/measure/<name>.py and its notebooks.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Framework:
    name: str                   # the notebooks' file stem and the records' `framework`
    label: str                  # how tables and the reader site name it
    environment: str            # the virtual environment (.venvs/<name>, kernel dlr-<name>) that runs its notebooks
    gpu_probe: str              # Python printing True where the installed build computes on the GPU, else False
    gpu_build: str              # what to do where the probe says False on a GPU machine (or why nothing can)
    compilation: str = "off"    # what `compilation="auto"` means (support.precision): its own default
    process_per_device: bool = False   # data parallelism as one process per device (the runner starts each one)


# What a machine without the GPU build is told: the set-up builds the CUDA lock sets where nvidia-smi answers.
_SETUP = "run `python3 scripts/setup_envs.py` on this machine: where nvidia-smi answers it builds the CUDA lock sets"

# Each GPU probe computes one small sum on the first GPU and prints True where the answer is right; False where the
# build sees no GPU; it raises where it sees one but cannot compute there (a driver too old, a library missing).
FRAMEWORKS = {f.name: f for f in (
    Framework("pytorch", "PyTorch", "modern",
              "import torch; print(torch.cuda.is_available() and (torch.ones(4, device='cuda') * 2).sum().item() == 8)",
              f"{_SETUP} (PyTorch's CUDA 13 wheel needs driver 580.65.06 or newer)",
              process_per_device=True),     # DistributedDataParallel, launched by torchrun (scripts/papermill_rank.py)
    Framework("tensorflow", "TensorFlow", "modern",
              "import tensorflow as tf; gpu = bool(tf.config.list_physical_devices('GPU'))\n"
              "if gpu:\n    with tf.device('/GPU:0'): gpu = float(tf.reduce_sum(tf.ones(4) * 2)) == 8\nprint(gpu)",
              f"{_SETUP} (TensorFlow's then runs in the `tensorflow` environment, on CUDA 12)"),
    Framework("keras", "Keras 3", "modern", "", "", compilation=""),   # asks its backend's framework (KERAS_BACKENDS)
    Framework("jax", "JAX + Flax", "modern",
              "import jax, jax.numpy as jnp; gpus = [d for d in jax.devices() if d.platform == 'gpu']\n"
              "print(bool(gpus) and float((jax.device_put(jnp.ones(4), gpus[0]) * 2).sum()) == 8)",
              f"{_SETUP} (it adds jax[cuda13])", compilation="on"),
    Framework("mxnet", "MXNet", "legacy",
              "import mxnet as mx; print(mx.context.num_gpus() > 0 and (mx.nd.ones(4, ctx=mx.gpu(0)) * 2).sum().asscalar() == 8)",
              "MXNet 1.9.1, its last release, has GPU wheels only up to mxnet-cu117, built for compute capability "
              "up to 8.6 with CUDA 11.7; this project pins the CPU build in every lock set, so MXNet runs on the CPU",
              compilation="on"),
    Framework("chainer", "Chainer", "legacy",
              "import chainer; ok = chainer.backends.cuda.available\n"
              "if ok:\n    import cupy; ok = float((cupy.ones(4) * 2).sum()) == 8\nprint(ok)",
              f"{_SETUP} (it adds CuPy for CUDA 11.8)"),
)}
NAMES = tuple(FRAMEWORKS)

# Keras runs on a backend (its notebooks' `backend` parameter): backend -> the framework whose GPU probe decides,
# and what `compilation="auto"` means on it: Keras's own `jit_compile="auto"` (Keras 3.15.1,
# `Trainer._resolve_auto_jit_compile`): off on torch; on TensorFlow off where TensorFlow sees no device but CPUs (and
# under a tf.distribute strategy), XLA otherwise; XLA on JAX. `<backend>-gpu` is the value where a GPU is visible.
KERAS_BACKENDS = {"tensorflow": "tensorflow", "jax": "jax", "torch": "pytorch"}
KERAS_COMPILATION = {"tensorflow": "off", "tensorflow-gpu": "on", "jax": "on", "torch": "off"}
# A task where a framework's default differs from its own: PyTorch's ResNet-50 inference is compiled with Inductor's
# freezing (it roughly halves the eager time; compiling the training steps gained nothing on a CPU).
TASK_COMPILATION = {("pytorch", "resnet50_features"): "on"}


def get(name: str) -> Framework:
    if name not in FRAMEWORKS:
        raise ValueError(f"unknown framework {name!r}; choose from: {', '.join(NAMES)}")
    return FRAMEWORKS[name]


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
