"""scripts/build_site.py: the side-by-side reader, built from the committed results and read in headless Chromium.

The browser is Debian's `chromium`, driven by playwright (whose own browser downloads are never used).
The set-up installs it (scripts/setup_envs.py, as root with apt-get, as `make test` and CI run it); the tests
install nothing, and where it is missing they skip, saying how to install it. Screenshots go to pytest's temporary
folder, or to $DLR_SCREENSHOTS, and their paths are printed.
"""

import os
import shutil
from pathlib import Path
from urllib.parse import unquote, urlparse

import nbformat
import pytest

from scripts import build_site, report, results, setup_envs, suite
from scripts.report.rows import baseline
from scripts.report.tables import results_table
from support import records, tasks

MACHINE = suite.ROOT / "results" / "cpu-2c-amd-epyc-f26m2s1"  # committed results: every task at profile cpu
PROFILE = "cpu"
CHROMIUM = setup_envs.CHROMIUM
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The reader built from the committed results into a scratch folder (the repository is not written)."""
    return build_site.build(MACHINE, tmp_path_factory.mktemp("site"), profile=PROFILE).parent


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory):
    folder = Path(os.environ.get("DLR_SCREENSHOTS") or tmp_path_factory.mktemp("screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if not CHROMIUM.exists():
        pytest.skip(
            f"{CHROMIUM} is missing: `python3 -m scripts.setup_envs` installs it as root, or apt-get install "
            f"{' '.join(setup_envs.SYSTEM_PACKAGES)}"
        )
    from playwright.sync_api import sync_playwright

    # chromium keeps settings and caches under ~/.config and ~/.cache: the test's own folders instead
    home = tmp_path_factory.mktemp("browser-home")
    env = {**os.environ, "XDG_CONFIG_HOME": str(home / "config"), "XDG_CACHE_HOME": str(home / "cache")}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS, env=env)
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    page = browser.new_page(viewport={"width": 1600, "height": 1000})
    yield page
    page.close()


def headings(task):
    return [build_site.INTRODUCTION] + [h[3:] for h in suite.check_headings(task)]


def frameworks(task):
    """The page's columns: one per notebook (MXNet's Module API has its own beside Gluon's)."""
    return suite.stems(task)


def visible_columns(page) -> dict[str, set[str]]:
    """For each row (the column heads and every section), the frameworks whose column is visible."""
    return page.evaluate("""() => Object.fromEntries(
        Array.from(document.querySelectorAll('.heads, .step')).map(row => [
            row.dataset.section || 'heads',
            Array.from(row.querySelectorAll('.col')).filter(col => col.checkVisibility())
                .map(col => col.dataset.framework)]))""")


def test_the_site_has_an_index_and_a_page_per_task(site):
    assert {p.name for p in site.iterdir()} == (
        {"index.html", "concordance.html", "site.css", "site.js"} | {f"{t}.html" for t in suite.TASKS}
    )
    assert ".highlight .k " in (site / "site.css").read_text()  # Pygments' style travels with the site


@pytest.mark.parametrize("task", suite.TASKS)
def test_every_framework_and_section_is_on_the_page(site, page, task):
    page.goto((site / f"{task}.html").as_uri())
    sections = page.eval_on_selector_all(".step", "rows => rows.map(r => r.dataset.section)")
    assert sections == headings(task)
    for row in [".heads"] + [f'.step[data-section="{s}"]' for s in sections]:
        found = page.eval_on_selector_all(f"{row} .col", "cols => cols.map(c => c.dataset.framework)")
        assert found == frameworks(task), row
    assert page.locator(".step pre").count() >= len(frameworks(task)) * 5  # highlighted code in every column
    assert page.locator("#chooser input").count() == len(frameworks(task))


# Tasks whose quiet `cpu` run is not committed yet: their page must say so; a task that has results here fails until
# it leaves this set (a new task joins it until its first quiet run is committed).
PENDING: set = set()


