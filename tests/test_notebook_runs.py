"""The real notebooks, executed at the tiny profile through the runner, in two tiers.

`make test` runs the smoke tier (SMOKE): one runner call, two notebooks at a time, in which every notebook and
every notebook variant (a Keras backend, an MXNet API, a DenseNet-121 data mode) runs once, and every mechanism
of the variant matrix runs at least once in each kernel that has it, folded into those same executions: bf16
(PyTorch, TensorFlow, JAX, the three Keras backends, MXNet), compiled and eager, a batch-size sweep,
DenseNet-121 on two devices in each data mode, and the combinations a framework cannot run (recorded
`unsupported` or `not_applicable` with their reason). No run is a repeat of another.

The tier follows the machine (support/hardware.py): bf16 is folded into DenseNet-121's runs, which have no parity
step, so that every CNN, GRU and ResNet-50 run of the tier checks parity in float32, the model's own property; on a
CPU without bfloat16 arithmetic each folded bf16 run is replaced by the run it was folded into, so no notebook goes
unexecuted, and the second tier's bf16 runs must end `unsupported` with the CPU's line.

`make test-matrix` (the pytest marker `matrix`) runs the rest of the matrix at tiny (MATRIX): every baseline that
the smoke tier folded into a variant, bf16 and the other compilation for the lines that have them, and every
framework's DenseNet-121 on two devices in both modes. Run it before committing results. The same checks hold in
both tiers.

Learning is checked on the steady state's steps, which train on one fixed batch: the loss must fall by
support.timing.LEARNING_MARGIN (tests/test_timing.py shows that the rule fails for a model whose gradients are
zero or whose optimizer never steps). Accuracy is the benchmark's business (the `cpu` profile's band), not a
smoke test's.
"""

import json
import os
import pathlib
import re

import pytest

from scripts import run_all, runner_cli, suite
from support import env, hardware, init, params, parity, precision, profiles, records, tasks, timing
from support.frameworks import KERAS_BACKENDS
from tests.test_runner import fake_calibrate

# Does this CPU compute bfloat16 at hardware speed, by its flags and caps (support/hardware.py)? Where its flags
# cannot say (AVX-512 without avx512_bf16), each framework's probe decides in the run: the tiers run the baselines
# and accept either end for a bf16 run, with the CPU's line where it stops.
BF16 = hardware.Cpu().bf16_by_flags()

# The framework lines of the modern and legacy kernels, as their record keys name them
LINES = ("pytorch", "tensorflow", "keras__tensorflow", "keras__jax", "keras__torch", "jax", "mxnet", "chainer")

# The smoke tier as planned for a CPU with bfloat16: {record key: the status it must end with}.
PLANNED_SMOKE = {
    # CNN: every framework's float32 baseline (its parity in float32), every Keras backend, both MXNet APIs;
    # Chainer's numpy has no bfloat16 (on any CPU)
    "cnn_cifar10__pytorch": "ok",
    "cnn_cifar10__tensorflow": "ok",
    "cnn_cifar10__jax": "ok",
    "cnn_cifar10__keras__tensorflow": "ok",
    "cnn_cifar10__keras__jax": "ok",
    "cnn_cifar10__keras__torch": "ok",
    "cnn_cifar10__mxnet__gluon": "ok",
    "cnn_cifar10__mxnet__module": "ok",
    "cnn_cifar10__chainer": "ok",
    "cnn_cifar10__chainer__bf16": "unsupported",
    # GRU: a sweep in each kernel (MXNet's eager too), XLA on TensorFlow; JAX has no eager step
    "gru_imdb__pytorch__sweep": "ok",
    "gru_imdb__tensorflow__compiled": "ok",
    "gru_imdb__keras__tensorflow": "ok",
    "gru_imdb__keras__jax": "ok",
    "gru_imdb__keras__torch": "ok",
    "gru_imdb__jax": "ok",
    "gru_imdb__jax__eager": "not_applicable",
    "gru_imdb__mxnet__eager-sweep": "ok",
    "gru_imdb__chainer": "ok",
    # ResNet-50 (PyTorch's baseline is compiled); TF32 is a GPU's
    **{f"resnet50_features__{line}": "ok" for line in LINES},
    "resnet50_features__tensorflow__tf32": "unsupported",
    # DenseNet-121: every line once, in one of its two data modes, and each mode on 2 devices in each kernel (the
    # data-parallel idioms of PyTorch through torchrun, TensorFlow, MXNet and Chainer); bf16 in every line that has
    # it (Keras's predict() returns the policy's bfloat16, which scikit-learn's AUC refuses; TensorFlow's on 2
    # devices, MirroredStrategy under the mixed policy)
    "densenet_chestxray__pytorch__loader-bf16": "ok",
    "densenet_chestxray__pytorch__ram-2dev": "ok",
    "densenet_chestxray__tensorflow__loader-bf16-2dev": "ok",
    "densenet_chestxray__keras__tensorflow-ram-bf16": "ok",
    "densenet_chestxray__keras__jax-loader-bf16": "ok",
    "densenet_chestxray__keras__torch-loader-bf16": "ok",
    "densenet_chestxray__keras__torch-ram-2dev": "unsupported",
    "densenet_chestxray__jax__ram-bf16": "ok",
    "densenet_chestxray__mxnet__loader-2dev": "ok",
    "densenet_chestxray__mxnet__ram-bf16": "ok",
    "densenet_chestxray__chainer__ram-2dev": "ok",
    "densenet_chestxray__chainer__loader": "ok",
    # TensorFlow's 1.x graph style (the modern kernel): XLA auto-clustering on the CNN, a sweep on the GRU, a frozen
    # graph for ResNet-50, DenseNet-121's towers on two CPU devices with bf16 by casts
    "cnn_cifar10__tensorflow1__compiled": "ok",
    "gru_imdb__tensorflow1__sweep": "ok",
    "resnet50_features__tensorflow1": "ok",
    "densenet_chestxray__tensorflow1__loader-bf16-2dev": "ok",
    # PaddlePaddle and MindSpore (the paddle-mindspore kernel): static graph (paddle.jit.to_static) and graph mode
    # (@mindspore.jit, this project's default for MindSpore) against PyNative, a sweep, each data mode on two
    # processes (paddle.distributed.launch); neither computes bfloat16 on a CPU, which each refuses in its
    # own words (its bf16 runs are unsupported on any CPU)
    "cnn_cifar10__paddle__compiled": "ok",
    "cnn_cifar10__paddle__bf16": "unsupported",
    "gru_imdb__paddle__sweep": "ok",
    "resnet50_features__paddle": "ok",
    "densenet_chestxray__paddle__ram-2dev": "ok",
    "densenet_chestxray__paddle__loader-2dev": "ok",
    "cnn_cifar10__mindspore__eager": "ok",
    "cnn_cifar10__mindspore__bf16": "unsupported",
    "gru_imdb__mindspore": "ok",
    "resnet50_features__mindspore": "ok",
    # MindSpore's msrun on two processes runs in the second tier: its scheduler can declare a worker dead ("worker 1
    # is the first one timed out"), beside another run on 2 cores, and once alone after both ranks had finished the
    # notebook and written the record (2026-11-28, as its kernel stopped): msrun then exits 1
    "densenet_chestxray__mindspore__loader": "ok",
    # The operator benchmarks: every framework line once (each notebook measures every dtype and mode itself)
    **{f"operators__{line}": "ok" for line in (*LINES, "tensorflow1", "paddle", "mindspore")},
}
# Lines whose framework computes no bfloat16 on a CPU, whatever the CPU: their bf16 runs stop in the framework's own
# words (support.measure.<framework>.start), so a kernel of such lines alone runs no bf16 (Chainer: numpy has none).
NO_CPU_BF16 = {
    "chainer": "data type 'bfloat16' not understood",
    "paddle": "amp_guard can only be enabled on CUDAPlace",
    "mindspore": "has no bfloat16 kernel on the CPU",
}


