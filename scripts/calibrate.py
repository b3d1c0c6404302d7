"""This machine's peak matrix-multiply FLOP/s, and the harness's own cost: what MFU is measured against.

The runner calls it before and after the suite (`run_all.py` runs it in the modern environment) and
keeps both answers in the run's metadata, results/<machine>/runs/<run>.json: the first is the
peak each row's MFU divides by, the second says whether the machine stayed as fast through the
run (results.md warns when they differ by more than 10%).

The measurement is the one every MFU figure uses: a large float32 matrix multiply, warm-up calls
first, then repeats of several calls each; the median repeat gives GFLOP/s = 2 n^3 / time. It
times every BLAS at hand on the CPU (PyTorch's MKL and numpy's OpenBLAS) and oneDNN's 3x3
convolution, keeping the fastest as the peak, and cuBLAS with TF32 off on a GPU.

    .venvs/modern/bin/python scripts/calibrate.py              # JSON on stdout
    .venvs/modern/bin/python scripts/calibrate.py --cuda       # also the GPU
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from support import timing  # noqa: E402  (support first: it points caches at .cache/)

SIZES = {"cpu": 4096, "cuda": 8192}          # big enough to run at the BLAS's peak, small enough for seconds
CALLS = {"cpu": 1, "cuda": 20}               # multiplies per repeat


def _torch_mm(device: str, n: int):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False     # true float32: the policy every notebook follows
    a, b = (torch.randn(n, n, dtype=torch.float32, device=device) for _ in range(2))
    sync = torch.cuda.synchronize if device == "cuda" else None
    blas = "cuBLAS" if device == "cuda" else ("MKL" if torch.backends.mkl.is_available() else "BLAS")
    return (lambda: torch.mm(a, b)), sync, f"torch {torch.__version__} ({blas})", 2.0 * n ** 3


def _numpy_mm(device: str, n: int):
    import numpy as np
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]["name"]
    except Exception:                              # numpy < 1.26 prints its config instead
        blas = "BLAS"
    return (lambda: a @ b), None, f"numpy {np.__version__} ({blas})", 2.0 * n ** 3


CONV = (16, 512, 28)        # batch, channels in = out, height = width: a 3x3 convolution of ResNet-50's stage 3


def _torch_conv(device: str, n: int):
    """oneDNN's direct 3x3 convolution, channels-last: on AVX-512 CPUs it outruns every BLAS GEMM (on the
    2-core Zen 5 EPYC, about 500 GFLOP/s against OpenBLAS's 239), and the frameworks' convolutions run on it."""
    import torch
    batch, channels, size = CONV
    x = torch.randn(batch, channels, size, size).contiguous(memory_format=torch.channels_last)
    w = torch.randn(channels, channels, 3, 3)

    def conv():
        with torch.no_grad():
            torch.nn.functional.conv2d(x, w, padding=1)
    flop = 2.0 * batch * size ** 2 * channels ** 2 * 9
    return conv, None, f"torch {torch.__version__} (oneDNN 3x3 convolution)", flop


KERNELS = {"cpu": (_torch_mm, _numpy_mm, _torch_conv), "cuda": (_torch_mm,)}


def _kernels(device: str, n: int):
    """(call, sync, label, flop per call) for each kernel on `device` whose library is installed."""
    found = []
    for make in KERNELS[device]:
        try:
            found.append(make(device, n))
        except ImportError:
            continue
    if not found:
        raise RuntimeError(f"calibrating {device} needs PyTorch in the modern environment")
    return found


def matmul_peak(device: str = "cpu", repeats: int = timing.MIN_REPEATS, warmup: int = 2, n: int | None = None) -> dict:
    """Median and best GFLOP/s of the fastest float32 kernel on `device` ("cpu" or "cuda"), n x n for a matmul.

    On the CPU every BLAS at hand is timed (PyTorch's MKL, numpy's OpenBLAS) and oneDNN's 3x3
    convolution, and the fastest is the peak: on an AMD CPU, MKL's float32 GEMM runs well below
    OpenBLAS's, and oneDNN's convolutions, which the frameworks use, outrun both; a slower peak
    put MFU above 100%.
    """
    n = n or SIZES[device]
    calls = CALLS[device]
    results = []
    for mm, sync, library, flop_per_call in _kernels(device, n):
        flop = flop_per_call * calls
        def repeat():
            for _ in range(calls):
                mm()

        summary = timing.benchmark(repeat, repeats=repeats, warmup=warmup, sync=sync, unit="repeat")
        results.append({"device": device, "dtype": "float32", "n": n, "calls_per_repeat": calls,
                        "repeats": repeats, "gflops": flop / summary["median_s"] / 1e9,
                        "gflops_max": flop / summary["min_s"] / 1e9, "cv": summary["cv"],
                        "laps_s": summary["laps_s"], "library": library})
    best = max(results, key=lambda r: r["gflops"])
    return {**best, "libraries": {r["library"]: r["gflops"] for r in results}}


def measure(cuda: bool = False) -> dict:
    """{"cpu/float32": {...}, ["cuda/float32": {...}]} and the harness overhead, timed now."""
    peaks = {"cpu/float32": matmul_peak("cpu")}
    if cuda:
        peaks["cuda/float32"] = matmul_peak("cuda")
    return {"peaks": peaks, "harness_overhead_s": timing.overhead(), "load": list(os.getloadavg()),
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cuda", action="store_true", help="also measure the first CUDA GPU")
    args = p.parse_args(argv)
    print(json.dumps(measure(args.cuda)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
