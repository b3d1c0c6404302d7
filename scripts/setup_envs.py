#!/usr/bin/env python3
"""Build the project's pinned environments and register them as Jupyter kernels.

    python3 scripts/setup_envs.py              # both environments, rebuilt only when pins change, and the
                                               # system packages the tests need (chromium), where missing
    python3 scripts/setup_envs.py legacy       # one of them
    python3 scripts/setup_envs.py --force      # rebuild even if the pins are unchanged
    python3 scripts/setup_envs.py --lock modern  # re-resolve requirements/modern.in into modern.txt

Each environment is a virtual environment in `.venvs/<name>` made with Python 3.11 and
installed from the exact pins in `requirements/<name>.txt` (plus
`requirements/<name>-constraints.txt` for build-time pins, where it exists, after the user's
own pip constraints). A stamp file holds a hash of what it was built from and where, so a
second call costs a second and a moved or copied checkout gets rebuilt. Both kernels are
registered in the modern environment's prefix, where the runner's Jupyter finds them, and
the repository root is put on each environment's path (relative to it) so that notebooks
`import support`.
Runs with any Python 3; needs Python 3.11 (MXNet and Chainer break on 3.12).
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import suite  # noqa: E402

PYTHON_VERSION = (3, 11)
STAMP = ".dlr-stamp"
BUILD_VERSION = 2   # bump when build() changes how an environment is made, to rebuild existing ones


def find_python() -> str:
    """The Python 3.11 interpreter to build with: $DLR_PYTHON, python3.11 on PATH, or this one."""
    candidates = [os.environ.get("DLR_PYTHON"), shutil.which("python3.11")]
    if sys.version_info[:2] == PYTHON_VERSION:
        candidates.append(sys.executable)
    for exe in filter(None, candidates):
        try:
            out = subprocess.run([exe, "-c", "import sys, venv; print(*sys.version_info[:2])"],
                                 capture_output=True, text=True, check=True).stdout.split()
        except (OSError, subprocess.CalledProcessError):
            continue
        if tuple(map(int, out)) == PYTHON_VERSION:
            return exe
    sys.exit("setup_envs.py: Python 3.11 with venv was not found (MXNet and Chainer break on 3.12): "
             "install it (e.g. `pyenv install 3.11` or `apt install python3.11-venv`) "
             "or set DLR_PYTHON to a python3.11 binary.")


def user_constraints(python) -> list[str]:
    """The constraints pip would use without us: $PIP_CONSTRAINT, else the `constraint` of pip's config."""
    if os.environ.get("PIP_CONSTRAINT"):
        return os.environ["PIP_CONSTRAINT"].split()
    cmd = [str(python), "-m", "pip", "config", "list"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1"))
    if proc.returncode:
        why = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        sys.exit(f"setup_envs.py: `{' '.join(cmd)}` failed ({why}): fix pip's configuration, "
                 "or give your pip constraints in PIP_CONSTRAINT.")
    config = {}
    for line in proc.stdout.splitlines():     # `section.key='value'`, the value as Python's repr
        key, _, value = line.partition("=")
        if key.endswith(".constraint"):
            config[key[:-len(".constraint")]] = ast.literal_eval(value)
    # `pip install` takes [install] over [global]; the environment (:env:) over both
    value = next((config[section] for section in (":env:", "install", "global") if config.get(section)), "")
    return value.split()


def pip_environ(env: str, python) -> dict:
    """pip's environment: this environment's build-time constraints, after the user's own (`python` has pip)."""
    environ = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
    constraints = suite.REQUIREMENTS / f"{env}-constraints.txt"
    if constraints.exists():
        # PIP_CONSTRAINT replaces the constraints of pip's config, and pip splits it on whitespace
        ours = constraints.as_uri() if any(c.isspace() for c in str(constraints)) else str(constraints)
        environ["PIP_CONSTRAINT"] = " ".join(user_constraints(python) + [ours])
    return environ


def fingerprint(python: str, env: str) -> str:
    """A hash of what the environment is built from and where: the interpreter, the pin files, its path."""
    version = subprocess.run([python, "-c", "import sys; print(sys.version)"], capture_output=True, text=True,
                             check=True).stdout
    h = hashlib.sha256(version.encode())
    for name in (f"{env}.txt", f"{env}-constraints.txt"):
        path = suite.REQUIREMENTS / name
        if path.exists():
            h.update(path.read_bytes())
    h.update(str(BUILD_VERSION).encode())
    h.update(str(suite.VENVS / env).encode())    # scripts' shebangs hold it: a moved environment is rebuilt
    return h.hexdigest()


def run(cmd: list, **kwargs) -> None:
    print("+", " ".join(map(str, cmd)), flush=True)
    subprocess.run(list(map(str, cmd)), check=True, **kwargs)


def write_stamp(python: str, env: str) -> None:
    """The fingerprint, then the environment's path in clear (to say where a moved one came from)."""
    (suite.VENVS / env / STAMP).write_text(f"{fingerprint(python, env)}\n{suite.VENVS / env}\n")


def moved_from(env: str) -> Path | None:
    """Where the environment was built, if its stamp names another place (a moved or copied checkout)."""
    stamp = suite.VENVS / env / STAMP
    lines = stamp.read_text().splitlines() if stamp.exists() else []
    return Path(lines[1]) if len(lines) > 1 and Path(lines[1]) != suite.VENVS / env else None


def up_to_date(python: str, env: str) -> bool:
    stamp = suite.VENVS / env / STAMP
    return (stamp.exists() and stamp.read_text().split("\n")[0] == fingerprint(python, env)
            and suite.venv_python(env).exists())


def site_packages(env: str) -> str:
    return subprocess.run([suite.venv_python(env), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()


def write_path_file(env: str) -> Path:
    """Put the checkout on the environment's path: a `.pth` line relative to site-packages, which
    `site` resolves against that folder, so a moved or copied checkout imports its own `support`."""
    site = site_packages(env)
    path = Path(site, "dlrosetta.pth")
    path.write_text(os.path.relpath(suite.ROOT, site) + "\n")
    return path


def build(python: str, env: str, force: bool) -> None:
    venv = suite.VENVS / env
    if not force and up_to_date(python, env):
        print(f"{env}: up to date ({venv})")
        return
    start = time.time()
    moved = moved_from(env)
    if moved:
        print(f"{env}: moved from {moved} to {venv}; rebuilding it (its scripts name the old path)", flush=True)
    print(f"{env}: building {venv} from requirements/{env}.txt", flush=True)
    run([python, "-m", "venv", "--clear", venv])
    run([suite.venv_python(env), "-m", "pip", "install", "--quiet", "-r",
         suite.REQUIREMENTS / f"{env}.txt"], env=pip_environ(env, suite.venv_python(env)))
    write_path_file(env)
    write_stamp(python, env)
    print(f"{env}: built in {time.time() - start:.0f} s")


def register_kernels(envs: list[str]) -> None:
    """Kernel specs go into the modern prefix: the runner (modern) finds them there."""
    prefix = suite.VENVS / "modern"
    cache = Path(os.environ.get("DLROSETTA_CACHE") or suite.ROOT / ".cache")
    environ = dict(os.environ, IPYTHONDIR=os.environ.get("IPYTHONDIR") or str(cache / "ipython"))  # not ~/.ipython
    for env in envs:
        if suite.venv_python(env).exists():
            run([suite.venv_python(env), "-m", "ipykernel", "install", "--prefix", prefix,
                 "--name", suite.kernel_name(env), "--display-name", f"DL Rosetta ({env})"],
                capture_output=True, env=environ)   # it warns that the prefix is not on Jupyter's path: the runner's is


# What the tests need from the system besides the environments: the browser that reads the side-by-side reader
# (tests/test_site.py drives Debian's chromium with playwright, whose own browser downloads are never used).
CHROMIUM = Path("/usr/bin/chromium")
SYSTEM_PACKAGES = ["chromium", "fonts-dejavu-core"]


def system_packages() -> str | None:
    """Install the system packages the tests need where they are missing, with apt-get as root (as CI runs);
    None when they are there, else one line saying why not and how (the browser tests then skip, saying so)."""
    if CHROMIUM.exists():
        return None
    how = f"install them with `apt-get update && apt-get install -y --no-install-recommends {' '.join(SYSTEM_PACKAGES)}`"
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return f"{CHROMIUM} is missing and this user cannot apt-get it: {how}"
    environ = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    start = time.time()
    for cmd, limit in ((["apt-get", "update"], 300),
                       (["apt-get", "install", "-y", "--no-install-recommends", *SYSTEM_PACKAGES], 600)):
        print("+", " ".join(cmd), flush=True)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=limit, env=environ,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return f"`{' '.join(cmd)}` took over {limit} s: {how}"
        if proc.returncode:
            return f"`{' '.join(cmd)}` failed ({(proc.stderr.strip().splitlines() or ['no output'])[-1]}): {how}"
    print(f"system: installed {', '.join(SYSTEM_PACKAGES)} with apt-get in {time.time() - start:.0f} s")
    return None if CHROMIUM.exists() else f"apt-get installed chromium but {CHROMIUM} is not there: {how}"


def lock(python: str, env: str) -> None:
    """Resolve requirements/<env>.in in a scratch venv and write every exact pin to <env>.txt."""
    with tempfile.TemporaryDirectory() as tmp:
        run([python, "-m", "venv", tmp])
        pip = [Path(tmp, "bin", "python"), "-m", "pip"]
        run(pip + ["install", "--quiet", "-r", suite.REQUIREMENTS / f"{env}.in"], env=pip_environ(env, pip[0]))
        frozen = subprocess.run(list(map(str, pip + ["freeze", "--all", "--exclude", "pip"])),
                                capture_output=True, text=True, check=True).stdout
    header = (f"# Exact pins of the `{env}` environment ({suite.ENVIRONMENTS[env]}).\n"
              f"# Generated from {env}.in by `python3 scripts/setup_envs.py --lock {env}`; "
              "edit the .in file, not this one.\n")
    (suite.REQUIREMENTS / f"{env}.txt").write_text(header + frozen)
    write_conda_file(env)
    print(f"wrote requirements/{env}.txt and {conda_file(env).name}")


def conda_file(env: str) -> Path:
    return suite.ROOT / ("environment.yml" if env == "modern" else f"environment-{env}.yml")


def pins(env: str) -> list[str]:
    """The exact `name==version` lines of requirements/<env>.txt."""
    lines = (suite.REQUIREMENTS / f"{env}.txt").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def write_conda_file(env: str) -> None:
    """The same environment for conda users: Python 3.11 from conda-forge, every pin through pip."""
    lines = [f"# The `{env}` environment for conda: {suite.ENVIRONMENTS[env]}.",
             f"# Generated with requirements/{env}.txt by `python3 scripts/setup_envs.py --lock {env}`; "
             "a test keeps the two in step.",
             f"name: dlr-{env}", "channels:", "  - conda-forge", "dependencies:", "  - python=3.11", "  - pip",
             "  - pip:"] + [f"      - {pin}" for pin in pins(env)]
    conda_file(env).write_text("\n".join(lines) + "\n")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("envs", nargs="*", help=f"environments to build (default: all of {', '.join(suite.ENVIRONMENTS)})")
    parser.add_argument("--force", action="store_true", help="rebuild even if the pins are unchanged")
    parser.add_argument("--check", action="store_true",
                        help="build nothing; say whether each environment is up to date (exit 1 if not)")
    parser.add_argument("--lock", metavar="ENV",
                        help="re-resolve requirements/ENV.in into requirements/ENV.txt and its conda file")
    args = parser.parse_args(argv)
    unknown = [e for e in args.envs + [args.lock] if e and e not in suite.ENVIRONMENTS]
    if unknown:
        sys.exit(f"setup_envs.py: unknown environment {unknown[0]!r}; choose from: {', '.join(suite.ENVIRONMENTS)}")
    python = find_python()
    if args.lock:
        lock(python, args.lock)
        return
    envs = args.envs or list(suite.ENVIRONMENTS)
    if args.check:
        stale = [env for env in envs if not up_to_date(python, env)]
        for env in envs:
            print(f"{env}: {'needs a build' if env in stale else 'up to date'}")
        sys.exit(1 if stale else 0)
    for env in envs:
        build(python, env, args.force)
    register_kernels(list(suite.ENVIRONMENTS))
    if not args.envs:
        missing = system_packages()
        print(f"system: {missing}; the browser tests skip until then" if missing else
              f"system: {', '.join(SYSTEM_PACKAGES)} installed")


if __name__ == "__main__":
    main()
