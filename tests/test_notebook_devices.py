"""Every framework's DenseNet-121 notebook on 2 CPU devices at the tiny profile, through the runner (issue 16):
each trains with its framework's data-parallel idiom, records 2 devices and the global batch of 2 x the batch per
device, and one plain SGD step on the 2 devices equals the same step on one device within tolerance
(support.parity.data_parallel: from the same weights, on the same global batch; batch norm per device or global
as the framework does it; 1e-2 of the largest update, since summing in another order moves it by up to 3e-3).
A framework line that cannot train on several devices is recorded `unsupported` with its reason, never run on
one device instead. Both modes: the loader splits its batches across the devices too. PyTorch's ranks are processes
that torchrun starts, each running the notebook (scripts/papermill_rank.py); the notebook run on several devices
without them stops in one line saying how to start them."""
import json

import pytest

from scripts import run_all, suite
from support import params, parity, records
from tests.test_runner import fake_calibrate

MODES = ("loader", "ram")
# framework -> its lines (the notebook's own variant before the mode) and how their replicas normalise batches
LINES = {
    "pytorch": {"": "per-device"},             # DistributedDataParallel: each process its own batch statistics
    "tensorflow": {"": "per-device"},          # MirroredStrategy: each replica its own
    "keras": {"tensorflow": "per-device", "jax": "global", "torch": None},   # None: unsupported, REASONS says why
    "jax": {"": "global"},                     # one program over the sharded global batch
    "mxnet": {"": "per-device"},               # split_and_load: each context its own
    "chainer": {"": "per-device"},             # ParallelUpdater: each device's copy of the model its own
}
REASONS = {"keras": {"torch": "torch backend"}}


def key(framework: str, line: str, mode: str) -> str:
    return f"densenet_chestxray__{framework}__{'-'.join(filter(None, (line, mode, '2dev')))}"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One runner call per framework, on first use: {framework: (records folder, exit code)}."""
    done = {}

    def run(framework: str):
        if framework not in done:
            results = tmp_path_factory.mktemp(f"devices-{framework}")
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(run_all, "calibrate", fake_calibrate)
                patch.setattr(run_all, "machine_devices", lambda: (2, "2 CPU devices"))   # whatever this machine has
                # --timeout: compiling the step for 2 devices and the check's two steps takes JAX and TensorFlow
                # minutes on 2 shared cores
                code = run_all.main(["--profile", "tiny", "--data", "synthetic", "--jobs", "2", "--timeout", "1500",
                                     "--results", str(results), "--machine", "ci", "--no-readme", "--no-site",
                                     "--task", "densenet_chestxray", "--framework", framework, "--devices", "2"])
            done[framework] = results / "ci" / "records" / "tiny", code
        return done[framework]
    return run


@pytest.mark.parametrize("framework", sorted(LINES))
def test_one_step_on_two_devices_equals_one_step_on_one(runs, framework):
    folder, code = runs(framework)
    assert code == 0
    for line, batch_norm in LINES[framework].items():
        for mode in MODES:
            r = json.loads((folder / f"{key(framework, line, mode)}.json").read_text())
            where = (framework, line, mode, r.get("error"))
            if batch_norm is None:
                assert r["status"] == "unsupported" and REASONS[framework][line] in r["error"], where
                continue
            records.validate(r)
            assert r["status"] == "ok" and r["matrix"] == {"devices": 2}, where
            batch = params.load("densenet_chestxray", "tiny").batch_size
            assert (r["devices"], r["global_batch_size"], r["steps"]["samples_per_s"] > 0) == (2, 2 * batch, True), where
            check = r["data_parallel"]
            assert (check["devices"], check["batch_norm"]) == (2, batch_norm), where
            assert check["max_update"] > 0 and check["tolerance"] == parity.DATA_PARALLEL_TOLERANCE, where
            assert check["max_rel_error"] < check["tolerance"], (where, check)
            assert 0 <= r["metrics"]["auc"] <= 1, where


def test_pytorch_on_several_devices_in_one_process_stops_in_one_line_saying_how_to_start_the_ranks(tmp_path, monkeypatch):
    """The notebook in Jupyter (no torchrun) with devices=2: a ValueError before any data or model, naming the fix."""
    import papermill

    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)      # whatever launched these tests
    notebook = suite.notebook_path("densenet_chestxray", "pytorch")
    with pytest.raises(papermill.PapermillExecutionError) as stop:
        papermill.execute_notebook(str(notebook), str(tmp_path / "out.ipynb"), kernel_name=suite.kernel_name("modern"),
                                   parameters={"profile": "tiny", "data": "synthetic", "devices": 2},
                                   cwd=str(notebook.parent), progress_bar=False)
    assert stop.value.ename == "ValueError"
    assert stop.value.evalue == ("devices=2 trains on 2 devices, one process each, but 1 was started: start them with "
                                 "torchrun, as `make run ARGS=\"--task densenet_chestxray --framework pytorch --devices "
                                 "2\"` does")
