"""The numbers every framework's notebook of a task shares, in three profiles.

- `full`: the seed's settings (ilkarman/DeepLearningFrameworks), for a GPU.
- `cpu`:  scaled down so the whole suite on a 2-core CPU finishes within about 45 minutes, while
          each timing is still a steady-state measurement (warm-up excluded, at least 7 repeats).

Training tasks take two measurements (support.timing): the epochs end to end (`epochs`, the first
`warmup_epochs` apart) and the steady-state steps on one batch held in memory (`warmup_steps`, then
`step_repeats` repeats of `steps_per_repeat` steps).
- `tiny`: seconds per notebook, for the smoke tests: every section runs, with the fewest steps that
          exercise it (two epochs, the first a warm-up; the steady state's steps on one batch, 29 for
          the CNN, 15 for the GRU and 8 for DenseNet-121, show that the model learns: support.timing.learned).
          It measures nothing and shows no accuracy.

A batch-size sweep (the `batch_sizes` parameter) runs the sizes asked for, then searches for the largest
(`max`) within `sweep_budget_s` seconds per notebook.

`load(task, profile)` resolves "auto" to `full` where a GPU is seen and `cpu` otherwise, and
prints the choice. Sizes of None mean "the whole dataset".

An override for a short run of a profile: the environment variable `DLROSETTA_PARAMS`, e.g.
`DLROSETTA_PARAMS="epochs=2,n_train=8192"`, replaces those numbers in whatever profile `load` returns, so
the loaded `settings` (and each record's `params`) show them, and `load` prints them marked. scripts/device_check.py
uses it to fit the `full` profile into a GPU machine's few minutes; the runner never sets it. A name the
task's parameters lack, or a value of the wrong kind, is a ValueError of one line naming it and the choices.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

from support.tasks import NAMES, PROFILES


@dataclass(frozen=True)
class CNNParams:
    """VGG-style CNN on CIFAR-10, trained with SGD + momentum."""

    profile: str
    epochs: int = 10
    batch_size: int = 64
    lr: float = 0.01
    momentum: float = 0.9
    n_classes: int = 10
    n_train: int | None = None
    n_test: int | None = None
    warmup_epochs: int = 1
    warmup_steps: int = 20  # steady-state steps: untimed first (DLPerf skips 20) ...
    step_repeats: int = 7  # ... then this many repeats ...
    steps_per_repeat: int = 20  # ... of this many steps
    sweep_budget_s: float = 600  # a batch-size sweep's time (support.timing.sweep; only when one is asked for)
    profile_steps: int = 5  # steady-state steps under the framework's profiler (support.profiles)
    seed: int = 42


@dataclass(frozen=True)
class GRUParams:
    """GRU sentiment classifier on IMDB, trained with Adam."""

    profile: str
    epochs: int = 3
    batch_size: int = 64
    lr: float = 1e-3
    embedding_dim: int = 125
    hidden_dim: int = 100
    n_classes: int = 2
    max_len: int = 150
    vocab_size: int = 30000
    n_train: int | None = None
    n_test: int | None = None
    warmup_epochs: int = 1
    warmup_steps: int = 20
    step_repeats: int = 7
    steps_per_repeat: int = 20
    sweep_budget_s: float = 600  # a batch-size sweep's time (support.timing.sweep; only when one is asked for)
    profile_steps: int = 5  # steady-state steps under the framework's profiler (support.profiles)
    seed: int = 42


@dataclass(frozen=True)
class DenseNetParams:
    """DenseNet-121 on NIH ChestX-ray14 (multi-label, sigmoid outputs), trained with Adam."""

    profile: str
    epochs: int = 5
    batch_size: int = 32  # per device
    lr: float = 1e-4
    n_labels: int = 14
    image_size: int = 224  # random crop (train) / centre crop (test) ...
    resize: int = 264  # ... from images resized to this
    n_train: int | None = None
    n_test: int | None = None
    synthetic_px: int = 1024  # side of the PNGs written when real data is absent
    ram_n_train: int = 2048  # images held in RAM in the "ram" mode (synthetic, no input pipeline)
    ram_n_test: int = 512
    bn_momentum: float = 0.9  # running stats: new = momentum * old + (1 - momentum) * batch (PyTorch: 1 - this)
    warmup_epochs: int = 1
    warmup_steps: int = 10
    step_repeats: int = 7
    steps_per_repeat: int = 10
    sweep_budget_s: float = 600  # a batch-size sweep's time (support.timing.sweep; only when one is asked for)
    profile_steps: int = 5  # steady-state steps under the framework's profiler (support.profiles)
    seed: int = 42


@dataclass(frozen=True)
class ResNetParams:
    """ResNet-50 forward pass to the 2048-d pooled features, in inference mode."""

    profile: str
    batch_size: int = 32
    n_batches: int = 40  # timed batches (at least 7)
    warmup_batches: int = 3  # untimed batches first (the first is the first step)
    image_size: int = 224
    n_features: int = 2048
    sweep_budget_s: float = 600  # a batch-size sweep's time (support.timing.sweep; only when one is asked for)
    seed: int = 42


@dataclass(frozen=True)
class OperatorParams:
    """Single operations on a ladder of sizes (support/operators.py), timed by support.timing.calibrated."""

    profile: str
    sizes: int = 0  # rungs of each operation's ladder, smallest first (0: all)
    budget_s: float = 0.5  # seconds of timed repeats per measurement: the calibrated count of calls comes from it
    repeats: int = 7  # timed repeats per measurement
    warmup_calls: int = 3  # untimed calls first (compilation, kernel selection, caches)
    every_variant: bool = True  # every operation in every mode and dtype (False: support.operators.VARIANT_OPS only)
    call_ceiling_s: float = 0.0  # a call slower than this ends its ladder: the larger rungs are `skipped` (0: none)
    seed: int = 42


_PROFILES = {
    "cnn_cifar10": {
        "full": CNNParams("full"),
        "cpu": CNNParams(
            "cpu", sweep_budget_s=60, epochs=4, n_train=2048, n_test=1000, warmup_steps=3, steps_per_repeat=4
        ),
        "tiny": CNNParams(
            "tiny",
            sweep_budget_s=4,
            epochs=2,
            batch_size=32,
            n_train=64,
            n_test=32,
            warmup_steps=1,
            steps_per_repeat=4,
            profile_steps=1,
        ),  # PyTorch's initialisation: 15 steps lowered the loss 4% to 6% only
    },
    "gru_imdb": {
        "full": GRUParams("full"),
        "cpu": GRUParams(
            "cpu", sweep_budget_s=60, epochs=4, n_train=2560, n_test=2000, warmup_steps=3, steps_per_repeat=5
        ),
        "tiny": GRUParams(
            "tiny",
            sweep_budget_s=4,
            epochs=2,
            batch_size=32,
            n_train=64,
            n_test=32,
            warmup_steps=1,
            steps_per_repeat=2,
            profile_steps=1,
        ),
    },
    "densenet_chestxray": {
        "full": DenseNetParams("full"),
        "cpu": DenseNetParams(
            "cpu",
            sweep_budget_s=60,
            epochs=3,
            batch_size=8,
            n_train=32,
            n_test=32,
            ram_n_train=32,
            ram_n_test=32,
            warmup_steps=2,
            steps_per_repeat=1,
            profile_steps=3,
        ),
        "tiny": DenseNetParams(
            "tiny",
            sweep_budget_s=4,
            epochs=2,
            batch_size=4,
            image_size=64,
            resize=72,
            n_train=16,
            n_test=16,
            synthetic_px=128,
            ram_n_train=16,
            ram_n_test=16,
            warmup_steps=1,
            steps_per_repeat=1,
            profile_steps=1,
        ),
    },
    "resnet50_features": {
        "full": ResNetParams("full"),
        "cpu": ResNetParams("cpu", sweep_budget_s=60, batch_size=16, n_batches=7, warmup_batches=2),
        "tiny": ResNetParams("tiny", sweep_budget_s=4, batch_size=4, n_batches=7, warmup_batches=1, image_size=64),
    },
    "operators": {
        "full": OperatorParams("full"),
        "cpu": OperatorParams("cpu", budget_s=0.15, warmup_calls=2, call_ceiling_s=1.0),
        "tiny": OperatorParams("tiny", sizes=1, budget_s=0.0, warmup_calls=1, every_variant=False),
    },
}

TASKS = NAMES  # the registry's order; a test checks that _PROFILES covers every task and profile


def resolve_profile(profile: str, gpu: bool) -> str:
    if profile == "auto":
        return "full" if gpu else "cpu"
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; choose from: auto, {', '.join(PROFILES)}")
    return profile


def load(task: str, profile: str = "auto", gpu: bool = False):
    """The parameters of `task` under `profile` ("auto": full with a GPU, else cpu)."""
    if task not in _PROFILES:
        raise ValueError(f"unknown task {task!r}; choose from: {', '.join(TASKS)}")
    chosen = resolve_profile(profile, gpu)
    how = f" (auto: {'a GPU is' if gpu else 'no GPU'} visible)" if profile == "auto" else ""
    params = _PROFILES[task][chosen]
    changes = overrides(task, os.environ.get(OVERRIDE_VARIABLE, ""))
    params = dataclasses.replace(params, **changes)
    print(f"profile: {chosen}{how}")
    if changes:
        print(f"  ({', '.join(changes)} from {OVERRIDE_VARIABLE}, not the profile's)")
    for field in dataclasses.fields(params)[1:]:
        mark = f"   ({OVERRIDE_VARIABLE})" if field.name in changes else ""
        print(f"  {field.name} = {getattr(params, field.name)}{mark}")
    return params


OVERRIDE_VARIABLE = "DLROSETTA_PARAMS"


def _convert(name: str, kind: str, text: str):
    """`text` as the field's type (an annotation string: 'int', 'float', 'int | None', 'str')."""
    if "None" in kind and text.strip().lower() == "none":
        return None
    if kind.startswith("bool"):
        if text.strip().lower() not in ("true", "false"):
            raise ValueError(f"{OVERRIDE_VARIABLE}: {name}={text!r} is not true or false")
        return text.strip().lower() == "true"
    try:
        if kind.startswith("int"):
            return int(text)
        if kind.startswith("float"):
            value = float(text)
            if value != value or value in (float("inf"), float("-inf")):
                raise ValueError
            return value
    except ValueError:
        wanted = {"int": "a whole number", "float": "a number"}[kind.split()[0]]
        raise ValueError(
            f"{OVERRIDE_VARIABLE}: {name}={text!r} is not {wanted}{' (or none)' if 'None' in kind else ''}"
        ) from None
    return text


