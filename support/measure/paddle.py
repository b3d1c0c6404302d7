"""PaddlePaddle's measurement plumbing (support.measure): its environment, precision check, weights and memory.

    from support.measure import paddle as measure
    bench = measure.start("cnn_cifar10", settings, precision=precision, compilation=compilation,
                          record_path=record_path)

PaddlePaddle 3.3 runs on the CPU here (support/frameworks.py). Its default is the dynamic graph (eager);
`compilation="on"` is the static graph through `paddle.jit.to_static`.
"""

from __future__ import annotations

import warnings

import numpy as np
import paddle

from support import env, hardware
from support.measure import Bench


def start(
    task: str,
    settings,
    *,
    precision: str,
    compilation: str,
    record_path,
    variant: str = "",
    devices: int = 1,
) -> Bench:
    """The run's Bench: prints PaddlePaddle's versions and device, checks `precision` and `compilation`, and ends
    the notebook (with its record) where Paddle cannot run them here: bf16 where `paddle.amp.auto_cast` does nothing
    on this device (`own_bf16`). On the CPU Paddle's dynamic graph runs each operator before it returns: no wait.
    `devices`: the data-parallel devices one epoch's steps train on (their samples count)."""
    info = env.describe(paddle)
    env.show(info)
    return Bench(
        task,
        "paddle",
        settings,
        precision=precision,
        compilation=compilation,
        record_path=record_path,
        environment=info,
        gpu=False,
        sync=None,
        variant=variant,
        devices=devices,
        refuse=lambda p: own_bf16() if p == "bf16" else None,
        matmul=matmul,
    )


def own_bf16() -> str | None:
    """Paddle's own answer whether `paddle.amp.auto_cast(dtype="bfloat16")` computes in bfloat16 here (None: it
    does). Paddle 3.3's amp_guard (paddle/amp/auto_cast.py) enables it only on CUDAPlace, XPUPlace and CustomPlace;
    on the CPU it warns and runs float32: its warning is the refusal."""
    a = paddle.ones([2, 2])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with paddle.amp.auto_cast(dtype="bfloat16"):
            out = paddle.matmul(a, a)
    if out.dtype == paddle.bfloat16:
        return None
    said = [str(w.message) for w in caught if "amp" in str(w.message)]
    return f"PaddlePaddle {paddle.__version__}: " + (said[0] if said else "auto_cast(dtype='bfloat16') ran float32")


def matmul(dtype: str):
    """support.hardware's probe: one square matmul on the CPU in `dtype` ('float32' or 'bfloat16')."""
    a = paddle.to_tensor(np.random.default_rng(0).standard_normal((hardware.PROBE_N,) * 2, np.float32)).astype(dtype)
    return lambda: paddle.matmul(a, a)


def _oi(model: paddle.nn.Layer) -> dict:
    """The model's trainable parameters as float32 arrays by their Paddle names, in (out, in, ...) layout: Paddle's
    convolution kernels are (out, in, kh, kw) and its recurrent weights (3*hidden, in) like PyTorch's, but its
    `nn.Linear` weight is (in, out), transposed here."""
    linear = {id(layer.weight) for _, layer in model.named_sublayers() if isinstance(layer, paddle.nn.Linear)}
    return {
        name: (p.numpy().T if id(p) in linear else p.numpy()).astype(np.float32)
        for name, p in model.named_parameters()
        if p.trainable
    }


def initial_weights(bench: Bench, model: paddle.nn.Layer) -> dict:
    """The initialisation check (support.init) on a freshly built model's trainable parameters, by their Paddle
    names, in (out, in, ...) layout (Linear weights transposed from Paddle's (in, out))."""
    return bench.initialisation(_oi(model), "oi")


def n_parameters(model: paddle.nn.Layer) -> int:
    return int(sum(int(np.prod(p.shape)) for p in model.parameters() if p.trainable))


def device_peak_bytes(bench: Bench) -> int | None:
    """None: Paddle runs on the CPU here, where records.write adds the host's peak."""
    return None


def on_device(*arrays):
    """NumPy arrays as Paddle tensors on the current device (the CPU here)."""
    return tuple(paddle.to_tensor(a) for a in arrays)


def sweep(bench: Bench, make_step, batch_sizes: str, *, devices: int = 1) -> dict | None:
    """The batch-size sweep (Bench.sweep) on one process."""
    return bench.sweep(make_step, batch_sizes, devices=devices)


