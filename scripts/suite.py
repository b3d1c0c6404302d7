"""What the suite is made of: environments (Jupyter kernels), frameworks, tasks and variants.

The one place that says which kernel runs which notebook, which notebooks run more than once
(a papermill parameter per variant), and how to ask each framework whether it sees a GPU.
The tasks themselves are defined in `support/tasks.py`. Standard library only: `setup_envs.py`
imports it with whatever Python 3 the user has, before any environment exists.
"""
from __future__ import annotations

import json
import sys
from itertools import zip_longest
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from support import tasks  # noqa: E402  (standard library only)

NOTEBOOKS = ROOT / "notebooks"
VENVS = ROOT / ".venvs"
REQUIREMENTS = ROOT / "requirements"

# environment name -> what it is for. Each is a virtual environment in .venvs/<name>,
# pinned by requirements/<name>.txt and registered as the Jupyter kernel `dlr-<name>`.
ENVIRONMENTS = {
    "modern": "numpy 2.x: PyTorch, TensorFlow, Keras 3, JAX + Flax; also runs papermill and pytest",
    "legacy": "numpy 1.23.5: MXNet 1.9.1 and Chainer 7.8.1",
}

# framework -> environment whose kernel runs its notebooks, in the order tables show them.
FRAMEWORKS = {
    "pytorch": "modern",
    "tensorflow": "modern",
    "keras": "modern",
    "jax": "modern",
    "mxnet": "legacy",
    "chainer": "legacy",
}

# Frameworks whose data parallelism is one process per device, each running the whole notebook (PyTorch's
# DistributedDataParallel): with `devices` above 1 the runner starts the notebook once per device under torchrun,
# which tells each process its rank, as PyTorch launches any DDP program (scripts/papermill_rank.py).
PROCESS_PER_DEVICE = {"pytorch"}

TASKS = tasks.NAMES
PROFILES = tasks.PROFILES

# Notebooks that run more than once: (task or "*", framework or "*") -> (parameter, values).
# The runner passes each value as that papermill parameter and records it as the variant.
# A framework's own variants come first; a task's modes (support.tasks) last: labels read 'jax-ram'.
VARIANTS = {
    ("*", "keras"): ("backend", ("tensorflow", "jax", "torch")),
    ("cnn_cifar10", "mxnet"): ("api", ("gluon", "module")),       # Gluon and the symbolic Module API
    **{(name, "*"): ("mode", task.modes) for name, task in tasks.TASKS.items() if task.modes},
}

# Does a framework's installed build see a GPU? Python run in its kernel's environment, printing
# True or False; Keras asks its backend's framework. On a GPU machine `--profile auto` gives a
# notebook `full` only where its framework says True, and says how to get the GPU build otherwise.
GPU_PROBES = {
    "pytorch": "import torch; print(torch.cuda.is_available())",
    "tensorflow": "import tensorflow as tf; print(bool(tf.config.list_physical_devices('GPU')))",
    "jax": "import jax; print(any(d.platform == 'gpu' for d in jax.devices()))",
    "mxnet": "import mxnet as mx; print(mx.context.num_gpus() > 0)",
    "chainer": "import chainer; print(chainer.backends.cuda.available)",
}
KERAS_BACKENDS = {"tensorflow": "tensorflow", "jax": "jax", "torch": "pytorch"}   # backend -> GPU_PROBES key
GPU_BUILDS = {
    "pytorch": "the pinned torch wheel carries CUDA: check the NVIDIA driver (torch.cuda.is_available() is False)",
    "tensorflow": "requirements/modern.in pins tensorflow-cpu: swap it for tensorflow[and-cuda] of the same version "
                  "and run `python3 scripts/setup_envs.py --lock modern`",
    "jax": "requirements/modern.in pins CPU jax: add jax[cuda13] of the same version and run "
           "`python3 scripts/setup_envs.py --lock modern`",
    "mxnet": "requirements/legacy.in pins CPU mxnet: swap it for mxnet-cu112==1.9.1 and run "
             "`python3 scripts/setup_envs.py --lock legacy`",
    "chainer": "add the cupy wheel for your CUDA (e.g. cupy-cuda11x) to requirements/legacy.in and run "
               "`python3 scripts/setup_envs.py --lock legacy`",
}


