#!/usr/bin/env python3
"""Build the project's pinned environments and register them as Jupyter kernels.

Run from the repository root, with any Python 3:

    python3 -m scripts.setup_envs              # every environment, rebuilt only when pins change, and the
                                               # system packages the tests need (chromium), where missing
    python3 -m scripts.setup_envs legacy       # one of them
    python3 -m scripts.setup_envs --force      # rebuild even if the pins are unchanged
    python3 -m scripts.setup_envs --lock modern       # re-resolve requirements/modern.in into modern.txt
    python3 -m scripts.setup_envs --lock modern-cuda  # likewise a CUDA lock set (by resolution alone)

Each environment is a virtual environment in `.venvs/<name>` made with Python 3.11 and installed by pip alone
from the exact pins of one lock set, `requirements/<lock set>.txt`, each pin with its files' hashes
(`--require-hashes`; plus `requirements/<name>-constraints.txt` for build-time pins, where it exists, after the
user's own pip constraints). Then the project itself (pyproject.toml) is installed into it editable, offline,
so that notebooks `import support` from this checkout and the modern environment has the `dlr-*` commands.
A stamp file holds a hash of what it was built from and where, so a second call costs a second and a moved or
copied checkout gets rebuilt. Every kernel is registered in the modern environment's prefix, where the
runner's Jupyter finds them.

`--lock` resolves with uv (UV, from a small tool environment `.venvs/uv` made on first use; nothing else needs
it), for Python 3.11 on x86-64 Linux (PLATFORM), holding the pins already in the lock file as constraints.

Which lock sets (scripts/suite.py, LOCK_SETS): on a machine without an NVIDIA GPU, the CPU sets
`modern`, `legacy` and `paddle-mindspore`. Where `nvidia-smi` answers, the CUDA sets: `modern-cuda` (PyTorch and
JAX on CUDA 13), `tensorflow-cuda` (an environment of its own, `tensorflow`: TensorFlow and Keras on TensorFlow
on CUDA 12, which cannot share an environment with CUDA 13) and `legacy-cuda` (CuPy for Chainer,
CUDA 11.8), with `paddle-mindspore` as on a CPU (neither framework has a CUDA 12/13 build), after checking the driver against each set's CUDA: a driver too old stops the set-up
with one line. DLROSETTA_GPU=cpu or =cuda forces either way. The choice is written to
`.venvs/lock-sets.json`, where the runner reads which kernel runs each line and which pins a
record names.
Runs with any Python 3; needs Python 3.11 (MXNet and Chainer break on 3.12).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ != "scripts":  # run as a file, `scripts` is not importable: say how to run it instead
    sys.exit("setup_envs.py: run it as a module from the repository root: python3 -m scripts.setup_envs")

from scripts import suite
from support import hardware  # standard library only, as suite

PYTHON_VERSION = (3, 11)
STAMP = ".dlr-stamp"
BUILD_VERSION = 3  # bump when build() changes how an environment is made, to rebuild existing ones
UV = "uv==0.13.8"  # resolves and hashes the lock sets (`--lock` only; a build needs nothing but pip)
PLATFORM = "x86_64-manylinux_2_28"  # what every lock set is resolved for: x86-64 Linux, glibc 2.28 or newer


def find_python() -> str:
    """The Python 3.11 interpreter to build with: $DLR_PYTHON, python3.11 on PATH, or this one."""
    candidates = [os.environ.get("DLR_PYTHON"), shutil.which("python3.11")]
    if sys.version_info[:2] == PYTHON_VERSION:
        candidates.append(sys.executable)
    for exe in filter(None, candidates):
        try:
            out = subprocess.run(
                [exe, "-c", "import sys, venv; print(*sys.version_info[:2])"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split()
        except (OSError, subprocess.CalledProcessError):
            continue
        if tuple(map(int, out)) == PYTHON_VERSION:
            return exe
    sys.exit(
        "setup_envs.py: Python 3.11 with venv was not found (MXNet and Chainer break on 3.12): "
        "install it (e.g. `pyenv install 3.11` or `apt install python3.11-venv`) "
        "or set DLR_PYTHON to a python3.11 binary."
    )


def user_constraints(python) -> list[str]:
    """The constraints pip would use without us: $PIP_CONSTRAINT, else the `constraint` of pip's config."""
    if os.environ.get("PIP_CONSTRAINT"):
        return os.environ["PIP_CONSTRAINT"].split()
    cmd = [str(python), "-m", "pip", "config", "list"]
    proc = subprocess.run(
        cmd, check=False, capture_output=True, text=True, env=dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
    )
    if proc.returncode:
        why = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        sys.exit(
            f"setup_envs.py: `{' '.join(cmd)}` failed ({why}): fix pip's configuration, "
            "or give your pip constraints in PIP_CONSTRAINT."
        )
    config = {}
    for line in proc.stdout.splitlines():  # `section.key='value'`, the value as Python's repr
        key, _, value = line.partition("=")
        if key.endswith(".constraint"):
            config[key[: -len(".constraint")]] = ast.literal_eval(value)
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


