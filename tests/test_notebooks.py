"""Every notebook's shared structure (their executions: tests/test_notebook_runs.py)."""

import nbformat
import pytest

from scripts import suite
from support import tasks

NOTEBOOKS = sorted(suite.NOTEBOOKS.glob("*/*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_notebook_follows_the_shared_skeleton(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    framework = suite.notebook_framework(path.stem)  # mxnet_module.ipynb is MXNet's
    assert path.parent.name in suite.TASKS and framework in suite.FRAMEWORKS
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "parameters" in code[0].metadata.get("tags", []), "the first code cell must be tagged 'parameters'"
    assert "profile = " in code[0].source and "record_path = None" in code[0].source
    assert not any(c.outputs or c.execution_count for c in code), "source notebooks carry no outputs"
    assert nb.metadata.kernelspec.name == suite.kernel_name(suite.FRAMEWORKS[framework])
    assert nb.metadata.kernelspec.language == "python"
    for i, cell in enumerate(nb.cells[1:], start=1):  # a markdown line before each step
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
            f"{sorted(tasks.TASKS[task].declared)} (plus its own variant parameter {sorted(own)})"
        )


@pytest.mark.parametrize("task", suite.TASKS)
def test_notebooks_of_a_task_share_their_headings(task):
    reference = suite.check_headings(task)  # raises, naming the notebook and the heading, where one differs
    assert tuple(reference) == suite.learner_path(task) + (suite.MEASUREMENT,)  # the learner's path, then measurement
    steps = suite.section_headings(suite.notebook_path(task, "pytorch"), subsections=True)[len(reference) :]
    if task == "operators":  # one call times the whole plan
        assert steps == ["### Operators", "### Record"]
        return
    assert steps[0] == "### Initialisation" and "### Batch size" in steps and steps[-1] == "### Record"


def test_a_misaligned_heading_is_named_with_its_notebook(tmp_path):
    import shutil

    shutil.copytree(suite.NOTEBOOKS / "gru_imdb", tmp_path / "gru_imdb")
    nb = nbformat.read(tmp_path / "gru_imdb" / "jax.ipynb", as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "markdown" and c.source.startswith("## Train"))
    cell.source = cell.source.replace("## Train", "## Trian", 1)
    nbformat.write(nb, tmp_path / "gru_imdb" / "jax.ipynb")
    with pytest.raises(ValueError) as err:
        suite.check_headings("gru_imdb", tmp_path)
    assert str(err.value) == (
        f"{tmp_path / 'gru_imdb' / 'jax.ipynb'}: heading '## Trian' (position 5) where "
        f"{tmp_path / 'gru_imdb' / 'pytorch.ipynb'} has '## Train'; every notebook of a task "
        "needs pytorch's headings in pytorch's order"
    )
    (tmp_path / "gru_imdb" / "pytorch.ipynb").unlink()
    with pytest.raises(ValueError, match="pytorch.ipynb is missing"):
        suite.check_headings("gru_imdb", tmp_path)


def test_notebook_lines_counts_the_learners_path_its_harness_and_the_measurement(tmp_path):
    from scripts import notebook_lines

    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_markdown_cell("# Title\n\n## Data\n\nLoad it."),
            nbformat.v4.new_code_cell("x = 1\n\n# a comment only\ny = 2  # counted"),
            nbformat.v4.new_markdown_cell("## Model"),
            nbformat.v4.new_code_cell("class M:\n    pass"),
            nbformat.v4.new_markdown_cell("## Train"),
            nbformat.v4.new_code_cell("bench = measure.start(\n    'task')\nwith bench.epoch(3):\n    fit()"),
            nbformat.v4.new_markdown_cell("## Measurement"),
            nbformat.v4.new_code_cell("bench.steady_state(step)\nmeasure.write(bench)"),
        ]
    )
    nbformat.write(nb, tmp_path / "a.ipynb")
    assert notebook_lines.code_lines(tmp_path / "a.ipynb") == {
        "model": 2,
        "learner": 8,
        "harness": 3,
        "measurement": 2,
        "words": 12,
        "words_before_model": 6,
        "harness_share": 0.375,
    }


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_a_notebooks_learners_path_is_at_most_15_percent_harness(path):
    """Issue 29's bar, for every notebook already split into the learner's path and the measurement part."""
    from scripts import notebook_lines

    counts = notebook_lines.code_lines(path)
    assert counts["harness_share"] <= notebook_lines.LIMIT, counts
    assert counts["words_before_model"] <= notebook_lines.WORDS_BEFORE_MODEL, counts


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
            headings = {
                github_anchor(line.lstrip("#")) for line in document.read_text().splitlines() if line.startswith("#")
            }
            assert anchor in headings, f"{path.relative_to(suite.ROOT)} links {target}#{anchor}: no such heading"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_a_learners_path_holds_no_benchmark_call_workaround_or_precision_branch_in_a_function(path):
    """Issue 38: the benchmark's stops, checks and records under `## Measurement`; the machine's workarounds in the one
    cell tagged `concept:this-machine`; no step or evaluation function branching on `precision`
    (`python -m scripts.notebook_lines --leaks` lists them all)."""
    from scripts import notebook_lines

    assert notebook_lines.leaks(path) == []


def test_the_leak_check_finds_each_kind_and_spares_the_this_machine_cell_and_the_measurement(tmp_path):
    from scripts import notebook_lines

    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_markdown_cell("## Imports and versions"),
            nbformat.v4.new_code_cell(
                'os.environ["XLA_FLAGS"] = "--xla_cpu_experimental_ynn_fusion_type="',
                metadata={"tags": ["concept:this-machine"]},
            ),
            nbformat.v4.new_code_cell('os.environ.setdefault("OMP_NUM_THREADS", "2")\nx = 1  # XLA_FLAGS in a comment'),
            nbformat.v4.new_markdown_cell("## Train"),
            nbformat.v4.new_code_cell(
                'def step(x):\n    if precision == "fp16":\n        x = x.half()\n    return x\n'
                'amp = precision == "bf16"'
            ),
            nbformat.v4.new_code_cell('try:\n    amp.init()\nexcept TypeError:\n    bench.stop("no AMP")'),
            nbformat.v4.new_markdown_cell("## Measurement"),
            nbformat.v4.new_code_cell('bench.stop("fine here")\nmeasure.write(bench)'),
        ]
    )
    nbformat.write(nb, tmp_path / "a.ipynb")
    assert notebook_lines.leaks(tmp_path / "a.ipynb") == [
        f"{tmp_path / 'a.ipynb'}: cell 2: " + 'os.environ.setdefault("OMP_NUM_THREADS", "2")',
        f"{tmp_path / 'a.ipynb'}: cell 4: " + 'if precision == "fp16":  (precision inside a function)',
        f"{tmp_path / 'a.ipynb'}: cell 5: " + 'bench.stop("no AMP")',
    ]


def test_a_harness_call_counts_all_its_lines_and_a_harness_argument_its_own():
    """A harness call written over several lines is harness to its closing bracket; a formatted call of the
    framework's own counts only the line that passes the harness its argument."""
    from scripts import notebook_lines

    lines = [
        "bench = measure.start(",
        '    "cnn_cifar10",',
        "    settings,",
        ")",
        "model.compile(",
        "    optimizer=optimizer,",
        "    jit_compile=bench.compiled,",
        ")",
        "x = (1 +",
        "     2)",
    ]
    assert notebook_lines.harness_lines(lines) == 4 + 1