def gpu_probe_key(framework: str, parameters: dict) -> str:
    """The GPU_PROBES entry that decides for one run: Keras asks its backend's framework."""
    return KERAS_BACKENDS[parameters["backend"]] if framework == "keras" else framework


def kernel_name(env: str) -> str:
    return f"dlr-{env}"


def venv_python(env: str) -> Path:
    return VENVS / env / "bin" / "python"


def notebook_path(task: str, framework: str) -> Path:
    return NOTEBOOKS / task / f"{framework}.ipynb"


def variants(task: str, framework: str) -> list[dict]:
    """Every papermill parameter set one notebook runs with ([{}] when it runs once)."""
    runs = [{}]
    for (t, f), (name, values) in VARIANTS.items():
        if t in ("*", task) and f in ("*", framework):
            runs = [dict(run, **{name: value}) for run in runs for value in values]
    return runs


def variant_label(run: dict) -> str:
    """'' for a notebook that runs once, else the values joined, e.g. 'jax' or 'jax-ram'."""
    return "-".join(str(v) for v in run.values())


# The variant matrix (run_all.py --precision, --compilation, --batch-size): papermill parameters every
# notebook declares (support.tasks.VARIANT_PARAMETERS). A run that leaves them at their defaults is the
# baseline; the others are labelled after the notebook's own variant, e.g. 'jax-ram-bf16-compiled'. A task whose
# notebooks train on several devices (tasks.Task.parallel) also takes `devices` (--devices), labelled e.g. 'ram-2dev'.
COMPILATION_LABELS = {"on": "compiled", "off": "eager"}


def matrix_label(matrix: dict) -> str:
    """'' for the baseline, else e.g. 'bf16', 'compiled', 'bf16-eager', '2dev' (2 devices), 'sweep'."""
    default = tasks.VARIANT_PARAMETERS
    parts = [matrix["precision"]] if matrix.get("precision", default["precision"]) != default["precision"] else []
    parts += [COMPILATION_LABELS[matrix["compilation"]]] if matrix.get(
        "compilation", default["compilation"]) != default["compilation"] else []
    parts += [f"{matrix['devices']}dev"] if matrix.get("devices", tasks.DEVICES_DEFAULT) != tasks.DEVICES_DEFAULT else []
    return "-".join(parts + (["sweep"] if matrix.get("batch_sizes") else []))


def compilation_key(framework: str, parameters: dict) -> str:
    """The support.precision.DEFAULT_COMPILATION entry of one run: Keras's default is its backend's."""
    return f"keras-{parameters['backend']}" if framework == "keras" else framework


def section_headings(path: Path) -> list[str]:
    """The notebook's `## ` heading lines (its sections), in order, read with the standard library."""
    cells = json.loads(Path(path).read_text())["cells"]
    lines = ("".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in cells
             if c["cell_type"] == "markdown")
    return [line.rstrip() for text in lines for line in text.splitlines() if line.startswith("## ")]


def shown(path: Path) -> str:
    """A path as the messages name it: relative to the repository where it lies inside it."""
    path = Path(path).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def check_headings(task: str, notebooks: Path = NOTEBOOKS) -> list[str]:
    """PyTorch's section headings for a task, after checking that every notebook of the task has them,
    in the same order; else a ValueError that names the notebook and the first heading that differs."""
    reference_path = notebooks / task / "pytorch.ipynb"
    rule = "every notebook of a task needs pytorch's headings in pytorch's order"
    if not reference_path.exists():
        raise ValueError(f"{shown(reference_path)} is missing; {rule}")
    reference = section_headings(reference_path)
    for path in sorted((notebooks / task).glob("*.ipynb")):
        found = section_headings(path)
        for i, (mine, theirs) in enumerate(zip_longest(found, reference), start=1):
            if mine == theirs:
                continue
            where = f"{shown(path)}: " + (f"heading {mine!r}" if mine else "no heading") + f" (position {i})"
            has = f"has {theirs!r}" if theirs else "has no more headings"
            raise ValueError(f"{where} where {shown(reference_path)} {has}; {rule}")
    return reference
