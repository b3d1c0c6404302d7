"""The operator benchmarks' part of results.md and its plots (task `operators`, support/operators.py).

Each framework line's record holds every measurement of its plan (`operators`). The report shows, per profile:
- a table of where each framework line's curve sits against the fastest, by size class: for every float32 case
  (operation, size, direction) the line's time over the fastest line's time on that case (the best of every
  framework and mode), their geometric mean per size class of the case's FLOPs (support.operators.size_class);
- the latency floor: the smallest rung of each operation, forward, float32, in µs a call;
- plots: GFLOP/s against FLOPs per call (log-log), one panel per operation, one line per framework line and mode,
  with the machine's calibrated float32 peak as the ceiling (`operators-forward.png`, `operators-train.png`), and the
  floor as bars (`operators-floor.png`).
"""

from __future__ import annotations

import math
from pathlib import Path

from support import operators as ops
from support import tasks

from .rows import line_title
from .text import EMPTY, Table, fmt, markdown_table

TASK = "operators"


def measurements(rows: list[dict]) -> list[dict]:
    """Every ok measurement of the rows' records, each with its framework line ('pytorch', 'keras (jax)') and mode."""
    out = []
    for r in rows:
        for entry in r.get("operators") or []:
            if entry.get("status") == "ok" and r["status"] == "ok":
                out.append({**entry, "line": line_title(r)})
    return out


def _case(m: dict) -> tuple:
    return (m["op"], m["size"], m["direction"], m["dtype"])


def _class(m: dict) -> str | None:
    return ops.size_class(m["flops"] if m["flops"] is not None else ops.forward_flops(m["op"], m["dims"]))


def relative(found: list[dict], dtype: str = "float32") -> dict[tuple, dict[str, float]]:
    """{(framework line, mode): {size class: the geometric mean over its cases of its time over the fastest line's
    on the same case}} (1.0: the fastest everywhere in that class); a class without cases is absent."""
    chosen = [m for m in found if m["dtype"] == dtype and _class(m)]
    fastest: dict[tuple, float] = {}
    for m in chosen:
        fastest[_case(m)] = min(fastest.get(_case(m), math.inf), m["median_s"])
    ratios: dict[tuple, dict[str, list[float]]] = {}
    for m in chosen:
        ratios.setdefault((m["line"], m["mode"]), {}).setdefault(_class(m), []).append(
            m["median_s"] / fastest[_case(m)]
        )
    return {
        key: {c: math.exp(sum(math.log(v) for v in values) / len(values)) for c, values in by_class.items()}
        for key, by_class in ratios.items()
    }


def relative_table(found: list[dict], dtype: str = "float32") -> Table:
    """Per framework line and mode, by size class: `relative`'s geometric means (1.00x: the fastest throughout)."""
    rows = [
        [line, mode] + [f"{by_class[c]:.2f}x" if c in by_class else EMPTY for c in ops.SIZE_CLASSES]
        for (line, mode), by_class in relative(found, dtype).items()
    ]
    bounds = "tiny: under 1e5 FLOPs a call, small: to 1e7, medium: to 1e9, large: beyond"
    return Table(
        ["framework", "mode", *ops.SIZE_CLASSES],
        [False, False, True, True, True, True],
        rows,
        f"Time a call over the fastest line's on the same {dtype} case (operation, size, forward or forward plus "
        f"backward), geometric mean per size class ({bounds}); 1.00x is the fastest throughout.",
    )


def floor_table(found: list[dict]) -> Table:
    """Per framework line and mode: each operation's smallest rung, forward, float32, in µs a call."""
    names = [op for op in ops.OPS if any(m["op"] == op for m in found)]
    cells: dict[tuple, dict[str, str]] = {}
    for m in found:
        if m["size"] == 0 and m["direction"] == "forward" and m["dtype"] == "float32":
            cells.setdefault((m["line"], m["mode"]), {})[m["op"]] = fmt(m["median_s"] * 1e6)
    return Table(
        ["framework", "mode", *(ops.OPS[n].title for n in names)],
        [False, False, *([True] * len(names))],
        [[line, mode, *(by_op.get(n, EMPTY) for n in names)] for (line, mode), by_op in cells.items()],
        "µs a call at each operation's smallest size (support/operators.py), forward, float32: the dispatch floor, "
        "where a call's time is the framework's own.",
    )


def float32_peak(rows: list[dict], runs: dict[str, dict]) -> float | None:
    """The float32 peak GFLOP/s of the rows' device, calibrated before the run the first of them names."""
    from .peaks import peak, peak_key

    for r in rows:
        run = runs.get(r.get("run") or "")
        if run and run["meta"]:
            return peak(run["meta"], peak_key({**r, "precision": "fp32"}))
    return None


def section(rows: list[dict], profile: str, peak_gflops: float | None = None) -> list[str]:
    """results.md's operator-benchmark section for one profile's rows."""
    found = measurements(rows)
    title = f"## {tasks.get(TASK).title} (profile `{profile}`)"
    if not found:
        return [title, "", "No operator benchmark ran through.", ""]
    images = " ".join(
        f"![operators {name}](plots/{profile}/operators-{name}.png)" for name in ("forward", "train", "floor")
    )
    peak = f" The machine's calibrated float32 peak: {fmt(peak_gflops)} GFLOP/s." if peak_gflops else ""
    return [
        title,
        "",
        "Single operations up ladders of sizes, each timed with warm-up, a calibrated count of calls and 7 repeats "
        f"(median); FLOPs counted analytically (`support/operators.py`).{peak}",
        "",
        "### Against the fastest, by size class",
        "",
        markdown_table(relative_table(found)),
        "",
        "### The latency floor",
        "",
        markdown_table(floor_table(found)),
        "",
        images,
        "",
    ]


