"""Precision and compilation: the values of every notebook's `precision` and `compilation` parameters,
one policy for all frameworks, and the record of a combination a framework or device cannot run.

Precision (the arithmetic of the forward and backward passes; parameters stay float32 throughout):
- `fp32`: true float32 everywhere, the baseline. TF32 is switched off where a GPU would use it.
- `tf32`: float32 storage, matrix products on NVIDIA tensor cores with 10-bit mantissas (Ampere and later).
- `bf16`: mixed precision in bfloat16: float32 weights and optimizer state, layers compute in bfloat16
  (8-bit mantissa, float32's exponent range, so no loss scaling).
- `fp16`: mixed precision in float16 with dynamic loss scaling (a 5-bit exponent underflows small gradients).

Compilation: `auto` runs the framework's own default (`DEFAULT_COMPILATION`), `off` eagerly, `on` through its
compiler (`torch.compile`, XLA through `jit_compile=True`, MXNet's `hybridize`). JAX compiles by
construction and Chainer has no compiler: for them the other setting is `not_applicable`.

A combination a framework or device cannot run is never run as something else: the notebook calls
`stop()`, which writes a record with status `unsupported` (or `not_applicable`) and the reason, in the
framework's own words where it gives them, and ends the notebook there.

    precision.check(precision, compilation)             # a bad value: one line naming it and the choices
    reason = precision.device_reason(precision, gpu)    # tf32 and fp16 need a GPU
    if reason:
        precision.stop(record_path, reason, task=..., framework=..., params=P, environment=info,
                       precision=precision, compilation=compilation)
"""
from __future__ import annotations

PRECISIONS = {
    "fp32": "true float32 (the baseline)",
    "tf32": "float32 with TF32 tensor-core matrix products",
    "bf16": "mixed precision: bfloat16 compute, float32 weights",
    "fp16": "mixed precision: float16 compute with loss scaling, float32 weights",
}
BASELINE = "fp32"
MIXED = ("bf16", "fp16")

# The largest relative deviation (support.parity.relative_error) a model's outputs may show against the
# float64 numpy reference, or against the same model elsewhere, when it computes in each precision.
# float32 rounds at 6e-8; TF32 and float16 keep 10 mantissa bits (5e-4) and bfloat16 8 (4e-3), and the
# deviation grows with the depth of the network (ResNet-50's 53 layers are the deepest here).
TOLERANCE = {"fp32": 1e-4, "tf32": 1e-2, "fp16": 1e-2, "bf16": 5e-2}

COMPILATIONS = ("auto", "off", "on")
# What `auto` means: each notebook's baseline, the fastest idiomatic way its framework runs it. Keras's is
# per backend (jit_compile="auto": XLA only on JAX); the MXNet Module API is a symbolic graph, always compiled.
# A "framework/task" entry overrides the framework's: PyTorch's ResNet-50 inference is compiled with Inductor's
# freezing by default (it roughly halves the eager time; compiling the training steps gained nothing on a CPU).
DEFAULT_COMPILATION = {"pytorch": "off", "tensorflow": "off", "keras-tensorflow": "off", "keras-jax": "on",
                       "keras-torch": "off", "jax": "on", "mxnet": "on", "chainer": "off",
                       "pytorch/resnet50_features": "on"}
STATUSES = ("unsupported", "not_applicable")


class Unsupported(Exception):
    """The notebook stops here: its precision or compilation cannot run; its record says why."""


def check(precision: str, compilation: str = "auto") -> None:
    """Raise ValueError, in one line naming the value and the choices, for a value no notebook knows."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    if compilation not in COMPILATIONS:
        raise ValueError(f"compilation {compilation!r} is not one of {', '.join(COMPILATIONS)}")


def device_reason(precision: str, gpu: bool) -> str | None:
    """Why this device cannot run `precision`, or None. The same rule for every framework."""
    if gpu or precision not in ("tf32", "fp16"):
        return None
    if precision == "tf32":
        return "TF32 is a mode of NVIDIA tensor cores (Ampere and later); a CPU has no TF32 arithmetic"
    return ("float16 mixed precision is for GPUs: this CPU has no float16 arithmetic (no AVX512-FP16 or AMX-FP16), "
            "so frameworks refuse it or emulate it in float32")


def default(framework: str, task: str = "") -> str:
    """The compilation `auto` means for `framework` (a key of DEFAULT_COMPILATION) in `task`."""
    return DEFAULT_COMPILATION.get(f"{framework}/{task}", DEFAULT_COMPILATION[framework])


def resolve(compilation: str, framework: str, task: str = "") -> str:
    """'on' or 'off': what `compilation` means for `framework` (a key of DEFAULT_COMPILATION) in `task`."""
    check(BASELINE, compilation)
    return default(framework, task) if compilation == "auto" else compilation


def tolerance(precision: str) -> float:
    check(precision)
    return TOLERANCE[precision]


def stop(record_path, reason: str, *, task: str, framework: str, params, environment: dict, precision: str,
         compilation: str, status: str = "unsupported", variant: str = ""):
    """Write the record of a combination that cannot run (with `record_path` None, only say so), then
    raise Unsupported, which ends the notebook: nothing runs as something it was not asked to be."""
    from support import records    # records imports numpy-free modules only; imported here to avoid a cycle

    if status not in STATUSES:
        raise ValueError(f"status {status!r} is not one of {', '.join(STATUSES)}")
    records.write_stopped(record_path, task=task, framework=framework, params=params, environment=environment,
                          precision=precision, compilation=compilation, status=status, reason=reason,
                          variant=variant)
    raise Unsupported(f"{status.replace('_', ' ')}: {reason}")
