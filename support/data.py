"""Datasets for the four tasks, read from their real on-disk formats.

Each loader takes `source`:
- "auto": the real data if it is in the cache (or downloads it where a canonical file exists);
  if it cannot be had, a synthetic stand-in in the same format, with a printed note;
- "real": the real data or a clear error saying how to get it;
- "synthetic": the synthetic stand-in, written once into the cache in the real format and read
  back through the same reader, so the real reading code always runs;
- a path to the dataset's file or folder (read as it is: the canonical checksum is checked only
  on the cached download, since a user's copy may be repacked).

The synthetic data is learnable (a class-dependent signal under noise), so tests can check that
training learns. The returned `Dataset.kind` says which one you got; records carry it.
Downloads go through pooch (`pooch.retrieve`) into the project's cache, never the user's home: checked
against the canonical checksum, written to a temporary file and renamed into place only when whole and
correct, so a cut-short or corrupt download leaves nothing; a bad file is named in the one-line error.
"""

from __future__ import annotations

import csv
import importlib
import os
import pickle
import re
import shutil
import sys
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pooch

from support.env import cache_dir
from support.files import file_lock, temporary_name

SOURCES = ("auto", "real", "synthetic")


class DataError(RuntimeError):
    """A dataset that cannot be read or found; the message names the file and the fix."""


class ChecksumError(DataError):
    """A file whose checksum differs from the canonical one (corrupt or truncated)."""


@dataclass
class Dataset:
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    kind: str  # "real" or "synthetic"
    source: str  # the file or folder it was read from

    def __repr__(self) -> str:
        return (
            f"Dataset({self.kind} from {self.source}: x_train {self.x_train.shape} {self.x_train.dtype}, "
            f"y_train {self.y_train.shape}, x_test {self.x_test.shape}, y_test {self.y_test.shape})"
        )


def data_dir() -> Path:
    return cache_dir() / "data"


# --- downloads and checksums -------------------------------------------------------------


def verify(path: Path, algorithm: str, expected: str) -> None:
    """A ChecksumError naming `path` and the fix where its checksum is not the canonical one."""
    got = pooch.file_hash(str(path), alg=algorithm)
    if got != expected:
        raise ChecksumError(
            f"{path}: {algorithm} {got} does not match the canonical {expected} "
            f"(corrupt or truncated download): delete the file and run again to fetch it afresh"
        )


DOWNLOAD_TIMEOUT = 30  # seconds without an answer or data before a download gives up


class DownloadError(OSError):
    """A download that failed (no network, an HTTP error, a timeout, a transfer cut short), in one line."""


def download(url: str, dest: Path, algorithm: str, expected: str) -> Path:
    """Fetch `url` to `dest` with pooch, keeping it only if its checksum matches (pooch writes a temporary
    file beside `dest` and renames it into place once checked). A failed transfer raises DownloadError and a
    wrong checksum ChecksumError, each one line; either leaves nothing beside `dest`."""
    import requests  # pooch's HTTP client, imported by pooch only when it downloads

    dest = Path(dest)
    try:
        pooch.retrieve(
            url,
            known_hash=f"{algorithm}:{expected}",
            fname=dest.name,
            path=dest.parent,
            downloader=pooch.HTTPDownloader(timeout=DOWNLOAD_TIMEOUT),
        )
    except requests.RequestException as err:
        raise DownloadError(_reason(err)) from None
    except ValueError as err:
        if "known hash" not in str(err):
            raise
        # pooch: the checksum of what arrived is not the canonical one, and it deleted the file
        raise ChecksumError(
            f"{dest}: downloaded from {url}, its {algorithm} does not match the canonical "
            f"{expected} (a corrupt or truncated download, deleted): run again to fetch it afresh, "
            f"or download it by hand into {dest.parent}"
        ) from None
    return dest


def _reason(err: BaseException) -> str:
    """Why a download failed (requests' error), in one line."""
    import requests

    if isinstance(err, requests.HTTPError) and err.response is not None:
        return f"HTTP {err.response.status_code} {err.response.reason}"
    if isinstance(err, requests.Timeout):
        return f"no answer within {DOWNLOAD_TIMEOUT} s"
    if isinstance(err, requests.exceptions.ChunkedEncodingError):  # urllib3's IncompleteRead, in its words
        more = re.search(r"(\d+) more expected", str(err))
        return "transfer cut short: the server closed the connection " + (
            f"with {more.group(1)} more bytes expected" if more else "early"
        )
    if isinstance(err, requests.ConnectionError):  # the socket's own words, not urllib3's retry report around them
        errno = re.search(r"\[Errno -?\d+\] [^'\")]+", str(err))
        if errno:
            return f"no connection: {errno.group(0).strip()}"
    return " ".join(str(err).split()) or type(err).__name__


