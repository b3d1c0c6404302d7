"""support.env: machine names that tell CPU models apart, a commit marked dirty by sources only, and
tests that ignore the user's own settings."""

import os
import subprocess
import sys

from support import env, synthetic, tasks

CPUS = {
    "xeon_8488c": {"model name": "Intel(R) Xeon(R) Platinum 8488C", "cpu family": "6", "model": "143", "stepping": "8"},
    "xeon_8375c": {
        "model name": "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz",
        "cpu family": "6",
        "model": "106",
        "stepping": "6",
    },
    "epyc_hidden_zen4": {"model name": "AMD EPYC", "cpu family": "25", "model": "17", "stepping": "1"},
    "epyc_hidden_zen5": {"model name": "AMD EPYC", "cpu family": "26", "model": "2", "stepping": "1"},
}


def test_machine_names_tell_cpu_models_apart(monkeypatch):
    from support import hardware

    for variable in ("DLROSETTA_CPU_ISA", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(env, "gpu_names", lambda: [])
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    names = {}
    for key, info in CPUS.items():
        monkeypatch.setattr(env, "_cpuinfo", lambda info=info: info)
        names[key] = env.machine_name()
    assert names == {
        "xeon_8488c": "cpu-2c-intel-xeon-platinum-8488c",
        "xeon_8375c": "cpu-2c-intel-xeon-platinum-8375c",
        "epyc_hidden_zen4": "cpu-2c-amd-epyc-f25m17s1",
        "epyc_hidden_zen5": "cpu-2c-amd-epyc-f26m2s1",
    }
    monkeypatch.setattr(env, "gpu_names", lambda: ["NVIDIA H100 80GB HBM3"] * 4)
    assert env.machine_name() == "nvidia-h100-80gb-hbm3-x4-cpu-2c-amd-epyc-f26m2s1"
    assert env.cpu_model() == "AMD EPYC (family 26, model 2, stepping 1)"
    # a CPU capped to an older ISA is another machine: its results never mix with the CPU's own
    monkeypatch.setattr(env, "gpu_names", lambda: [])
    monkeypatch.setattr(
        hardware,
        "_cpuinfo_flags",
        lambda: {"sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16"},
    )
    monkeypatch.setattr(hardware, "_x86", lambda: True)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")  # a notebook's own oneDNN cap (MindSpore's): the same machine
    assert env.machine_name() == "cpu-2c-amd-epyc-f26m2s1" and hardware.Cpu().level == "avx2"
    monkeypatch.setenv("DLROSETTA_CPU_ISA", "avx2")
    assert env.machine_name() == "cpu-2c-amd-epyc-f26m2s1-isa-avx2"


def git(root, *args):
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root, check=True, capture_output=True
    )


def test_dirty_means_the_projects_sources_differ_not_what_the_runner_writes(tmp_path):
    for name in ("README.md", "notebooks/a.ipynb", "support/x.py", "results/m/results.md"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("1")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-qm", "x")
    clean = env.git_commit(tmp_path)
    assert len(clean) == 12 and not clean.endswith("-dirty")
    (tmp_path / "README.md").write_text("table rewritten by the runner")
    (tmp_path / "results" / "m" / "results.md").write_text("new results")
    (tmp_path / "results" / "m" / "new.json").write_text("{}")
    assert env.git_commit(tmp_path) == clean
    (tmp_path / "support" / "new.py").write_text("an untracked source")
    assert env.git_commit(tmp_path) == clean + "-dirty"
    (tmp_path / "support" / "new.py").unlink()
    (tmp_path / "notebooks" / "a.ipynb").write_text("2")
    assert env.git_commit(tmp_path) == clean + "-dirty"
    assert env.git_commit(tmp_path / "nowhere") == "unknown"


def test_the_users_dataset_settings_do_not_reach_the_tests(tmp_path):
    """A user who set DLROSETTA_CHESTXRAY to real data (as docs/data.md says) and DLROSETTA_CACHE to a
    cache holding CIFAR-10 still gets the tests' own synthetic, offline world."""
    real = tmp_path / "chestxray14"
    synthetic.write_synthetic_chestxray(real, n_train=4, n_test=2, px=16)  # a 'real' dataset in the real format
    (tmp_path / "cache" / "data" / "cifar10").mkdir(parents=True)
    (tmp_path / "cache" / "data" / "cifar10" / "cifar-10-python.tar.gz").write_bytes(b"a user's download")
    environ = dict(os.environ, DLROSETTA_CHESTXRAY=str(real), DLROSETTA_CACHE=str(tmp_path / "cache"))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/test_data.py::test_chestxray_missing_pieces_say_what_to_get",
            "tests/test_data.py::test_cifar10_falls_back_to_synthetic_offline_and_says_so",
        ],
        cwd=env.ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "2 passed" in proc.stdout


