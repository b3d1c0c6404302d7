"""TensorFlow 1.x graph style's measurement plumbing (support.measure): its environment, weights and memory.

    from support.measure import tensorflow1 as measure
    bench = measure.start("cnn_cifar10", settings, gpu=bool(gpus), precision=precision, compilation=compilation,
                          record_path=record_path)

The `tensorflow1` notebooks write TensorFlow 1.x code on TensorFlow 2's `tf.compat.v1`: a graph built once, run by a
`tf.compat.v1.Session`. The notebook calls `tf.compat.v1.disable_eager_execution()` right after it imports
TensorFlow, before anything builds a tensor; every helper here that builds ops builds them in a graph of its own, so
it runs the same with or without eager execution. `Session.run` returns numpy arrays once the step has run: no wait
is needed around a lap.

Compilation (support/frameworks.py): a Session always runs a graph that Grappler has optimised; "on" adds XLA's
auto-clustering (the session's `global_jit_level`; on the CPU with `--tf_xla_cpu_global_jit` in TF_XLA_FLAGS, which
the notebook sets before TensorFlow first reads them, when it lists its devices); "off" and "auto" leave it out
(TensorFlow 1.x's own default, and faster for the CNN on this CPU).

The profile step (`profile`) is TensorFlow 2's: its profiler traces a Session's graph as it traces a `tf.function`.
TensorFlow 1.x's own way traced one `Session.run` at a time into its step stats:

    run_metadata = tf.compat.v1.RunMetadata()
    session.run(fetches, feed, options=tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE),
                run_metadata=run_metadata)
    trace = tensorflow.python.client.timeline.Timeline(run_metadata.step_stats).generate_chrome_trace_format()
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from support import env, hardware
from support.measure import Bench
from support.measure.tensorflow import (  # TensorFlow 2's, graph mode or not
    device_peak_bytes,
    gpu_capability,
    profile,  # noqa: F401  (re-exported: the notebooks' profile step)
)

v1 = tf.compat.v1

# float16 training needs its loss scaled; these graphs cast to bfloat16 (float32's exponent range) and scale nothing.
FP16 = (
    "the TensorFlow 1.x notebooks cast their graphs to bfloat16 only: float16 needs a loss scale "
    "(tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer), which they do not write"
)


def start(
    task: str,
    settings,
    *,
    gpu: bool,
    precision: str,
    compilation: str,
    record_path,
    variant: str = "",
    devices: int = 1,
) -> Bench:
    """The run's Bench: prints TensorFlow's versions and devices, checks `precision` and `compilation`, and ends
    the notebook (with its record) where this device cannot run them. `devices`: the data-parallel devices one
    epoch's steps train on (their samples count)."""
    info = env.describe(tf, api="tf.compat.v1 graph and Session")
    env.show(info)
    return Bench(
        task,
        "tensorflow1",
        settings,
        precision=precision,
        compilation=compilation,
        record_path=record_path,
        environment=info,
        gpu=gpu,
        sync=None,  # Session.run returns the fetched arrays once the step has run, on a GPU too
        variant=variant,
        devices=devices,
        refuse=lambda p: FP16 if p == "fp16" and gpu else None,
        matmul=matmul,
        gpu_capability=gpu_capability() if gpu else None,
    )


def matmul(dtype: str):
    """support.hardware's probe: one square matmul on the CPU in `dtype` ('float32' or 'bfloat16'), in a graph of
    its own run by a Session of its own."""
    graph = tf.Graph()
    with graph.as_default(), tf.device("/CPU:0"):
        a = np.random.default_rng(0).standard_normal((hardware.PROBE_N, hardware.PROBE_N)).astype(np.float32)
        a = v1.cast(v1.constant(a), getattr(tf, dtype))
        out = v1.matmul(a, a)
    session = v1.Session(graph=graph)
    return lambda: session.run(out.op)


def weights(session: v1.Session, variables=None) -> dict:
    """{name: numpy array} of `variables` (default: the session graph's trainable variables), by their graph names
    without the ':0'."""
    if variables is None:
        with session.graph.as_default():
            variables = v1.trainable_variables()
    values = session.run(list(variables))
    return {v.op.name: np.asarray(a, np.float32) for v, a in zip(variables, values)}


def initial_weights(bench: Bench, build) -> dict:
    """The initialisation check (support.init) on freshly initialised variables, by their graph names, in
    TensorFlow's (..., in, out) layout (a convolution's HWIO, a dense or GRU kernel's (in, out)). `build()` makes the
    model's variables: it is called in a graph of its own, whose initialiser a Session of its own runs (or `build` is
    a Session whose variables are fresh)."""
    if isinstance(build, v1.Session):
        return bench.initialisation(weights(build), "io")
    with tf.Graph().as_default() as graph:
        v1.set_random_seed(bench.settings.seed)
        build()
        with v1.Session(graph=graph) as session:
            session.run(v1.global_variables_initializer())
            return bench.initialisation(weights(session), "io")


def n_parameters(graph: tf.Graph) -> int:
    """The graph's trainable parameters (the optimizer's slots are global variables, not trainable ones)."""
    with graph.as_default():
        return int(sum(np.prod(v.shape.as_list()) for v in v1.trainable_variables()))


def write(bench: Bench, graph: tf.Graph, **fields) -> dict:
    """The run's record, with the graph's trainable parameter count, the GPU's peak memory and whether the session
    ran XLA's auto-clustering (`xla_auto_jit`)."""
    return bench.write(
        n_parameters=n_parameters(graph),
        device_peak_bytes=device_peak_bytes(bench),
        xla_auto_jit=bench.compiled,
        **fields,
    )


# --- ResNet-50 and DenseNet-121 (the other helper's section: append below) ---------------------------------------
