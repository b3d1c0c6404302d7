"""Small datasets the project generates in the real formats: CIFAR-10's python pickles (tar.gz), IMDB's npz, and
NIH ChestX-ray14's folder of PNGs with its index CSV and split lists. Each is made so that a model learns from it
(class patterns, marker words, label-dependent blobs) with a known ceiling (some labels replaced at random), so the
notebooks' accuracy means something at every profile. support.data writes them once into the project's cache when
no real dataset is there, and reads them with the same code as the real ones.
"""

from __future__ import annotations

import csv
import io
import pickle
import tarfile
from pathlib import Path

import numpy as np

from support.data import CHESTXRAY_CSV, CHESTXRAY_LABELS, CIFAR10_CLASSES

LABEL_NOISE = 0.1  # share of synthetic labels drawn at random

# How hard the synthetic CIFAR-10 is: each class draws its images from CIFAR_MODES smooth colour
# patterns under pixel noise (CIFAR_NOISE). Most images show their pattern at contrast CIFAR_CONTRAST
# times 1 +- CIFAR_SPREAD and are learnt in a few epochs; CIFAR_FAINT of them are faint (contrast drawn
# from CIFAR_FAINT_CONTRAST, near the noise), and a network needs many more examples to see those. So
# the accuracy climbs for many epochs, as on real CIFAR-10, instead of reaching its ceiling in the second.
CIFAR_MODES, CIFAR_CONTRAST, CIFAR_SPREAD, CIFAR_NOISE = 8, 55, 0.7, 55
CIFAR_FAINT, CIFAR_FAINT_CONTRAST = 0.35, (4, 16)

IMDB_MARKERS = 30  # sentiment words per class
IMDB_MARKER_RATE = (0.05, 0.1)  # share of a review's words that are markers, log-uniform per review
IMDB_PURITY = 0.9  # share of a review's markers from its own class; the rest from the other


def _noisy(labels: np.ndarray, n_classes: int, rng) -> np.ndarray:
    """Replace LABEL_NOISE of the labels by random classes, as real labels are imperfect. Without it a
    synthetic task is solved exactly, the loss falls to ~1e-5 and the gradients become denormal floats,
    which slow CPU arithmetic several-fold and would make later epochs look slower than earlier ones."""
    flip = rng.rand(len(labels)) < LABEL_NOISE
    return np.where(flip, rng.randint(0, n_classes, len(labels)), labels)


def cifar10_patterns(rng) -> np.ndarray:
    """The synthetic CIFAR-10's smooth 32x32 colour patterns, (10 classes, CIFAR_MODES, 3, 32, 32): the
    writer's first draw from `rng`."""
    return np.kron(rng.standard_normal((10, CIFAR_MODES, 3, 4, 4)), np.ones((8, 8)))


