"""Small data sets written in the real on-disk layouts that torchvision and solo-learn read:
CIFAR-10/100 pickled batches, STL-10 binaries, image folders. Classes differ by a colour cast,
so a probe has something to find."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
from PIL import Image

CLASSES = 5  # solo-learn's main_linear.py computes top-5 accuracy unguarded


def _images(n: int, size: int, seed: int) -> tuple:
    """uint8 [n, size, size, 3] and labels cycling over the classes."""
    rng, labels = np.random.default_rng(seed), np.arange(n) % CLASSES
    pixels = rng.integers(0, 180, size=(n, size, size, 3))
    pixels[np.arange(n), :, :, labels % 3] += 75
    return pixels.astype(np.uint8), labels


def write_cifar(root: Path, kind: str, per_class: int = 4) -> Path:
    """``root/cifar-10-batches-py`` (five train batches of one image per class, a test batch,
    batches.meta) or
    ``root/cifar-100-python`` (train, test, meta): rows of 3072 channel-major bytes."""
    ten = kind == "cifar10"
    folder = root / ("cifar-10-batches-py" if ten else "cifar-100-python")
    folder.mkdir(parents=True)
    label_key = "labels" if ten else "fine_labels"
    names = ["data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5"]
    splits = [(n, CLASSES, i) for i, n in enumerate(names)] if ten else []
    splits += [("train", per_class * CLASSES, 0)] if not ten else []
    splits += [("test_batch" if ten else "test", 2 * CLASSES, 9)]
    for name, n, seed in splits:
        pixels, labels = _images(n, 32, seed)
        data = pixels.transpose(0, 3, 1, 2).reshape(n, -1)
        with open(folder / name, "wb") as fh:
            pickle.dump({"data": data, label_key: labels.tolist()}, fh)
    meta, key = ("batches.meta", "label_names") if ten else ("meta", "fine_label_names")
    with open(folder / meta, "wb") as fh:
        pickle.dump({key: [f"class{k}" for k in range(CLASSES)]}, fh)
    return root


def write_stl10(root: Path, per_class: int = 2) -> Path:
    """``root/stl10_binary``: train, test and unlabeled 96 px images (column-major, as STL-10
    stores them), labels 1-based."""
    folder = root / "stl10_binary"
    folder.mkdir(parents=True)
    for split, n, seed in (
        ("train", per_class * CLASSES, 0),
        ("test", CLASSES, 1),
        ("unlabeled", 4, 2),
    ):
        pixels, labels = _images(n, 96, seed)
        pixels.transpose(0, 3, 2, 1).tofile(folder / f"{split}_X.bin")
        if split != "unlabeled":
            (labels + 1).astype(np.uint8).tofile(folder / f"{split}_y.bin")
    (folder / "class_names.txt").write_text("\n".join(f"class{k}" for k in range(CLASSES)))
    return root


def write_folders(root: Path, size: int = 40, per_class: int = 4) -> Path:
    """``root/{train,val}/class<k>/<n>.png``."""
    for split, n, seed in (("train", per_class * CLASSES, 0), ("val", 2 * CLASSES, 1)):
        pixels, labels = _images(n, size, seed)
        for i, (img, label) in enumerate(zip(pixels, labels)):
            (root / split / f"class{label}").mkdir(parents=True, exist_ok=True)
            Image.fromarray(img).save(root / split / f"class{label}" / f"{i}.png")
    return root
