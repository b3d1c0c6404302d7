"""The GPU machine's check's probes, apart from the notebooks, each in a child process of its own (its threads and
device memory leave with it):

    python -m scripts.device_probes torch [PROFILE]   # versions, peak matmul per precision, the true-float32 check
    python -m scripts.device_probes jax               # JAX's devices and its default float32 matmul's error
    python -m scripts.device_probes rank              # one rank of the torch.distributed check (RANK, WORLD_SIZE...)

Each prints one JSON line on stdout. The parent side (the check's calibration, jax and process-group steps, started
by scripts/device_check.py) starts them, keeps their output in its log and says what they found.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from typing import TYPE_CHECKING

from scripts import suite

if TYPE_CHECKING:
    from scripts.device_run import Check

ROOT = suite.ROOT
PROBES = [sys.executable, "-m", "scripts.device_probes"]  # a probe in a child process (torch, jax, rank)


# --- the parent side: each probe in its child process, its answer said and kept ---------------------------------------


def child(check: Check, what: str, timeout: float, extra: list[str] | None = None) -> dict:
    """`python -m scripts.device_probes WHAT` in a process of its own: the JSON on its last stdout line, its
    output kept in device_check.log; {"error": ...} where it fails."""
    try:
        done = subprocess.run(
            [*PROBES, what, *(extra or [])],
            capture_output=True,
            text=True,
            timeout=max(1.0, timeout),
            env=check.child_env,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired as err:
        out = err.stdout.decode(errors="replace") if isinstance(err.stdout, bytes) else (err.stdout or "")
        check.append_log(f"----- {what} (timed out after {timeout:.0f} s) -----\n{out}")
        return {"error": f"no answer after {timeout:.0f} s"}
    check.append_log(f"----- {what} -----\n{done.stdout}{done.stderr}")
    answer = answer_of(done.stdout)
    if done.returncode != 0 or answer is None:
        last = (done.stderr.strip().splitlines() or done.stdout.strip().splitlines() or ["no output"])[-1]
        return {**(answer or {}), "error": last[:500]}
    return answer


def answer_of(out: str) -> dict | None:
    """A probe's answer: the JSON object on its last line of output; None where there is none."""
    try:
        answer = json.loads(out.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return None
    return answer if isinstance(answer, dict) else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def process_group_check(check: Check, gpus: int, timeout: float = 120) -> dict:
    """torch.distributed with "cpu:gloo,cuda:nccl" (gloo alone without CUDA): two ranks where there are two
    GPUs, else one, each a process of its own, as torchrun starts them."""
    from scripts.jobs import kill_tree

    world = 2 if gpus >= 2 else 1
    env = {**check.child_env, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": str(world)}
    procs = [
        subprocess.Popen(
            [*PROBES, "rank"],
            env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        for r in range(world)
    ]
    ranks = []
    deadline = time.monotonic() + timeout
    for rank, proc in enumerate(procs):
        try:
            out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            kill_tree(proc.pid)
            out = f"rank {rank}: no answer after {timeout:.0f} s"
        check.append_log(f"----- process group, rank {rank} -----\n{out}")
        answer = answer_of(out)
        error = (out.strip().splitlines() or ["no output"])[-1][:300]
        ranks.append(answer if answer is not None else {"rank": rank, "ok": False, "error": error})
    return {"world_size": world, "ok": all(r.get("ok") for r in ranks), "ranks": ranks}


def calibration_step(check: Check, args, argv: list[str], gpus: list[dict]) -> None:
    """The torch child (versions, peaks, true float32); its peaks go to runs/<run id>.json as the runner's do."""
    from scripts import results

    answer = child(check, "torch", min(300, max(check.left(), 1)), extra=[args.profile])
    check.summary["versions"]["torch_runtime"] = answer.get("torch")
    check.summary["calibration"] = cal = answer.get("calibration") or {"error": answer.get("error")}
    check.summary["true_float32"] = t32 = answer.get("true_float32")
    tr = answer.get("torch") or {}
    if tr:
        check.say(
            f"torch {tr.get('torch')}: "
            + (
                f"CUDA {tr.get('cuda')}, cuDNN {tr.get('cudnn')}, NCCL {tr.get('nccl')}, devices {tr.get('devices')} "
                f"(compute capability {tr.get('capability')})"
                if tr.get("cuda_available")
                else f"no CUDA device (a build for CUDA {tr.get('cuda')})"
            )
        )
    peaks = cal.get("peaks") or {}
    for key, peak in peaks.items():
        check.say(f"peak {key}: {peak['gflops'] / 1000:.2f} TFLOP/s (median of {peak['repeats']}, {peak['library']})")
    if "cuda/float32" not in peaks:
        check.say(
            "no CUDA peak: "
            + (
                "torch sees no CUDA device"
                if tr and not tr.get("cuda_available")
                else answer.get("error", "the calibration failed")
            )
        )
    if t32:
        check.say(
            f"true float32 ({t32['device']}, n {t32['n']}): relative error "
            + ", ".join(f"{k} {e:.2e}" for k, e in t32["relative_error"].items())
        )
    if answer.get("error"):
        check.say(f"calibration ERROR: {answer['error']}")
    for key, error in (cal.get("errors") or {}).items():
        check.say(f"calibration ERROR in {key}: {error}")
    if peaks:
        results.write_run(
            check.layout,
            {
                "run": check.run_id,
                "profiles": [args.profile],
                "argv": ["-m", "scripts.device_check", *argv],
                "timed": True,
                "started": check.summary["started"],
                "calibration": {"before": peaks},
                "load_before": cal.get("load"),
                "harness_overhead_s": cal.get("harness_overhead_s"),
                "gpu": bool(gpus),
                "device_check": True,
            },
        )


def jax_step(check: Check) -> None:
    answer = check.summary["jax"] = child(check, "jax", min(120, max(check.left(), 1)))
    if "error" in answer and "backend" not in answer:
        check.say(f"JAX: ERROR {answer['error']}")
    else:
        check.say(
            f"JAX {answer.get('jax')}: backend {answer.get('backend')}, {answer.get('device_kind')} "
            f"x{answer.get('n_devices')}; float32 matmul relative error "
            + ", ".join(f"{k} {e:.2e}" for k, e in (answer.get("matmul_float32_relative_error") or {}).items())
        )


def process_group_step(check: Check, gpus: list[dict]) -> None:
    answer = check.summary["process_group"] = process_group_check(check, len(gpus), min(120, max(check.left(), 1)))
    backend = next((r.get("backend") for r in answer["ranks"] if r.get("backend")), "?")
    check.say(
        f"process group ({backend}, {answer['world_size']} rank{'s' if answer['world_size'] > 1 else ''}): "
        + (
            "ok: broadcast and all_reduce of a CPU" + (" and a CUDA" if "nccl" in backend else "") + " tensor"
            if answer["ok"]
            else "FAILED: " + "; ".join(str(r.get("error") or r.get("checks")) for r in answer["ranks"])
        )
    )


# --- the probes, each in a child process ------------------------------------------------------------------------------


def nccl_version(torch) -> str | None:
    try:
        version = torch.cuda.nccl.version()
    except Exception:  # noqa: BLE001  a build without NCCL
        return None
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


def child_torch(profile: str) -> dict:
    import torch

    from scripts import calibrate
    from support import precision

    small = profile != "full"  # the tiny and cpu profiles check the code path, not the peak
    cuda = torch.cuda.is_available()
    info = {
        "torch": torch.__version__,
        "cuda_available": cuda,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "nccl": nccl_version(torch) if cuda else None,
        "devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else [],
        "capability": ".".join(map(str, torch.cuda.get_device_capability())) if cuda else None,
    }
    measured = calibrate.measure(devices={"cpu": calibrate.KINDS["cpu"]}, **({"n": 1024} if small else {}))
    if cuda:
        gpu = calibrate.measure(
            devices={"cuda": calibrate.KINDS["cuda"]}, **({"n": 2048, "budget_s": 0.3} if small else {})
        )
        measured["peaks"].update(gpu["peaks"])
        measured.setdefault("errors", {}).update(gpu.get("errors", {}))
        torch.cuda.empty_cache()
    peaks, errors = measured["peaks"], measured.pop("errors", {})
    true32 = {"how": "float32 matmul against float64, Frobenius norm of the difference over the exact product's"}
    try:
        device = "cuda" if cuda else "cpu"
        n = 4096 if cuda and not small else 1024
        gen = torch.Generator(device=device).manual_seed(0)
        a, b = (torch.randn(n, n, device=device, generator=gen) for _ in range(2))
        exact = a.double() @ b.double()
        relative = {}
        for name, tf32 in (("tf32_off", False), ("tf32_on", True)):
            if tf32 and not cuda:
                continue
            if cuda:
                calibrate.set_tf32(torch, tf32)
            relative[name] = float(((a @ b).double() - exact).norm() / exact.norm())
        if cuda:
            calibrate.set_tf32(torch, False)
        true32.update(device=device, n=n, relative_error=relative, true_float32=relative["tf32_off"] < 1e-5)
    except Exception as err:  # noqa: BLE001
        errors["true_float32"] = f"{type(err).__name__}: {err}"
    precisions = {p: precision.peak_key("cuda", p) for p in precision.PEAK_KINDS}
    return {
        "torch": info,
        "calibration": {
            **measured,  # the peaks, the harness overhead, the load, the date
            "precisions": {k: v for k, v in precisions.items() if v in peaks},
            **({"errors": errors} if errors else {}),
            **({"note": "tiny or cpu profile: small matrices, not a peak"} if small else {}),
        },
        "true_float32": true32 if "relative_error" in true32 else None,
    }


def child_jax() -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    backend = jax.default_backend()
    devices = jax.devices()
    rng = np.random.default_rng(0)
    n = 2048
    a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
    exact = a.astype(np.float64) @ b.astype(np.float64)
    errors = {}
    for name, prec in (("default", None), ("highest", jax.lax.Precision.HIGHEST)):
        product = np.asarray(jnp.matmul(jnp.asarray(a), jnp.asarray(b), precision=prec), dtype=np.float64)
        errors[name] = float(np.linalg.norm(product - exact) / np.linalg.norm(exact))
    return {
        "jax": jax.__version__,
        "backend": backend,
        "devices": [str(d) for d in devices],
        "device_kind": devices[0].device_kind,
        "n_devices": len(devices),
        "matmul_float32_relative_error": errors,
        "n": n,
        "default_is_true_float32": errors["default"] < 1e-5,
        "jax_default_matmul_precision": str(getattr(jax.config, "jax_default_matmul_precision", None)),
    }


def child_rank() -> dict:
    import datetime

    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    cuda = torch.cuda.is_available()
    backend = "cpu:gloo,cuda:nccl" if cuda else "gloo"
    if cuda:
        torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))
    checks = {}
    for device in ["cpu"] + (["cuda"] if cuda else []):
        t = torch.full((4,), float(rank + 1), device=device)
        dist.broadcast(t, src=0)  # every rank now holds rank 0's ones
        broadcast_ok = bool((t == 1).all())
        dist.all_reduce(t)  # sum over the ranks: world
        checks[device] = {"broadcast": broadcast_ok, "all_reduce": bool((t == world).all())}
    if cuda:
        torch.cuda.synchronize()
    dist.destroy_process_group()
    return {
        "rank": rank,
        "world_size": world,
        "backend": backend,
        "torch": torch.__version__,
        "nccl": nccl_version(torch) if cuda else None,
        "checks": checks,
        "ok": all(all(c.values()) for c in checks.values()),
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    what = argv[0]
    answer = {"torch": lambda: child_torch(argv[1] if len(argv) > 1 else "full"), "jax": child_jax, "rank": child_rank}[
        what
    ]()
    print(json.dumps(answer, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
