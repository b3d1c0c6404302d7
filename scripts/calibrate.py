"""This machine's peak matrix-multiply FLOP/s, and the harness's own cost: what MFU is measured against.

The runner calls it before and after the suite (`run_all.py` runs it in the modern environment) and
keeps both answers in the run's metadata, results/<machine>/runs/<run>.json: the first is the
peak each row's MFU divides by, the second says whether the machine stayed as fast through the
run (results.md warns when they differ by more than 10%).

The measurement is the one every MFU figure uses: a large matrix multiply, a warm-up call, then the operator-
benchmark method: a second call timed alone estimates one call, and 7 repeats of as many calls as fit the kernel's
time budget (BUDGET_S) follow; the median repeat gives GFLOP/s = 2 n^3 / time. So it ends in seconds whatever
the CPU: about 15 s on the 2-core Zen 5, float32 and bfloat16. There is one peak per
precision a device computes in (support.precision.PEAK_KINDS): on the CPU float32 and bfloat16, timing
every BLAS at hand (PyTorch's MKL and numpy's OpenBLAS) and oneDNN's 3x3 convolution and keeping the
fastest; on a GPU cuBLAS in float32 with TF32 off, TF32, bfloat16 and float16. A row's MFU divides by
its own precision's peak. A precision the device does not compute at hardware speed (support/hardware.py:
bfloat16 on a CPU without avx512_bf16 or AMX) is not calibrated: its peak is absent, its reason under "errors",
as a peak that cannot be measured is (a GPU that fails keeps the CPU's); the float32 peak never depends on another.

    .venvs/modern/bin/python -m scripts.calibrate              # JSON on stdout
    .venvs/modern/bin/python -m scripts.calibrate --cuda       # also the GPU
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from support import hardware, timing  # support first: it points caches at .cache/

SIZES = {"cpu": 2048, "cuda": 8192}  # at the BLAS's peak (on the 2-core Zen 5, 2048 runs as fast as 4096)
BUDGET_S = {"cpu": 1.5, "cuda": 1.0}  # seconds of timed repeats per kernel: the count comes from a first call

# What each device is calibrated for: the kinds of support.precision.PEAK_KINDS that device can compute (a CPU
# has no TF32 and, in these frameworks, no float16 training); a kind the device does not compute at hardware speed
# (support.hardware: bfloat16 on a CPU without it, TF32 and bfloat16 before Ampere) is named under "errors".
KINDS = {"cpu": ("float32", "bf16"), "cuda": ("float32", "tf32", "bf16", "fp16")}
PRECISION_OF = {"float32": "fp32", "tf32": "tf32", "bf16": "bf16", "fp16": "fp16"}


def set_tf32(torch, on: bool) -> None:
    """TF32 in cuBLAS's float32 matrix products, by PyTorch's current switch where it has it."""
    matmul = torch.backends.cuda.matmul
    if hasattr(matmul, "fp32_precision"):
        matmul.fp32_precision = "tf32" if on else "ieee"
    else:
        matmul.allow_tf32 = on


def _torch_dtype(torch, kind: str):
    return {"float32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[kind]


def _torch_mm(device: str, n: int, kind: str = "float32"):
    import torch

    if device == "cuda":
        set_tf32(torch, kind == "tf32")  # float32 is true float32: the policy every notebook follows
    dtype = _torch_dtype(torch, kind)
    a, b = (torch.randn(n, n, device=device).to(dtype) for _ in range(2))
    sync = torch.cuda.synchronize if device == "cuda" else None
    blas = (
        "cuBLAS" + (", TF32" if kind == "tf32" else "")
        if device == "cuda"
        else "MKL"
        if torch.backends.mkl.is_available()
        else "BLAS"
    )
    return (lambda: torch.mm(a, b)), sync, f"torch {torch.__version__} ({blas}, {dtype})", 2.0 * n**3


def _numpy_mm(device: str, n: int, kind: str = "float32"):
    import numpy as np

    if kind != "float32":
        raise ImportError("numpy has no bfloat16")
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]["name"]
    except Exception:  # numpy < 1.26 prints its config instead
        blas = "BLAS"
    return (lambda: a @ b), None, f"numpy {np.__version__} ({blas})", 2.0 * n**3


CONV = (8, 512, 28)  # batch, channels in = out, height = width: a 3x3 convolution of ResNet-50's stage 3


def _torch_conv(device: str, n: int, kind: str = "float32"):
    """oneDNN's direct 3x3 convolution, channels-last: on AVX-512 CPUs it outruns every BLAS GEMM (on the
    2-core Zen 5 EPYC, about 510 GFLOP/s against OpenBLAS's 255), and the frameworks' convolutions run on it."""
    import torch

    batch, channels, size = CONV
    dtype = _torch_dtype(torch, kind)
    x = torch.randn(batch, channels, size, size).to(dtype).contiguous(memory_format=torch.channels_last)
    w = torch.randn(channels, channels, 3, 3).to(dtype)

    def conv():
        with torch.no_grad():
            torch.nn.functional.conv2d(x, w, padding=1)

    flop = 2.0 * batch * size**2 * channels**2 * 9
    return conv, None, f"torch {torch.__version__} (oneDNN 3x3 convolution, {dtype})", flop


KERNELS = {"cpu": (_torch_mm, _numpy_mm, _torch_conv), "cuda": (_torch_mm,)}


def _kernels(device: str, n: int, kind: str):
    """(call, sync, label, flop per call) for each kernel on `device` whose library is installed."""
    found = []
    for make in KERNELS[device]:
        try:
            found.append(make(device, n, kind))
        except ImportError:
            continue
    if not found:
        raise RuntimeError(f"calibrating {device}/{kind} needs PyTorch in the modern environment")
    return found


def timed_kernel(call, sync, flop_per_call: float, *, repeats: int, budget_s: float) -> dict:
    """One kernel's GFLOP/s, by the operator benchmarks' method (support.timing.calibrated): a first call (warm-up:
    a library picks its kernel, fills its caches), a second timed alone as the estimate, then `repeats` repeats of
    the count that fits the budget."""
    summary = timing.calibrated(call, repeats=repeats, budget_s=budget_s, sync=sync)
    return {
        "calls_per_repeat": summary["calls_per_repeat"],
        "repeats": repeats,
        "estimate_s": summary["estimate_s"],
        "gflops": flop_per_call / summary["median_s"] / 1e9,
        "gflops_max": flop_per_call / summary["min_s"] / 1e9,
        "cv": summary["cv"],
        "laps_s": [lap * summary["calls_per_repeat"] for lap in summary["laps_s"]],
    }


def matmul_peak(
    device: str = "cpu",
    repeats: int = timing.MIN_REPEATS,
    n: int | None = None,
    kind: str = "float32",
    budget_s: float | None = None,
) -> dict:
    """Median and best GFLOP/s of the fastest kernel of `kind` (float32, tf32, bf16 or fp16) on `device`
    ("cpu" or "cuda"), n x n for a matmul, each kernel within `budget_s` of timed repeats.

    On the CPU every BLAS at hand is timed (PyTorch's MKL, numpy's OpenBLAS for float32) and oneDNN's 3x3
    convolution, and the fastest is the peak: on an AMD CPU, MKL's float32 GEMM runs well below
    OpenBLAS's, and oneDNN's convolutions, which the frameworks use, outrun both; a slower peak
    put MFU above 100%.
    """
    n = n or SIZES[device]
    budget_s = budget_s or BUDGET_S[device]
    results = []
    try:
        for call, sync, library, flop_per_call in _kernels(device, n, kind):
            timed = timed_kernel(call, sync, flop_per_call, repeats=repeats, budget_s=budget_s)
            results.append({"device": device, "dtype": kind, "n": n, **timed, "library": library})
    finally:
        if device == "cuda":
            import torch

            set_tf32(torch, False)
    best = max(results, key=lambda r: r["gflops"])
    return {**best, "libraries": {r["library"]: r["gflops"] for r in results}}


def not_computed(device: str, kind: str) -> str | None:
    """Why `device` does not compute `kind` at hardware speed (support.hardware, with PyTorch's own answer and
    probe on the CPU), or None: such a kind is not calibrated, so no emulated kernel is ever timed."""
    if kind == "float32":
        return None  # the float32 peak never waits on another precision's answer
    from support.measure import pytorch

    if device == "cuda":
        return hardware.reason(PRECISION_OF[kind], gpu=True, gpu_capability=pytorch.gpu_capability())
    return hardware.reason(PRECISION_OF[kind], gpu=False, own=pytorch.own_bf16, matmul=pytorch.matmul)


def measure(cuda: bool = False, devices: dict | None = None, **options) -> dict:
    """{"peaks": {"cpu/float32": {...}, "cpu/bf16": {...}, ["cuda/float32", "cuda/tf32", ...]}, "errors": {...},
    "hardware": support.hardware.describe(), the harness overhead, the load, the seconds it took}, timed now.
    Each peak is measured on its own: one that fails (a GPU the driver cannot reach) or that the device does not
    compute at hardware speed is named in `errors` with its one-line reason, and the others stay."""
    started = time.perf_counter()
    devices = devices or {"cpu": KINDS["cpu"], **({"cuda": KINDS["cuda"]} if cuda else {})}
    peaks, errors = {}, {}
    for device, kinds in devices.items():
        for kind in kinds:
            key = f"{device}/{kind}"
            try:
                why = not_computed(device, kind)
                if why:
                    errors[key] = f"not calibrated: {why}"
                    continue
                peaks[key] = matmul_peak(device, kind=kind, **options)
            except Exception as err:  # noqa: BLE001  one peak's failure keeps the others
                errors[key] = f"{type(err).__name__}: {' '.join(str(err).split())}"[:300]
    return {
        "peaks": peaks,
        **({"errors": errors} if errors else {}),
        "hardware": hardware.describe(),
        "harness_overhead_s": timing.overhead(),
        "load": list(os.getloadavg()),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "seconds": round(time.perf_counter() - started, 1),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cuda", action="store_true", help="also measure the first CUDA GPU")
    args = p.parse_args(argv)
    print(json.dumps(measure(args.cuda)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
