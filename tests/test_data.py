"""support.data: the real on-disk formats, synthetic stand-ins, checksums and clear errors."""

import csv
import hashlib
import http.server
import io
import multiprocessing
import os
import pickle
import queue
import shutil
import tarfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from support import data as D
from support import synthetic

# --- CIFAR-10 ---------------------------------------------------------------------------------


def test_synthetic_cifar10_is_a_real_cifar_tarball(tmp_path):
    path = tmp_path / "cifar-10-python.tar.gz"
    synthetic.write_synthetic_cifar10(path, n_train=50, n_test=20)
    with tarfile.open(path) as tar:
        names = set(tar.getnames())
        meta = pickle.load(tar.extractfile("cifar-10-batches-py/batches.meta"), encoding="latin1")
        batch = pickle.load(tar.extractfile("cifar-10-batches-py/data_batch_1"), encoding="latin1")
    assert {f"cifar-10-batches-py/data_batch_{i}" for i in range(1, 6)} <= names
    assert "cifar-10-batches-py/test_batch" in names
    assert meta["label_names"] == list(D.CIFAR10_CLASSES)
    assert batch["data"].dtype == np.uint8 and batch["data"].shape == (10, 3072)
    x_train, y_train, x_test, y_test = D.read_cifar10(path)
    assert x_train.shape == (50, 3, 32, 32) and x_test.shape == (20, 3, 32, 32)
    assert y_train.dtype == np.int32 and set(np.unique(y_train)) <= set(range(10))


def test_synthetic_cifar10_has_a_ceiling_near_091_that_a_template_matcher_reaches(tmp_path):
    """Its images hold enough evidence for about 0.91 (the label noise's ceiling): matching each image
    against the writer's own patterns gets there, so a short run's lower accuracy is the model's."""
    path = tmp_path / "cifar-10-python.tar.gz"
    synthetic.write_synthetic_cifar10(path, n_train=5, n_test=2000)
    _, _, x_test, y_test = D.read_cifar10(path)
    patterns = synthetic.cifar10_patterns(np.random.RandomState(0)).reshape(10, synthetic.CIFAR_MODES, -1)  # seed 0's
    patterns /= np.linalg.norm(patterns, axis=-1, keepdims=True)
    match = np.einsum("nd,cmd->ncm", x_test.reshape(2000, -1) - 127.0, patterns).max(-1)  # best mode per class
    assert 0.88 < (match.argmax(1) == y_test).mean() < 0.94


def test_cifar10_reads_a_user_tarball_in_both_layouts(tmp_path, no_network):
    path = tmp_path / "cifar-10-python.tar.gz"
    synthetic.write_synthetic_cifar10(path, n_train=100, n_test=40)
    nchw = D.cifar10(tmp_path, n_train=60, n_test=30)  # a folder holding the tarball
    nhwc = D.cifar10(path, n_train=60, n_test=30, channel_first=False)
    assert nchw.kind == "real" and nchw.source == str(path)
    assert nchw.x_train.shape == (60, 3, 32, 32) and nchw.x_test.shape == (30, 3, 32, 32)
    assert nchw.x_train.dtype == np.float32 and nchw.y_train.dtype == np.int32
    np.testing.assert_allclose(nchw.x_train.mean(axis=(0, 2, 3)), 0, atol=1e-4)  # standardised per channel
    np.testing.assert_allclose(nchw.x_train.std(axis=(0, 2, 3)), 1, atol=1e-4)
    np.testing.assert_array_equal(nhwc.x_train, np.moveaxis(nchw.x_train, 1, -1))


def test_cifar10_falls_back_to_synthetic_offline_and_says_so(no_network, capsys):
    ds = D.cifar10("auto", n_train=40, n_test=20)
    assert ds.kind == "synthetic" and ds.x_train.shape == (40, 3, 32, 32)
    assert "using synthetic CIFAR-10" in capsys.readouterr().out


def test_cifar10_real_without_data_is_a_one_line_error(no_network):
    with pytest.raises(D.DataError) as err:
        D.cifar10("real")
    message = str(err.value)
    assert "\n" not in message and D.CIFAR10_URL in message and "could not be downloaded" in message


def test_corrupt_cached_tarball_fails_the_checksum_naming_the_file(private_cache):
    cached = D.data_dir() / "cifar10" / "cifar-10-python.tar.gz"
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_bytes(b"truncated")
    try:
        with pytest.raises(D.ChecksumError, match=str(cached)):
            D.cifar10("auto")
    finally:
        cached.unlink()