def write_synthetic_cifar10(path: Path, n_train: int = 50000, n_test: int = 10000, seed: int = 0) -> None:
    """A `cifar-10-python.tar.gz` whose images are class-dependent colour patterns under noise.

    One label in ten is replaced by a random class (`_noisy`), so no model scores above about 0.91,
    and the faint images keep the best accuracy of a small run well below that.
    """
    rng = np.random.RandomState(seed)
    prototypes = cifar10_patterns(rng)

    def images(n):
        labels = rng.randint(0, 10, n)
        pattern = prototypes[labels, rng.randint(0, CIFAR_MODES, n)]
        contrast = CIFAR_CONTRAST * (1 + CIFAR_SPREAD * rng.uniform(-1, 1, (n, 1, 1, 1)))
        faint = rng.uniform(*CIFAR_FAINT_CONTRAST, (n, 1, 1, 1))
        contrast = np.where(rng.rand(n, 1, 1, 1) < CIFAR_FAINT, faint, contrast)
        x = 127 + contrast * pattern + CIFAR_NOISE * rng.standard_normal((n, 3, 32, 32))
        labels = _noisy(labels, 10, rng)
        return np.clip(x, 0, 255).astype(np.uint8).reshape(n, 3072), labels.tolist()

    def add(tar, name, obj):
        blob = pickle.dumps(obj, protocol=2)
        info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
        info.size = len(blob)
        tar.addfile(info, io.BytesIO(blob))

    with tarfile.open(path, "w:gz", compresslevel=1) as tar:
        for i, part in enumerate(np.array_split(np.arange(n_train), 5), start=1):
            x, y = images(len(part))
            add(tar, f"data_batch_{i}", {"batch_label": f"training batch {i} of 5", "data": x, "labels": y})
        x, y = images(n_test)
        add(tar, "test_batch", {"batch_label": "testing batch 1 of 1", "data": x, "labels": y})
        add(
            tar,
            "batches.meta",
            {"label_names": list(CIFAR10_CLASSES), "num_cases_per_batch": n_train // 5, "num_vis": 3072},
        )


def imdb_markers(rng) -> np.ndarray:
    """The synthetic IMDB's marker-word ranks, (2, IMDB_MARKERS) for negative and positive: the writer's
    first draw from `rng`."""
    return rng.choice(np.arange(50, 3000), size=(2, IMDB_MARKERS), replace=False)


def write_synthetic_imdb(path: Path, n_train: int = 25000, n_test: int = 25000, seed: int = 0) -> None:
    """An `imdb.npz` of Zipf-like reviews where each sentiment has its own marker words.

    A review's markers are sparse (5-10% of its words) and one in ten comes from the other class, so a
    GRU has to carry evidence across the sequence rather than spot one word: like a GRU on real IMDB,
    it spends its first hundred or so steps near chance before it learns. One label in ten is random
    (`_noisy`, and one in twenty ends up wrong), so the best accuracy is about 0.95; the `cpu` profile
    ends near 0.8, still improving.
    """
    rng = np.random.RandomState(seed)
    markers = imdb_markers(rng)
    lo, hi = np.log(IMDB_MARKER_RATE)

    def reviews(n):
        labels = rng.randint(0, 2, n)
        xs = np.empty(n, dtype=object)
        for i, label in enumerate(labels):
            length = int(np.clip(rng.lognormal(5.2, 0.6), 20, 1000))
            words = np.exp(rng.uniform(0, np.log(60000), length)).astype(np.int64)  # log-uniform ranks
            hits = np.flatnonzero(rng.rand(length) < np.exp(rng.uniform(lo, hi)))
            side = np.where(rng.rand(hits.size) < IMDB_PURITY, label, 1 - label)
            words[hits] = markers[side, rng.randint(0, IMDB_MARKERS, hits.size)]
            xs[i] = words.tolist()
        return xs, _noisy(labels, 2, rng).astype(np.int64)

    x_train, y_train = reviews(n_train)
    x_test, y_test = reviews(n_test)
    with open(path, "wb") as f:
        np.savez(f, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)


def xray_labels(n: int, rng) -> np.ndarray:
    return (rng.rand(n, len(CHESTXRAY_LABELS)) < 0.25).astype(np.float32)


def xray_image(labels: np.ndarray, px: int, rng) -> np.ndarray:
    """A grey 'chest' with one bright blob per positive label, at that label's own place."""
    yy, xx = np.mgrid[0:px, 0:px] / px
    img = 90 + 60 * np.exp(-(((xx - 0.5) / 0.35) ** 2 + ((yy - 0.5) / 0.45) ** 2))
    for k in np.flatnonzero(labels):
        cy, cx = 0.2 + 0.6 * (k // 4) / 3, 0.2 + 0.6 * (k % 4) / 3
        img += 70 * np.exp(-(((xx - cx) ** 2 + (yy - cy) ** 2) / 0.004))
    img += 25 * rng.standard_normal((px, px))
    return np.clip(img, 0, 255).astype(np.uint8)


def write_synthetic_chestxray(root: Path, n_train: int = 800, n_test: int = 200, px: int = 1024, seed: int = 0) -> None:
    """A ChestX-ray14 folder (images/*.png, Data_Entry_2017.csv, split lists), split by patient."""
    from PIL import Image  # only here: support needs nothing beyond numpy at import time

    rng = np.random.RandomState(seed)
    root = Path(root)
    (root / "images").mkdir(parents=True)
    rows, lists = [], {"train_val_list.txt": [], "test_list.txt": []}
    patient = 0
    for list_name, n in (("train_val_list.txt", n_train), ("test_list.txt", n_test)):
        while len(lists[list_name]) < n:
            patient += 1
            for follow_up in range(min(rng.randint(1, 4), n - len(lists[list_name]))):
                name = f"{patient:08d}_{follow_up:03d}.png"
                y = xray_labels(1, rng)[0]
                Image.fromarray(xray_image(y, px, rng)).save(root / "images" / name, compress_level=1)
                findings = "|".join(label for label, on in zip(CHESTXRAY_LABELS, y) if on) or "No Finding"
                rows.append(
                    [
                        name,
                        findings,
                        follow_up,
                        patient,
                        rng.randint(20, 80),
                        "MF"[rng.randint(2)],
                        "PA",
                        px,
                        px,
                        0.143,
                        0.143,
                    ]
                )
                lists[list_name].append(name)
    with open(root / CHESTXRAY_CSV[0], "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(
            [
                "Image Index",
                "Finding Labels",
                "Follow-up #",
                "Patient ID",
                "Patient Age",
                "Patient Gender",
                "View Position",
                "OriginalImage[Width",
                "Height]",
                "OriginalImagePixelSpacing[x",
                "y]",
            ]
        )
        w.writerows(rows)
    for list_name, names in lists.items():
        (root / list_name).write_text("\n".join(names) + "\n")
