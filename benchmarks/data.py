"""The benchmark's embedded dataset: Fashion-MNIST as cached 32 px RGB image folders.

Fashion-MNIST comes from Debian's ``dataset-fashion-mnist`` package (four gzipped IDX files under
``/usr/share/datasets/fashion-mnist``), so the default benchmark needs no network. solo-learn reads
it as a ``custom`` dataset in ``image_folder`` format, so it is converted once into
``<cache>/train/<class>/<n>.png`` and ``<cache>/val/<class>/<n>.png``; later runs reuse the folder.

The train folder is a class-stratified subset of the 60,000 training images (the CPU budget does
not allow all of them); the val folder is a stratified subset of the 10,000 test images, so no val
image was ever seen in pretraining. ``classes=`` keeps only some classes (same subset sizes, spread
over fewer classes), for experiments that vary the number of classes
(scripts/false_negative_robustness.py).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple

import numpy as np

#: Where Debian's dataset-fashion-mnist installs the data; ``$FASHION_MNIST_DIR`` overrides it.
DEFAULT_FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")

#: File names of the four IDX files, keyed by (split, kind).
_FILES: Dict[Tuple[str, str], str] = {
    ("train", "images"): "train-images-idx3-ubyte.gz",
    ("train", "labels"): "train-labels-idx1-ubyte.gz",
    ("test", "images"): "t10k-images-idx3-ubyte.gz",
    ("test", "labels"): "t10k-labels-idx1-ubyte.gz",
}

#: Class folder names. The numeric prefix keeps torchvision's ImageFolder (which sorts folder
#: names) assigning the original Fashion-MNIST label ids.
CLASS_NAMES = (
    "0_tshirt_top",
    "1_trouser",
    "2_pullover",
    "3_dress",
    "4_coat",
    "5_sandal",
    "6_shirt",
    "7_sneaker",
    "8_bag",
    "9_ankle_boot",
)

#: Bumped whenever the conversion changes, so stale caches are rebuilt rather than reused.
_CACHE_FORMAT = 1


class DatasetMissingError(FileNotFoundError):
    """The Fashion-MNIST IDX files are not where the benchmark looked."""


@dataclass(frozen=True)
class ImageFolderSplits:
    """Paths of a prepared dataset in solo-learn's ``image_folder`` layout."""

    train: Path
    val: Path
    num_train: int
    num_val: int
    image_size: int


def fashion_mnist_dir() -> Path:
    """The folder holding the IDX files: ``$FASHION_MNIST_DIR`` or Debian's location."""
    env = os.environ.get("FASHION_MNIST_DIR")
    return Path(env) if env else DEFAULT_FASHION_MNIST_DIR


def _require_files(root: Path) -> None:
    missing = [name for name in _FILES.values() if not (root / name).is_file()]
    if missing:
        raise DatasetMissingError(
            f"Fashion-MNIST not found: {', '.join(missing)} missing in {root}.\n"
            "The benchmark's default dataset comes from the Debian/Ubuntu package "
            "'dataset-fashion-mnist'. Install it with\n"
            "    sudo apt-get install dataset-fashion-mnist\n"
            "or point FASHION_MNIST_DIR at a folder holding the four original files "
            f"({', '.join(sorted(_FILES.values()))}), or benchmark another dataset with "
            "--dataset/--train-path/--val-path."
        )


def read_idx(path: Path) -> np.ndarray:
    """Read a (optionally gzipped) IDX file of unsigned bytes.

    Returns:
        uint8 array of the shape stored in the header: ``[N, rows, cols]`` for images, ``[N]``
        for labels.
    """
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as fh:
        data = fh.read()
    # Header: two zero bytes, a type code (0x08 = unsigned byte), the number of dimensions, then
    # one big-endian uint32 per dimension.
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise ValueError(f"{path} is not an IDX file (bad magic number)")
    if data[2] != 0x08:
        raise ValueError(f"{path}: IDX type code {data[2]:#x} is not unsigned byte (0x08)")
    ndim = data[3]
    shape = struct.unpack(">" + "I" * ndim, data[4 : 4 + 4 * ndim])
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != int(np.prod(shape)):
        raise ValueError(f"{path}: header says {shape} but holds {body.size} bytes")
    return body.reshape(shape)


def load_fashion_mnist(split: str, root: Optional[Path] = None) -> Tuple[np.ndarray, np.ndarray]:
    """Load one split of Fashion-MNIST.

    Args:
        split: ``"train"`` (60,000 images) or ``"test"`` (10,000 images).
        root: folder with the IDX files; defaults to :func:`fashion_mnist_dir`.

    Returns:
        ``(images, labels)``: uint8 ``[N, 28, 28]`` and int64 ``[N]``.
    """
    if split not in ("train", "test"):
        raise ValueError(f"split={split!r}: allowed values are 'train' and 'test'")
    root = fashion_mnist_dir() if root is None else Path(root)
    _require_files(root)
    images = read_idx(root / _FILES[(split, "images")])
    labels = read_idx(root / _FILES[(split, "labels")]).astype(np.int64)
    if images.shape[0] != labels.shape[0]:
        raise ValueError(f"{root}: {images.shape[0]} images but {labels.shape[0]} labels")
    return images, labels


