"""support.measure's numpy-only core, Bench: what a notebook's measurement part records, without a framework."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from support import params, records
from support.measure import Bench

RESNET = params.load("resnet50_features", "tiny")
CNN = params.load("cnn_cifar10", "tiny")


def bench(task, settings, tmp_path, **kwargs):
    return Bench(
        task,
        "pytorch",
        settings,
        precision="fp32",
        compilation=kwargs.pop("compilation", "off"),
        record_path=tmp_path / "record.json",
        environment={"machine": "m"},
        gpu=False,
        **kwargs,
    )


@pytest.mark.parametrize("compilation", ["on", "off"])
def test_an_inference_record_has_the_first_call_the_throughput_and_no_curve(tmp_path, compilation):
    calls = []
    b = bench("resnet50_features", RESNET, tmp_path, compilation=compilation)
    features = b.first_call(lambda: calls.append(1) or np.ones((RESNET.batch_size, 2048)))
    summary = b.throughput(lambda: calls.append(1))
    record = b.write(
        metrics={"images_per_s": summary["samples_per_s"]},
        data="synthetic",
        n_parameters=1,
        feature_shape=list(features.shape),
    )
    assert len(calls) == 1 + RESNET.warmup_batches + RESNET.n_batches
    assert record == json.loads((tmp_path / "record.json").read_text())
    assert record["timing"]["n"] == RESNET.n_batches and record["timing"]["unit"] == "batch"
    assert "curve" not in record and "steps" not in record
    assert record["first_step_s"] > 0 and record["feature_shape"] == [RESNET.batch_size, 2048]
    assert (record["compile_s"] is not None) == (compilation == "on")


def test_a_training_record_has_its_epochs_its_steady_state_and_a_first_step_of_at_least_one_step(tmp_path):
    b = bench("cnn_cifar10", CNN, tmp_path)
    for _ in range(CNN.epochs):
        with b.epoch(3):
            pass
    b.steady_state(lambda: 0.5, loss=float)
    record = b.write(metrics={"accuracy": 0.4}, curve=[0.4] * CNN.epochs, data="synthetic", n_parameters=1)
    assert record["timing"]["unit"] == "epoch" and len(record["curve"]) == CNN.epochs
    assert record["steps"]["n"] == CNN.step_repeats
    assert record["first_step_s"] >= record["timing"]["median_s"] / 3


def test_a_precision_the_device_cannot_run_stops_with_its_record(tmp_path):
    with pytest.raises(records.Unsupported):
        Bench(
            "cnn_cifar10",
            "pytorch",
            CNN,
            precision="fp16",
            compilation="off",
            record_path=tmp_path / "r.json",
            environment={"machine": "m"},
            gpu=False,
        )
    record = json.loads((tmp_path / "r.json").read_text())
    assert record["status"] == "unsupported" and "float16" in record["error"] and record["precision"] == "fp16"


KERAS_STEADY_STATE = """
import json, os, sys
os.environ["KERAS_BACKEND"] = sys.argv[1]
import numpy as np
from support import params
from support.measure import keras as measure
import keras

settings = params.load("cnn_cifar10", "tiny")
bench = measure.start("cnn_cifar10", settings, precision="fp32", compilation="auto", record_path=None)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              jit_compile=bench.compiled)
copied = []                        # the steps whose logs Keras's CallbackList copies to the host
original = keras.callbacks.CallbackList._on_train_batch_end
keras.callbacks.CallbackList._on_train_batch_end = lambda self, batch, logs=None: (copied.append(batch),
                                                                                   original(self, batch, logs))
x, y = np.random.default_rng(0).random((8, 4), np.float32), np.arange(8) % 3
model.fit(x, y, batch_size=4, epochs=1, verbose=0)             # as the epochs run: a copy after every step
epoch_copies = len(copied)
steps = measure.steady_state(bench, model, x, y)
print(json.dumps({"epoch": epoch_copies, "steady": len(copied) - epoch_copies, "n": steps["n"]}))
"""


@pytest.mark.parametrize(
    "backend",
    ["tensorflow", pytest.param("jax", marks=pytest.mark.matrix), pytest.param("torch", marks=pytest.mark.matrix)],
)
def test_keras_steady_state_waits_for_the_device_only_at_its_laps_ends(backend):
    """fit()'s callbacks copy every step's logs to the host (on TensorFlow before the next step starts): the
    steady state runs fit() without that copy, so Keras's steps, like every framework's, wait only at a lap's
    ends."""
    import subprocess
    import sys

    from support import env

    proc = subprocess.run(
        [sys.executable, "-c", KERAS_STEADY_STATE, backend],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=env.ROOT,
        env={**__import__("os").environ, **env.project_environment()},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    counts = json.loads(proc.stdout.strip().splitlines()[-1])
    assert counts == {"epoch": 2, "steady": 0, "n": CNN.step_repeats}


TWO_RANKS = """
import datetime, json, os, sys
import torch, torch.distributed as dist, torch.multiprocessing as mp


