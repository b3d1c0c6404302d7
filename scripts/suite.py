"""What the suite is made of: environments (Jupyter kernels), frameworks, tasks and variants.

The one place that says which kernel runs which notebook, which notebooks run more than once
(a papermill parameter per variant), and how to ask each framework whether it sees a GPU.
The tasks themselves are defined in `support/tasks.py`. Standard library only: `setup_envs.py`
imports it with whatever Python 3 the user has, before any environment exists.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path

from support import frameworks, tasks  # standard library only

ROOT = Path(__file__).resolve().parent.parent

NOTEBOOKS = ROOT / "notebooks"
VENVS = ROOT / ".venvs"
REQUIREMENTS = ROOT / "requirements"

# environment name -> what it is for. Each is a virtual environment in .venvs/<name>,
# pinned by requirements/<name>.txt and registered as the Jupyter kernel `dlr-<name>`.
ENVIRONMENTS = {
    "modern": "numpy 2.x: PyTorch, TensorFlow, Keras 3, JAX + Flax; also runs papermill and pytest",
    "legacy": "numpy 1.23.5: MXNet 1.9.1 and Chainer 7.8.1",
    # apart from modern because paddle2onnx needs onnx 1.17 (modern has 1.23); CPU builds on every machine: neither
    # framework has a CUDA 12/13 build on PyPI (support/frameworks.py)
    "paddle-mindspore": "numpy 2.x, onnx 1.17: PaddlePaddle 3.3.1 and MindSpore 2.10.0 (CPU builds)",
}

# An environment built only on a machine with an NVIDIA GPU: TensorFlow's CUDA build brings CUDA 12 libraries, which
# cannot share an environment with PyTorch's and JAX's CUDA 13 ones (both cuDNN wheels install
# nvidia/cudnn/lib/libcudnn*.so.9, both NCCL wheels libnccl.so.2: the last installed would win silently).
GPU_ENVIRONMENTS = {
    "tensorflow": "TensorFlow 2.21 on CUDA 12 (GPU machines only): TensorFlow, and Keras on TensorFlow",
}


@dataclass(frozen=True)
class LockSet:
    """One set of exact pins, requirements/<name>.txt, resolved from <name>.in by `setup_envs.py --lock <name>`."""

    name: str
    environment: str  # the virtual environment it builds (.venvs/<environment>)
    cuda: str | None = None  # the CUDA major version of its GPU builds; None: CPU builds only
    driver: str | None = None  # the oldest NVIDIA driver (Linux) that runs that CUDA, as nvidia-smi writes it
    gpu_lines: tuple = ()  # the GPU probe keys (GPU_PROBES) it puts on the GPU
    why: str = ""  # what it is, for the lock file's header and the set-up's lines


LOCK_SETS = {
    s.name: s
    for s in (
        LockSet("modern", "modern", why="the CPU builds, PyTorch's CUDA 13 wheel aside"),
        LockSet("legacy", "legacy", why="CPU builds: MXNet 1.9.1 and Chainer 7.8.1 on numpy"),
        LockSet(
            "paddle-mindspore",
            "paddle-mindspore",
            why="CPU builds, on GPU machines too: PaddlePaddle 3.3.1 and MindSpore 2.10.0",
        ),
        LockSet(
            "modern-cuda",
            "modern",
            "13",
            "580.65.06",
            ("pytorch", "jax"),
            why="modern's pins plus jax[cuda13]: PyTorch, JAX, and Keras on either, on CUDA 13",
        ),
        LockSet(
            "tensorflow-cuda",
            "tensorflow",
            "12",
            "525.60.13",
            ("tensorflow",),
            why="tensorflow[and-cuda] with modern's pins where they overlap: TensorFlow, and Keras on it, on CUDA 12",
        ),
        LockSet(
            "legacy-cuda",
            "legacy",
            "11",
            "450.80.02",
            ("chainer",),
            why="legacy's pins plus CuPy for CUDA 11 and the CUDA 11.8 libraries: Chainer on the GPU; MXNet stays "
            "the CPU build (support/frameworks.py says why)",
        ),
    )
}
# The lock sets a machine builds: without an NVIDIA GPU (or with DLROSETTA_GPU=cpu) the CPU sets, with one the CUDA
# sets (scripts/setup_envs.py reads nvidia-smi and checks the driver against each set's).
MACHINE_LOCK_SETS = {
    "cpu": ("modern", "legacy", "paddle-mindspore"),
    "cuda": ("modern-cuda", "tensorflow-cuda", "legacy-cuda", "paddle-mindspore"),
}
CHOSEN = "lock-sets.json"  # .venvs/<this>: what setup_envs.py chose on this machine, for the runner


def by_environment(sets) -> dict:
    """{environment: lock set name} for the lock sets named in `sets`."""
    return {LOCK_SETS[name].environment: name for name in sets}


def chosen_lock_sets() -> dict:
    """{environment: lock set name} as setup_envs.py built them on this machine (.venvs/lock-sets.json); the CPU
    sets where it has not written one (a checkout set up before lock sets, or built by hand)."""
    try:
        chosen = json.loads((VENVS / CHOSEN).read_text(encoding="utf-8"))["sets"]
        if isinstance(chosen, dict) and all(name in LOCK_SETS for name in chosen.values()):
            return dict(chosen)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return by_environment(MACHINE_LOCK_SETS["cpu"])


def run_environment(framework: str, parameters: dict, chosen: dict | None = None) -> str:
    """The environment whose kernel runs one notebook run: its framework's, except that on a machine where the
    TensorFlow GPU environment was built, TensorFlow and Keras on TensorFlow run there."""
    chosen = chosen_lock_sets() if chosen is None else chosen
    if gpu_probe_key(framework, parameters) == "tensorflow" and "tensorflow" in chosen:
        return "tensorflow"
    return FRAMEWORKS[framework]


def lock_file(environment: str, chosen: dict | None = None) -> Path:
    """requirements/<lock set>.txt of the lock set the environment was built from."""
    chosen = chosen_lock_sets() if chosen is None else chosen
    return REQUIREMENTS / f"{chosen.get(environment, environment)}.txt"


def cuda_major(pin: str) -> str | None:
    """The CUDA major version a pinned package (`name==version`) is built for, or None for one without CUDA:
    'nvidia-cudnn-cu12', 'jax-cuda13-plugin', 'cupy-cuda11x' by name; NVIDIA's unsuffixed CUDA 13 wheels
    ('nvidia-cublas==13.1.1.3', 'cuda-toolkit==13.0.3.0') by their version, for the packages whose version is
    the CUDA version. Others say nothing (None): nvidia-cufft 12.0 ships in CUDA 13, and its version cannot tell."""
    import re

    name, _, version = pin.partition("==")
    name = name.strip().lower().replace("_", "-")
    for pattern in (r"-cu(\d+)$", r"^jax-cuda(\d+)-", r"^cupy-cuda(\d+)x$"):
        match = re.search(pattern, name)
        if match:
            return match.group(1)[:2]
    if name in (
        "cuda-toolkit",
        "cuda-bindings",
        "nvidia-cuda-runtime",
        "nvidia-cublas",
        "nvidia-cuda-nvrtc",
        "nvidia-nvjitlink",
        "nvidia-cuda-cupti",
        "nvidia-nvtx",
        "nvidia-cuda-nvcc",
    ):
        return version.split(".")[0]
    return None


# framework -> environment whose kernel runs its notebooks, in the order tables show them (support/frameworks.py).
FRAMEWORKS = {name: f.environment for name, f in frameworks.FRAMEWORKS.items()}

# Frameworks whose data parallelism is one process per device, each running the whole notebook (PyTorch's
# DistributedDataParallel, PaddlePaddle's DataParallel): with `devices` above 1 the runner starts the notebook once per
# device under the framework's own launcher (its registry entry's `launcher`: torchrun, paddle.distributed.launch),
# which tells each process its rank, as the framework launches any such program (scripts/papermill_rank.py).
PROCESS_PER_DEVICE = {name for name, f in frameworks.FRAMEWORKS.items() if f.launcher}

TASKS = tasks.NAMES
PROFILES = tasks.PROFILES

# Notebooks that run more than once: (task or "*", framework or "*") -> (parameter, values).
# The runner passes each value as that papermill parameter and records it as the variant.
# A framework's own variants come first; a task's modes (support.tasks) last: labels read 'jax-ram'.
VARIANTS = {
    ("*", "keras"): ("backend", ("tensorflow", "jax", "torch")),
    ("cnn_cifar10", "mxnet"): ("api", ("gluon", "module")),  # Gluon and the symbolic Module API
    **{(name, "*"): ("mode", task.modes) for name, task in tasks.TASKS.items() if task.modes},
}

# Variants that are notebooks of their own rather than a parameter: (task, framework, parameter, value) -> the
# notebook's file stem. The MXNet CNN's symbolic Module API reads as a different program from Gluon's, so it is
# mxnet_module.ipynb, not branches in mxnet.ipynb: the runner runs that file for the variant api=module (without
# passing `api`) and records it as framework mxnet, variant module.
NOTEBOOK_VARIANTS = {("cnn_cifar10", "mxnet", "api", "module"): "mxnet_module"}
NOTEBOOK_LABELS = {"mxnet_module": "MXNet Module"}


# Does a framework's installed build see a GPU? Python run in its kernel's environment, printing
# True or False; Keras asks its backend's framework. On a GPU machine `--profile auto` gives a
# notebook `full` only where its framework says True, and says how to get the GPU build otherwise.
GPU_PROBES = {name: f.gpu_probe for name, f in frameworks.FRAMEWORKS.items() if f.gpu_probe}
KERAS_BACKENDS = frameworks.KERAS_BACKENDS  # backend -> GPU_PROBES key
GPU_BUILDS = {name: f.gpu_build for name, f in frameworks.FRAMEWORKS.items() if f.gpu_build}
LABELS = {name: f.label for name, f in frameworks.FRAMEWORKS.items()}


def gpu_probe_key(framework: str, parameters: dict) -> str:
    """The GPU_PROBES entry that decides for one run: Keras asks its backend's framework, an API style (TensorFlow's
    1.x graph style) the framework it runs on."""
    return KERAS_BACKENDS[parameters["backend"]] if framework == "keras" else frameworks.get(framework).gpu_probe_key


def kernel_name(env: str) -> str:
    return f"dlr-{env}"


def venv_python(env: str) -> Path:
    return VENVS / env / "bin" / "python"


def measure_module(framework: str) -> Path:
    """The framework's measurement module (support/measure/<framework>.py), which its notebooks import."""
    return ROOT / "support" / "measure" / f"{framework}.py"


