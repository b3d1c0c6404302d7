"""The variant matrix: precision and compilation (support.precision), batch-size sweeps (support.timing.sweep),
their records, the runner's --precision/--compilation/--batch-size and the variant tables. Faults injected:
a bad value, an unsupported combination, an out-of-memory error of each framework's kind, a budget run out."""

import json

import numpy as np
import pytest

from scripts import jobs as jobs_
from scripts import report, run_all
from support import params, precision, records, timing
from tests.test_runner import OK, fake_calibrate, write_notebook

ENV = {"machine": "test", "numpy": np.__version__}


# --- support.precision ------------------------------------------------------------------------------


def test_a_bad_precision_or_compilation_is_one_line_naming_it_and_the_choices():
    with pytest.raises(ValueError, match=r"^precision 'fp64' is not one of fp32, tf32, bf16, fp16$"):
        precision.check("fp64")
    with pytest.raises(ValueError, match=r"^compilation 'yes' is not one of auto, off, on$"):
        precision.check("fp32", "yes")


def test_tf32_and_fp16_need_a_gpu_and_the_rule_is_the_same_for_every_framework():
    """support.hardware.reason, the one rule (tests/test_hardware.py has bf16's, which depends on the CPU)."""
    from support import hardware

    assert hardware.reason("fp32", gpu=False) is None
    assert "tensor cores" in hardware.reason("tf32", gpu=False)
    assert "float16" in hardware.reason("fp16", gpu=False)
    assert all(hardware.reason(p, gpu=True) is None for p in precision.PRECISIONS)


def test_auto_is_each_frameworks_own_default():
    assert precision.resolve("auto", "pytorch") == "off" and precision.resolve("auto", "mxnet") == "on"
    assert precision.resolve("auto", "keras-jax") == "on" and precision.resolve("auto", "keras-torch") == "off"
    assert precision.resolve("on", "pytorch") == "on"
    assert precision.tolerance("bf16") > precision.tolerance("fp16") > precision.tolerance("fp32")


def test_stop_writes_an_unsupported_record_with_the_reason_and_ends_the_notebook(tmp_path):
    path = tmp_path / "r.json"
    settings = params.load("cnn_cifar10", "tiny")
    with pytest.raises(precision.Unsupported, match="^unsupported: numpy has no bfloat16"):
        records.stop(
            path,
            "numpy has no bfloat16",
            task="cnn_cifar10",
            framework="chainer",
            params=settings,
            environment=ENV,
            precision="bf16",
            compilation="off",
        )
    r = records.read(path)
    assert (r["status"], r["error"], r["precision"], r["compilation"]) == (
        "unsupported",
        "numpy has no bfloat16",
        "bf16",
        "off",
    )
    with pytest.raises(precision.Unsupported, match="^not applicable: "):
        records.stop(
            path,
            "JAX compiles by construction",
            task="cnn_cifar10",
            framework="jax",
            params=settings,
            environment=ENV,
            precision="fp32",
            compilation="off",
            status="not_applicable",
        )
    assert records.read(path)["status"] == "not_applicable"


def test_a_stopped_record_must_say_why():
    record = {
        "schema": 2,
        "task": "cnn_cifar10",
        "framework": "x",
        "variant": "",
        "status": "unsupported",
        "profile": "tiny",
        "data": None,
        "params": {},
        "timing": {},
        "metrics": {},
        "n_parameters": None,
        "environment": {},
    }
    with pytest.raises(records.RecordError, match="^a unsupported record must say its reason"):
        records.validate(record)


def test_parity_tolerance_follows_the_precision(capsys):
    from support import parity

    outputs = np.array([1.0, 2.0]) * (1 + 1e-2)
    assert parity.agree("parity", outputs, np.array([1.0, 2.0]), precision="bf16")["parity"]["tolerance"] == 5e-2
    assert "within the bf16 tolerance 0.05" in capsys.readouterr().out
    parity.agree("parity", outputs, np.array([1.0, 2.0]))
    assert "OUTSIDE the fp32 tolerance 0.0001" in capsys.readouterr().out


# --- support.timing.sweep --------------------------------------------------------------------------


