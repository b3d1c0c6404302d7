"""scripts/run_all.py: failures are recorded, the others kept, the tables and README written."""
import json
import subprocess
import sys

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from scripts import run_all, suite

OK = """
import numpy as np
from support import params, records, timing
P = params.load(TASK, profile)
summary = timing.benchmark(lambda: np.ones(10).sum(), repeats=3, warmup=1, samples=10)
records.write(record_path, task=TASK, framework=FRAMEWORK, params=P, data="synthetic", timing=summary,
              metrics={METRIC: 0.75}, n_parameters=123, environment={"numpy": np.__version__, "machine": "test"})
"""
BODIES = {
    ("gru_imdb", "pytorch"): OK,
    ("gru_imdb", "mxnet"): "import numpy\nassert numpy.__version__ == '1.23.5', numpy.__version__\n" + OK,
    ("cnn_cifar10", "pytorch"): "raise ValueError('boom: the model diverged')",
    ("resnet50_features", "pytorch"): "import time\ntime.sleep(600)",
    ("densenet_chestxray", "pytorch"): "import os\nos._exit(1)",
}
METRICS = {"gru_imdb": "accuracy", "cnn_cifar10": "accuracy", "densenet_chestxray": "auc",
           "resnet50_features": "images_per_s"}


def write_notebook(path, task, framework, body):
    nb = new_notebook()
    parameters = new_code_cell("profile = 'auto'\ndata = 'auto'\nrecord_path = None\nmode = 'loader'")
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
    code = run_all.main(["--notebooks", str(tmp / "notebooks"), "--results", str(tmp / "results"),
                         "--machine", "testbox", "--profile", "tiny", "--timeout", "30", "--readme", str(readme)])
    return tmp, tmp / "results" / "testbox", code


def record(out, key):
    return json.loads((out / "records" / "tiny" / f"{key}.json").read_text())


def test_ok_notebooks_write_their_records_in_both_kernels(suite_run):
    _, out, _ = suite_run
    for key in ("gru_imdb__pytorch", "gru_imdb__mxnet"):
        r = record(out, key)
        assert r["status"] == "ok" and r["metrics"]["accuracy"] == 0.75 and r["profile"] == "tiny"
        assert (out / r["executed_notebook"]).exists() and r["wall_s"] > 0
    assert record(out, "gru_imdb__mxnet")["environment"]["numpy"] == "1.23.5"       # the legacy kernel
    assert record(out, "gru_imdb__pytorch")["environment"]["numpy"].startswith("2.")


def test_a_raising_notebook_is_recorded_with_its_exception(suite_run):
    _, out, code = suite_run
    r = record(out, "cnn_cifar10__pytorch")
    assert r["status"] == "failed" and r["error"].startswith("ValueError: boom: the model diverged (cell")
    assert code == 1


def test_a_hanging_notebook_times_out_and_the_suite_goes_on(suite_run):
    _, out, _ = suite_run
    r = record(out, "resnet50_features__pytorch")
    assert r["status"] == "timeout" and "30 s" in r["error"] and r["wall_s"] < 120


def test_a_dead_kernel_is_recorded_for_every_variant(suite_run):
    _, out, _ = suite_run
    for mode in ("loader", "ram"):
        r = record(out, f"densenet_chestxray__pytorch__{mode}")
        assert r["status"] == "failed" and r["variant"] == mode and r["error"]


def test_tables_plots_and_readme_hold_every_row(suite_run):
    tmp, out, _ = suite_run
    lines = (out / "results.csv").read_text().splitlines()
    assert lines[0].startswith("task,framework,variant,status") and len(lines) == 1 + 6
    assert sum(",ok," in line for line in lines) == 2
    md = (out / "results.md").read_text()
    assert "**failed**: ValueError: boom" in md and "**timeout**" in md
    for task in suite.TASKS:
        assert (out / "plots" / "tiny" / f"{task}.png").stat().st_size > 1000
    readme = (tmp / "README.md").read_text()
    assert "old" not in readme and readme.endswith("after\n")
    assert "| pytorch | failed | failed | failed | timeout | " in readme
    assert "| mxnet | - | - | - | - |" in readme and "(0.750) |" in readme


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
    argv = ["--report-only", "--notebooks", str(tmp_path / "notebooks"), "--results", str(tmp_path / "results"),
            "--machine", "box", "--profile", "tiny", "--no-readme"]
    assert run_all.main(argv) == 1
    assert (f"the side-by-side reader was not built: {tmp_path}/notebooks/gru_imdb/jax.ipynb: heading '## Training' "
            f"(position 1) where {tmp_path}/notebooks/gru_imdb/pytorch.ipynb has '## Train'") in capsys.readouterr().out
    assert run_all.main(argv + ["--no-site"]) == 0 and not (tmp_path / "results" / "box" / "site").exists()