@pytest.mark.parametrize("task", suite.TASKS)
def test_each_page_opens_with_its_results_and_plot(site, page, task):
    page.goto((site / f"{task}.html").as_uri())
    rows = [r for r in report.load_rows(MACHINE) if r["task"] == task and r["profile"] == PROFILE]
    if task in PENDING:
        assert not rows, f"{task} has committed results now: drop it from PENDING"
        assert "No results for this task" in page.inner_text(".results")
        return
    shown = baseline(rows)  # the page shows the baseline runs; results.md has the variants
    assert page.locator(".results table tbody tr").count() == len(shown)
    if tasks.get(task).matrix:  # every task's variants are in the committed results (operators have none)
        assert len(shown) < len(rows)
    text = page.inner_text(".results .provenance")
    assert f"Profile cpu on {MACHINE.name}; data: synthetic" in text and "Python 3.11" in text
    assert page.eval_on_selector(".results img.plot", "img => img.complete && img.naturalWidth") > 500


def test_columns_link_to_existing_notebooks_and_executed_copies(site, page):
    page.goto((site / "cnn_cifar10.html").as_uri())
    links = page.eval_on_selector_all(".heads a", "links => links.map(a => [a.textContent.trim(), a.href])")
    paths = [(text, Path(unquote(urlparse(url).path))) for text, url in links]
    assert [p for text, p in paths if text == "notebook"] == [
        suite.NOTEBOOKS / "cnn_cifar10" / f"{stem}.ipynb" for stem in frameworks("cnn_cifar10")
    ]
    assert "mxnet_module" in frameworks("cnn_cifar10")
    executed = [text for text, _ in paths if text.startswith("executed")]
    assert len(executed) == sum(len(suite.variants("cnn_cifar10", f)) for f in suite.FRAMEWORKS)
    assert {
        "executed (tensorflow)",
        "executed (jax)",
        "executed (torch)",
        "executed (gluon)",
        "executed (module)",
    } <= set(executed)
    assert all(p.exists() for _, p in paths), [p for _, p in paths if not p.exists()]


def test_choosing_two_frameworks_shows_exactly_those_two(site, page, screenshots):
    page.goto((site / "cnn_cifar10.html").as_uri())
    default = visible_columns(page)
    assert set(default) == {"heads", *headings("cnn_cifar10")}
    assert all(shown == ["pytorch", "tensorflow"] for shown in default.values()), default
    page.evaluate("window.sameDocument = true")
    for framework in ("tensorflow", "jax"):  # untick TensorFlow, tick JAX: no reload, the hash follows
        page.click(f'#chooser input[value="{framework}"]')
    assert all(shown == ["pytorch", "jax"] for shown in visible_columns(page).values())
    assert page.evaluate("location.hash") == "#pytorch,jax" and page.evaluate("window.sameDocument") is True
    widths = page.eval_on_selector_all(
        ".heads .col", "cols => cols.filter(c => c.checkVisibility()).map(c => c.getBoundingClientRect().width)"
    )
    assert len(widths) == 2 and abs(widths[0] - widths[1]) < 2  # equal columns
    page.screenshot(path=screenshots / "cnn_cifar10-pytorch-jax-full.png", full_page=True)
    page.click('.steps a[href="#s-model"]')
    assert page.evaluate("location.hash") == "#pytorch,jax"  # a step link keeps the choice
    path = screenshots / "cnn_cifar10-pytorch-jax.png"
    page.screenshot(path=path)
    assert path.stat().st_size > 50_000
    print(f"\nscreenshots: {path} (the CNN's Model step, PyTorch beside JAX) and {path.stem}-full.png")


def test_a_link_chooses_the_frameworks_through_its_hash(site, page):
    page.goto((site / "gru_imdb.html").as_uri() + "#keras,chainer,mxnet")
    assert all(shown == ["keras", "mxnet", "chainer"] for shown in visible_columns(page).values())
    boxes = page.eval_on_selector_all("#chooser input:checked", "boxes => boxes.map(b => b.value)")
    assert boxes == ["keras", "mxnet", "chainer"]


def test_the_index_has_the_matrix_of_notebooks_and_runs(site, page, screenshots):
    page.goto((site / "index.html").as_uri())
    header = page.eval_on_selector_all(".matrix thead th a", "links => links.map(a => a.getAttribute('href'))")
    assert header == [f"{t}.html" for t in suite.TASKS]
    rows = list(suite.FRAMEWORKS)
    rows.insert(rows.index("mxnet") + 1, "mxnet_module")  # a notebook of its own, a row of its own
    assert page.eval_on_selector_all(".matrix tbody tr", "rows => rows.map(r => r.dataset.row)") == rows
    records = [r for r in report.load_records(MACHINE) if r["profile"] == PROFILE and results.identity(r).baseline]
    assert page.locator(".matrix .status.ok").count() == sum(r["status"] == "ok" for r in records) == len(records)
    link = page.get_attribute('tr[data-row="jax"] td[data-task="cnn_cifar10"] a', "href")
    assert link == "cnn_cifar10.html#pytorch,jax"
    page.screenshot(path=screenshots / "index.png", full_page=True)


