"""The run metadata (`runs/<run>.json`, written by the runner): the machine's peak GFLOP/s per device and precision
before and after the suite, the load averages and the harness's own overhead; each row's MFU from its run's peak
(`attach_peaks`), and results.md's machine calibration section. What MFU means: docs/methodology.md.
"""

from __future__ import annotations

from pathlib import Path

from scripts.results import Layout, RunFileError, read_run
from support import precision as prec

from .rows import is_inference, number, row_title
from .text import EMPTY, Table, fmt, fmt_ms, markdown, markdown_table

DRIFT_LIMIT = 0.10  # warn when the peak measured after the suite differs from before by more
OVERHEAD_LIMIT = 0.01  # the harness's cost per lap should stay under this share of a step


def peak_key(r: dict) -> str:
    """The calibration a row's MFU divides by: its device's peak in its own precision ('cpu/float32',
    'cpu/bf16', 'cuda/tf32', ...); a run that measured no such peak leaves the row without MFU."""
    return prec.peak_key(r.get("device") or "", r.get("precision") or prec.BASELINE)


def peak(meta: dict, key: str, when: str = "before") -> float | None:
    """calibration[when][key].gflops where it is a positive number, else None."""
    entry = ((meta.get("calibration") or {}).get(when) or {}).get(key)
    gflops = entry.get("gflops") if isinstance(entry, dict) else None
    return float(gflops) if number(gflops) and gflops > 0 else None


def load_runs(machine_dir: Path, rows: list[dict]) -> dict[str, dict]:
    """{run id: {"path", "meta" (None when unusable), "problem" (why, or None)}} for every run the rows name."""
    runs = {}
    layout = Layout(machine_dir)
    for run_id in dict.fromkeys(r["run"] for r in rows if r.get("run")):
        try:
            runs[run_id] = {"path": layout.run_file(run_id), "meta": read_run(layout, run_id), "problem": None}
        except RunFileError as err:
            runs[run_id] = {"path": err.path, "meta": None, "problem": err.problem}
    return runs


def attach_peaks(rows: list[dict], runs: dict[str, dict]) -> None:
    """Each row's peak GFLOP/s (its run's calibration before the suite) and MFU = achieved / peak."""
    for r in rows:
        run = runs.get(r.get("run") or "")
        if r["gflops"] is None or run is None or run["meta"] is None:
            continue
        r["peak_gflops"] = peak(run["meta"], peak_key(r))
        if r["peak_gflops"]:
            r["mfu"] = r["gflops"] / r["peak_gflops"]


