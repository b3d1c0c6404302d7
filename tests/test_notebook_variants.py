"""The variant matrix on the real notebooks at the tiny profile, through the runner, in both kernels: mixed
precision in bf16 (learning, parity at bf16's tolerance, DenseNet-121's AUC on every Keras backend), compiled
and eager, the batch-size sweep, and the combinations recorded `unsupported` or `not_applicable` with their
reasons."""
import json

import pytest

from scripts import run_all
from support import precision, records
from tests.test_runner import fake_calibrate

# One runner call per line: (arguments, {record key: the status it must end with}).
MATRIX = [
    (["--task", "cnn_cifar10", "--framework", "pytorch,tensorflow,mxnet,chainer", "--precision", "bf16", "--parity"],
     {"cnn_cifar10__pytorch__bf16": "ok", "cnn_cifar10__tensorflow__bf16": "ok",
      "cnn_cifar10__mxnet__gluon-bf16": "ok", "cnn_cifar10__mxnet__module-bf16": "ok",
      "cnn_cifar10__chainer__bf16": "unsupported"}),
    (["--task", "gru_imdb", "--framework", "tensorflow,jax,mxnet", "--compilation", "on,off", "--parity"],
     {"gru_imdb__tensorflow__compiled": "ok", "gru_imdb__jax__eager": "not_applicable",
      "gru_imdb__mxnet__eager": "ok"}),
    (["--task", "gru_imdb", "--framework", "pytorch,mxnet", "--batch-size", "2,max"],
     {"gru_imdb__pytorch": "ok", "gru_imdb__pytorch__sweep": "ok", "gru_imdb__mxnet": "ok",
      "gru_imdb__mxnet__sweep": "ok"}),
    # Keras's predict() returns the policy's bfloat16, which scikit-learn's AUC refuses: each backend, both modes
    (["--task", "densenet_chestxray", "--framework", "keras", "--precision", "bf16"],
     {f"densenet_chestxray__keras__{backend}-{mode}-bf16": "ok"
      for backend in ("tensorflow", "jax", "torch") for mode in ("loader", "ram")}),
    (["--task", "resnet50_features", "--framework", "tensorflow", "--precision", "tf32"],
     {"resnet50_features__tensorflow__tf32": "unsupported"}),
]
EXPECTED = {key: status for _, keys in MATRIX for key, status in keys.items()}
REASONS = {"cnn_cifar10__chainer__bf16": "data type 'bfloat16' not understood",
           "gru_imdb__jax__eager": "JAX compiles every step by construction",
           "resnet50_features__tensorflow__tf32": "a CPU has no TF32 arithmetic"}


@pytest.fixture(scope="module")
def variants(tmp_path_factory):
    results = tmp_path_factory.mktemp("variants")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(run_all, "calibrate", fake_calibrate)
        codes = [run_all.main(["--profile", "tiny", "--data", "synthetic", "--jobs", "2", "--results", str(results),
                               "--machine", "ci", "--no-readme", "--no-site", *argv]) for argv, _ in MATRIX]
    return results / "ci", codes


def record(folder, key):
    return json.loads((folder / "records" / "tiny" / f"{key}.json").read_text())


def test_no_run_of_the_matrix_fails_and_unsupported_ones_are_not_failures(variants):
    folder, codes = variants
    found = {key: record(folder, key)["status"] for key in EXPECTED}
    assert found == EXPECTED, {k: record(folder, k).get("error") for k in EXPECTED if found[k] != EXPECTED[k]}
    assert codes == [0] * len(MATRIX)


@pytest.mark.parametrize("key", sorted(k for k, s in EXPECTED.items() if s == "ok"))
def test_each_variant_ran_as_asked_and_kept_its_checks_at_its_precisions_tolerance(variants, key):
    r = records.validate(record(variants[0], key))
    matrix = r["matrix"]
    assert r["precision"] == matrix.get("precision", "fp32")
    if matrix.get("compilation"):
        assert r["compilation"] == matrix["compilation"]
    tolerance = precision.TOLERANCE[r["precision"]]
    for check in ("parity", "save_load", "onnx"):
        if check in r and "unavailable" not in r[check]:
            assert r[check]["max_rel_error"] < tolerance == r[check]["tolerance"], (key, check, r[check])
    if "auc" in r["metrics"]:
        assert 0 <= r["metrics"]["auc"] <= 1, (key, r["metrics"])
    if "accuracy" in r["metrics"]:
        assert r["metrics"]["accuracy"] > 1 / r["params"]["n_classes"] + 0.2, (key, r["metrics"])
    if r["compilation"] == "on" and r["framework"] == "tensorflow":
        assert r["compile_s"] > 0


@pytest.mark.parametrize("key", sorted(REASONS))
def test_a_combination_that_cannot_run_says_why(variants, key):
    r = records.validate(record(variants[0], key))
    assert REASONS[key] in r["error"] and r["precision"] in precision.PRECISIONS


@pytest.mark.parametrize("key", ["gru_imdb__pytorch__sweep", "gru_imdb__mxnet__sweep"])
def test_the_sweep_doubles_from_the_smallest_size_and_says_where_it_stopped(variants, key):
    r = records.validate(record(variants[0], key))
    sizes = [row["batch_size"] for row in r["sweep"]["sizes"]]
    assert sizes and sizes[0] == 2 and all(b == 2 * a for a, b in zip(sizes, sizes[1:]))
    assert r["sweep"]["stopped"].startswith(("time budget: batch", "memory: batch", "out of memory at batch"))
    assert all(row["p95_s"] >= row["median_s"] > 0 for row in r["sweep"]["sizes"])
    assert "sweep" not in record(variants[0], key.replace("__sweep", ""))      # the baseline has none


def test_the_variant_tables_show_the_matrix(variants):
    folder = variants[0]
    markdown = (folder / "results.md").read_text()
    assert "## Variants: VGG-style CNN on CIFAR-10 (profile `tiny`)" in markdown
    assert "**unsupported**: Chainer computes in numpy arrays" in markdown
    assert "| tensorflow | compiled | fp32 | yes | ok | not timed |" in markdown
    # --jobs 2 shared the machine: its sweeps are timings, so no table shows them (tests/test_variants.py does)
    assert "### Batch size" not in markdown and len((folder / "sweeps.csv").read_text().splitlines()) == 1
