"""support.parity: the shared weights, their layout, and the numpy reference checked against PyTorch.

The PyTorch models are the notebooks' own (their class cells are executed here), so a pass says
that the reference computes what the PyTorch notebooks compute, to float32 accuracy.
"""

import functools

import nbformat
import numpy as np
import pytest

from scripts import suite
from support import parity


@pytest.fixture(scope="module", params=parity.TASKS)
def shared(request):
    task = request.param
    weights, x = parity.load(task)
    return task, weights, x, parity.reference(task, weights, x)


# --- the file and its layout -------------------------------------------------------------------


def test_weights_are_written_once_and_read_back_unchanged():
    task = "gru_imdb"
    weights, x = parity.load(task)
    assert parity.path(task).exists() and parity.path(task).name == f"{task}-v{parity.VERSION}.npz"
    again, x_again = parity.load(task)  # from the file this time
    drawn, x_drawn = parity.make(task)  # and drawn afresh: the same numbers
    assert list(again) == list(drawn) == list(parity.layout(task))
    for name in weights:
        np.testing.assert_array_equal(again[name], drawn[name])
    np.testing.assert_array_equal(x_again, x_drawn)
    assert not list(parity.path(task).parent.glob("*.tmp*")), "a temporary file was left behind"


def test_layout_names_every_array_with_its_shape(shared):
    task, weights, x, _ = shared
    assert {name: w.shape for name, w in weights.items()} == parity.layout(task)
    assert all(w.dtype == np.float32 for w in weights.values())
    assert all(np.isfinite(w).all() for w in weights.values())
    assert x.shape[0] == parity.BATCH[task]


def test_the_sizes_are_the_notebooks_models():
    shapes = {task: parity.layout(task) for task in parity.TASKS}
    assert shapes["cnn_cifar10"]["features.8.weight"] == (100, 100, 3, 3)  # OIHW
    assert shapes["cnn_cifar10"]["classifier.1.weight"] == (512, 6400)  # (out, in)
    assert shapes["gru_imdb"]["embedding.weight"] == (30000, 125)
    assert shapes["gru_imdb"]["gru.weight_ih_l0"] == (300, 125)  # gates r, z, n stacked
    assert shapes["gru_imdb"]["gru.weight_hh_l0"] == (300, 100)
    assert shapes["resnet50_features"]["layer4.2.bn3.running_var"] == (2048,)
    counts = {task: parity.n_parameters(task) for task in parity.TASKS}
    assert counts == {"cnn_cifar10": 3_441_592, "gru_imdb": 3_818_302, "resnet50_features": 23_508_032}


def test_the_inputs_are_fixed_batches_in_the_loaders_formats():
    _, images = parity.load("cnn_cifar10")
    assert images.shape == (4, 3, 32, 32) and images.dtype == np.float32
    _, tokens = parity.load("gru_imdb")
    assert tokens.shape == (4, 150) and tokens.dtype == np.int32
    assert tokens.min() == 0 and tokens.max() == 29999  # padding and the last embedding row
    assert (tokens[:, 0] == 0).sum() == 3 and (tokens == 1).sum(axis=1).tolist() == [1, 1, 1, 1]
    _, resnet_images = parity.load("resnet50_features")
    assert resnet_images.shape == (2, 3, 64, 64)


def test_reference_outputs_are_order_one_and_depend_on_the_input(shared):
    task, _, x, out = shared
    shape = {"cnn_cifar10": (4, 10), "gru_imdb": (4, 2), "resnet50_features": (2, 2048)}[task]
    assert out.shape == shape and out.dtype == np.float64 and np.isfinite(out).all()
    assert 0.3 < np.abs(out).max() < 30, "activations should stay O(1) through the network"
    assert np.abs(out - out.mean(axis=0)).max() > 0.05 * np.abs(out).max(), "outputs barely depend on the input"


def test_relative_error_is_relative_to_the_outputs_scale():
    ref = np.array([[100.0, 0.0], [-50.0, 1e-9]])
    assert parity.relative_error(ref, ref) == 0
    assert parity.relative_error(ref + 0.01, ref) == pytest.approx(1e-4)  # not 0.01 / 1e-9
    assert parity.relative_error(np.zeros(3), np.zeros(3)) == 0
    with pytest.raises(ValueError, match="shape"):
        parity.relative_error(ref[:1], ref)


