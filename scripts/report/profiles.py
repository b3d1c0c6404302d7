"""Where each framework's training step goes, per task: results.md's breakdown table and stacked bars.

A training run's record holds its `breakdown` (support/profiles.py: Bench.profile): the steady-state step's time
under the framework's profiler, split into support.profiles.PARTS (the operation categories and the framework's
overhead). Per task and profile the report shows, for each framework line's baseline, the share of every part as
a table and as one stacked horizontal bar (`plots/<profile>/<task>-profile.png`), with the trace files' links.
"""

from __future__ import annotations

from pathlib import Path

from support import profiles

from .rows import line_title
from .text import EMPTY, Table, fmt_ms, fmt_pct, markdown_table

COLOURS = {  # one colour per part, the same in every task's plot
    "convolution": "#4c72b0",
    "matmul": "#55a868",
    "element-wise": "#c44e52",
    "normalisation": "#8172b2",
    "recurrence": "#ccb974",
    "optimizer": "#64b5cd",
    "data": "#937860",
    "other": "#b0b0b0",
    "overhead": "#202020",
}


def profiled(rows: list[dict]) -> list[dict]:
    """The rows whose record holds a profile, timed and ok."""
    return [r for r in rows if r.get("breakdown") and r["status"] == "ok"]


def table(rows: list[dict]) -> Table:
    """Per framework line: the profiled step, the operations' part of it, the largest part, then every part's share."""
    parts = [p for p in profiles.PARTS if any(r["breakdown"]["shares"].get(p, 0) > 0 for r in rows)]
    out = Table(
        ["framework", "profiled step ms", "operations ms", "largest", *parts, "trace"],
        [False, True, True, False, *(True for _ in parts), False],
        [],
    )
    for r in rows:
        p = r["breakdown"]
        trace = f"[trace]({r['trace']})" if r.get("trace") else EMPTY
        out.rows.append(
            [
                line_title(r),
                fmt_ms(p["step_s"]),
                fmt_ms(p["operations_s"]),
                profiles.largest(p),
                *(fmt_pct(p["shares"].get(part, 0.0)) for part in parts),
                trace,
            ]
        )
    return out


def section(rows: list[dict], task: str, profile: str) -> list[str]:
    """results.md's lines for one task's profiles (nothing where no run profiled)."""
    chosen = profiled(rows)
    if not chosen:
        return []
    return [
        "### Where the step goes",
        "",
        "A few steady-state steps under each framework's own profiler (the notebook's `### Profile`), each "
        "operation's self time put in a category by its name (`support/profiles.py`); *overhead* is the profiled "
        "steps' wall time that no operation accounts for (Python, dispatch, scheduling, the profiler's own cost). "
        "Shares of the profiled step; the traces open in Perfetto (ui.perfetto.dev).",
        "",
        markdown_table(table(chosen)),
        "",
        f"![{task} profile](plots/{profile}/{task}-profile.png)",
        "",
    ]


def plot(rows: list[dict], path: Path, title: str) -> bool:
    """One stacked horizontal bar per framework line: its profiled step's shares. False where no run profiled."""
    from .plots import _pyplot, _save

    chosen = profiled(rows)
    if not chosen:
        return False
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(chosen) + 1.6))
    names = [line_title(r) for r in chosen]
    left = [0.0] * len(chosen)
    for part in profiles.PARTS:
        shares = [100 * r["breakdown"]["shares"].get(part, 0.0) for r in chosen]
        if any(shares):
            ax.barh(names, shares, left=left, color=COLOURS[part], label=part)
            left = [a + b for a, b in zip(left, shares)]
    ax.invert_yaxis()
    ax.set(xlim=(0, 100), xlabel="% of the profiled training step", title=title)
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.08), ncol=5, fontsize=8, frameon=False)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)
    return True
