"""support.records: well-formed records, atomic writes, clear validation errors."""
import json

import pytest

from support import params, records, timing


def good_record(tmp_path, **changes):
    P = params.load("cnn_cifar10", "tiny")
    summary = timing.benchmark(lambda: None, repeats=2, warmup=1, samples=4)
    kwargs = dict(task="cnn_cifar10", framework="pytorch", params=P, data="synthetic", timing=summary,
                  metrics={"accuracy": 0.5}, n_parameters=10, environment={"machine": "m"})
    kwargs.update(changes)
    path = tmp_path / "r" / "record.json"
    return path, records.write(path, **kwargs)


def test_write_then_read_round_trips_without_leftovers(tmp_path):
    path, record = good_record(tmp_path)
    assert records.read(path) == json.loads(json.dumps(record))
    assert [p.name for p in path.parent.iterdir()] == ["record.json"]
    assert record["profile"] == "tiny" and record["params"]["batch_size"] == 32


def test_write_without_a_path_only_prints(tmp_path, capsys):
    P = params.load("gru_imdb", "tiny")
    records.write(None, task="gru_imdb", framework="x", params=P, data="real",
                  timing=timing.benchmark(lambda: None, 1), metrics={"accuracy": 0.9}, n_parameters=3,
                  environment={})
    assert "gru_imdb / x" in capsys.readouterr().out and not list(tmp_path.iterdir())


@pytest.mark.parametrize("change, message", [
    (dict(metrics={}), "metrics\\['accuracy'\\]"),
    (dict(data="fake"), "data 'fake'"),
    (dict(n_parameters=0), "n_parameters"),
    (dict(task="nope"), "unknown task"),
    (dict(extra={"parity": {"max_rel_error": float("nan")}}), "parity .* needs max_rel_error"),
])
def test_bad_records_are_refused_with_the_reason(tmp_path, change, message):
    with pytest.raises(records.RecordError, match=message):
        good_record(tmp_path, **change)


def test_failed_records_must_carry_their_error(tmp_path):
    base = {k: None for k in records.REQUIRED} | {"schema": 1, "task": "gru_imdb", "status": "failed"}
    with pytest.raises(records.RecordError, match="must say its error"):
        records.validate(base)
    assert records.validate(base | {"error": "ValueError: boom"})["status"] == "failed"


def test_reading_garbage_names_the_file(tmp_path):
    path = tmp_path / "x.json"
    path.write_text("{not json")
    with pytest.raises(records.RecordError, match="x.json"):
        records.read(path)
