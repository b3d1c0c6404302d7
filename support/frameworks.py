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
    gpu_probe: str              # Python printing True or False: does the installed build see a GPU?
    gpu_build: str              # what to change where the probe says False on a GPU machine
    compilation: str = "off"    # what `compilation="auto"` means (support.precision): its own default
    process_per_device: bool = False   # data parallelism as one process per device (the runner starts each one)


FRAMEWORKS = {f.name: f for f in (
    Framework("pytorch", "PyTorch", "modern", "import torch; print(torch.cuda.is_available())",
              "the pinned torch wheel carries CUDA: check the NVIDIA driver (torch.cuda.is_available() is False)",
              process_per_device=True),     # DistributedDataParallel, launched by torchrun (scripts/papermill_rank.py)
    Framework("tensorflow", "TensorFlow", "modern",
              "import tensorflow as tf; print(bool(tf.config.list_physical_devices('GPU')))",
              "requirements/modern.in pins tensorflow-cpu: swap it for tensorflow[and-cuda] of the same version "
              "and run `python3 scripts/setup_envs.py --lock modern`"),
    Framework("keras", "Keras 3", "modern", "", "", compilation=""),   # asks its backend's framework (KERAS_BACKENDS)
    Framework("jax", "JAX + Flax", "modern", "import jax; print(any(d.platform == 'gpu' for d in jax.devices()))",
              "requirements/modern.in pins CPU jax: add jax[cuda13] of the same version and run "
              "`python3 scripts/setup_envs.py --lock modern`", compilation="on"),
    Framework("mxnet", "MXNet", "legacy", "import mxnet as mx; print(mx.context.num_gpus() > 0)",
              "requirements/legacy.in pins CPU mxnet: swap it for mxnet-cu112==1.9.1 and run "
              "`python3 scripts/setup_envs.py --lock legacy`", compilation="on"),
    Framework("chainer", "Chainer", "legacy", "import chainer; print(chainer.backends.cuda.available)",
              "add the cupy wheel for your CUDA (e.g. cupy-cuda11x) to requirements/legacy.in and run "
              "`python3 scripts/setup_envs.py --lock legacy`"),
)}
NAMES = tuple(FRAMEWORKS)

# Keras runs on a backend (its notebooks' `backend` parameter): backend -> the framework whose GPU probe decides,
# and what `compilation="auto"` means on it (jit_compile="auto": XLA only on JAX).
KERAS_BACKENDS = {"tensorflow": "tensorflow", "jax": "jax", "torch": "pytorch"}
KERAS_COMPILATION = {"tensorflow": "off", "jax": "on", "torch": "off"}
# A task where a framework's default differs from its own: PyTorch's ResNet-50 inference is compiled with Inductor's
# freezing (it roughly halves the eager time; compiling the training steps gained nothing on a CPU).
TASK_COMPILATION = {("pytorch", "resnet50_features"): "on"}


def get(name: str) -> Framework:
    if name not in FRAMEWORKS:
        raise ValueError(f"unknown framework {name!r}; choose from: {', '.join(NAMES)}")
    return FRAMEWORKS[name]


def default_compilation() -> dict:
    """support.precision.DEFAULT_COMPILATION: framework (Keras: keras-<backend>) or framework/task -> 'on'/'off'."""
    table = {name: f.compilation for name, f in FRAMEWORKS.items() if f.compilation}
    table.update({f"keras-{backend}": value for backend, value in KERAS_COMPILATION.items()})
    table.update({f"{name}/{task}": value for (name, task), value in TASK_COMPILATION.items()})
    return table
