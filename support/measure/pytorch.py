"""PyTorch's measurement plumbing (support.measure): its synchronisation, environment, weights and memory, and
what a data-parallel run (DenseNet-121 under torchrun) needs on top: a barrier in every wait, rank 0's readings
for the sweep, and the check of one DDP step against the same step on one device.

    from support.measure import pytorch as measure
    bench = measure.start("cnn_cifar10", settings, device, precision=precision, compilation=compilation,
                          record_path=record_path)
"""

from __future__ import annotations

import copy
import time

import numpy as np
import psutil
import torch
import torch.distributed as dist

from support import env, hardware
from support.measure import Bench


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def start(
    task: str,
    settings,
    device: torch.device,
    *,
    precision: str,
    compilation: str,
    record_path,
    variant: str = "",
    devices: int = 1,
) -> Bench:
    """The run's Bench: prints PyTorch's versions and device, checks `precision` and `compilation`, and ends
    the notebook (with its record) where this device cannot run them. CUDA runs asynchronously: every lap
    waits for the device with `torch.cuda.synchronize` before reading the clock; in a process group of several
    ranks (start the group first) every lap also waits at a barrier, so the ranks' clocks start and stop together.
    `devices`: the ranks, each stepping on the task's batch (their samples count in an epoch)."""
    gpu = device.type == "cuda"
    info = env.describe(torch)
    env.show(info)
    waits = ([torch.cuda.synchronize] if gpu else []) + ([dist.barrier] if _distributed() else [])

    def sync():
        for wait in waits:
            wait()

    return Bench(
        task,
        "pytorch",
        settings,
        precision=precision,
        compilation=compilation,
        record_path=record_path,
        environment=info,
        gpu=gpu,
        sync=sync if waits else None,
        variant=variant,
        devices=devices,
        device_memory=device_memory if gpu else None,
        own_bf16=own_bf16,
        matmul=matmul,
        gpu_capability=gpu_capability() if gpu else None,
    )


def gpu_capability() -> tuple[int, int]:
    """The first GPU's compute capability (major, minor), as PyTorch reports it (support.hardware's GPU rule)."""
    return tuple(torch.cuda.get_device_capability())


def own_bf16() -> str | None:
    """PyTorch's own answer whether its CPU kernels compute bfloat16 (None: they do): oneDNN's check, which reads
    the CPU and oneDNN's ISA cap (ONEDNN_MAX_CPU_ISA)."""
    if torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return None
    return "torch.ops.mkldnn._is_mkldnn_bf16_supported() is False: its oneDNN has no bfloat16 kernels for this CPU"


def matmul(dtype: str):
    """support.hardware's probe: one square matmul on the CPU in `dtype` ('float32' or 'bfloat16')."""
    a = torch.randn(hardware.PROBE_N, hardware.PROBE_N).to(getattr(torch, dtype))
    return lambda: torch.mm(a, a)


def device_memory() -> tuple[int, int]:
    """This process's GPU for the sweep's memory guard: (what PyTorch can still allocate: the device's free bytes
    and the free blocks its caching allocator holds; the most it has had allocated)."""
    cuda = torch.cuda
    return cuda.mem_get_info()[0] + cuda.memory_reserved() - cuda.memory_allocated(), cuda.max_memory_allocated()


def initial_weights(bench: Bench, model: torch.nn.Module) -> dict:
    """The initialisation check (support.init) on a freshly built model's parameters, (out, in, ...) layout."""
    return bench.initialisation({name: p.detach().float().cpu().numpy() for name, p in model.named_parameters()}, "oi")


def n_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def device_peak_bytes(bench: Bench) -> int | None:
    """The CUDA caching allocator's peak (None on the CPU, where records.write adds the host's peak)."""
    return torch.cuda.max_memory_allocated() if bench.gpu else None