def baseline_of(key: str) -> str:
    """The run a bf16 run was folded into: its key without the precision."""
    return re.sub(r"__bf16$|-bf16(?=-|$)", "", key)


def smoke_tier(bf16: bool | None) -> dict:
    """The smoke tier on a CPU that computes bfloat16 (bf16 True) or not: where it does not (or its flags cannot
    say), each folded bf16 run that would go through the notebook is replaced by its baseline."""
    return {
        (key if bf16 or status != "ok" or baseline_of(key) == key else baseline_of(key)): status
        for key, status in PLANNED_SMOKE.items()
    }


SMOKE = smoke_tier(BF16)

# The second tier: what the smoke tier folded away, and the rest of the matrix that runs on a CPU.
DENSENET_LINES = (
    "pytorch",
    "tensorflow",
    "keras__tensorflow-",
    "keras__jax-",
    "keras__torch-",
    "jax",
    "mxnet",
    "chainer",
    "tensorflow1",
    "paddle",
    "mindspore",
)
MATRIX = {
    **{
        key: "ok"
        for key in (
            "cnn_cifar10__pytorch__bf16",
            "cnn_cifar10__tensorflow__bf16",
            "cnn_cifar10__jax__bf16",
            "cnn_cifar10__mxnet__gluon-bf16",
            "cnn_cifar10__mxnet__module-bf16",
            "cnn_cifar10__keras__tensorflow-bf16",
            "cnn_cifar10__keras__jax-bf16",
            "cnn_cifar10__keras__torch-bf16",
            "cnn_cifar10__pytorch__compiled",
            "cnn_cifar10__tensorflow__compiled",
            "gru_imdb__pytorch",
            "gru_imdb__pytorch__bf16",
            "gru_imdb__tensorflow",
            "gru_imdb__tensorflow__bf16",
            "gru_imdb__mxnet",
            "gru_imdb__mxnet__sweep",
            "gru_imdb__keras__torch-compiled",
            "gru_imdb__jax__bf16",
            "resnet50_features__pytorch__bf16",
            "resnet50_features__pytorch__eager",
            "resnet50_features__mxnet__bf16",
            "resnet50_features__mxnet__eager",
            "resnet50_features__tensorflow__bf16",
            "densenet_chestxray__keras__tensorflow-loader-bf16",
            "densenet_chestxray__keras__jax-ram-bf16",
            "densenet_chestxray__keras__torch-ram-bf16",
            "cnn_cifar10__tensorflow1",
            "cnn_cifar10__tensorflow1__bf16",
            "gru_imdb__tensorflow1",
            "gru_imdb__tensorflow1__bf16",
            "gru_imdb__tensorflow1__compiled",
            "resnet50_features__tensorflow1__compiled",
            "resnet50_features__tensorflow1__bf16",
            "densenet_chestxray__tensorflow1__ram-bf16",
            "cnn_cifar10__paddle",
            "gru_imdb__paddle",
            "gru_imdb__paddle__compiled",
            "resnet50_features__paddle__eager",
            "densenet_chestxray__paddle__ram-compiled",
            "cnn_cifar10__mindspore",
            "gru_imdb__mindspore__eager",
            "resnet50_features__mindspore__eager",
            "densenet_chestxray__mindspore__ram-eager",
        )
    },
    **{
        key: "unsupported"
        for key in (
            "gru_imdb__paddle__bf16",
            "resnet50_features__paddle__bf16",
            "densenet_chestxray__paddle__loader-bf16",
            "gru_imdb__mindspore__bf16",
            "resnet50_features__mindspore__bf16",
            "densenet_chestxray__mindspore__ram-bf16",
        )
    },
    # every DenseNet-121 line in both modes, on 1 and on 2 devices (Keras on torch has no data parallelism)
    **{
        key: "unsupported" if key.startswith("densenet_chestxray__keras__torch") and key.endswith("2dev") else "ok"
        for line in DENSENET_LINES
        for mode in ("loader", "ram")
        for devices in ("", "-2dev")
        for key in [f"densenet_chestxray__{line}{'' if line.endswith('-') else '__'}{mode}{devices}"]
        if key not in PLANNED_SMOKE
    },
    "gru_imdb__chainer__bf16": "unsupported",
}
# what the smoke tier runs in their place on a CPU without bfloat16 runs there, not twice; the bf16 runs it folded
# then run here, where they stop as unsupported
MATRIX = {
    **{key: status for key, status in MATRIX.items() if key not in SMOKE},
    **{key: status for key, status in PLANNED_SMOKE.items() if key not in SMOKE},
}
# Why a combination cannot run here: (key, the words its record must give).
REASONS = {
    "gru_imdb__jax__eager": "JAX compiles every step by construction",
    "resnet50_features__tensorflow__tf32": "a CPU has no TF32 arithmetic",
    "densenet_chestxray__keras__torch-ram-2dev": "torch backend",
    "densenet_chestxray__keras__torch-loader-2dev": "torch backend",
}
NO_BF16 = "has no bfloat16 arithmetic"  # the CPU's line (support.hardware) where a bf16 run stops
# The matrix that plans every key above: the runner plans these, --only picks the tier's keys.
MATRIX_ARGS = [
    "--precision",
    "fp32,bf16,tf32",
    "--compilation",
    "auto,on,off",
    "--devices",
    "1,2",
    "--batch-size",
    "2,max",
]
TIERS = {"smoke": SMOKE, "matrix": MATRIX}