def fingerprint(python: str, env: str, lock_set: str | None = None) -> str:
    """A hash of what the environment is built from and where: the interpreter, the lock set's pin files, its path."""
    lock_set = lock_set or env
    version = subprocess.run(
        [python, "-c", "import sys; print(sys.version)"], capture_output=True, text=True, check=True
    ).stdout
    h = hashlib.sha256(version.encode())
    for name in (f"{lock_set}.txt", f"{env}-constraints.txt"):
        path = suite.REQUIREMENTS / name
        if path.exists():
            h.update(path.read_bytes())
    h.update(str(BUILD_VERSION).encode())
    if lock_set != env:
        h.update(lock_set.encode())  # a CUDA set (a CPU set's hash is what it was before lock sets)
    h.update(str(suite.VENVS / env).encode())  # scripts' shebangs hold it: a moved environment is rebuilt
    return h.hexdigest()


# --- which lock sets: the GPU and its driver ------------------------------------------------------------------

FORCE = "DLROSETTA_GPU"  # "cpu" or "cuda": build those lock sets whatever nvidia-smi says ("auto", unset: ask it)


def nvidia_gpu() -> dict | None:
    """The first GPU nvidia-smi lists: {"name", "driver" (its version string), "capability"}; None where there is
    no nvidia-smi or it answers nothing usable (no driver loaded, no GPU)."""
    gpus = hardware.nvidia_smi("name", "driver_version", "compute_cap")
    if not gpus or not all(gpus[0].values()):
        return None
    return {"name": gpus[0]["name"], "driver": gpus[0]["driver_version"], "capability": gpus[0]["compute_cap"]}


def version_tuple(text: str) -> tuple:
    return tuple(int(part) for part in text.split(".") if part.isdigit())


def choose_lock_sets() -> tuple[str, dict | None, list[str]]:
    """('cpu' or 'cuda', the GPU nvidia-smi names, the lock sets to build). On a GPU machine, every CUDA set's
    driver is checked: one too old stops the set-up with one line (the driver found, the one needed, the choice)."""
    forced = os.environ.get(FORCE, "auto").strip().lower() or "auto"
    if forced not in ("auto", "cpu", "cuda"):
        sys.exit(f"setup_envs.py: {FORCE}={forced!r}: choose cpu, cuda or auto (unset: ask nvidia-smi)")
    gpu = nvidia_gpu() if forced != "cpu" else None
    kind = forced if forced != "auto" else ("cuda" if gpu else "cpu")
    sets = list(suite.MACHINE_LOCK_SETS[kind])
    if kind == "cuda" and gpu:
        found = version_tuple(gpu["driver"])
        for name in sets:
            needed = suite.LOCK_SETS[name].driver
            if needed and found < version_tuple(needed):
                sys.exit(
                    f"setup_envs.py: the NVIDIA driver is {gpu['driver']} ({gpu['name']}); the {name} lock set "
                    f"(CUDA {suite.LOCK_SETS[name].cuda}) needs {needed} or newer: update "
                    f"the driver, or set {FORCE}=cpu to build the CPU lock sets (every line then runs on the CPU)"
                )
    return kind, gpu, sets


