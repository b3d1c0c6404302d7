"""The operator benchmarks: what each operation is, at which sizes it runs, how many FLOPs one call does.

The fifth task (support/tasks.py, `operators`) times single operations in every framework: the op benchmark's
element-wise add, square matmul, a dense layer and five in sequence, and the operations our four models are made
of at their own shapes (the CNN's, ResNet-50's, DenseNet-121's and the GRU's), each on a ladder of sizes from the
dispatch floor (a handful of elements, where a call's time is the framework's own) to the machine's peak. Every
size is timed forward and, where the operation has one, forward plus backward (the gradients of the output's sum
with respect to every input and weight), in float32 and bfloat16, eagerly and compiled where the framework has
both. The notebooks build each operation in their framework (`notebooks/operators/<framework>.ipynb`); this module
is numpy-free and framework-free: the catalogue, the plan of measurements and the FLOP counts.

FLOPs per call are counted analytically, as support/flops.py counts the models (two per multiply-add of a matmul
or convolution), and element-wise operations by the arithmetic their definition does, the convention of XLA's
cost analysis; tests/test_operators.py checks every count against an independent counter (PyTorch's
FlopCounterMode for matmuls, convolutions and the GRU; XLA's cost analysis for the rest). A backward pass counts
twice its forward for the matmul-like operations (the input's and the weights' gradients); the backward of an
element-wise operation is timed but not counted (what it recomputes or keeps from the forward pass is each
framework's choice), so its GFLOP/s is the forward's only.

    for case in operators.plan(settings, modes=("eager", "compiled"), gpu=False):
        case.op, case.dims, case.direction, case.dtype, case.mode, case.flops
"""

from __future__ import annotations

from dataclasses import dataclass, field

# The categories of a step's time: the operator catalogue's and the profilers' breakdowns share them.
CATEGORIES = ("convolution", "matmul", "element-wise", "normalisation", "recurrence", "optimizer", "data", "other")
DIRECTIONS = ("forward", "train")
DTYPES = ("float32", "bfloat16")
PRECISION_OF = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}  # support.precision's names
SGD = {"lr": 0.01, "momentum": 0.9}  # the CNN's optimizer (support.params.CNNParams)


def _cnn_parameters() -> tuple:
    """The VGG-style CNN's parameter shapes (PyTorch's layout): the optimizer step's tensors."""
    shapes = []
    for c_in, c_out in ((3, 50), (50, 50), (50, 100), (100, 100)):
        shapes += [(c_out, c_in, 3, 3), (c_out,)]
    return tuple(shapes + [(512, 6400), (512,), (10, 512), (10,)])


@dataclass(frozen=True)
class Size:
    """One rung of an operation's ladder: its dimensions, and the model whose layer it is ('' for a rung of the
    ladder only)."""

    dims: dict
    model: str = ""

    @property
    def label(self) -> str:
        text = ", ".join(f"{k}={v}" for k, v in self.dims.items() if k != "shapes")
        if "shapes" in self.dims:
            text = f"{len(self.dims['shapes'])} tensors, {n_elements(self.dims['shapes'])} values"
        return text + (f" ({self.model})" if self.model else "")


@dataclass(frozen=True)
class Op:
    name: str
    title: str  # what the plots and tables call it
    category: str  # one of CATEGORIES
    sizes: tuple  # Size rungs, fewest FLOPs (or values) first
    backward: bool = True  # whether it is timed forward plus backward too
    gpu_only: bool = False  # host-to-device copies: a device apart from the host
    what: str = ""  # one line: what a call computes, for the notebooks' readers


def n_elements(shapes) -> int:
    total = 0
    for shape in shapes:
        count = 1
        for d in shape:
            count *= d
        total += count
    return total


def _s(model: str = "", **dims) -> Size:
    return Size(dims, model)


