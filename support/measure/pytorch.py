"""PyTorch's measurement plumbing (support.measure): its synchronisation, environment, weights and memory.

    from support.measure import pytorch as measure
    bench = measure.start("cnn_cifar10", P, device, precision=precision, compilation=compilation,
                          record_path=record_path)
"""
from __future__ import annotations

import torch

from support import env
from support.measure import Bench


def start(task: str, P, device: torch.device, *, precision: str, compilation: str, record_path,
          variant: str = "") -> Bench:
    """The run's Bench: prints PyTorch's versions and device, checks `precision` and `compilation`, and ends
    the notebook (with its record) where this device cannot run them. CUDA runs asynchronously: every lap
    waits for the device with `torch.cuda.synchronize` before reading the clock."""
    gpu = device.type == "cuda"
    info = env.describe(torch)
    env.show(info)
    return Bench(task, "pytorch", P, precision=precision, compilation=compilation, record_path=record_path,
                 environment=info, gpu=gpu, sync=torch.cuda.synchronize if gpu else None, variant=variant)


def initial_weights(bench: Bench, model: torch.nn.Module) -> dict:
    """The initialisation check (support.init) on a freshly built model's parameters, (out, in, ...) layout."""
    return bench.initialisation({name: p.detach().float().cpu().numpy() for name, p in model.named_parameters()}, "oi")


def n_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def device_peak_bytes(bench: Bench) -> int | None:
    """The CUDA caching allocator's peak (None on the CPU, where records.write adds the host's peak)."""
    return torch.cuda.max_memory_allocated() if bench.gpu else None


def write(bench: Bench, model: torch.nn.Module, **fields) -> dict:
    """The run's record, with the model's parameter count and the device's peak memory."""
    return bench.write(n_parameters=n_parameters(model), device_peak_bytes=device_peak_bytes(bench), **fields)
