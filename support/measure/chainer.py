"""Chainer's measurement plumbing (support.measure): its synchronisation, environment, weights and memory.

    from support.measure import chainer as measure
    bench = measure.start("cnn_cifar10", settings, device, precision=precision, compilation=compilation,
                          record_path=record_path)
    measure.time_epochs(trainer, bench)     # one lap of the epoch timer per epoch of a training.Trainer

CuPy and NVIDIA's libraries read their TF32 switches (CUPY_TF32, NVIDIA_TF32_OVERRIDE) when Chainer imports CuPy,
so a notebook sets them before it imports Chainer or this module.
"""

from __future__ import annotations

import copy
import threading
import time

import chainer
import numpy as np

from support import env
from support.measure import Bench

# Chainer is define-by-run: each function runs as Python calls it. Its one graph optimisation, the experimental
# `chainer.static_graph` decorator, replays a traced schedule of the same functions (no fusion, no compiler).
NO_COMPILER = (
    "Chainer is define-by-run: each function runs as Python calls it; its experimental "
    "chainer.static_graph replays a traced schedule of the same functions (no fusion) and is not "
    "this project's compiled variant"
)


def framework_reason(precision: str, gpu: bool) -> str | None:
    """Why Chainer cannot compute in `precision` (None where it can): numpy and CuPy have no bfloat16 type,
    and CuPy before 8 has no TF32 switch for its own matrix products."""
    if precision == "bf16":
        try:
            np.dtype("bfloat16")
        except TypeError as err:
            return (
                f"Chainer computes in numpy arrays (CuPy's on a GPU), and neither has a bfloat16 type: "
                f"numpy.dtype('bfloat16') raises TypeError: {err}; Chainer's only mixed precision is float16 "
                "(chainer.mixed16)"
            )
    if precision == "tf32" and gpu:
        cupy = chainer.backends.cuda.cupy
        if int(cupy.__version__.split(".")[0]) < 8:
            return f"CuPy {cupy.__version__} has no TF32 switch for its matrix products (CUPY_TF32 came with CuPy 8)"
    return None


def start(
    task: str, settings, device, *, precision: str, compilation: str, record_path, variant: str = "", devices: int = 1
) -> Bench:
    """The run's Bench: prints Chainer's versions and device, checks `precision` and `compilation`, and ends the
    notebook (with its record) where this device or Chainer cannot run them (bf16; compilation "on": not
    applicable). CuPy runs asynchronously: on a GPU every lap waits for the device before reading the clock.
    `devices`: the devices a ParallelUpdater's step takes the task's batch on (their samples count in an epoch)."""
    gpu = isinstance(device, chainer.backend.GpuDevice)
    info = env.describe(chainer)
    env.show(info)
    bench = Bench(
        task,
        "chainer",
        settings,
        precision=precision,
        compilation=compilation,
        record_path=record_path,
        environment=info,
        gpu=gpu,
        sync=device.device.synchronize if gpu else None,
        variant=variant,
        devices=devices,
        device_memory=device_memory if gpu else None,
        refuse=lambda p: framework_reason(p, gpu),
        gpu_capability=gpu_capability() if gpu else None,
    )
    if bench.compiled:
        bench.stop(NO_COMPILER, status="not_applicable")
    if gpu:
        _peak_hook()  # from here on, every allocation from CuPy's pool counts (device_peak_bytes)
    return bench


def time_epochs(trainer: chainer.training.Trainer, bench: Bench) -> None:
    """Time each epoch of `trainer` as one lap of `bench.epochs` (Keras's EpochTimer for a Chainer Trainer).

    A Trainer calls its extensions after each update, highest priority first, so the timer is two extensions: the
    lap closes when an epoch's last update is done, before the Evaluator (PRIORITY_WRITER) validates, and the next
    one opens at the lowest priority, after the validation and the log of that iteration, unless training stops
    there. A lap holds the epoch's updates and the per-update extensions (LogReport's sums), not the validation.
    Both ends wait for the device. Each update takes the task's batch size on every device of the run."""
    laps = {"iteration": 0}

    def open_lap(trainer):
        length, unit = trainer.stop_trigger.get_training_length()
        done = trainer.updater.epoch_detail if unit == "epoch" else trainer.updater.iteration
        if done < length:
            laps["iteration"] = trainer.updater.iteration
            bench.epochs.start()

    @chainer.training.make_extension(
        trigger=(1, "epoch"), priority=chainer.training.PRIORITY_WRITER + 1, initializer=open_lap
    )
    def close_lap(trainer):
        bench.steps_per_epoch = trainer.updater.iteration - laps["iteration"]
        bench.epochs.stop(samples=bench.steps_per_epoch * bench.settings.batch_size * bench.devices)

    trainer.extend(close_lap, name="epoch_timer")
    trainer.extend(open_lap, name="epoch_timer_reopen", trigger=(1, "epoch"), priority=-1)