OPS = {
    op.name: op
    for op in (
        Op(
            "add",
            "element-wise add",
            "element-wise",
            tuple(_s(n=2**k) for k in (6, 10, 14, 18, 22)),
            what="a + b, two float vectors of n values",
        ),
        Op(
            "matmul",
            "square matmul",
            "matmul",
            tuple(_s(n=n) for n in (16, 64, 256, 1024, 2048)),
            what="a @ b, two n x n matrices",
        ),
        Op(
            "dense",
            "dense layer",
            "matmul",
            (
                _s(batch=64, n_in=16, n_out=16),
                _s(batch=64, n_in=64, n_out=64),
                _s(batch=64, n_in=256, n_out=256),
                _s(batch=64, n_in=1024, n_out=1024),
                _s("CNN", batch=64, n_in=6400, n_out=512),
                _s(batch=64, n_in=4096, n_out=4096),
            ),
            what="x @ w + b, a batch through one fully connected layer",
        ),
        Op(
            "dense_x5",
            "five dense layers",
            "matmul",
            tuple(_s(batch=64, n_in=n, n_out=n) for n in (16, 64, 256, 1024)),
            what="five dense layers in sequence (no activation), the op benchmark's chain",
        ),
        Op(
            "conv3x3",
            "3x3 convolution",
            "convolution",
            (
                _s(batch=1, c_in=8, c_out=8, size=8),
                _s(batch=8, c_in=16, c_out=16, size=16),
                _s("CNN", batch=64, c_in=50, c_out=50, size=32),
                _s("ResNet-50", batch=32, c_in=64, c_out=64, size=56),
                _s("DenseNet-121", batch=32, c_in=128, c_out=32, size=56),
            ),
            what="a 3x3 'same' convolution with bias, stride 1",
        ),
        Op(
            "conv1x1",
            "1x1 convolution",
            "convolution",
            (
                _s(batch=1, c_in=8, c_out=8, size=8),
                _s(batch=8, c_in=32, c_out=32, size=16),
                _s("ResNet-50", batch=32, c_in=256, c_out=64, size=56),
                _s("DenseNet-121", batch=32, c_in=256, c_out=128, size=56),
            ),
            what="a 1x1 convolution without bias (the bottlenecks'), stride 1",
        ),
        Op(
            "maxpool",
            "2x2 max pooling",
            "element-wise",
            (
                _s(batch=1, channels=8, size=8),
                _s(batch=8, channels=16, size=16),
                _s("CNN", batch=64, channels=50, size=32),
                _s(batch=32, channels=64, size=112),
            ),
            what="2x2 max pooling, stride 2",
        ),
        Op(
            "batchnorm",
            "batch norm (training)",
            "normalisation",
            (
                _s(batch=1, channels=8, size=8),
                _s(batch=8, channels=16, size=16),
                _s("ResNet-50", batch=32, channels=64, size=112),
                _s("ResNet-50", batch=32, channels=256, size=56),
            ),
            what="batch normalisation in training mode: the batch's statistics per channel, scale and shift",
        ),
        Op(
            "gru",
            "GRU layer",
            "recurrence",
            (
                _s(batch=1, steps=10, n_in=16, hidden=16),
                _s(batch=8, steps=50, n_in=64, hidden=64),
                _s("GRU", batch=64, steps=150, n_in=125, hidden=100),
                _s(batch=64, steps=150, n_in=256, hidden=256),
            ),
            what="one GRU layer (cuDNN's form: reset gate after the recurrent matmul) over the whole sequence",
        ),
        Op(
            "embedding",
            "embedding gather",
            "data",
            (
                _s(batch=1, steps=10, vocab=1000, dim=16),
                _s(batch=8, steps=50, vocab=30000, dim=125),
                _s("GRU", batch=64, steps=150, vocab=30000, dim=125),
            ),
            what="rows of a vocab x dim table gathered by batch x steps indices (no arithmetic)",
        ),
        Op(
            "softmax_ce",
            "softmax cross-entropy",
            "element-wise",
            (
                _s(batch=8, classes=10),
                _s("CNN", batch=64, classes=10),
                _s(batch=256, classes=1000),
                _s(batch=1024, classes=10000),
            ),
            what="the mean cross-entropy of the logits' softmax against integer labels",
        ),
        Op(
            "sgd",
            "SGD step (momentum)",
            "optimizer",
            (
                _s(shapes=((16, 16), (16,))),
                _s(shapes=((256, 256), (256,))),
                _s("CNN", shapes=_cnn_parameters()),
            ),
            backward=False,
            what=f"one SGD step with momentum (lr {SGD['lr']}, momentum {SGD['momentum']}) over given gradients",
        ),
        Op(
            "copy",
            "host-to-device copy",
            "data",
            tuple(_s(n=2**k) for k in (10, 16, 20, 24)),
            backward=False,
            gpu_only=True,
            what="n float values copied from host memory to the device",
        ),
    )
}
# Operations whose FLOPs count the arithmetic of a matmul or convolution: their backward counts twice the forward.
MATMUL_LIKE = ("matmul", "dense", "dense_x5", "conv3x3", "conv1x1", "gru")
# The tiny profile's short plan (OperatorParams.every_variant False): every operation in the first mode in float32,
# and the other modes and precisions on these only, so that every mechanism runs once in a smoke test.
VARIANT_OPS = ("matmul",)


