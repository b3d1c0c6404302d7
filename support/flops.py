"""FLOPs per sample of each task's model, counted from the architecture.

What MFU (model FLOPs utilisation) needs: the work a model does per sample, independent of how a
framework does it. Counted as every benchmark does (PaLM's MFU, MLPerf's and DeepSpeed's
counters, PyTorch's `FlopCounterMode`): the multiply-adds of convolutions and matrix
multiplications, two FLOPs each; activations, normalisation, pooling and the optimiser are left
out (they are under 1% of these models' arithmetic). A training step is the forward pass plus the
backward pass, which computes each layer's weight gradient (as many FLOPs as its forward) and its
input gradient (as many again), except for a layer fed by the data, whose input needs no
gradient. tests/test_flops.py checks every count against PyTorch's FlopCounterMode.

    flops.per_sample("cnn_cifar10", settings)   # {'forward': 2.47e8, 'train': 7.3e8}
"""

from __future__ import annotations


def _out(size: int, kernel: int, stride: int = 1, pad: int = 0) -> int:
    return (size + 2 * pad - kernel) // stride + 1


class _Counter:
    """Multiply-adds per layer, and whether each layer's input needs a gradient."""

    def __init__(self):
        self.layers: list[tuple[int, bool]] = []

    def conv(
        self, size: int, c_in: int, c_out: int, kernel: int, stride: int = 1, pad: int = 0, data_input: bool = False
    ) -> int:
        out = _out(size, kernel, stride, pad)
        self.layers.append((out * out * c_out * c_in * kernel * kernel, not data_input))
        return out

    def dense(self, n_in: int, n_out: int, times: int = 1, input_grad: bool = True) -> None:
        self.layers.append((times * n_in * n_out, input_grad))

    def flops(self) -> dict:
        forward = sum(2 * macs for macs, _ in self.layers)
        backward = sum(2 * macs * (2 if input_grad else 1) for macs, input_grad in self.layers)
        return {"forward": forward, "train": forward + backward}


def cnn(image_size: int = 32, n_classes: int = 10) -> dict:
    """The seed's VGG-style CNN: 3x3 'same' convolutions 3-50-50, pool, 50-100-100, pool, 512, classes."""
    c, s = _Counter(), image_size
    s = c.conv(s, 3, 50, 3, pad=1, data_input=True)
    s = c.conv(s, 50, 50, 3, pad=1) // 2
    s = c.conv(s, 50, 100, 3, pad=1)
    s = c.conv(s, 100, 100, 3, pad=1) // 2
    c.dense(100 * s * s, 512)
    c.dense(512, n_classes)
    return c.flops()


def gru(max_len: int, embedding_dim: int, hidden_dim: int, n_classes: int) -> dict:
    """Embedding (a lookup, no FLOPs), one cuDNN-form GRU layer over max_len steps, a dense layer.

    Each step multiplies the input (3 gates x hidden x embedding) and the state (3 x hidden x hidden).
    The first step's state is the zero initial state, which needs no gradient."""
    c = _Counter()
    c.dense(embedding_dim, 3 * hidden_dim, times=max_len)
    c.dense(hidden_dim, 3 * hidden_dim, times=max_len - 1)
    c.dense(hidden_dim, 3 * hidden_dim, input_grad=False)
    c.dense(hidden_dim, n_classes)
    return c.flops()


def densenet121(image_size: int, n_labels: int, growth: int = 32, bottleneck: int = 4, blocks=(6, 12, 24, 16)) -> dict:
    """DenseNet-121 (Huang et al. 2017, torchvision's layout) with an n_labels classifier."""
    c, s = _Counter(), image_size
    s = c.conv(s, 3, 64, 7, stride=2, pad=3, data_input=True)
    s = _out(s, 3, 2, 1)  # max-pool
    channels = 64
    for i, n_layers in enumerate(blocks):
        for _ in range(n_layers):
            c.conv(s, channels, bottleneck * growth, 1)
            c.conv(s, bottleneck * growth, growth, 3, pad=1)
            channels += growth
        if i < len(blocks) - 1:  # transition: 1x1 halving channels, 2x2 avg-pool
            c.conv(s, channels, channels // 2, 1)
            channels, s = channels // 2, s // 2
    c.dense(channels, n_labels)
    return c.flops()


def resnet50(image_size: int) -> dict:
    """ResNet-50 v1.5 (stride in each bottleneck's 3x3, torchvision's) up to the 2048-d pooled features."""
    c, s = _Counter(), image_size
    s = c.conv(s, 3, 64, 7, stride=2, pad=3, data_input=True)
    s = _out(s, 3, 2, 1)  # max-pool
    channels = 64
    for width, n_blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for b in range(n_blocks):
            first = b == 0
            c.conv(s, channels, width, 1)
            s_out = c.conv(s, width, width, 3, stride=stride if first else 1, pad=1)
            c.conv(s_out, width, 4 * width, 1)
            if first:  # projection shortcut
                c.conv(s, channels, 4 * width, 1, stride=stride if first else 1)
            channels, s = 4 * width, s_out
    return c.flops()


def per_sample(task: str, params) -> dict:
    """{'forward': FLOPs, 'train': FLOPs or None} for one sample of `task` with these parameters."""
    if task == "cnn_cifar10":
        return cnn(32, params.n_classes)
    if task == "gru_imdb":
        return gru(params.max_len, params.embedding_dim, params.hidden_dim, params.n_classes)
    if task == "densenet_chestxray":
        return densenet121(params.image_size, params.n_labels)
    if task == "resnet50_features":
        return {"forward": resnet50(params.image_size)["forward"], "train": None}
    raise ValueError(f"no FLOP count for task {task!r}")
