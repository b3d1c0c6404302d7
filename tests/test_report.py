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


def test_malformed_records_become_failed_rows_naming_file_and_problem(tmp_path):
    write(tmp_path, "pytorch", 0.9)
    folder = tmp_path / "records" / "tiny"
    (folder / "cnn_cifar10__tensorflow.json").write_text("{truncated")
    (folder / "cnn_cifar10__jax.json").write_text(json.dumps({"schema": 1, "task": "cnn_cifar10", "timing": []}))
    good = json.loads((folder / "cnn_cifar10__pytorch.json").read_text())
    (folder / "cnn_cifar10__mxnet.json").write_text(json.dumps(good | {"framework": "mxnet", "timing": "fast"}))
    (folder / "notes.json").write_text("[]")
    readme = tmp_path / "README.md"
    readme.write_text("<!-- results:start -->\n<!-- results:end -->\n")
    rows = report.build(tmp_path, readme)                      # never raises
    failed = {(r["task"], r["framework"]): r["error"] for r in rows if r["status"] == "failed"}
    assert failed[("cnn_cifar10", "tensorflow")].startswith(f"{folder / 'cnn_cifar10__tensorflow.json'}: not JSON")
    assert failed[("cnn_cifar10", "jax")] == f"{folder / 'cnn_cifar10__jax.json'}: record lacks framework, variant, " \
                                             "status, profile, data, params, metrics, n_parameters, environment"
    assert failed[("cnn_cifar10", "mxnet")] == f'{folder / "cnn_cifar10__mxnet.json"}: timing is str "fast", not an object'
    assert failed[("notes", "?")] == f"{folder / 'notes.json'}: a record is a JSON object, not list"
    md = (tmp_path / "results.md").read_text()
    assert "| tensorflow | **failed**:" in md and "| pytorch | ok |" in md
    assert "| mxnet | failed |" in readme.read_text()


def test_a_record_filed_under_another_name_is_a_failed_row(tmp_path):
    record = write(tmp_path, "pytorch", 0.9)
    folder = tmp_path / "records"
    (folder / "tiny" / "cnn_cifar10__pytorch.json").rename(folder / "tiny" / "cnn_cifar10__jax.json")
    (folder / "cpu").mkdir()
    (folder / "cpu" / "gru_imdb__pytorch.json").write_text(json.dumps(record | {"task": "gru_imdb"}))
    errors = {(r["profile"], r["framework"]): r["error"] for r in report.build(tmp_path)}
    assert errors[("tiny", "jax")].endswith("cnn_cifar10__jax.json: the record is of cnn_cifar10__pytorch at profile "
                                            "tiny but is filed as cnn_cifar10__jax at tiny: move it, or run that "
                                            "notebook again")
    assert "is of gru_imdb__pytorch at profile tiny but is filed as gru_imdb__pytorch at cpu" in errors[("cpu", "pytorch")]


def test_an_error_with_pipes_and_newlines_stays_in_its_cell(tmp_path):
    write(tmp_path, "pytorch", 0.9)
    failed = run_all.failed_record(run_all.Job("cnn_cifar10", "jax", {}, None, profile="tiny"),
                                   run_all.parse_args(["--profile", "tiny"]), "failed",
                                   "ValueError: shapes (4|8) and\n(8|2) differ\n| x | y |")
    records.atomic_write_json(tmp_path / "records" / "tiny" / "cnn_cifar10__jax.json", failed)
    readme = tmp_path / "README.md"
    readme.write_text("<!-- results:start -->\n<!-- results:end -->\n")
    report.build(tmp_path, readme)
    md = (tmp_path / "results.md").read_text().splitlines()
    header = next(line for line in md if line.startswith("| framework | status"))
    jax = next(line for line in md if line.startswith("| jax |"))
    cells = lambda line: len(line.replace("\\|", "").split("|"))      # noqa: E731  (unescaped pipes only)
    assert cells(jax) == cells(header)
    assert "ValueError: shapes (4\\|8) and (8\\|2) differ \\| x \\| y \\|" in jax


def test_the_band_counts_each_framework_once(tmp_path):
    # Keras's three backends learn alike and low: counted three times they would make the median 0.85,
    # flag TensorFlow and JAX (0.91, 0.92) and let Keras pass. Counted once, Keras alone is outside.
    write(tmp_path, "pytorch", 0.90)
    write(tmp_path, "tensorflow", 0.91)
    write(tmp_path, "jax", 0.92)
    for backend in ("tensorflow", "jax", "torch"):
        P = params.load("cnn_cifar10", "tiny")
        records.write(tmp_path / "records" / "tiny" / f"cnn_cifar10__keras__{backend}.json", task="cnn_cifar10",
                      framework="keras", variant=backend, params=P, data="synthetic",
                      timing=timing.benchmark(lambda: None, 2, samples=4), metrics={"accuracy": 0.80},
                      n_parameters=100, environment={"machine": "box"})
    rows = report.build(tmp_path)
    assert {r["framework"]: r["band"] for r in rows} == {"pytorch": "in", "tensorflow": "in", "jax": "in",
                                                        "keras": "outside"}
    assert {round(r["band_median"], 6) for r in rows} == {0.905}     # median of 0.80 (keras), 0.90, 0.91, 0.92
