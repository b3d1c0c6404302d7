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
`support.records.stop()`, which writes a record with status `unsupported` (or `not_applicable`) and the
reason, in the framework's own words where it gives them, and ends the notebook there (raising `Unsupported`).
It imports support.frameworks only (standard library): records imports it, never the other way round.

    precision.check(precision, compilation)             # a bad value: one line naming it and the choices
    reason = hardware.reason(precision, gpu=gpu)         # support/hardware.py: what this device computes
    if reason:
        records.stop(record_path, reason, task=..., framework=..., params=settings, environment=info,
                       precision=precision, compilation=compilation)
"""

from __future__ import annotations

from support import frameworks as _frameworks

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

# The calibration each precision's MFU divides by (scripts/calibrate.py measures them): "<device>/<kind>", the
# fastest matrix product of that kind on that device. fp32 is the true-float32 peak; a bf16 row divides by the
# bf16 peak, never by float32's (on this project's AVX-512 CPU bf16 runs about twice as fast, on a GPU's tensor
# cores up to 15 times), or it would read above 100%.
PEAK_KINDS = {"fp32": "float32", "tf32": "tf32", "bf16": "bf16", "fp16": "fp16"}


def peak_key(device: str, precision: str) -> str:
    """'cpu/float32', 'cuda/bf16', ...: the calibration a `precision` row on `device` ("cpu"; else a GPU) uses."""
    return f"{'cpu' if device == 'cpu' else 'cuda'}/{PEAK_KINDS.get(precision, precision)}"


COMPILATIONS = ("auto", "off", "on")
# What `auto` means: each notebook's baseline, the fastest idiomatic way its framework runs it (support/frameworks.py:
# the framework's own default, Keras's per backend, a task's exception). The MXNet Module API is a symbolic graph,
# always compiled.
DEFAULT_COMPILATION = _frameworks.default_compilation()
STATUSES = ("unsupported", "not_applicable")


class Unsupported(Exception):
    """The notebook stops here: its precision or compilation cannot run; its record says why."""


def check(precision: str, compilation: str = "auto") -> None:
    """Raise ValueError, in one line naming the value and the choices, for a value no notebook knows."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    if compilation not in COMPILATIONS:
        raise ValueError(f"compilation {compilation!r} is not one of {', '.join(COMPILATIONS)}")


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