class Tracer:
    """`paddle.profiler` for Bench.profile: the host's operators (and on a GPU the kernels), written as a Chrome
    trace by `export_chrome_tracing`. Its documented use:

        import paddle.profiler as profiler
        with profiler.Profiler(targets=[profiler.ProfilerTarget.CPU],
                               on_trace_ready=profiler.export_chrome_tracing("logdir")) as prof:
            for _ in range(5):
                train_step(xb, yb)
                prof.step()
        prof.summary(op_detail=True)
    """

    reader, version = "paddle", paddle.__version__

    def __init__(self, gpu: bool = False):
        import paddle.profiler as profiler

        self.targets = [profiler.ProfilerTarget.CPU] + ([profiler.ProfilerTarget.GPU] if gpu else [])

    def start(self, folder):
        import paddle.profiler as profiler

        self.folder = folder
        self.prof = profiler.Profiler(targets=self.targets, on_trace_ready=profiler.export_chrome_tracing(str(folder)))
        self.prof.start()

    def stop(self):
        self.prof.stop()
        return max(self.folder.glob("*.json"), key=lambda p: p.stat().st_mtime)


def profile(bench: Bench, step) -> dict:
    """Where the steady-state `step()` goes, under paddle.profiler (Tracer; Bench.profile)."""
    return bench.profile(step, Tracer(bench.gpu))


def write(bench: Bench, model: paddle.nn.Layer, **fields) -> dict:
    """The run's record, with the model's trainable parameter count (on the CPU records.write adds the host's
    peak memory)."""
    return bench.write(n_parameters=n_parameters(model), device_peak_bytes=device_peak_bytes(bench), **fields)


# --- more functions (ResNet-50 and DenseNet-121 notebooks) are appended below this line -------------------------
# --- ResNet-50 and DenseNet-121

# support.parity's names are PyTorch's; Paddle's batch norm names its running statistics otherwise
BATCH_NORM_NAMES = {"running_mean": "_mean", "running_var": "_variance"}


def state_dict(weights: dict) -> dict:
    """Shared weights (support.parity: torchvision's names and layout) under a paddle.vision model's names, for
    `set_state_dict`: convolution kernels are OIHW in both and the layers carry torchvision's names, so only batch
    norm's running statistics are renamed."""

    def name(parameter: str) -> str:
        module, _, kind = parameter.rpartition(".")
        return f"{module}.{BATCH_NORM_NAMES[kind]}" if kind in BATCH_NORM_NAMES else parameter

    return {name(k): v for k, v in weights.items()}


def _distributed() -> bool:
    return paddle.distributed.is_initialized() and paddle.distributed.get_world_size() > 1


def from_rank0(read):
    """`read()` on rank 0, broadcast to every rank (None stays None), as a float64 tensor over the process group."""

    def agreed():
        value = read() if paddle.distributed.get_rank() == 0 else None
        shared = paddle.to_tensor([np.nan if value is None else value], dtype="float64")
        paddle.distributed.broadcast(shared, src=0)
        return None if np.isnan(shared.item()) else shared.item()

    return agreed


def sweep_ranks(bench: Bench, make_step, batch_sizes: str, *, devices: int = 1) -> dict | None:
    """The batch-size sweep (Bench.sweep) on one rank of several: each decision to go on must be the same on every
    rank, or one would wait forever in a step the others never take, so the clock and memory readings are rank 0's
    (as support.measure.pytorch.sweep); on one process it is `sweep`."""
    import time

    import psutil

    if not _distributed():
        return sweep(bench, make_step, batch_sizes, devices=devices)
    readings = dict(
        clock=from_rank0(time.perf_counter),
        peak=from_rank0(env.peak_host_memory),
        available=from_rank0(lambda: psutil.virtual_memory().available),
    )
    return bench.sweep(make_step, batch_sizes, devices=devices, **readings)


def _sgd_step(net: paddle.nn.Layer, replica: paddle.nn.Layer, loss_fn, amp: dict, shares) -> dict:
    """One SGD step (lr 1) of `replica`, through `net`, on the mean of the shares' losses, each its own forward pass."""
    sgd = paddle.optimizer.SGD(learning_rate=1.0, parameters=replica.parameters())
    with paddle.amp.auto_cast(**amp):
        loss = sum(loss_fn(net(x), y) for x, y in shares) / len(shares)
    loss.backward()
    sgd.step()
    return _oi(replica)


def data_parallel_check(
    bench: Bench, model: paddle.nn.Layer, build, wrap, loss_fn, amp: dict, xg, yg, *, rank: int, devices: int
) -> dict:
    """One step through `wrap` (paddle.DataParallel) on this rank's share of the global batch `xg, yg` against the
    same step on one device (every share its own forward pass, as batch norm is per device), both plain SGD at
    learning rate 1 on fresh models from `build()` holding `model`'s state, so the model and its optimizer stay as
    they were (support.parity.data_parallel compares the updates)."""

    def replica() -> paddle.nn.Layer:
        copy = build()
        copy.set_state_dict(model.state_dict())
        copy.train()
        return copy

    xs, ys = paddle.chunk(xg, devices), paddle.chunk(yg, devices)
    before = {name: array.copy() for name, array in _oi(model).items()}
    net = replica()
    several = _sgd_step(wrap(net), net, loss_fn, amp, [(xs[rank], ys[rank])])
    net = replica()
    one = _sgd_step(net, net, loss_fn, amp, list(zip(xs, ys)))
    return bench.data_parallel(several, one, before, batch_norm="per-device")
