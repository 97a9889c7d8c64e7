"""The benchmark's data sets. The embedded default, Fashion-MNIST from Debian's
``dataset-fashion-mnist`` (no network), is converted once into 32 px RGB image folders that
solo-learn reads as ``custom`` data: ``<cache>/<setting>/{train,val}/<class>/<n>.png``; train is a
class-stratified subset of the 60,000 training images, val one of the 10,000 test images (no val
image is seen in pretraining). The others are read where ``--data-dir`` has them, in the layouts
torchvision and solo-learn read (:data:`DATASETS`); nothing is downloaded."""

from __future__ import annotations

import gzip
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Tuple

import numpy as np

DEFAULT_DIR = Path("/usr/share/datasets/fashion-mnist")  # $FASHION_MNIST_DIR overrides it
FILES = {"train": "train-{}-idx{}-ubyte.gz", "test": "t10k-{}-idx{}-ubyte.gz"}
#: The numeric prefix keeps ImageFolder (which sorts folder names) on the original label ids.
CLASSES = "tshirt_top trouser pullover dress coat sandal shirt sneaker bag ankle_boot".split()
CLASS_NAMES = tuple(f"{i}_{name}" for i, name in enumerate(CLASSES))


def read_idx(path: Path) -> np.ndarray:
    """A gzipped IDX file of unsigned bytes, in the shape its header gives: two zero bytes, type
    code 0x08, the number of dimensions, one big-endian uint32 per dimension, the data."""
    data = gzip.open(path).read()
    if data[:3] != b"\0\0\x08":
        raise ValueError(f"{path} is not an IDX file of unsigned bytes")
    shape = np.frombuffer(data, ">u4", count=data[3], offset=4)
    return np.frombuffer(data, np.uint8, offset=4 + 4 * data[3]).reshape(shape)


def load_fashion_mnist(split: str) -> Tuple[np.ndarray, np.ndarray]:
    """(uint8 images [N, 28, 28], int64 labels [N]) of ``train`` or ``test``."""
    root = Path(os.environ.get("FASHION_MNIST_DIR") or DEFAULT_DIR)
    images, labels = (root / FILES[split].format(*kind) for kind in (("images", 3), ("labels", 1)))
    if not (images.is_file() and labels.is_file()):
        raise FileNotFoundError(
            f"Fashion-MNIST not found: {images.name} or {labels.name} missing in {root}. Install "
            "the Debian/Ubuntu package with\n    sudo apt-get install dataset-fashion-mnist\nor "
            "point FASHION_MNIST_DIR at a folder holding the four original files."
        )
    return read_idx(images), read_idx(labels).astype(np.int64)


