"""MXNet's measurement plumbing (support.measure): its synchronisation, environment, weights and memory.

    from support.measure import mxnet as measure          # after the environment variables MXNet reads at import
    bench = measure.start("cnn_cifar10", settings, ctx, precision=precision, compilation=compilation,
                          record_path=record_path, variant="gluon")

MXNet's engine runs every operator asynchronously, on the CPU as on a GPU: a Python call only queues work.
So each lap of the timers waits for the queue to drain with `mx.nd.waitall()` before it reads the clock.
One module for Gluon (a `gluon.Block`) and the symbolic Module API (an `mx.mod.Module`); DenseNet-121's data
parallelism (one process, a list of contexts) adds the epoch's samples over the devices and the check of one step
on the contexts against one context.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

from support import env
from support.measure import Bench

# What the Module API cannot run (variant "module"): it binds a symbolic graph, and AMP's loss scaler needs Gluon.
MODULE_COMPILED = "the Module API binds a symbolic graph (mx.sym) into an executor: it always runs compiled"
MODULE_FP16 = "AMP is currently only compatible with Gluon Trainer"  # amp.init_trainer's error for a Module
# MXNet 1.9.1's AMP and a hybridized GRU (gru_imdb, compiled): tracing the GRU for its graph calls symbol.zeros for the
# initial state, which AMP's operator wrapper breaks; the words are MXNet's error on the notebook's first call.
GRU_AMP = (
    "MXNet 1.9.1's AMP cannot trace a GRU inside a hybridized block: its initial state (symbol.zeros) fails "
    "in AMP's operator wrapper with TypeError: 'NoneType' object is not iterable"
)
BF16_GPU = (
    "MXNet 1.9.1's bfloat16 AMP is CPU-only: amp casts only CPU arrays to bfloat16 and its bfloat16 "
    "kernels are oneDNN's"
)


class _ModuleBench(Bench):
    """The Module API's Bench: `bind` builds the executor from the symbolic graph before training, so nothing is
    compiled inside the first step and the record's `compile_s` is None (as Gluon's imperative runs)."""

    def compile_s(self, first_step_s: float) -> float | None:
        return None


def start(
    task: str,
    settings,
    ctx: mx.Context,
    *,
    precision: str,
    compilation: str,
    record_path,
    variant: str = "",
    devices: int = 1,
) -> Bench:
    """The run's Bench: prints MXNet's versions and device (threads, oneDNN, CUDA), checks `precision` and
    `compilation`, and ends the notebook (with its record) where this device or API cannot run them (the Module
    API: uncompiled, not applicable; fp16, unsupported; the GRU: AMP with hybridize, unsupported). `devices`: the contexts one training step splits its
    batch over (their samples count in an epoch)."""
    gpu = ctx.device_type == "gpu"
    info = env.describe(mx)
    env.show(info)
    module = variant == "module"
    bench = (_ModuleBench if module else Bench)(
        task,
        "mxnet",
        settings,
        precision=precision,
        compilation=compilation,
        record_path=record_path,
        environment=info,
        gpu=gpu,
        sync=mx.nd.waitall,
        variant=variant,
        devices=devices,
        refuse=lambda p: BF16_GPU if p == "bf16" and gpu else None,
        own_bf16=own_bf16,
        matmul=convolution,
    )
    if module and not bench.compiled:
        bench.stop(MODULE_COMPILED, status="not_applicable")
    if module and precision == "fp16":
        bench.stop(MODULE_FP16)
    if task == "gru_imdb" and precision in ("bf16", "fp16") and bench.compiled:
        bench.stop(GRU_AMP)
    return bench


def epoch_callbacks(bench: Bench, steps: int, epochs: int):
    """`Module.fit`'s epochs as laps of the run's epoch timer (`bench.epochs`, as `bench.epoch` times a loop's),
    through fit's callbacks: `(batch_end, epoch_end)`. fit has no hook where an epoch begins, so the first lap opens
    here (call this just before `fit`), the last batch's `batch_end` closes each lap (`steps` batches an epoch) and
    `epoch_end`, placed after the callbacks that log and score the epoch, opens the next one, which so includes fit's
    `train_data.reset()` (the reshuffle, as a DataLoader's shuffle falls in its epoch). Each end waits for the engine."""
    bench.steps_per_epoch = steps
    samples = steps * bench.settings.batch_size * bench.devices
    bench.epochs.start()

    def batch_end(param):
        if param.nbatch + 1 == steps:
            bench.epochs.stop(samples)

    def epoch_end(epoch, symbol, arg_params, aux_params):
        if epoch + 1 < epochs:
            bench.epochs.start()

    return batch_end, epoch_end


def convolution(dtype: str, channels: int = 16):
    """A small 3x3 convolution on the CPU in `dtype` ('float32' or 'bfloat16', cast as MXNet's AMP casts),
    waited for: support.hardware's probe, and through own_bf16 MXNet's own answer."""
    from mxnet.contrib.amp.amp import bfloat16

    x, w = mx.nd.ones((2, channels, 8, 8)), mx.nd.ones((channels, channels, 3, 3))
    if dtype == "bfloat16":
        x, w = (mx.nd.amp_cast(a, dtype=bfloat16) for a in (x, w))

    def call():
        mx.nd.Convolution(x, w, kernel=(3, 3), pad=(1, 1), num_filter=channels, no_bias=True).wait_to_read()

    return call


def own_bf16() -> str | None:
    """MXNet's own answer whether its oneDNN computes bfloat16 on this CPU (None: it does): one bfloat16
    convolution, whose error is MXNet's words. MXNet 1.9.1's oneDNN reads DNNL_MAX_CPU_ISA (not ONEDNN_...)."""
    try:
        convolution("bfloat16")()
    except mx.base.MXNetError as err:
        return f"a bfloat16 convolution fails with {' '.join(str(err).split())[:200]}"
    return None


def _arrays(model) -> dict:
    """{name: numpy array} of a Gluon block's parameters or a Module's (arguments only: the weights); a Gluon
    parameter on several contexts (data parallelism) is read on its first."""
    if isinstance(model, mx.mod.BaseModule):
        return {name: a.asnumpy() for name, a in model.get_params()[0].items()}
    return {name: p.list_data()[0].asnumpy() for name, p in model.collect_params().items() if p.grad_req != "null"}


def initial_weights(bench: Bench, model) -> dict:
    """The initialisation check (support.init) on a freshly initialised model, in MXNet's (out, in, ...) layout."""
    return bench.initialisation(_arrays(model), "oi")


def n_parameters(model) -> int:
    return int(sum(np.prod(a.shape) for a in _arrays(model).values()))


class Tracer:
    """MXNet's profiler for Bench.profile: every operator the engine runs, imperative or in a hybridized graph, as
    a Chrome trace its `dump` writes. Its documented use:

        mx.profiler.set_config(profile_imperative=True, profile_symbolic=True, filename="trace.json")
        mx.profiler.set_state("run")
        for _ in range(5):
            train_step(xb, yb)
        mx.nd.waitall()
        mx.profiler.set_state("stop")
        mx.profiler.dump()
    """

    reader, version = "mxnet", mx.__version__

    def __init__(self, gpu: bool = False):
        self.gpu = gpu

    def start(self, folder):
        self.path = Path(folder) / "trace.json"
        mx.profiler.set_config(
            profile_imperative=True, profile_symbolic=True, aggregate_stats=False, filename=str(self.path)
        )
        mx.profiler.set_state("run")

    def stop(self):
        mx.nd.waitall()
        mx.profiler.set_state("stop")
        mx.profiler.dump()
        return self.path


def profile(bench: Bench, step, net: gluon.HybridBlock | None = None) -> dict:
    """Where the steady-state `step()` goes, under MXNet's profiler (Tracer; Bench.profile). A hybridized graph
    runs its operators in bulk segments, which the profiler times as one event named by the operators it holds
    (cut at 127 characters): so a hybridized `net` is profiled hybridized again with no bulk segments
    (`hybridize`'s forward_bulk_size and backward_bulk_size 0, after one untimed step that traces it again), each
    operator its own event, then hybridized back with its own flags. The Module API's executor keeps its segments."""
    flags = dict(net._flags) if net is not None and net._active else None  # hybridize's flags, as last given
    if flags:
        net.hybridize(**{**flags, "forward_bulk_size": 0, "backward_bulk_size": 0})
        step()
        mx.nd.waitall()
    try:
        return bench.profile(step, Tracer(bench.gpu))
    finally:
        if flags:
            net.hybridize(**flags)


def write(bench: Bench, model, **fields) -> dict:
    """The run's record, with the model's parameter count. MXNet 1.9 has no peak-memory API for its GPU pool:
    `mx.context.gpu_memory_info()` gives the whole device's free and total bytes at the moment (every process's),
    so `device_peak_bytes` is None and a GPU run prints the memory in use at the end (records.write adds the
    host's peak)."""
    if bench.gpu:
        free, total = mx.context.gpu_memory_info(0)
        print(
            f"GPU memory in use at the end (whole device, not a peak): {(total - free) / 2**30:.2f} "
            f"of {total / 2**30:.1f} GiB"
        )
    return bench.write(n_parameters=n_parameters(model), device_peak_bytes=None, **fields)


def data_parallel_check(bench: Bench, model: gluon.HybridBlock, build, loss_fn, contexts: list, x, y) -> dict:
    """Data parallelism's check (support.parity.data_parallel): from `model`'s weights and on the global batch
    `x, y`, one step on every context through `split_and_load`, as the notebook's `train_step` takes it, must change
    the trainable parameters as one step on the first context does. Batch norm is per context (each normalises its
    own slice), so the reference runs the same slices (`gluon.utils.split_data`) through the model apart, recorded
    together: the sum of their per-image losses over the global batch, the loss the contexts minimise together.
    Both steps are plain SGD at learning rate 1 on copies of `model` (`build()` makes an uninitialised one; each is
    hybridized like the run), so every parameter moves by exactly the gradient the step applied, and the model and
    its Trainer stay as they were. Recorded as the `data_parallel` field."""
    x, y = x.as_in_context(contexts[0]), y.as_in_context(contexts[0])
    names = list(model.collect_params())

    def trainable(net) -> dict:
        return {
            name: p.data(contexts[0]).asnumpy()
            for name, p in zip(names, net.collect_params().values())
            if p.grad_req != "null"
        }

    def sgd_step(ctx, xs, ys) -> dict:
        net = build()
        with tempfile.TemporaryDirectory() as folder:
            model.save_parameters(str(Path(folder) / "before.params"))
            net.load_parameters(str(Path(folder) / "before.params"), ctx=ctx)
        if bench.compiled:
            net.hybridize(static_alloc=True, static_shape=True)
        trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 1.0})
        with autograd.record():
            losses = [loss_fn(net(a).astype("float32", copy=False), b) for a, b in zip(xs, ys)]
        autograd.backward(losses)
        trainer.step(x.shape[0])
        return trainable(net)

    n = len(contexts)
    before = trainable(model)
    several = sgd_step(contexts, gluon.utils.split_and_load(x, contexts), gluon.utils.split_and_load(y, contexts))
    one = sgd_step(contexts[0], gluon.utils.split_data(x, n), gluon.utils.split_data(y, n))
    return bench.data_parallel(several, one, before, batch_norm="per-device")
