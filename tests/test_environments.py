"""The pinned environments: exact pins, conda files in step, a clear error without Python 3.11."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from scripts import setup_envs, suite


def normal(name: str) -> str:
    return name.strip().lower().replace("_", "-")


def requested(in_file: Path) -> set[str]:
    """The names an .in file asks for, those of the files it includes with `-r` too (`-c` only constrains)."""
    names = set()
    for line in in_file.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line.startswith("-r "):
            names |= requested(in_file.parent / line[3:].strip())
        elif line and not line.startswith("-"):
            names.add(normal(re.split(r"[=<>\[ ]", line)[0]))
    return names


def pinned(lock_set: str) -> dict[str, str]:
    return {normal(p.split("==")[0]): p.split("==")[1] for p in setup_envs.pins(lock_set)}


@pytest.mark.parametrize("lock_set", suite.LOCK_SETS)
def test_every_requirement_is_pinned_exactly(lock_set):
    pins = setup_envs.pins(lock_set)
    assert pins and all(re.fullmatch(r"[A-Za-z0-9_.\-\[\]]+==[^=\s]+", p) for p in pins), pins
    wanted, names = requested(suite.REQUIREMENTS / f"{lock_set}.in"), set(pinned(lock_set))
    assert wanted <= names, f"{lock_set}.in names missing from {lock_set}.txt: {wanted - names}"


@pytest.mark.parametrize("lock_set", suite.LOCK_SETS)
def test_no_lock_set_mixes_cuda_versions(lock_set):
    """Two CUDA majors in one environment share library paths (both cuDNN 9 wheels install
    nvidia/cudnn/lib/libcudnn*.so.9): the last installed would win silently."""
    majors = {suite.cuda_major(p) for p in setup_envs.pins(lock_set)} - {None}
    cuda = suite.LOCK_SETS[lock_set].cuda
    assert len(majors) <= 1, f"{lock_set}.txt mixes CUDA {sorted(majors)}"
    assert cuda is None or majors == {cuda}, f"{lock_set}.txt is CUDA {sorted(majors)}, not {cuda}"


@pytest.mark.parametrize("lock_set", [s.name for s in suite.LOCK_SETS.values() if s.cuda])
def test_a_cuda_lock_set_holds_its_cpu_counterparts_pins_where_they_overlap(lock_set):
    cpu = "modern" if suite.LOCK_SETS[lock_set].environment == "tensorflow" else suite.LOCK_SETS[lock_set].environment
    mine, theirs = pinned(lock_set), pinned(cpu)
    differ = {name: (mine[name], theirs[name]) for name in mine.keys() & theirs.keys() if mine[name] != theirs[name]}
    assert not differ, f"{lock_set}.txt against {cpu}.txt: {differ}"
    assert len(mine.keys() & theirs.keys()) > 20


def test_the_cuda_package_names_and_versions_say_their_cuda():
    assert [suite.cuda_major(p) for p in ("nvidia-cudnn-cu12==9.28.0.42", "nvidia-cublas==13.1.1.3",
                                          "jax-cuda13-plugin==0.10.2", "cupy-cuda11x==13.6.0",
                                          "cuda-toolkit==13.0.3.0", "nvidia-cufft==12.0.0.61", "numpy==2.4.6",
                                          "nvidia_nccl_cu13==2.30.7")] == ["12", "13", "13", "11", "13", None, None, "13"]


@pytest.mark.parametrize("env", suite.ENVIRONMENTS)
def test_conda_file_matches_the_pins(env):
    spec = yaml.safe_load(setup_envs.conda_file(env).read_text())
    assert spec["name"] == f"dlr-{env}" and "python=3.11" in spec["dependencies"]
    pip = next(d["pip"] for d in spec["dependencies"] if isinstance(d, dict))
    assert pip == setup_envs.pins(env)


def test_numpy_pins_split_the_environments():
    assert "numpy==1.23.5" in setup_envs.pins("legacy")
    assert any(p.startswith("numpy==2.4.") for p in setup_envs.pins("modern"))
    assert "torch==2.14.1" in setup_envs.pins("modern") and "torchvision==0.29.1" in setup_envs.pins("modern")


@pytest.mark.parametrize("env", suite.ENVIRONMENTS)
def test_built_environment_matches_its_pins(env):
    frozen = subprocess.run([str(suite.venv_python(env)), "-m", "pip", "freeze", "--all", "--exclude", "pip"],
                            capture_output=True, text=True, check=True).stdout.split()
    pinned = {p.lower() for p in setup_envs.pins(env)}
    assert pinned <= {f.lower() for f in frozen if "==" in f}


def test_built_environments_are_up_to_date_so_setup_would_skip_them():
    proc = subprocess.run([sys.executable, str(suite.ROOT / "scripts" / "setup_envs.py"), "--check"],
                          capture_output=True, text=True, env={**os.environ, "DLROSETTA_GPU": "cpu"})
    assert proc.stdout.splitlines() == ["modern: up to date (lock set modern)",
                                        "legacy: up to date (lock set legacy)"] and proc.returncode == 0


def test_missing_python_311_is_one_clear_error(monkeypatch):
    monkeypatch.setattr(setup_envs, "PYTHON_VERSION", (3, 99))     # no interpreter here is "3.11"
    monkeypatch.delenv("DLR_PYTHON", raising=False)
    with pytest.raises(SystemExit) as err:
        setup_envs.find_python()
    message = str(err.value)
    assert "\n" not in message and "Python 3.11" in message and "DLR_PYTHON" in message


def test_unknown_environment_is_named():
    proc = subprocess.run([sys.executable, str(suite.ROOT / "scripts" / "setup_envs.py"), "ancient"],
                          capture_output=True, text=True, env={**os.environ, "DLROSETTA_GPU": "cpu"})
    assert proc.returncode == 1 and "unknown environment 'ancient'; choose from: modern, legacy" in proc.stderr


def point_suite_at(root, monkeypatch):
    """Make setup_envs see the checkout at `root`, as if the scripts were copied there. It imports
    `suite` as a top-level module (it runs as a script), not as this file's `scripts.suite`."""
    monkeypatch.setattr(setup_envs.suite, "ROOT", root)
    monkeypatch.setattr(setup_envs.suite, "VENVS", root / ".venvs")


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """A small checkout: a `support` package and a venv without pip in .venvs/modern, its path file written."""
    root = tmp_path / "first" / "dl-rosetta"
    (root / "support").mkdir(parents=True)
    (root / "support" / "__init__.py").write_text("")
    point_suite_at(root, monkeypatch)
    subprocess.run([setup_envs.find_python(), "-m", "venv", "--without-pip", str(root / ".venvs" / "modern")],
                   check=True)
    setup_envs.write_path_file("modern")
    return root