def overrides(task: str, text: str) -> dict:
    """The replacements `text` ("epochs=2,n_train=8192": the value of DLROSETTA_PARAMS) asks of `task`'s
    parameters, each converted to its field's type ('none' for a size of None: the whole dataset)."""
    fields = {f.name: f.type for f in dataclasses.fields(_PROFILES[task]["full"]) if f.name != "profile"}
    changes = {}
    for item in (i.strip() for i in text.split(",") if i.strip()):
        name, sep, value = (part.strip() for part in item.partition("="))
        if not sep or not name:
            raise ValueError(f"{OVERRIDE_VARIABLE}: {item!r} is not NAME=VALUE (e.g. epochs=2,n_train=8192)")
        if name not in fields:
            raise ValueError(f"{OVERRIDE_VARIABLE}: {task} has no parameter {name!r}; choose from: {', '.join(fields)}")
        changes[name] = _convert(name, str(fields[name]), value)
    return changes


def cpu_devices(value) -> int:
    """The CPU devices a run of `devices=value` asks for: the number, or "all": one per core.

    Data parallelism without a GPU runs on CPU devices, which every framework can make from the one host
    (JAX's `jax_num_cpu_devices`, TensorFlow's logical devices, one PyTorch process per device, MXNet's
    `mx.cpu(i)` contexts, Chainer's `@numpy` devices). Several of them must be made before the framework
    starts, when it is not yet known whether a GPU is there; they all share the machine's cores, so on a CPU
    they prove the data-parallel code correct, not faster.
    """
    if value == "all":
        return os.cpu_count() or 1
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).isdigit() or int(value) < 1:
        raise ValueError(f'devices={value!r}: give a whole number of at least 1, or "all"')
    return int(value)


def devices(value, gpus: int) -> int:
    """How many devices a run trains on, data-parallel, where its framework sees `gpus` GPUs: with GPUs at
    most that many ("all": every one); without, CPU devices (cpu_devices). The batch size is per device:
    the global batch is `batch_size` times this."""
    wanted = cpu_devices(value)
    if gpus and value == "all":
        return gpus
    if gpus and wanted > gpus:
        raise ValueError(
            f'devices={value!r}: the framework sees {gpus} GPU{"s" if gpus > 1 else ""}; give at most {gpus}, or "all"'
        )
    return wanted


def as_dict(params) -> dict:
    return dataclasses.asdict(params)


def seed(task: str) -> int:
    """The seed of a task's runs (every profile's; the runner's --seeds runs the baselines again on the next ones)."""
    seeds = {profile.seed for profile in _PROFILES[task].values()}
    if len(seeds) != 1:
        raise ValueError(f"{task}'s profiles have different seeds {sorted(seeds)}: give them one")
    return seeds.pop()
