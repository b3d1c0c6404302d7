"""support/hardware.py: what a device computes at hardware speed, decided by the CPU's flags where they settle it,
by the framework's own answer and a probe where they do not, capped by DLROSETTA_CPU_ISA and oneDNN's own caps; a
precision the device does not compute is `unsupported` with one line, for every framework, and is never calibrated.
Every case is stubbed both ways here, so it holds on any machine; the frameworks' own answers under oneDNN's caps
run in their environments."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scripts import calibrate, suite
from support import hardware, records, timing
from support.measure import Bench
from support.params import load

SSE = {"sse4_2"}
AVX2 = SSE | {"avx", "avx2", "fma"}  # a Zen 3, a Haswell to Alder Lake laptop
AVX512 = AVX2 | {"avx512f", "avx512bw", "avx512vl", "avx512dq"}  # Skylake-SP to Ice Lake servers
AVX512_BF16 = AVX512 | {"avx512_bf16"}  # Cooper Lake, Zen 4, Zen 5
AMX = AVX512_BF16 | {"amx_bf16", "amx_tile"}  # Sapphire Rapids and later
NO_CAPS = {}
ROOT = Path(__file__).resolve().parents[1]


def cpu(flags, **environ):
    return hardware.Cpu(flags=flags, environ=environ, x86=True)


def slow_matmul(ratio):
    """A probe whose bfloat16 call takes `ratio` times the float32 one (2 ms)."""

    def matmul(dtype):
        seconds = 0.002 * (ratio if dtype == "bfloat16" else 1)
        return lambda: time.sleep(seconds)

    return matmul


@pytest.mark.parametrize(
    "flags, level, native",
    [
        (SSE, "sse4_2", False),
        (AVX2, "avx2", False),
        (AVX512, "avx512", None),
        (AVX512_BF16, "avx512_bf16", True),
        (AMX, "amx", True),
    ],
)
def test_the_flags_give_the_isa_level_and_settle_bf16_where_they_can(flags, level, native):
    found = cpu(flags)
    assert (found.level, found.cap, found.bf16_by_flags()) == (level, None, native)


def test_an_avx2_cpu_has_no_bf16_in_one_line_naming_its_isa_and_what_it_needs():
    line = hardware.reason("bf16", gpu=False, cpu=cpu(AVX2))
    assert line.startswith("this CPU has no bfloat16 arithmetic (AVX2; needs avx512_bf16 or AMX): ")
    assert "\n" not in line and "emulate" in line
    assert hardware.reason("fp32", gpu=False, cpu=cpu(AVX2)) is None
    assert hardware.reason("bf16", gpu=False, cpu=cpu(AVX512_BF16)) is None
    assert "no TF32 arithmetic" in hardware.reason("tf32", gpu=False, cpu=cpu(AMX))
    assert "no float16 arithmetic" in hardware.reason("fp16", gpu=False, cpu=cpu(AMX))


def test_avx512_without_bf16_is_measured_by_the_frameworks_probe_both_ways():
    """oneDNN converts bfloat16 through float32 on AVX-512 without avx512_bf16: a case to measure, not to guess."""
    fast = hardware.cpu_bf16(matmul=slow_matmul(1.5), cpu=cpu(AVX512))
    assert fast["native"] and fast["how"].startswith("probe: ")
    slow = hardware.cpu_bf16(matmul=slow_matmul(30), cpu=cpu(AVX512))
    assert not slow["native"] and "AVX-512" in slow["reason"]
    assert "emulated bfloat16 runs about" in slow["reason"] and "times slower than float32" in slow["reason"]
    never = hardware.cpu_bf16(matmul=lambda dtype: pytest.fail("the flags settle it: no probe"), cpu=cpu(AVX2))
    assert not never["native"] and never["how"] == "flags"


def test_the_frameworks_own_answer_refuses_with_its_words_even_where_the_flags_say_yes():
    words = "MXNetError: could not create a primitive descriptor iterator"
    refused = hardware.cpu_bf16(own=lambda: words, cpu=cpu(AVX512_BF16))
    assert not refused["native"] and refused["how"] == "framework" and refused["reason"].endswith(words)
    assert hardware.cpu_bf16(own=lambda: None, cpu=cpu(AVX512_BF16)) == {"native": True, "how": "flags"}


@pytest.mark.parametrize(
    "variable, value",
    [
        ("DLROSETTA_CPU_ISA", "avx2"),
        ("ONEDNN_MAX_CPU_ISA", "AVX2"),
        ("DNNL_MAX_CPU_ISA", "AVX2"),
        ("ONEDNN_MAX_CPU_ISA", "AVX2_VNNI"),
    ],
)
def test_a_cap_makes_an_avx512_bf16_cpu_answer_as_an_avx2_one_saying_so(variable, value):
    capped = cpu(AMX, **{variable: value})
    assert (capped.level, capped.own_level, capped.cap) == ("avx2", "amx", f"{variable}={value}")
    line = hardware.reason("bf16", gpu=False, cpu=capped)
    assert line.startswith(f"this CPU, capped at AVX2 by {variable}={value} (it has AMX), has no bfloat16 arithmetic")


def test_caps_that_do_not_lower_the_level_change_nothing_and_a_bad_one_is_one_line():
    assert cpu(AVX2, DLROSETTA_CPU_ISA="avx512_bf16").cap is None  # a cap above the CPU
    assert cpu(AVX512_BF16, ONEDNN_MAX_CPU_ISA="ALL").cap is None  # oneDNN's "no cap"
    with pytest.raises(ValueError, match="^DLROSETTA_CPU_ISA='avx3' is not one of sse4_2, avx, avx2, avx512, "):
        cpu(AVX512_BF16, DLROSETTA_CPU_ISA="avx3")


def test_caps_set_every_frameworks_variable_and_keep_the_users_xla_flags(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_experimental_ynn_fusion_type= --xla_cpu_max_isa=AVX512")
    assert hardware.caps("avx2") == {
        "DLROSETTA_CPU_ISA": "avx2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "DNNL_MAX_CPU_ISA": "AVX2",
        "ATEN_CPU_CAPABILITY": "avx2",
        "XLA_FLAGS": "--xla_cpu_experimental_ynn_fusion_type= --xla_cpu_max_isa=AVX2",
        "OPENBLAS_CORETYPE": "Haswell",
    }
    assert "OPENBLAS_CORETYPE" not in hardware.caps("avx512")  # an AVX-512 OpenBLAS keeps its own choice
    with pytest.raises(ValueError, match="DLROSETTA_CPU_ISA='zen9'"):
        hardware.caps("zen9")


def test_aarch64_and_unknown_cpus():
    arm = hardware.Cpu(flags={"fp", "asimd", "bf16"}, environ=NO_CAPS, x86=False)
    assert arm.level is None
    monkey = pytest.MonkeyPatch()
    monkey.setattr(hardware.platform, "machine", lambda: "aarch64")
    try:
        assert arm.bf16_by_flags() is True
        assert hardware.Cpu(flags={"fp", "asimd"}, environ=NO_CAPS, x86=False).bf16_by_flags() is False
        monkey.setattr(hardware.platform, "machine", lambda: "riscv64")
        assert hardware.Cpu(flags=set(), environ=NO_CAPS, x86=False).bf16_by_flags() is None
    finally:
        monkey.undo()


def test_a_gpu_before_ampere_has_no_bf16_or_tf32_and_an_unknown_one_runs():
    assert "compute capability 7.5" in hardware.reason("bf16", gpu=True, gpu_capability=(7, 5))
    assert "no TF32 tensor cores" in hardware.reason("tf32", gpu=True, gpu_capability=(7, 0))
    assert hardware.reason("fp16", gpu=True, gpu_capability=(7, 0)) is None
    assert hardware.reason("bf16", gpu=True, gpu_capability=(9, 0)) is None
    assert hardware.reason("bf16", gpu=True) is None


def test_a_precision_a_framework_cannot_meet_in_its_kernels_becomes_one_line_keeping_its_words():
    error = "MXNetError: could not create a primitive descriptor iterator\n  at mkldnn_convolution.cc:139"
    line = hardware.kernel_failure("bf16", error)
    assert line.startswith("the framework's kernels have no bf16 primitive on this CPU (")
    assert line.endswith("MXNetError: could not create a primitive descriptor iterator at mkldnn_convolution.cc:139")
    assert hardware.kernel_failure("fp32", error) is None and hardware.kernel_failure("bf16", "ValueError: x") is None


# --- the notebooks' Bench: the record of a run the device cannot compute ------------------------------------------


def bench(tmp_path, precision, flags, monkeypatch, **kwargs):
    monkeypatch.setattr(hardware, "_cpuinfo_flags", lambda: flags)
    monkeypatch.setattr(hardware, "_x86", lambda: True)
    for variable in ("DLROSETTA_CPU_ISA", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"):
        monkeypatch.delenv(variable, raising=False)
    return Bench(
        "cnn_cifar10",
        "pytorch",
        load("cnn_cifar10", "tiny"),
        precision=precision,
        compilation="auto",
        record_path=tmp_path / "record.json",
        environment={"machine": "test"},
        gpu=False,
        **kwargs,
    )


def test_a_bf16_run_on_a_cpu_without_bf16_stops_with_an_unsupported_record_and_its_line(tmp_path, monkeypatch, capsys):
    with pytest.raises(records.Unsupported):
        bench(tmp_path, "bf16", AVX2, monkeypatch, matmul=slow_matmul(1))
    record = records.validate(json.loads((tmp_path / "record.json").read_text()))
    assert record["status"] == "unsupported" and record["precision"] == "bf16"
    assert record["error"].startswith("this CPU has no bfloat16 arithmetic (AVX2; needs avx512_bf16 or AMX)")
    assert record["environment"]["hardware"] == {"isa": "avx2", "isa_label": "AVX2", "cap": None, "bf16": "none"}
    out = capsys.readouterr().out
    assert "hardware: cpu: AVX2; fp32 only (no bfloat16 arithmetic)" in out  # measure.start prints it
    assert f"unsupported (bf16, compilation off): {record['error']}" in out


def test_a_bf16_run_on_a_cpu_with_bf16_goes_on_and_records_the_hardware(tmp_path, monkeypatch, capsys):
    run = bench(tmp_path, "bf16", AVX512_BF16, monkeypatch, own_bf16=lambda: None)
    assert run.environment["hardware"]["bf16"] == "native" and not (tmp_path / "record.json").exists()
    assert "hardware: cpu: AVX-512 with avx512_bf16; fp32 and bf16 at hardware speed" in capsys.readouterr().out
    run = bench(tmp_path, "fp32", AVX2, monkeypatch, own_bf16=lambda: pytest.fail("fp32 asks nothing"))
    assert run.environment["hardware"]["isa"] == "avx2"


def test_the_frameworks_refusal_comes_before_the_hardwares(tmp_path, monkeypatch):
    """Chainer has no bfloat16 type on any CPU: its record says so, not the CPU's lack."""
    with pytest.raises(records.Unsupported):
        bench(tmp_path, "bf16", AVX2, monkeypatch, refusal="Chainer computes in numpy arrays")
    assert json.loads((tmp_path / "record.json").read_text())["error"] == "Chainer computes in numpy arrays"