def write_choice(kind: str, gpu: dict | None, sets: list[str]) -> None:
    """.venvs/lock-sets.json: the runner reads from it which environment runs each line and which pins it used."""
    suite.VENVS.mkdir(parents=True, exist_ok=True)
    choice = {"machine": kind, "gpu": gpu, "forced": os.environ.get(FORCE) or None, "sets": suite.by_environment(sets)}
    path = suite.VENVS / suite.CHOSEN
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(choice, indent=1) + "\n")
    tmp.replace(path)


def run(cmd: list, **kwargs) -> None:
    print("+", " ".join(map(str, cmd)), flush=True)
    subprocess.run(list(map(str, cmd)), check=True, **kwargs)


def pip_install(env: str, *args) -> None:
    """`pip install --quiet ARGS` in the environment, with its pip settings (pip_environ)."""
    run(
        [suite.venv_python(env), "-m", "pip", "install", "--quiet", *args], env=pip_environ(env, suite.venv_python(env))
    )


def write_stamp(python: str, env: str, lock_set: str | None = None) -> None:
    """The fingerprint, then the environment's path and its lock set in clear (where a moved one came from)."""
    (suite.VENVS / env / STAMP).write_text(
        f"{fingerprint(python, env, lock_set)}\n{suite.VENVS / env}\n{lock_set or env}\n"
    )


def moved_from(env: str) -> Path | None:
    """Where the environment was built, if its stamp names another place (a moved or copied checkout)."""
    stamp = suite.VENVS / env / STAMP
    lines = stamp.read_text().splitlines() if stamp.exists() else []
    return Path(lines[1]) if len(lines) > 1 and Path(lines[1]) != suite.VENVS / env else None


def up_to_date(python: str, env: str, lock_set: str | None = None) -> bool:
    stamp = suite.VENVS / env / STAMP
    return (
        stamp.exists()
        and stamp.read_text().split("\n")[0] == fingerprint(python, env, lock_set)
        and suite.venv_python(env).exists()
    )


def install_project(env: str) -> None:
    """Install this checkout (pyproject.toml) into the environment, editable: its packages import from the
    checkout, and its commands land in the environment's bin/. Offline and without dependencies (the lock file
    installed them): the lock set's own setuptools builds it (legacy.in pins wheel for its setuptools 65.5)."""
    pip_install(env, "--no-deps", "--no-build-isolation", "--no-index", "--editable", suite.ROOT)


def build(python: str, env: str, force: bool, lock_set: str | None = None) -> None:
    venv, lock_set = suite.VENVS / env, lock_set or env
    if not force and up_to_date(python, env, lock_set):
        print(f"{env}: up to date ({venv}, lock set {lock_set})")
        return
    start = time.time()
    moved = moved_from(env)
    if moved:
        print(f"{env}: moved from {moved} to {venv}; rebuilding it (its scripts name the old path)", flush=True)
    print(f"{env}: building {venv} from requirements/{lock_set}.txt", flush=True)
    run([python, "-m", "venv", "--clear", venv])
    pip_install(env, "--require-hashes", "-r", suite.REQUIREMENTS / f"{lock_set}.txt")
    install_project(env)
    write_stamp(python, env, lock_set)
    print(f"{env}: built in {time.time() - start:.0f} s")


def register_kernels(envs: list[str]) -> None:
    """Kernel specs go into the modern prefix: the runner (modern) finds them there."""
    prefix = suite.VENVS / "modern"
    cache = Path(os.environ.get("DLROSETTA_CACHE") or suite.ROOT / ".cache")
    environ = dict(os.environ, IPYTHONDIR=os.environ.get("IPYTHONDIR") or str(cache / "ipython"))  # not ~/.ipython
    for env in envs:
        if suite.venv_python(env).exists():
            run(
                [
                    suite.venv_python(env),
                    "-m",
                    "ipykernel",
                    "install",
                    "--prefix",
                    prefix,
                    "--name",
                    suite.kernel_name(env),
                    "--display-name",
                    f"DL Rosetta ({env})",
                ],
                capture_output=True,
                env=environ,
            )  # it warns that the prefix is not on Jupyter's path: the runner's is


