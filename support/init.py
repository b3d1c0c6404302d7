"""Each task's initialisation: one set of distributions that every framework's notebook writes in its own
initialiser API, and the check that a freshly built model's weights follow it.

Frameworks' defaults differ (PyTorch and MXNet draw U(+-1/sqrt(fan_in)), TensorFlow and Keras Glorot
uniform, JAX and Chainer LeCun normal; LESSONS.md has the table), and a plain CNN without batch norm learns
visibly slower from PyTorch's, so equal work starts from equal distributions:

- CNN: Glorot (Xavier) uniform weights, U(+-sqrt(6 / (fan_in + fan_out))), for convolutions and dense layers;
  zero biases.
- GRU: the embedding U(+-0.05); the input weights Glorot uniform and the recurrent weights orthogonal, each
  over the three gates' matrices stacked as one (Keras's and PyTorch's storage: (in, 3h) or (3h, in)); zero
  biases; the dense head Glorot uniform with a zero bias. (Keras's defaults.)
- DenseNet-121 and ResNet-50: He (Kaiming) normal convolutions over the fan-in, std sqrt(2 / fan_in) (a
  truncated normal rescaled to that spread, as Keras and Flax draw it, passes too); batch norm's scale 1 and
  shift 0 (its running mean 0 and variance 1, where a framework lists them); DenseNet-121's 14-way head Glorot
  uniform with a zero bias. (torchvision's DenseNet-121 default, and Keras's ResNet-50 He normal, but over
  the fan-in, not torchvision's ResNet fan-out.)

For a convolution the fans count the receptive field: fan_in = in_channels * kh * kw, fan_out =
out_channels * kh * kw. A framework module reads its model's arrays (`stats`) in its own names and layout,
'oi' ((out, in, ...): PyTorch, MXNet, Chainer) or 'io' ((..., in, out): TensorFlow, Keras, Flax), and
`check` compares each array's standard deviation and mean with what the scheme implies, and checks that a stacked
recurrent matrix is orthogonal (a gate's block, stored apart as Chainer does, is checked by its spread alone).
numpy only.
"""

from __future__ import annotations

import math
import re

import numpy as np

LAYOUTS = ("oi", "io")
# A sample standard deviation of n draws deviates from the true one by about 1/sqrt(2n) (relative); the
# check allows 5 of those, and never less than 5%.
TOLERANCE_FLOOR = 0.05
# An orthogonal matrix drawn in float32 and read back: its Gram matrix is the identity to float32's rounding.
ORTHONORMAL_TOLERANCE = 1e-4

SCHEMES = {
    "cnn_cifar10": "Glorot uniform weights (convolutions and dense layers), zero biases",
    "gru_imdb": "embedding U(+-0.05); input weights Glorot uniform and recurrent weights orthogonal over the "
    "stacked gates; dense head Glorot uniform; zero biases",
    "densenet_chestxray": "He normal convolutions (fan-in); batch norm scale 1, shift 0; dense head Glorot "
    "uniform, zero bias",
    "resnet50_features": "He normal convolutions (fan-in); batch norm scale 1, shift 0",
}
# A one-dimensional array of a batch-normalised network is a batch norm's scale (gamma: 1), shift (beta: 0), running
# statistics (mean 0, variance 1) or a bias (0): the array's last name says which, in every framework's names
# (PyTorch's `norm1.weight`, Keras's `gamma` and `moving_variance`, Flax's `scale` and `var`, MXNet's `running_var`).
ONES = re.compile(r"(gamma|scale|weight|var(iance)?)$", re.IGNORECASE)


