"""MXNet's measurement plumbing (support.measure): its synchronisation, environment, weights and memory.

    from support.measure import mxnet as measure          # after the environment variables MXNet reads at import
    bench = measure.start("cnn_cifar10", P, ctx, precision=precision, compilation=compilation,
                          record_path=record_path, variant="gluon")

MXNet's engine runs every operator asynchronously, on the CPU as on a GPU: a Python call only queues work.
So each lap of the timers waits for the queue to drain with `mx.nd.waitall()` before it reads the clock.
One module for Gluon (a `gluon.Block`) and the symbolic Module API (an `mx.mod.Module`).
"""
from __future__ import annotations

import mxnet as mx
import numpy as np

from support import env
from support.measure import Bench

BF16_GPU = ("MXNet 1.9.1's bfloat16 AMP is CPU-only: amp casts only CPU arrays to bfloat16 and its bfloat16 "
            "kernels are oneDNN's")


class _ModuleBench(Bench):
    """The Module API's Bench: `bind` builds the executor from the symbolic graph before training, so nothing is
    compiled inside the first step and the record's `compile_s` is None (as Gluon's imperative runs)."""

    def compile_s(self, first_step_s: float) -> float | None:
        return None


def start(task: str, P, ctx: mx.Context, *, precision: str, compilation: str, record_path,
          variant: str = "") -> Bench:
    """The run's Bench: prints MXNet's versions and device (threads, oneDNN, CUDA), checks `precision` and
    `compilation`, and ends the notebook (with its record) where this device or API cannot run them."""
    gpu = ctx.device_type == "gpu"
    info = env.describe(mx)
    env.show(info)
    bench = (_ModuleBench if variant == "module" else Bench)(
        task, "mxnet", P, precision=precision, compilation=compilation, record_path=record_path,
        environment=info, gpu=gpu, sync=mx.nd.waitall, variant=variant)
    if precision == "bf16" and gpu:
        bench.stop(BF16_GPU)
    return bench


def _arrays(model) -> dict:
    """{name: numpy array} of a Gluon block's parameters or a Module's (arguments only: the weights)."""
    if isinstance(model, mx.mod.BaseModule):
        return {name: a.asnumpy() for name, a in model.get_params()[0].items()}
    return {name: p.data().asnumpy() for name, p in model.collect_params().items() if p.grad_req != "null"}


def initial_weights(bench: Bench, model) -> dict:
    """The initialisation check (support.init) on a freshly initialised model, in MXNet's (out, in, ...) layout."""
    return bench.initialisation(_arrays(model), "oi")


def n_parameters(model) -> int:
    return int(sum(np.prod(a.shape) for a in _arrays(model).values()))


def write(bench: Bench, model, **fields) -> dict:
    """The run's record, with the model's parameter count. MXNet 1.9 has no peak-memory API for its GPU pool:
    `mx.context.gpu_memory_info()` gives the whole device's free and total bytes at the moment (every process's),
    so `device_peak_bytes` is None and a GPU run prints the memory in use at the end (records.write adds the
    host's peak)."""
    if bench.gpu:
        free, total = mx.context.gpu_memory_info(0)
        print(f"GPU memory in use at the end (whole device, not a peak): {(total - free) / 2**30:.2f} "
              f"of {total / 2**30:.1f} GiB")
    return bench.write(n_parameters=n_parameters(model), device_peak_bytes=None, **fields)
