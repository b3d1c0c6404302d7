"""Parity: one set of weights per model, a fixed input batch, and a plain numpy forward pass.

Every framework's notebook of the CNN, GRU and ResNet-50 tasks can load the same weights into
its own model, run the same batch through it in evaluation mode and compare the outputs with
`reference()`, numpy in float64. Agreement to `TOLERANCE` shows that the notebooks compute the
same function, so their timings compare like with like.

    weights, x = parity.load("cnn_cifar10")          # dict name -> float32 array, the input batch
    expected = parity.reference("cnn_cifar10", weights, x)
    error = parity.relative_error(outputs, expected)  # < 1e-4 in float32
    extra = parity.compare("cnn_cifar10", outputs, weights, x)   # the same, printed, as record fields
    saved = parity.agree("save_load", restored_outputs, outputs)  # two of a model's outputs, same tolerance
    checked = parity.data_parallel(after_2, after_1, before, devices=2, batch_norm="per-device")  # DenseNet

The weights are random (seeded, so every kernel writes the same file) and scaled so activations
stay O(1) through the network; batch-norm running statistics are not the trivial 0 and 1, so a
framework that mixes them up, or uses another epsilon, shows. They are written once to
`<cache>/parity/<task>-v1.npz` (float32 arrays under the names below and the input batch as
`x`; no pickles, so numpy 1.23 and 2.x read each other's) and read back from there.

Layout: PyTorch's, since the PyTorch notebooks are the reference notebooks. The names are the
keys of the PyTorch notebook's `model.state_dict()` (without batch norm's `num_batches_tracked`),
so there `model.load_state_dict(...)` is the whole conversion. Other frameworks convert:

- convolution kernels `*.weight` of rank 4: OIHW (out channels, in channels, kernel height,
  kernel width), applied as cross-correlation like every framework; HWIO frameworks
  (TensorFlow, Keras, Flax) transpose (2, 3, 1, 0);
- dense layers' weights (`classifier.*`, `fc.*`): (out, in), y = x @ W.T + b; (in, out)
  frameworks (TensorFlow, Keras, Flax) transpose;
- batch norm: `weight` (gamma), `bias` (beta), `running_mean`, `running_var`, epsilon `BN_EPS`;
- inputs: images NCHW float32 (channels-last frameworks: `support.data.channel_last(x)`);
  token sequences (N, T) int32.

cnn_cifar10 (the seed's VGG-style CNN; `nn.Sequential` indices name the layers), x (4, 3, 32, 32):
    features.0.weight (50, 3, 3, 3)    features.0.bias (50,)      conv 3x3 'same', ReLU
    features.2.weight (50, 50, 3, 3)   features.2.bias (50,)      conv 3x3 'same', ReLU, max-pool 2
    features.6.weight (100, 50, 3, 3)  features.6.bias (100,)     conv 3x3 'same', ReLU
    features.8.weight (100, 100, 3, 3) features.8.bias (100,)     conv 3x3 'same', ReLU, max-pool 2
    classifier.1.weight (512, 6400)    classifier.1.bias (512,)   dense, ReLU
    classifier.4.weight (10, 512)      classifier.4.bias (10,)    dense -> logits
  The 6,400 inputs of classifier.1 are the pooled (100, 8, 8) maps flattened in (C, H, W) order;
  a channels-last framework flattens (H, W, C) and must permute those weight columns.
  Dropout is off in evaluation mode.

gru_imdb (embedding, one GRU layer, dense on the last time step), x (4, 150) int32 word indices,
padded with 0 at the front as the loader does (index 0 is an ordinary embedding row, no masking):
    embedding.weight (30000, 125)
    gru.weight_ih_l0 (300, 125)   gru.bias_ih_l0 (300,)   rows: gates r, z, n (reset, update, new),
    gru.weight_hh_l0 (300, 100)   gru.bias_hh_l0 (300,)   100 each
    fc.weight (2, 100)            fc.bias (2,)
  With h the hidden state (zero at the start), e_t the embedded token, W_i*, W_h* the rows of each gate:
    r = sigmoid(W_ir e_t + b_ir + W_hr h + b_hr)      z = sigmoid(W_iz e_t + b_iz + W_hz h + b_hz)
    n = tanh(W_in e_t + b_in + r * (W_hn h + b_hn))   h = (1 - z) * n + z * h
  The reset gate multiplies the recurrent product *after* the matmul, bias included (cuDNN's
  GRU, Keras's reset_after=True); a GRU that applies r to h before the matmul is another function.

resnet50_features (torchvision's ResNet-50, v1.5: the stride of a bottleneck sits in its 3x3
convolution; no convolution has a bias; the fc layer removed), x (2, 3, 64, 64):
    conv1.weight (64, 3, 7, 7) stride 2 pad 3, bn1.*, ReLU, max-pool 3 stride 2 pad 1
    layer{1-4}.{b}.conv1.weight 1x1, bn1.*, ReLU       layer1..4 have 3, 4, 6, 3 bottlenecks
    layer{1-4}.{b}.conv2.weight 3x3 pad 1 (stride 2 in block 0 of layers 2-4), bn2.*, ReLU
    layer{1-4}.{b}.conv3.weight 1x1, bn3.*
    layer{1-4}.0.downsample.0.weight 1x1 (same stride), downsample.1.* (batch norm): the shortcut
    output = ReLU(bn3 + shortcut); then the global average pool gives (N, 2048) features.
  Widths 64, 128, 256, 512 (the 3x3 convolutions), 4x that out of each block.

Stock models that differ beyond the layout (their notebooks must adjust the model, or explain):
keras.applications.ResNet50 and MXNet Gluon's resnet50_v1 are ResNet v1 (stride 2 in the
bottleneck's first 1x1 convolution) with biases on their convolutions; Chainer's ResNet50Layers
max-pools without padding and its batch norm's epsilon is 2e-5; flax.nnx.GRUCell has no b_hn.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from support import tasks
from support.data import _write_once
from support.env import cache_dir
from support.params import CNNParams, GRUParams
from support.precision import tolerance as precision_tolerance

VERSION = 1  # bump when the weights or inputs change, so cached files are rewritten
TASKS = tuple(name for name, task in tasks.TASKS.items() if task.parity)
TOLERANCE = precision_tolerance("fp32")  # the relative error every framework should reach in float32
BN_EPS = 1e-5  # PyTorch's batch norm epsilon (Keras's ResNet50 uses 1.001e-5)
SEED = 20240601
SEED_OFFSET = {"cnn_cifar10": 0, "gru_imdb": 1, "resnet50_features": 2}  # fixed: the files never change

CNN, GRU = CNNParams("full"), GRUParams("full")  # the model sizes (the same in every profile)
BATCH = {"cnn_cifar10": 4, "gru_imdb": 4, "resnet50_features": 2}
RESNET_STAGES = ((64, 3), (128, 4), (256, 6), (512, 3))  # (bottleneck width, blocks) of layer1..layer4
RESNET_SIZE = 64  # enough for ResNet-50, which pools globally: 64 -> 2x2 maps in layer4


# --- the layout ------------------------------------------------------------------------------


def _bn(name: str, channels: int) -> dict:
    return {f"{name}.{k}": (channels,) for k in ("weight", "bias", "running_mean", "running_var")}


def layout(task: str) -> dict:
    """Every array's name and shape, in the order of the PyTorch model's state_dict."""
    if task == "cnn_cifar10":
        shapes = {}
        for i, (c_in, c_out) in zip((0, 2, 6, 8), ((3, 50), (50, 50), (50, 100), (100, 100))):
            shapes[f"features.{i}.weight"], shapes[f"features.{i}.bias"] = (c_out, c_in, 3, 3), (c_out,)
        return {
            **shapes,
            "classifier.1.weight": (512, 100 * 8 * 8),
            "classifier.1.bias": (512,),
            "classifier.4.weight": (CNN.n_classes, 512),
            "classifier.4.bias": (CNN.n_classes,),
        }
    if task == "gru_imdb":
        e, h = GRU.embedding_dim, GRU.hidden_dim
        return {
            "embedding.weight": (GRU.vocab_size, e),
            "gru.weight_ih_l0": (3 * h, e),
            "gru.weight_hh_l0": (3 * h, h),
            "gru.bias_ih_l0": (3 * h,),
            "gru.bias_hh_l0": (3 * h,),
            "fc.weight": (GRU.n_classes, h),
            "fc.bias": (GRU.n_classes,),
        }
    if task == "resnet50_features":
        shapes = {"conv1.weight": (64, 3, 7, 7), **_bn("bn1", 64)}
        c_in = 64
        for stage, (width, blocks) in enumerate(RESNET_STAGES, start=1):
            for b in range(blocks):
                p = f"layer{stage}.{b}"
                shapes.update(
                    {
                        f"{p}.conv1.weight": (width, c_in, 1, 1),
                        **_bn(f"{p}.bn1", width),
                        f"{p}.conv2.weight": (width, width, 3, 3),
                        **_bn(f"{p}.bn2", width),
                        f"{p}.conv3.weight": (4 * width, width, 1, 1),
                        **_bn(f"{p}.bn3", 4 * width),
                    }
                )
                if b == 0:
                    shapes.update(
                        {f"{p}.downsample.0.weight": (4 * width, c_in, 1, 1), **_bn(f"{p}.downsample.1", 4 * width)}
                    )
                c_in = 4 * width
        return shapes
    raise ValueError(f"no parity weights for {task!r}; choose from: {', '.join(TASKS)}")


def n_parameters(task: str) -> int:
    """Trainable parameters (batch norm's running statistics are state, not parameters)."""
    return sum(int(np.prod(s)) for k, s in layout(task).items() if not k.endswith(("running_mean", "running_var")))


# --- the weights and the input batch ----------------------------------------------------------


def _draw(name: str, shape: tuple, rng) -> np.ndarray:
    """One array, scaled so that activations stay O(1)."""
    module, kind = name.rsplit(".", 1)
    if kind == "running_mean":
        return 0.1 * rng.standard_normal(shape)
    if kind == "running_var":
        return rng.uniform(0.5, 2.0, shape)
    if module.endswith("bn3"):  # a bottleneck's last batch norm: small, so the residual sum grows slowly
        return rng.uniform(0.1, 0.3, shape) if kind == "weight" else 0.05 * rng.standard_normal(shape)
    if module.split(".")[-1].startswith("bn") or module.endswith("downsample.1"):
        return rng.uniform(0.5, 1.5, shape) if kind == "weight" else 0.1 * rng.standard_normal(shape)
    if module == "embedding":
        return rng.standard_normal(shape)
    if len(shape) == 1:  # the biases of convolutions, dense layers and the GRU
        return 0.1 * rng.standard_normal(shape)
    fan_in = int(np.prod(shape[1:]))
    gain = 2.0 if len(shape) == 4 else 1.0  # He for the ReLU convolutions, LeCun for dense and GRU matrices
    return np.sqrt(gain / fan_in) * rng.standard_normal(shape)


def make(task: str) -> tuple[dict, np.ndarray]:
    """Draw the weights and the input batch of `task` (deterministic: a fixed seed per task)."""
    rng = np.random.RandomState(SEED + SEED_OFFSET[task])
    weights = {name: _draw(name, shape, rng).astype(np.float32) for name, shape in layout(task).items()}
    n = BATCH[task]
    if task == "gru_imdb":
        x = rng.randint(3, GRU.vocab_size, size=(n, GRU.max_len))  # word indices from 3, as the loader's
        x[0, -1], x[1, -20] = GRU.vocab_size - 1, 2  # the last embedding row; out of vocabulary
        for i, length in enumerate((GRU.max_len, 100, 30, 5)[:n]):
            x[i, : GRU.max_len - length] = 0  # front padding
            x[i, GRU.max_len - length] = 1  # the start token
        x = x.astype(np.int32)
    else:
        size = 32 if task == "cnn_cifar10" else RESNET_SIZE
        x = rng.standard_normal((n, 3, size, size)).astype(np.float32)  # like standardised images
    return weights, x


def path(task: str) -> Path:
    return cache_dir() / "parity" / f"{task}-v{VERSION}.npz"


def _write(target: Path, task: str) -> None:
    weights, x = make(task)
    with open(target, "wb") as f:  # a file object: np.savez would append .npz to a name
        np.savez(f, x=x, **weights)


def load(task: str) -> tuple[dict, np.ndarray]:
    """The shared weights (dict name -> float32 array, in `layout` order) and input batch of `task`,
    written to the cache on first use (atomically: a crash leaves no half-written file)."""
    with np.load(_write_once(path(task), _write, task=task)) as f:
        weights = {name: f[name] for name in layout(task)}
        x = f["x"]
    return weights, x


# --- the reference forward pass --------------------------------------------------------------


def relu(x):
    return np.maximum(x, 0)


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def conv2d(x, w, b=None, stride=1, padding=0):
    """Convolution (cross-correlation, as in every framework): x (N, C, H, W), w OIHW -> (N, O, H', W').

    im2col without copying by hand: a strided view holds every kh x kw window, and one tensordot
    (a single matrix product) contracts each window with every kernel.
    """
    x = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    windows = sliding_window_view(x, w.shape[2:], axis=(2, 3))[:, :, ::stride, ::stride]  # N, C, H', W', kh, kw
    y = np.tensordot(windows, w, axes=([1, 4, 5], [1, 2, 3])).transpose(0, 3, 1, 2)  # N, O, H', W'
    return y if b is None else y + b[:, None, None]


def max_pool(x, size, stride, padding=0):
    """Max over size x size windows; padding counts as -inf, so it never wins."""
    x = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)), constant_values=-np.inf)
    return sliding_window_view(x, (size, size), axis=(2, 3))[:, :, ::stride, ::stride].max(axis=(4, 5))


