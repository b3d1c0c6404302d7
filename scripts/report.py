"""Turn a machine's JSON records into results.csv, Markdown tables, plots and the README table.

    python scripts/report.py results/<machine>     # rebuild the tables from the records there

Reads `records/<profile>/*.json` under the machine's folder (written by the notebooks, or by
the runner for a notebook that failed) and writes, next to them:
- `results.csv`: one row per record, every profile;
- `results.md`: a table per profile and task (time with spread, throughput, accuracy or AUC,
  versions, data kind, errors);
- `plots/<profile>/<task>.png`: time per epoch or batch with its interquartile range, and the metric.
`update_readme()` puts a summary of one profile between the README's results markers.

A record that cannot be read (not JSON, a field of the wrong type, filed under another name)
becomes a failed row that names the file and what is wrong; it never stops the build. A record
marked not timed (`run_all.py --jobs 2`) shows no time anywhere: its runs shared the machine.
Every file is written atomically (support.files). The tasks' titles, columns and bands come from
`support/tasks.py`.

Two cross-framework checks go into the tables rather than hiding a row:
- the band: every framework's accuracy (CNN, GRU) or AUC (DenseNet) should lie within its task's
  band of the median of the frameworks (same profile and data; a framework with several variants,
  Keras's backends, counts once, by its own median); a row outside is flagged in results.md,
  the README table and the runner's output (`flagged()`);
- structure: each row's parameter count beside its difference from PyTorch's, and the parity
  error (`max |outputs - numpy reference| / max |reference|` on shared weights) where the run
  had the parity step (`run_all.py --parity`).
"""
from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from scripts import suite  # noqa: E402
from support import tasks  # noqa: E402
from support.files import atomic_write, replacing  # noqa: E402
from support.records import METRICS, RecordError, read  # noqa: E402

COLUMNS = ("task", "framework", "variant", "status", "profile", "data", "timed", "unit", "median_s", "q1_s", "q3_s",
           "iqr_s", "cv", "n_timed", "warmup_s", "compile_s", "samples_per_s", "metric", "value", "n_parameters",
           "framework_version", "parity_error", "band", "python", "numpy", "device", "threads", "cuda", "cudnn",
           "machine", "git_commit", "date", "wall_s", "error")
TIMING_COLUMNS = ("median_s", "q1_s", "q3_s", "iqr_s", "cv", "n_timed", "warmup_s", "compile_s", "samples_per_s")
README_START, README_END = "<!-- results:start -->", "<!-- results:end -->"
TASK_TITLES = {name: task.title for name, task in tasks.TASKS.items()}
PROFILE_ORDER = {p: i for i, p in enumerate(suite.PROFILES)}
FRAMEWORK_ORDER = {f: i for i, f in enumerate(suite.FRAMEWORKS)}

# How far a framework's final accuracy or AUC may sit from the median of the frameworks' (support.tasks).
# They train the same model on the same data with the same schedule, so what is left is the seed and
# the initialiser: at the tiny and cpu profiles (a few hundred samples) that moves accuracy by a few
# points. DenseNet's AUC is only checked on the full profile: the smaller ones score too few images.
BAND = {name: task.band for name, task in tasks.TASKS.items() if task.band}
BAND_PROFILES = {name: task.band_profiles for name, task in tasks.TASKS.items()}


def load_records(machine_dir: Path) -> list[dict]:
    """Every record under machine_dir/records/<profile>/; one that cannot be read, or that is filed
    under another task, framework, variant or profile than its own, becomes a failed row naming
    the file and the problem."""
    out = []
    for path in sorted((machine_dir / "records").glob("*/*.json")):
        try:
            record = read(path)
            filed = {"key": path.stem, "profile": path.parent.name}
            own = {"key": "__".join(filter(None, (record["task"], record["framework"], record["variant"]))),
                   "profile": record["profile"]}
            if own != filed:
                raise RecordError(f"{path}: the record is of {own['key']} at profile {own['profile']} but is filed "
                                  f"as {filed['key']} at {filed['profile']}: move it, or run that notebook again")
            out.append(record)
        except (OSError, RecordError) as err:
            task, _, rest = path.stem.partition("__")
            framework, _, variant = rest.partition("__")
            out.append({"task": task, "framework": framework or "?", "variant": variant, "status": "failed",
                        "profile": path.parent.name, "error": str(err)})
    return out