def notebook_stem(task: str, framework: str, run: dict | None = None) -> str:
    """The file stem of the notebook that runs `framework`'s variant `run` of `task` (NOTEBOOK_VARIANTS)."""
    for (t, f, name, value), stem in NOTEBOOK_VARIANTS.items():
        if (t, f) == (task, framework) and (run or {}).get(name) == value:
            return stem
    return framework


def notebook_path(task: str, framework: str, run: dict | None = None, notebooks: Path = NOTEBOOKS) -> Path:
    return notebooks / task / f"{notebook_stem(task, framework, run)}.ipynb"


def notebook_framework(stem: str) -> str:
    """The framework a notebook's file stem belongs to ('mxnet_module' -> 'mxnet')."""
    return next((f for (_, f, _, _), s in NOTEBOOK_VARIANTS.items() if s == stem), stem)


def stems(task: str, notebooks: Path = NOTEBOOKS) -> list[str]:
    """The task's notebooks that exist, as file stems, in table order (a framework's own notebook first)."""
    out = []
    for framework in FRAMEWORKS:
        for run in variants(task, framework):
            stem = notebook_stem(task, framework, run)
            if stem not in out and (notebooks / task / f"{stem}.ipynb").exists():
                out.append(stem)
    return out


def stem_variants(task: str, stem: str) -> list[dict]:
    """The variants (papermill parameter sets) that the notebook `stem` of `task` runs."""
    framework = notebook_framework(stem)
    return [run for run in variants(task, framework) if notebook_stem(task, framework, run) == stem]


