"""Keras 3's measurement plumbing (support.measure), on each of its backends (tensorflow, jax, torch).

    os.environ["KERAS_BACKEND"] = backend           # first: importing this module imports keras
    from support.measure import keras as measure
    P = params.load("cnn_cifar10", profile, gpu=measure.gpu())
    bench = measure.start("cnn_cifar10", P, precision=precision, compilation=compilation, record_path=record_path)
    model.compile(..., jit_compile=bench.compiled)
    model.fit(..., callbacks=[measure.EpochTimer(bench)])     # one lap of the epoch timer per epoch
    measure.steady_state(bench, model, xb, yb)                # the training step as fit() runs it

What differs between the backends (how each waits for its device, its TF32 switch, its allocator's peak) is
here, so that a notebook reads as Keras's own code on all three.
"""
from __future__ import annotations

import functools
import importlib
import logging

import keras
import numpy as np

from support import env, timing
from support.measure import Bench

BACKEND = keras.config.backend()
LIB = importlib.import_module(BACKEND)      # the library under Keras: tensorflow, jax or torch


@functools.cache
def info() -> dict:
    """env.describe(keras): Keras's backend and version, and the backend's device, threads and version."""
    return env.describe(keras)


def gpu() -> bool:
    """Whether Keras runs on a GPU: each backend puts its work on its first GPU where it sees one."""
    return info()["device"] != "cpu"


def _sync(on_gpu: bool):
    """A wait for everything the backend has queued. JAX dispatches asynchronously on every device (wait on
    every live array); TensorFlow and PyTorch run a CPU's work before they return, and queue a GPU's on a
    stream (wait for the devices)."""
    if BACKEND == "jax":
        return lambda: LIB.block_until_ready(LIB.live_arrays())
    if not on_gpu:
        return None
    return LIB.test.experimental.sync_devices if BACKEND == "tensorflow" else LIB.cuda.synchronize


def start(task: str, P, *, precision: str, compilation: str, record_path, variant: str | None = None) -> Bench:
    """The run's Bench: prints Keras's and its backend's versions and device, checks `precision` and
    `compilation` (`auto`: Keras's own `jit_compile` default on this backend, support.precision), and ends the
    notebook with its record where this device cannot run them. Then the backend switches Keras leaves to
    its backend: TF32 off for `fp32` and on for `tf32` (each backend has it on by default for some GPU
    operations), and on torch denormal floats flushed to zero as in the PyTorch notebooks (TensorFlow and XLA
    flush them by default); on JAX, jax2onnx's log quietened. The record's variant is the backend."""
    described = info()
    env.show(described)
    on_gpu = described["device"] != "cpu"
    bench = Bench(task, "keras", P, precision=precision, compilation=compilation, record_path=record_path,
                  environment=described, gpu=on_gpu, sync=_sync(on_gpu), compilation_key=f"keras-{BACKEND}",
                  variant=BACKEND if variant is None else variant)
    tf32 = precision == "tf32"
    if BACKEND == "torch":
        LIB.set_flush_denormal(True)
        LIB.backends.cuda.matmul.allow_tf32 = LIB.backends.cudnn.allow_tf32 = tf32
    elif on_gpu and BACKEND == "tensorflow":
        LIB.config.experimental.enable_tensor_float_32_execution(tf32)
    elif on_gpu:                            # JAX; XLA on the CPU computes float32 in float32 anyway
        LIB.config.update("jax_default_matmul_precision", "tensorfloat32" if tf32 else "highest")
    if BACKEND == "jax":                    # the ONNX export: jax2onnx logs a traceback for each plugin it skips
        logging.getLogger("jax2onnx").setLevel(logging.ERROR)
    print(f"{precision}, jit_compile={bench.compiled} on {BACKEND}")
    return bench


