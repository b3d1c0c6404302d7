"""scripts/device_check.py and its parts (device_run, notebook_exec, device_env, device_probes): notebooks run
without papermill, one failure or hang never stops the rest, the budget skips what would not fit, and every run's
record is the runner's (jobs.outcome, results.finalize). Toy notebooks in tmp_path; standard library and numpy only."""

import json
import os
import signal
import sys
import tarfile
import time
from pathlib import Path

import pytest

from scripts import device_check as dc
from scripts import device_env, device_probes, device_run, jobs, notebook_exec, results, suite
from support import params, records


def notebook(path: Path, *cells: str, tagged: int | None = 0) -> Path:
    """A notebook of code cells (a markdown one first); cell `tagged` carries the `parameters` tag."""
    nb = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {},
        "cells": [{"cell_type": "markdown", "metadata": {}, "source": ["# A toy\n"]}]
        + [
            {
                "cell_type": "code",
                "execution_count": None,
                "outputs": [],
                "source": source,
                "metadata": {"tags": ["parameters"]} if i == tagged else {},
            }
            for i, source in enumerate(cells)
        ],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb))
    return path


def check_for(tmp_path: Path, budget_s: float = 120) -> device_run.Check:
    out = tmp_path / "out"
    out.mkdir()
    check = device_run.Check(out=out, results=tmp_path / "work" / "results" / "toy-machine", budget_s=budget_s)
    check.results.mkdir(parents=True)
    check.child_env = {**os.environ, "PYTHONPATH": str(suite.ROOT), "PYTHONUNBUFFERED": "1"}
    return check


def job(nb: Path, task="cnn_cifar10", label="pytorch", parameters=None, **kw) -> dc.Planned:
    framework = "keras" if label.startswith("keras") else label
    return dc.Planned(jobs.Job(task, framework, parameters or {}, nb, profile="tiny", data="synthetic"), label, **kw)


def stopped(task: str = "cnn_cifar10", framework: str = "pytorch") -> str:
    """A toy notebook's record: a combination it cannot run (records.write_stopped), the simplest valid record."""
    return (
        "from support import params, records, precision\n"
        f"P = params.load({task!r}, profile)\n"
        f"records.write_stopped(record_path, task={task!r}, framework={framework!r}, params=P,\n"
        "    environment={'machine': 'toy'}, precision='bf16', compilation='off', status='unsupported',\n"
        "    reason='a toy cannot', variant='')\n"
    )


def test_parameters_are_injected_after_the_tagged_cell_as_papermill_does(tmp_path):
    nb = json.loads(notebook(tmp_path / "a.ipynb", "profile = 'auto'\nrecord_path = None", "x = 1").read_text())
    injected = notebook_exec.inject_parameters(nb, {"profile": "tiny", "record_path": "/r.json", "parity": True})
    sources = [suite.cell_source(c) for c in injected["cells"]]
    assert sources[2] == "# Parameters\nprofile = 'tiny'\nrecord_path = '/r.json'\nparity = True\n"
    assert injected["cells"][2]["metadata"]["tags"] == ["injected-parameters"]
    assert sources[1].startswith("profile = 'auto'") and sources[3] == "x = 1"
    again = notebook_exec.inject_parameters(injected, {"profile": "full"})  # an earlier injected cell is replaced
    assert [suite.cell_source(c) for c in again["cells"]].count("# Parameters\nprofile = 'full'\n") == 1
    assert len(again["cells"]) == len(injected["cells"])
    untagged = notebook_exec.inject_parameters(
        json.loads(notebook(tmp_path / "b.ipynb", "x = 1", tagged=None).read_text()), {"profile": "tiny"}
    )
    assert suite.cell_source(untagged["cells"][0]).startswith("# Parameters")
    assert suite.declared_parameters(nb) == ["profile", "record_path"]


def test_a_toy_notebook_runs_in_a_child_with_its_parameters(tmp_path):
    marker = tmp_path / "marker.txt"
    nb = notebook(
        tmp_path / "nb" / "toy.ipynb",
        "profile = 'auto'\nrecord_path = None\nmarker = None",
        "%matplotlib inline\nimport os\n!echo skipped\ndisplay('shown by display')",
        "class Thing:\n    pass\nimport pickle\nthing = pickle.loads(pickle.dumps(Thing()))",  # __main__.Thing
        "from pathlib import Path\nPath(marker).write_text(f'{profile} {os.getcwd()}')\n6 * 7",
    )
    check = check_for(tmp_path)
    executed, log = tmp_path / "executed.ipynb", tmp_path / "toy.log"
    status, error = device_run.execute(
        check, nb, executed, log, {"profile": "tiny", "marker": str(marker)}, check.child_env, timeout=60
    )
    assert (status, error) == ("ok", None), log.read_text()
    assert marker.read_text() == f"tiny {nb.parent}"  # the parameter reached it; cwd: its folder
    text = log.read_text()
    assert "shown by display" in text and "42" in text and "skipped" not in text
    cells = json.loads(executed.read_text())["cells"]
    assert cells[2]["metadata"]["tags"] == ["injected-parameters"]
    assert cells[-1]["outputs"] == [{"output_type": "stream", "name": "stdout", "text": "42\n"}]


