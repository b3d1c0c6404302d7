"""support.init: each task's initial distributions and the check every notebook's record passes
(tests/test_notebook_runs.py runs it on the notebooks' own models)."""

import math

import numpy as np
import pytest

from support import init, params

RNG = np.random.default_rng(0)
CNN = params.load("cnn_cifar10", "tiny")
GRU = params.load("gru_imdb", "tiny")


def glorot(shape, fan_in, fan_out):
    limit = math.sqrt(6 / (fan_in + fan_out))
    return RNG.uniform(-limit, limit, shape)


def pytorch_default(shape, fan_in):
    bound = 1 / math.sqrt(fan_in)
    return RNG.uniform(-bound, bound, shape)


def orthogonal(rows, cols):
    q, r = np.linalg.qr(RNG.normal(size=(max(rows, cols), min(rows, cols))))
    q *= np.sign(np.diag(r))
    return q if rows >= cols else q.T


@pytest.mark.parametrize(
    "layout, shape, fans",
    [
        ("oi", (50, 3, 3, 3), (27, 450)),
        ("io", (3, 3, 3, 50), (27, 450)),
        ("oi", (512, 6400), (6400, 512)),
        ("io", (6400, 512), (6400, 512)),
        ("oi", (10,), (10, 10)),
    ],
)
def test_fans_count_the_receptive_field_in_either_layout(layout, shape, fans):
    assert init.fans(shape, layout) == fans


def test_an_unknown_layout_is_one_line():
    with pytest.raises(ValueError, match="layout 'hwio' is not one of oi, io"):
        init.fans((3, 3, 3, 50), "hwio")


def cnn_arrays(weights, layout="oi"):
    shapes = [(50, 3, 3, 3), (50, 50, 3, 3), (100, 50, 3, 3), (100, 100, 3, 3), (512, 6400), (10, 512)]
    arrays = {}
    for i, shape in enumerate(shapes):
        fan_in, fan_out = init.fans(shape, "oi")
        w = weights(shape, fan_in, fan_out)
        arrays[f"layer{i}.weight"] = w if layout == "oi" else np.moveaxis(w, (0, 1), (-1, -2))
        arrays[f"layer{i}.bias"] = np.zeros(shape[0])
    return arrays


@pytest.mark.parametrize("layout", init.LAYOUTS)
def test_glorot_weights_and_zero_biases_pass_the_cnns_check(layout):
    assert init.check("cnn_cifar10", init.stats(cnn_arrays(glorot, layout), layout), CNN) == []


def test_pytorchs_default_initialisation_is_named_layer_by_layer():
    found = init.stats(cnn_arrays(lambda shape, fan_in, fan_out: pytorch_default(shape, fan_in)), "oi")
    problems = init.check("cnn_cifar10", found, CNN)
    assert len(problems) == 6 and problems[-1].startswith("layer5.weight (10, 512) (dense): std 0.02")
    assert "the scheme gives std 0.06" in problems[-1]


def test_a_bias_that_does_not_start_at_zero_is_named():
    arrays = cnn_arrays(glorot)
    arrays["layer2.bias"] = RNG.uniform(-0.01, 0.01, 100)
    assert init.check("cnn_cifar10", init.stats(arrays, "oi"), CNN) == [
        f"layer2.bias (100,): a bias starts at zero, not mean {arrays['layer2.bias'].mean():.3g} "
        f"std {arrays['layer2.bias'].std():.3g}"
    ]


def gru_arrays(per_gate: bool = False, pytorch: bool = False):
    e, h, v = GRU.embedding_dim, GRU.hidden_dim, GRU.vocab_size
    if pytorch:  # PyTorch's defaults: N(0, 1) embedding, U(+-1/sqrt(h)) for the GRU
        weight_ih, weight_hh = pytorch_default((3 * h, e), h), pytorch_default((3 * h, h), h)
        embedding = RNG.normal(size=(v, e))
    else:
        weight_ih, weight_hh = glorot((3 * h, e), e, 3 * h), orthogonal(3 * h, h)
        embedding = RNG.uniform(-0.05, 0.05, (v, e))
    arrays = {
        "embedding.weight": embedding,
        "fc.weight": glorot((2, h), h, 2),
        "fc.bias": np.zeros(2),
        "gru.bias": np.zeros((2, 3 * h)),
    }  # Keras's reset_after biases: one (2, 3h) array
    if per_gate:  # Chainer's NStepGRU: each gate's (h, e) and (h, h) matrices apart, blocks of the stacked ones
        arrays.update({f"gru.w{g}": weight_ih[g * h : (g + 1) * h] for g in range(3)})
        arrays.update({f"gru.w{g + 3}": weight_hh[g * h : (g + 1) * h] for g in range(3)})
    else:
        arrays.update({"gru.weight_ih": weight_ih, "gru.weight_hh": weight_hh})
    return arrays