def test_unreadable_tarball_is_named(tmp_path):
    bad = tmp_path / "cifar-10-python.tar.gz"
    bad.write_bytes(b"not a tarball at all")
    with pytest.raises(D.DataError, match="cifar-10-python.tar.gz"):
        D.read_cifar10(bad)
    empty = tmp_path / "empty.tar.gz"
    with tarfile.open(empty, "w:gz") as tar:
        tar.addfile(tarfile.TarInfo("other.txt"), io.BytesIO(b""))
    with pytest.raises(D.DataError, match="not a CIFAR-10 python tarball"):
        D.read_cifar10(empty)


def test_missing_user_path_is_named(tmp_path):
    with pytest.raises(D.DataError, match="does not exist"):
        D.cifar10(tmp_path / "nowhere.tar.gz")


# --- downloads over HTTP: a loopback server with injected faults -------------------------------

SLOW_S = 5  # the longest a "slow" request is held back (released early when the server stops)


class _Handler(http.server.BaseHTTPRequestHandler):
    """Serves `server.routes[path] = (body, fault)`; fault None, "cut" (Content-Length larger than
    the body, then the connection closes), "slow" (no answer for up to SLOW_S) or a delay in seconds."""

    timeout = 5  # bounds reading a request from a client that does not send one

    def do_GET(self):
        self.server.requests.append(self.path)
        if self.path not in self.server.routes:
            self.send_error(404)
            return
        body, fault = self.server.routes[self.path]
        if fault == "slow":
            self.server.release.wait(SLOW_S)
        elif isinstance(fault, (int, float)):
            time.sleep(fault)
        self.close_connection = True
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2] if fault == "cut" else body)
        except OSError:  # the client gave up (timed out) first
            pass

    def log_message(self, *args):
        pass


@pytest.fixture
def http_server():
    """A ThreadingHTTPServer on 127.0.0.1 (a free port), stopped, with its request threads joined, at teardown."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = False  # so server_close() joins the request threads
    server.routes, server.requests, server.release = {}, [], threading.Event()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_download_keeps_a_file_whose_checksum_matches(http_server, tmp_path):
    body = b"x" * 1000
    http_server.routes["/file.bin"] = (body, None)
    url = f"http://127.0.0.1:{http_server.server_address[1]}/file.bin"
    dest = D.download(url, tmp_path / "out" / "file.bin", "md5", hashlib.md5(body).hexdigest())
    assert dest.read_bytes() == body and sorted(p.name for p in dest.parent.iterdir()) == ["file.bin"]


def test_download_with_a_bad_checksum_leaves_nothing_and_names_file_and_url(http_server, tmp_path):
    http_server.routes["/imdb.npz"] = (b"corrupted payload", None)
    url = f"http://127.0.0.1:{http_server.server_address[1]}/imdb.npz"
    dest = tmp_path / "out" / "imdb.npz"
    with pytest.raises(D.ChecksumError) as err:
        D.download(url, dest, "sha256", D.IMDB_SHA256)
    message = str(err.value)
    assert "\n" not in message and str(dest) in message and url in message and D.IMDB_SHA256 in message
    assert not dest.exists() and not list(dest.parent.iterdir())  # no temporary file either


DATASETS = {
    "cifar10": SimpleNamespace(
        name="CIFAR-10",
        url="CIFAR10_URL",
        checksum="CIFAR10_MD5",
        algorithm="md5",
        folder="cifar10",
        filename="cifar-10-python.tar.gz",
        write=lambda path: synthetic.write_synthetic_cifar10(path, n_train=50, n_test=20),
        load=lambda source: D.cifar10(source, n_train=40, n_test=20),
    ),
    "imdb": SimpleNamespace(
        name="IMDB",
        url="IMDB_URL",
        checksum="IMDB_SHA256",
        algorithm="sha256",
        folder="imdb",
        filename="imdb.npz",
        write=lambda path: synthetic.write_synthetic_imdb(path, n_train=30, n_test=20),
        load=lambda source: D.imdb(source, n_train=20, n_test=10, vocab_size=1000, max_len=50),
    ),
}


@pytest.fixture(scope="module")
def real_format_files(tmp_path_factory):
    """The bytes of each dataset's canonical file, in its real format (the synthetic writers')."""
    folder = tmp_path_factory.mktemp("served")
    files = {}
    for key, spec in DATASETS.items():
        spec.write(folder / spec.filename)
        files[key] = (folder / spec.filename).read_bytes()
    return files


@pytest.fixture(params=sorted(DATASETS))
def served(request, http_server, real_format_files, monkeypatch):
    """One dataset's loader pointed at the loopback server (its URL and checksum), with no cached copy."""
    spec = DATASETS[request.param]
    body = real_format_files[request.param]
    route = "/" + spec.filename
    url = f"http://127.0.0.1:{http_server.server_address[1]}{route}"
    monkeypatch.setattr(D, spec.url, url)
    monkeypatch.setattr(D, spec.checksum, hashlib.new(spec.algorithm, body).hexdigest())
    folder = D.data_dir() / spec.folder
    shutil.rmtree(folder, ignore_errors=True)
    http_server.routes[route] = (body, None)

    def fault(kind):
        if kind == "404":
            del http_server.routes[route]
        else:
            http_server.routes[route] = (body, kind)

    yield SimpleNamespace(
        spec=spec, body=body, url=url, route=route, cached=folder / spec.filename, server=http_server, fault=fault
    )
    shutil.rmtree(folder, ignore_errors=True)  # leave no "real" data for the other tests