def test_a_raising_cell_fails_its_run_with_its_error_line_and_the_next_run_still_happens(tmp_path):
    first = notebook(
        tmp_path / "one" / "pytorch.ipynb",
        "profile = 'auto'\nrecord_path = None",
        "print('before')",
        "raise ValueError('the toy broke')",
        "print('never')",
    )
    marker = tmp_path / "second-ran"
    second = notebook(
        tmp_path / "two" / "pytorch.ipynb",
        "profile = 'auto'\nrecord_path = None",
        f"open({str(marker)!r}, 'w').close()",
        stopped("gru_imdb"),
    )
    check = check_for(tmp_path)
    dc.run_jobs(check, [job(first), job(second, task="gru_imdb")])
    runs = json.loads((check.out / "summary.json").read_text())["runs"]
    assert [r["status"] for r in runs] == ["failed", "unsupported"]  # a stopped record is no failure
    assert runs[0]["error"] == "ValueError: the toy broke (cell 4)"
    assert marker.exists()
    record = records.read(check.results / "records" / "tiny" / "cnn_cifar10__pytorch.json")
    assert record["status"] == "failed" and record["error"] == runs[0]["error"]
    assert record["log"] == "logs/tiny/cnn_cifar10__pytorch.log"
    assert "the toy broke" in (check.out / "device_check.log").read_text()
    with tarfile.open(check.out / "records.tar.gz") as tar:
        names = tar.getnames()
    assert "results/toy-machine/records/tiny/cnn_cifar10__pytorch.json" in names
    assert "results/toy-machine/logs/tiny/gru_imdb__pytorch.log" in names
    assert "results/toy-machine/executed/tiny/cnn_cifar10/pytorch.ipynb" in names
    assert not [name for name in names if results.STAGING in name]  # no run in progress is packed


def test_a_runs_stored_record_is_exactly_what_results_finalize_writes(tmp_path, monkeypatch):
    nb = notebook(
        tmp_path / "keras.ipynb",
        "profile = 'auto'\nrecord_path = None\nbackend = 'tensorflow'",
        stopped(framework="keras"),
    )
    written, finalize = [], results.finalize
    monkeypatch.setattr(
        results, "finalize", lambda *args, **kwargs: written.append(finalize(*args, **kwargs)) or written[-1]
    )
    check = check_for(tmp_path)
    planned = job(nb, label="keras-jax", parameters={"backend": "jax"}, override="epochs=1")
    dc.run_jobs(check, [planned])
    path = check.layout.record("tiny", planned.job.identity)
    stored = json.loads(path.read_text())
    assert [stored] == written and stored["status"] == "unsupported"
    assert stored["identity"] == results.Identity("cnn_cifar10", "keras", api="jax").as_dict()
    assert stored["key"] == path.stem == "cnn_cifar10__keras__jax" and stored["schema"] == 3
    assert results.identity(results.read(path)) == planned.job.identity
    assert stored["executed_notebook"] == "executed/tiny/cnn_cifar10/keras-jax.ipynb"
    assert stored["inputs"]["parameters"] == {"profile": "tiny", "backend": "jax"} and stored["inputs"]["pins"] is None
    assert stored["run"] == check.run_id and stored["device_check"]["params_override"] == "epochs=1"
    assert (check.results / stored["log"]).exists() and (check.results / stored["executed_notebook"]).exists()
    assert not check.layout.staging("tiny", planned.job.identity).exists()


def test_an_interrupted_run_leaves_the_previous_record_notebook_and_log_as_they_were(tmp_path, monkeypatch):
    check = check_for(tmp_path)
    planned = job(notebook(tmp_path / "pytorch.ipynb", "profile = 'auto'\nrecord_path = None", stopped()))
    dc.run_jobs(check, [planned])
    paths = check.layout.paths("tiny", planned.job.identity)
    before = {name: path.read_bytes() for name, path in paths.items() if path.exists()}

    def interrupted(check, notebook, executed, log, *args, **kwargs):  # SIGTERM while the notebook runs
        log.write_text("half a log")
        raise KeyboardInterrupt

    monkeypatch.setattr(device_run, "execute", interrupted)
    with pytest.raises(KeyboardInterrupt):
        dc.run_jobs(check, [planned])
    assert {name: path.read_bytes() for name, path in paths.items() if path.exists()} == before
    assert not check.layout.staging("tiny", planned.job.identity).exists()


