"""support.timing: warm-up kept apart, robust statistics, synchronisation, throughput."""

import pytest

from support import timing


class FakeClock:
    """Each lap lasts the next of `durations`; reads advance only when a lap ends."""

    def __init__(self, durations):
        self.durations, self.now, self.reads = list(durations), 0.0, 0

    def __call__(self):
        self.reads += 1
        if self.reads % 2 == 0:  # the end of a lap
            self.now += self.durations.pop(0)
        return self.now


def test_stopwatch_keeps_warmup_apart_and_reports_median_and_iqr():
    clock = FakeClock([9.0, 1.0, 2.0, 3.0, 4.0, 100.0])
    watch = timing.Stopwatch("epoch", warmup=1, clock=clock)
    for _ in range(6):
        with watch.lap(samples=10):
            pass
    s = watch.summary()
    assert s["unit"] == "epoch" and s["warmup_s"] == [9.0] and s["n"] == 5
    assert s["median_s"] == 3.0 and s["q1_s"] == 2.0 and s["q3_s"] == 4.0 and s["iqr_s"] == 2.0
    assert s["laps_s"] == [1.0, 2.0, 3.0, 4.0, 100.0]
    assert s["samples_per_s"] == pytest.approx(50 / 110)
    assert watch.last == 100.0


def test_sync_runs_before_each_clock_read():
    events = []
    watch = timing.Stopwatch(warmup=0, sync=lambda: events.append("sync"), clock=lambda: events.append("clock") or 0.0)
    with watch.lap():
        events.append("work")
    assert events == ["sync", "clock", "work", "sync", "clock"]


def test_start_and_stop_time_a_lap_as_the_with_block_does():
    events, reads = [], iter([1.0, 4.0])
    watch = timing.Stopwatch(
        warmup=0, sync=lambda: events.append("sync"), clock=lambda: events.append("clock") or next(reads)
    )
    watch.start()
    events.append("work")
    assert watch.stop(samples=8) == 3.0
    assert events == ["sync", "clock", "work", "sync", "clock"]
    assert watch.laps == [3.0] and watch.samples == [8] and watch.last == 3.0


def test_start_twice_or_stop_alone_is_one_clear_error():
    watch = timing.Stopwatch("epoch", clock=FakeClock([1.0]))
    with pytest.raises(RuntimeError, match=r"Stopwatch\('epoch'\)\.stop\(\): no lap is open; call start\(\) first"):
        watch.stop()
    watch.start()
    with pytest.raises(RuntimeError, match=r"a lap is open already; stop\(\) it first"):
        watch.start()
    watch.stop()
    assert watch.laps == [1.0]


def test_a_lap_that_raises_is_not_kept_and_the_next_one_starts():
    watch = timing.Stopwatch(warmup=0, clock=iter([0.0, 10.0, 15.0]).__next__)
    with pytest.raises(KeyboardInterrupt):
        with watch.lap():
            raise KeyboardInterrupt
    assert watch.laps == []
    with watch.lap(samples=3):
        pass
    assert watch.laps == [5.0] and watch.samples == [3]


def test_benchmark_calls_warmup_plus_repeats():
    calls = []
    s = timing.benchmark(lambda: calls.append(1), repeats=4, warmup=2, samples=8, clock=FakeClock([1.0] * 6))
    assert len(calls) == 6 and s["n"] == 4 and len(s["warmup_s"]) == 2 and s["samples_per_s"] == 8.0


def test_stats_spread_and_errors():
    s = timing.stats([2.0, 2.0, 2.0])
    assert s["cv"] == 0.0 and s["std_s"] == 0.0
    assert timing.stats([1.0, 3.0])["cv"] == pytest.approx(2**0.5 / 2)
    with pytest.raises(ValueError, match="no timed laps"):
        timing.Stopwatch(warmup=3).summary()


def test_describe_is_one_readable_line():
    s = timing.benchmark(lambda: None, repeats=3, warmup=1, samples=4, clock=FakeClock([5.0, 2.0, 2.0, 2.0]))
    line = timing.describe(s)
    assert line.startswith("median 2 s per batch") and "warm-up 5 s" in line and "2.0 samples/s" in line


def test_steady_state_syncs_only_at_each_repeats_ends_and_keeps_every_repeat():
    events = []
    clock = FakeClock([0.3, 0.6, 0.3, 0.3, 0.9, 0.3, 0.3])  # each repeat's time, for 3 steps
    s = timing.steady_state(
        lambda: events.append("step"),
        steps=3,
        repeats=7,
        warmup=2,
        samples=8,
        sync=lambda: events.append("sync"),
        clock=clock,
    )
    assert events[:3] == ["step", "step", "sync"]  # warm-up, then the first repeat's start
    assert events[2:8] == ["sync", "step", "step", "step", "sync", "sync"]  # never between steps
    assert events.count("step") == 2 + 7 * 3 and events.count("sync") == 2 * 7
    assert s["unit"] == "step" and s["n"] == 7 and s["steps_per_repeat"] == 3 and s["warmup_steps"] == 2
    assert s["laps_s"] == pytest.approx([0.1, 0.2, 0.1, 0.1, 0.3, 0.1, 0.1])  # per step
    assert s["median_s"] == pytest.approx(0.1) and s["max_s"] == pytest.approx(0.3) and s["min_s"] == pytest.approx(0.1)
    assert s["samples_per_s"] == pytest.approx(80.0)  # the global batch / the median step
    assert s["p95_s"] == pytest.approx(0.27)