def leftovers(cached: Path) -> list:
    """Whatever lies beside the cached file but the file and its lock: a temporary file, say."""
    keep = {cached.name, cached.name + ".lock"}
    return sorted(p.name for p in cached.parent.iterdir() if p.name not in keep) if cached.parent.exists() else []


def test_download_over_http_is_cached_checked_and_read_as_real(served):
    first = served.spec.load("real")
    assert first.kind == "real" and first.source == str(served.cached)
    assert served.cached.read_bytes() == served.body and not leftovers(served.cached)
    assert served.server.requests == [served.route]
    again = served.spec.load("auto")  # from the cache, checksummed, without a request
    assert again.kind == "real" and again.source == str(served.cached)
    assert served.server.requests == [served.route]
    np.testing.assert_array_equal(again.x_train, first.x_train)


def test_a_download_goes_to_the_projects_cache_and_leaves_the_home_folder_alone(served, tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert served.spec.load("real").source == str(served.cached)
    assert served.cached.parent == D.data_dir() / served.spec.folder and served.cached.read_bytes() == served.body
    assert list(home.rglob("*")) == []


@pytest.mark.parametrize("source", ["real", "auto"])
def test_download_with_a_wrong_checksum_is_deleted_and_a_hard_error(served, source):
    corrupt = bytearray(served.body)
    corrupt[len(corrupt) // 2] ^= 0xFF
    served.server.routes[served.route] = (bytes(corrupt), None)
    with pytest.raises(D.ChecksumError) as err:
        served.spec.load(source)
    message = str(err.value)
    assert "\n" not in message and str(served.cached) in message and served.url in message
    assert not served.cached.exists() and not leftovers(served.cached)


FAULTS = {"cut": "transfer cut short", "404": "HTTP 404", "slow": "no answer within 0.3 s"}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_failed_download_under_real_is_one_clear_line(served, fault, monkeypatch):
    monkeypatch.setattr(D, "DOWNLOAD_TIMEOUT", 0.3)
    served.fault(fault)
    start = time.monotonic()
    with pytest.raises(D.DataError) as err:
        served.spec.load("real")
    assert time.monotonic() - start < SLOW_S
    assert type(err.value) is D.DataError  # not a ChecksumError, nor a raw urllib/http.client one
    assert err.value.__context__ is None and err.value.__cause__ is None  # no chained traceback
    message = str(err.value)
    assert "\n" not in message and FAULTS[fault] in message
    assert served.url in message and str(served.cached) in message
    assert f"download {served.url} into {served.cached.parent}" in message  # the fix
    assert not served.cached.exists() and not leftovers(served.cached)


def test_a_server_that_is_not_there_is_one_line_with_the_sockets_words(served, monkeypatch):
    import socket

    with socket.socket() as closed:  # a port nobody listens on once it is closed
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    url = f"http://127.0.0.1:{port}/{served.spec.filename}"
    monkeypatch.setattr(D, served.spec.url, url)
    with pytest.raises(D.DataError) as err:
        served.spec.load("real")
    message = str(err.value)
    assert "\n" not in message and f"could not be downloaded from {url}" in message
    assert "(no connection: [Errno " in message and "Connection refused)" in message
    assert not served.cached.exists() and not leftovers(served.cached)


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_failed_download_under_auto_falls_back_to_synthetic(served, fault, monkeypatch, capsys):
    monkeypatch.setattr(D, "DOWNLOAD_TIMEOUT", 0.3)
    served.fault(fault)
    ds = served.spec.load("auto")
    assert ds.kind == "synthetic"
    out = capsys.readouterr().out
    assert f"NOTE: {served.spec.name} could not be downloaded from {served.url}" in out and FAULTS[fault] in out
    assert not served.cached.exists() and not leftovers(served.cached)


# --- several processes sharing the cache ------------------------------------------------------


def _slow_folder_writer(root: Path, markers: Path) -> None:
    """A synthetic writer that makes a folder of files slowly, and leaves a marker for each run."""
    root.mkdir()
    (markers / f"run-{os.getpid()}").touch()
    (root / "a.txt").write_text("a")
    time.sleep(1)
    (root / "b.txt").write_text("b")


def _write_once_in_a_process(barrier, results, target: str, markers: str) -> None:
    barrier.wait(10)
    path = D._write_once(Path(target), _slow_folder_writer, markers=Path(markers))
    results.put((os.getpid(), sorted(p.name for p in path.iterdir())))


def _load_in_a_process(barrier, results, key: str) -> None:
    barrier.wait(10)
    ds = DATASETS[key].load("real")
    results.put((os.getpid(), (ds.kind, ds.source)))


def _race(target, *args, n: int = 2) -> list:
    """Run `target(barrier, results, *args)` in n forked processes at once; their results."""
    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=target, args=(barrier, results, *args)) for _ in range(n)]
    for p in procs:
        p.start()
    got, deadline = [], time.monotonic() + 30
    try:
        while len(got) < n and time.monotonic() < deadline:
            try:
                got.append(results.get(timeout=0.1))
            except queue.Empty:
                if not any(p.is_alive() for p in procs) and results.empty():
                    break  # one failed: its traceback is in the captured stderr
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.terminate()
                p.join(5)
    assert [p.exitcode for p in procs] == [0] * n and len(got) == n
    return [value for _, value in got]