class Clock:
    """A clock that advances by the batch size times `per_sample` at each step: a step's time scales with b."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


OUT_OF_MEMORY = MemoryError("out of memory")


def fake_steps(clock, per_sample=1e-3, fail_at=None, error=OUT_OF_MEMORY):
    def make(b):
        if fail_at and b >= fail_at:
            raise error

        def step():
            clock.now += per_sample * b

        return step

    return make


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("1,64,max", ([1, 64], True)),
        ([1, "max"], ([1], True)),
        ("max", ([1], True)),
        ("8, 2", ([2, 8], False)),
        ("", ([], False)),
    ],
)
def test_batch_sizes_are_read_from_a_string_or_a_list(spec, expected):
    assert timing.batch_sizes(spec) == expected


@pytest.mark.parametrize("spec", ["1,x", "0", "-4", "1.5"])
def test_a_bad_batch_size_is_named(spec):
    with pytest.raises(ValueError, match=r"is not a positive integer or 'max'"):
        timing.batch_sizes(spec)


def test_no_sweep_without_sizes(capsys):
    assert timing.sweep(lambda b: None, "", budget_s=10) is None
    assert "no batch-size sweep" in capsys.readouterr().out


def test_the_sweep_doubles_until_the_time_budget_and_says_where_it_stopped():
    clock = Clock()
    result = timing.sweep(
        fake_steps(clock), "1,64,max", budget_s=10, clock=clock, available=lambda: 2**40, peak=lambda: 0
    )
    sizes = [row["batch_size"] for row in result["sizes"]]
    assert sizes[:3] == [1, 64, 128] and all(b == 2 * a for a, b in zip(sizes[1:], sizes[2:]))
    assert result["stopped"].startswith(f"time budget: batch {2 * sizes[-1]} would take about")
    row = result["sizes"][1]
    assert row["median_s"] == pytest.approx(0.064) and row["samples_per_s"] == pytest.approx(1000)
    assert row["p95_s"] >= row["median_s"] and row["n"] == timing.MIN_REPEATS
    assert result["asked"] == "1,64,max" and result["budget_s"] == 10


def test_sizes_asked_for_by_number_run_whatever_the_budget():
    clock = Clock()
    result = timing.sweep(
        fake_steps(clock, per_sample=0.1), "1,64,max", budget_s=1, clock=clock, available=lambda: 2**40, peak=lambda: 0
    )
    assert [row["batch_size"] for row in result["sizes"]] == [1, 64]  # 64 alone takes longer than the budget
    assert result["stopped"].startswith("time budget: batch 128 would take about")


@pytest.mark.parametrize(
    "error",
    [
        MemoryError(),
        RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"),  # torch.OutOfMemoryError's text
        RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate"),  # XLA (JAX)
        type("ResourceExhaustedError", (Exception,), {})("OOM when allocating tensor"),  # TensorFlow
        RuntimeError("[12:00:00] src/storage/./pooled_storage_manager.h:161: cudaMalloc retry failed: out of memory"),
    ],
)
def test_an_out_of_memory_error_of_any_framework_ends_the_sweep_with_the_largest_that_fits(error):
    clock = Clock()
    result = timing.sweep(
        fake_steps(clock, fail_at=32, error=error),
        "1,max",
        budget_s=1e9,
        clock=clock,
        available=lambda: 2**40,
        peak=lambda: 0,
    )
    assert [row["batch_size"] for row in result["sizes"]] == [1, 2, 4, 8, 16]
    assert result["stopped"].startswith("out of memory at batch 32")


def test_an_error_that_is_not_out_of_memory_goes_on_up():
    clock = Clock()
    with pytest.raises(ValueError, match="shape mismatch"):
        timing.sweep(
            fake_steps(clock, fail_at=4, error=ValueError("shape mismatch")),
            "1,max",
            budget_s=1e9,
            clock=clock,
            available=lambda: 2**40,
            peak=lambda: 0,
        )


def test_the_host_memory_guard_stops_before_a_batch_that_would_not_fit():
    clock, used = Clock(), [0]

    def make(b):
        used[0] = 2**20 * b  # 1 MiB per example
        return fake_steps(clock)(b)

    result = timing.sweep(make, "1,max", budget_s=1e9, clock=clock, available=lambda: 2**30, peak=lambda: used[0])
    assert result["stopped"].startswith("memory: batch ") and "GiB free" in result["stopped"]
    assert result["sizes"][-1]["batch_size"] <= 1024


def test_the_device_memory_guard_stops_before_a_batch_that_would_not_fit_on_the_gpu():
    """On a GPU the host has room to spare: the device's free memory and the framework's peak bound the batch."""
    clock, used = Clock(), [0]

    def make(b):
        used[0] = 2**20 * b  # 1 MiB per example on the device
        return fake_steps(clock)(b)

    result = timing.sweep(
        make,
        "1,max",
        budget_s=1e9,
        clock=clock,
        available=lambda: 2**40,
        peak=lambda: 0,
        device_memory=lambda: (2**30 - used[0], used[0]),
    )
    assert result["stopped"].startswith("memory on the device: batch ") and "GiB free" in result["stopped"]
    assert result["sizes"][-1]["batch_size"] <= 512
    unsaid = timing.sweep(
        make, "1,64", budget_s=1e9, clock=clock, available=lambda: 2**40, peak=lambda: 0, device_memory=lambda: None
    )
    assert unsaid["stopped"] == "every size asked for ran"


class Process:
    """A fake process's host memory: a step at batch b needs `base + per_example * b`; the peak keeps the most it
    ever held, starting from `held` (what training at a larger batch left it holding); going past `total` is the
    kernel's OOM killer."""

    def __init__(self, base, per_example, held, total):
        self.base, self.per_example, self.high, self.total = base, per_example, held, total

    def make_step(self, clock):
        def make(b):
            def step():
                need = self.base + self.per_example * b
                assert need <= self.total, f"killed by the OOM killer at batch {b}"
                self.high = max(self.high, need)
                clock.now += 1e-3 * b

            return step

        return make