def batch_norm(x, w, name):
    """Evaluation mode: normalise each channel with the running statistics, then scale and shift."""
    mean, var = w[f"{name}.running_mean"], w[f"{name}.running_var"]
    scale = w[f"{name}.weight"] / np.sqrt(var + BN_EPS)
    return (x - mean[:, None, None]) * scale[:, None, None] + w[f"{name}.bias"][:, None, None]


def cnn(w, x):
    for i in (0, 2, 6, 8):
        x = relu(conv2d(x, w[f"features.{i}.weight"], w[f"features.{i}.bias"], padding=1))
        if i in (2, 8):
            x = max_pool(x, 2, 2)  # dropout follows: the identity in evaluation mode
    x = x.reshape(len(x), -1)  # flatten in (C, H, W) order
    x = relu(x @ w["classifier.1.weight"].T + w["classifier.1.bias"])
    return x @ w["classifier.4.weight"].T + w["classifier.4.bias"]


def gru(w, tokens):
    e = w["embedding.weight"][tokens]  # (N, T, E)
    hidden = w["gru.weight_hh_l0"].shape[1]
    input_part = e @ w["gru.weight_ih_l0"].T + w["gru.bias_ih_l0"]  # the input's share of all gates, all steps
    h = np.zeros((len(tokens), hidden))
    for t in range(tokens.shape[1]):
        ir, iz, i_n = np.split(input_part[:, t], 3, axis=1)
        hr, hz, hn = np.split(h @ w["gru.weight_hh_l0"].T + w["gru.bias_hh_l0"], 3, axis=1)
        r, z = sigmoid(ir + hr), sigmoid(iz + hz)
        n = np.tanh(i_n + r * hn)  # the reset gate after the recurrent matmul, bias included
        h = (1 - z) * n + z * h
    return h @ w["fc.weight"].T + w["fc.bias"]  # the last time step's output is the final state