def test_resume_skips_ok_records_and_reruns_the_rest(suite_run, capsys):
    tmp, out, _ = suite_run
    before = record(out, "gru_imdb__pytorch")
    code = run_all.main(["--notebooks", str(tmp / "notebooks"), "--results", str(tmp / "results"),
                         "--machine", "testbox", "--profile", "tiny", "--timeout", "30", "--no-readme",
                         "--task", "gru_imdb,cnn_cifar10", "--framework", "pytorch", "--resume"])
    text = capsys.readouterr().out
    assert "gru_imdb/pytorch: already ok, skipped (--resume)" in text
    assert "cnn_cifar10/pytorch: FAILED: ValueError: boom" in text and code == 1
    assert record(out, "gru_imdb__pytorch") == before


@pytest.mark.parametrize("args, message", [
    (["--task", "mnist"], "unknown task 'mnist'; choose from: cnn_cifar10, densenet_chestxray"),
    (["--framework", "pytorch,theano"], "unknown framework 'theano'; choose from: pytorch, tensorflow"),
    (["--profile", "huge"], "unknown profile 'huge'; choose from: auto, full, cpu, tiny"),
])
def test_unknown_names_get_a_one_line_error(args, message):
    proc = subprocess.run([sys.executable, str(suite.ROOT / "scripts" / "run_all.py"), *args],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [f"run_all.py: {message}" +
                                                                          proc.stderr.strip().split(message, 1)[1]]


def test_list_shows_each_variant_with_its_kernel(capsys):
    assert run_all.main(["--list", "--profile", "tiny", "--task", "densenet_chestxray"]) == 0
    text = capsys.readouterr().out
    assert "densenet_chestxray/pytorch (loader)" in text and "densenet_chestxray/pytorch (ram)" in text
    assert "dlr-modern" in text


def test_an_interrupted_run_keeps_its_records_and_stops_the_kernel(tmp_path):
    import signal
    import time

    import psutil

    write_notebook(tmp_path / "notebooks" / "cnn_cifar10" / "pytorch.ipynb", "cnn_cifar10", "pytorch", OK)
    write_notebook(tmp_path / "notebooks" / "gru_imdb" / "pytorch.ipynb", "gru_imdb", "pytorch",
                   "import time\ntime.sleep(600)")
    out = tmp_path / "results" / "box"
    proc = subprocess.Popen([sys.executable, str(suite.ROOT / "scripts" / "run_all.py"), "--notebooks",
                             str(tmp_path / "notebooks"), "--results", str(tmp_path / "results"), "--machine", "box",
                             "--profile", "tiny", "--no-readme"], stdout=subprocess.PIPE, text=True)
    hanging = out / "logs" / "tiny" / "gru_imdb__pytorch.log"
    deadline = time.time() + 120
    while not hanging.exists() and time.time() < deadline:
        time.sleep(0.5)
    time.sleep(8)                                    # the kernel is up and sleeping
    children = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(signal.SIGINT)
    stdout, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in stdout
    assert json.loads((out / "records" / "tiny" / "cnn_cifar10__pytorch.json").read_text())["status"] == "ok"
    assert "cnn_cifar10,pytorch,,ok" in (out / "results.csv").read_text()
    gone, alive = psutil.wait_procs(children, timeout=10)
    assert not alive, f"left running: {[p.cmdline() for p in alive]}"


def test_the_runner_and_support_agree_on_tasks_and_profiles():
    # suite.py keeps its own copy because setup_envs.py imports it with any Python, before numpy exists.
    from support import params
    assert sorted(suite.TASKS) == sorted(params.TASKS) and suite.PROFILES == params.PROFILES


def test_the_mxnet_cnn_runs_once_per_api():
    assert suite.variants("cnn_cifar10", "mxnet") == [{"api": "gluon"}, {"api": "module"}]
    assert suite.variants("gru_imdb", "mxnet") == [{}]


def test_parity_is_passed_only_to_the_notebooks_that_have_the_step(tmp_path):
    args = run_all.parse_args(["--profile", "tiny", "--parity"])
    jobs = {job.task: job for job in run_all.plan(args) if job.framework == "pytorch"}   # the last variant
    passed = {task: run_all.notebook_parameters(job, args, tmp_path / "r.json") for task, job in jobs.items()}
    assert {task for task, p in passed.items() if p.get("parity") is True} == {"cnn_cifar10", "gru_imdb",
                                                                              "resnet50_features"}
    assert passed["densenet_chestxray"] == {"profile": "tiny", "record_path": str(tmp_path / "r.json"),
                                            "mode": "ram", "data": "auto"}
    plain = run_all.parse_args(["--profile", "tiny"])
    assert "parity" not in run_all.notebook_parameters(jobs["cnn_cifar10"], plain, tmp_path / "r.json")