def gpu_capability() -> tuple[int, int]:
    """The GPU's compute capability (major, minor) from CuPy's `Device().compute_capability` ('75', '90')."""
    digits = chainer.backends.cuda.cupy.cuda.Device().compute_capability
    return int(digits[:-1]), int(digits[-1])


_PEAK = {}


def _peak_hook():
    """A CuPy memory hook that keeps the bytes in use from the memory pool and their peak: CuPy's pool reports
    only its size now (`total_bytes`, held blocks included) and what is in use now (`used_bytes`), no peak.
    `cupy.cuda.MemoryHook` is CuPy's documented way to watch every `malloc` and `free` of the pool. It is
    registered once, when first asked for (a second `__enter__` of one name raises KeyError, as a notebook run
    twice in one kernel would): like PyTorch's `max_memory_allocated`, its peak is the process's."""
    if "hook" not in _PEAK:
        cupy = chainer.backends.cuda.cupy

        class PeakHook(cupy.cuda.MemoryHook):
            name = "DLRosettaPeakHook"

            def __init__(self):
                self.used, self.peak = 0, 0

            def malloc_postprocess(self, device_id, size, mem_size, mem_ptr, pmem_id):
                self.used += mem_size
                self.peak = max(self.peak, self.used)

            def free_postprocess(self, device_id, mem_size, mem_ptr, pmem_id):
                self.used -= mem_size

        _PEAK["hook"] = PeakHook().__enter__()
    return _PEAK["hook"]


def initial_weights(bench: Bench, model: chainer.Link) -> dict:
    """The initialisation check (support.init) on a freshly built model's parameters, by their paths in the
    model (`conv1/W`, `gru/0/w3`), in Chainer's (out, in, ...) layout."""
    return bench.initialisation(
        {name.lstrip("/"): chainer.backends.cuda.to_cpu(p.array) for name, p in model.namedparams()}, "oi"
    )


def trainable(link: chainer.Link) -> dict:
    """A copy of a model's trainable parameters by their paths in it, as numpy arrays (`to_cpu` alone would
    return a numpy parameter itself, which the optimizer changes in place)."""
    return {name: np.array(chainer.backends.cuda.to_cpu(p.array)) for name, p in link.namedparams()}


def replicate(main: chainer.Link, devices: list) -> dict:
    """ParallelUpdater's models: `main` (on the first device) and a deep copy of it on each other device."""
    return {"main": main, **{f"device{i}": copy.deepcopy(main).to_device(d) for i, d in enumerate(devices[1:], 1)}}


def data_parallel_check(bench: Bench, model: chainer.Link, with_loss, loss_fn, devices: list, x, y) -> dict:
    """Data parallelism's check (support.parity.data_parallel): from the same weights and on the same global
    batch (x, y), one step through a ParallelUpdater over `devices` against the same step on one device.

    `with_loss(model)` is the model with its loss as the notebook trains it on several devices (each share's mean
    loss divided by the devices); `loss_fn(logits, labels)` is the plain mean loss. The step is plain SGD at
    learning rate 1 (no momentum, no weight decay), so each parameter moves by exactly the gradient the devices
    added up (Adam's first step moves every weight by about its learning rate whatever the gradient, which would
    hide a wrongly scaled one). Each replica normalises its own share in batch norm, so the one-device reference
    takes the same strided shares (x[i::n]), each through the model in a forward call of its own, and averages
    their losses with `loss_fn`: the gradient of that mean is what the devices' gradients must add up to (a
    whole-batch forward pass would normalise over all the shares together). Both work on deep copies: the trained
    model stays as it was."""
    n = len(devices)
    model.cleargrads()  # no gradients copied along with the model
    several = copy.deepcopy(model)
    before = trainable(several)
    replicas = replicate(with_loss(several), devices)
    sgd = chainer.optimizers.SGD(lr=1.0).setup(replicas["main"])
    held = chainer.iterators.SerialIterator(chainer.datasets.TupleDataset(x, y), len(x), shuffle=False)
    chainer.training.updaters.ParallelUpdater(held, sgd, models=replicas, devices=dict(zip(replicas, devices))).update()
    one = copy.deepcopy(model)
    one_sgd = chainer.optimizers.SGD(lr=1.0).setup(one)
    loss = sum(loss_fn(one(x[i::n]), y[i::n]) for i in range(n)) / n
    one.cleargrads()
    loss.backward()
    one_sgd.update()
    return bench.data_parallel(trainable(several), trainable(one), before, batch_norm="per-device")