# ONNX: (task, framework, Keras backend) -> the text of the error that keeps its exported graph from running in
# ONNX Runtime (recorded by the notebook as {"onnx": {"unavailable": ...}}, and said in the notebook and in
# docs/save-load-onnx.md).
# jax2onnx 0.13.0's remove_redundant_transpose_pairs_ir drops the NCHW-to-NHWC transpose after a batch norm that
# feeds a residual addition, so ResNet-50's graph adds an NCHW tensor to an NHWC one
JAX2ONNX_RESIDUAL = "[ShapeInferenceError] Incompatible dimensions"
JAX2ONNX_POOL = "MaxPool node"  # MaxPooling2D as a 4-D MaxPool that ONNX Runtime rejects
ONNX_UNAVAILABLE = {
    ("resnet50_features", "jax", ""): JAX2ONNX_RESIDUAL,
    ("cnn_cifar10", "keras", "jax"): JAX2ONNX_POOL,
    ("resnet50_features", "keras", "jax"): JAX2ONNX_POOL,
    ("densenet_chestxray", "keras", "jax"): JAX2ONNX_POOL,
    ("gru_imdb", "chainer", ""): "KeyError: 'Permutate'",  # onnx-chainer 1.3.2 cannot convert L.NStepGRU's functions
    # MindSpore 2.10's exporter unrolls nn.GRU into per-step StridedSlice -> Squeeze, which ONNX Runtime refuses
    ("gru_imdb", "mindspore", ""): "Dimension of input 0 must be 1 instead of 0",
}
# The exported graph of a bf16 run that computes in bfloat16 (the framework exports its mixed-precision graph, where
# PyTorch and MXNet export the float32 model): ONNX Runtime's CPU kernels take no bfloat16 convolution.
BF16_GRAPH = "Type 'tensor(bfloat16)' of input parameter"
JAX2ONNX_BF16_POOL = "reduce_window_max currently supports floating operand dtypes only, got bfloat16"
ONNX_UNAVAILABLE_BF16 = {
    **{
        (task, "tensorflow", ""): BF16_GRAPH
        for task in ("cnn_cifar10", "gru_imdb", "resnet50_features", "densenet_chestxray")
    },
    **{
        (task, "keras", backend): BF16_GRAPH
        for task in ("cnn_cifar10", "densenet_chestxray")
        for backend in ("tensorflow", "torch")
    },
    **{(task, "keras", "jax"): JAX2ONNX_BF16_POOL for task in ("cnn_cifar10", "densenet_chestxray")},
    ("cnn_cifar10", "jax", ""): "NOT_IMPLEMENTED : Could not find an implementation for Conv",
    ("resnet50_features", "jax", ""): JAX2ONNX_RESIDUAL,
    ("densenet_chestxray", "jax", ""): "bound to different types (tensor(bfloat16) and tensor(float)",
    # TensorFlow's graph style computes bf16 by casts in the graph, which tf2onnx exports as they are
    **{(task, "tensorflow1", ""): BF16_GRAPH for task in ("cnn_cifar10", "resnet50_features", "densenet_chestxray")},
    ("gru_imdb", "tensorflow1", ""): "bound to different types (tensor(float16) and tensor(bfloat16)",
}
# Trainable parameters of the PyTorch models (torchvision's DenseNet-121 with 14 outputs, ResNet-50 without fc).
N_PARAMETERS = {task: parity.n_parameters(task) for task in parity.TASKS} | {"densenet_chestxray": 6_968_206}


def two_devices():
    return 2, "the tiers' 2 devices"  # whatever this machine has: one GPU or core shares itself