def test_steady_state_refuses_zero_steps_or_repeats():
    with pytest.raises(ValueError, match="steps=0, repeats=7"):
        timing.steady_state(lambda: None, steps=0)


def test_steady_state_reads_the_first_and_last_steps_loss_outside_the_timed_laps():
    events, losses = [], iter([3.0, 2.9, 2.8, 2.7, 2.6, 2.5, 2.4, 2.3, 2.2])
    s = timing.steady_state(
        lambda: events.append("step") or next(losses),
        steps=1,
        repeats=7,
        warmup=2,
        sync=lambda: events.append("sync"),
        loss=lambda out: events.append(f"loss {out}") or out,
    )
    assert events[:2] == ["step", "loss 3.0"] and events[-2:] == ["sync", "loss 2.2"]  # after the last lap closed
    assert (s["loss_first"], s["loss_last"]) == (3.0, 2.2)
    with pytest.raises(ValueError, match="warmup >= 1 with loss="):
        timing.steady_state(lambda: 1.0, steps=1, warmup=0, loss=float)


def steady_state_of_a_small_cnn(fault: str = "") -> dict:
    """The tiny profile's steady state (1 warm-up step, then 7 repeats of 2) of a dropout CNN with SGD on one
    fixed batch, as the notebooks run it; `fault`: "zero gradients" or "no optimizer step"."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Dropout(0.25),
        torch.nn.Flatten(),
        torch.nn.Linear(8 * 8 * 8, 10),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(32, 3, 8, 8), torch.randint(0, 10, (32,))

    def step():
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        if fault == "zero gradients":
            for p in model.parameters():
                p.grad.zero_()
        if fault != "no optimizer step":
            optimizer.step()
        return loss

    return timing.steady_state(step, steps=2, repeats=7, warmup=1, loss=torch.Tensor.item)


def test_the_learning_rule_passes_a_model_that_fits_its_batch_and_fails_one_that_cannot_learn():
    ok, why = timing.learned(steady_state_of_a_small_cnn())
    assert ok, why
    for fault in ("zero gradients", "no optimizer step"):
        ok, why = timing.learned(steady_state_of_a_small_cnn(fault))
        assert not ok and why.endswith(f"not the {100 * timing.LEARNING_MARGIN:.0f}% that learning needs"), (fault, why)
    assert timing.learned({"warmup_steps": 1, "n": 7, "steps_per_repeat": 2}) == (
        False,
        "no loss recorded: pass loss= to timing.steady_state",
    )
    assert not timing.learned(
        {"warmup_steps": 1, "n": 7, "steps_per_repeat": 2, "loss_first": 2.3, "loss_last": float("nan")}
    )[0]


def test_timed_returns_the_result_and_its_time_with_sync_at_both_ends():
    events = []
    result, seconds = timing.timed(
        lambda: events.append("work") or 42, sync=lambda: events.append("sync"), clock=FakeClock([2.5])
    )
    assert (result, seconds) == (42, 2.5) and events == ["sync", "work", "sync"]


def test_the_harness_overhead_is_a_small_positive_time():
    assert 0 < timing.overhead(laps=200) < 1e-3  # a lap's bookkeeping, not a step


def test_a_lazy_compilation_is_the_first_step_less_a_steady_one_never_negative():
    assert timing.lazy_compile_s(2.5, {"median_s": 0.5}) == 2.0
    assert timing.lazy_compile_s(0.4, {"median_s": 0.5}) == 0.0  # a first step faster than the median


def test_calibrated_keeps_each_repeats_last_result_alive_for_its_closing_sync():
    """JAX's sync waits on the arrays still alive: a result dropped before the repeat's closing sync would leave its
    work out of the lap (the calls only queued). The sync here sees what the last call returned."""
    import weakref

    class Result:
        pass

    last, seen = [None], []

    def call():
        result = Result()
        last[0] = weakref.ref(result)
        return result

    summary = timing.calibrated(
        call, repeats=7, budget_s=0.0, sync=lambda: seen.append(last[0] is not None and last[0]() is not None)
    )
    assert summary["n"] == 7 and summary["calls_per_repeat"] == 1
    closing = seen[-14:][1::2]  # each lap's sync at its end (the first four: the first call's and the estimate's)
    assert closing == [True] * 7, seen
