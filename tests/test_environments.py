"""The pinned environments: exact pins, conda files in step, a clear error without Python 3.11."""
import re
import subprocess
import sys

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
