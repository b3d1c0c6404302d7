"""Benchmark timing: warm-up, repeats, synchronisation, robust statistics.

Four measurements, as DLPerf, the CAICT report and NVIDIA's reference scripts take them:
- `Stopwatch`: the end-to-end time of repeated blocks (epochs with their input pipeline, batches);
- `steady_state`: the compute throughput, steps on data already in memory, after warm-up steps, in
  at least 7 repeats of a fixed number of steps, synchronised only at each repeat's two ends;
- `timed`: one call's time (a compilation, the first step);
- `sweep`: the steady state at several batch sizes, up to the largest that fits in memory and time.

A `Stopwatch` times repeated blocks (epochs, batches). The first `warmup` laps are recorded
separately (they hold compilation, autotuning, caches filling) and the rest give the median,
the interquartile range, the coefficient of variation and the throughput. Frameworks that run
asynchronously pass their synchronisation (`torch.cuda.synchronize`, `mx.nd.waitall`, a
`block_until_ready`) as `sync`, called before the clock is read at both ends of every lap.

    epochs = timing.Stopwatch(warmup=1, sync=torch.cuda.synchronize)
    for epoch in range(settings.epochs):
        with epochs.lap(samples=n_train):
            train_one_epoch()
    epochs.summary()   # {'unit': 'epoch', 'median_s': ..., 'iqr_s': ..., 'samples_per_s': ...}
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import contextmanager

import numpy as np


def stats(seconds) -> dict:
    """Median, quartiles, IQR, mean, standard deviation and coefficient of variation of timings."""
    t = np.asarray(seconds, dtype=np.float64)
    if t.size == 0:
        raise ValueError("no timed laps: run more repeats than warm-up laps")
    q1, median, q3, p95 = np.percentile(t, [25, 50, 75, 95])
    mean = t.mean()
    std = t.std(ddof=1) if t.size > 1 else 0.0
    return {
        "n": int(t.size),
        "median_s": float(median),
        "q1_s": float(q1),
        "q3_s": float(q3),
        "iqr_s": float(q3 - q1),
        "mean_s": float(mean),
        "std_s": float(std),
        "cv": float(std / mean) if mean > 0 else 0.0,
        "min_s": float(t.min()),
        "max_s": float(t.max()),
        "p95_s": float(p95),
    }


class Stopwatch:
    """Times laps; the first `warmup` are kept apart from the steady-state statistics."""

    def __init__(
        self,
        unit: str = "epoch",
        warmup: int = 1,
        sync: Callable[[], object] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ):
        self.unit, self.warmup, self.sync, self.clock = unit, warmup, sync, clock
        self.laps: list[float] = []
        self.samples: list[int] = []
        self._opened: float | None = None  # the clock when the open lap began; None between laps

    def start(self) -> None:
        """Open a lap (after `sync`); `stop()` closes it. For code that cannot wrap the lap in a `with`
        block, such as a framework's callback with its own begin and end hooks."""
        if self._opened is not None:
            raise RuntimeError(f"Stopwatch('{self.unit}').start(): a lap is open already; stop() it first")
        if self.sync:
            self.sync()
        self._opened = self.clock()

    def stop(self, samples: int = 0) -> float:
        """Close the open lap (after `sync`) and keep it; `samples` is how many examples it processed
        (for throughput). Returns the lap's seconds."""
        if self._opened is None:
            raise RuntimeError(f"Stopwatch('{self.unit}').stop(): no lap is open; call start() first")
        if self.sync:
            self.sync()
        seconds, self._opened = self.clock() - self._opened, None
        self.laps.append(seconds)
        self.samples.append(samples)
        return seconds

    @contextmanager
    def lap(self, samples: int = 0):
        """Time the block as one lap; a block that raises leaves no lap."""
        self.start()
        try:
            yield
        except BaseException:
            self._opened = None
            raise
        self.stop(samples)

    @property
    def last(self) -> float:
        return self.laps[-1]

    def summary(self) -> dict:
        timed, timed_samples = self.laps[self.warmup :], self.samples[self.warmup :]
        out = {"unit": self.unit, **stats(timed), "warmup_s": self.laps[: self.warmup], "laps_s": timed}
        total = sum(timed)
        out["samples_per_s"] = sum(timed_samples) / total if total > 0 and any(timed_samples) else None
        return out