def planned(keys) -> dict:
    """{key: the runner's Job} for the tier's keys, as the runner plans them (a key it cannot plan fails here)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(runner_cli, "machine_devices", two_devices)
        jobs = {job.key: job for job in run_all.plan(run_all.parse_args(["--profile", "tiny", *MATRIX_ARGS]))}
    missing = sorted(set(keys) - set(jobs))
    assert not missing, f"the runner plans no such run: {missing}"
    return {key: jobs[key] for key in keys}


JOBS = planned(list(dict.fromkeys([*PLANNED_SMOKE, *smoke_tier(False), *MATRIX])))  # the tiers on any CPU


def gpus() -> int:
    return len(env.gpu_names())


def run_tier(results, keys) -> tuple:
    """One runner call over the tier's keys, two at a time, with a recorded calibration (scripts/calibrate.py has
    tests of its own). The 2-device runs want 2 devices: on a machine with one GPU they run on CPU devices."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(run_all, "calibrate", fake_calibrate)
        patch.setattr(runner_cli, "machine_devices", two_devices)
        if gpus() == 1:
            patch.setenv("CUDA_VISIBLE_DEVICES", "")
        code = run_all.main(
            [
                "--profile",
                "tiny",
                "--parity",
                "--data",
                "synthetic",
                "--jobs",
                "2",
                "--results",
                str(results),
                "--machine",
                "ci",
                "--no-readme",
                *MATRIX_ARGS,
                "--only",
                ",".join(keys),
            ]
        )
    return results / "ci", code


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    return run_tier(tmp_path_factory.mktemp("smoke"), SMOKE)


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    return run_tier(tmp_path_factory.mktemp("matrix"), MATRIX)


def tier_params(check=lambda key: True):
    """The keys of both tiers as test parameters, the second tier's marked `matrix`."""
    return [
        pytest.param(key, marks=[pytest.mark.matrix] if key in MATRIX else [], id=key)
        for key in (*SMOKE, *MATRIX)
        if check(key)
    ]


def record_of(request, key) -> tuple[dict, object]:
    """The record of `key` from its tier's run (run on first use), and the run's folder."""
    folder, _ = request.getfixturevalue("smoke" if key in SMOKE else "matrix")
    return json.loads((folder / "records" / "tiny" / f"{key}.json").read_text()), folder


def is_bf16(key) -> bool:
    return JOBS[key].matrix.get("precision") == "bf16"


def expected(key) -> tuple[str, ...]:
    """The statuses the run may end with: TensorFlow's GPU build runs TF32 (the probe asks only then); a bf16 run
    goes through only on a CPU that computes bfloat16 (either, where the flags leave it to each framework's probe)."""
    status = SMOKE.get(key) or MATRIX[key]
    if key.endswith("tf32") and gpus() and run_all.probe_gpu("tensorflow")[0]:
        return ("ok",)
    if status == "ok" and is_bf16(key) and not BF16:
        return ("unsupported",) if BF16 is False else ("ok", "unsupported")
    return (status,)


def reason(key) -> str:
    """The words a run that cannot go through must give: its own (REASONS), its framework's where that computes no
    bfloat16 on any CPU (NO_CPU_BF16), else the CPU's line."""
    if key in REASONS:
        return REASONS[key]
    return NO_CPU_BF16.get(JOBS[key].framework, NO_BF16) if is_bf16(key) else NO_BF16


def ran(key) -> bool:
    """Does the run go through the notebook (the tests of its results take it)? Decided without a GPU probe."""
    return expected(key) == ("ok",)


def is_training(key) -> bool:
    return tasks.get(JOBS[key].task).unit == "epoch"


def has_model(key) -> bool:
    """Does the run build a model (every task but the operator benchmarks)?"""
    return tasks.get(JOBS[key].task).unit != "call"


# --- what every tier's run shows -----------------------------------------------------------------


@pytest.mark.parametrize("key", tier_params())
def test_each_run_ends_as_planned_and_writes_a_valid_record(request, key):
    record, folder = record_of(request, key)
    job = JOBS[key]
    assert record["status"] in expected(key), f"{job.title}: {record.get('error')} (log: {record.get('log')})"
    records.validate(record)
    assert (record["task"], record["framework"], record["variant"]) == (job.task, job.framework, job.variant)
    assert record["profile"] == "tiny" and record["timed"] is False and record["identity"] == job.identity.as_dict()
    assert (folder / record["executed_notebook"]).exists() and (folder / record["log"]).exists()
    if record["status"] != "ok":
        assert reason(key) in record["error"] and record["precision"] in precision.PRECISIONS
        assert "\n" not in record["error"]
        return
    assert record["data"] == "synthetic" and record["inputs"]["parameters"].get("data", "synthetic") == "synthetic"
    assert record["precision"] == job.matrix.get("precision", "fp32")
    if job.matrix.get("compilation"):
        assert record["compilation"] == job.matrix["compilation"]
    if record["compilation"] == "on" and record["framework"] in ("tensorflow", "tensorflow1"):
        assert record["compile_s"] > 0  # XLA's trace and compilation, apart
    on_gpu = record["environment"].get("device", "cpu") != "cpu"
    assert (record["memory"]["device_peak_bytes"] is not None) == on_gpu  # an allocator's peak on a GPU only
    assert record["memory"]["host_peak_bytes"] > 2**20
    assert ("sweep" in record) == bool(job.matrix.get("batch_sizes"))
    if job.task == "resnet50_features":
        assert record["feature_shape"][1] == 2048 and record["timing"]["n"] >= timing.MIN_REPEATS
        assert record["timing"]["p95_s"] >= record["timing"]["median_s"]
    if job.task == "densenet_chestxray":
        assert len(record["metrics"]["auc_per_label"]) == 14 and 0 <= record["metrics"]["auc"] <= 1
    if is_training(key):
        assert record["steps"]["n"] >= timing.MIN_REPEATS and len(record["curve"]) == record["params"]["epochs"]


