"""What the GPU machine's check runs on: the carried wheels installed offline, and the versions read without
importing anything.

scripts/device_wheels.sh downloads the wheels here, beforehand, into .device/wheels; on the GPU machine
install_wheels puts those its Python lacks into .device/site, a site directory of the check and on its children's
PYTHONPATH. It needs the standard library only: scripts.jobs and scripts.results (support.records needs
jsonschema, one of the carried wheels) are imported only after it has run.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import site
import subprocess
import sys
from pathlib import Path

# Every package the notebooks use, and the check itself: their versions go to summary.json.
VERSIONS = (
    "torch",
    "torchvision",
    "triton",
    "jax",
    "jaxlib",
    "jax-cuda13-plugin",
    "jax-cuda12-plugin",
    "flax",
    "optax",
    "orbax-checkpoint",
    "keras",
    "optree",
    "namex",
    "numpy",
    "ml-dtypes",
    "onnx",
    "onnxruntime",
    "onnxscript",
    "onnx-ir",
    "jax2onnx",
    "scikit-learn",
    "psutil",
    "jsonschema",
    "filelock",
    "cupy-cuda13x",
    "tensorflow",
    "papermill",
)


def distribution_name(wheel: Path) -> str:
    return re.sub(r"[-_.]+", "-", wheel.name.split("-")[0]).lower()


def installed_version(name: str, paths: list[str] | None = None) -> str | None:
    from importlib import metadata

    try:
        if paths is None:
            return metadata.version(name)
        found = list(metadata.distributions(name=name, path=paths))
        return found[0].version if found else None
    except metadata.PackageNotFoundError:
        return None


def install_wheels(wheels: Path, target: Path, python: str = sys.executable, say=print) -> dict:
    """Install each carried wheel whose distribution this Python lacks into `target` (pip --no-index --no-deps
    --target; a wheel unpacked by zipfile where pip is missing), then add `target` to this process's path as a
    site directory. Without wheels, a `target` folder prepared beforehand is used as it is."""
    report = {"wheels": str(wheels), "site": str(target), "installed": [], "present": [], "error": None}
    found = sorted(wheels.glob("*.whl")) if wheels.is_dir() else []
    if found:
        own = [p for p in sys.path if p not in os.environ.get("PYTHONPATH", "").split(os.pathsep) + [str(target)]]
        present = {name: installed_version(name, own) for name in map(distribution_name, found)}  # this Python's
        missing = [w for w in found if not present[distribution_name(w)]]
        report["present"] = [f"{n} {v}" for n, v in present.items() if v]
        shutil.rmtree(target, ignore_errors=True)
        if missing:

            def pip(wheels):
                return subprocess.run(
                    [
                        python,
                        "-m",
                        "pip",
                        "install",
                        "--quiet",
                        "--no-index",
                        "--no-deps",
                        "--no-compile",
                        "--disable-pip-version-check",
                        "--target",
                        str(target),
                        "--upgrade",
                        *map(str, wheels),
                    ],
                    capture_output=True,
                    text=True,
                    check=False,
                )

            done = pip(missing)
            if done.returncode == 0:
                report["installed"] = [w.name for w in missing]
            elif "No module named pip" in done.stderr:  # a wheel is a zip of what goes into site-packages
                import zipfile

                for wheel in missing:
                    with zipfile.ZipFile(wheel) as z:
                        z.extractall(target)
                report.update(installed=[w.name for w in missing], unpacked_without_pip=True)
            else:  # one at a time, so that one wheel this machine refuses keeps none of the others out
                errors = []
                for wheel in missing:
                    one = pip([wheel])
                    if one.returncode == 0:
                        report["installed"].append(wheel.name)
                    else:
                        errors.append(f"{wheel.name}: {(one.stderr.strip().splitlines() or ['pip failed'])[-1]}")
                report["error"] = "; ".join(errors) or None
        say(
            f"carried wheels: installed {', '.join(report['installed']) or 'none'}"
            f"{'; already here: ' + ', '.join(report['present']) if report['present'] else ''}"
            f"{'; ERROR ' + report['error'] if report['error'] else ''}"
        )
    elif target.is_dir():
        say(f"carried wheels: none in {wheels}; using the prepared {target}")
    else:
        say(f"carried wheels: none ({wheels} is absent): Keras, jax2onnx and jsonschema only if this machine has them")
    if target.is_dir():
        site.addsitedir(str(target))  # an install location (its .pth files too), not the project
    return report


def shm_free() -> int | None:
    """Free bytes in /dev/shm, where DataLoader workers hand batches over (a container's default 64 MiB holds
    about three of DenseNet-121's float32 batches of 32); None where there is none."""
    try:
        return shutil.disk_usage("/dev/shm").free
    except OSError:
        return None


def versions(target: Path) -> dict:
    """Python, the OS and every package the notebooks use, read without importing them."""
    paths = [str(target)] + sys.path if target.is_dir() else None
    return {
        "python": platform.python_version(),
        "executable": sys.executable,
        "os": f"{platform.system()} {platform.release()}",
        "cpu_count": os.cpu_count(),
        "shm_free_bytes": shm_free(),
        **{name: installed_version(name, paths) for name in VERSIONS},
    }
