"""Data parallelism's shared pieces (issue 16): the `devices` parameter (support.params.devices), the one-step
check against one device (support.parity.data_parallel), the runner's --devices, its launch of a process per
device under torchrun (PyTorch), and the several-devices table.
Faults injected: a bad device count, more devices than the machine has, parameters that differ in name or shape,
a step that averages the gradients wrongly, one rank of several failing. The notebooks themselves:
tests/test_notebook_devices.py."""

import json
import re
import types
from pathlib import Path

import nbformat
import numpy as np
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from scripts import jobs as jobs_
from scripts import papermill_rank, report, run_all, runner_cli, suite
from support import frameworks, params, parity, records, timing
from tests.test_variants import Clock, fake_steps, planned

ENV = {"machine": "test", "numpy": np.__version__, "device": "cpu"}


# --- support.params.devices --------------------------------------------------------------------------


def test_devices_counts_cpu_devices_without_a_gpu_and_caps_at_the_gpus(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 6)
    assert params.devices(1, gpus=0) == 1 and params.devices("2", gpus=0) == 2
    assert params.devices("all", gpus=0) == 6 == params.cpu_devices("all")  # a CPU device per core
    assert params.devices("all", gpus=4) == 4 and params.devices(3, gpus=4) == 3
    with pytest.raises(ValueError, match=r'^devices=8: the framework sees 4 GPUs; give at most 4, or "all"$'):
        params.devices(8, gpus=4)


@pytest.mark.parametrize("value", [0, -1, "two", 2.0, True, None, "1.5"])
def test_a_bad_device_count_is_one_line_naming_it(value):
    with pytest.raises(ValueError, match=rf'^devices={value!r}: give a whole number of at least 1, or "all"$'):
        params.cpu_devices(value)


# --- support.parity.data_parallel ----------------------------------------------------------------------


def weights(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "conv.weight": rng.normal(size=(4, 3, 3, 3)).astype(np.float32),
        "bn.weight": np.ones(4, np.float32),
        "fc.bias": rng.normal(size=3).astype(np.float32),
    }


def sgd(before: dict, gradients: dict) -> dict:
    return {k: (before[k] - gradients[k]).astype(np.float32) for k in before}  # plain SGD, learning rate 1


def test_data_parallel_passes_the_same_gradient_and_fails_a_doubled_one(capsys):
    before, gradient = weights(0), weights(1)
    one = sgd(before, gradient)
    noisy = sgd(before, {k: g * (1 + 1e-7) for k, g in gradient.items()})  # another summation order
    field = parity.data_parallel(noisy, one, before, devices=2, batch_norm="per-device")["data_parallel"]
    assert field["max_rel_error"] < field["tolerance"] == parity.DATA_PARALLEL_TOLERANCE and field["devices"] == 2
    assert field["n_tensors"] == 3 and "mean of the per-device losses" in field["reference"]
    assert "within the fp32 tolerance 0.01" in capsys.readouterr().out
    summed = sgd(before, {k: 2 * g for k, g in gradient.items()})  # gradients summed over 2 devices, not averaged
    field = parity.data_parallel(summed, one, before, devices=2, batch_norm="global")["data_parallel"]
    assert 0.9 < field["max_rel_error"] < 1.1 and field["max_abs_diff"] == pytest.approx(field["max_update"], 1e-5)
    assert "OUTSIDE the fp32 tolerance" in capsys.readouterr().out
    records.validate(dict(fake_densenet("jax", "ram-2dev", 2), data_parallel=field))


def test_data_parallel_refuses_parameters_that_do_not_match():
    before = weights()
    with pytest.raises(
        ValueError,
        match=r"^the one-device parameters differ in name from the weights before the "
        r"step: \['extra'\]$",
    ):
        parity.data_parallel(before, dict(before, extra=np.zeros(1)), before, devices=2, batch_norm="global")
    with pytest.raises(ValueError, match=r"^parameter 'fc.bias': shapes \(3,\) \(several devices\), \(4,\) \(one\)"):
        parity.data_parallel(before, dict(before, **{"fc.bias": np.zeros(4)}), before, devices=2, batch_norm="global")
    with pytest.raises(ValueError, match=r"^batch_norm='sync': choose from per-device, global$"):
        parity.data_parallel(before, before, before, devices=2, batch_norm="sync")


# --- the batch-size sweep on several devices ------------------------------------------------------------


