"""TensorFlow's measurement plumbing (support.measure): its synchronisation, environment, weights and memory.

    from support.measure import tensorflow as measure
    bench = measure.start("cnn_cifar10", settings, gpu=bool(gpus), precision=precision, compilation=compilation,
                          record_path=record_path)

The notebook sets KERAS_BACKEND before it imports TensorFlow (tf.keras is Keras 3); this module imports
TensorFlow after it, and only the TensorFlow notebooks import this module.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import tensorflow as tf

from support import env, hardware
from support.measure import Bench


def start(
    task: str,
    settings,
    *,
    gpu: bool,
    precision: str,
    compilation: str,
    record_path,
    variant: str = "",
    devices: int = 1,
) -> Bench:
    """The run's Bench: prints TensorFlow's versions and devices, checks `precision` and `compilation`, and
    ends the notebook (with its record) where this device cannot run them. On a GPU a `tf.function` call
    returns once its kernels are queued, so every lap waits for the devices with
    `tf.test.experimental.sync_devices` before reading the clock (on the CPU the calls finish before they
    return: no wait). `devices`: the data-parallel devices one epoch's steps train on (their samples count)."""
    info = env.describe(tf)
    env.show(info)
    bench = Bench(
        task,
        "tensorflow",
        settings,
        precision=precision,
        compilation=compilation,
        record_path=record_path,
        environment=info,
        gpu=gpu,
        sync=tf.test.experimental.sync_devices if gpu else None,
        variant=variant,
        devices=devices,
        matmul=matmul,
        gpu_capability=gpu_capability() if gpu else None,
    )
    if task == "gru_imdb" and gpu and bench.compiled:
        bench.stop(GRU_XLA_GPU)
    return bench


# Keras's GRU runs cuDNN's fused kernel wherever TensorFlow sees a GPU (keras/src/backend/tensorflow/rnn.py, `gru` and
# `cudnn_ok`), and TensorFlow registers no XLA kernel for it: a `jit_compile=True` function holding it fails to compile
# (the op alone under XLA on the CPU: "No registered 'CudnnRNNV3' OpKernel for XLA_CPU_JIT devices"; not yet run on a GPU).
GRU_XLA_GPU = (
    "XLA cannot compile Keras's GRU on a GPU: the layer runs cuDNN's fused kernel there (CudnnRNNV3), for "
    "which TensorFlow registers no XLA kernel"
)


def gpu_capability() -> tuple[int, int] | None:
    """The first GPU's compute capability, as TensorFlow reports it."""
    details = tf.config.experimental.get_device_details(tf.config.list_physical_devices("GPU")[0])
    return details.get("compute_capability")


def matmul(dtype: str):
    """support.hardware's probe: one square matmul on the CPU in `dtype` ('float32' or 'bfloat16'), waited for.
    TensorFlow has no answer of its own: its dispatch reads the CPU's flags, not oneDNN's ISA cap."""
    with tf.device("/CPU:0"):
        a = tf.cast(tf.random.normal((hardware.PROBE_N, hardware.PROBE_N)), getattr(tf, dtype))
    return lambda: tf.matmul(a, a).numpy()


def on_device(bench: Bench, *arrays) -> tuple:
    """Copies of numpy arrays as tensors on the run's device (the steady state's and the sweep's batch, held
    in device memory so that the step times no host-to-device copy)."""
    with tf.device("/GPU:0" if bench.gpu else "/CPU:0"):
        return tuple(tf.identity(a) for a in arrays)


def frozen(function: tf.types.experimental.GenericFunction, signature):
    """`function` (a `tf.function` of one tensor) traced for `signature` (a tensor or a `tf.TensorSpec`) and frozen
    for inference: its variables become constants, so that Grappler can fold each batch norm into the convolution
    before it (PERFORMANCE.md, TensorFlow). `convert_variables_to_constants_v2` is how TensorFlow's own converters
    (TFLite, TF-TRT) freeze a function; it is not exported under `tf.`. Freezing drops `jit_compile`: for a function
    without XLA. Returns a function of one tensor that returns the function's output."""
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    graph = convert_variables_to_constants_v2(function.get_concrete_function(signature))
    return lambda x: graph(x)[0]


def initial_weights(bench: Bench, model: tf.keras.Model) -> dict:
    """The initialisation check (support.init) on a freshly built model's weights, by their Keras paths, in
    Keras's (..., in, out) layout."""
    return bench.initialisation({w.path: np.asarray(w.numpy(), np.float32) for w in model.weights}, "io")


def n_parameters(model: tf.keras.Model) -> int:
    return int(sum(np.prod(w.shape) for w in model.trainable_weights))


def device_peak_bytes(bench: Bench) -> int | None:
    """TensorFlow's GPU allocator peak (None on the CPU, where records.write adds the host's peak)."""
    return tf.config.experimental.get_memory_info("GPU:0")["peak"] if bench.gpu else None


class Tracer:
    """TensorFlow's profiler for Bench.profile (TensorFlow 2, 1.x sessions and Keras on TensorFlow alike): it traces
    every op the runtime executes, eager, in a `tf.function`, in a Session or compiled by XLA, into an XSpace file
    for TensorBoard's profile plugin, which `stop` converts to a Chrome trace with the plugin's own converter
    (TensorFlow ships it). Its documented use:

        tf.profiler.experimental.start("logdir")
        for _ in range(5):
            train_step(xb, yb)
        tf.profiler.experimental.stop()          # logdir/plugins/profile/<run>/<host>.xplane.pb: TensorBoard's Profile
    """

    reader, version = "tensorflow", tf.__version__

    def __init__(self, gpu: bool = False):
        self.gpu = gpu

    def start(self, folder):
        self.folder = Path(folder)
        tf.profiler.experimental.start(str(self.folder))

    def stop(self) -> dict:
        from tensorflow.python.profiler.internal import _pywrap_profiler_plugin as plugin

        tf.profiler.experimental.stop()
        xspace = max(self.folder.glob("plugins/profile/*/*.xplane.pb"), key=lambda p: p.stat().st_mtime)
        data, ok = plugin.xspace_to_tools_data([str(xspace)], "trace_viewer@")  # "trace_viewer@": the JSON
        if not ok:
            raise RuntimeError(f"TensorFlow's profiler plugin could not convert {xspace} to a trace: {data!r:.200}")
        return json.loads(data)


def profile(bench: Bench, step) -> dict:
    """Where the steady-state `step()` goes, under TensorFlow's profiler (Tracer; Bench.profile)."""
    return bench.profile(step, Tracer(bench.gpu))


def write(bench: Bench, model: tf.keras.Model, **fields) -> dict:
    """The run's record, with the model's trainable parameter count, the GPU's peak memory and whether the
    steps ran through XLA (`jit_compile`, the record's extra field as before)."""
    return bench.write(
        n_parameters=n_parameters(model),
        device_peak_bytes=device_peak_bytes(bench),
        jit_compile=bench.compiled,
        **fields,
    )