def stratified_subset(labels: np.ndarray, n: int, seed: int) -> np.ndarray:
    """Sorted indexes of ``n`` items, the classes balanced (each class must hold n / C of them, as
    Fashion-MNIST's equal classes do)."""
    if not 0 < n <= labels.shape[0]:
        raise ValueError(f"subset size {n} must be in [1, {labels.shape[0]}]")
    rng, classes = np.random.default_rng(seed), np.unique(labels)
    per_class = [rng.permutation(np.flatnonzero(labels == c)) for c in classes]
    c = len(classes)
    return np.sort(np.concatenate([p[: n // c + (i < n % c)] for i, p in enumerate(per_class)]))


def prepare_fashion_mnist(
    cache_root: Path, num_train: int, num_val: int, image_size: int = 32, seed: int = 0
) -> Path:
    """The folder of a Fashion-MNIST subset (``train/`` and ``val/`` in it), converted once under
    ``cache_root``; FileNotFoundError says what to install when the files are missing."""
    from PIL import Image

    # A new conversion needs a new name (a "_v2"): the folder, once there, is taken as it is.
    name = f"fashion-mnist_{image_size}px_train{num_train}_val{num_val}_seed{seed}"
    target = Path(cache_root) / name
    if target.is_dir():
        return target
    # Built beside the target and renamed at the end: an interrupted conversion leaves no folder
    # that a later run would take as complete.
    tmp = target.with_name(target.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    for split, folder, n in (("train", "train", num_train), ("test", "val", num_val)):
        images, labels = load_fashion_mnist(split)
        idx = stratified_subset(labels, n, seed)
        for cls in CLASS_NAMES:
            (tmp / folder / cls).mkdir(parents=True, exist_ok=True)
        for i, (img, label) in enumerate(zip(images[idx], labels[idx])):
            pil = Image.fromarray(img, mode="L")
            if image_size != pil.width:
                pil = pil.resize((image_size, image_size), Image.BILINEAR)
            # 3 identical channels: the RGB backbone and solo's colour augmentations run as they are
            pil.convert("RGB").save(tmp / folder / CLASS_NAMES[int(label)] / f"{i:05d}.png")
    tmp.rename(target)
    return target


@dataclass(frozen=True)
class Dataset:
    """A ``--data`` choice: the folder of our configs (``pretrain/<family>/``) and of solo-learn's
    (``scripts/pretrain/<solo_family>/``, None where it ships none), solo-learn's ``data.dataset``,
    the files ``--data-dir`` must hold, whether train and val are folders under it (else
    torchvision's root of both splits), and how many train images the probes take by default."""

    family: str
    solo_family: Optional[str]
    solo_name: str
    expected: Tuple[str, ...]
    folders: bool = False
    probe_cap: Optional[int] = None  # train images probed without --num-train

    def paths(self, root: Path) -> Tuple[Path, Path]:
        """(``data.train_path``, ``data.val_path``) under ``root``."""
        return (root / "train", root / "val") if self.folders else (root, root)

    def check(self, root: Path, name: str) -> None:
        """FileNotFoundError naming every expected file or folder that ``root`` lacks."""
        missing = [f for f in self.expected if not (root / f).exists()]
        if missing:
            raise FileNotFoundError(
                f"--data {name}: {root} lacks {', '.join(missing)} (the layout torchvision and "
                "solo-learn read; nothing is downloaded)"
            )

    def splits(self, root: Path, transform: Any) -> Tuple[Any, Any]:
        """The labelled train and validation/test splits, as torch datasets of (image, label)."""
        from torchvision import datasets

        if self.folders:
            return tuple(datasets.ImageFolder(str(p), transform) for p in self.paths(root))
        if self.solo_name == "stl10":
            return tuple(
                datasets.STL10(str(root), s, transform=transform) for s in ("train", "test")
            )
        cls = getattr(datasets, self.solo_name.upper())  # CIFAR10, CIFAR100
        return tuple(cls(str(root), train=t, transform=transform) for t in (True, False))


CIFAR10 = [f"cifar-10-batches-py/{f}" for f in ["batches.meta", "test_batch"]]
CIFAR10 += [f"cifar-10-batches-py/data_batch_{i}" for i in range(1, 6)]
CIFAR100 = tuple(f"cifar-100-python/{f}" for f in ("meta", "train", "test"))
STL10 = [f"stl10_binary/{s}_{x}.bin" for s in ("train", "test") for x in "Xy"]
#: Image folders train/ and val/; at 224 px the raw pixels of 10,000 images take 6 GB.
FOLDERS = dict(expected=("train", "val"), folders=True, probe_cap=10_000)
DATASETS = {
    # The CIFAR family's configs, as custom data: ResNet's ImageNet stem (its CIFAR stem is ~6x
    # slower on a CPU).
    "fashion-mnist": Dataset("cifar", "cifar", "custom", (), folders=True),
    "cifar10": Dataset("cifar", "cifar", "cifar10", tuple(CIFAR10)),
    "cifar100": Dataset("cifar", "cifar", "cifar100", CIFAR100),
    "stl10": Dataset("stl10", None, "stl10", (*STL10, "stl10_binary/unlabeled_X.bin")),
    "imagenet100": Dataset("imagenet-100", "imagenet-100", "imagenet100", **FOLDERS),
    # solo-learn's custom/ holds BYOL alone; its ImageNet-100 configs are the same recipes.
    "folder": Dataset("custom", "imagenet-100", "custom", **FOLDERS),
}


def subset(split: Any, n: Optional[int], seed: int = 0) -> Any:
    """A class-stratified subset of ``n`` items of a labelled split (the split itself for None)."""
    from torch.utils.data import Subset

    if n is None or n >= len(split):
        return split
    labels = getattr(split, "targets", None)
    labels = getattr(split, "labels", None) if labels is None else labels
    return Subset(split, stratified_subset(np.asarray(labels), n, seed).tolist())
