"""support.params: one source of numbers, three profiles, clear errors."""

import pytest

from support import params, tasks, timing


@pytest.mark.parametrize("task", params.TASKS)
def test_every_task_has_every_profile_and_they_shrink(task):
    full, cpu, tiny = (params.load(task, p) for p in ("full", "cpu", "tiny"))
    assert (full.profile, cpu.profile, tiny.profile) == ("full", "cpu", "tiny")
    if task == "operators":  # every size (0) at full and cpu; the smallest only, one call a repeat, at tiny
        assert full.sizes == cpu.sizes == 0 and tiny.sizes == 1 and full.budget_s > cpu.budget_s > tiny.budget_s
        assert full.every_variant and cpu.every_variant and not tiny.every_variant
    elif task != "resnet50_features":
        assert full.n_train is None and cpu.n_train > tiny.n_train
    else:  # every profile times at least 7 batches; the smaller ones take smaller batches and images
        assert full.n_batches >= cpu.n_batches >= tiny.n_batches
        work = lambda settings: settings.n_batches * settings.batch_size * settings.image_size**2  # noqa: E731
        assert work(full) > work(cpu) > work(tiny)


@pytest.mark.parametrize("task", tasks.NAMES)
@pytest.mark.parametrize("profile", tasks.PROFILES)
def test_every_profile_times_at_least_seven_steady_state_repeats(task, profile):
    settings = params.load(task, profile)
    repeats = {"resnet50_features": "n_batches", "operators": "repeats"}.get(task, "step_repeats")
    assert getattr(settings, repeats) >= timing.MIN_REPEATS == 7
    if task == "operators":
        assert settings.warmup_calls >= 1
    elif task != "resnet50_features":
        assert settings.steps_per_repeat >= 1 and settings.warmup_steps >= 1


def test_full_is_the_seed_settings():
    cnn = params.load("cnn_cifar10", "full")
    assert (cnn.epochs, cnn.batch_size, cnn.lr, cnn.momentum, cnn.n_classes) == (10, 64, 0.01, 0.9, 10)
    gru = params.load("gru_imdb", "full")
    assert (gru.epochs, gru.batch_size, gru.embedding_dim, gru.hidden_dim, gru.max_len, gru.vocab_size) == (
        3,
        64,
        125,
        100,
        150,
        30000,
    )
    dn = params.load("densenet_chestxray", "full")
    assert (dn.n_labels, dn.image_size, dn.resize, dn.lr, dn.epochs, dn.batch_size) == (14, 224, 264, 1e-4, 5, 32)
    assert params.load("resnet50_features", "full").n_features == 2048


def test_auto_picks_full_on_a_gpu_and_cpu_otherwise(capsys):
    assert params.load("cnn_cifar10", "auto", gpu=True).profile == "full"
    assert params.load("cnn_cifar10", "auto", gpu=False).profile == "cpu"
    assert "profile: cpu (auto: no GPU visible)" in capsys.readouterr().out


def test_unknown_names_list_the_valid_ones():
    with pytest.raises(ValueError, match="unknown profile 'huge'; choose from: auto, full, cpu, tiny"):
        params.load("cnn_cifar10", "huge")
    with pytest.raises(ValueError, match="unknown task 'mnist'; choose from: cnn_cifar10"):
        params.load("mnist")


def test_an_override_from_the_environment_replaces_numbers_in_the_loaded_profile(monkeypatch, capsys):
    monkeypatch.setenv(params.OVERRIDE_VARIABLE, "epochs=2, n_train=8192,lr=0.5")
    settings = params.load("cnn_cifar10", "full")
    assert (settings.profile, settings.epochs, settings.n_train, settings.lr, settings.batch_size) == (
        "full",
        2,
        8192,
        0.5,
        64,
    )
    assert params.as_dict(settings)["epochs"] == 2  # what a record's params show
    assert "epochs = 2   (DLROSETTA_PARAMS)" in capsys.readouterr().out
    monkeypatch.setenv(params.OVERRIDE_VARIABLE, "n_train=none")
    assert params.load("gru_imdb", "cpu").n_train is None  # a size of None: the whole dataset
    monkeypatch.delenv(params.OVERRIDE_VARIABLE)
    assert params.load("cnn_cifar10", "full") == params._PROFILES["cnn_cifar10"]["full"]


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "epoch=2",
            "DLROSETTA_PARAMS: resnet50_features has no parameter 'epoch'; choose from: batch_size, n_batches,",
        ),
        ("profile=tiny", "has no parameter 'profile'"),
        ("n_batches=two", "DLROSETTA_PARAMS: n_batches='two' is not a whole number"),
        ("batch_size=1.5", "batch_size='1.5' is not a whole number"),
        ("sweep_budget_s=inf", "sweep_budget_s='inf' is not a number"),
        ("n_batches", "'n_batches' is not NAME=VALUE"),
    ],
)
def test_a_bad_override_is_one_line_naming_it(monkeypatch, text, message):
    monkeypatch.setenv(params.OVERRIDE_VARIABLE, text)
    with pytest.raises(ValueError) as err:
        params.load("resnet50_features", "tiny")
    assert message in str(err.value) and "\n" not in str(err.value)
