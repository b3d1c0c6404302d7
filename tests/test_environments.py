"""The pinned environments: exact pins with their hashes, conda files in step, the project installed editable,
a clear error without Python 3.11."""

import importlib
import os
import re
import shutil
import subprocess
import sys
import tomllib
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


def hashes(lock_set: str) -> dict[str, list[str]]:
    """{pin: its --hash values} of requirements/<lock_set>.txt."""
    found, pin = {}, None
    for line in (suite.REQUIREMENTS / f"{lock_set}.txt").read_text().splitlines():
        if line[:1].isalnum():
            pin = line.split()[0]
            found[pin] = []
        elif line.strip().startswith("--hash="):
            found[pin].append(line.split("=", 1)[1].rstrip(" \\"))
    return found


@pytest.mark.parametrize("lock_set", suite.LOCK_SETS)
def test_every_requirement_is_pinned_exactly(lock_set):
    pins = setup_envs.pins(lock_set)
    assert pins and all(re.fullmatch(r"[A-Za-z0-9_.\-\[\]]+==[^=\s]+", p) for p in pins), pins
    wanted, names = requested(suite.REQUIREMENTS / f"{lock_set}.in"), set(pinned(lock_set))
    assert wanted <= names, f"{lock_set}.in names missing from {lock_set}.txt: {wanted - names}"


@pytest.mark.parametrize("lock_set", suite.LOCK_SETS)
def test_every_pin_carries_the_sha256_of_its_files_so_pip_installs_with_require_hashes(lock_set):
    found = hashes(lock_set)
    assert list(found) == setup_envs.pins(lock_set)
    unhashed = [
        pin
        for pin, values in found.items()
        if not values or not all(re.fullmatch(r"sha256:[0-9a-f]{64}", v) for v in values)
    ]
    assert not unhashed, f"{lock_set}.txt: pins without sha256 hashes: {unhashed}"
    assert "python3 -m scripts.setup_envs --lock" in (suite.REQUIREMENTS / f"{lock_set}.txt").read_text()


@pytest.mark.parametrize("lock_set", suite.LOCK_SETS)
def test_every_lock_set_asks_for_what_support_imports_and_the_setuptools_of_the_editable_install(lock_set):
    """Every kernel runs support/, which imports these itself; the set-up builds the project with setuptools."""
    assert {"filelock", "pooch", "jsonschema", "setuptools"} <= requested(suite.REQUIREMENTS / f"{lock_set}.in")
    assert pinned(lock_set)["pooch"] == "1.9.0" and pinned(lock_set)["jsonschema"] == "4.26.0"