def row(record: dict) -> dict:
    """Flatten one record into the CSV's columns."""
    timing, env = record.get("timing") or {}, record.get("environment") or {}
    metric = METRICS.get(record["task"]) or "images_per_s"
    value = (record.get("metrics") or {}).get(metric)
    out = {
        "task": record["task"], "framework": record["framework"], "variant": record.get("variant", ""),
        "status": record["status"], "profile": record.get("profile"), "data": record.get("data"),
        "timed": record.get("timed", True),
        "unit": timing.get("unit"), "median_s": timing.get("median_s"), "q1_s": timing.get("q1_s"),
        "q3_s": timing.get("q3_s"), "iqr_s": timing.get("iqr_s"),
        "cv": timing.get("cv"), "n_timed": timing.get("n"),
        "warmup_s": (timing.get("warmup_s") or [None])[0], "compile_s": record.get("compile_s"),
        "samples_per_s": timing.get("samples_per_s"),
        "metric": metric, "value": value, "n_parameters": record.get("n_parameters"),
        "parity_error": (record.get("parity") or {}).get("max_rel_error"), "band": None,
        "framework_version": env.get("framework_version"), "python": env.get("python"), "numpy": env.get("numpy"),
        "device": env.get("device"), "threads": env.get("threads"), "cuda": env.get("cuda"),
        "cudnn": env.get("cudnn"), "machine": env.get("machine"), "git_commit": env.get("git_commit"),
        "date": env.get("date"), "wall_s": record.get("wall_s"), "error": record.get("error"),
        "executed_notebook": record.get("executed_notebook"),      # not a CSV column: for the reader's links
    }
    if not out["timed"]:        # its runs shared the machine: no time of it is a measurement
        out.update(dict.fromkeys(TIMING_COLUMNS))
        out["unit"] = timing.get("unit")
    return out


def sort_key(r: dict):
    return (PROFILE_ORDER.get(r["profile"], 99), suite.TASKS.index(r["task"]) if r["task"] in suite.TASKS else 99,
            FRAMEWORK_ORDER.get(r["framework"], 99), r["variant"] or "")


def mark_band(rows: list[dict]) -> None:
    """Set each row's `band` to 'in' or 'outside' (None where its task or profile has no band).
    The centre is the median over frameworks, each framework counted once by the median of its own
    rows: Keras's three backends or MXNet's two APIs must not outvote the others."""
    groups_ = {}
    for r in rows:
        if (r["status"] == "ok" and r["task"] in BAND and r["value"] is not None
                and r["profile"] in BAND_PROFILES.get(r["task"], suite.PROFILES)):
            groups_.setdefault((r["profile"], r["task"], r["data"]), []).append(r)
    for (_, task, _), members in groups_.items():
        by_framework = {}
        for r in members:
            by_framework.setdefault(r["framework"], []).append(r["value"])
        if len(by_framework) < 2:
            continue
        centre = median(median(values) for values in by_framework.values())
        for r in members:
            r["band"] = "outside" if abs(r["value"] - centre) > BAND[task] else "in"
            r["band_median"] = centre


def flagged(rows: list[dict]) -> list[str]:
    """One line per row outside its task's band, for the runner to print."""
    return [f"{r['task']}/{name(r)} ({r['profile']}): {r['metric']} {r['value']:.3f} is more than "
            f"{BAND[r['task']]} from the median {r['band_median']:.3f} of the frameworks"
            for r in rows if r["band"] == "outside"]


def write_csv(rows: list[dict], path: Path) -> None:
    with replacing(path) as tmp, open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows({k: ("" if v is None else v) for k, v in r.items()} for r in rows)


def cell(value) -> str:
    """Text that stays inside one Markdown table cell: `|` escaped, line breaks turned into spaces."""
    return " ".join(str(value).split()).replace("|", "\\|")