# --- the frameworks' own answers, under the caps each honours (checked in their environments) ----------------------


def own_answer(environment, module, caps):
    code = (
        f"import os, sys; sys.path.insert(0, {str(suite.ROOT)!r})\n"
        f"from support.measure import {module} as m\nprint(repr(m.own_bf16()))"
    )
    done = subprocess.run(
        [str(suite.venv_python(environment)), "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **caps},
        cwd=suite.ROOT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


def test_pytorchs_own_answer_follows_onednns_cap():
    """PyTorch's oneDNN reads ONEDNN_MAX_CPU_ISA: capped at AVX2 it has no bfloat16 kernels, whatever the CPU."""
    answer = own_answer("modern", "pytorch", {"ONEDNN_MAX_CPU_ISA": "AVX2"})
    assert "torch.ops.mkldnn._is_mkldnn_bf16_supported() is False" in answer


def test_mxnets_own_answer_follows_dnnls_cap_in_its_words():
    """MXNet 1.9.1's oneDNN reads DNNL_MAX_CPU_ISA (not ONEDNN_MAX_CPU_ISA): capped at AVX2, a bfloat16 convolution
    fails as the bf16 CNN did on an AVX2 Zen 3."""
    answer = own_answer("legacy", "mxnet", {"DNNL_MAX_CPU_ISA": "AVX2"})
    assert "a bfloat16 convolution fails with MXNetError: could not create a primitive descriptor" in answer


# --- the calibration: a precision the device does not compute is never timed; every kernel ends in its budget -------


def test_the_calibration_skips_bf16_on_a_cpu_without_it_and_keeps_float32(monkeypatch):
    monkeypatch.setenv("DLROSETTA_CPU_ISA", "avx2")
    measured = calibrate.measure(devices={"cpu": ("float32", "bf16")}, repeats=3, n=64, budget_s=0.05)
    assert set(measured["peaks"]) == {"cpu/float32"} and measured["peaks"]["cpu/float32"]["gflops"] > 0
    assert measured["errors"]["cpu/bf16"].startswith("not calibrated: this CPU")
    assert "has no bfloat16 arithmetic" in measured["errors"]["cpu/bf16"]
    assert measured["hardware"]["isa"] in ("avx2", "avx", "sse4_2")


def test_the_calibration_times_bf16_where_the_cpu_computes_it(monkeypatch):
    monkeypatch.setattr(calibrate, "not_computed", lambda device, kind: None)
    measured = calibrate.measure(devices={"cpu": ("float32", "bf16")}, repeats=3, n=64, budget_s=0.05)
    assert set(measured["peaks"]) == {"cpu/float32", "cpu/bf16"} and "errors" not in measured


def test_each_kernels_count_comes_from_its_first_call_within_the_budget(monkeypatch):
    """The operator-benchmark method: a slow kernel gets one call a repeat, a fast one as many as the budget holds,
    so the calibration ends in seconds whatever the CPU."""

    def sleeper(seconds):
        return lambda device, n, kind="float32": (lambda: time.sleep(seconds), None, f"sleep {seconds}", 1e9)

    monkeypatch.setitem(calibrate.KERNELS, "cpu", (sleeper(0.05), sleeper(0.001)))
    peak = calibrate.matmul_peak("cpu", repeats=7, n=64, budget_s=0.14)
    counts = {name: gflops for name, gflops in peak["libraries"].items()}
    assert set(counts) == {"sleep 0.05", "sleep 0.001"} and peak["library"] == "sleep 0.001"
    assert timing.calls_per_repeat(0.05, 0.14, 7) == 1 and timing.calls_per_repeat(0.001, 0.14, 7) == 20
    assert 10 <= peak["calls_per_repeat"] <= 20 and len(peak["laps_s"]) == 7


def test_jax_reads_a_gpus_compute_capability_for_the_rule(monkeypatch):
    """JAX names a CUDA device's capability '8.6'; the rule takes (major, minor) (PyTorch and TensorFlow give
    tuples, CuPy '86')."""
    import types

    from support.measure import jax as measure_jax

    monkeypatch.setattr(measure_jax.jax, "devices", lambda *a: [types.SimpleNamespace(compute_capability="7.5")])
    assert measure_jax.gpu_capability() == (7, 5)
    assert "compute capability 7.5" in hardware.reason("bf16", gpu=True, gpu_capability=measure_jax.gpu_capability())
    monkeypatch.setattr(measure_jax.jax, "devices", lambda *a: [types.SimpleNamespace()])  # a CPU device
    assert measure_jax.gpu_capability() is None


# --- nvidia-smi: the one reader of its answers ---------------------------------------------------------------


def fake_nvidia_smi(tmp_path, monkeypatch, script: str | None):
    """An `nvidia-smi` first on PATH running `script` (sh), which may read "$@"; None: no nvidia-smi on PATH."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    if script is None:
        monkeypatch.setenv("PATH", str(folder))
        return
    stub = folder / "nvidia-smi"
    stub.write_text("#!/bin/sh\n" + script + "\n")
    stub.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")


H100 = "NVIDIA H100 80GB HBM3, 580.82.07, 81559, 9.0"


def test_nvidia_smi_answers_one_dict_per_gpu_keyed_by_the_fields_asked(tmp_path, monkeypatch):
    asked = tmp_path / "asked"
    fake_nvidia_smi(tmp_path, monkeypatch, f'echo "$@" > {asked}\nprintf "{H100}\\n{H100}\\n\\n"')
    gpus = hardware.nvidia_smi("name", "driver_version", "memory.total", "compute_cap")
    assert asked.read_text().split() == [
        "--query-gpu=name,driver_version,memory.total,compute_cap",
        "--format=csv,noheader,nounits",
    ]
    assert (
        gpus
        == [
            {
                "name": "NVIDIA H100 80GB HBM3",
                "driver_version": "580.82.07",
                "memory.total": "81559",
                "compute_cap": "9.0",
            }
        ]
        * 2
    )
    from support import env

    fake_nvidia_smi(tmp_path, monkeypatch, 'echo "NVIDIA H200"')
    assert env.gpu_names() == ["NVIDIA H200"]


@pytest.mark.parametrize(
    "script",
    [
        None,  # no nvidia-smi at all
        'echo "NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver."; exit 9',
        'echo "No devices were found"; exit 6',
        "exit 0",  # a driver without GPUs
        'echo "NVIDIA H100 80GB HBM3"',  # not one value per field
    ],
)
def test_nvidia_smi_missing_failing_or_odd_is_no_gpus(tmp_path, monkeypatch, script):
    fake_nvidia_smi(tmp_path, monkeypatch, script)
    assert hardware.nvidia_smi("name", "driver_version") == []


def test_a_hung_nvidia_smi_is_no_gpus_after_the_timeout(tmp_path, monkeypatch):
    fake_nvidia_smi(tmp_path, monkeypatch, "exec sleep 20")
    monkeypatch.setattr(hardware, "NVIDIA_SMI_TIMEOUT", 0.5)
    start = time.monotonic()
    assert hardware.nvidia_smi("name") == [] and time.monotonic() - start < 10


def test_support_hardware_imports_with_the_standard_library_alone():
    """scripts/setup_envs.py reads nvidia-smi through it with the user's bare python3, before numpy exists: without
    site-packages (-S), nothing but the standard library and support's own modules is imported."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import support.hardware as h; h.nvidia_smi('name'); "
        "names = sys.stdlib_module_names | {'support', '__main__'}; "
        "print(sorted({m.split('.')[0] for m in sys.modules} - names))"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code, str(ROOT)], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