def calibration_section(rows: list[dict], runs: dict[str, dict]) -> list[str]:
    """Per run the rows come from: the peak GFLOP/s before and after the suite (a warning where they
    differ by more than DRIFT_LIMIT), the load averages, the harness overhead against the shortest step."""
    parts = [
        "## Machine calibration",
        "",
        "Each run measures this machine's peak GFLOP/s per precision (`scripts/calibrate.py`: a large matmul "
        "in every BLAS at hand and a oneDNN 3x3 convolution, the fastest kept, warm-up, then 7 repeats of the "
        "calls that fit each kernel's time budget, median; float32 and bfloat16 on the CPU, float32 with TF32 "
        "off, TF32, bfloat16 and float16 on a GPU, each only where the device computes it) before "
        "and after the suite; a row's MFU divides by the peak before in the row's own precision. "
        "A peak that moved by more than 10% means the machine was not equally fast throughout.",
        "",
    ]
    if not runs:
        return parts + [
            "No row names a run of `run_all.py` (records written before the run metadata, or by a "
            "notebook alone): no MFU.",
            "",
        ]
    for run_id, run in runs.items():
        run_rows = [r for r in rows if r.get("run") == run_id]
        if run["meta"] is None:
            parts += [
                f"**No MFU for run `{run_id}`**: its run file `runs/{run_id}.json` is {run['problem']}; "
                f"its {len(run_rows)} {'row shows' if len(run_rows) == 1 else 'rows show'} no MFU.",
                "",
            ]
            continue
        meta = run["meta"]
        when = " to ".join(str(meta[k]) for k in ("started", "ended") if meta.get(k))
        wall = f", {fmt(float(meta['wall_s']))} s wall" if number(meta.get("wall_s")) else ""
        profiles = (
            ", ".join(f"`{p}`" for p in meta.get("profiles") or []) if isinstance(meta.get("profiles"), list) else ""
        )
        parts += [
            f"### Run `{run_id}`",
            "",
            markdown(
                f"Profiles {profiles or '-'}; {when or 'start unknown'}{wall}; "
                f"{len(run_rows)} rows here; file `runs/{run_id}.json`.",
                one_line=True,
            ),
            "",
        ]
        calibration = meta["calibration"]
        before, after = calibration.get("before") or {}, calibration.get("after") or {}
        keys = list(dict.fromkeys([*before, *after]))
        warnings = []
        if keys:
            table = Table(
                ["device/dtype", "peak GFLOP/s before", "after", "change", "best lap before GFLOP/s", "library"],
                [False, True, True, True, True, False],
                [],
            )
            for key in keys:
                first, last = peak(meta, key, "before"), peak(meta, key, "after")
                change = last / first - 1 if first and last else None
                first_entry, last_entry = (e if isinstance(e, dict) else {} for e in (before.get(key), after.get(key)))
                best = first_entry.get("gflops_max")
                library = first_entry.get("library") or last_entry.get("library")
                table.rows.append(
                    [
                        key,
                        fmt(first),
                        fmt(last),
                        EMPTY if change is None else f"{100 * change:+.1f}%",
                        fmt(float(best)) if number(best) else EMPTY,
                        library or EMPTY,
                    ]
                )
                if change is not None and round(abs(change), 9) > DRIFT_LIMIT:  # 10.0% exactly is not more
                    warnings.append(
                        f"**WARNING**: the {key} peak moved from {fmt(first)} to {fmt(last)} GFLOP/s "
                        f"({100 * change:+.1f}%) between the start and the end of run `{run_id}`, more "
                        f"than {100 * DRIFT_LIMIT:.0f}%: the machine was not equally fast throughout "
                        "(throttling, or another load); compare this run's times with care."
                    )
            parts += [markdown_table(table), ""]
        else:
            parts += ["No peak was measured in this run (the calibration failed): its rows show no MFU.", ""]
        if before and not after:
            parts += [
                "No peak after the suite (the run was interrupted, or the calibration failed): no drift check.",
                "",
            ]
        skipped = meta.get("calibration_errors") if isinstance(meta.get("calibration_errors"), dict) else {}
        parts += [markdown(f"No {key} peak: {why}", one_line=True) for key, why in skipped.items()]
        parts += [""] if skipped else []
        missing = sorted({peak_key(r) for r in run_rows if r["gflops"] is not None and r["mfu"] is None})
        if before and missing:
            parts += [
                f"No {', '.join(missing)} peak in this run (runs before 2026-11-27 measured float32 only): "
                "its rows in that precision on that device show no MFU.",
                "",
            ]
        parts += warnings + ([""] if warnings else [])
        parts += [load_line(meta), "", overhead_line(meta, run_rows), ""]
    return parts


def load_line(meta: dict) -> str:
    def shown(load):
        if isinstance(load, list) and len(load) == 3 and all(number(x) for x in load):
            return ", ".join(f"{x:.2f}" for x in load)
        return "not measured"

    return (
        f"Load average (1, 5, 15 min): before {shown(meta.get('load_before'))}; after {shown(meta.get('load_after'))}."
    )


def overhead_line(meta: dict, run_rows: list[dict]) -> str:
    """The harness's cost per lap, and its largest share of a steady-state step over the run's rows."""
    overhead = meta.get("harness_overhead_s")
    if not number(overhead):
        return "Harness overhead: not measured in this run."
    head = f"Harness overhead: {fmt(overhead * 1e6)} µs per timed lap (`support.timing.overhead`)"
    stepped = [r for r in run_rows if r["status"] == "ok" and number(r["step_median_s"]) and r["step_median_s"] > 0]
    if not stepped:
        return head + "; no timed step in this run to compare it with."
    worst = max(stepped, key=lambda r: overhead / r["step_median_s"])
    share = overhead / worst["step_median_s"]
    where = (
        f"{worst['task']}/{row_title(worst)} ({worst['profile']}), {fmt_ms(worst['step_median_s'])} ms per "
        f"{'batch' if is_inference(worst['task']) else 'step'}"
    )
    if share < OVERHEAD_LIMIT:
        return (
            f"{head}; its largest share of a step over this run's rows is {fmt(share * 100, 2)}% ({where}): under 1%."
        )
    return (
        f"**WARNING**: {head[0].lower()}{head[1:]} is {fmt(share * 100, 2)}% of a step ({where}), not under 1%: "
        "the shortest steps' times carry the harness's own cost."
    )
