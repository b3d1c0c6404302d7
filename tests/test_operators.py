"""The operator benchmarks (support/operators.py): the FLOP counts against independent counters (PyTorch's
FlopCounterMode for the matmul-like operations, XLA's cost analysis for the element-wise ones), the plan at each
profile, Bench.operators on a fake framework (what it records for a refused dtype, an unavailable combination and
a failure), and the report's tables and plots. Its notebooks run in the smoke tier (tests/test_notebook_runs.py)."""

import json
import math

import pytest

from support import operators as ops
from support import params, records
from support.measure import Bench

LADDERS = [pytest.param(op, i, id=f"{op}-{i}") for op in ops.OPS for i in range(len(ops.OPS[op].sizes))]


def torch_call(torch, op: str, d: dict):
    """The operation in PyTorch on the meta device (shapes only): its inputs, and the call."""
    F, t = torch.nn.functional, (lambda *shape: torch.randn(*shape, requires_grad=True))
    if op == "matmul":
        a, b = t(d["n"], d["n"]), t(d["n"], d["n"])
        return [a, b], lambda: a @ b
    if op in ("dense", "dense_x5"):
        layers = [(t(d["n_out"], d["n_in"]), t(d["n_out"])) for _ in range(5 if op == "dense_x5" else 1)]
        x = t(d["batch"], d["n_in"])

        def chain():
            y = x
            for w, b in layers:
                y = F.linear(y, w, b)
            return y

        return [x, *(p for layer in layers for p in layer)], chain
    if op in ("conv3x3", "conv1x1"):
        k = 3 if op == "conv3x3" else 1
        x, w = t(d["batch"], d["c_in"], d["size"], d["size"]), t(d["c_out"], d["c_in"], k, k)
        return [x, w], lambda: F.conv2d(x, w, padding=k // 2)
    if op == "gru":
        gru = torch.nn.GRU(d["n_in"], d["hidden"], batch_first=True)
        x = t(d["batch"], d["steps"], d["n_in"])
        return [x, *gru.parameters()], lambda: gru(x)[0]
    raise ValueError(op)


@pytest.mark.parametrize("op, rung", [p for p in LADDERS if p.values[0] in ops.MATMUL_LIKE])
def test_matmul_like_flops_match_pytorchs_counter_forward_and_backward(op, rung):
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    dims = ops.OPS[op].sizes[rung].dims
    with torch.device("meta"):
        _, call = torch_call(torch, op, dims)
        with FlopCounterMode(display=False) as forward:
            call()
        with FlopCounterMode(display=False) as train:
            call().sum().backward()
    assert ops.flops(op, dims, "forward") == forward.get_total_flops()
    assert ops.flops(op, dims, "train") == pytest.approx(train.get_total_flops(), rel=0.02)


def xla_flops(op: str, d: dict) -> float:
    """XLA's cost analysis of the operation written in jax.numpy (NHWC), compiled for the CPU."""
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    z = lambda *shape: jnp.ones(shape, jnp.float32)  # noqa: E731
    if op == "add":
        fn, args = (lambda a, b: a + b), (z(d["n"]), z(d["n"]))
    elif op == "maxpool":
        x = z(d["batch"], d["size"], d["size"], d["channels"])
        fn = lambda x: jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")  # noqa: E731
        args = (x,)
    elif op == "batchnorm":

        def fn(x, gamma, beta):
            mean = x.mean((0, 1, 2))
            var = ((x - mean) ** 2).mean((0, 1, 2))
            return (x - mean) * jax.lax.rsqrt(var + 1e-5) * gamma + beta

        args = (z(d["batch"], d["size"], d["size"], d["channels"]), z(d["channels"]), z(d["channels"]))
    elif op == "softmax_ce":
        import optax

        def fn(logits, labels):
            return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

        args = (z(d["batch"], d["classes"]), jnp.zeros(d["batch"], jnp.int32))
    elif op == "sgd":

        def fn(weights, grads, bufs):
            bufs = [ops.SGD["momentum"] * b + g for b, g in zip(bufs, grads)]
            return [w - ops.SGD["lr"] * b for w, b in zip(weights, bufs)], bufs

        tensors = [z(*s) for s in d["shapes"]]
        args = (tensors, tensors, tensors)
    else:
        raise ValueError(op)
    cost = jax.jit(fn).lower(*args).compile().cost_analysis()
    return (cost[0] if isinstance(cost, list) else cost)["flops"]


@pytest.mark.parametrize("op", ["add", "maxpool", "batchnorm", "softmax_ce", "sgd"])
def test_element_wise_flops_match_xlas_cost_analysis(op):
    for size in ops.OPS[op].sizes[:2]:
        assert ops.flops(op, size.dims, "forward") == pytest.approx(xla_flops(op, size.dims), rel=0.02), size.dims
        assert ops.flops(op, size.dims, "train") is None  # timed, not counted


def test_every_operation_is_counted_and_its_ladder_climbs():
    for op in ops.OPS.values():
        assert op.category in ops.CATEGORIES and op.what
        counts = [ops.forward_flops(op.name, s.dims) or ops.n_elements([tuple(s.dims.values())[:1]]) for s in op.sizes]
        assert counts == sorted(counts), f"{op.name}'s ladder is not in order of size"
    assert ops.forward_flops("embedding", ops.OPS["embedding"].sizes[0].dims) == 0
    with pytest.raises(ValueError, match="no FLOP count for operation 'nope'"):
        ops.forward_flops("nope", {})
    assert [ops.size_class(f) for f in (None, 0, 10, 1e5, 1e7, 1e9)] == [None, None, "tiny", "small", "medium", "large"]


def test_the_tiny_plan_runs_every_operation_once_and_every_mode_and_dtype_on_the_matmul():
    tiny = params.load("operators", "tiny")
    cases = ops.plan(tiny, ("eager", "compiled"))
    cpu_ops = {name for name, op in ops.OPS.items() if not op.gpu_only}
    first = [c for c in cases if (c.dtype, c.mode) == ("float32", "eager")]
    assert {c.op for c in first} == cpu_ops and all(c.size == 0 for c in cases)
    assert {(c.op, c.direction) for c in first} == {
        (op, d) for op in cpu_ops for d in (ops.DIRECTIONS if ops.OPS[op].backward else ("forward",))
    }
    others = [c for c in cases if (c.dtype, c.mode) != ("float32", "eager")]
    assert {c.op for c in others} == set(ops.VARIANT_OPS) and len(others) == 2 * 3
    full = ops.plan(params.load("operators", "cpu"), ("eager", "compiled"), gpu=True)
    assert {c.dtype for c in full} == {"float32", "bfloat16", "float16"} and any(c.op == "copy" for c in full)
    assert {c.mode for c in full if c.op == "copy"} == {"eager"}  # no framework compiles a copy
    assert len({(c.op, c.size, c.direction, c.dtype, c.mode) for c in full}) == len(full)
    with pytest.raises(ValueError, match="modes"):
        ops.plan(tiny, ())


class Fake:
    """A framework of sleeps: each call takes a time that grows with its FLOPs."""

    def __init__(self, broken=None):
        self.broken = broken or {}

    def make(self, case):
        import time

        if (case.op, case.dtype) in self.broken:
            raise self.broken[(case.op, case.dtype)]
        seconds = 2e-6 + (case.flops or 0) * 1e-13
        return lambda: time.sleep(seconds) if seconds > 1e-4 else None


def operator_bench(tmp_path, refuse=None):
    settings = params.load("operators", "tiny")
    return Bench(
        "operators",
        "pytorch",
        settings,
        precision="fp32",
        compilation="off",
        record_path=tmp_path / "record.json",
        environment={"machine": "m"},
        gpu=False,
        refuse=refuse,
    )


def test_bench_records_every_case_a_refused_dtype_and_an_unavailable_one_then_writes_a_valid_record(tmp_path):
    bench = operator_bench(tmp_path, refuse=lambda p: "no bfloat16 here" if p == "bf16" else None)
    fake = Fake(
        {
            ("matmul", "bfloat16"): RuntimeError("never reached: refused first"),
            ("gru", "float32"): ops.Unavailable("this framework has no GRU layer"),
        }
    )
    results = bench.operators(fake.make, modes=("eager", "compiled"))
    assert len(results) == len(ops.plan(bench.settings, ("eager", "compiled")))
    by = {(r["op"], r["direction"], r["dtype"], r["mode"]): r for r in results}
    assert by["matmul", "forward", "bfloat16", "eager"] == {
        **by["matmul", "forward", "bfloat16", "eager"],
        "status": "unsupported",
        "reason": "no bfloat16 here",
    }
    assert by["gru", "train", "float32", "eager"]["status"] == "unavailable"
    assert by["gru", "train", "float32", "eager"]["reason"] == "this framework has no GRU layer"
    ok = by["matmul", "forward", "float32", "compiled"]
    assert ok["status"] == "ok" and ok["n"] == 7 and ok["gflops"] == pytest.approx(ok["flops"] / ok["median_s"] / 1e9)
    bench.write(metrics={}, data="synthetic", n_parameters=None)
    record = records.validate(json.loads((tmp_path / "record.json").read_text()))
    floor = by["add", "forward", "float32", "eager"]
    assert record["timing"]["unit"] == "call" and record["timing"]["median_s"] == floor["median_s"]
    assert "flops" not in record and record["n_parameters"] is None and len(record["operators"]) == len(results)


def test_a_float32_failure_is_raised_and_another_dtypes_is_recorded_in_its_words(tmp_path):
    with pytest.raises(ZeroDivisionError):
        operator_bench(tmp_path).operators(Fake({("add", "float32"): ZeroDivisionError("boom")}).make, modes=("eager",))
    bench = operator_bench(tmp_path, refuse=lambda p: None)
    bench._reasons["bf16"] = None  # a CPU that computes bfloat16, whatever this one does
    results = bench.operators(
        Fake({("matmul", "bfloat16"): TypeError("no bf16 kernel for\nmatmul")}).make, modes=("eager",)
    )
    (failed,) = [r for r in results if r["dtype"] == "bfloat16" and r["direction"] == "forward"]
    assert failed["status"] == "unavailable" and failed["reason"] == "TypeError: no bf16 kernel for matmul"


def test_a_call_over_the_ceiling_ends_its_ladder_and_the_larger_rungs_say_why(tmp_path):
    import dataclasses
    import time

    bench = operator_bench(tmp_path)
    bench.settings = dataclasses.replace(bench.settings, sizes=3, call_ceiling_s=0.004)
    slow = lambda case: (lambda: time.sleep(0.005)) if case.op == "gru" and case.size >= 1 else (lambda: None)
    results = bench.operators(slow, modes=("eager",))
    gru = {(r["size"], r["direction"]): r for r in results if r["op"] == "gru"}
    assert [gru[0, d]["status"] for d in ops.DIRECTIONS] == ["ok", "ok"]
    assert [gru[1, d]["status"] for d in ops.DIRECTIONS] == ["ok", "ok"]  # timed: its own time ends the ladder
    for direction in ops.DIRECTIONS:
        skipped = gru[2, direction]
        assert skipped["status"] == "skipped" and "median_s" not in skipped
        assert "rung 1" in skipped["reason"] and "call_ceiling_s=0.004" in skipped["reason"], skipped["reason"]
    assert all(r["status"] == "ok" for r in results if r["op"] != "gru")  # other ladders run on
    bench.write(metrics={}, data="synthetic", n_parameters=None)
    record = records.validate(json.loads((tmp_path / "record.json").read_text()))
    assert sum(e["status"] == "skipped" for e in record["operators"]) == 2
    assert "not run (2: gru float32 eager)" in ops.describe(results)


def test_an_operators_record_without_its_measurements_is_refused(tmp_path):
    bench = operator_bench(tmp_path)
    bench.operators(Fake().make, modes=("eager",))
    bench.fields.pop("operators")
    with pytest.raises(records.RecordError, match="operators"):
        bench.write(metrics={}, data="synthetic", n_parameters=None)


def fabricated(framework: str, slower: float, modes=("eager",)) -> dict:
    """A report row of a framework whose every call takes `slower` times the reference's."""
    cases = ops.plan(params.load("operators", "cpu"), modes)
    found = []
    for c in cases:
        seconds = slower * (1e-6 + (c.flops or 1e4) * 2e-12)
        found.append(
            {
                "op": c.op,
                "size": c.size,
                "dims": c.dims,
                "model": c.model,
                "direction": c.direction,
                "dtype": c.dtype,
                "mode": c.mode,
                "flops": c.flops,
                "status": "ok",
                "median_s": seconds,
                "gflops": c.flops / seconds / 1e9 if c.flops else None,
            }
        )
    return {"framework": framework, "line": "", "status": "ok", "operators": found, "run": None, "device": "cpu"}


def test_the_report_places_each_line_against_the_fastest_by_size_class_and_plots_it(tmp_path):
    from scripts.report import operators as report
    from scripts.report.text import markdown_table

    rows = [fabricated("pytorch", 1.0, ("eager", "compiled")), fabricated("jax", 2.0)]
    table = markdown_table(report.relative_table(report.measurements(rows)))
    assert "| pytorch | eager | 1.00x | 1.00x | 1.00x | 1.00x |" in table
    assert "| jax | eager | 2.00x | 2.00x | 2.00x | 2.00x |" in table
    floor = markdown_table(report.floor_table(report.measurements(rows)))
    assert floor.splitlines()[0].startswith("| framework | mode | element-wise add | square matmul |")
    section = "\n".join(report.section(rows, "cpu", 500.0))
    assert "calibrated float32 peak: 500 GFLOP/s" in section and "plots/cpu/operators-forward.png" in section
    written = report.plot(rows, tmp_path, "Operator benchmarks", 500.0)
    assert [p.name for p in written] == ["operators-forward.png", "operators-train.png", "operators-floor.png"]
    assert all(p.stat().st_size > 10_000 for p in written)
    assert report.section([], "cpu") == [
        "## Operator benchmarks (profile `cpu`)",
        "",
        "No operator benchmark ran through.",
        "",
    ]
    assert math.isclose(fabricated("x", 1.0)["operators"][0]["median_s"], 1e-6 + 64 * 2e-12)
