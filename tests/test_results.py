"""The results layer (scripts/results.py): a run's identity as fields, the folder's layout, its lock, finalize."""

import ast
import json
from pathlib import Path

import pytest

from scripts import results, suite
from scripts.results import Identity, Layout
from support import records
from support.records import RecordError

COMMITTED = sorted((suite.ROOT / "results").glob("*/records/*/*.json"))


def ok_record(task="cnn_cifar10", framework="keras", variant="", profile="tiny") -> dict:
    """A notebook's own record, as records.write makes it (before the runner's finalize)."""
    from support import params, tasks

    metric = tasks.get(task).metric or "images_per_s"
    settings = params.load(task, profile)
    timing = {
        "unit": "epoch",
        "median_s": 1.0,
        "iqr_s": 0.1,
        "cv": 0.01,
        "n": 2,
        "warmup_s": [1.5],
        "samples_per_s": 10.0,
    }
    steps = {**timing, "unit": "step", "n": 3}
    return records.write(
        None,
        task=task,
        framework=framework,
        params=settings,
        data="synthetic",
        timing=timing,
        steps=steps,
        first_step_s=1.5,
        curve=[0.5, 0.6],
        metrics={metric: 0.6},
        n_parameters=10,
        environment={"machine": "test"},
        variant=variant,
    )


@pytest.mark.parametrize(
    ("identity", "variant"),
    [
        (Identity("cnn_cifar10", "pytorch"), ""),
        (Identity("cnn_cifar10", "mxnet", api="module"), "module"),
        (Identity("densenet_chestxray", "keras", api="jax", mode="ram", precision="bf16"), "jax-ram-bf16"),
        (Identity("densenet_chestxray", "pytorch", mode="ram", devices=2), "ram-2dev"),
        (Identity("cnn_cifar10", "keras", api="torch", compilation="on"), "torch-compiled"),
        (Identity("cnn_cifar10", "jax", compilation="off", sweep=True), "eager-sweep"),
        (Identity("gru_imdb", "pytorch", seed=43), "seed43"),
    ],
)
def test_the_labels_are_made_from_the_identity_fields_in_one_way(identity, variant):
    assert identity.variant == variant
    assert identity.key == "__".join(filter(None, (identity.task, identity.framework, variant)))
    assert Identity(**json.loads(json.dumps(identity.as_dict()))) == identity


def test_the_identity_of_a_runner_job_holds_the_notebook_parameters_and_the_matrix():
    identity = Identity.of(
        "densenet_chestxray",
        "keras",
        {"backend": "jax", "mode": "ram"},
        {"precision": "bf16", "devices": 2, "batch_sizes": "1,64"},
    )
    assert identity == Identity(
        "densenet_chestxray", "keras", api="jax", mode="ram", precision="bf16", devices=2, sweep=True
    )
    assert Identity.of("cnn_cifar10", "mxnet", {"api": "module"}) == Identity("cnn_cifar10", "mxnet", api="module")


@pytest.mark.parametrize(
    ("field", "value", "line"),
    [
        ("precision", "fp64", 'identity.precision is str "fp64"'),
        ("devices", 0, "identity.devices is int 0"),
        ("seed", "43", 'identity.seed is str "43"'),
    ],
)
def test_a_malformed_identity_is_refused_naming_the_field(field, value, line):
    record = {**ok_record(), "identity": {**Identity("cnn_cifar10", "pytorch").as_dict(), field: value}}
    with pytest.raises(RecordError, match=line):
        records.validate(record)
    del record["identity"]["sweep"]
    with pytest.raises(RecordError, match="identity lacks sweep"):
        records.validate(
            {**record, "identity": {**record["identity"], field: Identity.__dataclass_fields__[field].default}}
        )


def test_a_stored_record_is_named_by_its_identity_fields_never_by_its_strings(tmp_path):
    """The variant label, the key and the file name are outputs of the identity: a record whose strings say
    something else is still read as its fields say, and the report files it under its fields' key."""
    layout = Layout(tmp_path / "box")
    run = Identity("cnn_cifar10", "keras", api="jax", precision="bf16")
    stored = results.finalize(
        layout, ok_record(variant="torch"), run, "tiny", run="r1", wall_s=1.0, timed=True, inputs={}
    )
    assert (stored["key"], stored["variant"]) == ("cnn_cifar10__keras__jax-bf16", "jax-bf16")
    path = layout.record("tiny", run)
    doctored = {**json.loads(path.read_text()), "variant": "torch-eager", "key": "cnn_cifar10__keras__torch"}
    path.write_text(json.dumps(doctored))
    assert results.identity(results.read(path)) == run


# The places a name is decoded: records made before schema 3 (legacy_identity), and a file that is not a readable
# record at all, whose name is all there is to show (report.rows.unreadable_row); neither names a stored record.
SPLITS_ALLOWED = {"legacy_identity", "unreadable_row"}


