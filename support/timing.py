"""Benchmark timing: warm-up, repeats, synchronisation, robust statistics.

Three measurements, as DLPerf and NVIDIA's reference scripts take them:
- `Stopwatch`: the end-to-end time of repeated blocks (epochs with their input pipeline, batches);
- `steady_state`: the compute throughput, steps on data already in memory, after warm-up steps, in
  at least 7 repeats of a fixed number of steps, synchronised only at each repeat's two ends;
- `timed`: one call's time (a compilation, the first step).

A `Stopwatch` times repeated blocks (epochs, batches). The first `warmup` laps are recorded
separately (they hold compilation, autotuning, caches filling) and the rest give the median,
the interquartile range, the coefficient of variation and the throughput. Frameworks that run
asynchronously pass their synchronisation (`torch.cuda.synchronize`, `mx.nd.waitall`, a
`block_until_ready`) as `sync`, called before the clock is read at both ends of every lap.

    epochs = timing.Stopwatch(warmup=1, sync=torch.cuda.synchronize)
    for epoch in range(P.epochs):
        with epochs.lap(samples=n_train):
            train_one_epoch()
    epochs.summary()   # {'unit': 'epoch', 'median_s': ..., 'iqr_s': ..., 'samples_per_s': ...}
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Callable

import numpy as np


def stats(seconds) -> dict:
    """Median, quartiles, IQR, mean, standard deviation and coefficient of variation of timings."""
    t = np.asarray(seconds, dtype=np.float64)
    if t.size == 0:
        raise ValueError("no timed laps: run more repeats than warm-up laps")
    q1, median, q3, p95 = np.percentile(t, [25, 50, 75, 95])
    mean = t.mean()
    std = t.std(ddof=1) if t.size > 1 else 0.0
    return {"n": int(t.size), "median_s": float(median), "q1_s": float(q1), "q3_s": float(q3),
            "iqr_s": float(q3 - q1), "mean_s": float(mean), "std_s": float(std),
            "cv": float(std / mean) if mean > 0 else 0.0, "min_s": float(t.min()), "max_s": float(t.max()),
            "p95_s": float(p95)}


class Stopwatch:
    """Times laps; the first `warmup` are kept apart from the steady-state statistics."""

    def __init__(self, unit: str = "epoch", warmup: int = 1, sync: Callable[[], object] | None = None,
                 clock: Callable[[], float] = time.perf_counter):
        self.unit, self.warmup, self.sync, self.clock = unit, warmup, sync, clock
        self.laps: list[float] = []
        self.samples: list[int] = []
        self._opened: float | None = None      # the clock when the open lap began; None between laps

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
        timed, timed_samples = self.laps[self.warmup:], self.samples[self.warmup:]
        out = {"unit": self.unit, **stats(timed), "warmup_s": self.laps[:self.warmup], "laps_s": timed}
        total = sum(timed)
        out["samples_per_s"] = sum(timed_samples) / total if total > 0 and any(timed_samples) else None
        return out


def benchmark(fn: Callable[[], object], repeats: int, warmup: int = 1, samples: int = 0,
              sync: Callable[[], object] | None = None, unit: str = "batch",
              clock: Callable[[], float] = time.perf_counter) -> dict:
    """Call `fn` warmup + repeats times, timing each call; returns `Stopwatch.summary()`."""
    watch = Stopwatch(unit=unit, warmup=warmup, sync=sync, clock=clock)
    for _ in range(warmup + repeats):
        with watch.lap(samples):
            fn()
    return watch.summary()


MIN_REPEATS = 7   # DLPerf's count of runs; fewer give an IQR and a CV that mean little


def steady_state(step: Callable[[], object], *, steps: int, repeats: int = MIN_REPEATS, warmup: int = 2,
                 samples: int = 0, sync: Callable[[], object] | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> dict:
    """Compute throughput: `warmup` untimed steps, then `repeats` laps of `steps` calls of `step`.

    `step()` runs one training step on a batch already on the device; `samples` is its global batch.
    `sync` waits for the device; it runs after the warm-up and at each repeat's two ends, never
    between steps, so an asynchronous framework keeps its queue full. The statistics are of the
    time per step (each repeat's time / `steps`); every repeat is kept in `laps_s`.
    """
    if repeats < 1 or steps < 1:
        raise ValueError(f"steady_state needs steps >= 1 and repeats >= 1, not steps={steps}, repeats={repeats}")
    for _ in range(warmup):
        step()
    watch = Stopwatch("step", warmup=0, sync=sync, clock=clock)
    for _ in range(repeats):
        with watch.lap(samples):
            for _ in range(steps):
                step()
    per_step = [lap / steps for lap in watch.laps]
    out = {"unit": "step", **stats(per_step), "warmup_steps": warmup, "steps_per_repeat": steps,
           "warmup_s": [], "laps_s": per_step}
    out["samples_per_s"] = samples / out["median_s"] if samples and out["median_s"] > 0 else None
    return out


def timed(fn: Callable[[], object], sync: Callable[[], object] | None = None,
          clock: Callable[[], float] = time.perf_counter) -> tuple[object, float]:
    """Call `fn` once; return its result and the seconds it took (with `sync` at both ends)."""
    if sync:
        sync()
    start = clock()
    result = fn()
    if sync:
        sync()
    return result, clock() - start


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
    line = (f"median {summary['median_s']:.4g} s per {summary['unit']} (IQR {summary['iqr_s']:.2g} s, "
            f"CV {100 * summary['cv']:.0f}%, {summary['n']} timed" + (f"; warm-up {warm})" if warm else ")"))
    if summary.get("samples_per_s"):
        line += f", {summary['samples_per_s']:.1f} samples/s"
    return line