@pytest.mark.parametrize("per_gate", [False, True], ids=["stacked", "per-gate"])
def test_the_grus_scheme_holds_for_stacked_and_per_gate_storage(per_gate):
    assert init.check("gru_imdb", init.stats(gru_arrays(per_gate), "oi"), GRU) == []


def test_pytorchs_gru_defaults_fail_the_grus_scheme():
    problems = init.check("gru_imdb", init.stats(gru_arrays(pytorch=True), "oi"), GRU)
    assert [p.split(" ")[0] for p in problems] == ["embedding.weight", "gru.weight_ih", "gru.weight_hh"]
    assert "(recurrent): not orthogonal" in problems[-1]  # U(+-1/sqrt(h)) has the orthogonal matrix's spread


def test_per_gate_orthogonal_blocks_are_told_from_the_stacked_scheme():
    arrays = gru_arrays(per_gate=True)
    arrays.update({f"gru.w{g + 3}": orthogonal(GRU.hidden_dim, GRU.hidden_dim) for g in range(3)})
    problems = init.check("gru_imdb", init.stats(arrays, "oi"), GRU)
    assert len(problems) == 3 and all("(recurrent)" in p for p in problems)


def test_a_task_without_a_scheme_is_one_line():
    with pytest.raises(ValueError, match="no initialisation scheme for task 'vit_imagenet'"):
        init.check("vit_imagenet", init.stats({"w": np.ones((4, 4))}, "oi"), CNN)


DENSENET = params.load("densenet_chestxray", "tiny")
# a few arrays of a batch-normalised network, in each framework's names: PyTorch, Keras, Flax, MXNet, Chainer
BATCH_NORM_ONES = [
    "features.norm0.weight",
    "conv1_bn/gamma",
    "bn.scale",
    "densenet0_stage1_batchnorm0_gamma",
    "/features/norm0/gamma",
    "conv1_bn/moving_variance",
    "bn.var",
    "densenet0_batchnorm0_running_var",
]
BATCH_NORM_ZEROS = [
    "features.norm0.bias",
    "conv1_bn/beta",
    "bn.bias",
    "densenet0_batchnorm0_beta",
    "conv1_bn/moving_mean",
    "bn.mean",
    "densenet0_batchnorm0_running_mean",
    "classifier.bias",
]


def he_normal(shape, fan_in, truncated=False):
    std = math.sqrt(2 / fan_in)
    if not truncated:
        return RNG.normal(0, std, shape)
    # Keras's and Flax's truncated normal: cut at 2 standard deviations, rescaled to the same spread
    draws = RNG.normal(0, 1, (int(np.prod(shape)) * 2,))
    draws = draws[np.abs(draws) < 2][: int(np.prod(shape))]
    return (draws / 0.87962566103423978 * std).reshape(shape)


def batch_normalised(conv, head=True):
    arrays = {"conv0.weight": conv((64, 3, 7, 7), 147), "conv1.weight": conv((128, 64, 1, 1), 64)}
    arrays.update({name: np.ones(64) for name in BATCH_NORM_ONES})
    arrays.update({name: np.zeros(64) for name in BATCH_NORM_ZEROS})
    if head:
        arrays["classifier.weight"] = glorot((14, 1024), 1024, 14)
    return arrays


@pytest.mark.parametrize("task", ["densenet_chestxray", "resnet50_features"])
@pytest.mark.parametrize("truncated", [False, True])
def test_he_normal_convolutions_batch_norm_at_one_and_zero_and_a_glorot_head_pass(task, truncated):
    arrays = batch_normalised(
        lambda shape, fan_in: he_normal(shape, fan_in, truncated), head=task != "resnet50_features"
    )
    assert init.check(task, init.stats(arrays, "oi"), DENSENET) == []


def test_torchvisions_resnet_fan_out_convolutions_and_a_pytorch_default_head_are_named():
    arrays = batch_normalised(lambda shape, fan_in: he_normal(shape, fan_in))
    arrays["conv1.weight"] = RNG.normal(0, math.sqrt(2 / 128), (128, 64, 1, 1))  # fan-out: 128 * 1 * 1
    arrays["classifier.weight"] = pytorch_default((14, 1024), 1024)
    problems = init.check("densenet_chestxray", init.stats(arrays, "oi"), DENSENET)
    assert [p.split(" ")[0] for p in problems] == ["conv1.weight", "classifier.weight"], problems


def test_a_batch_norm_scale_at_zero_or_a_shift_at_one_is_named():
    arrays = batch_normalised(lambda shape, fan_in: he_normal(shape, fan_in))
    arrays["conv1_bn/gamma"] = np.zeros(64)
    arrays["conv1_bn/beta"] = np.ones(64)
    problems = init.check("densenet_chestxray", init.stats(arrays, "oi"), DENSENET)
    assert problems == [
        "conv1_bn/gamma (64,): a batch norm's scale (or running variance) starts at one, not mean 0 std 0",
        "conv1_bn/beta (64,): a bias starts at zero, not mean 1 std 0",
    ]