def test_a_misaligned_heading_stops_the_build_with_its_name(tmp_path, capsys):
    shutil.copytree(suite.NOTEBOOKS, tmp_path / "notebooks")
    path = tmp_path / "notebooks" / "cnn_cifar10" / "mxnet.ipynb"
    nb = nbformat.read(path, as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "markdown" and c.source.startswith("## Model"))
    cell.source = cell.source.replace("## Model", "## The model", 1)
    nbformat.write(nb, path)
    assert (
        build_site.main(
            [
                "--results",
                str(MACHINE.parent),
                "--machine",
                MACHINE.name,
                "--out",
                str(tmp_path / "site"),
                "--notebooks",
                str(tmp_path / "notebooks"),
            ]
        )
        == 1
    )
    assert capsys.readouterr().err == (
        f"build_site.py: {path}: heading '## The model' (position 4) where "
        f"{path.with_name('pytorch.ipynb')} has '## Model'; every notebook of a task "
        "needs pytorch's headings in pytorch's order\n"
    )


def test_a_task_without_results_still_shows_its_notebooks(tmp_path):
    index = build_site.build(tmp_path / "new-machine")
    assert index == tmp_path / "new-machine" / "site" / "index.html"
    text = (index.parent / "gru_imdb.html").read_text()
    assert "No results for this task on <code>new-machine</code>" in text and 'data-section="Train"' in text
    assert "No results for this machine yet" in index.read_text()


def test_the_results_table_is_the_reports_table_data_as_html_with_every_cell_escaped(tmp_path):
    """The task page's table is made from the same cells as results.md's (`tables.results_table`), not from its
    Markdown: the same heads and rows, a failed row's status in bold, an error's markup and pipes shown as text."""
    from tests.test_report import write

    machine = tmp_path / "box"
    write(machine, "pytorch", 0.9)
    error = "ValueError: <script>alert(1)</script> (4|8) **not bold**"
    failed = records.failed("cnn_cifar10", "jax", "", "tiny", "here", "failed", error)
    results.finalize(results.Layout(machine), failed, results.Identity("cnn_cifar10", "jax"), "tiny")
    page = (build_site.build(machine, profile="tiny").parent / "cnn_cifar10.html").read_text()
    table = results_table(baseline([r for r in report.load_rows(machine) if r["task"] == "cnn_cifar10"]))
    html = page.split('<div class="table">', 1)[1].split("</table>", 1)[0]
    assert html.count("</th>") == len(table.header) and html.count("<tr>") == 1 + len(table.rows) == 3
    assert '<th class="num">step ms (median)</th>' in html and "<td>pytorch</td><td>ok</td>" in html
    assert (
        "<td>jax</td><td><strong>failed</strong>: ValueError: &lt;script&gt;alert(1)&lt;/script&gt; (4|8) "
        "**not bold**</td>"
    ) in html
    assert "alert(1)</script>" not in page and "Profile <code>tiny</code> on <code>box</code>" in page


# The concordance's rows: every concept a task's notebooks must tag, each written as its framework's tutorial would
# (issue 29): the input pipeline, the initialisation, the loop, the metrics, resuming. DenseNet-121 adds data
# parallelism; ResNet-50 extracts features: nothing is trained, saved or restored.
TUTORIAL_CONCEPTS = [
    "this-machine",
    "device",
    "hyperparameters",
    "input-pipeline",
    "mixed-precision",
    "model",
    "initialise",
    "build",
    "loss",
    "compile",
    "gradient",
    "optimizer-step",
    "eval-mode",
    "no-grad",
    "metrics",
    "train-mode",
    "training-loop",
    "evaluate",
    "save",
    "load",
    "resume",
    "export",
]
CONCEPTS = {
    "cnn_cifar10": TUTORIAL_CONCEPTS,
    "gru_imdb": TUTORIAL_CONCEPTS,
    "densenet_chestxray": [*TUTORIAL_CONCEPTS[:8], "data-parallel", *TUTORIAL_CONCEPTS[8:]],
    "resnet50_features": [
        "this-machine",
        "device",
        "mixed-precision",
        "model",
        "initialise",
        "build",
        "compile",
        "eval-mode",
        "no-grad",
        "export",
    ],
    "operators": ["this-machine", "device", "operations", "sync", "warmup", "compile"],
}