def relocate(root, how, monkeypatch):
    """Copy or move the whole checkout (its .venvs too) elsewhere; `suite` then sees the new one."""
    new = root.parent.parent / "second" / "dl-rosetta"
    if how == "copy":
        shutil.copytree(root, new, symlinks=True)      # as `cp -r`: the venv's python stays a link
    else:
        new.parent.mkdir()
        shutil.move(root, new)
    point_suite_at(new, monkeypatch)
    return new


def imported_support(root):
    """The `support/__init__.py` that the checkout's environment imports (-I: not from the cwd or PYTHONPATH)."""
    proc = subprocess.run([str(root / ".venvs" / "modern" / "bin" / "python"), "-I", "-c",
                           "import support; print(support.__file__)"], capture_output=True, text=True, cwd=root.parent)
    assert proc.returncode == 0, proc.stderr
    return Path(proc.stdout.strip()).resolve()


@pytest.mark.parametrize("how", ["copy", "move"])
def test_a_copied_or_moved_checkout_imports_its_own_support(checkout, how, monkeypatch):
    assert imported_support(checkout) == (checkout / "support" / "__init__.py").resolve()
    new = relocate(checkout, how, monkeypatch)
    assert imported_support(new) == (new / "support" / "__init__.py").resolve()
    pth = next((new / ".venvs" / "modern").glob("lib/python*/site-packages/dlrosetta.pth")).read_text()
    assert not Path(pth.strip()).is_absolute(), pth