GiB = 2**30


@pytest.mark.parametrize(
    "total, ran, probed, stopped",
    [
        # DenseNet-121 on Keras's torch backend: training at batch 8 left the peak at need(8), so batch 1 grows it
        # by nothing, and scaling that growth to 64 predicted 0; 64 needs 26 GiB of a 24 GiB machine
        (24 * GiB, [1], [2, 4, 8, 16, 32], "memory: batch 64 might need up to 14.0 GiB more than the process's peak"),
        # on a smaller machine the probes stop where the next doubling could not fit
        (16 * GiB, [1], [2, 4, 8, 16], "memory: batch 64 might need up to 24.0 GiB"),
        # on a larger machine the probes stop as soon as the bound lets 64 run
        (64 * GiB, [1, 64], [2, 4, 8], "every size asked for ran"),
    ],
)
def test_the_memory_guard_bounds_a_batch_by_the_largest_run_so_far_and_probes_on_the_way(total, ran, probed, stopped):
    clock, process = Clock(), Process(base=2 * GiB, per_example=0.375 * GiB, held=5 * GiB, total=total)
    result = timing.sweep(
        process.make_step(clock),
        "1,64",
        budget_s=1e9,
        clock=clock,
        available=lambda: process.total - process.high,
        peak=lambda: process.high,
    )
    assert [row["batch_size"] for row in result["sizes"]] == ran
    assert result.get("probed", []) == probed and result["stopped"].startswith(stopped)


def test_the_memory_bound_grows_with_the_batch_from_the_largest_run():
    assert timing.memory_bound(64, 32, 10 * GiB) == 20 * GiB
    assert timing.memory_bound(8, 16, 10 * GiB) == 10 * GiB  # a smaller batch fits in the peak
    assert timing.memory_bound(8, 0, 3 * GiB) == 3 * GiB


def test_the_sweep_stops_at_its_cap(monkeypatch):
    monkeypatch.setattr(timing, "SWEEP_CAP", 8)
    clock = Clock()
    result = timing.sweep(
        fake_steps(clock, per_sample=1e-9), "2,max", budget_s=1e9, clock=clock, available=lambda: None, peak=lambda: 0
    )
    assert [row["batch_size"] for row in result["sizes"]] == [2, 4, 8] and result[
        "stopped"
    ] == "reached 8, the sweep's largest batch"