def resnet50(w, x):
    x = relu(batch_norm(conv2d(x, w["conv1.weight"], stride=2, padding=3), w, "bn1"))
    x = max_pool(x, 3, 2, padding=1)
    for stage, (_, blocks) in enumerate(RESNET_STAGES, start=1):
        for b in range(blocks):
            p, stride = f"layer{stage}.{b}", 2 if stage > 1 and b == 0 else 1
            y = relu(batch_norm(conv2d(x, w[f"{p}.conv1.weight"]), w, f"{p}.bn1"))
            y = relu(batch_norm(conv2d(y, w[f"{p}.conv2.weight"], stride=stride, padding=1), w, f"{p}.bn2"))
            y = batch_norm(conv2d(y, w[f"{p}.conv3.weight"]), w, f"{p}.bn3")
            if b == 0:  # the shortcut changes shape: a strided 1x1 projection
                x = batch_norm(conv2d(x, w[f"{p}.downsample.0.weight"], stride=stride), w, f"{p}.downsample.1")
            x = relu(y + x)
    return x.mean(axis=(2, 3))  # global average pool -> (N, 2048)


def reference(task: str, weights: dict, x: np.ndarray) -> np.ndarray:
    """The model's outputs in float64 and evaluation mode: CNN and GRU logits, ResNet-50 features."""
    w = {name: np.asarray(a, dtype=np.float64) for name, a in weights.items()}
    forward = {"cnn_cifar10": cnn, "gru_imdb": gru, "resnet50_features": resnet50}[task]
    return forward(w, x if task == "gru_imdb" else np.asarray(x, dtype=np.float64))


