"""MindSpore's measurement plumbing (support.measure): its synchronisation, environment, weights and memory.

    from support.measure import mindspore as measure
    bench = measure.start("cnn_cifar10", settings, precision=precision, compilation=compilation,
                          record_path=record_path)

MindSpore 2.10 runs on the CPU here (support/frameworks.py: its GPU plugin is built for CUDA 11 only). Its own
default mode is PyNative (eager); this project's, `compilation="on"`, is graph mode through `@mindspore.jit` on the
training step (or the forward pass), and `"off"` PyNative.
"""

from __future__ import annotations

import contextlib
import io
import logging
import sys
from pathlib import Path

import mindspore as ms
import numpy as np

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
    """The run's Bench: prints MindSpore's versions and device, checks `precision` and `compilation`, and ends
    the notebook (with its record) where MindSpore cannot run them here: bf16 where its CPU kernels have none
    (`own_bf16`). PyNative hands each operator to a runtime queue and returns before it has run, on the CPU too:
    every lap waits for the queue (`synchronize`) before reading the clock. `devices`: the data-parallel devices
    one epoch's steps train on (their samples count)."""
    numpy_bridge()
    cell_files()
    info = env.describe(ms)
    env.show(info)
    return Bench(
        task,
        "mindspore",
        settings,
        precision=precision,
        compilation=compilation,
        record_path=record_path,
        environment=info,
        gpu=False,
        sync=synchronize(),
        variant=variant,
        devices=devices,
        refuse=lambda p: own_bf16() if p == "bf16" else None,
        matmul=matmul,
    )


def serve_ranks() -> None:
    """msrun's scheduler (MS_ROLE=MS_SCHED), which runs the launched script too (support/frameworks.py, the
    launcher's `coordinate`): it joins the cluster and serves the workers' rendezvous until they end."""
    from mindspore import communication

    ms.set_device("CPU")
    communication.init()


def numpy_bridge() -> None:
    """MindSpore 2.10.0's C++ bridge to Python was built against NumPy 1.x: the first operator on tensors
    (pynative/py_parse.cc) asks NumPy for its 1.x C API, which NumPy 2 refuses with an ImportError ("A module that
    was compiled using NumPy 1.x cannot be run in NumPy 2.4.6"). MindSpore prints it through `sys.excepthook` (in
    Jupyter that is the cell's error, which stops papermill), logs "Numpy init failed" and carries on without NumPy's
    API: tensors still convert to and from arrays, but a NumPy scalar is no longer an operand (`tensor + np.float32(1)`
    is a TypeError). Made here once, with the hook and stderr quiet, so the notebook's cells stay clean."""
    hook = sys.excepthook
    sys.excepthook = lambda *exc_info: None
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            one = ms.Tensor([1.0])
            (one - one).asnumpy()
    finally:
        sys.excepthook = hook


def cell_files() -> None:
    """In Jupyter, keep each cell's code in the file ipykernel names it by (/tmp/ipykernel_<pid>/<hash>.py), as
    ipykernel's debugger does. MindSpore's graph compiler reads the source file of every line it compiles; ipykernel
    only names that file, and for each node MindSpore 2.10 then logs an ERROR and a WARNING from C++ ("Get realpath
    failed", "may not exists") while it holds the GIL. A graph as large as the GRU's 150 steps fills the pipe through
    which ipykernel reads the cell's stderr, whose reader needs the GIL: the kernel hangs in write(). Outside IPython
    (a script, where the files exist) this does nothing."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None or not hasattr(shell.compile, "get_code_name"):
        return

    def write(info):
        path = Path(shell.compile.get_code_name(info.raw_cell, info.raw_cell, 0))
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(info.raw_cell)

    shell.events.register("pre_run_cell", write)


def synchronize():
    """`mindspore.runtime.synchronize`, which waits for PyNative's queue on the CPU (its documentation names Ascend
    and GPU), once its first call is made: that call only logs "CPU device is not supported. Please use correct
    device" and returns without waiting (mindspore/runtime/stream.py and device.py, 2.10.0). Made here, with
    MindSpore's logger quiet, so that every lap's call waits."""
    logger = ms.log._get_logger()
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        ms.runtime.synchronize()
    finally:
        logger.setLevel(level)
    return ms.runtime.synchronize


def own_bf16() -> str | None:
    """MindSpore's own answer whether its CPU kernels compute bfloat16 (None: they do): a bfloat16 matrix product,
    whose kernel selection fails in MindSpore 2.10 ("Select CPU operator[MatMul] fail! Unsupported data type!")."""
    a = ms.ops.ones((2, 2), ms.bfloat16)
    try:
        ms.ops.matmul(a, a).asnumpy()
    except (TypeError, RuntimeError) as error:
        words = " ".join(str(error).split("----")[0].split())
        head, _, rest = words.partition(" The supported data types are")
        got = rest[rest.find("but get") :] if "but get" in rest else ""
        return f"MindSpore {ms.__version__} has no bfloat16 kernel on the CPU: {head} {got}".strip()
    return None


def matmul(dtype: str):
    """support.hardware's probe: one square matmul on the CPU in `dtype` ('float32' or 'bfloat16'), waited for."""
    a = ms.Tensor(np.random.default_rng(0).standard_normal((hardware.PROBE_N, hardware.PROBE_N), np.float32))
    a = a.astype(getattr(ms, dtype))
    return lambda: ms.ops.matmul(a, a).asnumpy() if dtype == "float32" else ms.ops.matmul(a, a).float().asnumpy()