@pytest.mark.parametrize("key", tier_params(lambda key: ran(key) and is_training(key)))
def test_each_training_run_fits_the_batch_its_steady_state_trains_on(request, key):
    record, _ = record_of(request, key)
    learned, why = timing.learned(record["steps"])
    assert learned, f"{JOBS[key].title}: {why}"


# Issue 38: every notebook of a task prints the same epoch line and the same evaluation, in the same words.
# What each training task's profile must show of its model: its main operations (the GRU's as matmuls where the
# profiler shows the recurrent layer's parts, as recurrence where it shows the layer whole). Not every profiler names
# a batch norm or an optimizer step apart from plain arithmetic (docs/profiles.md): the recorded traces' test
# (tests/test_profiles.py) checks those where it does.
PROFILED = {
    "cnn_cifar10": (("convolution",), ("matmul",)),
    "gru_imdb": (("matmul", "recurrence"),),
    "densenet_chestxray": (("convolution",),),
}


@pytest.mark.parametrize("key", tier_params(lambda key: ran(key) and is_training(key)))
def test_each_training_run_profiles_its_step_into_its_models_operations_and_keeps_the_trace(request, key):
    record, folder = record_of(request, key)
    profile = record["breakdown"]
    assert profile["steps"] == record["params"]["profile_steps"] and profile["step_s"] > 0
    assert sum(profile["shares"].values()) == pytest.approx(1)
    for either in PROFILED[record["task"]]:
        assert any(profile["seconds"][part] > 0 for part in either), f"no {' or '.join(either)}: {profile['top']}"
    assert record["trace"] == str(pathlib.Path(record["executed_notebook"]).with_suffix("")) + ".trace.json.gz"
    ops = profiles.operations(profiles.load(folder / record["trace"]), profile_reader(record))
    # every operation the profiler shows apart has a category (support.profiles.RULES); what it runs as one compiled
    # or bulked event (support.profiles.OPAQUE) stays "other"
    unnamed = [(n, s) for n, s in ops if profiles.category(n) == "other" and not profiles.opaque(n)]
    assert sum(s for _, s in unnamed) < 0.05 * sum(s for _, s in ops), sorted({n for n, _ in unnamed})[:10]


def profile_reader(record) -> str:
    """The support.profiles reader of a run's trace: Keras's is its backend's."""
    if record["framework"] != "keras":
        return record["framework"]
    return KERAS_BACKENDS[record["identity"]["api"]]


EPOCH_LINE = r"epoch (\d+)/(\d+): \d+\.\d\d s, train loss (\d+\.\d{3}|nan), "
LOG_LINES = {
    "cnn_cifar10": (
        EPOCH_LINE + r"test accuracy \d\.\d{4}$",
        r"^test accuracy \d\.\d{4} on synthetic data \(chance 0\.10\); per class: \[[\d. ]+\]$",
    ),
    "gru_imdb": (
        EPOCH_LINE + r"test accuracy \d\.\d{4}$",
        r"^test accuracy \d\.\d{4} on synthetic data \(chance 0\.50\); negative \d\.\d{3}, positive \d\.\d{3}$",
    ),
    "densenet_chestxray": (
        EPOCH_LINE + r"mean AUC (\d\.\d{4}|nan)$",
        r"^mean AUC (\d\.\d{4}|nan) on synthetic data \(chance 0\.50\)$",
    ),
}


@pytest.mark.parametrize("key", tier_params(lambda key: ran(key) and JOBS[key].task in LOG_LINES))
def test_each_training_notebook_prints_its_tasks_epoch_line_and_evaluation_and_checks_its_hyperparameters(request, key):
    import nbformat

    record, folder = record_of(request, key)
    nb = nbformat.read(folder / record["executed_notebook"], as_version=4)
    printed = [
        line.rstrip()
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
        if out.get("name") == "stdout"
        for line in out.get("text", "").splitlines()
    ]
    epoch, evaluation = LOG_LINES[record["task"]]
    epochs = [re.search(epoch, line) for line in printed]
    assert [(int(m[1]), int(m[2])) for m in epochs if m] == [
        (e, record["params"]["epochs"]) for e in range(1, record["params"]["epochs"] + 1)
    ], printed
    assert any(re.search(evaluation, line) for line in printed), printed
    named = {
        "learning_rate": record["params"]["lr"],
        "batch_size": record["params"]["batch_size"],
        "epochs": record["params"]["epochs"],
    }
    assert {k: record["hyperparameters"].get(k) for k in named} == named


@pytest.mark.parametrize("key", tier_params(lambda key: ran(key) and JOBS[key].task in init.SCHEMES))
def test_each_model_starts_from_the_tasks_initial_distributions(request, key):
    """Equal work starts from equal initial weights: every array of a freshly built model has the standard deviation
    and mean that the task's scheme (support/init.py) gives it, in every framework."""
    record, _ = record_of(request, key)
    assert "init" in record, f"{JOBS[key].title} recorded no initialisation check (measure.initial_weights)"
    settings = params.load(record["task"], "tiny")
    problems = init.check(record["task"], record["init"], settings)
    assert not problems, f"{JOBS[key].title}: " + "; ".join(problems)
    assert len(record["init"]) >= 4


@pytest.mark.parametrize("key", tier_params(lambda key: ran(key) and is_training(key)))
def test_the_saved_model_loads_into_a_fresh_one_that_computes_the_same(request, private_cache, key):
    record, _ = record_of(request, key)
    check = record.get("save_load")
    assert check, f"{JOBS[key].title} recorded no save-and-load check"
    assert check["tolerance"] == precision.TOLERANCE[record["precision"]]
    assert check["max_rel_error"] < check["tolerance"], (key, check)
    saved = [p for p in (private_cache / "scratch" / record["task"] / record["framework"]).rglob("*") if p.is_file()]
    assert saved and all(p.stat().st_size > 0 for p in saved), f"{JOBS[key].title} left nothing in its scratch folder"


