"""support.measure's numpy-only core, Bench: what a notebook's measurement part records, without a framework."""
import json

import numpy as np
import pytest

from support import params, records
from support.measure import Bench

RESNET = params.load("resnet50_features", "tiny")
CNN = params.load("cnn_cifar10", "tiny")


def bench(task, P, tmp_path, **kwargs):
    return Bench(task, "pytorch", P, precision="fp32", compilation=kwargs.pop("compilation", "off"),
                 record_path=tmp_path / "record.json", environment={"machine": "m"}, gpu=False, **kwargs)


@pytest.mark.parametrize("compilation", ["on", "off"])
def test_an_inference_record_has_the_first_call_the_throughput_and_no_curve(tmp_path, compilation):
    calls = []
    b = bench("resnet50_features", RESNET, tmp_path, compilation=compilation)
    features = b.first_call(lambda: calls.append(1) or np.ones((RESNET.batch_size, 2048)))
    summary = b.throughput(lambda: calls.append(1))
    record = b.write(metrics={"images_per_s": summary["samples_per_s"]}, data="synthetic", n_parameters=1,
                     feature_shape=list(features.shape))
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
        Bench("cnn_cifar10", "pytorch", CNN, precision="fp16", compilation="off", record_path=tmp_path / "r.json",
              environment={"machine": "m"}, gpu=False)
    record = json.loads((tmp_path / "r.json").read_text())
    assert record["status"] == "unsupported" and "float16" in record["error"] and record["precision"] == "fp16"
