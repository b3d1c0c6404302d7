"""scripts/run_all.py: failures are recorded, the others kept, the tables and README written; every
fault a run can meet (an interrupt, a crash, a stale notebook, a second runner) is injected here."""

import json
import signal
import subprocess
import sys
import time

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from scripts import jobs as jobs_
from scripts import results, run_all, suite
from scripts.report.plots import headline_plot
from support import tasks

OK = """
import numpy as np
from support import params, records, timing
settings = params.load(TASK, profile)
summary = timing.benchmark(lambda: np.ones(10).sum(), repeats=3, warmup=1, samples=10)
training = METRIC != "images_per_s"
steps = timing.steady_state(lambda: np.ones(10).sum(), steps=2, samples=10) if training else None
records.write(record_path, task=TASK, framework=FRAMEWORK, params=settings, data="synthetic", timing=summary,
              steps=steps, first_step_s=0.01, curve=[0.5, 0.75] if training else None,
              metrics={METRIC: 0.75}, n_parameters=123, environment={"numpy": np.__version__, "machine": "test"})
"""
OPERATORS_OK = """
from support import params
from support.measure import Bench
settings = params.load("operators", profile)
bench = Bench("operators", "pytorch", settings, precision="fp32", compilation="off", record_path=record_path,
              environment={"numpy": "2", "machine": "test"}, gpu=False,
              refuse=lambda p: "a toy has no bfloat16" if p == "bf16" else None)
bench.operators(lambda case: (lambda: None), modes=("eager",))
bench.write(metrics={}, data="synthetic", n_parameters=None)
"""
BODIES = {
    ("gru_imdb", "pytorch"): OK,
    ("gru_imdb", "mxnet"): "import numpy\nassert numpy.__version__ == '1.23.5', numpy.__version__\n" + OK,
    ("cnn_cifar10", "pytorch"): "raise ValueError('boom: the model diverged')",
    ("resnet50_features", "pytorch"): "import time\ntime.sleep(600)",
    ("densenet_chestxray", "pytorch"): "import os\nos._exit(1)",
    ("operators", "pytorch"): OPERATORS_OK,
}
METRICS = {name: task.metric or "images_per_s" for name, task in tasks.TASKS.items()}
TOY_TIMEOUT = 10  # seconds a toy notebook may run: a kernel starts and imports numpy in 2 to 3
DECLARED = "profile = 'auto'\ndata = 'auto'\nrecord_path = None\nmode = 'loader'"


PEAKS = {
    "cpu/float32": {
        "device": "cpu",
        "dtype": "float32",
        "n": 64,
        "repeats": 7,
        "gflops": 100.0,
        "gflops_max": 110.0,
        "laps_s": [0.1] * 7,
        "library": "test",
    }
}
CALIBRATIONS = []
REAL_CALIBRATE = run_all.calibrate


RECORDED = {"peaks": PEAKS, "harness_overhead_s": 1e-6, "load": [0.5, 0.4, 0.3], "date": "now"}


def fake_calibrate(gpu):
    """The machine's measurement, without spending seconds of matmuls in every runner test."""
    CALIBRATIONS.append(gpu)
    return RECORDED


@pytest.fixture(scope="module", autouse=True)
def recorded_calibration(tmp_path_factory):
    """The runners these tests start as processes read the same recorded measurement (DLROSETTA_CALIBRATION)."""
    path = tmp_path_factory.mktemp("calibration") / "calibration.json"
    path.write_text(json.dumps(RECORDED))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DLROSETTA_CALIBRATION", str(path))
        yield path


@pytest.fixture(scope="module", autouse=True)
def no_calibration():
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(run_all, "calibrate", fake_calibrate)
        yield