def _resolve(
    name: str, source, cached: Path, algorithm: str | None, checksum: str | None, url: str | None, how_to_get: str
) -> Path | None:
    """The real file or folder to read, or None for synthetic. Raises DataError for source="real"."""
    if source not in SOURCES:
        path = Path(source).expanduser()
        if path.is_dir() and (path / cached.name).exists():
            path = path / cached.name
        if not path.exists():
            raise DataError(f"{name}: {path} does not exist: pass a path to {cached.name}, or source='auto'")
        return path  # the user's own copy: the reader checks its format, not the canonical checksum
    if source == "synthetic":
        return None
    if cached.exists():
        if algorithm and cached.is_file():
            verify(cached, algorithm, checksum)
        return cached
    problem = f"{name} is not in {cached}"
    if url:
        try:
            with file_lock(cached):  # one process downloads; the others then find its file
                if not cached.exists():
                    download(url, cached, algorithm, checksum)
            return cached
        except OSError as err:  # no network, HTTP error, timeout, cut short (DownloadError's line);
            # a ChecksumError (a corrupt file was fetched) propagates
            problem = f"{name} could not be downloaded from {url} to {cached} ({' '.join(str(err).split())})"
    if source == "real":
        raise DataError(f"{problem}: {how_to_get}")
    print(f"NOTE: {problem}; using synthetic {name} in the same format instead ({how_to_get})")
    return None


SYNTHETIC_VERSION = 5  # bump when a synthetic writer changes, so cached stand-ins are rewritten


def _synthetic_path(name: str, filename: str, **sizes) -> Path:
    tag = "-".join([f"v{SYNTHETIC_VERSION}"] + [f"{k}{v}" for k, v in sizes.items()])
    return data_dir() / "synthetic" / f"{name}-{tag}" / filename


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _write_once(path: Path, writer, **kwargs) -> Path:
    """Write a synthetic file (or folder) unless it is there; atomic, so a crash leaves nothing half-written,
    and locked, so of several processes one writes and the others wait and read its result."""
    path = Path(path)
    if path.exists():
        return path
    with file_lock(path):
        if not path.exists():  # else another process wrote it while we waited for the lock
            tmp = temporary_name(path)
            _remove(tmp)  # a leftover of a killed run that had our process id
            try:
                writer(tmp, **kwargs)
                tmp.replace(path)
            finally:
                _remove(tmp)
    return path


# --- helpers the notebooks share ------------------------------------------------------------


def channel_last(x: np.ndarray) -> np.ndarray:
    """NCHW -> NHWC (TensorFlow, Keras, JAX/Flax convolutions default to channels-last)."""
    return np.ascontiguousarray(np.moveaxis(x, 1, -1))


def one_hot(y: np.ndarray, n_classes: int) -> np.ndarray:
    return np.eye(n_classes, dtype=np.float32)[np.asarray(y)]


def minibatches(n: int, batch_size: int, seed: int | None = None, drop_last: bool = False) -> Iterator[np.ndarray]:
    """Index arrays over range(n), shuffled by `seed` (None: in order).

    Every framework draws the same batches for the same seed. Training drops the last partial
    batch (constant shapes, so compiled steps are not rebuilt); evaluation keeps it.
    """
    order = np.random.RandomState(seed).permutation(n) if seed is not None else np.arange(n)
    stop = n - n % batch_size if drop_last else n
    for start in range(0, stop, batch_size):
        yield order[start : start + batch_size]


def fake_images(n: int, size: int, channel_first: bool = True, seed: int = 0) -> np.ndarray:
    """Standard-normal float32 images, for timing forward passes (ResNet-50 features)."""
    shape = (n, 3, size, size) if channel_first else (n, size, size, 3)
    return np.random.RandomState(seed).standard_normal(shape).astype(np.float32)


