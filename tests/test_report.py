"""scripts/report.py: the accuracy band, parameter differences and parity errors in the tables."""
import json

from scripts import report, run_all
from support import params, records, timing


def write(folder, framework, accuracy, *, task="cnn_cifar10", profile="tiny", n_parameters=100, **extra):
    P = params.load(task, profile)
    metric = {"auc": accuracy} if task == "densenet_chestxray" else {"accuracy": accuracy}
    return records.write(folder / "records" / profile / f"{task}__{framework}.json", task=task, framework=framework,
                         params=P, data="synthetic", timing=timing.benchmark(lambda: None, 2, samples=4),
                         metrics=metric, n_parameters=n_parameters, environment={"machine": "box"}, extra=extra)


def test_a_row_outside_the_band_is_flagged_not_hidden(tmp_path):
    for framework, accuracy in (("pytorch", 0.91), ("tensorflow", 0.92), ("jax", 0.90), ("mxnet", 0.80)):
        write(tmp_path, framework, accuracy)
    rows = report.build(tmp_path)
    bands = {r["framework"]: r["band"] for r in rows}
    assert bands == {"pytorch": "in", "tensorflow": "in", "jax": "in", "mxnet": "outside"}
    assert report.flagged(rows) == ["cnn_cifar10/mxnet (tiny): accuracy 0.800 is more than 0.05 from the median "
                                    "0.905 of the frameworks"]
    md = (tmp_path / "results.md").read_text()
    assert "| 0.800 **outside band** |" in md and "| 0.910 |" in md
    assert ",outside," in (tmp_path / "results.csv").read_text()


def test_densenet_auc_is_banded_only_at_the_full_profile(tmp_path):
    for framework, auc in (("pytorch", 0.6), ("tensorflow", 0.5), ("jax", 0.8)):
        write(tmp_path, framework, auc, task="densenet_chestxray", mode="loader")
    assert {r["band"] for r in report.build(tmp_path)} == {None}


def test_parameter_differences_and_parity_errors_are_shown(tmp_path):
    write(tmp_path, "pytorch", 0.9, task="gru_imdb", n_parameters=3_818_302,
          parity={"max_rel_error": 6.3e-7, "outputs_shape": [4, 2]})
    write(tmp_path, "jax", 0.9, task="gru_imdb", n_parameters=3_818_002)
    report.build(tmp_path)
    md = (tmp_path / "results.md").read_text()
    assert "| 3,818,302 | 6.3e-07 |" in md and "| 3,818,002 (-300) | - |" in md


def test_the_runner_prints_rows_outside_the_band(tmp_path, capsys):
    for framework, accuracy in (("pytorch", 0.9), ("tensorflow", 0.9), ("mxnet", 0.5)):
        write(tmp_path / "box", framework, accuracy, task="gru_imdb")
    assert run_all.main(["--report-only", "--results", str(tmp_path), "--machine", "box", "--no-readme",
                         "--profile", "tiny"]) == 0
    assert "outside the band: gru_imdb/mxnet (tiny): accuracy 0.500" in capsys.readouterr().out
    assert json.loads((tmp_path / "box" / "records" / "tiny" / "gru_imdb__mxnet.json").read_text())["status"] == "ok"
