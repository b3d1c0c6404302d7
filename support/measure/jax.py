"""JAX's measurement plumbing (support.measure): its synchronisation, environment, weights and memory.

    from support.measure import jax as measure
    bench = measure.start("cnn_cifar10", settings, precision=precision, compilation=compilation,
                          record_path=record_path)

JAX compiles by construction (`jax.jit`, `nnx.jit`: one XLA program per step), so `compilation` "off" is
not_applicable; float16 training needs a loss scaler, which neither Optax nor Flax ships, so "fp16" is unsupported
for the training tasks (inference, ResNet-50's, has no gradients to scale and runs it on a GPU).
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from support import env, hardware
from support.measure import Bench

NOT_COMPILED = (
    "JAX compiles every step by construction: jax.jit makes it one XLA computation, and "
    "jax.disable_jit() is a debugging aid that runs it op by op, not an uncompiled mode to time"
)
NO_LOSS_SCALER = (
    "float16 mixed precision needs dynamic loss scaling, and neither Optax (0.2.8) nor Flax ships a loss scaler"
)
INFERENCE_TASKS = ("resnet50_features",)  # no gradients: float16 needs no loss scaling


def sync():
    """Wait for every array JAX holds: the newest step's outputs (the model's new parameters, the optimizer's
    state, the loss) are among them. JAX dispatches asynchronously: a jitted call returns once it is queued."""
    jax.block_until_ready(jax.live_arrays())


def start(
    task: str, settings, *, precision: str, compilation: str, record_path, variant: str = "", devices: int = 1
) -> Bench:
    """The run's Bench: prints JAX's versions and devices, checks `precision` and `compilation`, and ends the
    notebook (with its record) where they cannot run: `compilation="off"` (not_applicable), fp16 in training
    (unsupported), what the device does not compute (support.hardware)."""
    gpu = jax.default_backend() == "gpu"
    info = env.describe(jax)
    env.show(info)
    print(jax.devices())
    bench = Bench(
        task,
        "jax",
        settings,
        precision=precision,
        compilation=compilation,
        record_path=record_path,
        environment=info,
        gpu=gpu,
        sync=sync,
        variant=variant,
        devices=devices,
        device_memory=device_memory if gpu else None,
        matmul=matmul,
        gpu_capability=gpu_capability() if gpu else None,
    )
    if bench.compilation == "off":
        bench.stop(NOT_COMPILED, status="not_applicable")
    if precision == "fp16" and task not in INFERENCE_TASKS:
        bench.stop(NO_LOSS_SCALER)
    return bench


def gpu_capability() -> tuple[int, int] | None:
    """The first GPU's compute capability (major, minor): a CUDA device's `compute_capability` ('9.0')."""
    capability = getattr(jax.devices()[0], "compute_capability", None)
    return tuple(int(v) for v in capability.split(".")) if capability else None


def matmul(dtype: str):
    """support.hardware's probe: one square matmul on the CPU in `dtype` ('float32' or 'bfloat16'), compiled by
    XLA and waited for. JAX has no answer of its own: XLA generates its code for the CPU it finds (or the ISA of
    --xla_cpu_max_isa in XLA_FLAGS)."""
    cpu = jax.devices("cpu")[0]
    a = jax.device_put(jnp.ones((hardware.PROBE_N, hardware.PROBE_N), getattr(jnp, dtype)), cpu)
    dot = jax.jit(jnp.dot)
    return lambda: dot(a, a).block_until_ready()


def initial_weights(bench: Bench, model: nnx.Module) -> dict:
    """The initialisation check (support.init) on a freshly built model's parameters: Flax stores kernels
    (..., in, out), the 'io' layout; names are the parameters' paths, e.g. conv1/kernel. A 1x1 convolution written
    as an `nnx.Linear` named conv... (DenseNet-121's, an (in, out) kernel) is checked as the (1, 1, in, out)
    convolution kernel it stands for."""
    arrays = {}
    for path, variable in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        value = np.asarray(variable[...], dtype=np.float32)
        if value.ndim == 2 and str(path[-2]).startswith("conv"):
            value = value.reshape(1, 1, *value.shape)
        arrays["/".join(map(str, path))] = value
    return bench.initialisation(arrays, "io")


def build(bench: Bench, make):
    """`make()` (a model's constructor), timed, recorded as `build_s`: NNX initialises eagerly, and XLA compiles
    the initialiser for every new kernel shape (a second build of the same model finds them compiled)."""
    start = time.perf_counter()
    model = make()
    bench.fields["build_s"] = time.perf_counter() - start
    print(f"built in {bench.fields['build_s']:.1f} s")
    return model


def data_parallel_check(bench: Bench, model: nnx.Module, loss_fn, mesh: Mesh, x, y) -> dict:
    """Data parallelism's check (support.parity.data_parallel): from the model's weights and on one global batch
    (x, y), one step of plain SGD at learning rate 1 (`p - g`: each parameter moves by exactly the gradient the
    devices computed together; Adam's first step would move every weight by about its learning rate) on `mesh`,
    the batch split along its axis and the state copied to each device, against the same step on the mesh's first
    device alone. The sharded program normalises the whole global batch in batch norm ("global"), so the one-device
    reference is the whole batch in one forward pass. The model (in training mode) is left as it was."""
    graphdef, state = nnx.split(model)

    def sgd(state, x, y):
        model = nnx.merge(graphdef, state)
        grads = nnx.grad(loss_fn)(model, x, y)  # with respect to the nnx.Params
        return jax.tree.map(lambda p, g: p - g, nnx.state(model, nnx.Param), grads)

    def step(on: Mesh):
        whole, split = NamedSharding(on, PartitionSpec()), NamedSharding(on, PartitionSpec(on.axis_names[0]))
        run = jax.jit(sgd, in_shardings=(whole, split, split), out_shardings=whole)
        return flat(run(jax.device_put(state, whole), jax.device_put(x, split), jax.device_put(y, split)))

    one = Mesh(mesh.devices.flat[:1], mesh.axis_names)
    return bench.data_parallel(step(mesh), step(one), flat(nnx.state(model, nnx.Param)), batch_norm="global")


def flat(tree) -> dict:
    """A pytree's arrays by path, as numpy (float32 for comparison)."""
    return {
        jax.tree_util.keystr(path): np.asarray(leaf, np.float32)
        for path, leaf in jax.tree_util.tree_leaves_with_path(tree)
    }


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


class Tracer:
    """`jax.profiler` for Bench.profile: XLA's ops as they run (on a GPU its kernels), written as TensorBoard's XSpace
    and, with `create_perfetto_trace=True`, as a Chrome trace for Perfetto, which `stop` returns. Its documented use:

        with jax.profiler.trace("logdir", create_perfetto_trace=True):
            for _ in range(5):
                state, loss = train_step(state, xb, yb)
            jax.block_until_ready(loss)
    """

    reader, version = "jax", jax.__version__

    def __init__(self, gpu: bool = False):
        self.gpu = gpu

    def start(self, folder):
        self.folder = folder
        jax.profiler.start_trace(str(folder), create_perfetto_trace=True)

    def stop(self):
        jax.profiler.stop_trace()
        return max(self.folder.glob("plugins/profile/*/perfetto_trace.json.gz"), key=lambda p: p.stat().st_mtime)


def profile(bench: Bench, step) -> dict:
    """Where the steady-state `step()` goes, under jax.profiler (Tracer; Bench.profile)."""
    return bench.profile(step, Tracer(bench.gpu))


def write(bench: Bench, model: nnx.Module, **fields) -> dict:
    """The run's record, with the model's parameter count and the device's peak memory."""
    return bench.write(n_parameters=n_parameters(model), device_peak_bytes=device_peak_bytes(bench), **fields)


def device_memory() -> tuple[int, int] | None:
    """The first device for the sweep's memory guard: (what XLA's allocator can still hand out, its peak in use),
    from `memory_stats()`; None where the backend keeps no statistics."""
    stats = jax.devices()[0].memory_stats()
    if not stats or "bytes_limit" not in stats:
        return None
    return stats["bytes_limit"] - stats["bytes_in_use"], stats.get("peak_bytes_in_use", stats["bytes_in_use"])