def test_a_notebook_past_its_limit_is_killed_and_reported(tmp_path):
    nb = notebook(
        tmp_path / "slow.ipynb",
        "profile = 'auto'\nrecord_path = None",
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"  # its own child too
        "print(child.pid, flush=True)\ntime.sleep(60)",
    )
    check = check_for(tmp_path)
    start = time.monotonic()
    dc.run_jobs(check, [job(nb, limit_s=2)])
    assert time.monotonic() - start < 12
    run = json.loads((check.out / "summary.json").read_text())["runs"][0]
    assert run["status"] == "timeout" and "no result after 2 s" in run["error"]
    log = (check.results / "logs" / "tiny" / "cnn_cifar10__pytorch.log").read_text()
    assert 'File "<cell 3>", line 4' in log and "most recent call first" in log  # where it waited
    pid = int(log.split("--- cell 3 ---\n")[1].split()[0])
    time.sleep(0.2)
    status = Path(f"/proc/{pid}/status")  # the notebook's own child went with it (gone, or a zombie
    assert not status.exists() or "\nState:\tZ" in status.read_text()  # that no init reaped yet)


def test_the_budget_skips_what_would_not_fit_and_says_so(tmp_path):
    marker = tmp_path / "ran"
    cheap = notebook(
        tmp_path / "cheap.ipynb", "profile = 'auto'\nrecord_path = None", f"open({str(marker)!r}, 'w').close()"
    )
    check = check_for(tmp_path, budget_s=dc.RESERVE_S + 60)
    dc.run_jobs(check, [job(cheap, label="jax", estimate_s=500), job(cheap, task="gru_imdb", estimate_s=1)])
    summary = json.loads((check.out / "summary.json").read_text())
    assert [s["key"] for s in summary["skipped"]] == ["cnn_cifar10__jax"]
    assert summary["skipped"][0]["reason"].startswith("would not fit: about 500 s expected")
    assert [r["key"] for r in summary["runs"]] == ["gru_imdb__pytorch"] and marker.exists()


def test_runs_faster_than_their_estimates_let_a_later_one_fit(tmp_path):
    cheap = notebook(tmp_path / "cheap.ipynb", "profile = 'auto'\nrecord_path = None", "x = 1")
    check = check_for(tmp_path, budget_s=dc.RESERVE_S + 30)
    check.summary["runs"] = [  # earlier runs: one ok in a tenth of its estimate; a quick failure does not count
        {"key": "a", "status": "ok", "seconds": 4.0, "estimate_s": 40},
        {"key": "b", "status": "failed", "seconds": 1.0, "estimate_s": 40},
    ]
    dc.run_jobs(check, [job(cheap, estimate_s=50), job(cheap, task="gru_imdb", estimate_s=80)])
    summary = json.loads((check.out / "summary.json").read_text())
    # 50 s scale by the ratio 0.1, raised to the lowest allowed, 0.4: 20 s, which fit; 80 s scale to 32 s, which do not
    assert [r["key"] for r in summary["runs"]] == ["a", "b", "cnn_cifar10__pytorch"]
    assert summary["skipped"][0]["key"] == "gru_imdb__pytorch"
    assert summary["skipped"][0]["reason"].startswith("would not fit: about 32 s expected")


def test_each_run_gets_its_tasks_override_and_keras_its_backend(tmp_path):
    seen = tmp_path / "seen.json"
    nb = notebook(
        tmp_path / "keras.ipynb",
        "profile = 'auto'\nrecord_path = None\nbackend = 'tensorflow'",
        "import json, os\n"
        f"json.dump([backend, os.environ.get('KERAS_BACKEND'), os.environ.get('DLROSETTA_PARAMS')], "
        f"open({str(seen)!r}, 'w'))",
    )
    check = check_for(tmp_path)
    dc.run_jobs(check, [job(nb, label="keras-jax", parameters={"backend": "jax"}, override="epochs=1")])
    assert json.loads(seen.read_text()) == ["jax", "jax", "epochs=1"]
    run = json.loads((check.out / "summary.json").read_text())["runs"][0]
    assert run["key"] == "cnn_cifar10__keras__jax" and run["override"] == "epochs=1"