@pytest.mark.parametrize("key", tier_params(lambda key: ran(key) and has_model(key)))
def test_the_exported_onnx_graph_computes_the_same_in_onnx_runtime(request, key):
    record, _ = record_of(request, key)
    job = JOBS[key]
    assert "onnx" in record, f"{job.title} recorded no ONNX export check"
    line = (job.task, job.framework, job.parameters.get("backend", ""))
    known = (ONNX_UNAVAILABLE_BF16 if record["precision"] == "bf16" else ONNX_UNAVAILABLE).get(line)
    if known:
        assert known in record["onnx"].get("unavailable", ""), (
            f"{job.title} now exports ({record['onnx']}): drop its entry from ONNX_UNAVAILABLE(_BF16) and "
            "docs/save-load-onnx.md"
        )
        pytest.xfail(f"{job.title}: {record['onnx']['unavailable']}")
    assert "unavailable" not in record["onnx"], f"{job.title}: {record['onnx']['unavailable']}"
    assert record["onnx"]["tolerance"] == precision.TOLERANCE[record["precision"]]
    assert record["onnx"]["max_rel_error"] < record["onnx"]["tolerance"], (key, record["onnx"])


@pytest.mark.parametrize("key", tier_params(lambda key: ran(key) and JOBS[key].task in parity.TASKS))
def test_parity_step_matches_the_numpy_reference(request, key):
    record, _ = record_of(request, key)
    assert "parity" in record, f"{JOBS[key].title} ran with parity=True but recorded no parity result"
    tolerance = precision.TOLERANCE[record["precision"]]
    assert record["parity"]["tolerance"] == tolerance and record["parity"]["max_rel_error"] < tolerance, (
        f"{JOBS[key].title}: outputs deviate from the numpy reference by {record['parity']['max_rel_error']:.1e} "
        f"of their scale (tolerance {tolerance:g})"
    )


@pytest.mark.parametrize("key", tier_params(lambda key: ran(key) and has_model(key)))
def test_every_model_counts_pytorchs_parameters(request, key):
    record, _ = record_of(request, key)
    assert record["n_parameters"] == N_PARAMETERS[record["task"]], (
        f"{JOBS[key].title} counts {record['n_parameters']:,} trainable parameters, PyTorch "
        f"{N_PARAMETERS[record['task']]:,}"
    )


@pytest.mark.parametrize("key", tier_params(lambda key: ran(key) and "sweep" in JOBS[key].variant))
def test_the_sweep_doubles_from_the_smallest_size_and_says_where_it_stopped(request, key):
    record, _ = record_of(request, key)
    sizes = [row["batch_size"] for row in record["sweep"]["sizes"]]
    assert sizes and sizes[0] == 2 and all(b == 2 * a for a, b in zip(sizes, sizes[1:]))
    assert record["sweep"]["stopped"].startswith(("time budget: batch", "memory: batch", "out of memory at batch"))
    assert all(row["p95_s"] >= row["median_s"] > 0 for row in record["sweep"]["sizes"])


# Operator benchmark cases a framework cannot run in float32: (framework, operation) -> the words of its reason.
FLOAT32_UNAVAILABLE: dict = {}


@pytest.mark.parametrize("key", tier_params(lambda key: ran(key) and not has_model(key)))
def test_each_operator_notebook_times_its_whole_plan_and_says_why_a_case_did_not_run(request, key):
    """Every operation of the tiny plan in float32 in the notebook's first mode, forward and (where it has one)
    forward plus backward, timed in at least 7 repeats; bfloat16 and the other modes on the matmul, each ok or
    refused in its framework's or the CPU's words; the record's timing is the smallest add's."""
    from support import operators as ops

    record, _ = record_of(request, key)
    entries = record["operators"]
    modes = tuple(dict.fromkeys(e["mode"] for e in entries))
    planned = [(c.op, c.size, c.direction, c.dtype, c.mode) for c in ops.plan(params.load("operators", "tiny"), modes)]
    assert [(e["op"], e["size"], e["direction"], e["dtype"], e["mode"]) for e in entries] == planned
    framework = record["framework"]
    for e in entries:
        where = f"{JOBS[key].title}: {e['op']} {e['direction']} {e['dtype']} {e['mode']}"
        if e["status"] == "ok":
            assert e["n"] >= timing.MIN_REPEATS and e["median_s"] > 0, where
            assert e["flops"] == ops.flops(e["op"], e["dims"], e["direction"]), where
            continue
        if e["dtype"] == "float32":
            assert e["status"] == "unavailable", where
            assert FLOAT32_UNAVAILABLE.get((framework, e["op"]), "(none known)") in e["reason"], (where, e["reason"])
        elif e["status"] == "unsupported":
            assert framework in NO_CPU_BF16 or not BF16, (where, e["reason"])
            assert NO_CPU_BF16.get(framework, NO_BF16) in e["reason"], (where, e["reason"])
        else:
            assert e["status"] == "unavailable" and e["reason"], where
    floor = next(e for e in entries if (e["op"], e["size"], e["dtype"], e["mode"]) == ("add", 0, "float32", modes[0]))
    assert record["timing"]["median_s"] == floor["median_s"] and record["timing"]["unit"] == "call"