def plot(rows: list[dict], folder: Path, title: str, peak_gflops: float | None = None) -> list[Path]:
    """operators-forward.png and operators-train.png (GFLOP/s against FLOPs a call, log-log, per operation, float32,
    the calibrated peak as a dashed ceiling) and operators-floor.png; returns the files written."""
    from .plots import _pyplot, _save

    found = measurements(rows)
    if not found:
        return []
    plt = _pyplot()
    written = []
    lines = sorted({(m["line"], m["mode"]) for m in found})
    colours = {line: plt.cm.tab10(i % 10) for i, line in enumerate(sorted({line for line, _ in lines}))}
    for direction in ops.DIRECTIONS:
        chosen = [m for m in found if m["direction"] == direction and m["dtype"] == "float32" and m["gflops"]]
        names = [op for op in ops.OPS if any(m["op"] == op for m in chosen)]
        if not names:
            continue
        cols = 4
        fig, axes = plt.subplots(
            math.ceil(len(names) / cols), cols, figsize=(4 * cols, 3.2 * math.ceil(len(names) / cols)), squeeze=False
        )
        for ax, name in zip(axes.flat, names):
            for line, mode in lines:
                points = sorted(
                    (m["flops"], m["gflops"]) for m in chosen if (m["op"], m["line"], m["mode"]) == (name, line, mode)
                )
                if points:
                    ax.plot(
                        *zip(*points),
                        marker="o",
                        markersize=3,
                        color=colours[line],
                        linestyle="--" if mode == "eager" else "-",
                        label=f"{line} {mode}",
                    )
            if peak_gflops:
                ax.axhline(peak_gflops, color="grey", linestyle=":", linewidth=1)
            ax.set(xscale="log", yscale="log", title=ops.OPS[name].title, xlabel="FLOPs a call", ylabel="GFLOP/s")
        for ax in list(axes.flat)[len(names) :]:
            ax.axis("off")
        handles, labels = axes.flat[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)), fontsize=8)
        fig.suptitle(f"{title}: {direction}, float32" + (" (dotted: the calibrated peak)" if peak_gflops else ""))
        fig.tight_layout(rect=(0, 0.04 + 0.02 * math.ceil(len(labels) / 4), 1, 0.96))
        path = folder / f"operators-{direction}.png"
        _save(fig, path)
        plt.close(fig)
        written.append(path)
    floor = [m for m in found if m["size"] == 0 and m["direction"] == "forward" and m["dtype"] == "float32"]
    names = [op for op in ops.OPS if any(m["op"] == op for m in floor)]
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(names) + 2), 4))
    width = 0.8 / max(len(lines), 1)
    for i, (line, mode) in enumerate(lines):
        values = {m["op"]: m["median_s"] * 1e6 for m in floor if (m["line"], m["mode"]) == (line, mode)}
        xs = [j + i * width for j, name in enumerate(names) if name in values]
        ax.bar(
            xs,
            [values[name] for name in names if name in values],
            width,
            color=colours[line],
            hatch="//" if mode == "eager" else None,
            label=f"{line} {mode}",
        )
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(names))], [ops.OPS[n].title for n in names], rotation=30)
    ax.set(yscale="log", ylabel="µs a call", title=f"{title}: the latency floor (smallest size, forward, float32)")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    path = folder / "operators-floor.png"
    _save(fig, path)
    plt.close(fig)
    return written + [path]


def _best(found: list[dict], line: str, op: str, direction: str) -> float | None:
    """The line's best float32 GFLOP/s (any mode) on the largest rung of `op` that it ran."""
    runs = [m for m in found if (m["line"], m["op"], m["direction"], m["dtype"]) == (line, op, direction, "float32")]
    top = max((m["size"] for m in runs), default=None)
    return max((m["gflops"] for m in runs if m["size"] == top and m["gflops"]), default=None)


def readme_table(rows: list[dict]) -> Table:
    """The README's lines of the operator benchmarks: per framework line, its dispatch floor (the record's timing:
    the smallest add in its first mode), its best float32 GFLOP/s on the largest matmul and on the largest 3x3
    convolution forward plus backward, and where its large operations sit against the fastest line's."""
    found = measurements(rows)
    worst_large = {}  # a line's best mode on the large operations
    for (line, _), by_class in relative(found).items():
        if "large" in by_class:
            worst_large[line] = min(worst_large.get(line, math.inf), by_class["large"])

    def cells(r):
        line = line_title(r)
        if r["status"] != "ok":
            return [line, r["status"], EMPTY, EMPTY, EMPTY]
        if not r["timed"]:
            return [line, "not timed", EMPTY, EMPTY, EMPTY]
        return [
            line,
            fmt(r["median_s"] * 1e6),
            fmt(_best(found, line, "matmul", "forward")),
            fmt(_best(found, line, "conv3x3", "train")),
            f"{worst_large[line]:.2f}x" if line in worst_large else EMPTY,
        ]

    return Table(
        ["framework", "add floor µs", "matmul GFLOP/s", "3x3 conv train GFLOP/s", "large ops vs fastest"],
        [False, True, True, True, True],
        [cells(r) for r in rows],
    )
