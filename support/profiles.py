"""Where a training step's time goes: one category map for every framework's profiler.

Each training notebook's `### Profile` step runs a few steady-state steps under its framework's own profiler
(support/measure/<framework>.py: `torch.profiler`, TensorFlow's profiler, `jax.profiler`, MXNet's profiler, Chainer's
function hooks, `paddle.profiler`, MindSpore's `Profiler`), each of which can write a Chrome trace (the JSON that
Perfetto and chrome://tracing open). This module reads any of them the same way, framework-free:

- `events(trace)`: the trace's timed events, complete ("X") or begin/end pairs ("B"/"E");
- `operations(trace, framework)`: the events that are the framework's operations (its `Reader`: on a GPU the device's
  kernels, on a CPU the host's operator events), each with its self time (its time less that of the operations it
  encloses, on its own thread, so nothing is counted twice);
- `category(name)`: the operation's category (support.operators.CATEGORIES) by its name, the first rule of `RULES`
  that matches;
- `breakdown(ops, steps=, wall_s=)`: per step, each category's seconds and share, and the framework's overhead: the
  profiled steps' wall time that no operation accounts for (Python, dispatch, scheduling, waiting, and the
  profiler's own cost).

    ops = profiles.operations(json.load(open("trace.json")), "pytorch")    # [("aten::addmm", 0.012), ...]
    profiles.breakdown(ops, steps=3, wall_s=1.2)
    # {"steps": 3, "step_s": 0.4, "seconds": {"convolution": 0.203, ..., "overhead": 0.05}, "shares": {...}, ...}
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass
from pathlib import Path

from support.operators import CATEGORIES

OVERHEAD = "overhead"  # the profiled steps' time that no operation accounts for
PARTS = (*CATEGORIES, OVERHEAD)

# (category, pattern on the lower-cased operation name): the first that matches decides. Order matters: an
# optimizer's fused update before the element-wise words in its name; a convolution's or a recurrent layer's
# backward before anything else it mentions; `addmm` and `bias_add` apart.
RULES = (
    (
        "optimizer",
        r"sgd|adam|momentum|optimi[sz]er|apply_?gradient|resourceapply|_foreach_|multi_tensor|mom_update|"
        r"\bupdate_?rule|update_core|\.update\b",
    ),
    ("recurrence", r"gru|lstm|rnn|recurrent|\bwhile\b|\bscan\b|n_step|tensorlist"),
    ("convolution", r"conv|im2col|col2im|winograd|depthwise"),
    ("normalisation", r"batch_?norm|fusedbatchnorm|\bbn\b|_bn_|layer_?norm|instance_?norm|group_?norm"),
    (
        "matmul",
        r"matmul|gemm|\bmm\b|addmm|\bbmm\b|\bdot\b|dot_general|\bdot\.|fullyconnected|fully_connected|\bdense\b|"
        r"linear|inner_?product|einsum|\bmatmul",
    ),
    ("data", r"memcpy|memset|\bcopy_?to|h2d|d2h|iterator|getnext|dataloader|prefetch|device_put|host_to"),
    (
        "element-wise",
        r"add|mul|sub|div|relu|sigmoid|tanh|exp|log|softmax|pool|max|min|mean|sum|reduce|where|select|dropout|"
        r"fusion|elementwise|eltwise|neg|sqrt|pow|clamp|clip|threshold|fill|zero|ones|cat|concat|reshape|transpose|"
        r"view|slice|gather|scatter|embed|index|take|cross_?entropy|nll|loss|bias|activation|cast|convert|copy|"
        r"broadcast|squeeze|flatten|permute|clone|contiguous|empty|abs|square|sign|equal|less|greater|argmax|"
        r"arg_?max|pick|one_?hot|pad|split|stack|tile|expand|identity|rsqrt|mask|bernoulli|random|uniform|iota|"
        r"\bcompare|logical|not_?equal|\bne\b|\beq\b|\bto\b|_to_copy|as_strided|resize|unsqueeze|stride|"
        r"readvariable|assign|floor|bitwise|bitcast|\bt\b|narrow|chunk|unbind|detach|conj|\bitem\b|scalar|"
        r"is_acceptable|reverse|rev\b|dynamic_?slice|dynamic_?update|sort|cumsum|unique|prod|pack|stitch|reciprocal|"
        r"swap|setvalue|separate|getitem|permut|\bfull\b",
    ),
)
_COMPILED = tuple((found, re.compile(pattern)) for found, pattern in RULES)
# Events that run many operations as one, whose parts the profiler does not show: a cluster XLA compiled inside a
# TensorFlow graph (`_XlaRun`), MXNet's bulk of imperative backward operators (`ImperativeBulk`), a graph
# torch.compile generated (`CompiledFunction`). They count as "other", and `opaque` names them.
OPAQUE = re.compile(r"_xlarun|xlalaunch|imperativebulk|compiledfunction|compiled ?fx ?graph")


def category(name: str) -> str:
    """The category of an operation by its name, as a framework's profiler writes it ('aten::addmm' -> 'matmul',
    'Conv2DBackpropFilter' -> 'convolution', 'fusion.12' -> 'element-wise'); 'other' where no rule matches."""
    # autograd's node names as words: "autograd::engine::evaluate_function: MmBackward0" -> "mm backward"
    lowered = re.sub(r"backward\d+", " backward", name.lower().replace("autograd::engine::evaluate_function: ", ""))
    for found, pattern in _COMPILED:
        if pattern.search(lowered):
            return found
    return "other"


# --- reading a Chrome trace ---------------------------------------------------------------------------------------


def load(path) -> dict:
    """A Chrome trace from a .json or .json.gz file, as a dict with its `traceEvents` (a bare list is wrapped)."""
    path = Path(path)
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        trace = json.load(f)
    return {"traceEvents": trace} if isinstance(trace, list) else trace


def save(trace: dict, path) -> Path:
    """Write `trace` gzipped to `path` (the notebook's trace file, for Perfetto or chrome://tracing)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump(trace, f, separators=(",", ":"))
    return path


def events(trace) -> list[dict]:
    """The trace's timed events as {name, cat, process, pid, tid, ts, dur, args} (microseconds; `process`: the
    name its metadata gives the event's process, else ""): its complete events ("X")
    and its begin/end pairs ("B" then "E" on one thread, matched innermost first)."""
    listed = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    processes = {  # the trace's process names ("/device:GPU:0", "/host:CPU"), from its metadata events
        e.get("pid"): str((e.get("args") or {}).get("name", ""))
        for e in listed
        if e.get("ph") == "M" and e.get("name") == "process_name"
    }
    found, open_ = [], {}
    for event in listed:
        phase = event.get("ph")
        if phase == "X" and "dur" in event:
            found.append(_event(event, float(event["ts"]), float(event["dur"]), processes))
        elif phase == "B":
            open_.setdefault((event.get("pid"), event.get("tid")), []).append(event)
        elif phase == "E":
            stack = open_.get((event.get("pid"), event.get("tid")))
            if stack:
                begun = stack.pop()
                found.append(_event(begun, float(begun["ts"]), float(event["ts"]) - float(begun["ts"]), processes))
    return found


def _event(event: dict, ts: float, dur: float, processes: dict) -> dict:
    return {
        "name": str(event.get("name", "")),
        "cat": str(event.get("cat", "")),
        "process": processes.get(event.get("pid"), ""),
        "pid": event.get("pid"),
        "tid": event.get("tid"),
        "ts": ts,
        "dur": max(dur, 0.0),
        "args": event.get("args") or {},
    }


def self_times(found: list[dict]) -> list[tuple[dict, float]]:
    """Each event with its self time in microseconds: its duration less the durations of the events it directly
    encloses on its thread (pid, tid)."""
    by_thread: dict = {}
    for event in found:
        by_thread.setdefault((event["pid"], event["tid"]), []).append(event)
    result = []
    for thread in by_thread.values():
        thread.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list[list] = []  # [event, its children's time]
        for event in thread:
            while stack and event["ts"] >= stack[-1][0]["ts"] + stack[-1][0]["dur"]:
                done, children = stack.pop()
                result.append((done, max(done["dur"] - children, 0.0)))
            if stack:
                stack[-1][1] += event["dur"]
            stack.append([event, 0.0])
        result += [(done, max(done["dur"] - children, 0.0)) for done, children in reversed(stack)]
    return result


@dataclass(frozen=True)
class Reader:
    """Which of a profiler's trace events are the framework's operations. `host(event)`: an operator event on the
    CPU; `device(event)`: a kernel or copy on an accelerator (where the trace has any, they alone count: the host
    only launches them); `name(event)`: the name to categorise (default: the event's)."""

    profiler: str
    host: object
    device: object = None
    name: object = None


def _cat(*cats):
    return lambda e: e["cat"] in cats


def _on_gpu(event):
    """An event of a GPU's process in TensorFlow's and JAX's traces ("/device:GPU:0": its kernels and copies, one
    line a stream), not one of the host's ("/host:CPU")."""
    return event["process"].startswith("/device:GPU")


def _xla_name(event):
    """XLA's op events (TensorFlow with XLA, JAX): the HLO op's own name, plus its long name where the trace gives
    it, which shows what a fusion computes ('fusion.3' of a convolution: kind=kOutput ... convolution)."""
    long = event["args"].get("long_name") or event["args"].get("hlo_op") or ""
    return f"{event['name']} {long}".strip()


READERS = {
    # torch.profiler (PyTorch, Keras on torch): aten operators on the host, CUDA kernels and copies on a GPU
    "pytorch": Reader("torch.profiler", host=_cat("cpu_op"), device=_cat("kernel", "gpu_memcpy", "gpu_memset")),
    # TensorFlow's profiler (TensorFlow 2, 1.x sessions, Keras on TF): the TF ops' events on the host's executor
    # threads (XLA's compiled ops beside them), kernels on a GPU
    "tensorflow": Reader(
        "tf.profiler",
        host=lambda e: "is_eager" in e["args"] or "hlo_op" in e["args"],  # a TF op's event; XLA's
        device=_on_gpu,
        name=_xla_name,
    ),
    "jax": Reader(
        "jax.profiler",
        host=lambda e: e["cat"] in ("XLA Op", "xla_op") or "hlo_op" in e["args"],
        device=_on_gpu,
        name=_xla_name,
    ),
    "mxnet": Reader("mx.profiler", host=_cat("operator")),
    "chainer": Reader("chainer function hooks", host=_cat("function", "optimizer")),
    "paddle": Reader(
        "paddle.profiler",  # to_static's backward (Dy2StGradNode) waits for its pd_op operators on other threads
        host=lambda e: e["cat"] == "Operator" and "Dy2St" not in e["name"],
        device=_cat("Kernel", "Memcpy", "Memset"),
        name=lambda e: re.sub(r"\[[\d.]+ [mun]?s\]$", "", e["name"]).strip(),  # 'conv2d dygraph[49.473 ms]'
    ),
    "mindspore": Reader(  # the CPU OP timeline; 'Gradients/Default/Grad_Conv2D/Conv2DBackpropFilter-op2': its type
        "mindspore.profiler",
        host=lambda e: e["args"].get("type") == "HostCpuOps",
        name=lambda e: re.sub(r"-op\d+$", "", e["name"].rpartition("/")[2]),
    ),
}
READERS["tensorflow1"] = READERS["tensorflow"]  # a Keras run reads its backend's (support/measure/keras.py)


def operations(trace, reader: str) -> list[tuple[str, float]]:
    """The trace's operations as (name, self seconds), read with READERS[reader]: the device's kernels where the
    trace has any, else the host's operators."""
    how = READERS[reader]
    found = events(trace)
    chosen = [e for e in found if how.device and how.device(e)] or [e for e in found if how.host(e)]
    named = how.name or (lambda e: e["name"])
    return [(named(event), spent / 1e6) for event, spent in self_times(chosen)]


def opaque(name: str) -> bool:
    """Whether an operation is one of OPAQUE's: many operations run as one event."""
    return bool(OPAQUE.search(name.lower()))


def breakdown(ops, *, steps: int, wall_s: float, top: int = 8) -> dict:
    """Per step, the seconds and the share of each category and of the overhead: `ops` are (operation name, its
    self seconds over the `steps` profiled steps), `wall_s` those steps' wall time. The overhead is the wall time no
    operation accounts for (never below 0: where the operations overlap, on several threads at once, they can sum
    to more than the wall time, and then the shares are of that sum). `top`: the slowest operations by name."""
    if steps < 1 or wall_s <= 0:
        raise ValueError(f"breakdown needs steps >= 1 and a positive wall time, not steps={steps}, wall_s={wall_s}")
    seconds = dict.fromkeys(PARTS, 0.0)
    by_name: dict[str, float] = {}
    for name, spent in ops:
        if spent < 0:
            raise ValueError(f"operation {name!r} has a negative time {spent}")
        seconds[category(name)] += spent
        by_name[name] = by_name.get(name, 0.0) + spent
    if not by_name:
        raise ValueError("the profile holds no operation: the profiler traced nothing of the step")
    operations_s = sum(seconds.values())
    seconds[OVERHEAD] = max(wall_s - operations_s, 0.0)
    total = max(wall_s, operations_s)
    return {
        "steps": steps,
        "step_s": wall_s / steps,
        "operations_s": operations_s / steps,
        "seconds": {part: value / steps for part, value in seconds.items()},
        "shares": {part: value / total for part, value in seconds.items()},
        "top": [
            {"name": name[:120], "category": category(name), "seconds": spent / steps, "share": spent / total}
            for name, spent in sorted(by_name.items(), key=lambda item: -item[1])[:top]
        ],
    }


def largest(result: dict) -> str:
    """The category (overhead included) with the largest share."""
    return max(result["shares"], key=result["shares"].get)


def describe(result: dict) -> str:
    """Lines for the notebook: the step, each category's share, then the slowest operations."""
    lines = [
        f"{result['steps']} profiled steps: {result['step_s'] * 1e3:.1f} ms a step, of which the operations "
        f"{result['operations_s'] * 1e3:.1f} ms"
    ]
    lines += [
        f"  {part:<14} {100 * share:5.1f}%  {result['seconds'][part] * 1e3:9.2f} ms"
        for part, share in result["shares"].items()
        if share > 0
    ]
    lines.append("slowest operations (self time a step):")
    lines += [
        f"  {100 * op['share']:5.1f}%  {op['seconds'] * 1e3:9.2f} ms  {op['name'][:70]} ({op['category']})"
        for op in result["top"]
    ]
    return "\n".join(lines)