def fans(shape, layout: str) -> tuple[int, int]:
    """(fan_in, fan_out) of a weight array of `shape` in `layout` ('oi' or 'io')."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r} is not one of {', '.join(LAYOUTS)}")
    shape = tuple(int(n) for n in shape)
    if len(shape) < 2:
        return shape[0] if shape else 1, shape[0] if shape else 1
    if layout == "oi":  # (out, in, kh, kw...)
        field = math.prod(shape[2:])
        return shape[1] * field, shape[0] * field
    field = math.prod(shape[:-2])  # (kh, kw..., in, out)
    return shape[-2] * field, shape[-1] * field


def orthonormality(a: np.ndarray) -> float | None:
    """For a 2-D array, the largest deviation of its smaller Gram matrix from the identity (0 for an orthogonal
    (3h, h) or (h, 3h) matrix, whose h columns or rows are orthonormal); None for other arrays."""
    if a.ndim != 2:
        return None
    gram = a.T @ a if a.shape[0] >= a.shape[1] else a @ a.T
    return float(np.abs(gram - np.eye(len(gram))).max())


def stats(arrays: dict, layout: str) -> dict:
    """{name: {"shape", "fan_in", "fan_out", "std", "mean", "orthonormality"}} for every array of a freshly built
    model (float64 statistics of the values as the framework stores them)."""
    out = {}
    for name, value in arrays.items():
        a = np.asarray(value, dtype=np.float64)
        fan_in, fan_out = fans(a.shape, layout)
        out[str(name)] = {
            "shape": list(a.shape),
            "fan_in": fan_in,
            "fan_out": fan_out,
            "std": float(a.std()),
            "mean": float(a.mean()),
            "orthonormality": orthonormality(a),
        }
    return out


def glorot_std(fan_in: int, fan_out: int) -> float:
    """Glorot (Xavier) uniform, U(+-sqrt(6 / (fan_in + fan_out))): standard deviation sqrt(2 / (fan_in + fan_out))."""
    return math.sqrt(2.0 / (fan_in + fan_out))


def _role(task: str, name: str, entry: dict, settings) -> tuple[str, float]:
    """(role, the standard deviation the task's scheme gives it) for one array's statistics: a bias by its
    name or its one dimension (Keras's GRU keeps its two bias vectors as one (2, 3h) array)."""
    shape = entry["shape"]
    if task in ("densenet_chestxray", "resnet50_features"):
        if len(shape) == 1:
            return ("one", 1.0) if ONES.search(name.rstrip("]'\" ")) else ("bias", 0.0)
        if len(shape) == 4:
            return "convolution", math.sqrt(2.0 / entry["fan_in"])
        return "dense", glorot_std(entry["fan_in"], entry["fan_out"])
    if len(shape) == 1 or "bias" in name.lower():
        return "bias", 0.0
    if task == "cnn_cifar10":
        return ("convolution" if len(shape) == 4 else "dense"), glorot_std(entry["fan_in"], entry["fan_out"])
    if task == "gru_imdb":
        dims, h = set(shape), settings.hidden_dim
        if settings.vocab_size in dims:
            return "embedding", 0.05 / math.sqrt(3.0)
        if dims <= {h, 3 * h}:
            # orthogonal over the stacked (3h, h) matrix: its h columns are orthonormal, so the mean square of
            # its 3h*h entries is h / (3h*h); a gate's (h, h) block alone keeps that spread
            return "recurrent", 1.0 / math.sqrt(3 * h)
        if settings.embedding_dim in dims:
            # Glorot over the stacked (embedding, 3h) matrix; a gate's (h, embedding) block has the same spread
            return "input", glorot_std(settings.embedding_dim, 3 * h)
        return "dense", glorot_std(entry["fan_in"], entry["fan_out"])
    raise ValueError(f"no initialisation scheme for task {task!r}; support/init.py has: {', '.join(SCHEMES)}")


def tolerance(shape) -> float:
    """The relative deviation allowed for the standard deviation of an array of `shape`."""
    return max(TOLERANCE_FLOOR, 5.0 / math.sqrt(2.0 * max(math.prod(shape), 1)))


def check(task: str, found: dict, settings) -> list[str]:
    """One line per array whose initial values do not follow the task's scheme (empty: all do)."""
    problems = []
    for name, entry in found.items():
        role, std = _role(task, name, entry, settings)
        if role == "one":
            if entry["std"] != 0.0 or entry["mean"] != 1.0:
                problems.append(
                    f"{name} {tuple(entry['shape'])}: a batch norm's scale (or running variance) starts "
                    f"at one, not mean {entry['mean']:.3g} std {entry['std']:.3g}"
                )
            continue
        if role == "bias":
            if entry["std"] != 0.0 or entry["mean"] != 0.0:
                problems.append(
                    f"{name} {tuple(entry['shape'])}: a bias starts at zero, not mean {entry['mean']:.3g} "
                    f"std {entry['std']:.3g}"
                )
            continue
        gram = entry.get("orthonormality")
        if (
            role == "recurrent"
            and set(entry["shape"]) == {settings.hidden_dim, 3 * settings.hidden_dim}
            and (gram is None or gram > ORTHONORMAL_TOLERANCE)
        ):
            # the stacked matrix must be orthogonal: U(+-1/sqrt(h)), PyTorch's default, has the same spread
            problems.append(
                f"{name} {tuple(entry['shape'])} (recurrent): not orthogonal (its Gram matrix is "
                f"{gram if gram is None else f'{gram:.2g}'} from the identity)"
            )
            continue
        allowed = tolerance(entry["shape"])
        if abs(entry["std"] / std - 1) > allowed or abs(entry["mean"]) > 5 * std / math.sqrt(math.prod(entry["shape"])):
            problems.append(
                f"{name} {tuple(entry['shape'])} ({role}): std {entry['std']:.4g}, mean {entry['mean']:.2g}; "
                f"the scheme gives std {std:.4g} (within {100 * allowed:.0f}%) and mean 0"
            )
    return problems
