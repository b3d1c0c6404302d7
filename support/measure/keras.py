"""Keras 3's measurement plumbing (support.measure), on each of its backends (tensorflow, jax, torch).

    os.environ["KERAS_BACKEND"] = backend           # first: importing this module imports keras
    # the notebook's "This machine" cell: on torch, torch.set_flush_denormal(True), as in the PyTorch notebooks
    from support.measure import keras as measure
    settings = params.load("cnn_cifar10", profile, gpu=measure.gpu())
    bench = measure.start("cnn_cifar10", settings, precision=precision, compilation=compilation,
                          record_path=record_path)
    model.compile(..., jit_compile=bench.compiled)
    model.fit(..., callbacks=[measure.EpochTimer(bench)])     # one lap of the epoch timer per epoch
    measure.steady_state(bench, model, xb, yb)                # the training step as fit() runs it

ResNet-50 only runs inference: `first_call` (the inference step built anew) and `bench.throughput` (the core's)
time `predict_on_batch`.
DenseNet-121 trains data-parallel on several devices: `cpu_devices` makes CPU devices before the backend starts,
`gpu_count` counts the backend's GPUs, `data_parallel_check` compares a step on the devices with one on one device.

What differs between the backends (how each waits for its device, its TF32 switch, its allocator's peak) is
here, so that a notebook reads as Keras's own code on all three.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging

import keras
import numpy as np

from support import env, hardware, params, timing
from support.frameworks import KERAS_BACKENDS, keras_compilation_key
from support.measure import Bench

BACKEND = keras.config.backend()
LIB = importlib.import_module(BACKEND)  # the library under Keras: tensorflow, jax or torch


@functools.cache
def info() -> dict:
    """env.describe(keras): Keras's backend and version, and the backend's device, threads and version."""
    return env.describe(keras)


def gpu() -> bool:
    """Whether Keras runs on a GPU: each backend puts its work on its first GPU where it sees one."""
    return info()["device"] != "cpu"


def cpu_devices(devices) -> int:
    """The CPU devices a data-parallel run of `devices` asks for (params.cpu_devices), made before the backend
    starts (call this before anything else asks Keras for its device): JAX through `jax_num_cpu_devices`,
    TensorFlow as logical devices of its one physical CPU. They share the host's cores (they prove the
    data-parallel code right, not faster); with a GPU they go unused; the torch backend has no such devices."""
    n = params.cpu_devices(devices)
    if n > 1 and BACKEND == "jax":
        LIB.config.update("jax_num_cpu_devices", n)
    elif n > 1 and BACKEND == "tensorflow":
        LIB.config.set_logical_device_configuration(
            LIB.config.list_physical_devices("CPU")[0], [LIB.config.LogicalDeviceConfiguration()] * n
        )
    return n


def gpu_count() -> int:
    """The GPUs the backend sees (Keras's `keras.distribution.list_devices` has no torch implementation)."""
    if not gpu():
        return 0
    return LIB.cuda.device_count() if BACKEND == "torch" else len(keras.distribution.list_devices("gpu"))


def _without_data_parallel() -> str:
    """Why a run on several devices cannot run on the torch backend, where Keras 3 has no data parallelism
    (`keras.distribution` is implemented for JAX and TensorFlow: on torch `DataParallel()` fails looking up
    the devices, and given them, `fit()` ignores it), with Keras's own error: `start` refuses the run with it."""
    try:
        keras.distribution.DataParallel()
        error = "DataParallel() was accepted, and Keras's torch trainer ignores it"
    except AttributeError as raised:
        error = f"keras.distribution.DataParallel() raises AttributeError: {raised}"
    return (
        f"Keras {keras.__version__} has no data parallelism on the {BACKEND} backend "
        f"(keras.distribution has no {BACKEND} implementation: {error})"
    )


def _sync(on_gpu: bool):
    """A wait for everything the backend has queued. JAX dispatches asynchronously on every device (wait on
    every live array); TensorFlow and PyTorch run a CPU's work before they return, and queue a GPU's on a
    stream (wait for the devices)."""
    if BACKEND == "jax":
        return lambda: LIB.block_until_ready(LIB.live_arrays())
    if not on_gpu:
        return None
    return LIB.test.experimental.sync_devices if BACKEND == "tensorflow" else LIB.cuda.synchronize


def start(
    task: str, settings, *, precision: str, compilation: str, record_path, variant: str | None = None, devices: int = 1
) -> Bench:
    """The run's Bench: prints Keras's and its backend's versions and device, checks `precision` and
    `compilation` and ends the notebook with its record where this device cannot run them, or where Keras cannot:
    several devices on the torch backend (Keras 3 has no data parallelism there). `auto` is Keras's own
    `jit_compile="auto"` (Keras 3.15.1, `Trainer._resolve_auto_jit_compile`): off on torch, XLA on JAX, and on
    TensorFlow XLA where a GPU is visible (support.frameworks.keras_compilation_key), off
    on a CPU-only machine and under a tf.distribute strategy (several devices), as Keras itself.
    Then the switch Keras leaves to its backend: TF32 off for `fp32` and on for `tf32`
    (each backend has it on by default for some GPU operations); on JAX, jax2onnx's log quietened. The record's
    variant is the backend."""
    described = info()
    env.show(described)
    on_gpu = described["device"] != "cpu"
    bench = Bench(
        task,
        "keras",
        settings,
        precision=precision,
        compilation=compilation,
        record_path=record_path,
        environment=described,
        gpu=on_gpu,
        sync=_sync(on_gpu),
        compilation_key=keras_compilation_key(BACKEND, on_gpu, devices),
        variant=BACKEND if variant is None else variant,
        devices=devices,
        device_memory=device_memory() if on_gpu else None,
        own_bf16=own_bf16,
        matmul=matmul,
        gpu_capability=_backend_module().gpu_capability() if on_gpu else None,
        refusal=_without_data_parallel() if devices > 1 and BACKEND == "torch" else None,
    )
    tf32 = precision == "tf32"
    if BACKEND == "torch":
        LIB.backends.cuda.matmul.allow_tf32 = LIB.backends.cudnn.allow_tf32 = tf32
    elif on_gpu and BACKEND == "tensorflow":
        LIB.config.experimental.enable_tensor_float_32_execution(tf32)
    elif on_gpu:  # JAX; XLA on the CPU computes float32 in float32 anyway
        LIB.config.update("jax_default_matmul_precision", "tensorfloat32" if tf32 else "highest")
    if BACKEND == "jax":  # the ONNX export: jax2onnx logs a traceback for each plugin it skips
        logging.getLogger("jax2onnx").setLevel(logging.ERROR)
    print(f"{precision}, jit_compile={bench.compiled} on {BACKEND}")
    return bench


def _backend_module():
    """The backend framework's measurement module (support.measure.pytorch, .tensorflow or .jax), imported when
    asked: what Keras leaves to its backend (bf16 on this CPU, the GPU's compute capability) is asked there."""
    return importlib.import_module(f"support.measure.{KERAS_BACKENDS[BACKEND]}")


def own_bf16() -> str | None:
    """The backend's own answer whether its CPU kernels compute bfloat16 (None: they do, or it has no answer):
    PyTorch's oneDNN check on torch (support.measure.pytorch.own_bf16)."""
    return _backend_module().own_bf16() if BACKEND == "torch" else None


def matmul(dtype: str):
    """support.hardware's probe in Keras's own ops, on whichever backend: one square matmul in `dtype`, brought to
    numpy (which waits for it)."""
    a = keras.ops.cast(keras.ops.ones((hardware.PROBE_N, hardware.PROBE_N)), dtype)
    return lambda: keras.ops.convert_to_numpy(keras.ops.matmul(a, a))


class EpochTimer(keras.callbacks.Callback):
    """Times each epoch of `fit()` as one lap of `bench.epochs`: it opens when Keras begins the epoch and
    closes when its training steps are done, before the validation (`fit()` calls `on_test_begin` there), or
    at the epoch's end without validation; both ends wait for the device. Each of fit()'s steps takes the task's
    batch size on every device of the run (Bench's `devices`)."""

    def __init__(self, bench: Bench):
        super().__init__()
        self.bench, self._open = bench, False

    def on_epoch_begin(self, epoch, logs=None):
        self.bench.steps_per_epoch = self.params["steps"]
        self.bench.epochs.start()
        self._open = True

    def _close(self):
        if self._open:
            self.bench.epochs.stop(
                samples=self.bench.steps_per_epoch * self.bench.settings.batch_size * self.bench.devices
            )
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


class _LapsOnly(keras.callbacks.CallbackList):
    """fit()'s callbacks for the steady state: its laps, and no copy of each step's logs to the host. Keras's own
    CallbackList converts every step's logs to Python numbers for `on_train_batch_end`: synchronously on
    TensorFlow, in a thread on JAX and torch, a wait for the device after every step where the other frameworks
    wait at a repeat's ends only. Nothing here reads a step's logs; the epoch's are read once at its end."""

    def on_train_batch_end(self, batch, logs=None):
        pass


class _Repeated(keras.utils.PyDataset):
    """One batch, `n` times: fit()'s input where the epochs read a PyDataset (TensorFlow traces a PyDataset's
    batches, of unknown size, apart from arrays', so this reuses the step the epochs compiled)."""

    def __init__(self, x, y, n: int):
        super().__init__()
        self.x, self.y, self.n = x, y, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return self.x, self.y


def steady_state(bench: Bench, model: keras.Model, x: np.ndarray, y: np.ndarray, *, dataset: bool = False) -> dict:
    """The training step's compute throughput on one batch (x, y), as `fit()` runs it: one `fit()` over the
    batch repeated, `settings.warmup_steps` untimed steps, then `settings.step_repeats` laps of
    `settings.steps_per_repeat` steps (and one more step, untimed, whose start closes the last lap), waiting for the
    device only at a lap's ends (`_LapsOnly`: no per-step copy of the logs). It reuses the step `fit()` compiled for
    this shape and structure (`train_on_batch` hands the step `(x, y, None)`, not `(x, y)`, so TensorFlow and
    JAX would trace and compile it again). The learning check's losses (support.timing.learned) are the
    batch's loss in inference mode (`evaluate`) before the first step and after the last: every step
    trains on that batch, so a model that learns fits it. With `dataset=True` the batch comes through a
    `PyDataset`, as the epochs' batches did in a notebook that trains on one. The same dict as
    bench.steady_state."""
    settings = bench.settings
    warmup, steps, repeats, b = settings.warmup_steps, settings.steps_per_repeat, settings.step_repeats, len(x)
    n = warmup + repeats * steps + 1

    def loss() -> float:
        return float(model.evaluate(x, y, batch_size=b, verbose=0, return_dict=True)["loss"])

    first = loss()
    watch = timing.Stopwatch("step", warmup=0, sync=bench.sync)
    laps = _LapsOnly(
        [_StepLaps(watch, warmup, steps, repeats, samples=steps * b)],
        add_history=True,
        model=model,
        epochs=1,
        steps=n,
        verbose=0,
    )
    _fit_repeated(model, x, y, n, laps, dataset)
    result = timing.steady_summary(watch.laps, steps=steps, warmup=warmup, samples=b, losses=(first, loss()))
    print(timing.describe(result))
    bench.fields["steps"] = result
    return result


class _Profiled(keras.callbacks.Callback):
    """Starts the backend's profiler (`tracer`) and a lap of `watch` at the start of step `first`, and stops both at
    the start of step `first + steps`: the profile covers those steps as fit() runs them."""

    def __init__(self, tracer, folder, watch: timing.Stopwatch, first: int, steps: int):
        super().__init__()
        self.tracer, self.folder, self.watch, self.first, self.steps = tracer, folder, watch, first, steps
        self.trace = None

    def on_train_batch_begin(self, batch, logs=None):
        if batch == self.first:
            self.tracer.start(self.folder)
            self.watch.start()
        elif batch == self.first + self.steps:
            self.watch.stop()
            self.trace = self.tracer.stop()


def profile(bench: Bench, model: keras.Model, x: np.ndarray, y: np.ndarray, *, dataset: bool = False) -> dict:
    """Where the training step goes as fit() runs it (as `steady_state` does): the task's `profile_steps` steps,
    after one warm step, under the backend's own profiler (support.measure.tensorflow/jax/pytorch's Tracer: on
    TensorFlow `tf.profiler`, on JAX `jax.profiler`, on torch `torch.profiler`); Bench.profiled makes the breakdown."""
    steps = bench.settings.profile_steps
    n = 1 + steps + 1
    watch = timing.Stopwatch("profile", warmup=0, sync=bench.sync)
    profiled = _Profiled(_backend_module().Tracer(bench.gpu), bench.profile_folder(), watch, 1, steps)
    _fit_repeated(
        model, x, y, n, _LapsOnly([profiled], add_history=True, model=model, epochs=1, steps=n, verbose=0), dataset
    )
    return bench.profiled(profiled.tracer, profiled.trace, steps=steps, wall_s=watch.laps[0])


def _fit_repeated(model: keras.Model, x, y, n: int, callbacks, dataset: bool):
    """One fit() over the batch (x, y) `n` times, through a PyDataset where `dataset` (as the epochs' batches came)."""
    if dataset:
        model.fit(_Repeated(x, y, n), epochs=1, shuffle=False, verbose=0, callbacks=callbacks)
    else:
        b = len(x)
        model.fit(
            np.concatenate([x] * n),
            np.concatenate([y] * n),
            batch_size=b,
            epochs=1,
            shuffle=False,
            verbose=0,
            callbacks=callbacks,
        )


def first_call(bench: Bench, model: keras.Model, x):
    """`bench.first_call` on `model.predict_on_batch(x)` with the inference step built anew, as the learner's first
    call built it (ResNet-50's `### Throughput`; the extraction above already paid that call): Keras makes a new
    predict function (`make_predict_function(force=True)`: a new `tf.function` or `jax.jit`, traced and compiled on
    its first call), and on torch dynamo first forgets what it compiled (`torch._dynamo.reset()`), since it keys its
    cache on the code object, which a new `torch.compile` of the same function shares. Returns the features."""
    model.make_predict_function(force=True)
    if BACKEND == "torch":
        LIB._dynamo.reset()
    return bench.first_call(lambda: model.predict_on_batch(x))


def initial_weights(bench: Bench, model: keras.Model) -> dict:
    """The initialisation check (support.init) on a freshly built model's weights, by their Keras paths,
    in Keras's (..., in, out) layout: every weight, batch norm's moving statistics included (`model.weights`
    leaves out the seed generators' state)."""
    return bench.initialisation({w.path: keras.ops.convert_to_numpy(w) for w in model.weights}, "io")


def data_parallel_check(bench: Bench, model: keras.Model, x: np.ndarray, y: np.ndarray, *, strategy=None) -> dict:
    """Data parallelism must compute the step one device computes: one step of plain SGD at learning rate 1 (each
    weight moves by exactly minus its gradient) from the trained model's weights on the global batch (x, y), once
    through Keras's data-parallel path on the devices and once on one device, must leave the same trainable
    weights (support.parity.data_parallel, relative to the largest update). Each runs on a copy of the model
    (`clone_model`, all its weights, compiled with `SGD(1.0)` and the model's loss), so the model and its
    optimizer stay as they are.

    On the devices: a copy made where the model was (on JAX under the global `DataParallel` distribution,
    replicated; on TensorFlow in the strategy's scope, mirrored) and one `fit()` step on the global batch, the
    path that splits it on both backends. On one device, the loss the devices compute, which depends on where
    batch norm takes its statistics: JAX's sharded program normalises over the whole global batch ("global"),
    so the same `fit()` step under a `DataParallel` over the first device alone; each TensorFlow replica
    normalises its own contiguous share ("per-device") and the summed, 1/replicas-scaled gradients are the
    gradient of the mean of the shares' losses, so a copy outside the strategy runs each share through the
    model apart, averages the losses and applies the gradient (`tf.GradientTape`) with SGD at learning rate 1."""

    def trainable(m) -> dict:
        return {w.path: keras.ops.convert_to_numpy(c) for w, c in zip(model.trainable_weights, m.trainable_weights)}

    def sgd_copy():
        copy = keras.models.clone_model(model)
        copy.set_weights(model.get_weights())
        copy.compile(optimizer=keras.optimizers.SGD(learning_rate=1.0), loss=model.loss, jit_compile=model.jit_compile)
        return copy

    with strategy.scope() if strategy else contextlib.nullcontext():
        copy = sgd_copy()
    copy.fit(x, y, batch_size=len(x), epochs=1, shuffle=False, verbose=0)
    several = trainable(copy)
    if BACKEND == "jax":
        with keras.distribution.DataParallel(devices=keras.distribution.list_devices()[:1]).scope():
            copy = sgd_copy()
            copy.fit(x, y, batch_size=len(x), epochs=1, shuffle=False, verbose=0)
    else:
        copy = sgd_copy()
        with LIB.GradientTape() as tape:
            loss = (
                sum(
                    model.loss(ys, copy(xs, training=True))
                    for xs, ys in zip(np.split(x, bench.devices), np.split(y, bench.devices))
                )
                / bench.devices
            )
        keras.optimizers.SGD(learning_rate=1.0).apply(
            tape.gradient(loss, copy.trainable_weights), copy.trainable_weights
        )
    return bench.data_parallel(
        several, trainable(copy), trainable(model), batch_norm="global" if BACKEND == "jax" else "per-device"
    )


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


def device_memory():
    """The GPU's reading for the sweep's memory guard, as the backend's own notebooks take it (support.measure's
    pytorch and jax modules); TensorFlow's allocator reports no limit (`get_memory_info` has the current and peak
    bytes only), so there it is None and an out-of-memory error alone ends the sweep."""
    if BACKEND == "tensorflow":
        return None
    own = importlib.import_module(f"support.measure.{'pytorch' if BACKEND == 'torch' else 'jax'}")
    return own.device_memory


def write(bench: Bench, model: keras.Model, **fields) -> dict:
    """The run's record, with the model's parameter count, `jit_compile` as Keras ran it and the device's
    peak memory."""
    return bench.write(
        n_parameters=n_parameters(model),
        device_peak_bytes=device_peak_bytes(bench),
        jit_compile=model.jit_compile,
        **fields,
    )