def test_two_processes_writing_the_same_synthetic_folder_write_it_once(tmp_path):
    target, markers = tmp_path / "synthetic" / "root", tmp_path / "markers"
    markers.mkdir()
    listings = _race(_write_once_in_a_process, str(target), str(markers))
    assert listings == [["a.txt", "b.txt"]] * 2
    assert len(list(markers.iterdir())) == 1  # the writer ran once
    assert sorted(p.name for p in target.parent.iterdir()) == ["root", "root.lock"]  # no temp folders left


def test_a_failed_writer_leaves_no_temp_file(tmp_path):
    def broken(path):
        path.write_bytes(b"half")
        raise RuntimeError("writer failed")

    with pytest.raises(RuntimeError):
        D._write_once(tmp_path / "f.npz", broken)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.npz.lock"]


def test_two_processes_downloading_the_same_file_fetch_it_once(served):
    served.server.routes[served.route] = (served.body, 0.5)  # slow enough for the two to overlap
    key = next(k for k, spec in DATASETS.items() if spec is served.spec)
    results = _race(_load_in_a_process, key)
    assert results == [("real", str(served.cached))] * 2
    assert served.server.requests == [served.route]
    assert not leftovers(served.cached)


# --- IMDB -------------------------------------------------------------------------------------


def keras_reference(reviews, vocab_size, max_len):
    """keras.datasets.imdb.load_data + pad_sequences, written out plainly."""
    out = np.zeros((len(reviews), max_len), dtype=np.int32)
    for i, review in enumerate(reviews):
        seq = [1] + [w + 3 for w in review]
        seq = [w if w < vocab_size else 2 for w in seq][-max_len:]
        out[i, max_len - len(seq) :] = seq
    return out


def test_encode_reviews_follows_keras_conventions():
    reviews = [[1, 2, 3], [5, 99, 7, 8, 9, 10, 11], list(range(1, 30))]
    encoded = D.encode_reviews(reviews, vocab_size=20, max_len=6)
    np.testing.assert_array_equal(encoded, keras_reference(reviews, 20, 6))
    assert encoded[0].tolist() == [0, 0, 1, 4, 5, 6]  # padded at the front, start token 1, ranks + 3
    assert encoded[1].tolist() == [2, 10, 11, 12, 13, 14]  # 99 + 3 >= 20 -> out of vocabulary 2; front cut