def fmt(value, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}g}" if abs(value) < 10 ** digits else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def fmt_metric(value) -> str:
    """Accuracy and AUC to three decimals; a throughput as fmt() does."""
    if isinstance(value, float) and value <= 1:
        return f"{value:.3f}"
    return fmt(value)


def name(r: dict) -> str:
    return cell(r["framework"] + (f" ({r['variant']})" if r["variant"] else ""))


def metric_cell(r: dict) -> str:
    """The accuracy or AUC, with a flag when it lies outside its task's band."""
    return fmt_metric(r["value"]) + (" **outside band**" if r["band"] == "outside" else "")


def parameters_cell(r: dict, reference: int | None) -> str:
    """The count, and its difference from PyTorch's where there is one."""
    n = r["n_parameters"]
    if n is None or reference is None or n == reference or r["framework"] == "pytorch":
        return fmt(n)
    return f"{fmt(n)} ({n - reference:+,})"


def task_table(rows: list[dict]) -> str:
    unit = next((r["unit"] for r in rows if r["unit"]), "epoch")
    metric = rows[0]["metric"]
    reference = next((r["n_parameters"] for r in rows if r["framework"] == "pytorch" and r["n_parameters"]), None)
    lines = [f"| framework | status | s per {unit} (median) | IQR s | warm-up s | compile s | samples/s | {metric} | "
             "parameters (vs pytorch) | parity error | version | data |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for r in rows:
        status = r["status"] if r["status"] == "ok" else f"**{r['status']}**: {cell((r['error'] or '')[:160])}"
        median_s = fmt(r["median_s"]) if r["timed"] else "not timed"
        lines.append(f"| {name(r)} | {status} | {median_s} | {fmt(r['iqr_s'], 2)} | {fmt(r['warmup_s'])} | "
                     f"{fmt(r['compile_s'])} | "
                     f"{fmt(r['samples_per_s'])} | {metric_cell(r)} | {parameters_cell(r, reference)} | "
                     f"{'-' if r['parity_error'] is None else format(r['parity_error'], '.1e')} | "
                     f"{cell(r['framework_version'] or '-')} | {cell(r['data'] or '-')} |")
    return "\n".join(lines)


def groups(rows: list[dict]):
    """(profile, task, rows) in table order."""
    keys = sorted({(r["profile"], r["task"]) for r in rows},
                  key=lambda k: (PROFILE_ORDER.get(k[0], 99), suite.TASKS.index(k[1]) if k[1] in suite.TASKS else 99))
    for profile, task in keys:
        yield profile, task, [r for r in rows if (r["profile"], r["task"]) == (profile, task)]


def environment_line(rows: list[dict]) -> str:
    ok = [r for r in rows if r["status"] == "ok"]
    if not ok:
        return ""
    r = ok[0]
    days = sorted({x["date"][:10] for x in ok if x["date"]})
    when = f", {days[0]}" + (f" to {days[-1]}" if len(days) > 1 else "") if days else ""
    commits = list(dict.fromkeys(x["git_commit"] for x in ok if x["git_commit"]))   # runs of several commits
    commit = f"commit{'s' if len(commits) > 1 else ''} {', '.join(commits) or '-'}"
    return cell(f"Machine `{r['machine']}` ({r['device']}, {r['threads']} threads), Python {r['python']}, "
                f"{commit}{when}")


def write_markdown(rows: list[dict], path: Path, machine: str) -> None:
    parts = [f"# Results on `{machine}`", "",
             "Generated by `scripts/report.py` from the JSON records beside this file; do not edit by hand. "
             "Times are medians over the timed epochs or batches after warm-up; IQR is their interquartile range; "
             "*not timed*: the run shared the machine with another (`--jobs` above 1), so it shows no time. "
             "Warm-up is the first epoch (or the untimed batches), which holds graph building and compilation; "
             "compile is that compilation alone, where the notebook measures it. "
             "*Outside band*: the accuracy or AUC is further than "
             + ", ".join(f"{w} ({tasks.TASKS[t].short})" for t, w in BAND.items())
             + " from the median of the frameworks' (each framework counted once; DenseNet only at the full profile). "
             "Parity error: the largest deviation from the numpy reference on shared weights, relative to the "
             "outputs' scale (`run_all.py --parity`; see LESSONS.md).", ""]
    for profile, task, task_rows in groups(rows):
        parts += [f"## {TASK_TITLES.get(task, task)} (profile `{profile}`)", "", environment_line(task_rows), "",
                  task_table(task_rows), "", f"![{task}](plots/{profile}/{task}.png)", ""]
    atomic_write(path, "\n".join(parts))


def plot(task_rows: list[dict], path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [name(r) for r in task_rows]
    ok = [r["status"] == "ok" and r["timed"] and r["median_s"] is not None for r in task_rows]
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 0.5 * len(task_rows) + 1.8), sharey=True)
    y = range(len(task_rows))
    times = [r["median_s"] if k else 0 for r, k in zip(task_rows, ok)]
    spread = [[r["median_s"] - r["q1_s"] if k else 0 for r, k in zip(task_rows, ok)],
              [r["q3_s"] - r["median_s"] if k else 0 for r, k in zip(task_rows, ok)]]
    ax_t.barh(y, times, xerr=spread, color=["tab:blue" if k else "lightgrey" for k in ok], capsize=3)
    for i, (r, k) in enumerate(zip(task_rows, ok)):
        shown = "not timed" if r["status"] == "ok" else r["status"]
        ax_t.text(times[i], i, f" {fmt(r['median_s'])}" if k else f" {shown}", va="center", fontsize=8)
    unit = next((r["unit"] for r in task_rows if r["unit"]), "epoch")
    ax_t.set_xlabel(f"seconds per {unit} (median, bar = IQR)")
    scored = [r["status"] == "ok" and r["value"] is not None for r in task_rows]
    values = [r["value"] if k else 0 for r, k in zip(task_rows, scored)]
    ax_m.barh(y, values, color=["tab:green" if k else "lightgrey" for k in scored])
    for i, v in enumerate(values):
        ax_m.text(v, i, f" {fmt_metric(v)}" if scored[i] else "", va="center", fontsize=8)
    ax_m.set_xlabel(task_rows[0]["metric"])
    ax_t.set_yticks(list(y), labels)
    ax_t.invert_yaxis()
    fig.suptitle(title)
    fig.tight_layout()
    with replacing(path) as tmp:
        fig.savefig(tmp, dpi=100, format="png")
    plt.close(fig)