class EpochTimer(keras.callbacks.Callback):
    """Times each epoch of `fit()` as one lap of `bench.epochs`: it opens when Keras begins the epoch and
    closes when its training steps are done, before the validation (`fit()` calls `on_test_begin` there), or
    at the epoch's end without validation; both ends wait for the device."""

    def __init__(self, bench: Bench):
        super().__init__()
        self.bench, self._open = bench, False

    def on_epoch_begin(self, epoch, logs=None):
        self.bench.steps_per_epoch = self.params["steps"]
        self.bench.epochs.start()
        self._open = True

    def _close(self):
        if self._open:
            self.bench.epochs.stop(samples=self.bench.steps_per_epoch * self.bench.P.batch_size)
            self._open = False

    def on_test_begin(self, logs=None):
        self._close()

    def on_epoch_end(self, epoch, logs=None):
        self._close()


class _StepLaps(keras.callbacks.Callback):
    """Opens and closes the steady state's laps at batch boundaries inside one `fit()`. It defines no
    `on_train_batch_end`, so Keras keeps dispatching steps ahead of its callbacks where the backend can."""

    def __init__(self, watch: timing.Stopwatch, warmup: int, steps: int, repeats: int, samples: int):
        super().__init__()
        self.watch, self.warmup, self.steps, self.repeats, self.samples = watch, warmup, steps, repeats, samples

    def on_train_batch_begin(self, batch, logs=None):
        k, r = divmod(batch - self.warmup, self.steps)
        if batch < self.warmup or r or k > self.repeats:
            return
        if k > 0:
            self.watch.stop(self.samples)
        if k < self.repeats:
            self.watch.start()


def steady_state(bench: Bench, model: keras.Model, x: np.ndarray, y: np.ndarray) -> dict:
    """The training step's compute throughput on one batch (x, y), as `fit()` runs it: one `fit()` over the
    batch repeated, `P.warmup_steps` untimed steps, then `P.step_repeats` laps of `P.steps_per_repeat` steps
    (and one more step, untimed, whose start closes the last lap). It reuses the step `fit()` compiled for
    this shape and structure (`train_on_batch` hands the step `(x, y, None)`, not `(x, y)`, so TensorFlow and
    JAX would trace and compile it again). The learning check's losses (support.timing.learned) are the
    batch's loss in inference mode (`evaluate`) before the first step and after the last: every step
    trains on that batch, so a model that learns fits it. The same dict as bench.steady_state."""
    P = bench.P
    warmup, steps, repeats, b = P.warmup_steps, P.steps_per_repeat, P.step_repeats, len(x)
    n = warmup + repeats * steps + 1

    def loss() -> float:
        return float(model.evaluate(x, y, batch_size=b, verbose=0, return_dict=True)["loss"])

    first = loss()
    watch = timing.Stopwatch("step", warmup=0, sync=bench.sync)
    model.fit(np.concatenate([x] * n), np.concatenate([y] * n), batch_size=b, epochs=1, shuffle=False, verbose=0,
              callbacks=[_StepLaps(watch, warmup, steps, repeats, samples=steps * b)])
    result = timing.steady_summary(watch.laps, steps=steps, warmup=warmup, samples=b, losses=(first, loss()))
    print(timing.describe(result))
    bench.fields["steps"] = result
    return result


def initial_weights(bench: Bench, model: keras.Model) -> dict:
    """The initialisation check (support.init) on a freshly built model's weights, by their Keras paths,
    in Keras's (..., in, out) layout."""
    return bench.initialisation({w.path: keras.ops.convert_to_numpy(w) for w in model.trainable_weights}, "io")


def n_parameters(model: keras.Model) -> int:
    return sum(int(np.prod(w.shape)) for w in model.trainable_weights)


def device_peak_bytes(bench: Bench) -> int | None:
    """The backend allocator's peak on a GPU (None on the CPU, where records.write adds the host's peak)."""
    if not bench.gpu:
        return None
    if BACKEND == "tensorflow":
        return LIB.config.experimental.get_memory_info("GPU:0")["peak"]
    if BACKEND == "jax":
        stats = LIB.devices()[0].memory_stats()
        return stats["peak_bytes_in_use"] if stats else None
    return LIB.cuda.max_memory_allocated()


def write(bench: Bench, model: keras.Model, **fields) -> dict:
    """The run's record, with the model's parameter count, `jit_compile` as Keras ran it and the device's
    peak memory."""
    return bench.write(n_parameters=n_parameters(model), device_peak_bytes=device_peak_bytes(bench),
                       jit_compile=model.jit_compile, **fields)