def test_imdb_reads_keras_npz_and_matches_the_reference(tmp_path, no_network):
    path = tmp_path / "imdb.npz"
    synthetic.write_synthetic_imdb(path, n_train=60, n_test=40)
    ds = D.imdb(path, n_train=50, n_test=30, vocab_size=1000, max_len=150)
    assert ds.kind == "real" and ds.x_train.shape == (50, 150) and ds.x_test.shape == (30, 150)
    assert ds.x_train.dtype == np.int32 and set(np.unique(ds.y_train)) <= {0, 1}
    x_train, y_train, _, _ = D.read_imdb(path)
    order = np.random.RandomState(113).permutation(60)[:50]  # Keras shuffles with seed 113
    np.testing.assert_array_equal(ds.x_train, keras_reference(x_train[order], 1000, 150))
    np.testing.assert_array_equal(ds.y_train, y_train[order])


def test_synthetic_imdb_needs_evidence_across_the_review_and_has_a_ceiling_near_095(tmp_path, no_network):
    """The stand-in can fail a framework: markers are sparse and mixed, so no single word decides, yet
    counting the markers in the 150 words a model sees scores about 0.95 (the label noise's ceiling)."""
    path = tmp_path / "imdb.npz"
    synthetic.write_synthetic_imdb(path, n_train=1, n_test=3000)
    ds = D.imdb(path, n_train=1, n_test=3000, max_len=150)
    markers = synthetic.imdb_markers(np.random.RandomState(0)) + D.IMDB_INDEX_FROM  # seed 0's, as indices
    counts = np.stack([np.isin(ds.x_test, m).sum(1) for m in markers], axis=1)  # (n, 2)
    seen = (ds.x_test > 0).sum(1)
    share = counts.sum(1) / seen
    assert 0.04 < np.median(share) < 0.1  # 5-10% of the words are markers
    own = counts[np.arange(3000), ds.y_test] / counts.sum(1).clip(1)
    assert 0.8 < own.mean() < 0.9  # 0.9 purity, less the 5% wrong labels
    vote = (counts[:, 1] > counts[:, 0]).astype(int)
    assert 0.92 < (vote == ds.y_test).mean() < 0.97  # the ceiling: counting every marker
    any_positive = (counts[:, 1] > 0).astype(int)
    assert (any_positive == ds.y_test).mean() < 0.7  # one word decides little