def headline_profile(rows: list[dict]) -> str | None:
    """The most complete profile present: full, else cpu, else tiny."""
    present = {r["profile"] for r in rows}
    return next((p for p in suite.PROFILES if p in present), None)


def split_variant(r: dict) -> tuple[str, str]:
    """(framework variant, task mode): 'jax-ram' -> ('jax', 'ram'); a task's mode is always last."""
    task = tasks.TASKS.get(r["task"])
    if task and task.modes:
        *rest, mode = (r["variant"] or "").split("-")
        return "-".join(rest), mode
    return r["variant"] or "", ""


def provenance(rows: list[dict], machine: str) -> str:
    """Where one profile's rows come from: profile, machine, data kind, then environment_line()."""
    profiles = ", ".join(f"`{p}`" for p in dict.fromkeys(r["profile"] for r in rows))
    kinds = sorted({r["data"] for r in rows if r["data"]})
    machine_line = environment_line(rows)
    return f"Profile {profiles} on `{machine}`; data: {', '.join(kinds) or '-'}." + (f" {machine_line}." if machine_line else "")


def readme_rows(rows: list[dict]) -> list[dict]:
    """Per framework and variant, the rows of the most complete profile it has (full, else cpu, else
    tiny). On a GPU machine a framework whose build sees no GPU runs `cpu` beside the others' `full`."""
    best: dict[tuple, str] = {}
    for r in rows:
        line = (r["framework"], split_variant(r)[0])
        if line not in best or PROFILE_ORDER.get(r["profile"], 99) < PROFILE_ORDER.get(best[line], 99):
            best[line] = r["profile"]
    return [r for r in rows if best[(r["framework"], split_variant(r)[0])] == r["profile"]]