def test_the_plan_is_the_priority_order_with_the_runners_keys():
    jobs = dc.plan("full", [], [], {"gru_imdb": "epochs=1"})
    keys = [j.key for j in jobs]
    assert keys[:4] == [
        "cnn_cifar10__pytorch",
        "cnn_cifar10__jax",
        "cnn_cifar10__keras__torch",
        "cnn_cifar10__keras__jax",
    ]
    assert keys.index("densenet_chestxray__keras__jax-ram") < keys.index("densenet_chestxray__pytorch__loader")
    assert len(keys) == 20
    assert all(p.job.data == ("synthetic" if p.job.task != "resnet50_features" else None) for p in jobs)
    overrides = {p.job.task: p.override for p in jobs}
    assert overrides["gru_imdb"] == "epochs=1" and overrides["cnn_cifar10"] == dc.DEFAULT_OVERRIDES["cnn_cifar10"]
    for text in dc.DEFAULT_OVERRIDES.values():  # every default override is one params.load accepts
        for task in params.TASKS:
            if all(name.split("=")[0] in params.as_dict(params.load(task, "full")) for name in text.split(",") if name):
                params.overrides(task, text)
    wide = [j.key for j in dc.plan("full", [], [], {}, order="framework")]
    assert wide[:5] == [
        "cnn_cifar10__pytorch",
        "gru_imdb__pytorch",
        "resnet50_features__pytorch",
        "densenet_chestxray__pytorch__ram",
        "densenet_chestxray__pytorch__loader",
    ]
    assert sorted(wide) == sorted(keys)
    tiny = dc.plan("tiny", ["pytorch", "keras"], ["gru_imdb"], {})
    assert [j.key for j in tiny] == ["gru_imdb__pytorch", "gru_imdb__keras__torch", "gru_imdb__keras__jax"]
    assert all(j.override == "" and j.limit_s is None for j in tiny)


def test_carried_wheels_install_only_what_is_missing(tmp_path):
    import zipfile

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for name, module in (("dlr_toy_missing", "dlr_toy_missing"), ("pytest", "pytest_shadow")):  # pytest: here
        with zipfile.ZipFile(wheels / f"{name}-1.0-py3-none-any.whl", "w") as z:
            z.writestr(f"{module}/__init__.py", "VALUE = 1\n")
            z.writestr(f"{name}-1.0.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
            z.writestr(
                f"{name}-1.0.dist-info/WHEEL",
                "Wheel-Version: 1.0\nGenerator: toy\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
            )
            z.writestr(f"{name}-1.0.dist-info/RECORD", "")
    site = tmp_path / "site"
    report = device_env.install_wheels(wheels, site, say=lambda text: None)
    try:
        assert report["error"] is None and report["installed"] == ["dlr_toy_missing-1.0-py3-none-any.whl"]
        assert any(p.startswith("pytest ") for p in report["present"])
        assert (site / "dlr_toy_missing" / "__init__.py").exists() and not (site / "pytest_shadow").exists()
        assert str(site) in sys.path  # a site directory of this process's (site.addsitedir)
    finally:
        sys.path.remove(str(site))


def test_the_torch_child_calibrates_each_precision_as_the_runner_does_and_checks_true_float32():
    """On a CPU: calibrate.py's peaks for the CPU's precisions, none for CUDA, and the float32 check against
    float64; the device check's peaks are the runner's (one function), so the report reads them alike."""
    from support import hardware

    answer = device_probes.child_torch("tiny")
    calibration = answer["calibration"]
    bf16 = hardware.Cpu().bf16_by_flags()  # bf16 is calibrated where this CPU computes it (or may: a probe)
    assert (
        {"cpu/float32"} | ({"cpu/bf16"} if bf16 else set()) <= set(calibration["peaks"]) <= {"cpu/float32", "cpu/bf16"}
    )
    assert ("cpu/bf16" in calibration["peaks"]) != ("cpu/bf16" in calibration.get("errors", {}))
    assert calibration["precisions"] == {}
    assert all(p["gflops"] > 0 for p in calibration["peaks"].values())
    assert answer["true_float32"]["true_float32"] is True
    assert answer["true_float32"]["relative_error"]["tf32_off"] < 1e-5


def test_without_the_runners_modules_the_check_stops_in_one_line_naming_the_wheels(tmp_path, monkeypatch, capsys):
    def no_jsonschema(*args, **kwargs):  # support.records on a machine that the carried wheels did not reach
        raise ModuleNotFoundError("No module named 'jsonschema'")

    monkeypatch.setattr(dc, "plan", no_jsonschema)
    monkeypatch.setattr(signal, "signal", lambda *args: None)  # pytest keeps its own SIGTERM
    out = tmp_path / "out"
    code = dc.main(
        [
            "--out",
            str(out),
            "--profile",
            "tiny",
            "--machine",
            "toy",
            "--work",
            str(tmp_path / "work"),
            "--wheels",
            str(tmp_path / "no-wheels"),
            "--site",
            str(tmp_path / "no-site"),
        ]
    )
    line = (
        "device_check: the runner's modules do not import here (ModuleNotFoundError: No module named "
        "'jsonschema'): run scripts/device_wheels.sh beforehand and carry .device along"
    )
    assert code == 2 and capsys.readouterr().out.splitlines()[-1] == line
    assert json.loads((out / "summary.json").read_text())["error"] == line
    assert (out / "device_check.log").read_text().splitlines()[-1] == line
