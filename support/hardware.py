"""What the hardware computes at hardware speed, asked once: the precisions each device runs natively.

A precision a device does not compute is `unsupported` for every framework, with one line naming what was found,
as TF32 is on a CPU: emulated bfloat16 runs tens to hundreds of times slower than float32 (PyTorch's bfloat16
matmul on an AVX2 Zen 3: 1 GFLOP/s against 175), so a bf16 row there would time the emulation, not the framework.

The CPU is read from its flags (`/proc/cpuinfo` on Linux) where they are conclusive:
- `avx512_bf16` or `amx_bf16` (x86-64), `bf16` (aarch64): bfloat16 at hardware speed;
- x86-64 without AVX-512 (AVX2 and older, no `avx_ne_convert`), aarch64 without `bf16`: none;
- otherwise (AVX-512 without bf16, where oneDNN converts through float32; AVX2 with AVX-NE-CONVERT; other CPUs):
  measured, by a probe of milliseconds that the framework passes (a small bfloat16 matmul against float32): a path
  EMULATION times slower than float32 is emulation.
A framework's own answer, where it has one (PyTorch's `torch.ops.mkldnn._is_mkldnn_bf16_supported()`, a bfloat16
convolution through MXNet's oneDNN), is asked as well: its kernels for the ISA at hand may lack what the CPU has.

Caps: `DLROSETTA_CPU_ISA` (one of LEVELS) makes this module answer as for that ISA, so that a developer on an
AVX-512 machine sees what an AVX2 user sees; oneDNN's own caps (`ONEDNN_MAX_CPU_ISA`, read by PyTorch's and
TensorFlow's oneDNN, and `DNNL_MAX_CPU_ISA`, read by MXNet 1.9.1's) cap it too, since under them the frameworks'
bfloat16 kernels are gone (TensorFlow's dispatch still sees the CPU's flags and crashes in them). `caps(isa)` is
every variable that caps the frameworks at once (the runner's `--cpu-isa`).

The NVIDIA GPUs are read from `nvidia_smi(*fields)`, the one reader of nvidia-smi's answers (support.env's
`gpu_names`, the runner, the device check and the set-up ask it).

Standard library only (support.env reads /proc/cpuinfo): support.measure and scripts/calibrate.py ask it, and
scripts/setup_envs.py reads nvidia-smi through it with the user's bare python3, before numpy exists; the frameworks'
probes are theirs.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from collections.abc import Callable

from support import env

ISA_VARIABLE = "DLROSETTA_CPU_ISA"
# x86-64 levels, oldest first: each a set of flags the level needs (avx512: the AVX-512 core oneDNN builds on).
LEVELS = ("sse4_2", "avx", "avx2", "avx512", "avx512_bf16", "amx")
_NEEDS = {
    "sse4_2": {"sse4_2"},
    "avx": {"avx"},
    "avx2": {"avx2", "fma"},
    "avx512": {"avx512f", "avx512bw", "avx512vl", "avx512dq"},
    "avx512_bf16": {"avx512_bf16"},
    "amx": {"amx_bf16", "amx_tile"},
}
_LABEL = {
    "sse4_2": "SSE4.2",
    "avx": "AVX",
    "avx2": "AVX2",
    "avx512": "AVX-512",
    "avx512_bf16": "AVX-512 with avx512_bf16",
    "amx": "AMX",
}
# oneDNN's names for its ISA caps (ONEDNN_MAX_CPU_ISA, DNNL_MAX_CPU_ISA) -> LEVELS; ALL and DEFAULT cap nothing.
_ONEDNN = {
    "SSE41": "sse4_2",
    "AVX": "avx",
    "AVX2": "avx2",
    "AVX2_VNNI": "avx2",
    "AVX2_VNNI_2": "avx2",
    "AVX512_CORE": "avx512",
    "AVX512_CORE_VNNI": "avx512",
    "AVX512_CORE_BF16": "avx512_bf16",
    "AVX512_CORE_FP16": "avx512_bf16",
    "AVX10_1_512": "avx512_bf16",
    "AVX512_CORE_AMX": "amx",
    "AVX512_CORE_AMX_FP16": "amx",
    "AVX10_1_512_AMX": "amx",
    "AVX10_1_512_AMX_FP16": "amx",
    "AVX10_2_512": "avx512_bf16",
    "AVX10_2_512_AMX_2": "amx",
}
_CAP_VARIABLES = (ISA_VARIABLE, "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")
EMULATION = 10.0  # a bfloat16 probe this many times slower than float32 is emulation, not hardware
PROBE_N = 256  # the probe's square matmul: about a millisecond in float32 on one core
# What the frameworks do with bfloat16 on a CPU without it, measured: PyTorch 2.14's matmul under oneDNN's AVX2 cap
# 24-83x slower than float32 (this project's Zen 5), on an AVX2 Zen 3 170-600x; MXNet 1.9.1 and TensorFlow 2.21
# under oneDNN's AVX2 cap stop in their convolutions ("could not create a primitive descriptor").
EMULATED = "frameworks emulate it, tens to hundreds of times slower than float32, or stop in their kernels"
# The words of a framework whose kernels lack a primitive for this ISA (oneDNN: PyTorch, TensorFlow, MXNet): a run
# of a precision that fails with them is recorded unsupported, never failed (scripts/run_all.py).
ISA_ERRORS = ("could not create a primitive descriptor", "could not create a primitive")


def _cpuinfo_flags() -> set[str]:
    """The first processor's feature flags ('flags' on x86-64, 'Features' on aarch64; support.env reads
    /proc/cpuinfo); empty where unreadable."""
    fields = env._cpuinfo()
    return set((fields.get("flags") or fields.get("Features") or "").split())


def _x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64", "i686", "i386")


def level(flags: set[str]) -> str | None:
    """The highest of LEVELS whose flags (and every older level's) `flags` has; None off x86-64 or without SSE4.2."""
    found = None
    for name in LEVELS:
        if not _NEEDS[name] <= flags:
            break
        found = name
    return found


def _cap_level(variable: str, value: str) -> str | None:
    """The level a cap variable's value names (None: no cap); a bad DLROSETTA_CPU_ISA is one line naming it."""
    value = value.strip()
    if not value:
        return None
    if variable == ISA_VARIABLE:
        if value.lower() not in LEVELS:
            raise ValueError(f"{ISA_VARIABLE}={value!r} is not one of {', '.join(LEVELS)}")
        return value.lower()
    return _ONEDNN.get(value.upper())  # ALL, DEFAULT or a name of a newer oneDNN: no cap here


class Cpu:
    """This CPU as the frameworks see it: its flags, its ISA level, and the cap set on it (if any)."""

    def __init__(self, flags: set[str] | None = None, environ=None, x86: bool | None = None):
        environ = os.environ if environ is None else environ
        self.flags = _cpuinfo_flags() if flags is None else set(flags)
        self.x86 = _x86() if x86 is None else x86
        self.own_level = level(self.flags) if self.x86 else None
        self.level, self.cap = self.own_level, None
        # the ISA the run was told to answer as (the runner's --cpu-isa sets it with oneDNN's caps): the machine it
        # names; a oneDNN cap alone, which a notebook may set for its framework's speed (MindSpore's convolutions),
        # caps that framework's kernels and bfloat16, not the machine its results are filed under
        declared = _cap_level(ISA_VARIABLE, environ.get(ISA_VARIABLE, ""))
        below = self.own_level is None or (declared and LEVELS.index(declared) < LEVELS.index(self.own_level))
        self.declared = declared if declared and below else None
        for variable in _CAP_VARIABLES:
            capped = _cap_level(variable, environ.get(variable, ""))
            if capped and (self.level is None or LEVELS.index(capped) < LEVELS.index(self.level)):
                self.level, self.cap = capped, f"{variable}={environ[variable].strip()}"

    def label(self) -> str:
        """'AVX-512 with avx512_bf16', 'AVX2 (capped by DLROSETTA_CPU_ISA=avx2; the CPU has AMX)', 'aarch64', ..."""
        if not self.x86:
            return platform.machine() or "this CPU"
        name = _LABEL.get(self.level, "x86-64 without SSE4.2")
        return name + (f" (capped by {self.cap}; the CPU has {_LABEL.get(self.own_level, '?')})" if self.cap else "")

    def bf16_by_flags(self) -> bool | None:
        """True or False where the flags settle it, None where it has to be measured."""
        if not self.x86:
            if platform.machine().lower() in ("aarch64", "arm64") and self.flags:
                return "bf16" in self.flags
            return None
        if self.level in ("avx512_bf16", "amx"):
            return True
        if self.level == "avx512" or (self.level == "avx2" and "avx_ne_convert" in self.flags and not self.cap):
            return None
        return False

    def no_bf16(self, detail: str = EMULATED) -> str:
        """The one line of an unsupported bf16 run, naming the ISA found (and the cap that set it)."""
        needs = "needs avx512_bf16 or AMX" if self.x86 else "needs the bf16 extension"
        if self.cap:
            return (
                f"this CPU, capped at {_LABEL[self.level]} by {self.cap} (it has {_LABEL.get(self.own_level, '?')}),"
                f" has no bfloat16 arithmetic ({needs}): {detail}"
            )
        name = _LABEL.get(self.level, platform.machine()) if self.x86 else platform.machine()
        return f"this CPU has no bfloat16 arithmetic ({name}; {needs}): {detail}"


def probe_ratio(matmul: Callable[[str], Callable[[], object]], repeats: int = 3) -> float:
    """How many times slower a bfloat16 matmul runs than a float32 one: `matmul(dtype)` ('float32' or 'bfloat16')
    returns a call computing one PROBE_N x PROBE_N product and waiting for it; each is called once to warm up,
    then `repeats` times (support.timing.benchmark, imported here: this module stays standard library at import),
    and the fastest calls compared."""
    from support import timing

    best = {
        dtype: timing.benchmark(matmul(dtype), repeats=repeats, warmup=1)["min_s"] for dtype in ("float32", "bfloat16")
    }
    return best["bfloat16"] / max(best["float32"], 1e-9)


def cpu_bf16(own: Callable[[], str | None] | None = None, matmul=None, cpu: Cpu | None = None) -> dict:
    """Does this CPU compute bfloat16 at hardware speed for this framework? {"native": bool, "how": why, and
    "reason": the one line where it does not}. `own()` is the framework's own answer (None: it can, else its
    words), asked unless the flags already say no; `matmul` its probe (probe_ratio), run where the flags cannot
    settle it."""
    cpu = cpu or Cpu()
    by_flags = cpu.bf16_by_flags()
    if by_flags is False:
        return {"native": False, "how": "flags", "reason": cpu.no_bf16()}
    words = own() if own else None
    if words:
        return {"native": False, "how": "framework", "reason": cpu.no_bf16(f"the framework says: {words}")}
    if by_flags:
        return {"native": True, "how": "flags"}
    if matmul is None:
        return {"native": True, "how": "not measured: no probe"}
    ratio = probe_ratio(matmul)
    if ratio > EMULATION:
        return {
            "native": False,
            "how": f"probe: {ratio:.0f}x float32",
            "reason": cpu.no_bf16(
                f"emulated bfloat16 runs about {ratio:.0f} times slower than float32 (a {PROBE_N}x{PROBE_N} matmul)"
            ),
        }
    return {"native": True, "how": f"probe: {ratio:.1f}x float32"}


NVIDIA_SMI_TIMEOUT = 30  # seconds: a hung driver gives no GPUs, never a hung run


def nvidia_smi(*fields: str) -> list[dict[str, str]]:
    """nvidia-smi's answer to `--query-gpu=<fields>`: one dict per GPU, keyed by the fields asked for, e.g.
    `nvidia_smi("name", "driver_version", "memory.total", "compute_cap")` ->
    `[{"name": "NVIDIA H100 80GB HBM3", "driver_version": "580.82.07", "memory.total": "81559", "compute_cap": "9.0"}]`
    (`--format=csv,noheader,nounits`: values as strings, without units). [] where nvidia-smi is missing, fails, or
    does not answer within NVIDIA_SMI_TIMEOUT; a line that does not hold one value per field is left out."""
    exe = shutil.which("nvidia-smi")
    if not exe or not fields:
        return []
    try:
        done = subprocess.run(
            [exe, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=NVIDIA_SMI_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    if done.returncode:
        return []
    rows = [[value.strip() for value in line.split(",")] for line in done.stdout.splitlines() if line.strip()]
    return [dict(zip(fields, row)) for row in rows if len(row) == len(fields)]


GPU_AMPERE = (8, 0)  # TF32 and bfloat16 tensor cores came with Ampere (compute capability 8.0)


def gpu_reason(precision: str, capability: tuple[int, int] | None) -> str | None:
    """Why this NVIDIA GPU cannot run `precision` at hardware speed (None where it can, or its compute capability
    is not known): TF32 and bfloat16 need compute capability 8.0 (Ampere) or newer."""
    if capability is None or precision not in ("tf32", "bf16") or tuple(capability) >= GPU_AMPERE:
        return None
    what = "TF32" if precision == "tf32" else "bfloat16"
    return (
        f"this GPU (compute capability {capability[0]}.{capability[1]}) has no {what} tensor cores: "
        f"they came with compute capability 8.0 (Ampere)"
    )


def reason(
    precision: str, *, gpu: bool, gpu_capability=None, own=None, matmul=None, cpu: Cpu | None = None
) -> str | None:
    """Why this device cannot compute `precision` at hardware speed (None where it can): the one rule for every
    framework. tf32 and fp16 need a GPU; bf16 on a CPU needs its arithmetic (cpu_bf16); on a GPU, gpu_reason."""
    if gpu:
        return gpu_reason(precision, gpu_capability)
    if precision == "tf32":
        return "TF32 is a mode of NVIDIA tensor cores (Ampere and later); a CPU has no TF32 arithmetic"
    if precision == "fp16":
        return (
            "float16 mixed precision is for GPUs: this CPU has no float16 arithmetic (no AVX512-FP16 or "
            "AMX-FP16), so frameworks refuse it or emulate it in float32"
        )
    if precision == "bf16":
        return cpu_bf16(own, matmul, cpu).get("reason")
    return None


def kernel_failure(precision: str, error: str | None) -> str | None:
    """The record's line where a run of a precision other than fp32 failed in the framework's own kernels for this
    CPU (ISA_ERRORS: oneDNN has no primitive for it), naming the ISA and keeping the framework's words; else None."""
    if precision == "fp32" or not error or not any(words in error for words in ISA_ERRORS):
        return None
    return (
        f"the framework's kernels have no {precision} primitive on this CPU ({Cpu().label()}), and it stopped "
        f"in them: {' '.join(error.split())[:300]}"
    )


def describe(cpu: Cpu | None = None) -> dict:
    """What a record and the run's metadata say of this CPU: its ISA level, the cap, bfloat16 by its flags."""
    cpu = cpu or Cpu()
    by_flags = cpu.bf16_by_flags()
    return {
        "isa": cpu.level or platform.machine(),
        "isa_label": cpu.label(),
        "cap": cpu.cap,
        "bf16": {True: "native", False: "none", None: "measured per framework"}[by_flags],
    }


def summary(cpu: Cpu | None = None) -> str:
    """One line for measure.start and the runner: 'cpu: AVX-512 with avx512_bf16; fp32 and bf16 at hardware speed'."""
    cpu = cpu or Cpu()
    bf16 = {
        True: "fp32 and bf16 at hardware speed",
        False: "fp32 only (no bfloat16 arithmetic)",
        None: "fp32; bf16 measured by each framework's probe",
    }[cpu.bf16_by_flags()]
    return f"cpu: {cpu.label()}; {bf16}"


def caps(isa: str) -> dict:
    """The variables that make every framework, and this module, act as on a CPU of level `isa` (one of LEVELS):
    oneDNN's cap (PyTorch, TensorFlow; DNNL_ for MXNet 1.9.1), ATen's kernels (PyTorch), XLA's code generation
    (JAX; appended to XLA_FLAGS), below AVX-512 OpenBLAS's kernels (numpy's, which Chainer computes in, and
    MXNet's), and DLROSETTA_CPU_ISA itself."""
    _cap_level(ISA_VARIABLE, isa)
    onednn = {
        "sse4_2": "SSE41",
        "avx": "AVX",
        "avx2": "AVX2",
        "avx512": "AVX512_CORE",
        "avx512_bf16": "AVX512_CORE_BF16",
        "amx": "AVX512_CORE_AMX",
    }[isa.lower()]
    aten = {"sse4_2": "default", "avx": "default", "avx2": "avx2"}.get(isa.lower(), "avx512")
    xla = {"sse4_2": "SSE4_2", "avx": "AVX", "avx2": "AVX2"}.get(isa.lower(), "AVX512")
    flags = " ".join(f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith("--xla_cpu_max_isa="))
    openblas = {"sse4_2": "Nehalem", "avx": "Sandybridge", "avx2": "Haswell"}.get(isa.lower())
    return {
        ISA_VARIABLE: isa.lower(),
        "ONEDNN_MAX_CPU_ISA": onednn,
        "DNNL_MAX_CPU_ISA": onednn,
        "ATEN_CPU_CAPABILITY": aten,
        "XLA_FLAGS": f"{flags} --xla_cpu_max_isa={xla}".strip(),
        **({"OPENBLAS_CORETYPE": openblas} if openblas else {}),
    }