def test_reference_layers_on_hand_checked_cases():
    x = np.arange(16.0).reshape(1, 1, 4, 4)
    assert parity.max_pool(x, 2, 2).ravel().tolist() == [5, 7, 13, 15]
    assert parity.max_pool(-x, 3, 2, padding=1).ravel().tolist() == [0, -1, -4, -5]  # padding never wins
    kernel = np.zeros((1, 1, 3, 3))
    kernel[0, 0, 0, 1] = 1  # picks the pixel above: cross-correlation
    shifted = parity.conv2d(x, kernel, padding=1)[0, 0]
    assert shifted[1:].tolist() == x[0, 0, :-1].tolist() and shifted[0].tolist() == [0, 0, 0, 0]
    assert parity.conv2d(x, np.ones((2, 1, 1, 1)), b=np.array([0.0, 1.0]), stride=2)[0, :, :, 0].tolist() == [
        [0, 8],
        [1, 9],
    ]


# --- the reference against the PyTorch notebooks' models ----------------------------------------


def notebook_cell(task, marker):
    """The source of the PyTorch notebook's code cell that contains `marker`."""
    nb = nbformat.read(suite.notebook_path(task, "pytorch"), as_version=4)
    return next(c.source for c in nb.cells if c.cell_type == "code" and marker in c.source)


@functools.cache  # built once per task: initialising ResNet-50 takes seconds
def pytorch_model(task):
    torch = pytest.importorskip("torch")
    nn = torch.nn
    torch.manual_seed(0)
    if task == "resnet50_features":
        torchvision = pytest.importorskip("torchvision")
        model = torchvision.models.resnet50(weights=None)  # as the notebook builds it; nothing is downloaded
        model.fc = nn.Identity()
        return model
    if task == "cnn_cifar10":
        scope = {"torch": torch, "nn": nn}
        exec(notebook_cell(task, "class VGGStyleCNN"), scope)
        return scope["VGGStyleCNN"](parity.CNN.n_classes)
    scope = {"torch": torch, "nn": nn}
    exec(notebook_cell(task, "class GRUClassifier"), scope)
    settings = parity.GRU
    return scope["GRUClassifier"](settings.vocab_size, settings.embedding_dim, settings.hidden_dim, settings.n_classes)


def test_pytorch_state_dict_is_the_shared_layout(shared):
    task, weights, _, _ = shared
    model = pytorch_model(task)
    state = {k: tuple(v.shape) for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}
    assert state == parity.layout(task)
    assert list(state) == list(parity.layout(task)), "the layout lists the names in state_dict order"


def test_pytorch_matches_the_reference_in_float32(shared):
    task, weights, x, expected = shared
    torch = pytest.importorskip("torch")
    model = pytorch_model(task)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()})  # strict: every name matches
    model.eval()
    with torch.inference_mode():
        inputs = torch.from_numpy(x).long() if task == "gru_imdb" else torch.from_numpy(x)
        out = model(inputs).numpy()
    assert out.dtype == np.float32
    error = parity.relative_error(out, expected)
    print(f"{task}: PyTorch float32 vs numpy float64 reference, relative error {error:.2e}")
    assert error < parity.TOLERANCE


def test_compare_prints_the_verdict_and_returns_the_records_fields(shared, capsys):
    task, weights, x, expected = shared
    near = expected.astype(np.float32)
    fields = parity.compare(task, near, weights, x)
    assert fields == {
        "parity": {
            "max_rel_error": parity.relative_error(near, expected),
            "tolerance": 1e-4,
            "outputs_shape": list(near.shape),
        }
    }
    scale = "features" if task == "resnet50_features" else "logits"
    assert f"of the {scale}' scale (within the fp32 tolerance 0.0001)" in capsys.readouterr().out
    assert parity.compare(task, expected + np.abs(expected).max() * 1e-3, weights, x)["parity"]["max_rel_error"] > 1e-4
    assert "(OUTSIDE the fp32 tolerance 0.0001)" in capsys.readouterr().out


def test_agree_compares_two_models_outputs_at_the_parity_tolerance(capsys):
    a = np.array([[1.0, -2.0], [0.5, 4.0]], dtype=np.float32)
    assert parity.agree("onnx", a, a) == {"onnx": {"max_rel_error": 0.0, "tolerance": 1e-4, "outputs_shape": [2, 2]}}
    assert "onnx: largest deviation 0.0e+00" in capsys.readouterr().out
    field = parity.agree("save_load", a + np.float32(0.01), a)["save_load"]
    assert field["max_rel_error"] == pytest.approx(0.01 / 4, rel=1e-4)
    assert "OUTSIDE the fp32 tolerance" in capsys.readouterr().out
    with pytest.raises(ValueError, match="differ in shape"):
        parity.agree("onnx", a[:1], a)