def test_no_code_decodes_an_identity_from_a_label_or_a_file_name():
    """Fails where scripts/ or support/ splits a variant, key or file stem apart (outside legacy_identity)."""
    found = []
    for path in sorted((suite.ROOT / "scripts").rglob("*.py")) + sorted((suite.ROOT / "support").rglob("*.py")):
        tree = ast.parse(path.read_text())
        allowed = {
            id(node)
            for fn in ast.walk(tree)
            if isinstance(fn, ast.FunctionDef) and fn.name in SPLITS_ALLOWED
            for node in ast.walk(fn)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and id(node) not in allowed
                and node.func.attr in ("split", "rsplit", "partition", "rpartition")
            ):
                target = ast.unparse(node.func.value)
                if any(word in target for word in ("variant", "key", "stem", "label")):
                    found.append(f"{path.relative_to(suite.ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "an identity decoded from a string:\n" + "\n".join(found)


@pytest.mark.skipif(not COMMITTED, reason="no committed results")
def test_every_committed_record_is_filed_under_the_key_of_its_identity():
    for path in COMMITTED:
        record = results.read(path)
        assert results.identity(record).key == path.stem, path
        assert record["profile"] == path.parent.name, path


def test_a_record_made_before_schema_3_is_migrated_from_its_fields(tmp_path):
    old = {
        **ok_record("densenet_chestxray", "keras"),
        "schema": 2,
        "variant": "jax-ram-bf16",
        "matrix": {"precision": "bf16"},
        "inputs": {"parameters": {"backend": "jax", "mode": "ram"}},
    }
    assert results.identity(old) == Identity("densenet_chestxray", "keras", api="jax", mode="ram", precision="bf16")
    module = {
        **ok_record(framework="mxnet"),
        "schema": 2,
        "variant": "module-sweep",
        "matrix": {"batch_sizes": "1"},
        "inputs": {"parameters": {}},
    }  # the Module API's own notebook is run without an `api` parameter
    assert results.identity(module) == Identity("cnn_cifar10", "mxnet", api="module", sweep=True)
    folder = tmp_path / "results" / "box" / "records" / "cpu"
    folder.mkdir(parents=True)
    records.atomic_write_json(folder / "densenet_chestxray__keras__jax-ram-bf16.json", {**old, "profile": "cpu"})
    assert results.migrate(tmp_path / "results") == [folder / "densenet_chestxray__keras__jax-ram-bf16.json"]
    migrated = json.loads((folder / "densenet_chestxray__keras__jax-ram-bf16.json").read_text())
    assert migrated["schema"] == 2 and migrated["identity"]["api"] == "jax" and "matrix" not in migrated
    assert results.migrate(tmp_path / "results") == []  # once


def test_a_schema_3_record_without_its_identity_is_refused():
    with pytest.raises(RecordError, match="a schema-3 record must carry its identity"):
        results.identity({**ok_record(), "schema": 3})


def test_finalize_is_the_records_last_word_and_keeps_an_ok_record_a_failure_replaces(tmp_path):
    layout, run = Layout(tmp_path / "box"), Identity("cnn_cifar10", "pytorch")
    staged = layout.staged("tiny", run)
    staged["log"].parent.mkdir(parents=True)
    staged["log"].write_text("first log")
    results.finalize(
        layout, ok_record(framework="pytorch"), run, "tiny", staged=staged, run="r1", wall_s=1.0, timed=True, inputs={}
    )
    assert layout.log("tiny", run).read_text() == "first log" and not staged["log"].exists()
    assert not layout.executed("tiny", run).exists()
    failure = results.failed(run, "tiny", "box", "failed", "boom")
    stored = results.finalize(layout, failure, run, "tiny", staged=staged, run="r2", wall_s=2.0, timed=True, inputs={})
    assert stored["superseded"] == "records/tiny/superseded/cnn_cifar10__pytorch.json"
    assert records.read(layout.superseded("tiny", run))["status"] == "ok"
    assert not layout.log("tiny", run).exists()  # no earlier run's log beside the failed record
    assert results.read(layout.record("tiny", run))["error"] == "boom"
    with pytest.raises(RecordError, match="the record is of cnn_cifar10/pytorch, not of gru_imdb/pytorch"):
        results.finalize(layout, failure, Identity("gru_imdb", "pytorch"), "tiny", run="r3")


def test_a_second_holder_of_a_results_folder_is_refused_naming_the_first(tmp_path):
    layout = Layout(tmp_path / "box")
    with results.hold(layout, ["--profile", "tiny"]):
        with pytest.raises(
            SystemExit, match=r"is in use by another runner \(pid \d+ on .* run_all.py --profile tiny\)"
        ):
            with results.hold(layout, ["--other"]):
                pass
    with results.hold(layout, ["--again"]):  # released: the next one goes ahead
        assert "--again" in (layout.root / results.HOLDER_NAME).read_text()


def test_a_missing_or_malformed_run_file_is_one_line_naming_it(tmp_path):
    layout = Layout(tmp_path / "box")
    with pytest.raises(results.RunFileError, match=r"runs/r1.json: missing"):
        results.read_run(layout, "r1")
    layout.run_file("r1").parent.mkdir(parents=True)
    layout.run_file("r1").write_text("{")
    with pytest.raises(results.RunFileError, match=r"runs/r1.json: not readable JSON"):
        results.read_run(layout, "r1")
    results.write_run(layout, {"run": "r1", "calibration": {}})
    assert results.read_run(layout, "r1") == {"run": "r1", "calibration": {}}
    assert Path(layout.run_file("r1")).name == "r1.json"