def test_the_modern_sets_hold_the_report_and_the_linter_and_legacy_holds_jsonschema_at_moderns_versions():
    for lock_set in ("modern", "modern-cuda"):
        assert pinned(lock_set)["tabulate"] == "0.10.0" and pinned(lock_set)["ruff"] == "0.17.5"
    stack = ("jsonschema", "jsonschema-specifications", "referencing", "rpds-py", "attrs")
    assert {name: pinned("legacy")[name] for name in stack} == {name: pinned("modern")[name] for name in stack}


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
    assert [
        suite.cuda_major(p)
        for p in (
            "nvidia-cudnn-cu12==9.28.0.42",
            "nvidia-cublas==13.1.1.3",
            "jax-cuda13-plugin==0.10.2",
            "cupy-cuda11x==13.6.0",
            "cuda-toolkit==13.0.3.0",
            "nvidia-cufft==12.0.0.61",
            "numpy==2.4.6",
            "nvidia_nccl_cu13==2.30.7",
        )
    ] == ["12", "13", "13", "11", "13", None, None, "13"]


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
    frozen = subprocess.run(
        [str(suite.venv_python(env)), "-m", "pip", "freeze", "--all", "--exclude", "pip"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    pins = {normal(p.split("==")[0]): p.split("==")[1] for p in frozen if "==" in p}
    assert pinned(env).items() <= pins.items()


@pytest.mark.parametrize("env", suite.ENVIRONMENTS)
def test_built_environment_has_this_checkout_installed_editable_with_its_commands(env, tmp_path):
    code = "import importlib.metadata as m, support, scripts; print(support.__file__); print(m.version('dlrosetta'))"
    proc = subprocess.run(
        [str(suite.venv_python(env)), "-I", "-c", code], check=False, capture_output=True, text=True, cwd=tmp_path
    )  # -I, elsewhere: not from the cwd
    assert proc.returncode == 0, proc.stderr
    where, version = proc.stdout.split()
    assert Path(where) == suite.ROOT / "support" / "__init__.py"
    assert version == tomllib.loads((suite.ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert not list((suite.VENVS / env).glob("lib/python*/site-packages/dlrosetta.pth"))  # the old path file
    assert (suite.VENVS / env / "bin" / "dlr-run").exists()


def test_each_command_of_the_package_names_a_main_that_exists():
    commands = tomllib.loads((suite.ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert commands == {
        "dlr-run": "scripts.run_all:main",
        "dlr-report": "scripts.report:main",
        "dlr-site": "scripts.build_site:main",
    }
    for target in commands.values():
        module, _, function = target.partition(":")
        assert callable(getattr(importlib.import_module(module), function, None)), f"{target} does not exist"


def setup_command(*args):
    return subprocess.run(
        [sys.executable, "-m", "scripts.setup_envs", *args],
        check=False,
        capture_output=True,
        text=True,
        cwd=suite.ROOT,
        env={**os.environ, "DLROSETTA_GPU": "cpu"},
    )


def test_built_environments_are_up_to_date_so_setup_would_skip_them():
    proc = setup_command("--check")
    assert (
        proc.stdout.splitlines()
        == [
            "modern: up to date (lock set modern)",
            "legacy: up to date (lock set legacy)",
            "paddle-mindspore: up to date (lock set paddle-mindspore)",
        ]
        and proc.returncode == 0
    )


def test_running_the_set_up_as_a_file_says_to_run_it_as_a_module():
    proc = subprocess.run(
        [sys.executable, str(suite.ROOT / "scripts" / "setup_envs.py"), "--check"],
        check=False,
        capture_output=True,
        text=True,
        cwd=suite.ROOT,
    )
    assert proc.returncode == 1
    assert proc.stderr == "setup_envs.py: run it as a module from the repository root: python3 -m scripts.setup_envs\n"


def test_the_set_up_and_the_tests_share_one_suite_module():
    assert setup_envs.suite is suite


def test_missing_python_311_is_one_clear_error(monkeypatch):
    monkeypatch.setattr(setup_envs, "PYTHON_VERSION", (3, 99))  # no interpreter here is "3.11"
    monkeypatch.delenv("DLR_PYTHON", raising=False)
    with pytest.raises(SystemExit) as err:
        setup_envs.find_python()
    message = str(err.value)
    assert "\n" not in message and "Python 3.11" in message and "DLR_PYTHON" in message


def test_unknown_environment_is_named():
    proc = setup_command("ancient")
    assert proc.returncode == 1 and "unknown environment 'ancient'; choose from: modern, legacy" in proc.stderr


def point_suite_at(root, monkeypatch):
    """Make setup_envs see the checkout at `root`, as if the scripts were copied there."""
    monkeypatch.setattr(suite, "ROOT", root)
    monkeypatch.setattr(suite, "VENVS", root / ".venvs")


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """A small checkout with a venv (without pip) in .venvs/modern."""
    root = tmp_path / "first" / "dl-rosetta"
    root.mkdir(parents=True)
    point_suite_at(root, monkeypatch)
    subprocess.run(
        [setup_envs.find_python(), "-m", "venv", "--without-pip", str(root / ".venvs" / "modern")], check=True
    )
    return root


def relocate(root, how, monkeypatch):
    """Copy or move the whole checkout (its .venvs too) elsewhere; `suite` then sees the new one."""
    new = root.parent.parent / "second" / "dl-rosetta"
    if how == "copy":
        shutil.copytree(root, new, symlinks=True)  # as `cp -r`: the venv's python stays a link
    else:
        new.parent.mkdir()
        shutil.move(root, new)
    point_suite_at(new, monkeypatch)
    return new


@pytest.mark.parametrize("how", ["copy", "move"])
def test_a_copied_or_moved_environment_is_rebuilt_with_hashes_and_installs_the_new_checkout(
    checkout, how, monkeypatch, capsys
):
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
    monkeypatch.setattr(setup_envs, "run", lambda cmd, **kwargs: commands.append([str(c) for c in cmd]))
    monkeypatch.setattr(setup_envs, "pip_environ", lambda env, python: {})
    setup_envs.build(python, "modern", force=False)
    new_venv, new_python = new / ".venvs" / "modern", str(new / ".venvs" / "modern" / "bin" / "python")
    assert f"modern: moved from {old_venv} to {new_venv}; rebuilding" in capsys.readouterr().out.splitlines()[0]
    assert commands == [
        [python, "-m", "venv", "--clear", str(new_venv)],
        [
            new_python,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--require-hashes",
            "-r",
            str(suite.REQUIREMENTS / "modern.txt"),
        ],
        [
            new_python,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--editable",
            str(new),
        ],
    ]
    assert setup_envs.up_to_date(python, "modern") and setup_envs.moved_from("modern") is None


LEGACY_CONSTRAINTS = str(suite.REQUIREMENTS / "legacy-constraints.txt")


def test_pip_constraint_from_the_environment_comes_first(monkeypatch):
    monkeypatch.setenv("PIP_CONSTRAINT", " /u/a.txt\t/u/b c.txt ")  # pip splits it on whitespace
    value = setup_envs.pip_environ("legacy", sys.executable)["PIP_CONSTRAINT"]
    assert value.split() == ["/u/a.txt", "/u/b", "c.txt", LEGACY_CONSTRAINTS]


@pytest.mark.parametrize(
    "config, user",
    [
        ("[global]\nconstraint = /x/user-constraints.txt\n", ["/x/user-constraints.txt"]),
        ("[global]\nconstraint = /x/g.txt\n[install]\nconstraint = /x/i.txt\n  /x/j.txt\n", ["/x/i.txt", "/x/j.txt"]),
        (None, []),  # no config file at all
    ],
)
def test_pip_constraint_from_pips_config_comes_first(config, user, tmp_path, monkeypatch):
    monkeypatch.delenv("PIP_CONSTRAINT", raising=False)
    if config is None:
        monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # pip then reads no config file
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
    requirements = tmp_path / "a checkout" / "requirements"  # pip would split this path: it gets a file: URI
    requirements.mkdir(parents=True)
    (requirements / "legacy-constraints.txt").write_text("dlr-project-pin<1\n")
    monkeypatch.setattr(suite, "REQUIREMENTS", requirements)
    environ = setup_envs.pip_environ("legacy", sys.executable)
    for name in ("dlr-user-pin", "dlr-project-pin"):  # no such packages: pip stops at the constraint
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", f"{name}==1"],
            check=False,
            capture_output=True,
            text=True,
            env=environ,
        )
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
    assert (kind, sets) == ("cuda", ["modern-cuda", "tensorflow-cuda", "legacy-cuda", "paddle-mindspore"])
    assert gpu == {"name": "NVIDIA H100 80GB HBM3", "driver": "580.82.07", "capability": "9.0"}


def test_a_driver_too_old_for_cuda_13_stops_the_set_up_with_one_line(tmp_path, monkeypatch):
    stub_nvidia_smi(tmp_path, monkeypatch, "NVIDIA H100 80GB HBM3, 550.54.15, 9.0")
    with pytest.raises(SystemExit) as err:
        setup_envs.choose_lock_sets()
    message = str(err.value)
    assert "\n" not in message and "driver is 550.54.15" in message and "modern-cuda lock set (CUDA 13)" in message
    assert "needs 580.65.06 or newer" in message and "DLROSETTA_GPU=cpu" in message


@pytest.mark.parametrize(
    "line, forced, kind",
    [
        (None, None, "cpu"),  # no nvidia-smi: the CPU sets
        ("", None, "cpu"),  # nvidia-smi without a GPU or driver
        ("NVIDIA H100 80GB HBM3, 550.54.15, 9.0", "cpu", "cpu"),  # forced: the old driver is not asked
        (None, "cuda", "cuda"),  # forced: a GPU image built without one
    ],
)
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
    monkeypatch.setattr(suite, "VENVS", tmp_path)
    cpu_sets = {"modern": "modern", "legacy": "legacy", "paddle-mindspore": "paddle-mindspore"}
    assert suite.chosen_lock_sets() == cpu_sets  # nothing written: CPU sets
    setup_envs.write_choice(
        "cuda", {"name": "H100", "driver": "580.82.07", "capability": "9.0"}, list(suite.MACHINE_LOCK_SETS["cuda"])
    )
    chosen = suite.chosen_lock_sets()
    assert chosen == {
        "modern": "modern-cuda",
        "tensorflow": "tensorflow-cuda",
        "legacy": "legacy-cuda",
        "paddle-mindspore": "paddle-mindspore",  # CPU builds on a GPU machine too (support/frameworks.py says why)
    }
    assert [
        suite.run_environment(f, p)
        for f, p in (
            ("tensorflow", {}),
            ("keras", {"backend": "tensorflow"}),
            ("keras", {"backend": "jax"}),
            ("pytorch", {}),
            ("chainer", {}),
            ("tensorflow1", {}),  # TensorFlow's 1.x graph style runs on TensorFlow's GPU build
            ("paddle", {}),
            ("mindspore", {}),
        )
    ] == [
        "tensorflow",
        "tensorflow",
        "modern",
        "modern",
        "legacy",
        "tensorflow",
        "paddle-mindspore",
        "paddle-mindspore",
    ]
    assert suite.lock_file("tensorflow") == suite.REQUIREMENTS / "tensorflow-cuda.txt"
    (tmp_path / suite.CHOSEN).write_text("{not json")
    assert suite.run_environment("tensorflow", {}) == "modern"  # unreadable: CPU sets


UV_OUTPUT = """keras==3.15.1 \\
    --hash=sha256:{a} \\
    --hash=sha256:{b}
nvidia-cudnn-cu12==9.28.0.42 \\
    --hash=sha256:{b}
tensorflow==2.21.0 \\
    --hash=sha256:{a}
""".format(a="a" * 64, b="b" * 64)


def stub_uv(tmp_path, monkeypatch):
    """Requirements in tmp_path, and a uv that records its command and writes UV_OUTPUT where `-o` says."""
    monkeypatch.setattr(suite, "REQUIREMENTS", tmp_path)
    monkeypatch.setattr(setup_envs, "uv", lambda python: Path("/stub/uv"))
    calls = []

    def run(cmd, **kwargs):
        cmd = [str(c) for c in cmd]
        held = Path(cmd[cmd.index("-c") + 1])
        calls.append((cmd, held.read_text()))
        Path(cmd[cmd.index("-o") + 1]).write_text(UV_OUTPUT)

    monkeypatch.setattr(setup_envs, "run", run)
    return calls


def test_a_lock_set_is_resolved_by_uv_with_hashes_for_python_311_on_linux(tmp_path, monkeypatch):
    """`--lock` asks uv for the resolution and the hashes (from metadata alone: no CUDA wheel is downloaded), and
    writes them under the header; a CUDA set has no conda file."""
    calls = stub_uv(tmp_path, monkeypatch)
    (tmp_path / "tensorflow-cuda.in").write_text("tensorflow[and-cuda]==2.21.0\n")
    monkeypatch.setattr(setup_envs, "conda_file", lambda env: pytest.fail("a CUDA set has no conda file"))
    setup_envs.lock(sys.executable, "tensorflow-cuda")
    [(cmd, held)] = calls
    assert cmd[:4] == ["/stub/uv", "pip", "compile", str(tmp_path / "tensorflow-cuda.in")] and held == ""
    for option, value in (
        ("--python-version", "3.11"),
        ("--python-platform", "x86_64-manylinux_2_28"),
        ("--python", sys.executable),
    ):
        assert cmd[cmd.index(option) + 1] == value
    assert "--generate-hashes" in cmd and "--build-constraints" not in cmd
    text = (tmp_path / "tensorflow-cuda.txt").read_text()
    assert text.startswith("# Exact pins of the `tensorflow-cuda` lock set of the `tensorflow` environment")
    assert "`python3 -m scripts.setup_envs --lock tensorflow-cuda`" in text and text.endswith("\n" + UV_OUTPUT)
    assert setup_envs.pins("tensorflow-cuda") == ["keras==3.15.1", "nvidia-cudnn-cu12==9.28.0.42", "tensorflow==2.21.0"]


def test_relocking_holds_the_pins_already_locked_and_the_build_constraints(tmp_path, monkeypatch):
    calls = stub_uv(tmp_path, monkeypatch)
    (tmp_path / "legacy.in").write_text("chainer==7.8.1\npooch==1.9.0\n")
    (tmp_path / "legacy.txt").write_text(
        "# header\nchainer==7.8.1 \\\n    --hash=sha256:"
        + "c" * 64
        + "\nsetuptools==65.5.0 \\\n    --hash=sha256:"
        + "d" * 64
        + "\n"
    )
    (tmp_path / "legacy-constraints.txt").write_text("setuptools<81\n")
    monkeypatch.setattr(setup_envs, "write_conda_file", lambda env: None)
    setup_envs.lock(sys.executable, "legacy")
    [(cmd, held)] = calls
    assert held == "chainer==7.8.1\nsetuptools==65.5.0\n"  # the old pins, without their hashes
    constraints = str(tmp_path / "legacy-constraints.txt")
    assert cmd[-4:] == ["-c", constraints, "--build-constraints", constraints]


def test_uv_is_made_once_at_its_pinned_version_in_its_own_environment(tmp_path, monkeypatch):
    monkeypatch.setattr(suite, "VENVS", tmp_path)
    commands = []
    monkeypatch.setattr(setup_envs, "run", lambda cmd, **kwargs: commands.append([str(c) for c in cmd]))
    exe = setup_envs.uv("python3.11")  # none yet: made
    assert exe == tmp_path / "uv" / "bin" / "uv" and commands == [
        ["python3.11", "-m", "venv", "--clear", str(tmp_path / "uv")],
        [str(tmp_path / "uv" / "bin" / "python"), "-m", "pip", "install", "--quiet", "uv==0.13.8"],
    ]
    for version, made in (("0.13.8", False), ("0.12.0", True)):  # the pinned one is kept, another not
        exe.parent.mkdir(parents=True, exist_ok=True)
        exe.write_text(f"#!/bin/sh\necho 'uv {version} (x86_64-unknown-linux-gnu)'\n")
        exe.chmod(0o755)
        commands.clear()
        setup_envs.uv("python3.11")
        assert bool(commands) == made, version