def _read_numpy2_pickles() -> None:
    """Let numpy 1.x unpickle arrays that numpy 2 pickled.

    numpy 2 names its internals `numpy._core` in pickles, numpy 1.x `numpy.core`: the synthetic
    files are written by whichever kernel runs first, and the legacy kernel (numpy 1.23) must read
    the modern kernel's. numpy 2 reads numpy 1.x pickles by itself.
    """
    try:
        importlib.import_module("numpy._core.multiarray")
    except ImportError:
        for name in ("", ".multiarray", ".numeric", "._multiarray_umath"):
            sys.modules.setdefault("numpy._core" + name, importlib.import_module("numpy.core" + name))


# --- CIFAR-10 ---------------------------------------------------------------------------------

CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CIFAR10_MD5 = "c58f30108f718f92721af3b95e74349a"
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


def read_cifar10(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """uint8 images (N, 3, 32, 32) and int32 labels from `cifar-10-python.tar.gz`."""
    _read_numpy2_pickles()

    def batch(tar, member):
        try:
            f = tar.extractfile(f"cifar-10-batches-py/{member}")
            d = pickle.load(f, encoding="latin1")
        except KeyError:
            raise DataError(f"{path}: no cifar-10-batches-py/{member} inside: not a CIFAR-10 python tarball") from None
        return np.asarray(d["data"], dtype=np.uint8).reshape(-1, 3, 32, 32), np.asarray(d["labels"], dtype=np.int32)

    try:
        with tarfile.open(path, "r:gz") as tar:
            train = [batch(tar, f"data_batch_{i}") for i in range(1, 6)]
            x_test, y_test = batch(tar, "test_batch")
    except (tarfile.TarError, EOFError, OSError, pickle.UnpicklingError) as err:
        raise DataError(f"{path}: cannot be read as cifar-10-python.tar.gz ({err}): delete it and run again") from None
    return np.concatenate([x for x, _ in train]), np.concatenate([y for _, y in train]), x_test, y_test


def cifar10(
    source="auto", n_train: int | None = None, n_test: int | None = None, channel_first: bool = True
) -> Dataset:
    """CIFAR-10 as float32 images (NCHW, or NHWC with channel_first=False) and int32 labels.

    Pixels are scaled to [0, 1], then standardised per channel with the training split's mean and
    standard deviation: without it, SGD at the seed's learning rate sits on a plateau for hundreds
    of steps before it starts to learn.
    """
    from support import synthetic  # the stand-in datasets (synthetic.py reads this module's constants)

    path = _resolve(
        "CIFAR-10",
        source,
        data_dir() / "cifar10" / "cifar-10-python.tar.gz",
        "md5",
        CIFAR10_MD5,
        CIFAR10_URL,
        f"download {CIFAR10_URL} into {data_dir() / 'cifar10'}",
    )
    kind = "real"
    if path is None:
        kind, sizes = "synthetic", dict(train=n_train or 50000, test=n_test or 10000)
        path = _write_once(
            _synthetic_path("cifar10", "cifar-10-python.tar.gz", **sizes),
            synthetic.write_synthetic_cifar10,
            n_train=sizes["train"],
            n_test=sizes["test"],
        )
    x_train, y_train, x_test, y_test = read_cifar10(path)
    x_train, y_train, x_test, y_test = x_train[:n_train], y_train[:n_train], x_test[:n_test], y_test[:n_test]
    x_train, x_test = x_train.astype(np.float32) / 255, x_test.astype(np.float32) / 255
    mean, std = x_train.mean(axis=(0, 2, 3), keepdims=True), x_train.std(axis=(0, 2, 3), keepdims=True)
    prepare = (lambda x: (x - mean) / std) if channel_first else (lambda x: channel_last((x - mean) / std))
    return Dataset(prepare(x_train), y_train, prepare(x_test), y_test, kind, str(path))


# --- IMDB ---------------------------------------------------------------------------------

IMDB_URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/imdb.npz"
IMDB_SHA256 = "69664113be75683a8fe16e3ed0ab59fda8886cb3cd7ada244f7d9544e4676b9f"
IMDB_START, IMDB_OOV, IMDB_INDEX_FROM = 1, 2, 3  # Keras's conventions; 0 is padding


def read_imdb(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Keras's `imdb.npz`: object arrays of word-rank lists (1 = most frequent) and 0/1 labels."""
    _read_numpy2_pickles()
    try:
        with np.load(path, allow_pickle=True) as f:
            return f["x_train"], f["y_train"], f["x_test"], f["y_test"]
    except (OSError, ValueError, KeyError, EOFError, pickle.UnpicklingError) as err:
        raise DataError(f"{path}: cannot be read as Keras's imdb.npz ({err}): delete it and run again") from None


def encode_reviews(reviews, vocab_size: int, max_len: int) -> np.ndarray:
    """Keras's imdb.load_data + pad_sequences, vectorised: start token 1, ranks shifted by 3,
    ranks >= vocab_size -> 2 (out of vocabulary), then pad and truncate at the front to max_len."""
    lengths = np.fromiter((len(r) + 1 for r in reviews), dtype=np.int64, count=len(reviews))
    flat = np.concatenate([np.concatenate(([IMDB_START - IMDB_INDEX_FROM], r)) for r in reviews]).astype(np.int64)
    flat += IMDB_INDEX_FROM
    flat[flat >= vocab_size] = IMDB_OOV
    out = np.zeros((len(reviews), max_len), dtype=np.int32)
    ends = np.cumsum(lengths)
    for i, (end, length) in enumerate(zip(ends, lengths)):
        keep = min(length, max_len)
        out[i, max_len - keep :] = flat[end - keep : end]
    return out


def imdb(
    source="auto",
    n_train: int | None = None,
    n_test: int | None = None,
    vocab_size: int = 30000,
    max_len: int = 150,
    seed: int = 113,
) -> Dataset:
    """IMDB reviews as int32 (N, max_len) word indices (Keras's conventions) and int32 0/1 labels.

    Like keras.datasets.imdb.load_data(seed=113), train and test are shuffled before the first
    n_train / n_test reviews are taken.
    """
    from support import synthetic  # the stand-in datasets (synthetic.py reads this module's constants)

    path = _resolve(
        "IMDB",
        source,
        data_dir() / "imdb" / "imdb.npz",
        "sha256",
        IMDB_SHA256,
        IMDB_URL,
        f"download {IMDB_URL} into {data_dir() / 'imdb'}",
    )
    kind = "real"
    if path is None:
        kind, sizes = "synthetic", dict(train=n_train or 25000, test=n_test or 25000)
        path = _write_once(
            _synthetic_path("imdb", "imdb.npz", **sizes),
            synthetic.write_synthetic_imdb,
            n_train=sizes["train"],
            n_test=sizes["test"],
        )
    x_train, y_train, x_test, y_test = read_imdb(path)
    rng = np.random.RandomState(seed)
    train, test = rng.permutation(len(x_train))[:n_train], rng.permutation(len(x_test))[:n_test]
    return Dataset(
        encode_reviews(x_train[train], vocab_size, max_len),
        y_train[train].astype(np.int32),
        encode_reviews(x_test[test], vocab_size, max_len),
        y_test[test].astype(np.int32),
        kind,
        str(path),
    )


# --- NIH ChestX-ray14 -------------------------------------------------------------------------

CHESTXRAY_URL = "https://nihcc.app.box.com/v/ChestXray-NIHCC"
CHESTXRAY_LABELS = (
    "Atelectasis",
    "Cardiomegaly",
    "Effusion",
    "Infiltration",
    "Mass",
    "Nodule",
    "Pneumonia",
    "Pneumothorax",
    "Consolidation",
    "Edema",
    "Emphysema",
    "Fibrosis",
    "Pleural_Thickening",
    "Hernia",
)
CHESTXRAY_CSV = ("Data_Entry_2017.csv", "Data_Entry_2017_v2020.csv")
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def chestxray_dir() -> Path:
    """Where real ChestX-ray14 is looked for: $DLROSETTA_CHESTXRAY, else the cache."""
    return Path(os.environ.get("DLROSETTA_CHESTXRAY") or data_dir() / "chestxray14")


def read_chestxray_index(root: Path) -> tuple[list[str], np.ndarray, list[str], np.ndarray]:
    """Image paths and (N, 14) float32 label matrices for the official train_val and test lists."""
    root = Path(root)
    csv_path = next((root / n for n in CHESTXRAY_CSV if (root / n).exists()), None)
    if csv_path is None:
        raise DataError(
            f"{root}: no {CHESTXRAY_CSV[0]}: point source (or DLROSETTA_CHESTXRAY) at the folder "
            f"holding it, images/ and the split lists from {CHESTXRAY_URL}"
        )
    labels, patients = {}, {}
    with open(csv_path, newline="") as f:
        for row in csv.DictReader(f):
            findings = [x for x in row["Finding Labels"].split("|") if x != "No Finding"]
            unknown = set(findings) - set(CHESTXRAY_LABELS)
            if unknown:
                raise DataError(f"{csv_path}: image {row['Image Index']} has unknown label(s) {sorted(unknown)}")
            labels[row["Image Index"]] = np.isin(CHESTXRAY_LABELS, findings).astype(np.float32)
            patients[row["Image Index"]] = row["Patient ID"]

    def split(list_name):
        path = root / list_name
        if not path.exists():
            raise DataError(f"{path} is missing: the official split lists come with the dataset ({CHESTXRAY_URL})")
        names = path.read_text().split()
        missing = [n for n in names if n not in labels]
        if missing:
            raise DataError(f"{path}: {len(missing)} image(s) not in {csv_path.name}, e.g. {missing[0]}")
        return [str(root / "images" / n) for n in names], np.stack([labels[n] for n in names])

    train_paths, y_train = split("train_val_list.txt")
    test_paths, y_test = split("test_list.txt")
    shared = {patients[Path(p).name] for p in train_paths} & {patients[Path(p).name] for p in test_paths}
    if shared:
        raise DataError(
            f"{root}: patient(s) {sorted(shared)[:3]} appear in both train_val_list.txt and "
            f"test_list.txt: the split must be by patient"
        )
    return train_paths, y_train, test_paths, y_test


@dataclass
class XrayIndex:
    train_paths: list
    y_train: np.ndarray
    test_paths: list
    y_test: np.ndarray
    kind: str
    source: str

    def __repr__(self) -> str:
        return (
            f"XrayIndex({self.kind} from {self.source}: {len(self.train_paths)} train and "
            f"{len(self.test_paths)} test images, {self.y_train.shape[1]} labels)"
        )


def chestxray(
    source="auto", n_train: int | None = None, n_test: int | None = None, synthetic_px: int = 1024, seed: int = 0
) -> XrayIndex:
    """The ChestX-ray14 file index: PNG paths and (N, 14) labels for train_val and test.

    Real data is never downloaded (about 45 GB): put it in `chestxray_dir()`. Subsets are drawn
    with `seed` from the official lists.
    """
    from support import synthetic  # the stand-in datasets (synthetic.py reads this module's constants)

    root = _resolve(
        "NIH ChestX-ray14",
        source,
        chestxray_dir(),
        None,
        None,
        None,
        f"download it from {CHESTXRAY_URL} and set DLROSETTA_CHESTXRAY to its folder",
    )
    kind = "real"
    if root is None:
        kind, sizes = "synthetic", dict(train=n_train or 800, test=n_test or 200, px=synthetic_px)
        root = _write_once(
            _synthetic_path("chestxray14", "root", **sizes),
            synthetic.write_synthetic_chestxray,
            n_train=sizes["train"],
            n_test=sizes["test"],
            px=synthetic_px,
        )
    train_paths, y_train, test_paths, y_test = read_chestxray_index(root)
    rng = np.random.RandomState(seed)
    train = np.sort(rng.permutation(len(train_paths))[:n_train])
    test = np.sort(rng.permutation(len(test_paths))[:n_test])
    return XrayIndex(
        [train_paths[i] for i in train], y_train[train], [test_paths[i] for i in test], y_test[test], kind, str(root)
    )


def read_xray(path: str, size: int) -> np.ndarray:
    """One X-ray PNG as a (size, size) uint8 grey image (bilinear resize, as the seed did)."""
    from PIL import Image

    try:
        with Image.open(path) as img:
            return np.array(img.convert("L").resize((size, size), Image.BILINEAR))  # a writable copy
    except (OSError, ValueError) as err:
        raise DataError(f"{path}: cannot be read as a PNG image ({err})") from None


def chestxray_in_ram(n: int, size: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Synthetic X-rays made directly in memory at (size, size): uint8 (N, size, size), (N, 14) labels.

    The same generator as the PNGs, minus the files: the seed's "synthetic data in RAM" mode,
    which times the model without the input pipeline.
    """
    from support import synthetic  # the stand-in datasets (synthetic.py reads this module's constants)

    rng = np.random.RandomState(seed)
    y = synthetic.xray_labels(n, rng)
    return np.stack([synthetic.xray_image(row, size, rng) for row in y]), y