def test_the_concordance_has_every_concept_of_every_task_in_every_framework(site, page, screenshots):
    page.goto((site / "concordance.html").as_uri() + "#" + ",".join(suite.FRAMEWORKS))
    tasks = page.eval_on_selector_all(".concordance", "tables => tables.map(t => t.dataset.task)")
    assert tasks == list(suite.TASKS)
    for task in suite.TASKS:
        concepts = page.eval_on_selector_all(
            f'.concordance[data-task="{task}"] .concept', "rows => rows.map(r => r.dataset.concept)"
        )
        assert concepts == CONCEPTS[task], task
        for concept in concepts:
            row = f'.concordance[data-task="{task}"] .concept[data-concept="{concept}"]'
            cells = page.eval_on_selector_all(
                f"{row} .col",
                """cols => cols.map(c => [c.dataset.framework,
                c.querySelectorAll('.code pre, .md p').length, c.querySelectorAll('a.place').length])""",
            )
            assert [f for f, _, _ in cells] == frameworks(task), (task, concept)
            assert all(shown and links for _, shown, links in cells), (task, concept, cells)
    page.goto((site / "concordance.html").as_uri())  # the default pair, as a reader first sees it
    assert all(
        page.locator(f'.concordance .col[data-framework="{f}"]').first.is_visible() is (f in ("pytorch", "tensorflow"))
        for f in suite.FRAMEWORKS
    )
    path = screenshots / "concordance.png"
    page.screenshot(path=path)
    assert path.stat().st_size > 50_000
    print(f"\nscreenshot: {path} (the concordance's first rows, PyTorch beside TensorFlow)")


def test_a_concordance_link_opens_its_cell_on_the_task_page(site, page, screenshots):
    page.goto((site / "concordance.html").as_uri())
    link = page.locator(
        '.concordance[data-task="gru_imdb"] .concept[data-concept="gradient"] .col[data-framework="tensorflow"] a.place'
    ).first
    target = link.get_attribute("href")
    assert target.startswith("gru_imdb.html#cell-tensorflow-")
    link.click()
    page.wait_for_load_state()
    assert page.url.endswith(target)
    cell = page.locator(f"#{target.split('#')[1]}")
    assert cell.is_visible() and "target" in cell.get_attribute("class")
    box = cell.bounding_box()
    bar = page.locator(".bar").bounding_box()
    assert bar["height"] <= box["y"] < page.viewport_size["height"]  # below the sticky bar, on screen
    assert all(shown == ["pytorch", "tensorflow"] for shown in visible_columns(page).values())
    page.goto((site / "concordance.html").as_uri())
    page.locator(
        '.concordance[data-task="cnn_cifar10"] .concept[data-concept="compile"] .col[data-framework="pytorch"] a.place'
    ).first.click()
    page.wait_for_load_state()
    assert all(shown == ["pytorch", "tensorflow"] for shown in visible_columns(page).values())
    page.screenshot(path=screenshots / "concordance-link.png")


def edited_notebooks(tmp_path, task, framework, edit):
    """A copy of the notebooks with one notebook changed by `edit(nb)`; returns its path."""
    shutil.copytree(suite.NOTEBOOKS, tmp_path / "notebooks")
    path = tmp_path / "notebooks" / task / f"{framework}.ipynb"
    nb = nbformat.read(path, as_version=4)
    edit(nb)
    nbformat.write(nb, path)
    return path


def build_fails(tmp_path, capsys) -> str:
    assert (
        build_site.main(
            [
                "--results",
                str(MACHINE.parent),
                "--machine",
                MACHINE.name,
                "--out",
                str(tmp_path / "site"),
                "--notebooks",
                str(tmp_path / "notebooks"),
            ]
        )
        == 1
    )
    assert not (tmp_path / "site").exists()  # checked before anything is written
    return capsys.readouterr().err


def test_a_notebook_without_a_concept_stops_the_build_with_its_name(tmp_path, capsys):
    def untag(nb):
        for cell in nb.cells:
            cell.metadata["tags"] = [t for t in cell.metadata.get("tags", []) if t != "concept:compile"]

    path = edited_notebooks(tmp_path, "gru_imdb", "chainer", untag)
    err = build_fails(tmp_path, capsys)
    assert err.startswith(
        f"build_site.py: {path} has no cell tagged 'concept:compile' (Compile), which pytorch.ipynb, "
    )
    assert err.rstrip().endswith(
        "tag the cell that does it, or the markdown cell that says why this framework needs none"
    )
    assert err.count("\n") == 1


