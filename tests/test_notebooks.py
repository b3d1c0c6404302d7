"""Every notebook: the shared structure, and a real run at the tiny profile in its kernel."""
import json

import nbformat
import pytest

from scripts import run_all, suite
from support import parity, records, tasks

NOTEBOOKS = sorted(suite.NOTEBOOKS.glob("*/*.ipynb"))
JOBS = run_all.plan(run_all.parse_args(["--profile", "tiny"]))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_notebook_follows_the_shared_skeleton(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert path.parent.name in suite.TASKS and path.stem in suite.FRAMEWORKS
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "parameters" in code[0].metadata.get("tags", []), "the first code cell must be tagged 'parameters'"
    assert "profile = " in code[0].source and "record_path = None" in code[0].source
    assert not any(c.outputs or c.execution_count for c in code), "source notebooks carry no outputs"
    assert nb.metadata.kernelspec.name == suite.kernel_name(suite.FRAMEWORKS[path.stem])
    assert nb.metadata.kernelspec.language == "python"
    for i, cell in enumerate(nb.cells[1:], start=1):     # a markdown line before each step
        if cell.cell_type == "code":
            assert nb.cells[i - 1].cell_type == "markdown", f"code cell {i} has no markdown before it"


@pytest.mark.parametrize("task", suite.TASKS)
def test_every_notebook_of_a_task_declares_the_registrys_parameters(task):
    """The runner passes a notebook only what papermill finds declared, so a parameter missing from one
    notebook would silently keep its default there: every notebook of a task declares the same ones."""
    import papermill

    for path in sorted((suite.NOTEBOOKS / task).glob("*.ipynb")):
        declared = set(papermill.inspect_notebook(str(path)))
        own = {name for (t, f), (name, _) in suite.VARIANTS.items() if f == path.stem and t in ("*", task)}
        assert declared - own == set(tasks.TASKS[task].declared), (
            f"{path.relative_to(suite.ROOT)} declares {sorted(declared)}; support/tasks.py says "
            f"{sorted(tasks.TASKS[task].declared)} (plus its own variant parameter {sorted(own)})")


@pytest.mark.parametrize("task", suite.TASKS)
def test_notebooks_of_a_task_share_their_headings(task):
    reference = suite.check_headings(task)      # raises, naming the notebook and the heading, where one differs
    assert reference[:4] == ["## Parameters", "## Imports and versions", "## Precision and compilation", "## Data"]
    assert "## Batch size" in reference and reference[-1] == "## Record"


def test_a_misaligned_heading_is_named_with_its_notebook(tmp_path):
    import shutil

    shutil.copytree(suite.NOTEBOOKS / "gru_imdb", tmp_path / "gru_imdb")
    nb = nbformat.read(tmp_path / "gru_imdb" / "jax.ipynb", as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "markdown" and c.source.startswith("## Train"))
    cell.source = cell.source.replace("## Train", "## Trian", 1)
    nbformat.write(nb, tmp_path / "gru_imdb" / "jax.ipynb")
    with pytest.raises(ValueError) as err:
        suite.check_headings("gru_imdb", tmp_path)
    assert str(err.value) == (f"{tmp_path / 'gru_imdb' / 'jax.ipynb'}: heading '## Trian' (position 6) where "
                              f"{tmp_path / 'gru_imdb' / 'pytorch.ipynb'} has '## Train'; every notebook of a task "
                              "needs pytorch's headings in pytorch's order")
    (tmp_path / "gru_imdb" / "pytorch.ipynb").unlink()
    with pytest.raises(ValueError, match="pytorch.ipynb is missing"):
        suite.check_headings("gru_imdb", tmp_path)


@pytest.fixture(scope="module")
def tiny_suite(tmp_path_factory):
    """The real suite at the tiny profile with the parity steps, through the runner, into a scratch results folder:
    synthetic data always (a machine online would otherwise download CIFAR-10 and IMDB), two notebooks at a time
    (smoke runs measure nothing; their records are marked not timed)."""
    results = tmp_path_factory.mktemp("results")
    run_all.main(["--profile", "tiny", "--parity", "--data", "synthetic", "--jobs", "2", "--results", str(results),
                  "--machine", "ci", "--no-readme"])
    return results / "ci"


@pytest.mark.parametrize("job", JOBS, ids=lambda j: j.key)
def test_notebook_runs_at_tiny_and_writes_a_valid_record(tiny_suite, job):
    path = tiny_suite / "records" / "tiny" / f"{job.key}.json"
    record = json.loads(path.read_text())
    assert record["status"] == "ok", f"{job.title} failed: {record.get('error')} (log: {record.get('log')})"
    records.validate(record)
    assert (record["task"], record["framework"], record["variant"]) == (job.task, job.framework, job.variant)
    assert record["profile"] == "tiny" and record["timing"]["n"] >= 1 and record["timed"] is False
    assert record["data"] in (None, "synthetic") and record["inputs"]["parameters"].get("data", "synthetic") == "synthetic"
    assert (tiny_suite / record["executed_notebook"]).exists()
    if job.task == "resnet50_features":
        assert record["feature_shape"][1] == 2048
    if job.task == "densenet_chestxray":
        assert len(record["metrics"]["auc_per_label"]) == 14


@pytest.mark.parametrize("job", [j for j in JOBS if j.task in ("cnn_cifar10", "gru_imdb")], ids=lambda j: j.key)
def test_training_learns_beyond_chance_on_the_learnable_synthetic_data(tiny_suite, job):
    record = json.loads((tiny_suite / "records" / "tiny" / f"{job.key}.json").read_text())
    chance = 1 / record["params"]["n_classes"]
    assert record["data"] == "synthetic"
    assert record["metrics"]["accuracy"] > chance + 0.2, f"{job.title}: accuracy {record['metrics']['accuracy']}"


@pytest.mark.parametrize("job", JOBS, ids=lambda j: j.key)
def test_every_record_has_the_benchmark_fields(tiny_suite, job):
    record = json.loads((tiny_suite / "records" / "tiny" / f"{job.key}.json").read_text())
    task = tasks.get(job.task)
    assert record["schema"] == 2 and record["first_step_s"] > 0 and record["memory"]["host_peak_bytes"] > 2 ** 20
    assert record["memory"]["device_peak_bytes"] is None                       # the CPU has no allocator peak
    assert record["flops"]["forward"] > 0
    if task.unit == "epoch":                                                  # training: repeats and a curve
        assert record["steps"]["n"] >= 7 and len(record["steps"]["laps_s"]) == record["steps"]["n"]
        assert len(record["curve"]) == record["params"]["epochs"]
    else:
        assert record["timing"]["n"] >= 7 and record["timing"]["p95_s"] >= record["timing"]["median_s"]


def test_the_tiny_suite_measured_the_machine_before_and_after(tiny_suite):
    (run,) = (tiny_suite / "runs").glob("*.json")
    meta = json.loads(run.read_text())
    for when in ("before", "after"):
        assert meta["calibration"][when]["cpu/float32"]["gflops"] > 0
    assert 0 < meta["harness_overhead_s"] < 1e-3 and meta["timed"] is False


def test_the_tiny_suite_fills_the_tables(tiny_suite):
    rows = (tiny_suite / "results.csv").read_text().splitlines()
    assert len(rows) == 1 + len(JOBS)
    assert all(f"plots/tiny/{task}.png" in (tiny_suite / "results.md").read_text() for task in suite.TASKS)


TRAINING_TASKS = [t for t in suite.TASKS if tasks.get(t).unit == "epoch"]


@pytest.mark.parametrize("job", [j for j in JOBS if j.task in TRAINING_TASKS], ids=lambda j: j.key)
def test_the_saved_model_loads_into_a_fresh_one_that_computes_the_same(tiny_suite, private_cache, job):
    record = json.loads((tiny_suite / "records" / "tiny" / f"{job.key}.json").read_text())
    assert "save_load" in record, f"{job.title} recorded no save-and-load check"
    error = record["save_load"]["max_rel_error"]
    assert error < parity.TOLERANCE, f"{job.title}: the restored model deviates by {error:.1e} of the outputs' scale"
    saved = [p for p in (private_cache / "scratch" / job.task / job.framework).rglob("*") if p.is_file()]
    assert saved and all(p.stat().st_size > 0 for p in saved), f"{job.title} left nothing in its scratch folder"


# ONNX: job key -> the text of the error that keeps its exported graph from running in ONNX Runtime
# (recorded by the notebook as {"onnx": {"unavailable": ...}}, and said in the notebook and README).
JAX2ONNX_CONV = "parameters to jaxpr equations must have __hash__ and __eq__"      # nnx.Conv's explicit padding
JAX2ONNX_POOL = "MaxPool node"                     # MaxPooling2D as a 4-D MaxPool that ONNX Runtime rejects
ONNX_UNAVAILABLE = {
    "densenet_chestxray__jax__loader": JAX2ONNX_CONV, "densenet_chestxray__jax__ram": JAX2ONNX_CONV,
    "resnet50_features__jax": JAX2ONNX_CONV,
    "cnn_cifar10__keras__jax": JAX2ONNX_POOL, "resnet50_features__keras__jax": JAX2ONNX_POOL,
    "densenet_chestxray__keras__jax-loader": JAX2ONNX_POOL, "densenet_chestxray__keras__jax-ram": JAX2ONNX_POOL,
    "gru_imdb__chainer": "KeyError: 'Permutate'",     # onnx-chainer 1.3.2 cannot convert L.NStepGRU's functions
}


@pytest.mark.parametrize("job", JOBS, ids=lambda j: j.key)
def test_the_exported_onnx_graph_computes_the_same_in_onnx_runtime(tiny_suite, job):
    record = json.loads((tiny_suite / "records" / "tiny" / f"{job.key}.json").read_text())
    assert "onnx" in record, f"{job.title} recorded no ONNX export check"
    if job.key in ONNX_UNAVAILABLE:
        assert ONNX_UNAVAILABLE[job.key] in record["onnx"].get("unavailable", ""), (
            f"{job.title} now exports ({record['onnx']}): drop its entry from ONNX_UNAVAILABLE and the README")
        pytest.xfail(f"{job.title}: {record['onnx']['unavailable']}")
    assert "unavailable" not in record["onnx"], f"{job.title}: {record['onnx']['unavailable']}"
    error = record["onnx"]["max_rel_error"]
    assert error < parity.TOLERANCE, f"{job.title}: ONNX Runtime deviates by {error:.1e} of the outputs' scale"


# Parity: (task, framework) -> why its notebook cannot reach parity.TOLERANCE. Empty: every
# framework computes the reference's function; an entry here must also be explained in the notebook.
PARITY_EXCEPTIONS = {}

# Trainable parameters of the PyTorch models (torchvision's DenseNet-121 with 14 outputs, ResNet-50
# without fc), and (task, framework) -> why a framework's model counts otherwise.
N_PARAMETERS = {task: parity.n_parameters(task) for task in parity.TASKS} | {"densenet_chestxray": 6_968_206}
N_PARAMETERS_EXCEPTIONS = {}


@pytest.mark.parametrize("job", [j for j in JOBS if j.task in parity.TASKS], ids=lambda j: j.key)
def test_parity_step_matches_the_numpy_reference(tiny_suite, job):
    record = json.loads((tiny_suite / "records" / "tiny" / f"{job.key}.json").read_text())
    assert "parity" in record, f"{job.title} ran with parity=True but recorded no parity result"
    error = record["parity"]["max_rel_error"]
    if (job.task, job.framework) in PARITY_EXCEPTIONS:
        assert error >= parity.TOLERANCE, f"{job.title} now reaches parity: drop its entry from PARITY_EXCEPTIONS"
        pytest.xfail(f"{job.framework}: {PARITY_EXCEPTIONS[job.task, job.framework]}")
    assert error < parity.TOLERANCE, (f"{job.title}: outputs deviate from the numpy reference by {error:.1e} "
                                      f"of their scale (tolerance {parity.TOLERANCE:g})")


@pytest.mark.parametrize("job", JOBS, ids=lambda j: j.key)
def test_every_model_counts_pytorchs_parameters(tiny_suite, job):
    record = json.loads((tiny_suite / "records" / "tiny" / f"{job.key}.json").read_text())
    reason = N_PARAMETERS_EXCEPTIONS.get((job.task, job.framework))
    if reason:
        assert record["n_parameters"] != N_PARAMETERS[job.task], f"{job.title}: now equal, drop the exception"
        pytest.xfail(f"{job.framework}: {reason}")
    assert record["n_parameters"] == N_PARAMETERS[job.task], (
        f"{job.title} counts {record['n_parameters']:,} trainable parameters, PyTorch {N_PARAMETERS[job.task]:,}")


def test_the_tiny_suite_builds_the_side_by_side_reader(tiny_suite):
    site = tiny_suite / "site"
    assert all((site / f"{task}.html").exists() for task in suite.TASKS) and (site / "site.css").exists()
    assert "profile <code>tiny</code>" in (site / "index.html").read_text()
    cnn = (site / "cnn_cifar10.html").read_text()
    assert 'data-section="Train"' in cnn and "executed (module)</a>" in cnn and "../plots/tiny/cnn_cifar10.png" in cnn


def test_notebook_lines_counts_model_and_other_code_and_the_prose(tmp_path):
    from scripts import notebook_lines

    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# Title\n\n## Data\n\nLoad it."),
        nbformat.v4.new_code_cell("x = 1\n\n# a comment only\ny = 2  # counted"),
        nbformat.v4.new_markdown_cell("## Model"),
        nbformat.v4.new_code_cell("class M:\n    pass"),
        nbformat.v4.new_markdown_cell("## Train"),
        nbformat.v4.new_code_cell("fit()")])
    nbformat.write(nb, tmp_path / "a.ipynb")
    assert notebook_lines.code_lines(tmp_path / "a.ipynb") == {"model": 2, "other": 3, "words": 10}


def github_anchor(heading: str) -> str:
    """The id GitHub gives a markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    import re
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_links_to_the_projects_notes_reach_their_headings(path):
    """The notebooks keep one sentence and a link where a performance story moved to PERFORMANCE.md
    (or a convention to LESSONS.md): every such link names a file and a heading that exist."""
    import re

    text = path.read_text()
    for target, anchor in re.findall(r"\]\(((?:\.\./)+[\w./-]+\.md)(?:#([\w-]+))?\)", text):
        document = (path.parent / target).resolve()
        assert document.exists(), f"{path.name} links {target}, which does not exist"
        if anchor:
            headings = {github_anchor(line.lstrip("#")) for line in document.read_text().splitlines()
                        if line.startswith("#")}
            assert anchor in headings, f"{path.relative_to(suite.ROOT)} links {target}#{anchor}: no such heading"