def test_on_several_devices_the_sweeps_sizes_are_per_device_and_samples_count_every_device():
    clock = Clock()
    one = timing.sweep(fake_steps(clock), "2,4", budget_s=10, clock=clock, available=lambda: 2**40, peak=lambda: 0)
    clock = Clock()
    two = timing.sweep(
        fake_steps(clock), "2,4", budget_s=10, clock=clock, available=lambda: 2**40, peak=lambda: 0, devices=2
    )
    assert [r["batch_size"] for r in two["sizes"]] == [2, 4] and two["devices"] == 2 and "devices" not in one
    assert [b["samples_per_s"] / a["samples_per_s"] for a, b in zip(one["sizes"], two["sizes"])] == [2.0, 2.0]


# --- the runner's --devices ---------------------------------------------------------------------------


def test_devices_cross_the_matrix_of_the_tasks_that_train_on_several_and_no_other(monkeypatch):
    monkeypatch.setattr(runner_cli, "machine_devices", lambda: (4, "4 GPUs"))
    jobs = planned(
        [
            "--task",
            "densenet_chestxray,cnn_cifar10",
            "--framework",
            "jax",
            "--devices",
            "1,2,all",
            "--precision",
            "fp32,bf16",
        ]
    )
    assert [(t, v) for t, _, v, _ in jobs] == [
        ("densenet_chestxray", "loader"),
        ("densenet_chestxray", "loader-2dev"),
        ("densenet_chestxray", "loader-4dev"),
        ("densenet_chestxray", "loader-bf16"),
        ("densenet_chestxray", "loader-bf16-2dev"),
        ("densenet_chestxray", "loader-bf16-4dev"),
        ("densenet_chestxray", "ram"),
        ("densenet_chestxray", "ram-2dev"),
        ("densenet_chestxray", "ram-4dev"),
        ("densenet_chestxray", "ram-bf16"),
        ("densenet_chestxray", "ram-bf16-2dev"),
        ("densenet_chestxray", "ram-bf16-4dev"),
        ("cnn_cifar10", ""),
        ("cnn_cifar10", "bf16"),
    ]
    assert jobs[4][3] == {"precision": "bf16", "devices": 2}


def test_device_counts_above_what_the_machine_has_are_left_out_saying_so(monkeypatch, capsys):
    monkeypatch.setattr(runner_cli, "machine_devices", lambda: (2, "2 CPU cores and no GPU"))
    assert run_all.parse_args(["--devices", "1,2,4,2"]).device_counts == [1, 2]
    assert (
        capsys.readouterr().out.strip() == "run_all.py: --devices 4 left out: this machine has 2 CPU cores and no GPU"
    )
    assert run_all.parse_args(["--devices", "all"]).device_counts == [2]


@pytest.mark.parametrize(
    "value, message",
    [
        ("0", "--devices '0': give whole numbers of at least 1, or all (e.g. 1,2,4)"),
        ("two", "--devices 'two': give whole numbers of at least 1, or all (e.g. 1,2,4)"),
        ("8", "--devices '8': no count fits this machine (2 CPU cores and no GPU)"),
    ],
)
def test_a_bad_device_count_stops_the_runner_in_one_line(monkeypatch, capsys, value, message):
    monkeypatch.setattr(runner_cli, "machine_devices", lambda: (2, "2 CPU cores and no GPU"))
    with pytest.raises(SystemExit) as stop:
        run_all.parse_args(["--devices", value])
    assert stop.value.code == 2 and capsys.readouterr().err.strip() == f"run_all.py: {message}"


