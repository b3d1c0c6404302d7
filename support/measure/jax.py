"""JAX's measurement plumbing (support.measure): its synchronisation, environment, weights and memory.

    from support.measure import jax as measure
    bench = measure.start("cnn_cifar10", P, precision=precision, compilation=compilation, record_path=record_path)

JAX compiles by construction (`jax.jit`, `nnx.jit`: one XLA program per step), so `compilation` "off" is
not_applicable; float16 needs a loss scaler, which neither Optax nor Flax ships, so "fp16" is unsupported.
"""
from __future__ import annotations

import jax
import numpy as np
from flax import nnx

from support import env
from support.measure import Bench

NOT_COMPILED = ("JAX compiles every step by construction: jax.jit makes it one XLA computation, and "
                "jax.disable_jit() is a debugging aid that runs it op by op, not an uncompiled mode to time")
NO_LOSS_SCALER = ("float16 mixed precision needs dynamic loss scaling, and neither Optax (0.2.8) nor Flax "
                  "ships a loss scaler")


def sync():
    """Wait for every array JAX holds: the newest step's outputs (the model's new parameters, the optimizer's
    state, the loss) are among them. JAX dispatches asynchronously: a jitted call returns once it is queued."""
    jax.block_until_ready(jax.live_arrays())


def start(task: str, P, *, precision: str, compilation: str, record_path, variant: str = "") -> Bench:
    """The run's Bench: prints JAX's versions and devices, checks `precision` and `compilation`, and ends the
    notebook (with its record) where they cannot run: `compilation="off"` (not_applicable), fp16 (unsupported),
    tf32 and fp16 on a CPU (support.precision.device_reason)."""
    gpu = jax.default_backend() == "gpu"
    info = env.describe(jax)
    env.show(info)
    print(jax.devices())
    bench = Bench(task, "jax", P, precision=precision, compilation=compilation, record_path=record_path,
                  environment=info, gpu=gpu, sync=sync, variant=variant)
    if bench.compilation == "off":
        bench.stop(NOT_COMPILED, status="not_applicable")
    if precision == "fp16":
        bench.stop(NO_LOSS_SCALER)
    return bench


def initial_weights(bench: Bench, model: nnx.Module) -> dict:
    """The initialisation check (support.init) on a freshly built model's parameters: Flax stores kernels
    (..., in, out), the 'io' layout; names are the parameters' paths, e.g. conv1/kernel."""
    arrays = {"/".join(map(str, path)): np.asarray(variable[...], dtype=np.float32)
              for path, variable in nnx.to_flat_state(nnx.state(model, nnx.Param))}
    return bench.initialisation(arrays, "io")


def n_parameters(model: nnx.Module) -> int:
    """The trainable parameters: the model's nnx.Param variables."""
    return sum(int(np.prod(p.shape)) for p in jax.tree.leaves(nnx.state(model, nnx.Param)))


def device_peak_bytes(bench: Bench) -> int | None:
    """The device allocator's peak where JAX reports one (memory_stats() is None on the CPU, where
    records.write adds the host's peak)."""
    memory = jax.devices()[0].memory_stats()
    return memory["peak_bytes_in_use"] if memory else None


def variant(bench: Bench, name: str, step, *, loss=None) -> dict:
    """The steady state of a faster hand-written variant of the training step, beside the library's (run
    bench.steady_state first): recorded under `name` with its speed-up over the library's step."""
    steps = bench.steady_state(step, loss=loss, name=name)
    base = bench.fields.get("steps", {}).get("median_s")
    steps["speedup"] = base / steps["median_s"] if base and steps["median_s"] > 0 else None
    if steps["speedup"]:
        print(f"{name}: {steps['speedup']:.2f}x the library's step")
    return steps


def write(bench: Bench, model: nnx.Module, **fields) -> dict:
    """The run's record, with the model's parameter count and the device's peak memory."""
    return bench.write(n_parameters=n_parameters(model), device_peak_bytes=device_peak_bytes(bench), **fields)
