"""Where a training step goes (support/profiles.py): the Chrome trace reader (complete and begin/end events, self
times), the category map on operation names as each profiler writes them and on a recorded trace of each profiler
(tests/data/traces/, recorded from the tiny CNN's or GRU's profile step), the breakdown's arithmetic, Bench.profile
with a fake profiler, the runner keeping the trace beside the executed notebook, and the report's table and bars.
Every training notebook's profile step runs in the smoke tier (tests/test_notebook_runs.py)."""

import gzip
import json
from pathlib import Path

import pytest

from scripts import results
from scripts.report import profiles as report
from support import params, profiles, records
from tests.test_measure import bench as measure_bench

TRACES = Path(__file__).parent / "data" / "traces"


def x(name, ts, dur, tid=1, cat="cpu_op", **args):
    return {"ph": "X", "name": name, "cat": cat, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


# --- the trace reader ----------------------------------------------------------------------------------------------


def test_self_time_is_an_events_time_less_what_it_directly_encloses_on_its_thread():
    found = profiles.events(
        [
            x("aten::linear", 0, 100),
            x("aten::t", 0, 10),
            x("aten::addmm", 10, 80),
            x("aten::copy_", 20, 30),  # inside addmm: counted once, in addmm's children
            x("aten::relu", 50, 40, tid=2),  # another thread: its own
        ]
    )
    spent = {e["name"]: s for e, s in profiles.self_times(found)}
    assert spent == {"aten::linear": 10, "aten::t": 10, "aten::addmm": 50, "aten::copy_": 30, "aten::relu": 40}
    assert sum(spent.values()) == 100 + 40  # the threads' wall time: nothing counted twice


def test_begin_and_end_pairs_read_as_complete_events_innermost_first():
    listed = [
        {"ph": "B", "name": "Convolution", "pid": 0, "tid": 7, "ts": 5, "cat": "operator"},
        {"ph": "B", "name": "Activation", "pid": 0, "tid": 7, "ts": 6, "cat": "operator"},
        {"ph": "E", "name": "Activation", "pid": 0, "tid": 7, "ts": 8, "cat": "operator"},
        {"ph": "E", "name": "Convolution", "pid": 0, "tid": 7, "ts": 15, "cat": "operator"},
        {"ph": "C", "name": "memory", "pid": 0, "ts": 9},  # a counter: not an event with a duration
        {"ph": "E", "name": "unmatched", "pid": 0, "tid": 9, "ts": 9},
    ]
    found = profiles.events({"traceEvents": listed})
    assert [(e["name"], e["ts"], e["dur"]) for e in found] == [("Activation", 6, 2), ("Convolution", 5, 10)]


@pytest.mark.parametrize("reader", ["tensorflow", "jax", "pytorch"])
def test_on_a_gpu_the_devices_kernels_count_and_the_hosts_launches_do_not(reader):
    gpu = {"ph": "X", "pid": 2, "tid": 7, "ts": 0, "dur": 30, "args": {}}
    host = {"ph": "X", "pid": 1, "tid": 1, "ts": 0, "dur": 50, "args": {"is_eager": 0, "hlo_op": "x"}}
    trace = {
        "traceEvents": [
            {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "/device:GPU:0 (NVIDIA H200)"}},
            {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/host:CPU"}},
            {**gpu, "name": "volta_sgemm_128x64_nn", "cat": "kernel"},
            {**gpu, "name": "Memcpy HtoD", "cat": "gpu_memcpy", "ts": 40, "dur": 5},
            {**host, "name": "MatMul", "cat": "cpu_op"},
        ]
    }
    assert profiles.operations(trace, reader) == [("volta_sgemm_128x64_nn", 30e-6), ("Memcpy HtoD", 5e-6)]
    assert [profiles.category(n) for n, _ in profiles.operations(trace, reader)] == ["matmul", "data"]


def test_a_trace_is_saved_gzipped_and_loads_from_either_form(tmp_path):
    trace = {"traceEvents": [x("aten::mm", 0, 5)]}
    path = profiles.save(trace, tmp_path / "a" / "trace.json.gz")
    assert gzip.open(path, "rt").read().startswith("{")
    assert profiles.load(path) == trace
    (tmp_path / "bare.json").write_text(json.dumps(trace["traceEvents"]))
    assert profiles.load(tmp_path / "bare.json") == trace


# --- the category map ----------------------------------------------------------------------------------------------

NAMES = {  # operation names as each profiler writes them
    "convolution": [
        "aten::mkldnn_convolution",
        "aten::convolution_backward",
        "Conv2DBackpropFilter",
        "_backward_Convolution",
        "Convolution2DFunction",
        "conv2d_grad",
        "Conv2D",
        "convolution.4",
    ],
    "matmul": [
        "aten::addmm",
        "aten::mm",
        "MatMul",
        "FullyConnected",
        "LinearFunction",
        "matmul_v2",
        "dot.3",
        "MatMulExt",
    ],
    "element-wise": [
        "aten::relu",
        "aten::add_",
        "BiasAddGrad",
        "aten::max_pool2d_with_indices",
        "fusion.12",
        "_backward_Activation",
        "SoftmaxCrossEntropy",
        "aten::dropout",
        "ReLU",
        "Mul",
    ],
    "normalisation": ["aten::native_batch_norm", "FusedBatchNormV3", "BatchNorm", "batch_norm_grad"],
    "recurrence": ["aten::gru", "CudnnRNN", "NStepGRU", "while.2", "gru_grad"],
    "optimizer": [
        "aten::_fused_sgd_",
        "Optimizer.step#SGD.step",
        "ResourceApplyKerasMomentum",
        "multi_sgd_mom_update",
        "MomentumSGD.update",
        "adam",
        "aten::_foreach_add_",
        "ResourceApplyAdam",
    ],
    "data": ["Memcpy HtoD", "IteratorGetNext", "cudaMemcpyAsync"],
}


@pytest.mark.parametrize("expected, name", [(c, n) for c, names in NAMES.items() for n in names])
def test_each_profilers_operation_names_fall_in_their_category(expected, name):
    assert profiles.category(name) == expected


def test_an_unknown_name_is_other_and_every_category_is_one_of_the_operator_benchmarks():
    assert profiles.category("SomethingNew") == "other" and not profiles.opaque("SomethingNew")
    assert [profiles.category(n) for n in ("_XlaRun", "ImperativeBulk", "CompiledFunction")] == ["other"] * 3
    assert all(profiles.opaque(n) for n in ("_XlaRun", "ImperativeBulk", "CompiledFunction"))
    assert {c for c, _ in profiles.RULES} <= set(profiles.PARTS)
    assert profiles.PARTS[-1] == profiles.OVERHEAD


# --- the breakdown -------------------------------------------------------------------------------------------------


def test_the_overhead_is_the_wall_time_no_operation_accounts_for_and_the_shares_sum_to_one():
    ops = [
        ("aten::mkldnn_convolution", 0.6),
        ("aten::addmm", 0.2),
        ("aten::relu", 0.1),
        ("aten::mkldnn_convolution", 0.2),
    ]
    result = profiles.breakdown(ops, steps=2, wall_s=1.5)
    assert result["step_s"] == 0.75 and result["operations_s"] == pytest.approx(0.55)
    assert result["seconds"]["convolution"] == pytest.approx(0.4)
    assert result["seconds"]["overhead"] == pytest.approx(0.2)
    assert sum(result["shares"].values()) == pytest.approx(1)
    assert result["top"][0] == {
        "name": "aten::mkldnn_convolution",
        "category": "convolution",
        "seconds": pytest.approx(0.4),
        "share": pytest.approx(0.8 / 1.5),
    }
    assert profiles.largest(result) == "convolution"
    assert "convolution" in profiles.describe(result)


def test_operations_that_overlap_on_several_threads_leave_no_overhead_and_shares_of_their_sum():
    result = profiles.breakdown([("MatMul", 0.8), ("Conv2D", 0.8)], steps=1, wall_s=1.0)
    assert result["seconds"]["overhead"] == 0
    assert result["shares"]["matmul"] == pytest.approx(0.5)


@pytest.mark.parametrize(
    "ops, steps, wall, words",
    [
        ([("a", 1.0)], 0, 1.0, "steps >= 1"),
        ([("a", 1.0)], 1, 0.0, "positive wall time"),
        ([("aten::mm", -1.0)], 1, 1.0, "negative time"),
        ([], 1, 1.0, "no operation"),
    ],
)
def test_a_breakdown_of_nothing_or_of_nonsense_is_refused_in_one_line(ops, steps, wall, words):
    with pytest.raises(ValueError, match=words):
        profiles.breakdown(ops, steps=steps, wall_s=wall)


# --- Bench.profile, the runner's files, the report ------------------------------------------------------------------


class FakeTracer:
    """A profiler that writes a Chrome trace of the steps it saw: one convolution and one matmul a step."""

    reader, version = "pytorch", "0.0"

    def start(self, folder):
        self.folder, self.calls = folder, []

    def record(self):
        n = len(self.calls)
        self.calls.append(n)
        return n

    def stop(self):
        events = [x("aten::mkldnn_convolution", 100 * i, 30) for i in self.calls]
        events += [x("aten::addmm", 100 * i + 40, 10) for i in self.calls]
        path = self.folder / "trace.json"
        path.write_text(json.dumps({"traceEvents": events}))
        return path


def test_bench_profile_runs_the_profile_steps_under_the_profiler_and_records_the_breakdown_and_its_trace(tmp_path):
    settings = params.load("cnn_cifar10", "tiny")
    bench = measure_bench("cnn_cifar10", settings, tmp_path)
    tracer = FakeTracer()
    result = bench.profile(lambda: tracer.record(), tracer)
    assert tracer.calls == list(range(settings.profile_steps))
    assert result["steps"] == settings.profile_steps
    assert result["operations_s"] == pytest.approx(40e-6)
    assert result["profiler"] == "torch.profiler 0.0"
    trace = records.trace_path(bench.record_path)
    assert trace == tmp_path / "record.trace.json.gz" and result["trace"] == trace.name
    assert profiles.load(trace)["traceEvents"]
    assert bench.fields["breakdown"] is result


def test_the_runner_keeps_a_runs_trace_beside_its_executed_notebook_and_names_it_in_the_record(tmp_path):
    layout = results.Layout(tmp_path / "m")
    run = results.Identity(task="cnn_cifar10", framework="pytorch")
    staged = layout.staged("cpu", run)
    assert staged["trace"] == records.trace_path(staged["record"])
    assert layout.paths("cpu", run)["trace"].name == "pytorch.trace.json.gz"
    assert layout.paths("cpu", run)["trace"].parent == layout.paths("cpu", run)["executed"].parent


# The recorded traces (tests/data/traces/<reader>.trace.json.gz: the tiny CNN's profile step) and what each must
# show. JAX's optimizer step is XLA fusions (`multiply_add_fusion`), element-wise by name.
REAL = {
    "pytorch": ("convolution", "matmul", "optimizer"),
    "tensorflow": ("convolution", "matmul", "optimizer"),
    "jax": ("convolution", "matmul"),
    "mxnet": ("convolution", "matmul", "optimizer"),
    "chainer": ("convolution", "matmul", "optimizer"),
    "paddle": ("convolution", "matmul", "optimizer"),
    "mindspore": ("convolution", "matmul", "optimizer"),
}


@pytest.mark.parametrize("reader", sorted(REAL))
def test_a_recorded_trace_of_each_profiler_breaks_down_into_the_models_operations(reader):
    trace = profiles.load(TRACES / f"{reader}.trace.json.gz")
    ops = profiles.operations(trace, reader)
    result = profiles.breakdown(ops, steps=1, wall_s=sum(s for _, s in ops) * 1.1)
    for part in REAL[reader]:
        assert result["seconds"][part] > 0, f"{reader}: no {part} in {[o['name'] for o in result['top']]}"
    other = [name for name, _ in ops if profiles.category(name) == "other"]
    assert result["shares"]["other"] < 0.05, f"{reader}: uncategorised {sorted(set(other))[:12]}"


def row(framework, shares, **extra):
    seconds = {p: s * 0.1 for p, s in shares.items()}
    profile = {"steps": 3, "step_s": 0.1, "operations_s": 0.08, "seconds": seconds, "shares": shares, "top": []}
    return {"framework": framework, "line": framework, "status": "ok", "breakdown": profile, **extra}


def test_the_report_shows_each_lines_shares_with_its_largest_part_and_draws_the_stacked_bars(tmp_path):
    rows = [
        row(
            "pytorch",
            {"convolution": 0.7, "matmul": 0.1, "overhead": 0.2},
            trace="executed/cpu/c/pytorch.trace.json.gz",
        ),
        row("mxnet", {"convolution": 0.3, "element-wise": 0.1, "overhead": 0.6}),
        {"framework": "jax", "line": "jax", "status": "ok", "breakdown": None},
    ]
    table = report.table(report.profiled(rows))
    assert table.header[:4] == ["framework", "profiled step ms", "operations ms", "largest"]
    assert "normalisation" not in table.header  # no line has any
    assert [r[3] for r in table.rows] == ["convolution", "overhead"]
    assert table.rows[0][-1] == "[trace](executed/cpu/c/pytorch.trace.json.gz)"
    lines = report.section(rows, "cnn_cifar10", "cpu")
    assert lines[0] == "### Where the step goes" and "plots/cpu/cnn_cifar10-profile.png" in lines[-2]
    assert report.plot(rows, tmp_path / "p.png", "t") and (tmp_path / "p.png").stat().st_size > 0
    assert report.section(rows[2:], "cnn_cifar10", "cpu") == [] and not report.plot(rows[2:], tmp_path / "q.png", "t")
