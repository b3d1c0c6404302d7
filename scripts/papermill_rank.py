"""papermill in one rank of a torchrun launch: a notebook whose data parallelism is one process per device
(PyTorch's DistributedDataParallel) runs once per device, each process a rank executing the whole notebook.

    .venvs/modern/bin/python -m torch.distributed.run --standalone --nproc-per-node 2 \\
        scripts/papermill_rank.py NOTEBOOK OUTPUT [papermill options, e.g. -p devices 2]

torchrun starts this script once per rank with the same arguments and tells each its rank in `RANK`; rank 0
writes OUTPUT and rank r writes OUTPUT's name with `.rank<r>` before `.ipynb` beside it, so that the ranks never
write one file. The runner (`run_all.py`) launches it for the frameworks in `suite.PROCESS_PER_DEVICE`.
"""

from __future__ import annotations

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
    if len(argv) < 2:
        sys.exit("usage: papermill_rank.py NOTEBOOK OUTPUT [papermill options]  (started by torchrun, once per rank)")
    from papermill.cli import papermill

    notebook, output, *options = argv
    papermill.main([notebook, rank_output(output, int(os.environ.get("RANK", "0"))), *options], prog_name="papermill")


if __name__ == "__main__":
    main(sys.argv[1:])