@pytest.mark.parametrize("how", ["copy", "move"])
def test_a_copied_or_moved_environment_needs_a_build_and_build_says_why(checkout, how, monkeypatch, capsys):
    python = setup_envs.find_python()
    setup_envs.write_stamp(python, "modern")
    assert setup_envs.up_to_date(python, "modern") and setup_envs.moved_from("modern") is None
    old_venv = checkout / ".venvs" / "modern"
    new = relocate(checkout, how, monkeypatch)
    assert not setup_envs.up_to_date(python, "modern") and setup_envs.moved_from("modern") == old_venv

    monkeypatch.setenv("DLROSETTA_GPU", "cpu")
    with pytest.raises(SystemExit) as err:
        setup_envs.main(["--check", "modern"])
    assert err.value.code == 1 and capsys.readouterr().out.splitlines() == ["modern: needs a build (lock set modern)"]

    commands = []

    def run(cmd, **kwargs):        # record the first command (the venv rebuild), then stop
        commands.append([str(c) for c in cmd])
        raise StopIteration

    monkeypatch.setattr(setup_envs, "run", run)
    with pytest.raises(StopIteration):
        setup_envs.build(python, "modern", force=False)
    new_venv = new / ".venvs" / "modern"
    assert f"modern: moved from {old_venv} to {new_venv}; rebuilding" in capsys.readouterr().out.splitlines()[0]
    assert commands == [[python, "-m", "venv", "--clear", str(new_venv)]]


LEGACY_CONSTRAINTS = str(suite.REQUIREMENTS / "legacy-constraints.txt")


def test_pip_constraint_from_the_environment_comes_first(monkeypatch):
    monkeypatch.setenv("PIP_CONSTRAINT", " /u/a.txt\t/u/b c.txt ")    # pip splits it on whitespace
    value = setup_envs.pip_environ("legacy", sys.executable)["PIP_CONSTRAINT"]
    assert value.split() == ["/u/a.txt", "/u/b", "c.txt", LEGACY_CONSTRAINTS]


@pytest.mark.parametrize("config, user", [
    ("[global]\nconstraint = /x/user-constraints.txt\n", ["/x/user-constraints.txt"]),
    ("[global]\nconstraint = /x/g.txt\n[install]\nconstraint = /x/i.txt\n  /x/j.txt\n", ["/x/i.txt", "/x/j.txt"]),
    (None, []),                                                   # no config file at all
])
def test_pip_constraint_from_pips_config_comes_first(config, user, tmp_path, monkeypatch):
    monkeypatch.delenv("PIP_CONSTRAINT", raising=False)
    if config is None:
        monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)         # pip then reads no config file
    else:
        (tmp_path / "pip.conf").write_text(config)
        monkeypatch.setenv("PIP_CONFIG_FILE", str(tmp_path / "pip.conf"))
    value = setup_envs.pip_environ("legacy", sys.executable)["PIP_CONSTRAINT"]
    assert value.split() == user + [LEGACY_CONSTRAINTS]