def stratified_subset(labels: np.ndarray, n: int, seed: int) -> np.ndarray:
    """Indices of ``n`` items with the classes as balanced as ``labels`` allows.

    Args:
        labels: int ``[N]``.
        n: how many to pick (``0 < n <= N``).
        seed: seed of the pick, so the cache is reproducible.

    Returns:
        sorted int64 ``[n]`` indices into ``labels``.
    """
    if not 0 < n <= labels.shape[0]:
        raise ValueError(f"subset size {n} must be in [1, {labels.shape[0]}]")
    rng = np.random.default_rng(seed)
    classes = np.unique(labels)
    per_class = [rng.permutation(np.flatnonzero(labels == c)) for c in classes]
    # Round-robin over classes so every class gets n // C (+1 for the first n % C classes).
    take = [
        per_class[i][: n // len(classes) + (1 if i < n % len(classes) else 0)]
        for i in range(len(classes))
    ]
    picked = np.concatenate(take)
    if picked.size < n:  # only when some class is too small; fill from the rest at random
        rest = np.setdiff1d(np.arange(labels.shape[0]), picked)
        picked = np.concatenate([picked, rng.permutation(rest)[: n - picked.size]])
    return np.sort(picked)


def _check_classes(classes: Sequence[int]) -> Tuple[int, ...]:
    """``classes`` sorted, after checking they are distinct Fashion-MNIST label ids (at least 2)."""
    ids = tuple(sorted(int(c) for c in classes))
    if len(ids) < 2 or len(set(ids)) != len(ids) or not all(0 <= c < len(CLASS_NAMES) for c in ids):
        raise ValueError(
            f"classes={list(classes)}: need at least 2 distinct label ids in "
            f"0..{len(CLASS_NAMES) - 1}"
        )
    return ids


def _subset_of_classes(
    labels: np.ndarray, n: int, seed: int, classes: Optional[Tuple[int, ...]]
) -> np.ndarray:
    """:func:`stratified_subset` over all labels, or over the items of ``classes`` only."""
    if classes is None:
        return stratified_subset(labels, n, seed)
    pool = np.flatnonzero(np.isin(labels, classes))
    return pool[stratified_subset(labels[pool], n, seed)]


def _write_folder(
    images: np.ndarray, labels: np.ndarray, out: Path, size: int, classes: Sequence[int]
) -> None:
    from PIL import Image

    # Only the kept classes get a folder: solo-learn counts class folders for data.num_classes
    # (its online linear classifier) and torchvision's ImageFolder refuses empty ones.
    for c in classes:
        (out / CLASS_NAMES[c]).mkdir(parents=True, exist_ok=True)
    for i, (img, label) in enumerate(zip(images, labels)):
        pil = Image.fromarray(img, mode="L")
        if size != pil.width:
            # Bilinear is enough for 28 -> 32; the 3 identical channels let the RGB backbone and
            # solo's colour augmentations run unchanged.
            pil = pil.resize((size, size), Image.BILINEAR)
        pil.convert("RGB").save(out / CLASS_NAMES[int(label)] / f"{i:05d}.png")


def prepare_fashion_mnist(
    cache_root: Path,
    num_train: int,
    num_val: int,
    image_size: int = 32,
    seed: int = 0,
    source: Optional[Path] = None,
    classes: Optional[Sequence[int]] = None,
) -> ImageFolderSplits:
    """Convert (once) a Fashion-MNIST subset into image folders that solo-learn reads.

    Args:
        cache_root: folder under which the converted copy lives (one subfolder per setting).
        num_train: images taken from the 60,000 training images (class-stratified).
        num_val: images taken from the 10,000 test images (class-stratified).
        image_size: side of the square RGB PNGs written.
        seed: seed of the subset pick.
        source: folder with the IDX files; defaults to :func:`fashion_mnist_dir`.
        classes: Fashion-MNIST label ids to keep (None: all 10). ``num_train`` / ``num_val``
            stay the totals, stratified over the kept classes; only their folders are written,
            so ImageFolder renumbers them 0..len(classes)-1 in id order.

    Returns:
        The two folders and their sizes.

    Raises:
        DatasetMissingError: the IDX files are missing (the message says what to install).
        ValueError: bad ``classes``, or more images asked for than the kept classes hold.
    """
    ids = None if classes is None else _check_classes(classes)
    name = f"fashion-mnist_{image_size}px_train{num_train}_val{num_val}_seed{seed}"
    expected: Dict[str, object] = {
        "format": _CACHE_FORMAT,
        "num_train": num_train,
        "num_val": num_val,
        "image_size": image_size,
        "seed": seed,
    }
    if ids is not None:  # without classes, names and markers stay as before (existing caches)
        name += "_classes" + "-".join(map(str, ids))
        expected["classes"] = list(ids)
    target = Path(cache_root) / name
    marker = target / "READY.json"
    if marker.is_file():
        try:
            if json.loads(marker.read_text()) == expected:
                return ImageFolderSplits(
                    target / "train", target / "val", num_train, num_val, image_size
                )
        except json.JSONDecodeError:
            pass  # a damaged marker: rebuild below
    source = fashion_mnist_dir() if source is None else Path(source)
    _require_files(source)
    # Build in a temporary sibling and rename at the end, so an interrupted conversion never
    # leaves a half-written folder that a later run would take as complete.
    tmp = target.with_name(target.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    kept = ids if ids is not None else tuple(range(len(CLASS_NAMES)))
    for split, folder, n in (("train", "train", num_train), ("test", "val", num_val)):
        images, labels = load_fashion_mnist(split, source)
        idx = _subset_of_classes(labels, n, seed, ids)
        _write_folder(images[idx], labels[idx], tmp / folder, image_size, kept)
    (tmp / "READY.json").write_text(json.dumps(expected))
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    return ImageFolderSplits(target / "train", target / "val", num_train, num_val, image_size)