def test_no_dlrosetta_setting_but_the_tests_own_cache_is_set():
    """DLROSETTA_CPU_ISA alone passes through: it says what the hardware is (tests/conftest.py)."""
    assert [k for k in os.environ if k.startswith("DLROSETTA_") and k != "DLROSETTA_CPU_ISA"] == ["DLROSETTA_CACHE"]
    assert os.environ["DLROSETTA_CACHE"] != str(env.ROOT / ".cache")


def test_the_registry_and_what_it_imports_need_no_numpy():
    """setup_envs.py reads the task registry through suite.py with any Python 3, before numpy exists."""
    code = (
        "import sys; sys.modules['numpy'] = None; sys.path.insert(0, sys.argv[1]); "
        "import scripts.suite as s; print(len(s.TASKS))"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(env.ROOT)], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == str(len(tasks.NAMES)), proc.stderr


def test_describe_reads_the_framework_from_its_module_and_names_an_unknown_one():
    import types

    import torch

    info = env.describe(torch, batch_note="x", cuda=None)
    assert (info["framework"], info["framework_version"], info["device"]) == ("torch", torch.__version__, "cpu")
    assert info["threads"] == torch.get_num_threads() and info["batch_note"] == "x" and "cuda" not in info
    try:
        env.describe(types.ModuleType("sklearn"))
    except ValueError as err:
        assert "sklearn" in str(err) and "torch" in str(err)
    else:
        raise AssertionError("an unknown framework module was accepted")


def test_a_kernels_libraries_leave_nothing_in_the_home_folder(tmp_path):
    """With the project's environment (what the runner gives every kernel, and `import support` sets), onnxruntime,
    which every training notebook runs, writes its device id under the project's cache, not ~/.cache."""
    home = tmp_path / "home"
    home.mkdir()
    environment = {k: v for k, v in os.environ.items() if not k.startswith("XDG_")}  # the user's own, if any
    environment.update(env.project_environment(), HOME=str(home))
    code = (
        "import numpy as np, onnxruntime as ort; from onnx import TensorProto, helper as h\n"
        "graph = h.make_graph([h.make_node('Relu', ['x'], ['y'])], 'g', [h.make_tensor_value_info('x', TensorProto.FLOAT, [1])],"
        " [h.make_tensor_value_info('y', TensorProto.FLOAT, [1])])\n"
        "model = h.make_model(graph, opset_imports=[h.make_opsetid('', 17)], ir_version=8)\n"
        "session = ort.InferenceSession(model.SerializeToString(), providers=['CPUExecutionProvider'])\n"
        "print(session.run(None, {'x': np.ones(1, np.float32)})[0])"
    )
    done = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert list(home.rglob("*")) == []


def test_describe_asks_the_frameworks_registry_which_probes_the_module_it_is_given(monkeypatch):
    """support/env.py holds no framework code: each framework's entry in support/frameworks.py has the probe."""
    import dataclasses
    import types

    from support import frameworks

    assert all(callable(f.probe) for f in frameworks.FRAMEWORKS.values()) and not hasattr(env, "PROBES")
    seen = []

    def probe(module):
        seen.append(module)
        return {"threads": 3, "device": "cpu", "blas": None, "ideep": False}

    monkeypatch.setitem(
        frameworks.FRAMEWORKS, "chainer", dataclasses.replace(frameworks.FRAMEWORKS["chainer"], probe=probe)
    )
    chainer = types.ModuleType("chainer")
    chainer.__version__ = "7.8.1"
    info = env.describe(chainer)
    assert seen == [chainer] and (info["framework"], info["framework_version"], info["threads"]) == (
        "chainer",
        "7.8.1",
        3,
    )
    assert info["ideep"] is False and "blas" not in info and info["gpus"] == env.gpu_names()