# Data parallelism: framework (and Keras backend) -> how its replicas normalise a batch
BATCH_NORM = {
    ("pytorch", ""): "per-device",  # DistributedDataParallel: each process its own batch statistics
    ("tensorflow", ""): "per-device",  # MirroredStrategy: each replica its own
    ("keras", "tensorflow"): "per-device",
    ("keras", "jax"): "global",
    ("jax", ""): "global",  # one program over the sharded global batch
    ("mxnet", ""): "per-device",  # split_and_load: each context its own
    ("chainer", ""): "per-device",  # ParallelUpdater: each device's copy of the model its own
    ("tensorflow1", ""): "per-device",  # one tower per device: each tower its own batch statistics
    ("paddle", ""): "per-device",  # paddle.DataParallel, a process per device
    ("mindspore", ""): "per-device",  # msrun's data parallelism, a process per device
}


@pytest.mark.parametrize("key", tier_params(lambda key: ran(key) and JOBS[key].matrix.get("devices")))
def test_one_step_on_two_devices_equals_one_step_on_one(request, key):
    """Each framework's data-parallel idiom trains on 2 devices with the global batch of 2 x the batch per
    device, and one plain SGD step on them equals the same step on one device (support.parity.data_parallel)."""
    record, _ = record_of(request, key)
    job = JOBS[key]
    batch = params.load("densenet_chestxray", "tiny").batch_size
    assert (record["devices"], record["global_batch_size"]) == (2, 2 * batch)
    check = record["data_parallel"]
    assert (check["devices"], check["batch_norm"]) == (2, BATCH_NORM[job.framework, job.parameters.get("backend", "")])
    assert check["max_update"] > 0
    assert check["tolerance"] == max(parity.DATA_PARALLEL_TOLERANCE, precision.TOLERANCE[record["precision"]])
    assert check["max_rel_error"] < check["tolerance"], check


# the reader links each baseline's executed copy: among the smoke tier's Keras on torch's, the matrix's MXNet Module's
@pytest.mark.parametrize(
    "tier, executed",
    [
        pytest.param("smoke", "executed (torch)</a>"),
        pytest.param("matrix", "executed (module)</a>", marks=pytest.mark.matrix),
    ],
)
def test_the_tier_exits_cleanly_and_fills_the_tables_and_the_reader(request, tier, executed):
    folder, code = request.getfixturevalue(tier)
    assert code == 0
    keys = TIERS[tier]
    rows = (folder / "results.csv").read_text().splitlines()
    assert len(rows) == 1 + len(keys)
    markdown = (folder / "results.md").read_text()
    # the baselines' (the operator benchmarks plot their measurements, which runs sharing the machine do not show)
    plotted = {JOBS[key].task for key in keys if not JOBS[key].matrix and ran(key) and has_model(key)}
    assert plotted and all(f"plots/tiny/{task}.png" in markdown for task in plotted)
    assert "## Variants: VGG-style CNN on CIFAR-10 (profile `tiny`)" in markdown
    assert "**unsupported**: Chainer computes in numpy arrays" in markdown  # a stop's reason, in the table
    assert "| tensorflow | compiled | fp32 | yes | ok | not timed |" in markdown  # a variant's row: XLA, untimed
    # two at a time shared the machine: their sweeps are timings, so no table shows them (tests/test_variants.py does)
    assert "### Batch size" not in markdown and len((folder / "sweeps.csv").read_text().splitlines()) == 1
    (run,) = (folder / "runs").glob("*.json")
    meta = json.loads(run.read_text())
    assert set(meta["calibration"]) == {"before", "after"} and meta["timed"] is False
    site = folder / "site"
    assert all((site / f"{task}.html").exists() for task in suite.TASKS) and (site / "site.css").exists()
    assert "profile <code>tiny</code>" in (site / "index.html").read_text()
    assert "No operator benchmark ran through." in markdown  # untimed: two notebooks shared the machine
    cnn = (site / "cnn_cifar10.html").read_text()
    assert 'data-section="Train"' in cnn and executed in cnn and "../plots/tiny/cnn_cifar10.png" in cnn


# --- what the smoke tier covers ---------------------------------------------------------------------


@pytest.mark.parametrize("bf16", [True, False], ids=["a CPU with bf16", "a CPU without"])
def test_the_smoke_tier_executes_every_notebook_and_every_notebook_variant_on_any_cpu(bf16):
    """Every notebook file and each of its own variants (a Keras backend, an MXNet API) in at least one execution
    that runs it through (a run that stops as unsupported does not count), and each of a task's data modes in
    each kernel: on a CPU that computes bfloat16 and on one that does not (whose folded bf16 runs would stop)."""
    tier = smoke_tier(bf16)
    through = [JOBS[key] for key, status in tier.items() if status == "ok"]
    assert bf16 or not any(is_bf16(key) for key, status in tier.items() if status == "ok")
    lines = {
        (job.task, job.framework, json.dumps({k: v for k, v in job.parameters.items() if k != "mode"}))
        for job in through
    }
    missing = [
        f"{task}/{framework} {run or ''}".strip()
        for task in suite.TASKS
        for framework in suite.FRAMEWORKS
        for run in suite.variants(task, framework)
        if suite.notebook_path(task, framework, run).exists()
        and (task, framework, json.dumps({k: v for k, v in run.items() if k != "mode"})) not in lines
    ]
    missing += [
        f"{task} in mode {mode} in kernel {kernel}"
        for task, t in tasks.TASKS.items()
        for mode in t.modes
        for kernel in suite.ENVIRONMENTS
        if not any(
            job.task == task and job.parameters.get("mode") == mode and job.environment == kernel for job in through
        )
    ]
    assert not missing, f"no smoke execution covers: {', '.join(missing)}"
    assert {(job.task, job.notebook.stem) for job in through} == {
        (path.parent.name, path.stem) for path in suite.NOTEBOOKS.glob("*/*.ipynb")
    }


