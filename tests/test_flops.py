"""support.flops: every model's FLOPs per sample, counted from the architecture, against an
independent counter (PyTorch's FlopCounterMode traces the real models' convolutions and matmuls)."""

import pytest

from support import flops, params

torch = pytest.importorskip("torch")
nn = torch.nn
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402


def counted(make_model, make_x, train: bool) -> int:
    """FlopCounterMode's count of one forward pass (and backward, for a training step) on one sample,
    built and traced on the meta device: shapes only, no arithmetic and no initialisation."""
    with torch.device("meta"):
        model, x = make_model(), make_x()
    with FlopCounterMode(display=False) as counter:
        out = model(x)
        if train:
            out.sum().backward()
    return counter.get_total_flops()


class CNN(nn.Module):  # the notebooks' VGG-style CNN
    def __init__(self, n_classes):
        super().__init__()
        conv = lambda i, o: nn.Conv2d(i, o, 3, padding=1)  # noqa: E731
        self.net = nn.Sequential(
            conv(3, 50),
            nn.ReLU(),
            conv(50, 50),
            nn.ReLU(),
            nn.MaxPool2d(2),
            conv(50, 100),
            nn.ReLU(),
            conv(100, 100),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(6400, 512),
            nn.ReLU(),
            nn.Linear(512, n_classes),
        )

    def forward(self, x):
        return self.net(x)


class GRU(nn.Module):  # the notebooks' GRU classifier
    def __init__(self, settings):
        super().__init__()
        self.embedding = nn.Embedding(settings.vocab_size, settings.embedding_dim)
        self.gru = nn.GRU(settings.embedding_dim, settings.hidden_dim, batch_first=True)
        self.fc = nn.Linear(settings.hidden_dim, settings.n_classes)

    def forward(self, x):
        return self.fc(self.gru(self.embedding(x))[1][-1])


def check(ours: dict, make_model, make_x, train: bool = True):
    assert ours["forward"] == pytest.approx(counted(make_model, make_x, False), rel=0.02)
    if train:
        assert ours["train"] == pytest.approx(counted(make_model, make_x, True), rel=0.02)


@pytest.mark.parametrize("profile", ["cpu", "full"])
def test_cnn_and_gru_match_pytorchs_counter(profile):
    settings = params.load("cnn_cifar10", profile)
    check(flops.per_sample("cnn_cifar10", settings), lambda: CNN(settings.n_classes), lambda: torch.randn(1, 3, 32, 32))
    G = params.load("gru_imdb", profile)
    check(flops.per_sample("gru_imdb", G), lambda: GRU(G), lambda: torch.randint(0, G.vocab_size, (1, G.max_len)))


@pytest.mark.parametrize("profile", ["tiny", "cpu"])  # 64 and 224 pixels
def test_densenet121_and_resnet50_match_pytorchs_counter(profile):
    torchvision = pytest.importorskip("torchvision")
    settings = params.load("densenet_chestxray", profile)
    check(
        flops.per_sample("densenet_chestxray", settings),
        lambda: torchvision.models.densenet121(num_classes=settings.n_labels),
        lambda: torch.randn(1, 3, settings.image_size, settings.image_size),
    )
    R = params.load("resnet50_features", profile)

    def resnet():
        model = torchvision.models.resnet50()
        model.fc = nn.Identity()
        return model.eval()

    ours = flops.per_sample("resnet50_features", R)
    assert ours["train"] is None  # inference only
    check(ours, resnet, lambda: torch.randn(1, 3, R.image_size, R.image_size), train=False)


def test_known_sizes_and_an_unknown_task():
    assert flops.resnet50(224)["forward"] == pytest.approx(8.18e9, rel=0.01)  # 4.09 GMACs, as published
    with pytest.raises(ValueError, match="no FLOP count for task 'nope'"):
        flops.per_sample("nope", None)