def test_an_unknown_concept_tag_stops_the_build_with_its_name(tmp_path, capsys):
    def mistag(nb):
        cell = next(c for c in nb.cells if c.cell_type == "code" and "concept:loss" in c.metadata.get("tags", []))
        cell.metadata["tags"] = [t.replace("concept:loss", "concept:losses") for t in cell.metadata["tags"]]

    path = edited_notebooks(tmp_path, "cnn_cifar10", "jax", mistag)
    err = build_fails(tmp_path, capsys)
    assert err.startswith(f"build_site.py: {path}: cell ")
    assert "has the tag 'concept:losses', which is no concept" in err
    assert "concept:loss, concept:sync, concept:warmup, concept:compile, concept:gradient" in err
    assert err.count("\n") == 1


def test_every_notebook_keeps_each_concept_in_the_same_section_and_order_as_the_others_of_its_task():
    """Issue 38: docs/contributing.md's concept map, as the reader's build checks it (no results or browser needed)."""
    assert build_site.check() == []


def test_a_concept_under_another_heading_stops_the_build_with_the_notebook_and_the_place(tmp_path, capsys):
    def move_compile_to_model(nb):  # JAX compiles its step under Train; the tag moves to a Model cell
        for cell in nb.cells:
            cell.metadata["tags"] = [t for t in cell.metadata.get("tags", []) if t != "concept:compile"]
        model = next(c for c in nb.cells if "concept:model" in c.metadata.get("tags", []))
        model.metadata["tags"].append("concept:compile")

    path = edited_notebooks(tmp_path, "cnn_cifar10", "jax", move_compile_to_model)
    err = build_fails(tmp_path, capsys)
    assert err == (
        f"build_site.py: {path}: 'concept:compile' (Compile) first stands under '## Model', where "
        "pytorch.ipynb has it under '## Train'; every notebook of a task keeps each concept in one place "
        "(docs/contributing.md: the concept map)\n"
    )


def test_two_concepts_in_the_opposite_order_stop_the_build_with_the_notebook(tmp_path, capsys):
    def swap_save_and_load(nb):  # the same section, the other order
        for cell in nb.cells:
            tags = cell.metadata.get("tags", [])
            cell.metadata["tags"] = [
                "concept:load" if t == "concept:save" else "concept:save" if t == "concept:load" else t for t in tags
            ]

    path = edited_notebooks(tmp_path, "gru_imdb", "tensorflow", swap_save_and_load)
    err = build_fails(tmp_path, capsys)
    assert err == (
        f"build_site.py: {path}: 'concept:load' (Load) comes before 'concept:save' (Save), where "
        "pytorch.ipynb has it after; every notebook of a task keeps its concepts in one order "
        "(docs/contributing.md: the concept map)\n"
    )


def test_the_cnn_page_shows_each_concept_in_the_same_row_for_every_framework(site, page, screenshots):
    """Issue 38: read down the CNN's page with every framework beside PyTorch, each concept's first cell sits in the
    same step (row) in every column."""
    page.goto((site / "cnn_cifar10.html").as_uri() + "#" + ",".join(suite.stems("cnn_cifar10")))
    found = page.eval_on_selector_all(
        "[data-concepts]",
        """cells => cells.map(c => [
        c.closest('.col').dataset.framework, c.closest('section.step').dataset.section, c.dataset.concepts])""",
    )
    first: dict[str, dict[str, str]] = {}
    for framework, section, concepts in found:
        for concept in concepts.split():
            first.setdefault(concept, {}).setdefault(framework, section)
    assert set(first) == set(CONCEPTS["cnn_cifar10"])
    for concept, sections in first.items():
        assert set(sections) == set(suite.stems("cnn_cifar10")), concept
        assert len(set(sections.values())) == 1, (concept, sections)
    page.click('.steps a[href="#s-train"]')
    path = screenshots / "cnn_cifar10-every-framework-train.png"
    page.screenshot(path=path)
    assert path.stat().st_size > 50_000
    print(f"\nscreenshot: {path} (the CNN's Train step, every framework side by side)")