def initial_weights(bench: Bench, net: ms.nn.Cell) -> dict:
    """The initialisation check (support.init) on a freshly built network's trainable parameters, by their
    MindSpore names, in its (out, in, ...) layout (PyTorch's)."""
    return bench.initialisation({p.name: p.asnumpy().astype(np.float32) for p in net.trainable_params()}, "oi")


def n_parameters(net: ms.nn.Cell) -> int:
    return int(sum(p.size for p in net.trainable_params()))


class Tracer:
    """MindSpore's profiler for Bench.profile: `mindspore.profiler.profile`, on the CPU its host operators (in graph
    mode and PyNative alike), analysed on `stop` (synchronously, in a second or two) into a timeline in the Chrome
    trace format (`<worker>_ascend_ms/ASCEND_PROFILER_OUTPUT/trace_view.json` in the folder). Its documented use:

        from mindspore.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler
        with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=0, active=1, repeat=1),
                     on_trace_ready=tensorboard_trace_handler("logdir")) as prof:
            for _ in range(5):
                train_step(xb, yb)
            prof.step()

    The profiled steps are one of the schedule's steps: `stop` ends it (`step`), which analyses it, so the profiler
    neither warns that it stopped mid-schedule nor records past the steps. Its warning at the start that the
    schedule has no warm-up (a profiler step before the recorded ones, which the warm steady state makes needless)
    is kept quiet, and so are the analysis's progress bars."""

    reader, version = "mindspore", ms.__version__

    def __init__(self, gpu: bool = False):
        from mindspore.profiler import ProfilerActivity

        self.activities = [ProfilerActivity.CPU] + ([ProfilerActivity.GPU] if gpu else [])

    def start(self, folder):
        from mindspore.profiler import profile, schedule, tensorboard_trace_handler

        self.folder = folder
        logger = ms.log._get_logger()
        level = logger.level
        logger.setLevel(logging.ERROR)
        try:
            self.prof = profile(
                activities=self.activities,
                schedule=schedule(wait=0, warmup=0, active=1, repeat=1),
                on_trace_ready=tensorboard_trace_handler(str(folder)),
                start_profile=False,
            )
        finally:
            logger.setLevel(level)
        self.prof.start()

    def stop(self):
        with contextlib.redirect_stdout(io.StringIO()):  # the analysis's progress bars
            self.prof.step()
        self.prof.stop()
        return max(self.folder.rglob("trace_view.json"), key=lambda p: p.stat().st_mtime)


def profile(bench: Bench, step) -> dict:
    """Where the steady-state `step()` goes, under MindSpore's profiler (Tracer; Bench.profile)."""
    return bench.profile(step, Tracer(bench.gpu))


def write(bench: Bench, net: ms.nn.Cell, **fields) -> dict:
    """The run's record, with the network's trainable parameter count (on the CPU records.write adds the host's
    peak memory)."""
    return bench.write(n_parameters=n_parameters(net), device_peak_bytes=None, **fields)


# --- more functions (ResNet-50 and DenseNet-121 notebooks) are appended below this line -------------------------
# --- ResNet-50 and DenseNet-121

# support.parity's names are PyTorch's; MindSpore's nn.BatchNorm2d names its four arrays otherwise
BATCH_NORM_NAMES = {"weight": "gamma", "bias": "beta", "running_mean": "moving_mean", "running_var": "moving_variance"}