def label(stem: str) -> str:
    """How tables and the site name a framework or a notebook of its own ('MXNet Module')."""
    return NOTEBOOK_LABELS.get(stem) or LABELS.get(stem, stem)


def variants(task: str, framework: str) -> list[dict]:
    """Every papermill parameter set one notebook runs with ([{}] when it runs once)."""
    runs = [{}]
    for (t, f), (name, values) in VARIANTS.items():
        if t in ("*", task) and f in ("*", framework):
            runs = [dict(run, **{name: value}) for run in runs for value in values]
    return runs


def comma_list(text: str) -> list[str]:
    """An argparse `type=` for names given comma-separated (and, with action="extend", repeated): 'a,b,,c' ->
    ['a', 'b', 'c']."""
    return [item.strip() for item in text.split(",") if item.strip()]


# A run's labels ('jax-ram-bf16-compiled', '2dev', 'seed43', 'sweep') are made from its identity's fields:
# scripts/results.py, Identity.variant.


def compilation_key(framework: str, parameters: dict, gpu: bool = False, devices: int = 1) -> str:
    """The support.precision.DEFAULT_COMPILATION entry of one run: Keras's default is its backend's, and on
    TensorFlow it differs on one GPU (support.frameworks.keras_compilation_key)."""
    if framework != "keras":
        return framework
    return frameworks.keras_compilation_key(parameters["backend"], gpu, devices)


# A training notebook's two parts: the learner's path, which reads as the framework's own tutorial, then one
# heading for the measurement (support/measure/), whose steps are `### ` subsections.
LEARNER_PATH = (
    "## Parameters",
    "## Imports and versions",
    "## Data",
    "## Model",
    "## Train",
    "## Evaluate",
    "## Save and load",
    "## Export to ONNX",
)
MEASUREMENT = "## Measurement"
# ResNet-50 trains nothing: its learner's path extracts features, then exports the model.
LEARNER_PATHS = {
    "resnet50_features": (
        "## Parameters",
        "## Imports and versions",
        "## Data",
        "## Model",
        "## Extract features",
        "## Export to ONNX",
    ),
    # The operator benchmarks are a lesson in timing: the operations built, one timed by hand, then compiled.
    "operators": (
        "## Parameters",
        "## Imports and versions",
        "## The operations",
        "## Timing one operation",
        "## Compiling an operation",
    ),
}