@pytest.mark.parametrize("given", ["environment", "config"])
def test_an_environment_without_constraints_leaves_the_users_alone(given, tmp_path, monkeypatch):
    (tmp_path / "pip.conf").write_text("[global]\nconstraint = /x/user-constraints.txt\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(tmp_path / "pip.conf"))
    if given == "environment":
        monkeypatch.setenv("PIP_CONSTRAINT", "/u/a.txt /u/b.txt")
    else:
        monkeypatch.delenv("PIP_CONSTRAINT", raising=False)
    assert not (suite.REQUIREMENTS / "modern-constraints.txt").exists()
    environ = setup_envs.pip_environ("modern", sys.executable)
    assert environ.get("PIP_CONSTRAINT") == ("/u/a.txt /u/b.txt" if given == "environment" else None)


def test_pip_applies_the_users_constraints_and_ours_from_a_path_with_spaces(tmp_path, monkeypatch):
    (tmp_path / "user.txt").write_text("dlr-user-pin<1\n")
    (tmp_path / "pip.conf").write_text(f"[global]\nconstraint = {tmp_path / 'user.txt'}\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(tmp_path / "pip.conf"))
    monkeypatch.delenv("PIP_CONSTRAINT", raising=False)
    requirements = tmp_path / "a checkout" / "requirements"     # pip would split this path: it gets a file: URI
    requirements.mkdir(parents=True)
    (requirements / "legacy-constraints.txt").write_text("dlr-project-pin<1\n")
    monkeypatch.setattr(setup_envs.suite, "REQUIREMENTS", requirements)
    environ = setup_envs.pip_environ("legacy", sys.executable)
    for name in ("dlr-user-pin", "dlr-project-pin"):      # no such packages: pip stops at the constraint
        proc = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", f"{name}==1"],
                              capture_output=True, text=True, env=environ)
        assert f"(constraint) {name}<1" in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def test_unreadable_pip_config_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv("PIP_CONSTRAINT", raising=False)
    subprocess.run([setup_envs.find_python(), "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True)
    with pytest.raises(SystemExit) as err:
        setup_envs.pip_environ("legacy", tmp_path / "venv" / "bin" / "python")
    message = str(err.value)
    assert "\n" not in message and "pip config list` failed (" in message and "No module named pip" in message
    assert "PIP_CONSTRAINT" in message


def stub_nvidia_smi(tmp_path, monkeypatch, line: str | None):
    """An `nvidia-smi` first on PATH answering setup_envs's query with `line` (None: no nvidia-smi at all)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if line is not None:
        stub = bin_dir / "nvidia-smi"
        stub.write_text(f"#!/bin/sh\necho '{line}'\n")
        stub.chmod(0o755)
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    else:
        monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv("DLROSETTA_GPU", raising=False)


def test_a_gpu_with_a_new_driver_selects_the_cuda_lock_sets(tmp_path, monkeypatch):
    stub_nvidia_smi(tmp_path, monkeypatch, "NVIDIA H100 80GB HBM3, 580.82.07, 9.0")
    kind, gpu, sets = setup_envs.choose_lock_sets()
    assert (kind, sets) == ("cuda", ["modern-cuda", "tensorflow-cuda", "legacy-cuda"])
    assert gpu == {"name": "NVIDIA H100 80GB HBM3", "driver": "580.82.07", "capability": "9.0"}


def test_a_driver_too_old_for_cuda_13_stops_the_set_up_with_one_line(tmp_path, monkeypatch):
    stub_nvidia_smi(tmp_path, monkeypatch, "NVIDIA H100 80GB HBM3, 550.54.15, 9.0")
    with pytest.raises(SystemExit) as err:
        setup_envs.choose_lock_sets()
    message = str(err.value)
    assert "\n" not in message and "driver is 550.54.15" in message and "modern-cuda lock set (CUDA 13)" in message
    assert "needs 580.65.06 or newer" in message and "DLROSETTA_GPU=cpu" in message


@pytest.mark.parametrize("line, forced, kind", [
    (None, None, "cpu"),                                                   # no nvidia-smi: the CPU sets
    ("", None, "cpu"),                                                     # nvidia-smi without a GPU or driver
    ("NVIDIA H100 80GB HBM3, 550.54.15, 9.0", "cpu", "cpu"),               # forced: the old driver is not asked
    (None, "cuda", "cuda"),                                                # forced: a GPU image built without one
])
def test_the_machine_or_the_variable_chooses_the_lock_sets(tmp_path, monkeypatch, line, forced, kind):
    stub_nvidia_smi(tmp_path, monkeypatch, line)
    if forced:
        monkeypatch.setenv("DLROSETTA_GPU", forced)
    assert setup_envs.choose_lock_sets()[::2] == (kind, list(suite.MACHINE_LOCK_SETS[kind]))


def test_an_unknown_gpu_choice_is_one_line(monkeypatch):
    monkeypatch.setenv("DLROSETTA_GPU", "rocm")
    with pytest.raises(SystemExit) as err:
        setup_envs.choose_lock_sets()
    assert str(err.value) == "setup_envs.py: DLROSETTA_GPU='rocm': choose cpu, cuda or auto (unset: ask nvidia-smi)"


def test_the_runner_reads_the_choice_tensorflow_lines_go_to_their_gpu_environment(tmp_path, monkeypatch):
    monkeypatch.setattr(setup_envs.suite, "VENVS", tmp_path)     # setup_envs imports `suite` as a top-level module
    monkeypatch.setattr(suite, "VENVS", tmp_path)
    assert suite.chosen_lock_sets() == {"modern": "modern", "legacy": "legacy"}     # nothing written: CPU sets
    setup_envs.write_choice("cuda", {"name": "H100", "driver": "580.82.07", "capability": "9.0"},
                            list(suite.MACHINE_LOCK_SETS["cuda"]))
    chosen = suite.chosen_lock_sets()
    assert chosen == {"modern": "modern-cuda", "tensorflow": "tensorflow-cuda", "legacy": "legacy-cuda"}
    assert [suite.run_environment(f, p) for f, p in (("tensorflow", {}), ("keras", {"backend": "tensorflow"}),
                                                      ("keras", {"backend": "jax"}), ("pytorch", {}),
                                                      ("chainer", {}))] == [
        "tensorflow", "tensorflow", "modern", "modern", "legacy"]
    assert suite.lock_file("tensorflow") == suite.REQUIREMENTS / "tensorflow-cuda.txt"
    (tmp_path / suite.CHOSEN).write_text("{not json")
    assert suite.run_environment("tensorflow", {}) == "modern"                      # unreadable: CPU sets


def test_a_lock_set_is_locked_by_resolution_alone(tmp_path, monkeypatch):
    """`--lock` asks pip for its resolution (`install --dry-run --report`), installs nothing and downloads no CUDA
    wheel, and writes the report's pins; a CUDA set has no conda file."""
    monkeypatch.setattr(setup_envs.suite, "REQUIREMENTS", tmp_path)
    (tmp_path / "tensorflow-cuda.in").write_text("tensorflow[and-cuda]==2.21.0\n")
    commands = []

    def run(cmd, **kwargs):
        cmd = [str(c) for c in cmd]
        commands.append(cmd)
        if "--report" in cmd:
            Path(cmd[cmd.index("--report") + 1]).write_text(json.dumps({"install": [
                {"metadata": {"name": "tensorflow", "version": "2.21.0"}},
                {"metadata": {"name": "nvidia-cudnn-cu12", "version": "9.28.0.42"}},
                {"metadata": {"name": "Keras", "version": "3.15.1"}}]}))

    monkeypatch.setattr(setup_envs, "run", run)
    monkeypatch.setattr(setup_envs, "conda_file", lambda env: pytest.fail("a CUDA set has no conda file"))
    setup_envs.lock(sys.executable, "tensorflow-cuda")
    resolve = next(c for c in commands if "--report" in c)
    assert "--dry-run" in resolve and "--ignore-installed" in resolve and resolve[-1] == str(tmp_path / "tensorflow-cuda.in")
    assert not any("download" in c for c in commands)
    lines = (tmp_path / "tensorflow-cuda.txt").read_text().splitlines()
    assert lines[0].startswith("# Exact pins of the `tensorflow-cuda` lock set of the `tensorflow` environment")
    assert lines[2:] == ["Keras==3.15.1", "nvidia-cudnn-cu12==9.28.0.42", "tensorflow==2.21.0"]