def rank_main(rank, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    # the notebook's two-backend group ("cpu:gloo,cuda:nccl" on GPUs; NCCL needs one, so gloo stands in for it)
    dist.init_process_group("cpu:gloo,cuda:gloo", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=60))
    from support import params
    from support.measure import pytorch as measure
    bench = measure.start("densenet_chestxray", params.load("densenet_chestxray", "tiny"), torch.device("cpu"),
                          precision="fp32", compilation="off", record_path=None, devices=2)
    if rank == 1:                 # rank 1 alone would stop at once: its own memory looks full
        measure.psutil.virtual_memory = lambda: type("M", (), {"available": 1})()
    agreed = [measure.from_rank0(lambda: 10.0 + rank)(), measure.from_rank0(lambda: None)()]

    def make_step(b):
        x = torch.ones(b)
        return lambda: dist.all_reduce(x)          # a collective: ranks that disagreed would wait forever

    result = measure.sweep(bench, make_step, "1,2,4", devices=2)
    with open(f"{out}.{rank}", "w") as f:
        json.dump({"agreed": agreed, "sizes": [row["batch_size"] for row in result["sizes"]]}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(rank_main, args=(int(sys.argv[1]), sys.argv[2]), nprocs=2)
"""


def test_the_sweeps_decisions_on_two_ranks_are_rank_0s_over_a_two_backend_group(tmp_path):
    """On several ranks the sweep reads rank 0's clock and memory (`from_rank0`: a CPU tensor broadcast, which
    needs the group's CPU backend, gloo, beside NCCL on GPUs): both ranks run the same sizes even where rank 1's
    own reading would have stopped it, and None stays None."""
    import socket
    import subprocess
    import sys

    from support import env

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = tmp_path / "two_ranks.py"
    script.write_text(TWO_RANKS)
    proc = subprocess.run(
        [sys.executable, str(script), str(port), str(tmp_path / "rank")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=env.ROOT,
        env={**__import__("os").environ, **env.project_environment(), "PYTHONPATH": str(env.ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    ranks = [json.loads((tmp_path / f"rank.{r}").read_text()) for r in (0, 1)]
    assert ranks[0] == ranks[1] == {"agreed": [10.0, None], "sizes": [1, 2, 4]}


def test_the_notebooks_hyperparameters_must_be_the_profiles_and_are_recorded(tmp_path):
    b = bench("cnn_cifar10", CNN, tmp_path)
    assert b.hyperparameters(learning_rate=0.01, momentum=0.9, batch_size=CNN.batch_size, epochs=CNN.epochs) == {
        "learning_rate": 0.01,
        "momentum": 0.9,
        "batch_size": CNN.batch_size,
        "epochs": CNN.epochs,
    }
    with pytest.raises(ValueError) as err:
        b.hyperparameters(learning_rate=0.1)
    assert str(err.value) == (
        "hyperparameter learning_rate=0.1 in the notebook, but the 'tiny' profile of cnn_cifar10 "
        "says lr=0.01: change the notebook's value or the profile (support/params.py)"
    )
    with pytest.raises(
        ValueError, match=r"^hyperparameter 'dropout': the cnn_cifar10 profile has no 'dropout'; it has "
    ):
        b.hyperparameters(dropout=0.5)


def test_the_onnx_check_compares_records_a_variants_failure_and_raises_an_undocumented_float32_one(
    tmp_path, monkeypatch
):
    from support import files

    def scratch(task, framework):  # as support.files.scratch: an empty folder each call
        shutil.rmtree(tmp_path / "scratch", ignore_errors=True)
        return Path(tmp_path / "scratch").mkdir() or tmp_path / "scratch"

    monkeypatch.setattr(files, "scratch", scratch)
    written = []
    expected = np.ones((2, 10), np.float32)
    b = bench("cnn_cifar10", CNN, tmp_path)
    assert b.onnx(written.append, lambda path, x: x + 1e-7, expected - 1e-7, expected)["onnx"]["max_rel_error"] < 1e-5
    assert written == [tmp_path / "scratch" / "model.onnx"]
    (tmp_path / "scratch" / "checkpoint.pt").write_text("saved")  # what the notebook saved before the check
    b.onnx(written.append, lambda path, x: x, expected, expected)
    assert (tmp_path / "scratch" / "checkpoint.pt").read_text() == "saved" and b.folder() == tmp_path / "scratch"

    def refuses(path, x):
        raise RuntimeError(
            "[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could not find an implementation for Conv(11)\nmore"
        )

    with pytest.raises(RuntimeError, match="NOT_IMPLEMENTED"):  # float32, nobody said why: a defect
        b.onnx(written.append, refuses, expected, expected)
    assert b.onnx(written.append, refuses, expected, expected, documented="the exporter's pooling") == {
        "unavailable": "the exporter's pooling: RuntimeError: [ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : "
        "Could not find an implementation for Conv(11)"
    }
    b.precision = "bf16"  # a variant's graph ONNX Runtime cannot run
    assert b.onnx(written.append, refuses, expected, expected)["unavailable"].startswith("RuntimeError: [ONNXRuntime")
    assert b.fields["onnx"]["unavailable"].endswith("Conv(11)")


def test_onnx_runtime_times_the_exported_graph_on_the_batch_or_says_why_it_cannot(tmp_path):
    """Bench.onnx with `batch=`: after the agreement, ONNX Runtime's own throughput on the run's batch (one session,
    the task's warm-up and timed batches), recorded; a graph with a fixed batch that refuses it, in its words."""
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    def export(path):  # a ReLU over a fixed batch of 4
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 3])
        graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu", [x], [y])
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)

    def run(path, x):
        import onnxruntime as ort

        return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]

    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    settings = params.load("resnet50_features", "tiny")
    b = bench("resnet50_features", settings, tmp_path)
    b.onnx(export, run, x, np.maximum(x, 0), batch=x)
    assert b.fields["onnx"]["max_rel_error"] == 0 and b.fields["onnxruntime"]["n"] == settings.n_batches
    assert b.fields["onnxruntime"]["samples_per_s"] > 0 and b.fields["onnxruntime"]["provider"]
    b.onnx(export, run, x, np.maximum(x, 0), batch=np.zeros((8, 3), np.float32))
    assert "InvalidArgument" in b.fields["onnxruntime"]["unavailable"]