def learner_path(task: str) -> tuple:
    """The `## ` headings of a task's learner's path, in order (the measurement heading follows them)."""
    return LEARNER_PATHS.get(task, LEARNER_PATH)


def section_headings(path: Path, subsections: bool = False) -> list[str]:
    """The notebook's `## ` heading lines (its sections), in order, read with the standard library; with
    `subsections`, its `### ` lines too (the measurement part's steps)."""
    cells = json.loads(Path(path).read_text())["cells"]
    lines = (
        "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
        for c in cells
        if c["cell_type"] == "markdown"
    )
    levels = ("## ", "### ") if subsections else ("## ",)
    return [line.rstrip() for text in lines for line in text.splitlines() if line.startswith(levels)]


def shown(path: Path) -> str:
    """A path as the messages name it: relative to the repository where it lies inside it."""
    path = Path(path).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def check_headings(task: str, notebooks: Path = NOTEBOOKS) -> list[str]:
    """PyTorch's section headings (`## `) for a task, after checking that every notebook of the task has them and
    its subsections (`### `), in the same order; else a ValueError naming the notebook and the first that differs."""
    reference_path = notebooks / task / "pytorch.ipynb"
    rule = "every notebook of a task needs pytorch's headings in pytorch's order"
    if not reference_path.exists():
        raise ValueError(f"{shown(reference_path)} is missing; {rule}")
    reference = section_headings(reference_path, subsections=True)
    for path in sorted((notebooks / task).glob("*.ipynb")):
        found = section_headings(path, subsections=True)
        for i, (mine, theirs) in enumerate(zip_longest(found, reference), start=1):
            if mine == theirs:
                continue
            where = f"{shown(path)}: " + (f"heading {mine!r}" if mine else "no heading") + f" (position {i})"
            has = f"has {theirs!r}" if theirs else "has no more headings"
            raise ValueError(f"{where} where {shown(reference_path)} {has}; {rule}")
    return [heading for heading in reference if heading.startswith("## ")]


def digest(*paths: Path) -> str:
    """sha256 over the files' contents (a missing file counts as absent), 16 hex digits: what a record was made from."""
    h = hashlib.sha256()
    for path in paths:
        if path.is_file():
            h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def support_files(root: Path = ROOT) -> list[Path]:
    """Every Python file under support/, its subpackages (support/measure/) included: a record's `support` input."""
    return sorted((root / "support").rglob("*.py"))


def cell_source(cell: dict) -> str:
    """A notebook cell's source as one string (nbformat stores a string or a list of lines)."""
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def declared_parameters(notebook: dict | Path) -> list[str]:
    """The names the cell tagged `parameters` assigns, in order, as papermill reads them (by `ast`, so that the
    device check needs no papermill)."""
    if isinstance(notebook, Path):
        notebook = json.loads(notebook.read_text(encoding="utf-8"))
    import ast

    for cell in notebook["cells"]:
        if cell.get("cell_type") == "code" and "parameters" in cell.get("metadata", {}).get("tags", []):
            names = []
            for node in ast.parse(cell_source(cell)).body:
                targets = (
                    node.targets
                    if isinstance(node, ast.Assign)
                    else [node.target]
                    if isinstance(node, (ast.AnnAssign, ast.AugAssign))
                    else []
                )
                names += [t.id for t in targets if isinstance(t, ast.Name) and t.id not in names]
            return names
    return []


def notebook_error(executed: Path, log: Path, other_ranks=()) -> str:
    """The exception an executed notebook stopped on ('ValueError: ... (cell 7)'), else the log's last words.
    `other_ranks`: (rank, executed notebook) of the other processes of a run with one per device, read after
    rank 0's (scripts/papermill_rank.py names them)."""
    for rank, path in [(0, executed), *other_ranks]:
        try:
            for i, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
                for out in cell.get("outputs", []):
                    if out.get("output_type") == "error":
                        where = f"cell {i}{f', rank {rank}' if rank else ''}"
                        return f"{out['ename']}: {out['evalue']} ({where})"[:500]
        except (OSError, ValueError, KeyError):
            pass
    lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()] if log.exists() else []
    errors = [ln for ln in lines if "Error" in ln or "error" in ln or "died" in ln]
    return (errors or lines or ["the notebook stopped without output"])[-1][:500]
