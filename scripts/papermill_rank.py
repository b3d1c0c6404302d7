"""papermill in one rank of a framework's launcher: a notebook whose data parallelism is one process per device
(PyTorch's DistributedDataParallel, PaddlePaddle's DataParallel) runs once per device, each process a rank
executing the whole notebook.

    .venvs/modern/bin/python -m torch.distributed.run --standalone --nproc-per-node 2 \\
        scripts/papermill_rank.py pytorch NOTEBOOK OUTPUT [papermill options, e.g. -p devices 2]

The launcher (the framework's registry entry's `launcher`, support/frameworks.py) starts this script once per rank
with the same arguments and tells each its rank in an environment variable of its own (torchrun `RANK`,
paddle.distributed.launch `PADDLE_TRAINER_ID`), which FRAMEWORK names; rank 0 writes OUTPUT and rank r writes
OUTPUT's name with `.rank<r>` before `.ipynb` beside it, so that the ranks never write one file. The launcher runs
it with its own environment's Python, which may have no papermill: it replaces itself with papermill in the
environment that runs papermill (`modern`), whose kernel inherits the launcher's variables. Standard library only.
The runner (`run_all.py`) launches it for the frameworks in `suite.PROCESS_PER_DEVICE`.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path


def rank_output(output: str, rank: int) -> str:
    """The executed notebook of one rank: OUTPUT itself for rank 0, else OUTPUT with `.rank<r>` before its suffix."""
    path = Path(output)
    return output if rank == 0 else str(path.with_name(f"{path.stem}.rank{rank}{path.suffix}"))


def other_ranks(output: str | Path) -> list[tuple[int, Path]]:
    """The executed notebooks the ranks other than 0 wrote beside OUTPUT (rank_output's names), as (rank, path)
    in the ranks' order: rank 10 after rank 2."""
    path = Path(output)
    found = []
    for other in path.parent.glob(f"{path.stem}.rank*{path.suffix}"):
        number = other.name[len(f"{path.stem}.rank") : -len(path.suffix) or None]
        if number.isdigit() and int(number) > 0:
            found.append((int(number), other))
    return sorted(found)


def main(argv: list[str]) -> None:
    if len(argv) < 3:
        sys.exit(
            "usage: papermill_rank.py FRAMEWORK NOTEBOOK OUTPUT [papermill options]  "
            "(started by the framework's launcher, once per rank)"
        )
    from scripts import suite  # standard library only, as support.frameworks (the project is installed editable)
    from support import frameworks

    name, notebook, output, *options = argv
    launcher = frameworks.get(name).launcher
    if launcher.coordinator and os.environ.get(launcher.coordinator[0]) == launcher.coordinator[1]:
        module, _, function = launcher.coordinate.partition(":")  # msrun's scheduler: it serves the ranks, no notebook
        getattr(importlib.import_module(module), function)()
        return
    rank = int(os.environ.get(launcher.rank, "0"))
    python = str(suite.venv_python("modern"))  # the environment that runs papermill (scripts/suite.py)
    os.execv(python, [python, "-m", "papermill", notebook, rank_output(output, rank), *options])


if __name__ == "__main__":
    main(sys.argv[1:])