def test_a_sweep_is_recorded_and_a_malformed_one_refused(tmp_path):
    clock = Clock()
    sweep = timing.sweep(fake_steps(clock), "1,4", budget_s=100, clock=clock, available=lambda: None, peak=lambda: 0)
    assert sweep["stopped"] == "every size asked for ran"
    settings = params.load("resnet50_features", "tiny")
    summary = timing.benchmark(lambda: None, repeats=7, samples=4)
    r = records.write(
        tmp_path / "r.json",
        task="resnet50_features",
        framework="x",
        params=settings,
        data="synthetic",
        timing=summary,
        metrics={},
        n_parameters=1,
        environment=ENV,
        first_step_s=0.1,
        sweep=sweep,
        precision="bf16",
        compilation="on",
    )
    assert records.read(tmp_path / "r.json")["sweep"]["sizes"][1]["batch_size"] == 4
    assert (r["precision"], r["compilation"]) == ("bf16", "on")
    bad = dict(r, sweep={"sizes": [{"batch_size": 0}], "stopped": "x"})
    with pytest.raises(records.RecordError, match=r"^sweep\.sizes\[0\] lacks samples_per_s"):
        records.validate(bad)
    with pytest.raises(records.RecordError, match='^precision is str "fp8"'):
        records.validate(dict(r, precision="fp8"))


# --- the runner's variant matrix -------------------------------------------------------------------


def planned(argv):
    args = run_all.parse_args(["--profile", "tiny", *argv])
    return [(j.task, j.framework, j.variant, j.matrix) for j in run_all.plan(args)]


def test_the_default_run_is_the_baseline_alone():
    jobs = planned(["--task", "cnn_cifar10", "--framework", "pytorch"])
    assert jobs == [("cnn_cifar10", "pytorch", "", {})]


def test_the_matrix_crosses_precision_and_compilation_without_repeating_the_baseline():
    jobs = planned(
        [
            "--task",
            "gru_imdb",
            "--framework",
            "pytorch,mxnet",
            "--precision",
            "fp32,bf16",
            "--compilation",
            "auto,on,off",
        ]
    )
    assert [(f, v) for _, f, v, _ in jobs] == [
        ("pytorch", ""),
        ("pytorch", "compiled"),
        ("pytorch", "bf16"),
        ("pytorch", "bf16-compiled"),
        ("mxnet", ""),
        ("mxnet", "eager"),
        ("mxnet", "bf16"),
        ("mxnet", "bf16-eager"),
    ]
    assert jobs[3][3] == {"precision": "bf16", "compilation": "on"}


def test_keras_compilation_default_is_its_backends_and_sweeps_run_beside_each_run():
    jobs = planned(
        ["--task", "resnet50_features", "--framework", "keras", "--compilation", "on", "--batch-size", "1,max"]
    )
    assert [v for _, _, v, _ in jobs] == [
        "tensorflow-compiled",
        "tensorflow-compiled-sweep",
        "jax",
        "jax-sweep",
        "torch-compiled",
        "torch-compiled-sweep",
    ]
    assert jobs[3][3] == {"batch_sizes": "1,max"}


def test_densenets_sweep_runs_once_in_ram_mode():
    jobs = planned(["--task", "densenet_chestxray", "--framework", "pytorch", "--batch-size", "1,max"])
    assert [v for _, _, v, _ in jobs] == ["loader", "ram", "ram-sweep"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--precision", "fp64"], "unknown precision 'fp64'; choose from: fp32, tf32, bf16, fp16"),
        (["--compilation", "yes"], "unknown compilation 'yes'; choose from: auto, off, on"),
        (["--batch-size", "1,big"], "--batch-size: batch_sizes '1,big': 'big' is not a positive integer or 'max'"),
    ],
)
def test_a_bad_matrix_value_is_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as stop:
        run_all.parse_args(argv)
    assert stop.value.code == 2 and capsys.readouterr().err.strip() == f"run_all.py: {message}"