# What the tests need from the system besides the environments: the browser that reads the side-by-side reader
# (tests/test_site.py drives Debian's chromium with playwright, whose own browser downloads are never used).
CHROMIUM = Path("/usr/bin/chromium")
SYSTEM_PACKAGES = ["chromium", "fonts-dejavu-core"]


def system_packages() -> str | None:
    """Install the system packages the tests need where they are missing, with apt-get as root (as CI runs);
    None when they are there, else one line saying why not and how (the browser tests then skip, saying so)."""
    if CHROMIUM.exists():
        return None
    how = (
        f"install them with `apt-get update && apt-get install -y --no-install-recommends {' '.join(SYSTEM_PACKAGES)}`"
    )
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return f"{CHROMIUM} is missing and this user cannot apt-get it: {how}"
    environ = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    start = time.time()
    for cmd, limit in (
        (["apt-get", "update"], 300),
        (["apt-get", "install", "-y", "--no-install-recommends", *SYSTEM_PACKAGES], 600),
    ):
        print("+", " ".join(cmd), flush=True)
        try:
            proc = subprocess.run(
                cmd, check=False, capture_output=True, text=True, timeout=limit, env=environ, stdin=subprocess.DEVNULL
            )
        except subprocess.TimeoutExpired:
            return f"`{' '.join(cmd)}` took over {limit} s: {how}"
        if proc.returncode:
            return f"`{' '.join(cmd)}` failed ({(proc.stderr.strip().splitlines() or ['no output'])[-1]}): {how}"
    print(f"system: installed {', '.join(SYSTEM_PACKAGES)} with apt-get in {time.time() - start:.0f} s")
    return None if CHROMIUM.exists() else f"apt-get installed chromium but {CHROMIUM} is not there: {how}"


def uv(python: str) -> Path:
    """The pinned uv (UV), from its own small environment, .venvs/uv, made on first use."""
    venv = suite.VENVS / "uv"
    exe = venv / "bin" / "uv"
    try:
        found = subprocess.run([exe, "--version"], check=False, capture_output=True, text=True).stdout.split()[1:2]
    except OSError:
        found = []
    if found != [UV.split("==")[1]]:
        run([python, "-m", "venv", "--clear", venv])
        run(
            [venv / "bin" / "python", "-m", "pip", "install", "--quiet", UV],
            env=dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1"),
        )
    return exe


def lock(python: str, name: str) -> None:
    """Resolve requirements/<name>.in (a lock set, suite.LOCK_SETS) with uv and write every exact pin, with the
    sha256 of each of its files, to <name>.txt. uv resolves from the packages' metadata for Python 3.11 on
    PLATFORM (no CUDA wheel downloaded, so a CUDA lock set is locked on any machine), with the environment's
    build-time constraints, and holds the pins already in <name>.txt as constraints: adding a line to the .in file
    changes no other pin (delete <name>.txt first to re-resolve everything). A CPU set also writes its conda file."""
    lock_set = suite.LOCK_SETS[name]
    target = suite.REQUIREMENTS / f"{name}.txt"
    build_pins = suite.REQUIREMENTS / f"{lock_set.environment}-constraints.txt"
    with tempfile.TemporaryDirectory() as tmp:
        held, out = Path(tmp, "held.txt"), Path(tmp, f"{name}.txt")
        held.write_text("".join(f"{pin}\n" for pin in (pins(name) if target.exists() else [])))
        cmd = [
            uv(python),
            "pip",
            "compile",
            suite.REQUIREMENTS / f"{name}.in",
            "--generate-hashes",
            "--python",
            python,
            "--python-version",
            "3.11",
            "--python-platform",
            PLATFORM,
            "--no-header",
            "--no-annotate",
            "--quiet",
            "-c",
            held,
            "-o",
            out,
        ]
        if build_pins.exists():  # as pip applies PIP_CONSTRAINT: to the environment and to source builds
            cmd += ["-c", build_pins, "--build-constraints", build_pins]
        run(cmd)
        body = out.read_text()
    header = (
        f"# Exact pins of the `{name}` lock set of the `{lock_set.environment}` environment "
        f"({lock_set.why}),\n"
        f"# each with the sha256 of its files: `pip install --require-hashes -r {name}.txt`.\n"
        f"# Generated from {name}.in by `python3 -m scripts.setup_envs --lock {name}`, which holds the pins\n"
        f"# already here ({UV} pip compile --generate-hashes for Python 3.11 on {PLATFORM});\n"
        "# edit the .in file, not this one.\n"
    )
    target.write_text(header + body)
    if lock_set.cuda is None:
        write_conda_file(name)
        print(f"wrote requirements/{name}.txt and {conda_file(name).name}")
    else:
        print(f"wrote requirements/{name}.txt")


