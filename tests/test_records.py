"""support.records: well-formed records, atomic writes, clear validation errors."""
import json

import pytest

from support import params, records, timing


def steady(samples: int = 4) -> dict:
    return timing.steady_state(lambda: None, steps=2, samples=samples)


def good_record(tmp_path, **changes):
    P = params.load("cnn_cifar10", "tiny")
    summary = timing.benchmark(lambda: None, repeats=2, warmup=1, samples=4)
    kwargs = dict(task="cnn_cifar10", framework="pytorch", params=P, data="synthetic", timing=summary,
                  metrics={"accuracy": 0.5}, n_parameters=10, environment={"machine": "m"}, first_step_s=0.1,
                  steps=steady(), curve=[0.3, 0.5])
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
                  environment={}, first_step_s=0.1, steps=steady(), curve=[0.9])
    assert "gru_imdb / x" in capsys.readouterr().out and not list(tmp_path.iterdir())


@pytest.mark.parametrize("change, message", [
    (dict(metrics={}), "metrics\\['accuracy'\\]"),
    (dict(data="fake"), 'data is str "fake", not one of real, synthetic'),
    (dict(n_parameters=0), "n_parameters"),
    (dict(task="nope"), "unknown task"),
    (dict(extra={"parity": {"max_rel_error": float("nan")}}), "parity is dict .* max_rel_error a finite number"),
    (dict(extra={"compile_s": "12 s"}), 'compile_s is str "12 s", not a number >= 0'),
])
def test_bad_records_are_refused_with_the_reason(tmp_path, change, message):
    with pytest.raises(records.RecordError, match=message):
        good_record(tmp_path, **change)


@pytest.mark.parametrize("change, message", [
    (dict(curve=[0.3, 0.4]), "curve ends at 0.4, not at the final accuracy 0.5"),
    (dict(curve=[]), "curve is list \\[\\], not a list of numbers"),
    (dict(curve=None), "record lacks curve"),
    (dict(steps=None), "record lacks steps"),
    (dict(steps=timing.steady_state(lambda: None, steps=1, repeats=1, samples=4)), "steady state needs several"),
    (dict(steps=timing.steady_state(lambda: None, steps=1)), "steps.samples_per_s is not a number"),
    (dict(first_step_s=0.0), "first_step_s is float 0.0, not a number > 0"),
    (dict(compile_s=-1.0), "compile_s is float -1.0, not a number >= 0"),
    (dict(device_peak_bytes=-5), "memory is dict .* positive integer or null"),
])
def test_a_benchmark_field_missing_or_wrong_is_refused_naming_it(tmp_path, change, message):
    with pytest.raises(records.RecordError, match=message):
        good_record(tmp_path, **change)


def test_a_record_carries_memory_flops_and_the_first_step(tmp_path):
    _, r = good_record(tmp_path, compile_s=1.5, device_peak_bytes=2 ** 30)
    assert r["schema"] == 2 and r["first_step_s"] == 0.1 and r["compile_s"] == 1.5
    assert r["memory"]["device_peak_bytes"] == 2 ** 30 and r["memory"]["host_peak_bytes"] > 2 ** 20   # bytes, not KiB
    assert r["flops"] == {"forward": 124528640, "train": 370821120}        # the CNN's, from support.flops
    assert r["steps"]["n"] == 7 and len(r["steps"]["laps_s"]) == 7 and r["curve"] == [0.3, 0.5]
    inference = dict(task="resnet50_features", params=params.load("resnet50_features", "tiny"),
                     metrics={"images_per_s": 9.0}, steps=None, curve=None)
    _, r = good_record(tmp_path, **inference)
    assert r["flops"]["train"] is None and "steps" not in r and "curve" not in r


def test_schema_1_records_are_still_read(tmp_path):
    path, r = good_record(tmp_path)
    old = {k: v for k, v in r.items() if k not in ("first_step_s", "memory", "flops", "steps", "curve")}
    assert records.validate(old | {"schema": 1})["schema"] == 1
    with pytest.raises(records.RecordError, match="record lacks first_step_s, memory, flops, steps, curve"):
        records.validate(old)
    with pytest.raises(records.RecordError, match="schema 3 is not one of 1, 2"):
        records.validate(r | {"schema": 3})


def test_failed_records_must_carry_their_error(tmp_path):
    base = {"schema": 1, "task": "gru_imdb", "framework": "jax", "variant": "", "status": "failed", "profile": "tiny",
            "data": None, "params": {}, "timing": {}, "metrics": {}, "n_parameters": None, "environment": {}}
    with pytest.raises(records.RecordError, match="must say its error"):
        records.validate(base)
    assert records.validate(base | {"error": "ValueError: boom"})["status"] == "failed"


def test_reading_garbage_names_the_file(tmp_path):
    path = tmp_path / "x.json"
    path.write_text("{not json")
    with pytest.raises(records.RecordError, match="x.json"):
        records.read(path)


# Every way a record on disk can be malformed: the file's content, and the one line that must name it.
MALFORMED = {
    "not_json": ("{not json", "not JSON"),
    "a_list": ("[1, 2]", "a record is a JSON object, not list"),
    "missing_keys": ('{"schema": 1, "task": "cnn_cifar10"}', "record lacks framework, variant"),
    "timing_a_string": (None, 'timing is str "fast", not an object'),
    "median_a_string": (None, "timing median '3' is not a positive number"),
    "laps_with_null": (None, "timing.laps_s is list [null], not a list of numbers"),
    "nan_metric": (None, "records need metrics['accuracy'] as a number"),
    "environment_date_a_number": (None, "environment.date is int 20261123, not a string"),
    "bool_parameters": (None, "n_parameters is bool true, not an integer"),
    "binary": (b"\xff\xfe\x00", "not UTF-8 text"),
}


def malformed(tmp_path, name):
    """A record file broken in the named way (a good record changed in one field, or raw bytes)."""
    text, _ = MALFORMED[name]
    path = tmp_path / f"{name}.json"
    if text is not None:
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        return path
    _, record = good_record(tmp_path)
    change = {"timing_a_string": lambda r: r.update(timing="fast"),
              "median_a_string": lambda r: r["timing"].update(median_s="3"),
              "laps_with_null": lambda r: r["timing"].update(laps_s=[None]),
              "nan_metric": lambda r: r["metrics"].update(accuracy=float("nan")),
              "environment_date_a_number": lambda r: r["environment"].update(date=20261123),
              "bool_parameters": lambda r: r.update(n_parameters=True)}[name]
    change(record)
    path.write_text(json.dumps(record))
    return path


@pytest.mark.parametrize("name", MALFORMED)
def test_a_malformed_record_is_one_line_naming_the_file_and_the_field(tmp_path, name):
    path = malformed(tmp_path, name)
    with pytest.raises(records.RecordError) as err:
        records.read(path)
    message = str(err.value)
    assert message.startswith(f"{path}: ") and MALFORMED[name][1] in message and "\n" not in message
