"""The plots beside results.md: per profile and task, throughput (compute with the IQR of the step times as error
bars, beside end to end), MFU, peak memory and the metric (`plot`); the learning curves (`plot_curves`); the
variants' speed-ups (`plot_variants`) and the batch-size sweeps (`plot_sweeps`). matplotlib is imported only when a
plot is drawn. What the numbers mean: docs/methodology.md.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from support.files import replacing
from support.records import METRICS

from .rows import comparable, has_device_memory, is_inference, number, row_title
from .text import EMPTY, MIB, NOT_COMPARABLE, fmt, fmt_metric


def headline_plot(task: str) -> str:
    """The file stem of a task's first plot (plots/<profile>/<stem>.png), which results.md and the reader show: the
    task's throughput bars, or the operator benchmarks' GFLOP/s of the forward calls (scripts/report/operators.py)."""
    return "operators-forward" if task == "operators" else task


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> None:
    with replacing(path) as tmp:
        fig.savefig(tmp, dpi=100, format="png")


def throughput_error(r: dict) -> tuple[float, float]:
    """(below, above) the compute samples/s: the q3 and q1 step times converted to samples/s."""
    rate, batch, q1, q3 = r["compute_samples_per_s"], r["batch"], r["step_q1_s"], r["step_q3_s"]
    if not all(number(x) and x > 0 for x in (rate, batch, q1, q3)):
        return 0.0, 0.0
    return max(rate - batch / q3, 0.0), max(batch / q1 - rate, 0.0)


def plot(task_rows: list[dict], path: Path, title: str) -> None:
    """Throughput (compute with IQR error bars, end to end beside it), MFU, peak memory and the metric."""
    plt = _pyplot()
    from matplotlib.patches import Patch

    inference = is_inference(task_rows[0]["task"])
    metric = METRICS.get(task_rows[0]["task"])
    labels = [row_title(r) + ("" if comparable(r) else f" {NOT_COMPARABLE}") for r in task_rows]
    panels = 3 + bool(metric)
    fig, axes = plt.subplots(1, panels, figsize=(4.3 * panels, 0.5 * len(task_rows) + 2.0), sharey=True, squeeze=False)
    ax_t, ax_u, ax_mem = axes[0][:3]
    y = list(range(len(task_rows)))
    handles, filled = {}, set()

    def missing(r):
        if r["status"] != "ok":
            return r["status"]
        return EMPTY if r["timed"] else "not timed"

    def bars(ax, values, offset, height, color, label, errors=None, text=fmt, hatch_flagged=True):
        shown = [v if number(v) else 0 for v in values]
        colors = [color if number(v) else "lightgrey" for v in values]
        drawn = ax.barh(
            [i + offset for i in y], shown, height=height, color=colors, xerr=errors, capsize=3 if errors else 0
        )
        if label:
            handles.setdefault(ax, []).append(Patch(color=color, label=label))
        if any(number(v) for v in values):
            filled.add(ax)
        for bar, r in zip(drawn, task_rows):
            if hatch_flagged and not comparable(r):
                bar.set_hatch("//")
        for i, (v, r) in enumerate(zip(values, task_rows)):
            right = shown[i] + (errors[1][i] if errors else 0)  # the label clears the error bar
            ax.text(right, i + offset, f" {text(v)}" if number(v) else f" {missing(r)}", va="center", fontsize=7)

    compute = [r["compute_samples_per_s"] for r in task_rows]
    errors = [list(e) for e in zip(*(throughput_error(r) for r in task_rows))]
    if inference:
        bars(ax_t, compute, 0, 0.7, "tab:blue", None, errors)
        ax_t.set_xlabel("images/s (bar: IQR of the batch times)")
    else:
        bars(ax_t, compute, -0.2, 0.4, "tab:blue", "compute: steady-state steps (bar: IQR)", errors)
        bars(ax_t, [r["e2e_samples_per_s"] for r in task_rows], 0.2, 0.4, "tab:orange", "end to end: epochs")
        ax_t.set_xlabel("samples/s")
    bars(
        ax_u,
        [None if r["mfu"] is None else 100 * r["mfu"] for r in task_rows],
        0,
        0.7,
        "tab:purple",
        None,
        text=lambda v: f"{fmt(v, 2)}%",
    )
    ax_u.set_xlabel("MFU, % of the measured matmul peak in the row's precision")
    if has_device_memory(task_rows):
        bars(
            ax_mem,
            [r["host_peak_bytes"] and r["host_peak_bytes"] / MIB for r in task_rows],
            -0.2,
            0.4,
            "tab:brown",
            "host (peak RSS)",
            hatch_flagged=False,
        )
        bars(
            ax_mem,
            [r["device_peak_bytes"] and r["device_peak_bytes"] / MIB for r in task_rows],
            0.2,
            0.4,
            "tab:olive",
            "device (allocator peak)",
            hatch_flagged=False,
        )
    else:
        bars(
            ax_mem,
            [r["host_peak_bytes"] and r["host_peak_bytes"] / MIB for r in task_rows],
            0,
            0.7,
            "tab:brown",
            None,
            hatch_flagged=False,
        )
    ax_mem.set_xlabel("peak memory, MiB" + ("" if has_device_memory(task_rows) else " (host, resident)"))
    if metric:
        ax_m = axes[0][3]
        scored = [r["value"] if r["status"] == "ok" else None for r in task_rows]
        bars(ax_m, scored, 0, 0.7, "tab:green", None, text=fmt_metric, hatch_flagged=False)
        ax_m.set_xlabel(
            task_rows[0]["metric"]
            + (
                ""
                if all(comparable(r) for r in task_rows)
                else f"  ({NOT_COMPARABLE}: outside the band, time not comparable)"
            )
        )
    ax_t.set_yticks(y, labels)
    ax_t.invert_yaxis()
    for ax in axes[0]:
        if ax in filled:
            ax.margins(x=0.25)
            ax.set_xlim(left=0)
        else:  # nothing measured (schema-1 records, failed runs)
            ax.set_xlim(0, 1)
            ax.set_xticks([])
            ax.text(0.5, 0.5, "not in these records", transform=ax.transAxes, ha="center", color="grey")
        if ax in handles:
            ax.legend(handles=handles[ax], fontsize=7, loc="best")
    fig.suptitle(title)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def plot_curves(task_rows: list[dict], path: Path, title: str) -> bool:
    """Every framework's metric after each epoch; False (and nothing written) where no row has a curve."""
    curves = [r for r in task_rows if r["status"] == "ok" and r.get("curve")]
    if not curves:
        return False
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8.5, 4.5))
    colors = plt.get_cmap("tab10" if len(curves) <= 10 else "tab20").colors
    for i, r in enumerate(curves):
        epochs = range(1, len(r["curve"]) + 1)
        ax.plot(
            epochs,
            r["curve"],
            marker="o",
            markersize=3,
            color=colors[i % len(colors)],
            linestyle="-" if comparable(r) else "--",
            label=row_title(r) + ("" if comparable(r) else f" {NOT_COMPARABLE} outside band"),
        )
    ax.set_xlabel("epoch")
    ax.set_ylabel(curves[0]["metric"])
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title(title)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)
    return True