def test_the_legacy_kernel_reads_synthetic_files_the_modern_kernel_wrote(tmp_path):
    """numpy 2 pickles name `numpy._core`, which numpy 1.23 lacks; the readers must cope either way."""
    import subprocess

    from scripts import suite

    legacy = suite.venv_python("legacy")
    if not legacy.exists():
        pytest.skip(f"{legacy} is not built: run `make test`, which builds both environments")
    synthetic.write_synthetic_cifar10(tmp_path / "cifar.tar.gz", n_train=50, n_test=20)
    synthetic.write_synthetic_imdb(tmp_path / "imdb.npz", n_train=30, n_test=20)
    code = (
        "import sys, numpy; from support import data as D; "
        "x = D.read_cifar10(sys.argv[1])[0]; r = D.read_imdb(sys.argv[2])[0]; "
        "print(numpy.__version__, x.shape, len(r), type(r[0]).__name__)"
    )
    proc = subprocess.run(
        [str(legacy), "-c", code, str(tmp_path / "cifar.tar.gz"), str(tmp_path / "imdb.npz")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["1.23.5", "(50,", "3,", "32,", "32)", "30", "list"]


def test_unreadable_npz_is_named(tmp_path):
    bad = tmp_path / "imdb.npz"
    bad.write_bytes(b"\x00" * 64)
    with pytest.raises(D.DataError, match="imdb.npz"):
        D.read_imdb(bad)


# --- ChestX-ray14 -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def xray_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("xray") / "chestxray14"
    synthetic.write_synthetic_chestxray(root, n_train=24, n_test=10, px=48)
    return root


def test_synthetic_chestxray_has_the_official_layout(xray_root):
    assert (xray_root / "Data_Entry_2017.csv").exists()
    with open(xray_root / "Data_Entry_2017.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {"Image Index", "Finding Labels", "Patient ID"} <= set(rows[0])
    assert all((xray_root / "images" / r["Image Index"]).exists() for r in rows)
    train = (xray_root / "train_val_list.txt").read_text().split()
    test = (xray_root / "test_list.txt").read_text().split()
    assert len(train) == 24 and len(test) == 10


def test_chestxray_index_is_split_by_patient(xray_root, no_network):
    ix = D.chestxray(xray_root, n_train=20, n_test=8)
    assert ix.kind == "real" and len(ix.train_paths) == 20 and len(ix.test_paths) == 8
    assert ix.y_train.shape == (20, 14) and ix.y_train.dtype == np.float32
    patients = lambda paths: {p.rsplit("/", 1)[1].split("_")[0] for p in paths}  # noqa: E731
    assert not patients(ix.train_paths) & patients(ix.test_paths)
    image = D.read_xray(ix.train_paths[0], 40)
    assert image.shape == (40, 40) and image.dtype == np.uint8


def test_chestxray_rejects_a_patient_in_both_splits(xray_root, tmp_path):
    import shutil

    root = tmp_path / "leaky"
    shutil.copytree(xray_root, root)
    test = (root / "test_list.txt").read_text().split()
    train = (root / "train_val_list.txt").read_text().split()
    (root / "test_list.txt").write_text("\n".join(test + train[:1]))
    with pytest.raises(D.DataError, match="split must be by patient"):
        D.read_chestxray_index(root)


def test_chestxray_unknown_label_names_csv_and_image(xray_root, tmp_path):
    import shutil

    root = tmp_path / "typo"
    shutil.copytree(xray_root, root)
    csv_path = root / "Data_Entry_2017.csv"
    lines = csv_path.read_text().splitlines()
    first = lines[1].split(",")
    first[1] = "Pneumonnia"
    csv_path.write_text("\n".join([lines[0], ",".join(first)] + lines[2:]) + "\n")
    with pytest.raises(D.DataError, match=r"Data_Entry_2017.csv: image .* unknown label\(s\) \['Pneumonnia'\]"):
        D.read_chestxray_index(root)


def test_chestxray_missing_pieces_say_what_to_get(tmp_path, no_network):
    with pytest.raises(D.DataError, match="no Data_Entry_2017.csv"):
        D.read_chestxray_index(tmp_path)
    with pytest.raises(D.DataError, match="DLROSETTA_CHESTXRAY"):
        D.chestxray("real")


def test_unreadable_png_is_named(tmp_path):
    bad = tmp_path / "00000001_000.png"
    bad.write_bytes(b"not a png")
    with pytest.raises(D.DataError, match="00000001_000.png"):
        D.read_xray(str(bad), 32)


def test_chestxray_in_ram_matches_the_file_format():
    x, y = D.chestxray_in_ram(6, 32, seed=1)
    assert x.shape == (6, 32, 32) and x.dtype == np.uint8 and y.shape == (6, 14)


# --- shared helpers ---------------------------------------------------------------------------


def test_minibatches_cover_every_index_once_in_a_seeded_order():
    batches = list(D.minibatches(10, 4, seed=3))
    assert [len(b) for b in batches] == [4, 4, 2]
    assert sorted(np.concatenate(batches).tolist()) == list(range(10))
    assert all((a == b).all() for a, b in zip(batches, D.minibatches(10, 4, seed=3)))
    assert [len(b) for b in D.minibatches(10, 4, seed=3, drop_last=True)] == [4, 4]
    assert np.concatenate(list(D.minibatches(5, 2))).tolist() == [0, 1, 2, 3, 4]


def test_one_hot_and_layouts():
    np.testing.assert_array_equal(D.one_hot(np.array([2, 0]), 3), [[0, 0, 1], [1, 0, 0]])
    x = np.arange(2 * 3 * 4 * 5).reshape(2, 3, 4, 5)
    assert D.channel_last(x).shape == (2, 4, 5, 3) and D.channel_last(x).flags.c_contiguous
    assert D.fake_images(2, 8, channel_first=False).shape == (2, 8, 8, 3)


def test_scratch_folders_are_per_process_and_the_ended_ones_go(tmp_path, monkeypatch):
    import os
    import subprocess

    from support import files

    monkeypatch.setenv("DLROSETTA_CACHE", str(tmp_path))
    ended = subprocess.Popen(["true"])
    ended.wait()
    stale = tmp_path / "scratch" / "gru_imdb" / "keras" / str(ended.pid)
    (stale / "model.keras").parent.mkdir(parents=True)
    (stale / "model.keras").write_bytes(b"old")
    mine = files.scratch("gru_imdb", "keras")
    assert mine == tmp_path / "scratch" / "gru_imdb" / "keras" / str(os.getpid()) and mine.is_dir()
    assert not stale.exists()  # its process has ended
    (mine / "model.keras").write_bytes(b"new")
    assert files.scratch("gru_imdb", "keras") == mine and not any(mine.iterdir())  # emptied for a new start