def from_rank0(read):
    """`read()` on rank 0, broadcast to every rank (None stays None): a float64 CPU tensor, so the process group
    needs a CPU backend (gloo; on GPUs "cpu:gloo,cuda:nccl")."""

    def agreed():
        value = read() if dist.get_rank() == 0 else None
        shared = torch.tensor([np.nan if value is None else value], dtype=torch.float64)
        dist.broadcast(shared, src=0)
        return None if np.isnan(shared.item()) else shared.item()

    return agreed


def sweep(bench: Bench, make_step, batch_sizes: str, *, devices: int = 1) -> dict | None:
    """The batch-size sweep (Bench.sweep); on several ranks each decision to go on must be the same everywhere, or
    one rank would wait forever in a step the others never take: the clock and memory readings are rank 0's."""
    readings = (
        {}
        if not _distributed()
        else dict(
            clock=from_rank0(time.perf_counter),
            peak=from_rank0(env.peak_host_memory),
            available=from_rank0(lambda: psutil.virtual_memory().available),
        )
    )
    if readings and bench.device_memory:
        free, high = (from_rank0(lambda i=i: bench.device_memory()[i]) for i in (0, 1))
        readings["device_memory"] = lambda: (free(), high())
    return bench.sweep(make_step, batch_sizes, devices=devices, **readings)


def _sgd_step(net: torch.nn.Module, replica: torch.nn.Module, loss_fn, amp: dict, shares) -> dict:
    """One SGD step (lr 1) of `replica`, through `net`, on the mean of the shares' losses, each its own forward pass."""
    sgd = torch.optim.SGD(replica.parameters(), lr=1.0)
    with torch.autocast(**amp):
        loss = sum(loss_fn(net(x), y) for x, y in shares) / len(shares)
    loss.backward()
    sgd.step()
    return {name: p.detach().float().cpu().numpy() for name, p in replica.named_parameters()}


def data_parallel_check(
    bench: Bench, model: torch.nn.Module, wrap, loss_fn, amp: dict, xg, yg, *, rank: int, devices: int
) -> dict:
    """One step through `wrap` (DDP) on this rank's share of the global batch `xg, yg` against the same step on
    one device (every share through a copy, one forward pass each, as batch norm is per device), both plain SGD at
    learning rate 1 from `model`'s weights on copies of it, so the model, its statistics and its optimizer stay as
    they were (support.parity.data_parallel compares the updates)."""
    before = {name: p.detach().float().cpu().numpy().copy() for name, p in model.named_parameters()}
    replica = copy.deepcopy(model).train()
    several = _sgd_step(wrap(replica), replica, loss_fn, amp, [(xg.chunk(devices)[rank], yg.chunk(devices)[rank])])
    replica = copy.deepcopy(model).train()
    one = _sgd_step(replica, replica, loss_fn, amp, list(zip(xg.chunk(devices), yg.chunk(devices))))
    return bench.data_parallel(several, one, before, batch_norm="per-device")


class Tracer:
    """`torch.profiler` for Bench.profile: the host's operators (aten::...) on a CPU, and on a GPU the CUDA kernels
    and copies too (support.profiles reads the kernels alone where there are any). Its documented use, which
    `start` and `stop` split in two:

        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                train_step(xb, yb)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=10))
        prof.export_chrome_trace("trace.json")     # for Perfetto (ui.perfetto.dev)
    """

    reader, version = "pytorch", torch.__version__

    def __init__(self, gpu: bool):
        from torch.profiler import ProfilerActivity

        self.activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])

    def start(self, folder):
        self.path = folder / "trace.json"
        self.prof = torch.profiler.profile(activities=self.activities)
        self.prof.start()

    def stop(self):
        self.prof.stop()
        self.prof.export_chrome_trace(str(self.path))
        return self.path


def profile(bench: Bench, step) -> dict:
    """Where the steady-state `step()` goes, under torch.profiler (Tracer; Bench.profile)."""
    return bench.profile(step, Tracer(bench.gpu))


def write(bench: Bench, model: torch.nn.Module, **fields) -> dict:
    """The run's record, with the model's parameter count and the device's peak memory."""
    return bench.write(n_parameters=n_parameters(model), device_peak_bytes=device_peak_bytes(bench), **fields)