@pytest.mark.parametrize("bf16", [True, False], ids=["a CPU with bf16", "a CPU without"])
def test_the_smoke_tier_checks_parity_in_float32_for_every_framework_and_task(bf16):
    """Parity is the model's property, not the precision's: every framework's CNN, GRU and ResNet-50 run the parity
    step in float32 in the smoke tier, on any CPU (bf16 is folded into DenseNet-121, which has none)."""
    float32 = {
        (JOBS[key].task, JOBS[key].framework)
        for key, status in smoke_tier(bf16).items()
        if status == "ok" and JOBS[key].matrix.get("precision", "fp32") == "fp32"
    }
    missing = [
        f"{task}/{framework}"
        for task in parity.TASKS
        for framework in suite.FRAMEWORKS
        if suite.notebook_path(task, framework).exists() and (task, framework) not in float32
    ]
    assert not missing, f"no float32 parity in the smoke tier for: {', '.join(missing)}"


def test_the_smoke_tier_runs_each_mechanism_in_each_kernel_once_and_repeats_nothing(smoke):
    folder, _ = smoke
    found = [json.loads((folder / "records" / "tiny" / f"{key}.json").read_text()) for key in SMOKE]
    for kernel in suite.ENVIRONMENTS:
        ok = [r for r in found if r["status"] == "ok" and suite.FRAMEWORKS[r["framework"]] == kernel]
        mechanisms = {
            # where the CPU has it, and a framework of the kernel computes it on a CPU
            "bf16": any(r["precision"] == "bf16" for r in ok)
            or not BF16
            or all(name in NO_CPU_BF16 for name, env in suite.FRAMEWORKS.items() if env == kernel),
            "compiled": any(r["compilation"] == "on" for r in ok),
            "eager": any(r["compilation"] == "off" for r in ok),
            "a sweep": any("sweep" in r for r in ok),
            "2 devices, loader": any(r.get("devices") == 2 and "loader" in r["variant"] for r in ok),
            "2 devices, ram": any(r.get("devices") == 2 and "ram" in r["variant"] for r in ok),
            "a combination it cannot run": any(
                r["status"] in precision.STATUSES for r in found if suite.FRAMEWORKS[r["framework"]] == kernel
            ),
        }
        assert all(mechanisms.values()), f"kernel {kernel} runs no: {[m for m, v in mechanisms.items() if not v]}"
    runs = [
        (JOBS[key].task, JOBS[key].framework, json.dumps({**JOBS[key].parameters, **JOBS[key].matrix})) for key in SMOKE
    ]
    assert len(set(runs)) == len(runs) and not set(SMOKE) & set(MATRIX)


def test_pytorch_on_several_devices_in_one_process_stops_in_one_line_saying_how_to_start_the_ranks(
    tmp_path, monkeypatch
):
    """The notebook in Jupyter (no torchrun) with devices=2: a ValueError before any data or model, naming the fix."""
    import papermill

    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)  # whatever launched these tests
    notebook = suite.notebook_path("densenet_chestxray", "pytorch")
    with pytest.raises(papermill.PapermillExecutionError) as stop:
        papermill.execute_notebook(
            str(notebook),
            str(tmp_path / "out.ipynb"),
            kernel_name=suite.kernel_name("modern"),
            parameters={"profile": "tiny", "data": "synthetic", "devices": 2},
            cwd=str(notebook.parent),
            progress_bar=False,
        )
    assert stop.value.ename == "ValueError"
    assert stop.value.evalue == (
        "devices=2 trains on 2 devices, one process each, but 1 was started: start them with "
        'torchrun, as `make run ARGS="--task densenet_chestxray --framework pytorch --devices '
        '2"` does'
    )


def test_under_the_avx2_caps_real_bf16_notebooks_stop_unsupported_with_the_cpus_line(tmp_path, monkeypatch):
    """What an AVX2-only CPU's user sees, on any CPU: the runner's --cpu-isa avx2 caps every framework (oneDNN's
    ONEDNN_ and DNNL_MAX_CPU_ISA, ATEN_CPU_CAPABILITY, XLA's --xla_cpu_max_isa) and support.hardware
    (DLROSETTA_CPU_ISA); PyTorch's and MXNet's real bf16 CNNs then stop before training, unsupported, with the line
    naming the ISA (MXNet's used to fail in its first convolution), and the results go to a folder of their own."""
    for variable, value in hardware.caps("avx2").items():
        monkeypatch.setenv(variable, os.environ.get(variable, value))  # restored after the test
    monkeypatch.setattr(run_all, "calibrate", fake_calibrate)
    keys = ["cnn_cifar10__pytorch__bf16", "cnn_cifar10__mxnet__gluon-bf16"]
    code = run_all.main(
        [
            "--profile",
            "tiny",
            "--data",
            "synthetic",
            "--jobs",
            "2",
            "--results",
            str(tmp_path),
            "--no-readme",
            "--no-site",
            "--cpu-isa",
            "avx2",
            "--precision",
            "bf16",
            "--only",
            ",".join(keys),
        ]
    )
    assert code == 0
    capped = hardware.Cpu()
    folder = tmp_path / env.machine_name()
    assert folder.name.endswith("-isa-avx2") == bool(capped.cap) and (folder / "results.md").exists()
    for key in keys:
        record = json.loads((folder / "records" / "tiny" / f"{key}.json").read_text())
        assert record["status"] == "unsupported" and record["precision"] == "bf16", record.get("error")
        assert NO_BF16 in record["error"] and "needs avx512_bf16 or AMX" in record["error"]
        assert ("capped at AVX2 by DLROSETTA_CPU_ISA=avx2" in record["error"]) == bool(capped.cap)
        assert record["environment"]["hardware"]["isa"] in ("avx2", "avx", "sse4_2")
