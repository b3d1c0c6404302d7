"""support.records: well-formed records, atomic writes, clear validation errors, and the published JSON Schema
(docs/record.schema.json) that every committed record follows."""

import json
from pathlib import Path

import jsonschema
import pytest

from support import params, precision, records, tasks, timing

IDENTITY = {
    "task": "cnn_cifar10",
    "framework": "pytorch",
    "api": "",
    "mode": "",
    "precision": "fp32",
    "compilation": "auto",
    "devices": 1,
    "sweep": False,
    "seed": None,
}


def steady(samples: int = 4) -> dict:
    return timing.steady_state(lambda: None, steps=2, samples=samples)


def good_record(tmp_path, **changes):
    P = params.load("cnn_cifar10", "tiny")
    summary = timing.benchmark(lambda: None, repeats=2, warmup=1, samples=4)
    kwargs = dict(
        task="cnn_cifar10",
        framework="pytorch",
        params=P,
        data="synthetic",
        timing=summary,
        metrics={"accuracy": 0.5},
        n_parameters=10,
        environment={"machine": "m"},
        first_step_s=0.1,
        steps=steady(),
        curve=[0.3, 0.5],
    )
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
    records.write(
        None,
        task="gru_imdb",
        framework="x",
        params=P,
        data="real",
        timing=timing.benchmark(lambda: None, 1),
        metrics={"accuracy": 0.9},
        n_parameters=3,
        environment={},
        first_step_s=0.1,
        steps=steady(),
        curve=[0.9],
    )
    assert "gru_imdb / x" in capsys.readouterr().out and not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(metrics={}), "metrics\\['accuracy'\\]"),
        (dict(data="fake"), 'data is str "fake", not one of real, synthetic'),
        (dict(n_parameters=0), "n_parameters"),
        (dict(task="nope"), "unknown task"),
        (
            dict(extra={"parity": {"max_rel_error": float("nan")}}),
            "parity.max_rel_error is float NaN, not a number >= 0",
        ),
        (dict(extra={"compile_s": "12 s"}), 'compile_s is str "12 s", not a number >= 0'),
    ],
)
def test_bad_records_are_refused_with_the_reason(tmp_path, change, message):
    with pytest.raises(records.RecordError, match=message):
        good_record(tmp_path, **change)


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(curve=[0.3, 0.4]), "curve ends at 0.4, not at the final accuracy 0.5"),
        (dict(curve=[]), "curve is list \\[\\], not a list of numbers"),
        (dict(curve=None), "record lacks curve"),
        (dict(steps=None), "record lacks steps"),
        (
            dict(steps=timing.steady_state(lambda: None, steps=1, repeats=1, samples=4)),
            "steps.n is int 1, not an integer >= 2",
        ),
        (dict(steps=timing.steady_state(lambda: None, steps=1)), "steps.samples_per_s is null, not a number >= 0"),
        (dict(first_step_s=0.0), "first_step_s is float 0.0, not a number > 0"),
        (dict(compile_s=-1.0), "compile_s is float -1.0, not a number >= 0"),
        (dict(device_peak_bytes=-5), "memory.device_peak_bytes is int -5, not an integer >= 1 \\(or null\\)"),
        (dict(extra={"wall_s": float("inf")}), "wall_s is float Infinity, not a number >= 0"),
        (dict(curve=[float("nan"), 0.5]), "curve\\[0\\] is float NaN, not a number"),
    ],
)
def test_a_benchmark_field_missing_or_wrong_is_refused_naming_it(tmp_path, change, message):
    with pytest.raises(records.RecordError, match=message):
        good_record(tmp_path, **change)


def test_a_record_carries_memory_flops_and_the_first_step(tmp_path):
    _, r = good_record(tmp_path, compile_s=1.5, device_peak_bytes=2**30)
    assert r["schema"] == 3 and r["first_step_s"] == 0.1 and r["compile_s"] == 1.5
    assert r["memory"]["device_peak_bytes"] == 2**30 and r["memory"]["host_peak_bytes"] > 2**20  # bytes, not KiB
    assert r["flops"] == {"forward": 124528640, "train": 370821120}  # the CNN's, from support.flops
    assert r["steps"]["n"] == 7 and len(r["steps"]["laps_s"]) == 7 and r["curve"] == [0.3, 0.5]
    inference = dict(
        task="resnet50_features",
        params=params.load("resnet50_features", "tiny"),
        metrics={"images_per_s": 9.0},
        steps=None,
        curve=None,
    )
    _, r = good_record(tmp_path, **inference)
    assert r["flops"]["train"] is None and "steps" not in r and "curve" not in r


def test_schema_1_and_2_records_are_still_read(tmp_path):
    _, r = good_record(tmp_path)
    old = {k: v for k, v in r.items() if k not in ("first_step_s", "memory", "flops", "steps", "curve")}
    assert records.validate(old | {"schema": 1})["schema"] == 1
    with pytest.raises(records.RecordError, match="record lacks first_step_s, memory, flops, steps, curve"):
        records.validate(old)
    assert records.validate(r | {"schema": 2})["schema"] == 2
    with pytest.raises(records.RecordError, match="schema is int 4, not one of 1, 2, 3"):
        records.validate(r | {"schema": 4})