def parameters_by_name(weights: dict) -> dict:
    """Shared weights (support.parity: PyTorch's names and layout) as MindSpore Parameters under a cell's names, for
    `load_param_into_net`: convolution kernels are OIHW in both, so only batch norm's names change (a 1-d array is a
    batch norm's in ResNet-50, which has no biases)."""

    def name(parameter: str, value) -> str:
        module, _, kind = parameter.rpartition(".")
        return f"{module}.{BATCH_NORM_NAMES[kind]}" if value.ndim == 1 and kind in BATCH_NORM_NAMES else parameter

    return {name(k, v): ms.Parameter(ms.Tensor(v), name(k, v)) for k, v in weights.items()}


def _distributed() -> bool:
    from mindspore.communication.management import GlobalComm

    return bool(GlobalComm.INITED) and ms.communication.get_group_size() > 1


def from_rank0(read, scale: float = 1.0):
    """`read()` on rank 0 (a number >= 0), the same value on every rank (None stays None), to 1/`scale`: a sum over
    the ranks in which only rank 0's is not zero. MindSpore's CPU AllReduce takes float32 and float16 alone, too coarse
    for a clock, so the value travels as an integer in four base-2^16 digits, each exact in float32."""
    all_reduce = ms.ops.AllReduce()

    def agreed():
        value = read() if ms.communication.get_rank() == 0 else None
        whole = 0 if value is None else round(value * scale)
        mine = [float(value is not None)] + [float((whole >> (16 * i)) & 0xFFFF) for i in range(4)]
        given, *digits = all_reduce(ms.Tensor(np.array(mine, np.float32))).asnumpy()
        return sum(int(d) << (16 * i) for i, d in enumerate(digits)) / scale if given else None

    return agreed


def sweep(bench: Bench, make_step, batch_sizes: str, *, devices: int = 1) -> dict | None:
    """The batch-size sweep (Bench.sweep); on several ranks every decision to go on must be the same everywhere, or
    one rank would wait forever in a step the others never take: the clock and memory readings are rank 0's."""
    import time

    import psutil

    readings = (
        dict(
            clock=from_rank0(time.perf_counter, scale=1e9),
            peak=from_rank0(env.peak_host_memory),
            available=from_rank0(lambda: psutil.virtual_memory().available),
        )
        if _distributed()
        else {}
    )
    return bench.sweep(make_step, batch_sizes, devices=devices, **readings)


def data_parallel_check(bench: Bench, net, make_net, wrap, loss_fn, xg, yg, *, rank: int, devices: int) -> dict:
    """One step whose gradients `wrap(parameters)` (DistributedGradReducer) averages over the ranks, on this rank's
    share of the global batch `xg, yg`, against the same step on one device (every share through the network, one
    forward pass each, as batch norm is per device): both plain SGD at learning rate 1 from `net`'s weights, on
    copies made by `make_net()` (so the network, its statistics and its optimizer stay as they were)."""
    before = {p.name: p.asnumpy().astype(np.float32).copy() for p in net.trainable_params()}
    share = len(xg) // devices
    shares = [(xg[i * share : (i + 1) * share], yg[i * share : (i + 1) * share]) for i in range(devices)]

    def sgd_step(pieces, reduce: bool) -> dict:
        replica = make_net()
        copies = {p.name: ms.Parameter(ms.Tensor(p.asnumpy()), p.name) for p in net.get_parameters()}
        missing, _ = ms.load_param_into_net(replica, copies, strict_load=True)
        assert not missing, missing
        replica.set_train()
        sgd = ms.nn.SGD(replica.trainable_params(), learning_rate=1.0)

        def loss():
            return sum(loss_fn(replica(x), y) for x, y in pieces) / len(pieces)

        _, grads = ms.value_and_grad(loss, None, sgd.parameters)()
        sgd(wrap(sgd.parameters)(grads) if reduce else grads)
        return {p.name: p.asnumpy().astype(np.float32) for p in replica.trainable_params()}

    several = sgd_step([shares[rank]], reduce=True)
    one = sgd_step(shares, reduce=False)
    return bench.data_parallel(several, one, before, batch_norm="per-device")


def leave() -> None:
    """The end of a run on several ranks: every rank waits for the others at a last AllReduce, then releases
    MindSpore's collective communication (`mindspore.communication.release`). Each rank's kernel then leaves the
    cluster (msrun's scheduler) as papermill shuts it down; a rank that reached the end alone waited there for the
    others, longer than papermill waits for a kernel to stop, and was killed before it could tell the scheduler,
    which then failed the launch ("The node: 0 is timed out")."""
    from_rank0(lambda: 0)()
    ms.communication.release()