def relative_error(outputs, reference) -> float:
    """max |outputs - reference| / max |reference|: the worst deviation, relative to the outputs' scale.

    One scale for the whole array, not one per element: an element's own relative error blows up
    where the reference is near zero (a logit crossing zero, a feature ReLU nearly switched off),
    although a float32 result there is as good as anywhere. The tiny term only avoids 0 / 0.
    """
    outputs, reference = np.asarray(outputs, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    if outputs.shape != reference.shape:
        raise ValueError(f"outputs {outputs.shape} and reference {reference.shape} differ in shape")
    return float(np.abs(outputs - reference).max() / (np.abs(reference).max() + np.finfo(np.float64).tiny))


def compare(task: str, outputs, weights: dict, x: np.ndarray, precision: str = "fp32") -> dict:
    """A notebook's parity verdict: its outputs against `reference()`, printed in one line, and the
    fields its record carries (`records.write(..., extra=compare(...))`)."""
    return agree(
        "parity",
        outputs,
        reference(task, weights, x),
        against=" from the numpy reference",
        scale="features" if task == "resnet50_features" else "logits",
        precision=precision,
    )


def agree(check: str, outputs, expected, *, against: str = "", scale: str = "outputs", precision: str = "fp32") -> dict:
    """One model's outputs against another's on the same batch: a model restored from its saved file
    (`check="save_load"`), its exported graph run in ONNX Runtime (`check="onnx"`), or the numpy
    reference (`compare()`). Prints the verdict in one line and returns the record's field,
    `{check: {"max_rel_error": ..., "tolerance": ...}}`; the tolerance is the one of the precision the
    outputs were computed in (support.precision.TOLERANCE; `TOLERANCE` for float32)."""
    error, tolerance = relative_error(outputs, expected), precision_tolerance(precision)
    print(
        f"{check}: largest deviation{against} {error:.1e} of the {scale}' scale "
        f"({'within' if error < tolerance else 'OUTSIDE'} the {precision} tolerance {tolerance:g})"
    )
    return {check: {"max_rel_error": error, "tolerance": tolerance, "outputs_shape": list(np.shape(outputs))}}


# Data parallelism (the DenseNet-121 notebooks' `devices`): how a framework's replicas treat batch norm decides
# which one-device step the several-device step must equal.
DATA_PARALLEL_REFERENCES = {
    "per-device": "the mean of the per-device losses, each device's share of the batch through the model apart",
    "global": "the loss of the whole global batch in one forward pass",
}
# The data-parallel check's tolerance in float32, relative to the largest update. Summing in another order is
# enough to move a DenseNet-121 step by up to 3e-3 of its largest update at the tiny profile (batch norm over
# 2x2 maps of 8 images amplifies rounding): the same one-device step on the same batch reordered differs from
# it by 2.8e-3 in JAX, as much as two devices do. A gradient summed instead of averaged is off by 1, a wrong
# batch-norm reference by far more than 1e-2.
DATA_PARALLEL_TOLERANCE = 1e-2


def data_parallel(
    several: dict, one: dict, before: dict, *, devices: int, batch_norm: str, precision: str = "fp32"
) -> dict:
    """Data parallelism's check: the trainable parameters after one training step on `devices` devices
    (`several`) against the same step on one device (`one`), both from the weights `before` and on the same
    global batch, each a dict name -> array.

    The step is plain SGD at learning rate 1, so each parameter moves by minus the gradient the step applied,
    and the comparison is of the gradient the devices averaged. `batch_norm` says how the replicas normalise:
    "per-device", each with its own share's statistics (PyTorch's DistributedDataParallel, MirroredStrategy,
    MXNet, Chainer: the one-device step averages the shares' losses, each through the model apart), or
    "global", one program normalising the whole batch across devices (JAX's sharded step, Keras on JAX: the
    one-device step is the whole batch). Batch norm's running statistics are not trainable and not compared.
    Prints the verdict in one line; returns the record's field `{"data_parallel": {...}}` with the largest
    parameter difference and that difference relative to the largest update, and the tolerance:
    DATA_PARALLEL_TOLERANCE, or the tolerance of `precision` where that is larger.
    """
    if batch_norm not in DATA_PARALLEL_REFERENCES:
        raise ValueError(f"batch_norm={batch_norm!r}: choose from {', '.join(DATA_PARALLEL_REFERENCES)}")
    names = sorted(before)
    for what, params in (("several-device", several), ("one-device", one)):
        if sorted(params) != names:
            odd = sorted(set(params) ^ set(names))
            raise ValueError(f"the {what} parameters differ in name from the weights before the step: {odd[:3]}")
    as64 = {
        k: {name: np.asarray(p[name], dtype=np.float64) for name in names}
        for k, p in (("several", several), ("one", one), ("before", before))
    }
    for name in names:
        if not (as64["several"][name].shape == as64["one"][name].shape == as64["before"][name].shape):
            raise ValueError(
                f"parameter {name!r}: shapes {as64['several'][name].shape} (several devices), "
                f"{as64['one'][name].shape} (one), {as64['before'][name].shape} (before) differ"
            )
    difference = max(float(np.abs(as64["several"][n] - as64["one"][n]).max()) for n in names)
    update = max(float(np.abs(as64["one"][n] - as64["before"][n]).max()) for n in names)
    error = float(difference / (update + np.finfo(np.float64).tiny))
    tolerance = max(DATA_PARALLEL_TOLERANCE, precision_tolerance(precision))
    print(
        f"data parallel: one step on {devices} devices against one device ({batch_norm} batch norm): "
        f"largest parameter difference {difference:.1e}, {error:.1e} of the largest update "
        f"({'within' if error < tolerance else 'OUTSIDE'} the {precision} tolerance {tolerance:g})"
    )
    return {
        "data_parallel": {
            "devices": int(devices),
            "batch_norm": batch_norm,
            "reference": DATA_PARALLEL_REFERENCES[batch_norm],
            "max_abs_diff": difference,
            "max_update": update,
            "max_rel_error": error,
            "tolerance": tolerance,
            "n_tensors": len(names),
        }
    }