def n_parameters(model: chainer.Link) -> int:
    return sum(p.size for p in model.params())


def device_memory() -> tuple[int, int]:
    """The GPU for the sweep's memory guard: (the device's free bytes and the blocks CuPy's pool holds unused, the
    most the pool has had in use since the first `start`)."""
    cupy = chainer.backends.cuda.cupy
    return cupy.cuda.runtime.memGetInfo()[0] + cupy.get_default_memory_pool().free_bytes(), _peak_hook().peak


def device_peak_bytes(bench: Bench) -> int | None:
    """The most bytes in use from CuPy's memory pool at once since the first `start` (its peak hook; PyTorch's
    max_memory_allocated); None on the CPU, where records.write adds the host's peak."""
    return _peak_hook().peak if bench.gpu else None


class Tracer(chainer.FunctionHook):
    """Chainer's function hooks for Bench.profile: Chainer has no trace profiler, but a `FunctionHook` is called
    before and after every function's forward and backward (its `TimerHook` sums them); this one keeps each call's
    start and end as a Chrome trace event, named like TimerHook's report by the function's class ('Add', not its
    label '_ + _'), and an optimizer hook ('pre' and 'post' the update) adds the optimizer's update. On a GPU the
    times are the host's (CuPy's kernels run asynchronously). The hook's documented use:

        from chainer.function_hooks import TimerHook
        with TimerHook() as hook:
            for _ in range(5):
                optimizer.update(classifier, xb, yb)
        hook.print_report()
    """

    name = "ChromeTrace"
    reader, version = "chainer", chainer.__version__

    def __init__(self, optimizer: chainer.Optimizer):
        super().__init__()
        self.optimizer = optimizer

    def _begin(self, name: str, cat: str = "function"):
        self.stack.append((name, cat, time.perf_counter()))

    def _end(self):
        name, cat, begun = self.stack.pop()
        self.events.append(
            {
                "ph": "X",
                "name": name,
                "cat": cat,
                "pid": 0,
                "tid": threading.get_ident(),
                "ts": begun * 1e6,
                "dur": (time.perf_counter() - begun) * 1e6,
            }
        )

    def forward_preprocess(self, function, in_data):
        self._begin(function._impl_name)

    def forward_postprocess(self, function, in_data):
        self._end()

    def backward_preprocess(self, function, in_data, out_grad):
        self._begin(f"{function._impl_name} backward")

    def backward_postprocess(self, function, in_data, out_grad):
        self._end()

    def start(self, folder):
        self.events, self.stack = [], []
        self.optimizer.add_hook(
            lambda opt: self._begin(f"{type(opt).__name__}.update", "optimizer"), "profile_pre", timing="pre"
        )
        self.optimizer.add_hook(lambda opt: self._end(), "profile_post", timing="post")
        self.__enter__()

    def stop(self):
        self.__exit__(None, None, None)
        self.optimizer.remove_hook("profile_pre")
        self.optimizer.remove_hook("profile_post")
        return {"traceEvents": self.events}  # Bench.profiled keeps it, gzipped


def profile(bench: Bench, step, optimizer: chainer.Optimizer) -> dict:
    """Where the steady-state `step()` goes, under Chainer's hooks on its functions and on `optimizer` (Tracer;
    Bench.profile)."""
    return bench.profile(step, Tracer(optimizer))


def write(bench: Bench, model: chainer.Link, **fields) -> dict:
    """The run's record, with the model's parameter count and the device's peak memory."""
    return bench.write(n_parameters=n_parameters(model), device_peak_bytes=device_peak_bytes(bench), **fields)
