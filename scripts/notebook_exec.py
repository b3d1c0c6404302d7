"""A notebook run without papermill, for a machine that has no Jupyter (the GPU machine's check).

    python -m scripts.notebook_exec NOTEBOOK EXECUTED PARAMETERS_JSON

Each code cell in order, in one fresh namespace (a module `__main__` of its own, so pickling what a cell defines
works), with the parameters injected after the cell tagged `parameters` as papermill does; IPython's `display` is
print, and `%` and `!` lines are skipped. Each cell's output is kept in the executed copy (written atomically after
every cell) as well as printed. On STACKS_SIGNAL (SIGUSR1) the process writes every thread's stack to stderr
(faulthandler): scripts/device_check.py sends it before killing a run that ran out of time. Exit status 0 where
every cell ran, 1 where one raised (its traceback printed as papermill prints it).
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import io
import json
import linecache
import signal
import sys
import traceback
import types
from pathlib import Path

from scripts import suite
from support import files

STACKS_SIGNAL = signal.SIGUSR1  # a notebook run writes every thread's stack to its log on this signal


def inject_parameters(notebook: dict, parameters: dict) -> dict:
    """papermill's semantics: a code cell tagged `injected-parameters` assigning each parameter, right after the
    cell tagged `parameters` (at the top where there is none); an earlier injected cell is replaced."""
    cells = [c for c in notebook["cells"] if "injected-parameters" not in c.get("metadata", {}).get("tags", [])]
    source = "# Parameters\n" + "".join(f"{name} = {value!r}\n" for name, value in parameters.items())
    injected = {
        "cell_type": "code",
        "execution_count": None,
        "metadata": {"tags": ["injected-parameters"]},
        "outputs": [],
        "source": source,
    }
    tagged = [i for i, c in enumerate(cells) if "parameters" in c.get("metadata", {}).get("tags", [])]
    cells.insert(tagged[0] + 1 if tagged else 0, injected)
    return {**notebook, "cells": cells}


def without_magics(source: str) -> str:
    """The cell as Python: where it does not parse, its IPython lines (`%magic`, `%%cell magic`, `!shell`)
    become `pass` at their indentation, so the line numbers of a traceback still match."""
    try:
        ast.parse(source)
        return source
    except SyntaxError:
        pass
    lines = []
    for line in source.splitlines():
        stripped = line.lstrip()
        lines.append(line[: len(line) - len(stripped)] + "pass" if stripped.startswith(("%", "!")) else line)
    return "\n".join(lines)


class Tee(io.TextIOBase):
    """A stream that writes to the real one (the log) and keeps a copy (the cell's output)."""

    def __init__(self, stream):
        self.stream, self.copy = stream, io.StringIO()

    def write(self, text):
        self.stream.write(text)
        self.copy.write(text)
        return len(text)

    def flush(self):
        self.stream.flush()

    def fileno(self):
        return self.stream.fileno()

    def isatty(self):
        return False

    @property
    def encoding(self):
        return getattr(self.stream, "encoding", "utf-8")

    @property
    def buffer(self):
        return self.stream.buffer


def run_cell(code: str, namespace: dict, filename: str) -> None:
    """Execute a cell as IPython does: its last expression, if any and not ended by ';', is shown."""
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)  # tracebacks show the lines
    tree = ast.parse(code, filename)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr) and not code.rstrip().endswith(";"):
        last = ast.Expression(tree.body.pop().value)
    exec(compile(tree, filename, "exec"), namespace)  # noqa: S102  (running the notebook's cells is the point)
    if last is not None:
        value = eval(compile(last, filename, "eval"), namespace)
        if value is not None:
            namespace["_"] = value
            print(repr(value))


def execute_notebook(path: Path, executed: Path, parameters: dict) -> int:
    """Run the notebook's code cells in order in one fresh `__main__` namespace, the parameters injected;
    write the executed notebook (each cell's output) after every cell. 0 when every cell ran, else 1."""
    notebook = inject_parameters(json.loads(Path(path).read_text(encoding="utf-8")), parameters)
    main = types.ModuleType("__main__")
    main.__dict__.update(__builtins__=builtins, display=lambda *objs, **_: print(*objs), get_ipython=lambda: None)
    sys.modules["__main__"] = main  # as IPython: what a cell defines pickles as __main__.<name>
    sys.argv = [str(path)]

    def save():
        files.atomic_write(executed, json.dumps(notebook, indent=1, ensure_ascii=False))

    count = 0
    for index, cell in enumerate(notebook["cells"]):
        if cell.get("cell_type") != "code":
            continue
        count += 1
        cell["execution_count"], cell["outputs"] = count, []
        print(f"--- cell {index} ---", flush=True)
        out, err = Tee(sys.__stdout__), Tee(sys.__stderr__)
        failure = None
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                run_cell(without_magics(suite.cell_source(cell)), main.__dict__, f"<cell {index}>")
        except SystemExit as stop:
            if stop.code not in (None, 0):
                failure = stop
        except BaseException as error:  # noqa: BLE001 (KeyboardInterrupt too: the cell stopped)
            failure = error
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
        for name, tee in (("stdout", out), ("stderr", err)):
            if tee.copy.getvalue():
                cell["outputs"].append({"output_type": "stream", "name": name, "text": tee.copy.getvalue()})
        if failure is not None:
            lines = traceback.format_exception(type(failure), failure, failure.__traceback__)
            sys.stderr.write("".join(lines))
            cell["outputs"].append(
                {"output_type": "error", "ename": type(failure).__name__, "evalue": str(failure), "traceback": lines}
            )
            print(
                f"device_check: cell {index} raised {type(failure).__name__}: {str(failure)[:300]}",
                file=sys.stderr,
                flush=True,
            )
            save()
            return 1
        save()
    return 0


def main(argv: list[str] | None = None) -> int:
    import faulthandler

    argv = sys.argv[1:] if argv is None else argv
    faulthandler.register(STACKS_SIGNAL, file=sys.__stderr__, all_threads=True, chain=False)
    return execute_notebook(Path(argv[0]), Path(argv[1]), json.loads(argv[2]))


if __name__ == "__main__":
    sys.exit(main())