def conda_file(env: str) -> Path:
    return suite.ROOT / ("environment.yml" if env == "modern" else f"environment-{env}.yml")


def pins(lock_set: str) -> list[str]:
    """The exact `name==version` of each requirement of requirements/<lock_set>.txt, without its hashes."""
    lines = (suite.REQUIREMENTS / f"{lock_set}.txt").read_text().splitlines()
    return [line.split()[0] for line in lines if line[:1].isalnum()]


def write_conda_file(env: str) -> None:
    """The same environment for conda users: Python 3.11 from conda-forge, every pin through pip."""
    lines = [
        f"# The `{env}` environment for conda: {suite.ENVIRONMENTS[env]}.",
        (
            f"# Generated with requirements/{env}.txt by `python3 -m scripts.setup_envs --lock {env}`; "
            "a test keeps the two in step."
        ),
        f"name: dlr-{env}",
        "channels:",
        "  - conda-forge",
        "dependencies:",
        "  - python=3.11",
        "  - pip",
        "  - pip:",
    ] + [f"      - {pin}" for pin in pins(env)]
    conda_file(env).write_text("\n".join(lines) + "\n")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "envs",
        nargs="*",
        help="environments to build (default: every one of this machine's lock "
        "sets: modern, legacy and paddle-mindspore; on a GPU machine also tensorflow)",
    )
    parser.add_argument("--force", action="store_true", help="rebuild even if the pins are unchanged")
    parser.add_argument(
        "--check", action="store_true", help="build nothing; say whether each environment is up to date (exit 1 if not)"
    )
    parser.add_argument(
        "--lock",
        metavar="SET",
        help=f"re-resolve requirements/SET.in into requirements/SET.txt (and a CPU set's conda "
        f"file); SET is one of {', '.join(suite.LOCK_SETS)}",
    )
    args = parser.parse_args(argv)
    if args.lock and args.lock not in suite.LOCK_SETS:
        sys.exit(f"setup_envs.py: unknown lock set {args.lock!r}; choose from: {', '.join(suite.LOCK_SETS)}")
    python = find_python()
    if args.lock:
        lock(python, args.lock)
        return
    kind, gpu, sets = choose_lock_sets()
    chosen = suite.by_environment(sets)
    unknown = [e for e in args.envs if e not in chosen]
    if unknown:
        known = set(suite.ENVIRONMENTS) | set(suite.GPU_ENVIRONMENTS)
        why = "" if unknown[0] not in known else f" on this machine ({kind} lock sets: {', '.join(sets)})"
        sys.exit(f"setup_envs.py: unknown environment {unknown[0]!r}{why}; choose from: {', '.join(chosen)}")
    envs = args.envs or list(chosen)
    if gpu:
        print(
            f"GPU: {gpu['name']}, driver {gpu['driver']}, compute capability {gpu['capability']}: "
            f"{kind} lock sets {', '.join(sets)}"
        )
    elif kind == "cuda":
        print(f"{FORCE}=cuda: the CUDA lock sets {', '.join(sets)} (no driver checked: nvidia-smi did not answer)")
    if args.check:
        stale = [env for env in envs if not up_to_date(python, env, chosen[env])]
        for env in envs:
            print(f"{env}: {'needs a build' if env in stale else 'up to date'} (lock set {chosen[env]})")
        sys.exit(1 if stale else 0)
    for env in envs:
        build(python, env, args.force, chosen[env])
    write_choice(kind, gpu, sets)
    register_kernels(list(chosen))
    if not args.envs:
        missing = system_packages()
        print(
            f"system: {missing}; the browser tests skip until then"
            if missing
            else f"system: {', '.join(SYSTEM_PACKAGES)} installed"
        )


if __name__ == "__main__":
    main()