def test_the_machine_has_a_cpu_device_per_core_without_nvidia_smi(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr("os.cpu_count", lambda: 3)
    assert runner_cli.machine_devices() == (3, "3 CPU cores and no GPU")


# --- a process per device: torchrun starts the notebook once per rank ------------------------------------


def test_each_rank_writes_its_own_executed_notebook():
    assert papermill_rank.rank_output("/s/pytorch-ram-2dev.ipynb", 0) == "/s/pytorch-ram-2dev.ipynb"
    assert papermill_rank.rank_output("/s/pytorch-ram-2dev.ipynb", 3) == "/s/pytorch-ram-2dev.rank3.ipynb"


def test_the_other_ranks_notebooks_are_found_in_the_ranks_order(tmp_path):
    """What rank_output names, other_ranks finds, rank 10 after rank 2; nothing else beside it counts."""
    output = tmp_path / "pytorch-ram-2dev.ipynb"
    written = {r: Path(papermill_rank.rank_output(str(output), r)) for r in (10, 2, 1)}
    for path in [*written.values(), output] + [
        tmp_path / n for n in ("pytorch-ram-2dev.rankx.ipynb", "pytorch-ram-2dev.rank1.log", "pytorch-ram.rank1.ipynb")
    ]:
        path.touch()
    assert papermill_rank.other_ranks(output) == sorted(written.items())


def test_a_failing_ranks_error_is_the_runs_and_names_the_first_failing_rank_in_order(tmp_path):
    def executed(name, error=None):
        cells = [
            {
                "cell_type": "code",
                "outputs": [] if error is None else [{"output_type": "error", "ename": "ValueError", "evalue": error}],
            }
        ]
        (tmp_path / name).write_text(json.dumps({"cells": cells}))

    executed("nb.ipynb")
    executed("nb.rank10.ipynb", "rank 10 fails")
    executed("nb.rank2.ipynb", "rank 2 fails")
    nb = tmp_path / "nb.ipynb"
    assert (
        suite.notebook_error(nb, tmp_path / "nb.log", papermill_rank.other_ranks(nb))
        == "ValueError: rank 2 fails (cell 0, rank 2)"
    )


def launch_two_ranks(tmp_path, framework: str, world_variable: str):
    """The runner's launch for a framework in suite.PROCESS_PER_DEVICE with devices=2, on a notebook in its kernel
    that marks each rank's file (the rank read from the framework's launcher's variable) and fails on rank 1 alone:
    (status, error, the log's lines, the staging folder)."""
    assert framework in suite.PROCESS_PER_DEVICE
    rank_variable = frameworks.get(framework).launcher.rank
    notebook = tmp_path / f"{framework}.ipynb"
    cells = [
        new_code_cell("devices = 1"),
        new_code_cell(
            "import os\n"
            f"rank, world = int(os.environ['{rank_variable}']), int(os.environ['{world_variable}'])\n"
            f"open(f'{tmp_path}/rank{{rank}}-of-{{world}}-devices-{{devices}}', 'w').close()"
        ),
        new_code_cell("if rank == 1:\n    raise ValueError('rank 1 fails alone')"),
    ]
    cells[0].metadata["tags"] = ["parameters"]
    environment = frameworks.get(framework).environment
    kernel = {"name": suite.kernel_name(environment), "display_name": environment, "language": "python"}
    nbformat.write(
        new_notebook(cells=cells, metadata={"kernelspec": kernel, "language_info": {"name": "python"}}), notebook
    )
    job = jobs_.Job("densenet_chestxray", framework, {}, notebook, matrix={"devices": 2}, profile="tiny")
    staging = tmp_path / "staging"
    staging.mkdir()
    executed, log = staging / f"{framework}-2dev.ipynb", staging / f"{framework}-2dev.log"
    status, error = run_all.execute(
        job, types.SimpleNamespace(timeout=300, jobs=1), {"devices": 2}, executed, log, run_all.Active()
    )
    assert sorted(f.name for f in tmp_path.glob("rank*")) == ["rank0-of-2-devices-2", "rank1-of-2-devices-2"]
    assert status == "failed" and re.fullmatch(r"ValueError: rank 1 fails alone \(cell \d+, rank 1\)", error), error
    assert executed.exists() and (staging / f"{framework}-2dev.rank1.ipynb").exists()
    return log.read_text().splitlines()


def test_a_process_per_device_notebook_runs_once_per_rank_and_a_failing_ranks_error_names_it(tmp_path):
    """PyTorch's: torchrun starts the notebook twice, each process sees its rank, the log tells the ranks apart, and
    the error of the rank that failed (rank 1 here; rank 0 finished) is the run's, naming the rank."""
    lines = launch_two_ranks(tmp_path, "pytorch", "WORLD_SIZE")
    assert any(line.startswith("[rank0] ") for line in lines) and any(line.startswith("[rank1] ") for line in lines)


@pytest.mark.skipif(
    not suite.venv_python("paddle-mindspore").exists(), reason="the paddle-mindspore environment is not built"
)
def test_paddles_launcher_runs_the_notebook_once_per_rank_and_a_failing_ranks_error_names_it(tmp_path):
    """PaddlePaddle's: paddle.distributed.launch (its environment's Python, which has no papermill) starts the
    notebook twice, each process sees its rank in PADDLE_TRAINER_ID, and rank 1's error is the run's."""
    launch_two_ranks(tmp_path, "paddle", "PADDLE_TRAINERS_NUM")


# --- the several-devices table -------------------------------------------------------------------------


def fake_densenet(framework, variant, devices, *, epoch_s=10.0, step_s=1.0, status="ok", error=None, **extra):
    settings = params.load("densenet_chestxray", "tiny")
    batch = settings.batch_size * devices
    lap = {
        "unit": "epoch",
        "median_s": epoch_s,
        "iqr_s": 0.1,
        "cv": 0.01,
        "n": 2,
        "warmup_s": [epoch_s],
        "samples_per_s": settings.n_train / epoch_s,
        "laps_s": [epoch_s] * 2,
    }
    steps = {
        "unit": "step",
        "median_s": step_s,
        "iqr_s": 0.01,
        "cv": 0.01,
        "n": 7,
        "warmup_s": [],
        "samples_per_s": batch / step_s,
        "laps_s": [step_s] * 7,
    }
    matrix = {"devices": devices} if devices > 1 else {}
    return {
        "schema": 2,
        "task": "densenet_chestxray",
        "framework": framework,
        "variant": variant,
        "status": status,
        "profile": "tiny",
        "data": "synthetic",
        "params": params.as_dict(settings),
        "metrics": {"auc": 0.5},
        "timing": lap,
        "steps": steps,
        "n_parameters": 10,
        "environment": ENV,
        "first_step_s": 0.5,
        "compile_s": None,
        "memory": {"host_peak_bytes": 2**30, "device_peak_bytes": None},
        "flops": {"forward": 1e6, "train": 3e6},
        "curve": [0.5],
        "matrix": matrix,
        "precision": "fp32",
        "compilation": "off",
        "devices": devices,
        "global_batch_size": batch,
        **({"error": error} if error else {}),
        **extra,
    }


def test_the_devices_table_gives_speed_up_efficiency_and_the_check_and_leaves_the_variant_table(tmp_path):
    folder = tmp_path / "box" / "records" / "tiny"
    folder.mkdir(parents=True)
    check = {"devices": 2, "batch_norm": "global", "max_abs_diff": 3e-8, "max_rel_error": 2.5e-6, "tolerance": 1e-4}
    rows = [
        fake_densenet("jax", "ram", 1, epoch_s=10.0, step_s=1.0),
        fake_densenet("jax", "ram-2dev", 2, epoch_s=8.0, step_s=1.6, data_parallel=check),
        fake_densenet("keras", "jax-loader", 1),
        fake_densenet("keras", "jax-loader-2dev", 2, epoch_s=5.0),
        fake_densenet(
            "keras",
            "torch-ram-2dev",
            2,
            status="unsupported",
            error="Keras 3.15's torch backend has no distribution API",
        ),
        fake_densenet("keras", "torch-loader-2dev", 2, status="unsupported", error="a reason " * 30),
    ]
    for r in rows:
        (folder / f"densenet_chestxray__{r['framework']}__{r['variant']}.json").write_text(json.dumps(r))
    report.build(tmp_path / "box", None)
    markdown = (tmp_path / "box" / "results.md").read_text()
    assert "## Several devices: DenseNet-121 on ChestX-ray14 (profile `tiny`)" in markdown
    assert "CPU devices, which share the same cores" in markdown
    assert "| jax | ram | 2 | 8 | ok | 10 | 8 | 1.25x | 62% | 4 | 5 | 2.5e-06 (3.0e-08) |" in markdown
    assert "| keras (jax) | loader | 2 | 8 | ok | 10 | 5 | 2.00x | 100% | 4 | 8 | — |" in markdown
    assert (
        "| keras (torch) | ram | 2 | 8 | **unsupported**: Keras 3.15's torch backend has no distribution API |"
        in markdown
    )
    assert f"| keras (torch) | loader | 2 | 8 | **unsupported**: {'a reason ' * 22}a … |" in markdown  # a whole word
    assert "## Variants: DenseNet-121" not in markdown  # runs on several devices have their own table
    csv = (tmp_path / "box" / "results.csv").read_text().splitlines()
    assert "devices" in csv[0].split(",") and "data_parallel_error" in csv[0].split(",")