def forward_flops(op: str, dims: dict) -> int:
    """FLOPs of one forward call of `op` at `dims` (see the module's docstring for the conventions)."""
    d = dims
    if op == "add":
        return d["n"]
    if op == "matmul":
        return 2 * d["n"] ** 3
    if op == "dense":
        return 2 * d["batch"] * d["n_in"] * d["n_out"]
    if op == "dense_x5":
        return 5 * 2 * d["batch"] * d["n_in"] * d["n_out"]
    if op in ("conv3x3", "conv1x1"):
        k = 3 if op == "conv3x3" else 1
        return 2 * d["batch"] * d["size"] ** 2 * d["c_in"] * d["c_out"] * k * k
    if op == "maxpool":  # each output is the max of 4 values: 3 comparisons
        return 3 * d["batch"] * d["channels"] * (d["size"] // 2) ** 2
    if op == "batchnorm":  # mean 1, variance 3, normalise-scale-shift 4 per value; rsqrt(var + eps) per channel
        return 8 * d["batch"] * d["channels"] * d["size"] ** 2 + 2 * d["channels"]
    if op == "gru":  # the input's and the state's matmuls at every step (support.flops.gru's count)
        h = d["hidden"]
        return 2 * d["batch"] * d["steps"] * (d["n_in"] * 3 * h + h * 3 * h)
    if op == "softmax_ce":  # max, subtract, exp, sum per logit; the label's log-probability and the mean per row
        return 4 * d["batch"] * d["classes"] + d["batch"]
    if op == "sgd":  # buf = momentum * buf + grad; param -= lr * buf
        return 4 * n_elements(d["shapes"])
    if op in ("embedding", "copy"):
        return 0
    raise ValueError(f"no FLOP count for operation {op!r}; the catalogue has {', '.join(OPS)}")


def flops(op: str, dims: dict, direction: str) -> int | None:
    """FLOPs of one call: forward, or forward plus backward ("train") for the matmul-like operations (the state's
    gradient at the first GRU step, the zero initial state, is not computed); None where a call is timed but not
    counted (an element-wise operation's backward), 0 for one that does no arithmetic (a gather, a copy)."""
    forward = forward_flops(op, dims)
    if direction == "forward":
        return forward
    if direction != "train":
        raise ValueError(f"direction {direction!r}: choose from {', '.join(DIRECTIONS)}")
    if op == "gru":
        h = dims["hidden"]
        first_state = 2 * dims["batch"] * h * 3 * h  # the first step's state matmul has no input gradient
        return 3 * forward - first_state
    return 3 * forward if op in MATMUL_LIKE else None


@dataclass(frozen=True)
class Case:
    """One measurement of the plan: an operation at one size, direction, dtype and mode."""

    op: str
    size: int  # the rung's index in the operation's ladder
    dims: dict = field(hash=False)
    model: str
    direction: str
    dtype: str
    mode: str

    @property
    def flops(self) -> int | None:
        return flops(self.op, self.dims, self.direction)

    @property
    def label(self) -> str:
        return f"{self.op}[{Size(self.dims, self.model).label}] {self.direction} {self.dtype} {self.mode}"


def plan(settings, modes: tuple, gpu: bool = False, dtypes: tuple = DTYPES) -> list[Case]:
    """Every measurement of a notebook at its profile: each operation's ladder (the first `settings.sizes` rungs;
    0: all), forward and train, in each of `dtypes` and `modes` (the framework's, its first the one every
    operation runs in); with `settings.every_variant` False, the other modes and dtypes on VARIANT_OPS only.
    Host-to-device copies only with a GPU, in the first mode only; float16 is a GPU's (on a CPU no framework here
    trains in it)."""
    if not modes:
        raise ValueError("plan needs the framework's modes, e.g. ('eager', 'compiled')")
    dtypes = tuple(dtypes) + (("float16",) if gpu and "float16" not in dtypes else ())
    cases = []
    for op in OPS.values():
        if op.gpu_only and not gpu:
            continue
        sizes = op.sizes[: settings.sizes] if settings.sizes else op.sizes
        for index, size in enumerate(sizes):
            for direction in DIRECTIONS if op.backward else ("forward",):
                for dtype in dtypes:
                    for mode in modes[:1] if op.name == "copy" else modes:  # no framework compiles a copy
                        main = dtype == "float32" and mode == modes[0]
                        if main or settings.every_variant or op.name in VARIANT_OPS:
                            cases.append(Case(op.name, index, size.dims, size.model, direction, dtype, mode))
    return cases


def size_class(flop: float | None) -> str | None:
    """The size class of a call by its FLOPs, as the op benchmark's plots group them: below 10^5 FLOPs the dispatch
    floor ('tiny'), then 'small' to 10^7, 'medium' to 10^9 and 'large' from there."""
    if not flop:
        return None
    for bound, name in ((1e5, "tiny"), (1e7, "small"), (1e9, "medium")):
        if flop < bound:
            return name
    return "large"


SIZE_CLASSES = ("tiny", "small", "medium", "large")


class Unavailable(Exception):
    """Raised by a notebook's `make(case)` for a combination its framework cannot run (its words): recorded
    `unavailable` with the reason, never timed."""


def over_ceiling(case: Case, seconds: float, ceiling_s: float) -> str:
    """Why the rungs above `case` were not timed: its call took `seconds`, over the profile's ceiling."""
    return (
        f"a call at rung {case.size} ({Size(case.dims, case.model).label}) took {seconds:.2f} s, over the profile's "
        f"call_ceiling_s={ceiling_s:g}: the larger rungs would take minutes each"
    )


def is_floor(case: Case, modes: tuple) -> bool:
    """Whether `case` is the dispatch floor: the smallest float32 add forward in the framework's first mode."""
    return (case.op, case.size, case.direction, case.dtype, case.mode) == ("add", 0, "forward", "float32", modes[0])


def timed_fields(summary: dict, flop: int | None) -> dict:
    """A measurement's fields from support.timing.calibrated's summary and its FLOPs per call."""
    return {
        "median_s": summary["median_s"],
        "q1_s": summary["q1_s"],
        "q3_s": summary["q3_s"],
        "cv": summary["cv"],
        "n": summary["n"],
        "calls_per_repeat": summary["calls_per_repeat"],
        "first_s": summary["first_s"],
        "gflops": flop / summary["median_s"] / 1e9 if flop else None,
    }


def _cell(entry: dict) -> str:
    if entry["status"] != "ok":
        return "-"
    if entry["gflops"] is not None:
        return f"{entry['gflops']:.3g}"
    return f"{entry['median_s'] * 1e6:.3g}us"


def describe(results: list[dict]) -> str:
    """The measurements as lines for the notebook: per operation, direction, dtype and mode, its GFLOP/s up the
    ladder (a time per call in µs where the call has no FLOP count; '-' where it did not run), then the reasons
    of what did not run, once each."""
    lines, reasons, seen = [], {}, {}
    for entry in results:
        key = (entry["op"], entry["direction"], entry["dtype"], entry["mode"])
        seen.setdefault(key, []).append(_cell(entry))
        if entry["status"] != "ok":
            reasons.setdefault(entry.get("reason", ""), []).append(f"{entry['op']} {entry['dtype']} {entry['mode']}")
    width = max((len(OPS[op].title) for op, *_ in seen), default=10)
    lines.append(f"{'operation':<{width}}  {'direction':<8} {'dtype':<8} {'mode':<9} GFLOP/s up the size ladder")
    for (op, direction, dtype, mode), cells in seen.items():
        lines.append(f"{OPS[op].title:<{width}}  {direction:<8} {dtype:<8} {mode:<9} " + "  ".join(cells))
    for reason, where in reasons.items():
        lines.append(f"not run ({len(where)}: {', '.join(sorted(set(where)))[:120]}): {reason}")
    return "\n".join(lines)