def benchmark(
    fn: Callable[[], object],
    repeats: int,
    warmup: int = 1,
    samples: int = 0,
    sync: Callable[[], object] | None = None,
    unit: str = "batch",
    clock: Callable[[], float] = time.perf_counter,
) -> dict:
    """Call `fn` warmup + repeats times, timing each call; returns `Stopwatch.summary()`."""
    watch = Stopwatch(unit=unit, warmup=warmup, sync=sync, clock=clock)
    for _ in range(warmup + repeats):
        with watch.lap(samples):
            fn()
    return watch.summary()


MIN_REPEATS = 7  # DLPerf's count of runs; fewer give an IQR and a CV that mean little


def calls_per_repeat(estimate_s: float, budget_s: float, repeats: int) -> int:
    """The operator-benchmark count: as many calls per repeat as fit `repeats` repeats in `budget_s`, given one
    call's estimated time (at least one: a slow kernel then takes `repeats` calls, however long)."""
    return max(1, int(budget_s / repeats / max(estimate_s, 1e-9)))


def calibrated(
    call: Callable[[], object],
    *,
    repeats: int = MIN_REPEATS,
    budget_s: float,
    warmup: int = 1,
    sync: Callable[[], object] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> dict:
    """One operation's time per call, as the operator benchmarks take it: `warmup` untimed calls (a library picks
    its kernel, a compiler compiles, caches fill), one more timed alone as the estimate, then `repeats` repeats of
    as many calls as fit `budget_s` (calls_per_repeat), synchronised only at each repeat's two ends, so that a
    small operation's time is not the clock's. The statistics are per call (unit "call"); `first_s` is the first
    warm-up call's time (compilation included), `estimate_s` the estimate's (with no budget, the first call's: one call
    a repeat needs no estimate)."""
    if repeats < 1 or warmup < 1:
        raise ValueError(f"calibrated needs repeats >= 1 and warmup >= 1, not repeats={repeats}, warmup={warmup}")
    first = timed(call, sync=sync, clock=clock)[1]
    for _ in range(warmup - 1):
        call()
    # no budget (a smoke test's profile): one call a repeat whatever the estimate, so none is taken
    estimate = timed(call, sync=sync, clock=clock)[1] if budget_s > 0 else first
    calls = calls_per_repeat(estimate, budget_s, repeats)
    watch = Stopwatch("call", warmup=0, sync=sync, clock=clock)
    for _ in range(repeats):
        with watch.lap():
            out = repeated(call, calls)  # alive through the lap's closing sync
    del out
    per_call = [lap / calls for lap in watch.laps]
    return {
        "unit": "call",
        **stats(per_call),
        "warmup_s": [],
        "laps_s": per_call,
        "calls_per_repeat": calls,
        "first_s": first,
        "estimate_s": estimate,
        "samples_per_s": None,
    }


def steady_state(
    step: Callable[[], object],
    *,
    steps: int,
    repeats: int = MIN_REPEATS,
    warmup: int = 2,
    samples: int = 0,
    sync: Callable[[], object] | None = None,
    loss: Callable[[object], float] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> dict:
    """Compute throughput: `warmup` untimed steps, then `repeats` laps of `steps` calls of `step`.

    `step()` runs one training step on a batch already on the device; `samples` is its global batch.
    `sync` waits for the device; it runs after the warm-up and at each repeat's two ends, never
    between steps, so an asynchronous framework keeps its queue full. The statistics are of the
    time per step (each repeat's time / `steps`); every repeat is kept in `laps_s`.

    `loss(out)` turns a step's return value into its loss as a float (it may read the device). Given, it
    reads the first warm-up step's loss and the last timed step's (both outside every timed lap) into
    `loss_first` and `loss_last`: every step trains on the same batch, so a model that learns fits it
    (see `learned`).
    """
    if repeats < 1 or steps < 1:
        raise ValueError(f"steady_state needs steps >= 1 and repeats >= 1, not steps={steps}, repeats={repeats}")
    if loss is not None and warmup < 1:
        raise ValueError("steady_state reads the first step's loss in the warm-up: give warmup >= 1 with loss=")
    first = None
    for i in range(warmup):
        out = step()
        if i == 0 and loss is not None:
            first = float(loss(out))
    watch = Stopwatch("step", warmup=0, sync=sync, clock=clock)
    for _ in range(repeats):
        with watch.lap(samples):
            out = repeated(step, steps)
    return steady_summary(
        watch.laps,
        steps=steps,
        warmup=warmup,
        samples=samples,
        losses=(first, float(loss(out))) if loss is not None else None,
    )


def steady_summary(laps, *, steps: int, warmup: int, samples: int = 0, losses: tuple | None = None) -> dict:
    """The steady state's record from its repeats' times (`laps`, each `steps` steps), as `steady_state` returns
    it; for a framework whose own loop runs the steps (Keras's `fit`) and times the repeats in its callbacks.
    `losses`: (first, last), the loss on the batch before the first step and after the last."""
    per_step = [lap / steps for lap in laps]
    result = {
        "unit": "step",
        **stats(per_step),
        "warmup_steps": warmup,
        "steps_per_repeat": steps,
        "warmup_s": [],
        "laps_s": per_step,
    }
    result["samples_per_s"] = samples / result["median_s"] if samples and result["median_s"] > 0 else None
    if losses is not None:
        result.update(loss_first=float(losses[0]), loss_last=float(losses[1]))
    return result


# The smoke tests' evidence that a model learns: over the steady state's steps on one fixed batch, the loss
# falls by at least this fraction. With its weights held still, dropout alone moved a small CNN's loss on
# its batch by 1.2% over 15 steps (tests/test_timing.py). Learning, the tiny profile's steps lowered it by
# 5.7% to 8% in the CNNs that start from PyTorch's default initialisation (PyTorch's and MXNet's, 29 steps,
# their loss near ln 10 for long), by 64% to 89% in the other CNNs and by 32% to 78% in the GRUs and DenseNets.
LEARNING_MARGIN = 0.03


def learned(steady: dict, margin: float = LEARNING_MARGIN) -> tuple[bool, str]:
    """Did the steady state's steps on one batch (`steady_state(..., loss=...)`) fit it: is its last loss at
    least `margin` below its first? (verdict, one line saying why). A model whose gradients are zero, or
    whose optimizer never steps, keeps its loss."""
    first, last = steady.get("loss_first"), steady.get("loss_last")
    if first is None or last is None:
        return False, "no loss recorded: pass loss= to timing.steady_state"
    if not (np.isfinite(first) and np.isfinite(last)):
        return False, f"the loss is not finite ({first} -> {last})"
    n = steady["warmup_steps"] + steady["n"] * steady["steps_per_repeat"]
    fell = (first - last) / first if first > 0 else 0.0
    ok = last <= first * (1 - margin)
    return ok, (
        f"loss {first:.4g} -> {last:.4g} over {n} steps on one batch: {100 * fell:.1f}% lower"
        + ("" if ok else f", not the {100 * margin:.0f}% that learning needs")
    )


def repeated(call: Callable[[], object], n: int) -> object:
    """`call()` `n` times; returns the last result, for the caller to keep alive through its closing sync (JAX's
    sync waits only on live arrays: a dropped result lets a lap time the queueing alone)."""
    out = None
    for _ in range(n):
        out = call()
    return out


def timed(
    fn: Callable[[], object], sync: Callable[[], object] | None = None, clock: Callable[[], float] = time.perf_counter
) -> tuple[object, float]:
    """Call `fn` once; return its result and the seconds it took (with `sync` at both ends)."""
    if sync:
        sync()
    start = clock()
    result = fn()
    if sync:
        sync()
    return result, clock() - start


def lazy_compile_s(first_step_s: float, steady: dict) -> float:
    """The compilation of a framework that compiles inside its first call and offers no way to compile
    without running (torch.compile, XLA through jit_compile, MXNet's hybridize, Keras's compile): the first
    step's time less a steady step's median (`steady`: a `steady_state` or `Stopwatch` summary), never below 0."""
    return max(first_step_s - steady["median_s"], 0.0)


def overhead(laps: int = 2000, clock: Callable[[], float] = time.perf_counter) -> float:
    """The harness's own cost per lap in seconds: the wall time of `laps` empty Stopwatch laps (no
    sync), divided by `laps`; compare it with a repeat's time to see what the harness adds."""
    watch = Stopwatch("lap", warmup=0, clock=clock)
    start = time.perf_counter()
    for _ in range(laps):
        with watch.lap():
            pass
    return (time.perf_counter() - start) / laps


def describe(summary: dict) -> str:
    """One line for the notebook: 'median 12.3 s per epoch (IQR 0.4 s, CV 2%, 3 timed; warm-up 15.1 s), 166 samples/s'."""
    warm = ", ".join(f"{w:.3g} s" for w in summary["warmup_s"])
    line = (
        f"median {summary['median_s']:.4g} s per {summary['unit']} (IQR {summary['iqr_s']:.2g} s, "
        f"CV {100 * summary['cv']:.0f}%, {summary['n']} timed" + (f"; warm-up {warm})" if warm else ")")
    )
    if summary.get("samples_per_s"):
        line += f", {summary['samples_per_s']:.1f} samples/s"
    return line


# --- batch-size sweeps ---------------------------------------------------------------------------

SWEEP_CAP = 65536  # the largest batch a sweep tries, whatever the budget


def batch_sizes(spec) -> tuple[list[int], bool]:
    """A sweep's sizes from the `batch_sizes` parameter, "1,64,max" or [1, 64, "max"]: the explicit sizes,
    and whether to go on doubling the last one ("max") until memory or the time budget stops it."""
    items = [str(v).strip() for v in (spec.split(",") if isinstance(spec, str) else spec or ())]
    items = [v for v in items if v]
    sizes, largest = [], False
    for item in items:
        if item == "max":
            largest = True
        elif item.isdigit() and int(item) > 0:
            sizes.append(int(item))
        else:
            raise ValueError(f"batch_sizes {spec!r}: {item!r} is not a positive integer or 'max'")
    if largest and not sizes:
        sizes = [1]
    return sorted(set(sizes)), largest


def _available_memory() -> int | None:
    """MemAvailable of /proc/meminfo in bytes (Linux); None elsewhere."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def out_of_memory(err: BaseException) -> bool:
    """Whether a framework's exception says it ran out of memory: MemoryError, torch.OutOfMemoryError,
    TensorFlow's ResourceExhaustedError, XLA's RESOURCE_EXHAUSTED, MXNet's and CuPy's 'out of memory'."""
    if isinstance(err, MemoryError):
        return True
    text = f"{type(err).__name__} {err}".lower()
    return any(
        word in text
        for word in ("out of memory", "outofmemory", "resource_exhausted", "resourceexhausted", "failed to allocate")
    )


def memory_bound(b: int, largest_run: int, high: int) -> float:
    """An upper bound on the host memory a process needs for batch b, from the largest batch it has run
    (`largest_run`) and its peak so far (`high`, which that batch fitted in). A step's memory is a fixed part
    plus a part per example, so it grows at most in proportion to the batch: b / largest_run times the peak.
    A bound, not an estimate: the growth of the peak from one size to the next says nothing where the
    process already held more (after training at a larger batch, or where the allocator keeps what was
    freed), and scaling it let a sweep run into the kernel's OOM killer."""
    return high * max(b / largest_run, 1.0) if largest_run else float(high)


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:200] if text else type(err).__name__


def sweep(
    make_step: Callable[[int], Callable[[], object]],
    spec,
    *,
    budget_s: float,
    repeats: int = MIN_REPEATS,
    warmup: int = 2,
    sync: Callable[[], object] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    available: Callable[[], int | None] = _available_memory,
    peak: Callable[[], int | None] | None = None,
    devices: int = 1,
    device_memory: Callable[[], tuple[int, int] | None] | None = None,
) -> dict | None:
    """The steady state at each batch size of `spec` (see `batch_sizes`); None where `spec` is empty.
    On several `devices` (data parallelism) a size is the batch per device, like the tasks' `batch_size`:
    `make_step(b)` steps on `b * devices` examples, and samples/s counts them all.

    `make_step(b)` puts a batch of `b` examples on the device and returns one step on it (a training step,
    or a forward pass); an out-of-memory error from it or from the step ends the sweep there. Each size gets
    `warmup` untimed steps (the first, which may trace or compile for the new shape, is timed apart), then
    `repeats` single timed steps: their median and 95th percentile are the latency per batch. The sizes asked
    for by number always run (what the user asked to see); `budget_s` bounds the search for the largest
    ("max"): a doubled size runs only if the time it would take fits in what is left of the budget, the last
    size's first step again (a compiling framework traces and compiles each new shape, whatever its size)
    plus its timed steps scaled by the batch. Before every size after the first, its memory must fit in what is
    free (see `memory_bound`) on the host and, with `device_memory` (a GPU's (free bytes, the framework's peak
    bytes in use), None where it cannot say), on the device; where the bound from the largest size so far is too
    loose to allow a size asked for, the sweep first probes the doublings in between with one untimed step
    each, and stops at the first that could not fit.
    Returns {"sizes": [one row per size], "stopped": why the sweep ended, "probed": the probes' sizes, ...}.
    """
    sizes, largest = batch_sizes(spec)
    if not sizes:
        print("no batch-size sweep: batch_sizes is empty (the runner's --batch-size sets it)")
        return None
    if peak is None:
        from support.env import peak_host_memory as peak
    rows, probed, stopped, started = [], [], "", clock()
    last = None  # the last size: (batch, its first step's seconds, its other steps' seconds)
    largest_run = 0  # the largest batch run so far, timed or probed

    def too_big(b):
        """Why batch b might not fit in the host's or the device's free memory, or "" where it fits."""
        measured = [("", available(), peak() or 0)]
        device = device_memory() if device_memory else None
        if device:
            measured.append((" on the device", *device))
        for where, free, high in measured:
            extra = memory_bound(b, largest_run, high) - high
            if free is not None and extra > 0.8 * free:
                return (
                    f"memory{where}: batch {b} might need up to {extra / 2**30:.1f} GiB more than the "
                    f"{'process' if not where else 'framework'}'s peak of {high / 2**30:.1f} GiB, more than 80% "
                    f"of the {free / 2**30:.1f} GiB free"
                )
        return ""

    queue = list(sizes)
    while queue:
        b = queue.pop(0)
        if last is not None:
            scale = b / last[0]
            needed, left = last[1] + last[2] * scale, budget_s - (clock() - started)
            if b not in sizes and needed > left:
                stopped = (
                    f"time budget: batch {b} would take about {needed:.0f} s, more than the "
                    f"{max(left, 0):.0f} s left of {budget_s:g} s"
                )
                break
            stopped = too_big(b)
            while stopped and 2 * largest_run < b and not too_big(2 * largest_run):
                probe = 2 * largest_run  # one untimed step, to tighten the bound for b
                try:
                    timed(make_step(probe), sync=sync, clock=clock)
                except Exception as err:  # noqa: BLE001 (only out-of-memory errors are caught; others go on up)
                    if not out_of_memory(err):
                        raise
                    stopped = f"out of memory at batch {probe} (probing for {b}): {_first_line(err)}"
                    break
                probed.append(probe)
                largest_run = probe
                print(f"batch {probe:>5}: probed (one untimed step) on the way to {b}")
                stopped = too_big(b)
            if stopped:
                break
        try:
            step = make_step(b)
            _, first_s = timed(step, sync=sync, clock=clock)
            start = clock()
            steady = steady_state(
                step, steps=1, repeats=repeats, warmup=max(warmup - 1, 0), samples=b * devices, sync=sync, clock=clock
            )
        except Exception as err:  # noqa: BLE001 (only out-of-memory errors are caught; others go on up)
            if not out_of_memory(err):
                raise
            stopped = f"out of memory at batch {b}: {_first_line(err)}"
            break
        finally:
            step = None  # frees the batch before the next, larger one
        rows.append(
            {
                "batch_size": b,
                "samples_per_s": steady["samples_per_s"],
                "median_s": steady["median_s"],
                "p95_s": steady["p95_s"],
                "cv": steady["cv"],
                "n": steady["n"],
                "first_s": first_s,
            }
        )
        print(
            f"batch {b:>5}{' per device' if devices > 1 else ''}: {steady['samples_per_s']:10.1f} samples/s, median {1e3 * steady['median_s']:.4g} ms, "
            f"p95 {1e3 * steady['p95_s']:.4g} ms per batch (first step {first_s:.3g} s)"
        )
        last = (b, first_s, clock() - start)
        largest_run = max(largest_run, b)
        if not queue and largest:
            if 2 * b > SWEEP_CAP:
                stopped = f"reached {SWEEP_CAP}, the sweep's largest batch"
            else:
                queue.append(2 * b)
    stopped = stopped or "every size asked for ran"
    print(f"sweep stopped: {stopped}")
    return {
        "sizes": rows,
        "stopped": stopped,
        "asked": ",".join(map(str, sizes)) + (",max" if largest else ""),
        "budget_s": budget_s,
        **({"probed": probed} if probed else {}),
        **({"devices": devices} if devices > 1 else {}),
    }