STOPPING = """
from support import params, records
settings = params.load(TASK, profile)
if precision == "bf16":
    records.stop(record_path, "numpy has no bfloat16", task=TASK, framework=FRAMEWORK, params=settings,
                 environment={"machine": "test"}, precision=precision, compilation="off")
""" + OK.replace("environment=", "precision=precision, environment=")


def test_an_unsupported_combination_is_kept_with_its_reason_not_counted_failed_and_not_rerun(tmp_path, monkeypatch):
    monkeypatch.setattr(run_all, "calibrate", fake_calibrate)
    notebooks = tmp_path / "notebooks"
    write_notebook(
        notebooks / "gru_imdb" / "chainer.ipynb",
        "gru_imdb",
        "chainer",
        STOPPING,
        declared="profile = 'auto'\nrecord_path = None\nprecision = 'fp32'\ncompilation = 'auto'",
    )
    argv = [
        "--notebooks",
        str(notebooks),
        "--results",
        str(tmp_path / "results"),
        "--machine",
        "box",
        "--profile",
        "tiny",
        "--timeout",
        "120",
        "--no-readme",
        "--no-site",
        "--precision",
        "fp32,bf16",
    ]
    assert run_all.main(argv) == 0
    folder = tmp_path / "results" / "box"
    stopped = json.loads((folder / "records" / "tiny" / "gru_imdb__chainer__bf16.json").read_text())
    assert (stopped["status"], stopped["error"], stopped["identity"]["precision"]) == (
        "unsupported",
        "numpy has no bfloat16",
        "bf16",
    )
    base = json.loads((folder / "records" / "tiny" / "gru_imdb__chainer.json").read_text())
    assert base["status"] == "ok" and base["precision"] == "fp32" and base["identity"]["precision"] == "fp32"
    markdown = (folder / "results.md").read_text()
    assert "## Variants: GRU on IMDB (profile `tiny`)" in markdown
    assert "| chainer | bf16 | bf16 | no | **unsupported**: numpy has no bfloat16 |" in markdown
    assert run_all.main(argv + ["--resume"]) == 0  # both final: nothing runs again
    assert (
        json.loads((folder / "records" / "tiny" / "gru_imdb__chainer__bf16.json").read_text())["run"] == stopped["run"]
    )


# --- the variant tables ----------------------------------------------------------------------------


def fake_record(framework, variant, matrix, samples_per_s, *, value=0.8, status="ok", sweep=None, **extra):
    settings = params.load("cnn_cifar10", "tiny")
    steps = {
        "unit": "step",
        "median_s": 32 / samples_per_s,
        "iqr_s": 0.001,
        "cv": 0.01,
        "n": 7,
        "warmup_s": [],
        "samples_per_s": samples_per_s,
        "laps_s": [32 / samples_per_s] * 7,
    }
    record = {
        "schema": 2,
        "task": "cnn_cifar10",
        "framework": framework,
        "variant": variant,
        "status": status,
        "profile": "tiny",
        "data": "synthetic",
        "params": params.as_dict(settings),
        "metrics": {"accuracy": value},
        "timing": {
            "unit": "epoch",
            "median_s": 1.0,
            "iqr_s": 0.1,
            "cv": 0.1,
            "n": 2,
            "warmup_s": [1.2],
            "samples_per_s": 500.0,
            "laps_s": [1.0, 1.0],
        },
        "steps": steps,
        "n_parameters": 10,
        "environment": ENV,
        "first_step_s": 0.5,
        "compile_s": None,
        "memory": {"host_peak_bytes": 2**30, "device_peak_bytes": None},
        "flops": {"forward": 1e6, "train": 3e6},
        "curve": [value],
        "matrix": matrix,
        "precision": matrix.get("precision", "fp32"),
        "compilation": "off",
        **({"sweep": sweep} if sweep else {}),
        **extra,
    }
    return record


