"""The pinned environments: exact pins, conda files in step, a clear error without Python 3.11."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from scripts import setup_envs, suite


@pytest.mark.parametrize("env", suite.ENVIRONMENTS)
def test_every_requirement_is_pinned_exactly(env):
    pins = setup_envs.pins(env)
    assert pins and all(re.fullmatch(r"[A-Za-z0-9_.\-\[\]]+==[^=\s]+", p) for p in pins), pins
    names = {p.split("==")[0].lower().replace("_", "-") for p in pins}
    wanted = [re.split(r"[=<>\[ ]", line)[0].lower().replace("_", "-")
              for line in (suite.REQUIREMENTS / f"{env}.in").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    assert set(wanted) <= names, f"{env}.in names missing from {env}.txt: {set(wanted) - names}"


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
                          capture_output=True, text=True)
    assert proc.stdout.splitlines() == ["modern: up to date", "legacy: up to date"] and proc.returncode == 0


def test_missing_python_311_is_one_clear_error(monkeypatch):
    monkeypatch.setattr(setup_envs, "PYTHON_VERSION", (3, 99))     # no interpreter here is "3.11"
    monkeypatch.delenv("DLR_PYTHON", raising=False)
    with pytest.raises(SystemExit) as err:
        setup_envs.find_python()
    message = str(err.value)
    assert "\n" not in message and "Python 3.11" in message and "DLR_PYTHON" in message


def test_unknown_environment_is_named():
    proc = subprocess.run([sys.executable, str(suite.ROOT / "scripts" / "setup_envs.py"), "ancient"],
                          capture_output=True, text=True)
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

    with pytest.raises(SystemExit) as err:
        setup_envs.main(["--check", "modern"])
    assert err.value.code == 1 and capsys.readouterr().out.splitlines() == ["modern: needs a build"]

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
