"""Files that are whole or absent: every file the notebooks, runner and report write goes through here.

`file_lock(path)` holds an exclusive lock (filelock's `FileLock` on `<name>.lock` beside it) so that two
processes, say two notebooks run at once, never write the same file or folder together.
`atomic_write(path, text_or_bytes)` writes a temporary file beside `path` (`.<name>.<pid>.tmp`,
ignored by git), flushes and fsyncs it, renames it over `path` and fsyncs the folder, so a crash
or a power cut leaves the old file or the new one, never half of either. `replacing(path)` does
the same for writers that want a path of their own (matplotlib's savefig, csv). Standard library and
filelock (pinned in both environments) only.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock


def temporary_name(path: Path) -> Path:
    """The temporary file beside `path` that this process writes before renaming it into place."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def _fsync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def replacing(path):
    """Yield a temporary path to write; on success it is fsynced and renamed over `path`, on an
    exception it is removed and `path` is left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_name(path)
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        tmp.replace(path)
        _fsync_folder(path.parent)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write(path, content: str | bytes) -> None:
    """Write `content` (text as UTF-8) to `path` atomically."""
    with replacing(path) as tmp:
        tmp.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)


def file_lock(path) -> FileLock:
    """An exclusive lock on `path` against other processes, for a `with` block: a FileLock on the sibling
    `<name>.lock` (an flock on Unix), left in place after release, since deleting it would reopen the race."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(path.with_name(path.name + ".lock"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # somebody else's process
        return True
    return True


def scratch(task: str, framework: str) -> Path:
    """An empty folder of this process's own for the files a notebook writes on its way (saved
    models, exported graphs): `<cache>/scratch/<task>/<framework>/<pid>/`, inside the project's
    cache (ignored by git). Two runs of a notebook at once (Keras's backends, DenseNet's modes) get
    two folders; the folders of processes that have ended are removed, so the files of the last
    run stay to look at, and nothing piles up."""
    import shutil

    from support.env import cache_dir

    parent = cache_dir() / "scratch" / task / framework
    parent.mkdir(parents=True, exist_ok=True)
    for old in parent.iterdir():
        if old.name.isdigit() and not _alive(int(old.name)):
            shutil.rmtree(old, ignore_errors=True)
    folder = parent / str(os.getpid())
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    return folder