def test_the_variant_table_shows_speed_ups_over_each_lines_baseline_and_the_readme_only_baselines(tmp_path):
    folder = tmp_path / "box" / "records" / "tiny"
    folder.mkdir(parents=True)
    sweep = {
        "sizes": [
            {
                "batch_size": b,
                "samples_per_s": 100.0 * b,
                "median_s": 0.01,
                "p95_s": 0.012,
                "cv": 0.01,
                "n": 7,
                "first_s": 0.1,
            }
            for b in (1, 64)
        ],
        "stopped": "time budget: batch 128 would take",
        "asked": "1,64,max",
        "budget_s": 10,
        "probed": [2, 4],
    }
    rows = [
        fake_record("pytorch", "", {}, 1000.0),
        fake_record("pytorch", "bf16", {"precision": "bf16"}, 1500.0),
        fake_record("tensorflow", "", {}, 800.0, value=0.81),
        fake_record("tensorflow", "bf16", {"precision": "bf16"}, 400.0, value=0.2),
        fake_record("pytorch", "sweep", {"batch_sizes": "1,64,max"}, 1000.0, sweep=sweep),
    ]
    for r in rows:
        (folder / f"cnn_cifar10__{r['framework']}{'__' + r['variant'] if r['variant'] else ''}.json").write_text(
            json.dumps(r)
        )
    readme = tmp_path / "README.md"
    readme.write_text("<!-- results:start -->\n<!-- results:end -->\n")
    built = report.build(tmp_path / "box", readme)
    assert len(built) == 5
    markdown = (tmp_path / "box" / "results.md").read_text()
    assert "| pytorch | bf16 | bf16 | no | ok | 21.3 | 1,500 | 1.50x | — | 0.800 |" in markdown  # no run file: no MFU
    assert "| tensorflow | bf16 | bf16 | no | ok | 80† | 400† | 0.50x | — | 0.200 **outside band** |" in markdown
    assert (
        "| pytorch | sweep | 100 (12 ms) | 6,400 (12 ms) | time budget: batch 128 would take (probed 2, 4) |"
        in markdown
    )
    assert (tmp_path / "box" / "plots" / "tiny" / "cnn_cifar10-variants.png").exists()
    assert (tmp_path / "box" / "plots" / "tiny" / "cnn_cifar10-batch.png").exists()
    sweeps = (tmp_path / "box" / "sweeps.csv").read_text().splitlines()
    assert len(sweeps) == 3 and sweeps[2].startswith("cnn_cifar10,pytorch,sweep,tiny,fp32,off,64,6400.0,")
    table = readme.read_text()
    assert "bf16" not in table and "sweep" not in table and table.count("| pytorch |") == 1
    flagged = report.flagged(built)
    assert flagged == [
        "cnn_cifar10/tensorflow (bf16) (tiny): accuracy 0.200 (the better of its last 2 epochs) is more "
        "than 0.05 from the median 0.805 of the frameworks"
    ]


def test_seeds_run_each_banded_baseline_again_on_the_next_seeds_through_the_params_override(monkeypatch):
    jobs = planned(
        ["--task", "gru_imdb,resnet50_features", "--framework", "jax", "--precision", "fp32,bf16", "--seeds", "3"]
    )
    assert [(t, v) for t, _, v, _ in jobs] == [
        ("gru_imdb", ""),
        ("gru_imdb", "seed43"),
        ("gru_imdb", "seed44"),
        ("gru_imdb", "bf16"),
        ("resnet50_features", ""),
        ("resnet50_features", "bf16"),
    ]  # ResNet-50 has no accuracy band
    monkeypatch.setenv("DLROSETTA_PARAMS", "epochs=1")  # a user's override never reaches a run
    args = run_all.parse_args(["--task", "gru_imdb", "--framework", "jax", "--seeds", "2"])
    baseline, again = run_all.plan(args)
    assert "DLROSETTA_PARAMS" not in jobs_.job_environment(baseline, args.jobs)
    assert jobs_.job_environment(again, args.jobs)["DLROSETTA_PARAMS"] == "seed=43"
    assert params.overrides("gru_imdb", "seed=43") == {"seed": 43}


def test_a_bad_seed_count_is_one_line(capsys):
    with pytest.raises(SystemExit):
        run_all.parse_args(["--seeds", "0"])
    assert "run_all.py: --seeds 0: give 1 or more runs of each baseline" in capsys.readouterr().err
