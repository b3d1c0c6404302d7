"""The four tasks: the one place that says what each task is, measures and passes to its notebooks.

Standard library only: `scripts/setup_envs.py` reads it (through `scripts/suite.py`) with whatever
Python 3 the user has, before numpy exists. Every other module and test reads tasks from here:
support.params (profiles, one per task), support.records (the metric a record must carry),
support.parity (which tasks have a parity step), the runner (what to pass to a notebook), the
report (titles, columns, the accuracy band) and the tests. Adding a task is an entry here, its
parameters in support/params.py, its loader in support/data.py, and notebooks/<name>/.
"""

from __future__ import annotations

from dataclasses import dataclass

PROFILES = ("full", "cpu", "tiny")

# Every notebook declares these in its cell tagged `parameters`; a task adds its own (Task.parameters).
COMMON_PARAMETERS = ("profile", "record_path")
# ... and these, the variants the runner's matrix sets (--precision, --compilation, --batch-size; support.precision,
# support.timing.sweep); a run that leaves them at their defaults is the baseline.
VARIANT_PARAMETERS = {"precision": "fp32", "compilation": "auto", "batch_sizes": ""}
DEVICES_DEFAULT = 1  # the `devices` of a task that trains on several (Task.parallel): 1 is its baseline


@dataclass(frozen=True)
class Task:
    name: str  # the folder under notebooks/, the `task` of a record
    title: str  # headings of results.md and the reader's pages
    short: str  # the README table's column head
    unit: str  # what one timing lap is: "epoch" (training), "batch" (inference) or "call" (one operation)
    metric: str | None  # the quality metric a record must carry; None: the task measures speed only
    parameters: tuple  # the papermill parameters its notebooks declare beyond COMMON_PARAMETERS
    parity: bool = False  # whether its notebooks have the parity step (support.parity)
    band: float | None = None  # how far a framework's metric may sit from the median of the frameworks'
    band_profiles: tuple = PROFILES  # the profiles at which the band is checked
    modes: tuple = ()  # values of its `mode` parameter: each notebook runs once per mode
    metric_modes: tuple = ()  # the modes whose metric the README table shows (default: all)
    sweep_modes: tuple = ()  # the modes whose run gets a batch-size sweep beside it (default: all)
    matrix: bool = True  # whether the runner's variant matrix applies (False: its notebooks measure every variant)

    @property
    def headline(self) -> str:
        """What the README table shows: throughput for inference, time per epoch for training."""
        return {"batch": "images/s", "call": "µs/call"}.get(self.unit, f"s/{self.unit}")

    @property
    def parallel(self) -> bool:
        """Whether its notebooks train on several devices: the `devices` parameter (support.params.devices),
        which the runner's --devices sets; 1, the baseline, unless asked."""
        return "devices" in self.parameters

    @property
    def declared(self) -> tuple:
        """Every parameter each of its notebooks declares (a framework's variant parameter aside)."""
        return COMMON_PARAMETERS + self.parameters + (tuple(VARIANT_PARAMETERS) if self.matrix else ())

    def columns(self) -> list[tuple[str, str]]:
        """(mode, README column head) per column this task takes in the README table."""
        metric = {"accuracy": "accuracy", "auc": "AUC"}.get(self.metric or "", self.metric)
        heads = []
        for mode in self.modes or ("",):
            head = f"{self.short} {self.headline}" + (f", {'RAM' if mode == 'ram' else mode}" if mode else "")
            if metric and (not self.metric_modes or mode in self.metric_modes):
                head += f" ({metric})"
            heads.append((mode, head))
        return heads


TASKS = {
    task.name: task
    for task in (
        Task(
            "cnn_cifar10",
            "VGG-style CNN on CIFAR-10",
            "CNN",
            "epoch",
            "accuracy",
            parameters=("data", "parity"),
            parity=True,
            band=0.05,
        ),
        Task(
            "densenet_chestxray",
            "DenseNet-121 on ChestX-ray14",
            "DenseNet-121",
            "epoch",
            "auc",
            parameters=("data", "mode", "devices"),
            band=0.05,
            band_profiles=("full",),  # the smaller profiles score 32 to 64 test images: too few for an AUC
            modes=("loader", "ram"),
            metric_modes=("loader",),
            sweep_modes=("ram",),
        ),  # the sweep holds one batch in memory in either mode: run it once
        Task(
            "resnet50_features",
            "ResNet-50 feature extraction",
            "ResNet-50",
            "batch",
            None,
            parameters=("parity",),
            parity=True,
        ),
        Task(
            "gru_imdb", "GRU on IMDB", "GRU", "epoch", "accuracy", parameters=("data", "parity"), parity=True, band=0.05
        ),
        # single operations on a ladder of sizes (support/operators.py), each notebook measuring every dtype and mode
        # itself; its record's timing is the dispatch floor (the smallest add), the README's column
        Task("operators", "Operator benchmarks", "Add floor", "call", None, parameters=(), matrix=False),
    )
}
NAMES = tuple(TASKS)


def get(name: str) -> Task:
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; choose from: {', '.join(NAMES)}")
    return TASKS[name]