def readme_cell(r: dict) -> str:
    task = tasks.TASKS.get(r["task"])
    if r["status"] != "ok":
        return r["status"]
    if not r["timed"]:
        text = "not timed"
    else:
        text = fmt(r["samples_per_s"]) if task and task.unit == "batch" else fmt(r["median_s"])
    mode = split_variant(r)[1]
    if r["value"] is not None and task and task.metric and (not task.metric_modes or mode in task.metric_modes):
        text += f" ({fmt_metric(r['value'])}{'!' if r['band'] == 'outside' else ''})"
    return text


def readme_table(rows: list[dict], machine: str) -> str:
    """One line per framework (and backend), one column per task and mode (support.tasks), each line
    from its most complete profile; a profile column appears when the lines' profiles differ."""
    rows = readme_rows(rows)
    cells: dict[tuple, dict] = {}
    profiles: dict[tuple, str] = {}
    for r in rows:
        variant, mode = split_variant(r)
        cells.setdefault((r["framework"], variant), {})[(r["task"], mode)] = readme_cell(r)
        profiles[(r["framework"], variant)] = r["profile"]
    columns = [((name, mode), head) for name, task in tasks.TASKS.items() for mode, head in task.columns()]
    mixed = len(set(profiles.values())) > 1
    lines = ["| framework | " + ("profile | " if mixed else "") + " | ".join(head for _, head in columns) + " |",
             "|---|" + ("---|" if mixed else "") + "---:|" * len(columns)]
    for line in sorted(cells, key=lambda k: (FRAMEWORK_ORDER.get(k[0], 99), k[1])):
        framework, variant = line
        found = cells[line]
        lines.append(f"| {cell(framework + (f' ({variant})' if variant else ''))} | "
                     + (f"{profiles[line]} | " if mixed else "")
                     + " | ".join(found.get(c, "-") for c, _ in columns) + " |")
    note = (f"{provenance(rows, machine)} "
            f"Details, spreads, parameter counts and plots: [results/{machine}/results.md](results/{machine}/results.md)."
            + (" The lines come from different profiles (column `profile`): compare times only between lines of "
               "one profile." if mixed else "")
            + (" `not timed`: the run shared the machine (`--jobs`)." if any(not r["timed"] for r in rows) else "")
            + (" `!`: accuracy or AUC outside the band around the other frameworks'." if any(
                r["band"] == "outside" for r in rows) else ""))
    return "\n".join([note, "", *lines])


def update_readme(readme: Path, rows: list[dict], machine: str) -> None:
    text = readme.read_text()
    if README_START not in text or README_END not in text:
        raise SystemExit(f"{readme}: no {README_START} ... {README_END} markers to put the results between")
    before, rest = text.split(README_START, 1)
    after = rest.split(README_END, 1)[1]
    atomic_write(readme, f"{before}{README_START}\n{readme_table(rows, machine)}\n{README_END}{after}")


def load_rows(machine_dir: Path) -> list[dict]:
    """Every record of one machine as a table row, in table order, with its band marked."""
    rows = sorted((row(r) for r in load_records(machine_dir)), key=sort_key)
    mark_band(rows)
    return rows


def build(machine_dir: Path, readme: Path | None = None) -> list[dict]:
    """Write results.csv, results.md and the plots for one machine; update the README if given."""
    rows = load_rows(machine_dir)
    if not rows:
        print(f"no records under {machine_dir / 'records'}")
        return rows
    write_csv(rows, machine_dir / "results.csv")
    write_markdown(rows, machine_dir / "results.md", machine_dir.name)
    for profile, task, task_rows in groups(rows):
        plot(task_rows, machine_dir / "plots" / profile / f"{task}.png",
             f"{TASK_TITLES.get(task, task)} ({profile} profile, {machine_dir.name})")
    if readme:
        update_readme(readme, rows, machine_dir.name)
    print(f"wrote {machine_dir / 'results.csv'}, results.md and plots ({len(rows)} rows)")
    return rows


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python scripts/report.py results/<machine>")
    build(Path(sys.argv[1]))