def write_notebook(path, task, framework, body, declared=DECLARED):
    nb = new_notebook()
    parameters = new_code_cell(declared)
    parameters.metadata["tags"] = ["parameters"]
    constants = f"TASK, FRAMEWORK, METRIC = {task!r}, {framework!r}, {METRICS[task]!r}"
    nb.cells = [parameters, new_code_cell(constants), new_code_cell(body)]
    env = suite.FRAMEWORKS[framework]
    nb.metadata["kernelspec"] = {"name": suite.kernel_name(env), "display_name": env, "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)


@pytest.fixture(scope="module")
def suite_run(tmp_path_factory):
    """One run over toy notebooks: ok (two kernels), raising, hanging and kernel-killing."""
    tmp = tmp_path_factory.mktemp("runner")
    for (task, framework), body in BODIES.items():
        write_notebook(tmp / "notebooks" / task / f"{framework}.ipynb", task, framework, body)
    readme = tmp / "README.md"
    readme.write_text("# x\n\n<!-- results:start -->\nold\n<!-- results:end -->\n\nafter\n")
    code = run_all.main(
        [
            "--notebooks",
            str(tmp / "notebooks"),
            "--results",
            str(tmp / "results"),
            "--machine",
            "testbox",
            "--profile",
            "tiny",
            "--timeout",
            str(TOY_TIMEOUT),
            "--readme",
            str(readme),
        ]
    )
    return tmp, tmp / "results" / "testbox", code


def record(out, key):
    return json.loads((out / "records" / "tiny" / f"{key}.json").read_text())


def test_ok_notebooks_write_their_records_in_both_kernels(suite_run):
    _, out, _ = suite_run
    for key in ("gru_imdb__pytorch", "gru_imdb__mxnet"):
        r = record(out, key)
        assert r["status"] == "ok" and r["metrics"]["accuracy"] == 0.75 and r["profile"] == "tiny"
        assert (out / r["executed_notebook"]).exists() and r["wall_s"] > 0
    assert record(out, "gru_imdb__mxnet")["environment"]["numpy"] == "1.23.5"  # the legacy kernel
    assert record(out, "gru_imdb__pytorch")["environment"]["numpy"].startswith("2.")


def test_the_run_measures_the_machine_before_and_after_and_records_name_it(suite_run):
    _, out, _ = suite_run
    (run,) = (out / "runs").glob("*.json")
    meta = json.loads(run.read_text())
    assert meta["calibration"] == {"before": PEAKS, "after": PEAKS} and meta["load_after"] == [0.5, 0.4, 0.3]
    assert meta["harness_overhead_s"] == 1e-6 and meta["wall_s"] > 0 and meta["profiles"] == ["tiny"]
    assert record(out, "gru_imdb__pytorch")["run"] == meta["run"] == run.stem


def test_the_machine_calibration_runs_and_measures_a_peak(monkeypatch):
    """The one real calibration of the suite (scripts/calibrate.py in its own process); the runner's other
    tests read a recorded one."""
    monkeypatch.delenv("DLROSETTA_CALIBRATION")
    measured = REAL_CALIBRATE(False)
    assert measured["peaks"]["cpu/float32"]["gflops"] > 0 and 0 < measured["harness_overhead_s"] < 1e-3
    assert len(measured["load"]) == 3 and measured["hardware"]["isa"]
    # bf16 is calibrated exactly where this CPU computes it; elsewhere its reason stands in its place
    assert ("cpu/bf16" in measured["peaks"]) != ("cpu/bf16" in measured.get("errors", {}))


def test_a_recorded_calibration_that_cannot_be_read_is_one_line(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("DLROSETTA_CALIBRATION", str(tmp_path / "none.json"))
    assert REAL_CALIBRATE(False) is None
    (line,) = capsys.readouterr().out.strip().splitlines()
    assert line.startswith(f"machine calibration failed (DLROSETTA_CALIBRATION={tmp_path / 'none.json'}: ")
    assert line.endswith("this run's rows get no MFU")


def test_a_calibration_that_cannot_run_is_one_line_and_leaves_the_rows_without_mfu(monkeypatch, capsys):
    monkeypatch.delenv("DLROSETTA_CALIBRATION")
    monkeypatch.setattr(suite, "venv_python", lambda env: suite.ROOT / "no-such-python")
    monkeypatch.setattr(run_all.sys, "executable", str(suite.ROOT / "no-such-python"))
    assert REAL_CALIBRATE(False) is None
    (line,) = capsys.readouterr().out.strip().splitlines()
    assert line.startswith("machine calibration failed (") and "no-such-python" in line and "no MFU" in line


def test_the_cpu_peak_is_the_fastest_kernel_at_hand_and_every_one_is_kept():
    """On an AMD CPU PyTorch's MKL multiplies float32 well below numpy's OpenBLAS, and oneDNN's
    convolutions outrun both; a peak from a slower kernel put a framework's MFU above 100%."""
    from scripts import calibrate

    peak = calibrate.matmul_peak("cpu", repeats=7, n=64, budget_s=0.05)
    names = list(peak["libraries"])
    assert len(names) == 3 and {name.split()[0] for name in names} == {"torch", "numpy"}
    assert sum("oneDNN 3x3 convolution" in name for name in names) == 1
    assert peak["gflops"] == max(peak["libraries"].values()) and peak["library"] in peak["libraries"]
    assert peak["n"] == 64 and len(peak["laps_s"]) == 7


def test_each_precision_has_its_own_peak_and_a_failing_device_keeps_the_others(monkeypatch):
    """bfloat16 is timed in its own kernels (numpy has none); a GPU that cannot compute (here: none at all) is
    named in `errors` with one line, and the CPU's peaks stay, so the CPU rows keep their MFU. (This CPU is taken
    to compute bfloat16: tests/test_hardware.py has the calibration of one that does not.)"""
    from scripts import calibrate

    monkeypatch.setattr(calibrate, "not_computed", lambda device, kind: None)
    measured = calibrate.measure(
        devices={"cpu": ("float32", "bf16"), "cuda": ("float32", "bf16")}, repeats=3, n=64, budget_s=0.05
    )
    assert set(measured["peaks"]) == {"cpu/float32", "cpu/bf16"}
    bf16 = measured["peaks"]["cpu/bf16"]
    assert bf16["dtype"] == "bf16" and bf16["gflops"] > 0
    assert all("bfloat16" in name and name.startswith("torch") for name in bf16["libraries"])
    assert set(measured["errors"]) == {"cuda/float32", "cuda/bf16"}
    assert all("\n" not in line and line for line in measured["errors"].values())


def test_a_raising_notebook_is_recorded_with_its_exception(suite_run):
    _, out, code = suite_run
    r = record(out, "cnn_cifar10__pytorch")
    assert r["status"] == "failed" and r["error"].startswith("ValueError: boom: the model diverged (cell")
    assert code == 1


def test_a_hanging_notebook_times_out_and_the_suite_goes_on(suite_run):
    _, out, _ = suite_run
    r = record(out, "resnet50_features__pytorch")
    assert (
        r["status"] == "timeout" and f"no result after {TOY_TIMEOUT} s" in r["error"] and r["wall_s"] < 4 * TOY_TIMEOUT
    )


def test_a_dead_kernel_is_recorded_for_every_variant(suite_run):
    _, out, _ = suite_run
    for mode in ("loader", "ram"):
        r = record(out, f"densenet_chestxray__pytorch__{mode}")
        assert r["status"] == "failed" and r["variant"] == mode and r["error"]


def test_tables_plots_and_readme_hold_every_row(suite_run):
    tmp, out, _ = suite_run
    lines = (out / "results.csv").read_text().splitlines()
    assert (
        lines[0].startswith("task,framework,variant,line,matrix,precision,compilation,status")
        and len(lines) == 1 + len(BODIES) + 1  # DenseNet-121's notebook runs in two modes
    )
    assert sum(",ok," in line for line in lines) == 3
    md = (out / "results.md").read_text()
    assert "**failed**: ValueError: boom" in md and "**timeout**" in md
    for task in suite.TASKS:
        assert (out / "plots" / "tiny" / f"{headline_plot(task)}.png").stat().st_size > 1000
    readme = (tmp / "README.md").read_text()
    assert "old" not in readme and readme.endswith("after\n")
    assert "| pytorch | failed | — |" in readme and "| pytorch (loader) | failed | — |" in readme
    assert "| pytorch (ram) | failed | — |" in readme and "| pytorch | timeout | — |" in readme
    assert readme.count("| mxnet | ") == 1 and readme.count("| 0.750 |") == 2  # one ok row per kernel
    assert "| framework | add floor µs | matmul GFLOP/s |" in readme  # the operator benchmarks' own columns


def test_the_run_ends_by_building_the_side_by_side_reader(suite_run):
    _, out, _ = suite_run
    site = out / "site"
    assert all((site / f"{task}.html").exists() for task in suite.TASKS)
    index = (site / "index.html").read_text()
    assert 'title="ValueError: boom: the model diverged (cell' in index and ">timeout</span>" in index
    gru = (site / "gru_imdb.html").read_text()
    assert 'data-framework="pytorch"' in gru and 'data-framework="mxnet"' in gru and "executed</a>" in gru


def test_a_misaligned_heading_fails_the_reader_not_the_tables(tmp_path, capsys):
    for framework, heading in (("pytorch", "## Train"), ("jax", "## Training")):
        path = tmp_path / "notebooks" / "gru_imdb" / f"{framework}.ipynb"
        write_notebook(path, "gru_imdb", framework, OK)
        nb = nbformat.read(path, as_version=4)
        nb.cells.insert(0, nbformat.v4.new_markdown_cell(f"{heading}\n\nThe loop."))
        nbformat.write(nb, path)
    argv = [
        "--report-only",
        "--notebooks",
        str(tmp_path / "notebooks"),
        "--results",
        str(tmp_path / "results"),
        "--machine",
        "box",
        "--profile",
        "tiny",
        "--no-readme",
    ]
    assert run_all.main(argv) == 1
    assert (
        f"the side-by-side reader was not built: {tmp_path}/notebooks/gru_imdb/jax.ipynb: heading '## Training' "
        f"(position 1) where {tmp_path}/notebooks/gru_imdb/pytorch.ipynb has '## Train'"
    ) in capsys.readouterr().out
    assert run_all.main(argv + ["--no-site"]) == 0 and not (tmp_path / "results" / "box" / "site").exists()


def test_resume_skips_ok_records_and_reruns_the_rest(suite_run, capsys):
    tmp, out, _ = suite_run
    before = record(out, "gru_imdb__pytorch")
    code = run_all.main(
        [
            "--notebooks",
            str(tmp / "notebooks"),
            "--results",
            str(tmp / "results"),
            "--machine",
            "testbox",
            "--profile",
            "tiny",
            "--timeout",
            str(TOY_TIMEOUT),
            "--no-readme",
            "--task",
            "gru_imdb,cnn_cifar10",
            "--framework",
            "pytorch",
            "--resume",
        ]
    )
    text = capsys.readouterr().out
    assert "gru_imdb/pytorch: already ok, skipped (--resume)" in text
    assert "cnn_cifar10/pytorch: FAILED: ValueError: boom" in text and code == 1
    assert record(out, "gru_imdb__pytorch") == before


@pytest.mark.parametrize(
    "args, message",
    [
        (["--task", "mnist"], "unknown task 'mnist'; choose from: cnn_cifar10, densenet_chestxray"),
        (["--framework", "pytorch,theano"], "unknown framework 'theano'; choose from: pytorch, tensorflow"),
        (["--profile", "huge"], "unknown profile 'huge'; choose from: auto, full, cpu, tiny"),
    ],
)
def test_unknown_names_get_a_one_line_error(args, message):
    proc = subprocess.run(
        [sys.executable, str(suite.ROOT / "scripts" / "run_all.py"), *args], capture_output=True, text=True
    )
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"run_all.py: {message}" + proc.stderr.strip().split(message, 1)[1]
    ]


def test_list_shows_each_variant_with_its_kernel(capsys):
    assert run_all.main(["--list", "--profile", "tiny", "--task", "densenet_chestxray"]) == 0
    text = capsys.readouterr().out
    assert "densenet_chestxray/pytorch (loader)" in text and "densenet_chestxray/pytorch (ram)" in text
    assert "dlr-modern" in text


def test_an_interrupted_run_keeps_its_records_and_stops_the_kernel(tmp_path):
    import psutil

    write_notebook(tmp_path / "notebooks" / "cnn_cifar10" / "pytorch.ipynb", "cnn_cifar10", "pytorch", OK)
    write_notebook(
        tmp_path / "notebooks" / "gru_imdb" / "pytorch.ipynb", "gru_imdb", "pytorch", "import time\ntime.sleep(600)"
    )
    out = tmp_path / "results" / "box"
    proc = runner_process(tmp_path, site=True)
    hanging = out / ".staging" / "tiny" / "gru_imdb__pytorch" / "gru_imdb__pytorch.log"  # the run in progress
    wait_for(lambda: hanging.exists() and "Executing Cell 4" in hanging.read_text(), what="the kernel to sleep")
    children = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(signal.SIGINT)
    stdout, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in stdout
    assert json.loads((out / "records" / "tiny" / "cnn_cifar10__pytorch.json").read_text())["status"] == "ok"
    assert "cnn_cifar10,pytorch,,,,fp32,off,ok" in (out / "results.csv").read_text()
    gone, alive = psutil.wait_procs(children, timeout=10)
    assert not alive, f"left running: {[p.cmdline() for p in alive]}"
    (run,) = (out / "runs").glob("*.json")  # measured before the suite (the recorded calibration) ...
    meta = json.loads(run.read_text())
    assert meta["calibration"]["before"] == PEAKS and meta["load_before"] == RECORDED["load"]
    assert "after" not in meta["calibration"] and "ended" not in meta  # ... and not after: it never ended


def test_every_task_of_the_registry_has_its_profiles_notebooks_and_shared_weights():
    """What each task needs besides its registry entry (support/tasks.py), which the other modules read."""
    from support import params, parity

    assert set(params._PROFILES) == set(tasks.NAMES)
    assert all(set(params._PROFILES[name]) == set(tasks.PROFILES) for name in tasks.NAMES)
    for name, task in tasks.TASKS.items():
        assert {suite.notebook_framework(p.stem) for p in (suite.NOTEBOOKS / name).glob("*.ipynb")} == set(
            suite.FRAMEWORKS
        ), name
        if task.parity:
            weights, x = parity.load(name)
            assert weights and x.shape[0] > 0, name
    assert suite.variants("densenet_chestxray", "pytorch") == [{"mode": "loader"}, {"mode": "ram"}]


def test_one_registry_defines_each_framework_and_the_suite_reads_it():
    from support import frameworks, precision

    assert tuple(suite.FRAMEWORKS) == frameworks.NAMES
    for name, f in frameworks.FRAMEWORKS.items():
        assert f.environment in suite.ENVIRONMENTS and suite.label(name) == f.label
        assert (suite.measure_module(name)).exists(), f"support/measure/{name}.py is missing"
        if name == "keras":  # Keras asks its backend's framework, and its default is its backend's
            assert set(frameworks.KERAS_BACKENDS.values()) <= set(suite.GPU_PROBES)
            assert {f"keras-{b}" for b in frameworks.KERAS_BACKENDS} <= set(precision.DEFAULT_COMPILATION)
        else:  # an API style of a framework (TensorFlow's 1.x graph style) asks the framework it runs on
            assert suite.GPU_PROBES[f.gpu_probe_key] == (f.gpu_probe or frameworks.get(f.runs_on).gpu_probe)
            assert precision.default(name) == f.compilation
    assert suite.gpu_probe_key("tensorflow1", {}) == "tensorflow"
    assert suite.PROCESS_PER_DEVICE == {name for name, f in frameworks.FRAMEWORKS.items() if f.launcher is not None}
    assert suite.PROCESS_PER_DEVICE == {"pytorch", "paddle", "mindspore"}
    assert {(name, task) for (name, task), on in frameworks.TASK_COMPILATION.items() if on == "on"} == {
        ("pytorch", "resnet50_features"),
        ("paddle", "resnet50_features"),
    }
    assert {name for name, f in frameworks.FRAMEWORKS.items() if f.compilation == "on"} == {"jax", "mindspore", "mxnet"}
    assert all(precision.default(name, task) == "on" for name, task in frameworks.TASK_COMPILATION)
    # Keras's jit_compile="auto" (Trainer._resolve_auto_jit_compile): XLA on TensorFlow only where a GPU is visible
    keras_default = {
        (b, gpu): precision.default(suite.compilation_key("keras", {"backend": b}, gpu=gpu))
        for b in frameworks.KERAS_BACKENDS
        for gpu in (False, True)
    }
    assert keras_default == {
        ("tensorflow", False): "off",
        ("tensorflow", True): "on",
        ("jax", False): "on",
        ("jax", True): "on",
        ("torch", False): "off",
        ("torch", True): "off",
    }
    assert suite.compilation_key("pytorch", {}, gpu=True) == "pytorch"
    with pytest.raises(ValueError, match="unknown framework 'theano'; choose from: pytorch, tensorflow"):
        frameworks.get("theano")


def test_the_support_input_covers_the_framework_measurement_modules():
    files = {p.relative_to(suite.ROOT).as_posix() for p in suite.support_files()}
    assert {"support/timing.py", "support/measure/__init__.py", "support/measure/pytorch.py"} <= files


def test_the_mxnet_cnn_runs_once_per_api_each_from_its_own_notebook(tmp_path):
    assert suite.variants("cnn_cifar10", "mxnet") == [{"api": "gluon"}, {"api": "module"}]
    assert suite.variants("gru_imdb", "mxnet") == [{}]
    assert [suite.notebook_stem("cnn_cifar10", "mxnet", run) for run in suite.variants("cnn_cifar10", "mxnet")] == [
        "mxnet",
        "mxnet_module",
    ]
    assert suite.notebook_framework("mxnet_module") == "mxnet" and suite.label("mxnet_module") == "MXNet Module"
    assert suite.stem_variants("cnn_cifar10", "mxnet_module") == [{"api": "module"}]
    args = run_all.parse_args(
        [
            "--task",
            "cnn_cifar10",
            "--framework",
            "mxnet",
            "--profile",
            "tiny",
            "--results",
            str(tmp_path),
            "--machine",
            "box",
        ]
    )
    jobs = run_all.plan(args)
    assert [(job.variant, job.notebook.name) for job in jobs] == [
        ("gluon", "mxnet.ipynb"),
        ("module", "mxnet_module.ipynb"),
    ]
    assert all("api" not in jobs_.notebook_parameters(job, tmp_path / "r.json", parity=args.parity) for job in jobs)


def test_parity_is_passed_only_to_the_notebooks_that_have_the_step(tmp_path):
    args = run_all.parse_args(["--profile", "tiny", "--parity"])
    plan = run_all.plan(args)
    run_all.resolve_profiles(plan, args)
    jobs = {job.task: job for job in plan if job.framework == "pytorch"}  # the last variant
    passed = {
        task: jobs_.notebook_parameters(job, tmp_path / "r.json", parity=args.parity) for task, job in jobs.items()
    }
    assert {task for task, p in passed.items() if p.get("parity") is True} == {
        "cnn_cifar10",
        "gru_imdb",
        "resnet50_features",
    }
    assert passed["densenet_chestxray"] == {
        "profile": "tiny",
        "record_path": str(tmp_path / "r.json"),
        "mode": "ram",
        "data": "auto",
    }
    plain = run_all.parse_args(["--profile", "tiny"])
    assert "parity" not in jobs_.notebook_parameters(jobs["cnn_cifar10"], tmp_path / "r.json", parity=plain.parity)
    assert "data" not in passed["resnet50_features"]  # its notebooks declare none: papermill's inspection says so


# --- faults injected into a run ---------------------------------------------------------------------


def runner_args(tmp_path, *extra):
    return [
        "--notebooks",
        str(tmp_path / "notebooks"),
        "--results",
        str(tmp_path / "results"),
        "--machine",
        "box",
        "--profile",
        "tiny",
        "--no-readme",
        "--no-site",
        "--timeout",
        "120",
        *extra,
    ]


def default_interrupt():
    """In the runner's process, before it starts: Ctrl-C raises KeyboardInterrupt, as in a terminal. A shell
    that starts the tests in the background (`make test &`, a script) leaves SIGINT ignored in them, and
    Python keeps an ignored SIGINT, so the interrupt tests would wait on a runner that never hears it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def runner_process(tmp_path, *extra, site=False):
    args = [arg for arg in runner_args(tmp_path, *extra) if not (site and arg == "--no-site")]
    return subprocess.Popen(
        [sys.executable, str(suite.ROOT / "scripts" / "run_all.py"), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_interrupt,
    )


def run_files(out, run=None):
    """The record, executed notebook, log and trace of one run (the PyTorch GRU's unless named), as bytes (None: no
    such file; a fake notebook profiles nothing)."""
    run = run or results.Identity("gru_imdb", "pytorch")
    return {k: p.read_bytes() if p.exists() else None for k, p in results.Layout(out).paths("tiny", run).items()}


def wait_for(predicate, seconds=120, what="the condition"):
    deadline = time.time() + seconds
    while not predicate():
        assert time.time() < deadline, f"waited {seconds} s for {what}"
        time.sleep(0.3)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_rerun_leaves_the_previous_record_notebook_and_log(tmp_path, sig):
    import psutil

    notebook = tmp_path / "notebooks" / "gru_imdb" / "pytorch.ipynb"
    write_notebook(notebook, "gru_imdb", "pytorch", OK)
    out = tmp_path / "results" / "box"
    assert run_all.main(runner_args(tmp_path)) == 0
    before = run_files(out)
    write_notebook(notebook, "gru_imdb", "pytorch", "import time\ntime.sleep(600)")
    proc = runner_process(tmp_path)
    log = out / ".staging" / "tiny" / "gru_imdb__pytorch" / "gru_imdb__pytorch.log"
    wait_for(lambda: log.exists() and "Executing Cell 4" in log.read_text(), what="the kernel to reach the sleep")
    children = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(sig)
    stdout, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in stdout
    assert run_files(out) == before  # byte for byte
    assert not (out / ".staging" / "tiny" / "gru_imdb__pytorch").exists()
    gone, alive = psutil.wait_procs(children, timeout=10)
    assert not alive, f"left running: {[p.cmdline() for p in alive]}"


def test_a_failed_rerun_shows_its_own_error_and_keeps_the_ok_record_it_replaces(tmp_path):
    notebook = tmp_path / "notebooks" / "gru_imdb" / "pytorch.ipynb"
    out = tmp_path / "results" / "box"
    write_notebook(notebook, "gru_imdb", "pytorch", OK)
    assert run_all.main(runner_args(tmp_path)) == 0
    ok = json.loads(run_files(out)["record"])
    write_notebook(notebook, "gru_imdb", "pytorch", "raise ValueError('first failure')")
    assert run_all.main(runner_args(tmp_path)) == 1
    first = json.loads(run_files(out)["record"])
    assert first["status"] == "failed" and first["error"].startswith("ValueError: first failure")
    assert first["superseded"] == "records/tiny/superseded/gru_imdb__pytorch.json"
    assert json.loads((out / first["superseded"]).read_text()) == ok  # the measurement is not lost
    write_notebook(notebook, "gru_imdb", "pytorch", "import os\nos._exit(3)")  # dies without an error cell
    assert run_all.main(runner_args(tmp_path)) == 1
    second = json.loads(run_files(out)["record"])
    assert second["status"] == "failed" and "first failure" not in second["error"]  # not the stale notebook's
    assert json.loads((out / first["superseded"]).read_text()) == ok


def test_resume_reruns_a_notebook_whose_inputs_changed_and_says_why(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(suite, "chosen_lock_sets", lambda: {"modern": "modern", "legacy": "legacy"})
    for task in ("gru_imdb", "cnn_cifar10"):
        write_notebook(tmp_path / "notebooks" / task / "pytorch.ipynb", task, "pytorch", OK)
    assert run_all.main(runner_args(tmp_path)) == 0
    record = json.loads(run_files(tmp_path / "results" / "box")["record"])
    assert record["inputs"]["parameters"] == {"profile": "tiny", "data": "auto"} and record["timed"] is True
    assert set(record["inputs"]) == {"parameters", "notebook", "support", "pins", "lock_set", "hardware", "timed"}
    assert record["inputs"]["lock_set"] == "modern"
    capsys.readouterr()
    write_notebook(tmp_path / "notebooks" / "gru_imdb" / "pytorch.ipynb", "gru_imdb", "pytorch", OK + "\n# edited")
    assert run_all.main(runner_args(tmp_path, "--resume")) == 0
    text = capsys.readouterr().out
    assert "cnn_cifar10/pytorch: already ok, skipped (--resume)" in text
    assert "gru_imdb/pytorch: runs again (--resume): the notebook changed" in text
    assert run_all.main(runner_args(tmp_path, "--resume", "--data", "synthetic", "--task", "gru_imdb")) == 0
    assert "runs again (--resume): its parameters changed (data: 'auto' -> 'synthetic')" in capsys.readouterr().out


def test_a_second_runner_on_the_same_results_is_refused_naming_the_holder(tmp_path):
    out = tmp_path / "results" / "box"
    with results.hold(results.Layout(out), ["--profile", "tiny"]):
        proc = subprocess.run(
            [sys.executable, str(suite.ROOT / "scripts" / "run_all.py"), *runner_args(tmp_path)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"run_all.py: {out} is in use by another runner (pid {__import__('os').getpid()} on "
        f"{__import__('socket').gethostname()} since " + proc.stderr.split(" since ")[1].strip()
    )
    assert "run_all.py --profile tiny); two runs on one machine share its CPU" in proc.stderr
    assert run_all.main(runner_args(tmp_path, "--report-only")) == 0  # released: the next one goes ahead


def test_concurrent_smoke_runs_are_recorded_as_not_timed(tmp_path):
    for task in ("gru_imdb", "cnn_cifar10"):
        write_notebook(tmp_path / "notebooks" / task / "pytorch.ipynb", task, "pytorch", OK)
    readme = tmp_path / "README.md"
    readme.write_text("<!-- results:start -->\n<!-- results:end -->\n")
    args = runner_args(tmp_path, "--jobs", "2")
    args[args.index("--no-readme")] = f"--readme={readme}"
    assert run_all.main(args) == 0
    out = tmp_path / "results" / "box"
    for key in ("gru_imdb__pytorch", "cnn_cifar10__pytorch"):
        record = json.loads((out / "records" / "tiny" / f"{key}.json").read_text())
        assert record["status"] == "ok" and record["timed"] is False and record["inputs"]["timed"] is False
    assert (out / "results.md").read_text().count("| pytorch | ok | not timed | — |") == 2
    assert readme.read_text().count("| pytorch | not timed | — | — | — | — |") == 2  # no time, rate or MFU
    csv = (out / "results.csv").read_text()
    assert csv.count(",ok,tiny,synthetic,False,") == 2 and ",batch,,,," in csv


def test_a_notebook_gets_only_the_parameters_it_declares(tmp_path):
    write_notebook(
        tmp_path / "notebooks" / "gru_imdb" / "pytorch.ipynb",
        "gru_imdb",
        "pytorch",
        OK,
        declared="profile = 'auto'\nrecord_path = None",
    )
    write_notebook(
        tmp_path / "notebooks" / "cnn_cifar10" / "pytorch.ipynb",
        "cnn_cifar10",
        "pytorch",
        OK,
        declared="profile = 'auto'\ndata = 'auto'",
    )
    assert run_all.main(runner_args(tmp_path, "--data", str(tmp_path))) == 1
    out = tmp_path / "results" / "box"
    gru = json.loads((out / "records" / "tiny" / "gru_imdb__pytorch.json").read_text())
    assert gru["status"] == "ok" and gru["inputs"]["parameters"] == {"profile": "tiny"}
    cnn = json.loads((out / "records" / "tiny" / "cnn_cifar10__pytorch.json").read_text())
    assert cnn["status"] == "failed" and cnn["error"] == (
        f"{tmp_path}/notebooks/cnn_cifar10/pytorch.ipynb declares no record_path in its cell tagged 'parameters'; "
        "every notebook declares profile, record_path"
    )


def test_a_dataset_path_is_passed_through_absolute(tmp_path, monkeypatch):
    (tmp_path / "data").mkdir()
    monkeypatch.chdir(tmp_path)
    args = run_all.parse_args(["--profile", "tiny", "--data", "data", "--data", "gru_imdb=synthetic"])
    assert args.data == {
        "cnn_cifar10": str(tmp_path / "data"),
        "densenet_chestxray": str(tmp_path / "data"),
        "gru_imdb": "synthetic",
    }
    jobs = {job.task: job for job in run_all.plan(args) if job.framework == "pytorch"}
    run_all.resolve_profiles(list(jobs.values()), args)
    assert jobs_.notebook_parameters(jobs["cnn_cifar10"], tmp_path / "r.json", parity=args.parity)["data"] == str(
        tmp_path / "data"
    )


@pytest.mark.parametrize(
    "value, message",
    [
        (
            "/nowhere/cifar",
            "--data /nowhere/cifar: /nowhere/cifar does not exist; give auto, real, synthetic, a folder "
            "holding the datasets (cifar-10-python.tar.gz, imdb.npz, chestxray14/), or TASK=PATH",
        ),
        ("resnet50_features=/tmp", "--data resnet50_features=/tmp: the resnet50_features notebooks read no dataset"),
    ],
)
def test_a_bad_data_argument_is_one_line(value, message):
    proc = subprocess.run(
        [sys.executable, str(suite.ROOT / "scripts" / "run_all.py"), "--data", value, "--list"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and message in proc.stderr


def test_auto_on_a_gpu_machine_gives_full_only_to_frameworks_that_see_it(monkeypatch, capsys):
    from support import env

    monkeypatch.setattr(env, "gpu_names", lambda: ["NVIDIA H100 80GB HBM3"])
    monkeypatch.setattr(suite, "chosen_lock_sets", lambda: {"modern": "modern", "legacy": "legacy"})  # CPU sets
    seen = {
        "pytorch": (True, ""),
        "jax": (True, ""),
        "tensorflow": (False, ""),
        "mxnet": (False, ""),
        "chainer": (False, "the probe failed: ImportError: cupy"),
        "paddle": (False, ""),
        "mindspore": (False, ""),
    }
    monkeypatch.setattr(run_all, "probe_gpu", lambda key: seen[key])
    assert run_all.main(["--list", "--task", "gru_imdb"]) == 0
    text = capsys.readouterr().out
    for line in (
        "gru_imdb/pytorch [full]",
        "gru_imdb/keras (torch) [full]",
        "gru_imdb/keras (jax) [full]",
        "gru_imdb/jax [full]",
        "gru_imdb/tensorflow [cpu]",
        "gru_imdb/keras (tensorflow) [cpu]",
        "gru_imdb/mxnet [cpu]",
        "gru_imdb/chainer [cpu]",
        "gru_imdb/tensorflow1 [cpu]",  # TensorFlow's 1.x graph style asks TensorFlow's probe
        "gru_imdb/paddle [cpu]",
        "gru_imdb/mindspore [cpu]",
        "profile auto: full where the framework computes on the GPU (NVIDIA H100 80GB HBM3 x1), cpu elsewhere",
        "tensorflow sees no GPU: its notebooks run the cpu profile; run `python3 -m scripts.setup_envs` on "
        "this machine: where nvidia-smi answers it builds the CUDA lock sets",
        "mxnet sees no GPU: its notebooks run the cpu profile; MXNet 1.9.1, its last release, has GPU wheels "
        "only up to mxnet-cu117",
        "chainer sees no GPU (the probe failed: ImportError: cupy): its notebooks run the cpu profile",
    ):
        assert line in text, line
    assert "pytorch sees no GPU" not in text and "notebook run(s), profile full, cpu," in text


def test_a_line_built_for_the_gpu_that_cannot_compute_there_stops_with_its_cause(tmp_path, monkeypatch):
    """On CUDA lock sets a probe that fails is an error in that line's record, not a silent cpu run; a line with
    no GPU build (MXNet) runs on the CPU with the reason in its record."""
    from support import env

    monkeypatch.setattr(env, "gpu_names", lambda: ["NVIDIA H100 80GB HBM3"])
    monkeypatch.setattr(
        suite,
        "chosen_lock_sets",
        lambda: {"modern": "modern-cuda", "tensorflow": "tensorflow-cuda", "legacy": "legacy-cuda"},
    )
    failing = "the probe failed: RuntimeError: The NVIDIA driver on your system is too old (found version 12080)"
    seen = {"pytorch": (False, failing), "mxnet": (False, "")}
    monkeypatch.setattr(run_all, "probe_gpu", lambda key: seen[key])
    args = run_all.parse_args(["--task", "gru_imdb", "--framework", "pytorch,mxnet"])
    jobs = run_all.plan(args)
    lines = run_all.resolve_profiles(jobs, args)
    pytorch, mxnet = jobs
    assert pytorch.stopped.startswith(
        "PyTorch cannot compute on the GPU although its environment was built for it "
        f"(lock set modern-cuda): {failing}; likely a driver older than CUDA 13 needs"
    )
    assert f"pytorch: stopped: {pytorch.stopped}" in lines and mxnet.stopped is None
    assert mxnet.profile == "cpu" and mxnet.cpu_reason.startswith("MXNet runs on the CPU here: MXNet 1.9.1")
    out = tmp_path / "results"
    record = run_all.run_job(
        pytorch, run_all.parse_args(["--results", str(out), "--machine", "box"]), results.Layout(out), run_all.Active()
    )
    assert record["status"] == "failed" and record["error"] == pytorch.stopped
    assert record["inputs"]["lock_set"] == "modern-cuda"


def test_every_frameworks_gpu_probe_runs_in_its_environment():
    """The probes only decide on a GPU machine: run each here so that none of them is first run there. Each
    runs without an error; without a GPU each says False (with one, whether its build computes there)."""
    from support import env

    for key in suite.GPU_PROBES:
        sees, detail = run_all.probe_gpu(key)
        assert detail == "" and isinstance(sees, bool), f"{key}: {detail}"
        assert env.gpu_names() or not sees, f"{key} sees a GPU where nvidia-smi lists none"


def test_mixed_profiles_in_the_readme_table_are_labelled(tmp_path):
    from scripts import report
    from support import params, records, timing

    for framework, profile in (("pytorch", "full"), ("tensorflow", "cpu"), ("jax", "full"), ("jax", "tiny")):
        records.write(
            tmp_path / "records" / profile / f"gru_imdb__{framework}.json",
            task="gru_imdb",
            framework=framework,
            params=params.load("gru_imdb", profile),
            data="synthetic",
            timing=timing.benchmark(lambda: None, 2, samples=4),
            metrics={"accuracy": 0.9},
            steps=timing.steady_state(lambda: None, steps=1, samples=4),
            first_step_s=0.1,
            curve=[0.9],
            n_parameters=1,
            environment={"machine": "box"},
        )
    table = report.readme_table(report.load_rows(tmp_path), "box")
    assert "compare times only between lines of one profile" in table
    lines = [line for line in table.splitlines() if line.startswith("| ")]
    assert lines[0].startswith("| framework | profile | step ms |")
    assert [line.split(" | ")[:2] for line in lines[1:]] == [
        ["| pytorch", "full"],
        ["| tensorflow", "cpu"],
        ["| jax", "full"],
    ]


def test_concurrent_kernels_share_the_cores_and_wait_passively(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 4)
    shared = jobs_.kernel_environment(jobs=2)
    assert {
        k: shared[k] for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY")
    } == {"OMP_NUM_THREADS": "2", "OPENBLAS_NUM_THREADS": "2", "MKL_NUM_THREADS": "2", "OMP_WAIT_POLICY": "PASSIVE"}
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert "OMP_WAIT_POLICY" not in jobs_.kernel_environment(jobs=1)  # a timed run: the frameworks' own choice


def test_only_picks_the_planned_runs_whose_keys_match(capsys):
    args = run_all.parse_args(
        [
            "--profile",
            "tiny",
            "--precision",
            "fp32,bf16",
            "--only",
            "cnn_cifar10__mxnet__*-bf16,gru_imdb__pytorch",
            "--only",
            "densenet_chestxray__jax__ram",
        ]
    )
    assert [job.key for job in run_all.plan(args)] == [
        "cnn_cifar10__mxnet__gluon-bf16",
        "cnn_cifar10__mxnet__module-bf16",
        "densenet_chestxray__jax__ram",
        "gru_imdb__pytorch",
    ]
    assert run_all.main(["--list", "--profile", "tiny", "--only", "gru_imdb__jax"]) == 0
    assert (
        capsys.readouterr().out.splitlines()[-1]
        == "  gru_imdb/jax [tiny]: gru_imdb__jax, notebooks/gru_imdb/jax.ipynb in kernel dlr-modern"
    )


def test_an_only_pattern_that_matches_no_planned_run_is_one_line(capsys):
    assert run_all.main(["--list", "--profile", "tiny", "--only", "gru_imdb__jax,cnn_cifar10__pytorch__bf16"]) == 2
    assert capsys.readouterr().err == (
        "run_all.py: --only cnn_cifar10__pytorch__bf16: no planned notebook run has a key that matches it (--list "
        "shows the keys); add the --task, --framework, --precision, --compilation, --devices or --batch-size that "
        "plan it\n"
    )


def test_a_precision_whose_kernels_this_cpu_lacks_is_recorded_unsupported_in_the_frameworks_words(
    tmp_path, capsys, monkeypatch
):
    """A framework that still fails inside its own kernels for the ISA (MXNet's oneDNN without a bfloat16
    convolution below AVX-512) is recorded unsupported with its words, never as a failed run; the same error in
    the fp32 baseline is a failure. The run's output names the CPU and the peak it did not calibrate."""
    skipped = {**RECORDED, "errors": {"cpu/bf16": "not calibrated: this CPU has no bfloat16 arithmetic (AVX2; ...)"}}
    monkeypatch.setattr(run_all, "calibrate", lambda gpu: skipped)
    body = "raise RuntimeError('MXNetError: could not create a primitive descriptor iterator')"
    write_notebook(
        tmp_path / "notebooks" / "gru_imdb" / "pytorch.ipynb",
        "gru_imdb",
        "pytorch",
        body,
        declared=DECLARED + "\nprecision = 'fp32'\ncompilation = 'auto'",
    )
    assert run_all.main(runner_args(tmp_path, "--precision", "fp32,bf16")) == 1  # the fp32 baseline failed
    out = tmp_path / "results" / "box"
    bf16, fp32 = record(out, "gru_imdb__pytorch__bf16"), record(out, "gru_imdb__pytorch")
    assert fp32["status"] == "failed"
    assert bf16["status"] == "unsupported" and bf16["precision"] == "bf16"
    assert bf16["error"].startswith("the framework's kernels have no bf16 primitive on this CPU (")
    assert "RuntimeError: MXNetError: could not create a primitive descriptor iterator" in bf16["error"]
    printed = capsys.readouterr().out
    assert "  cpu: " in printed and "  cpu/bf16: not calibrated: this CPU has no bfloat16 arithmetic" in printed
    assert f"UNSUPPORTED: {bf16['error']}" in printed


@pytest.mark.parametrize(
    "sets, compiled_one, compiled_two",
    [
        ({"modern": "modern", "legacy": "legacy"}, "on", "on"),  # TensorFlow's CPU build: auto is tf.function
        ({"modern": "modern-cuda", "tensorflow": "tensorflow-cuda", "legacy": "legacy-cuda"}, "off", "on"),
    ],
)
def test_keras_on_tensorflow_has_its_gpu_default_only_on_one_gpu_it_computes_on(
    monkeypatch, sets, compiled_one, compiled_two
):
    """Keras's jit_compile="auto" is XLA on TensorFlow where it computes on a GPU, off under a strategy (several
    devices): the variant that differs from that default is the one the runner plans, as the notebook resolves it."""
    from support import env

    monkeypatch.setattr(env, "gpu_names", lambda: ["NVIDIA H100 80GB HBM3"] * 2)  # two: --devices 2 fits
    monkeypatch.setattr(suite, "chosen_lock_sets", lambda: sets)
    args = run_all.parse_args(
        ["--task", "densenet_chestxray", "--framework", "keras", "--compilation", "auto,on,off", "--devices", "1,2"]
    )
    planned = [
        job.matrix
        for job in run_all.plan(args)
        if job.parameters["backend"] == "tensorflow" and job.parameters["mode"] == "ram"
    ]
    assert sorted(planned, key=repr) == sorted(
        [{}, {"devices": 2}, {"compilation": compiled_one}, {"compilation": compiled_two, "devices": 2}], key=repr
    )