def plot_variants(chosen: list[dict], path: Path, title: str) -> bool:
    """A bar per framework line and variant: its speed-up over the line's baseline (1 = as fast)."""
    bars = [r for r in chosen if r["matrix"] and r["speedup"] is not None]
    if not bars:
        return False
    plt = _pyplot()
    labels = [f"{r['framework']}{' ' + r['line'] if r['line'] else ''}: {r['matrix']}" for r in bars]
    fig, ax = plt.subplots(figsize=(8, 0.4 * len(bars) + 1.5))
    colours = {label: plt.cm.tab10(i % 10) for i, label in enumerate(dict.fromkeys(r["matrix"] for r in bars))}
    ax.barh(range(len(bars)), [r["speedup"] for r in bars], color=[colours[r["matrix"]] for r in bars])
    for i, r in enumerate(bars):
        ax.text(r["speedup"], i, f" {r['speedup']:.2f}x", va="center", fontsize=8)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks(range(len(bars)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("speed-up over the baseline (compute samples/s)")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)
    return True


def plot_sweeps(sweeps: list[dict], path: Path, title: str) -> bool:
    """Throughput and 95th-percentile latency against the batch size, a line per framework line."""
    if not sweeps:
        return False
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for r in sweeps:
        sizes = r["sweep"]["sizes"]
        beside = dataclasses.replace(r["identity"], sweep=False).matrix_label  # what the sweep ran with
        label = f"{r['framework']}{' ' + r['line'] if r['line'] else ''}" + (f" {beside}" if beside else "")
        left.plot([s["batch_size"] for s in sizes], [s["samples_per_s"] for s in sizes], marker="o", label=label)
        right.plot([s["batch_size"] for s in sizes], [1e3 * s["p95_s"] for s in sizes], marker="o", label=label)
    for ax, what in ((left, "samples/s"), (right, "p95 latency, ms")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch size")
        ax.set_ylabel(what)
        ax.grid(True, which="both", alpha=0.3)
    left.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)
    return True