def test_failed_records_must_carry_their_error(tmp_path):
    base = {
        "schema": 1,
        "task": "gru_imdb",
        "framework": "jax",
        "variant": "",
        "status": "failed",
        "profile": "tiny",
        "data": None,
        "params": {},
        "timing": {},
        "metrics": {},
        "n_parameters": None,
        "environment": {},
    }
    with pytest.raises(records.RecordError, match="^a failed record must say its error$"):
        records.validate(base)
    with pytest.raises(records.RecordError, match="^a failed record must say its error$"):
        records.validate(base | {"error": ""})
    with pytest.raises(records.RecordError, match="^a not applicable record must say its reason \\(error\\)$"):
        records.validate(base | {"status": "not_applicable"})
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
    "median_a_string": (None, 'timing.median_s is str "3", not a number > 0'),
    "laps_with_null": (None, "timing.laps_s[0] is null, not a number"),
    "laps_not_n": (None, "timing.laps_s holds 1 laps, not n = 2"),
    "nan_metric": (None, "records need metrics['accuracy'] as a number"),
    "environment_date_a_number": (None, "environment.date is int 20261123, not a string"),
    "bool_parameters": (None, "n_parameters is bool true, not an integer"),
    "identity_without_seed": (None, "identity lacks seed"),
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
    change = {
        "timing_a_string": lambda r: r.update(timing="fast"),
        "median_a_string": lambda r: r["timing"].update(median_s="3"),
        "laps_with_null": lambda r: r["timing"].update(laps_s=[None]),
        "laps_not_n": lambda r: r["timing"].update(n=2, laps_s=[0.1]),
        "nan_metric": lambda r: r["metrics"].update(accuracy=float("nan")),
        "environment_date_a_number": lambda r: r["environment"].update(date=20261123),
        "bool_parameters": lambda r: r.update(n_parameters=True),
        "identity_without_seed": lambda r: r.update(identity={k: v for k, v in IDENTITY.items() if k != "seed"}),
    }[name]
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


def test_a_record_with_its_identity_and_key_is_schema_3(tmp_path):
    _, r = good_record(tmp_path, extra={"identity": IDENTITY, "key": "cnn_cifar10__pytorch"})
    assert r["schema"] == records.SCHEMA == 3 and records.validate(r)["identity"] == IDENTITY


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(identity=IDENTITY | {"devices": 0}), "^identity.devices is int 0, not an integer >= 1$"),
        (dict(identity=IDENTITY | {"precision": "fp8"}), '^identity.precision is str "fp8", not one of fp32, tf32, '),
        (dict(identity=IDENTITY | {"compilation": "on!"}), '^identity.compilation is str "on!", not one of auto, on, '),
        (dict(identity=IDENTITY | {"sweep": 1}), "^identity.sweep is int 1, not true or false$"),
        (dict(identity=IDENTITY | {"seed": "43"}), '^identity.seed is str "43", not an integer \\(or null\\)$'),
        (dict(identity=IDENTITY | {"colour": "red"}), "^identity has unknown colour$"),
        (dict(identity=[]), "^identity is list \\[\\], not an object$"),
        (dict(key=5), "^key is int 5, not a string$"),
    ],
)
def test_a_wrong_identity_is_refused_in_one_line_naming_its_field(tmp_path, change, message):
    _, r = good_record(tmp_path)
    with pytest.raises(records.RecordError, match=message):
        records.validate(r | change)


def test_the_published_schema_is_valid_and_describes_every_field():
    jsonschema.Draft202012Validator.check_schema(records.schema())
    undescribed = []

    def walk(node, where):
        for name, field in node.get("properties", {}).items():
            if not ({"description", "$ref"} & set(field)):  # a $ref's definition has its own
                undescribed.append(f"{where}.{name}")
            walk(field, f"{where}.{name}")
        for name, field in node.get("$defs", {}).items():
            walk(field, name)

    walk(records.schema(), "record")
    assert undescribed == []


def test_the_published_schema_names_the_values_the_code_knows():
    fields = records.schema()["properties"]
    identity = records.schema()["$defs"]["identity"]["properties"]
    assert tuple(fields["schema"]["enum"]) == records.SCHEMAS and records.SCHEMA == max(records.SCHEMAS)
    assert tuple(fields["status"]["enum"]) == records.STATUSES
    assert tuple(fields["profile"]["enum"]) == tasks.PROFILES
    assert fields["data"]["enum"] == [*records.DATA_KINDS, None]
    assert fields["precision"]["enum"] == identity["precision"]["enum"] == list(precision.PRECISIONS)
    assert set(identity["compilation"]["enum"]) == set(precision.COMPILATIONS)


COMMITTED = sorted(Path(records.__file__).resolve().parents[1].glob("results/*/records/**/*.json"))


def test_every_committed_record_follows_the_published_schema():
    validator = jsonschema.Draft202012Validator(records.schema())
    assert COMMITTED, "no committed records under results/*/records/"
    wrong = {}
    for path in COMMITTED:
        record = json.loads(path.read_text(encoding="utf-8"))
        error = jsonschema.exceptions.best_match(validator.iter_errors(record))
        if error is not None:
            wrong[str(path)] = error.message
        else:
            records.read(path)  # and the rules across fields
    assert wrong == {}
