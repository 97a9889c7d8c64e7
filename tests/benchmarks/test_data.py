"""The data sets (benchmarks/data.py): Fashion-MNIST -> image folders, on IDX files written here
by hand and the real package's files where Debian installed them; every other format's layout
check and the probes' stratified subsets, on small files in the real layouts."""

from __future__ import annotations

import gzip
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from benchmarks import data


def _write_idx(path: Path, array: np.ndarray) -> None:
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(">" + "I" * array.ndim, *array.shape)
    with gzip.open(path, "wb") as fh:
        fh.write(header + array.astype(np.uint8).tobytes())


@pytest.fixture()
def fake(tmp_path: Path, monkeypatch) -> Path:
    """$FASHION_MNIST_DIR: 30 train and 20 test 28x28 images, labels cycling 0..9, every class-k
    pixel 20k."""
    for prefix, n in (("train", 30), ("t10k", 20)):
        labels = np.arange(n) % 10
        images = np.repeat(labels * 20, 28 * 28).reshape(-1, 28, 28)
        _write_idx(tmp_path / f"{prefix}-images-idx3-ubyte.gz", images)
        _write_idx(tmp_path / f"{prefix}-labels-idx1-ubyte.gz", labels)
    monkeypatch.setenv("FASHION_MNIST_DIR", str(tmp_path))
    return tmp_path


def test_stratified_subset_balances_classes_reproducibly() -> None:
    labels = np.repeat(np.arange(10), 50)
    idx = data.stratified_subset(labels, 25, seed=0)
    assert len(set(idx)) == 25 and np.ptp(np.bincount(labels[idx], minlength=10)) <= 1
    np.testing.assert_array_equal(idx, data.stratified_subset(labels, 25, seed=0))
    assert not np.array_equal(idx, data.stratified_subset(labels, 25, seed=1))


def test_conversion_writes_labelled_rgb_32px_folders_once(fake: Path, tmp_path: Path) -> None:
    folder = data.prepare_fashion_mnist(tmp_path / "cache", 20, 10)
    assert folder.name == "fashion-mnist_32px_train20_val10_seed0"  # existing caches
    assert sorted(p.name for p in (folder / "train").iterdir()) == sorted(data.CLASS_NAMES)
    train = list((folder / "train").rglob("*.png"))
    assert len(train) == 20 and len(list((folder / "val").rglob("*.png"))) == 10
    for f in train:  # folder = label: class k is pixel value 20k (a constant image resizes so)
        img = Image.open(f)
        assert img.size == (32, 32) and img.mode == "RGB"
        assert np.asarray(img)[16, 16].tolist() == [20 * data.CLASS_NAMES.index(f.parent.name)] * 3
    stamp = train[0].stat().st_mtime_ns
    assert data.prepare_fashion_mnist(tmp_path / "cache", 20, 10) == folder
    assert train[0].stat().st_mtime_ns == stamp  # reused, not rewritten
    (fake / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(b"\1\2\x08\1\0\0\0\1\0"))
    with pytest.raises(ValueError, match="not an IDX file"):
        data.load_fashion_mnist("test")


def test_the_real_files_read_as_fashion_mnist_and_missing_ones_say_what_to_install(
    tmp_path: Path, monkeypatch
) -> None:
    # FAILS without Debian's dataset-fashion-mnist, as the benchmark would.
    images, labels = data.load_fashion_mnist("test")
    assert images.shape == (10000, 28, 28) and np.bincount(labels).tolist() == [1000] * 10
    monkeypatch.setenv("FASHION_MNIST_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match="(?s)dataset-fashion-mnist.*FASHION_MNIST_DIR"):
        data.prepare_fashion_mnist(tmp_path / "cache", 10, 10)


@pytest.mark.parametrize("name", ["cifar10", "cifar100", "stl10", "imagenet100", "folder"])
def test_each_format_checks_its_layout_and_names_what_is_missing(name, tmp_path) -> None:
    from helpers.datasets import write_cifar, write_folders, write_stl10

    spec, root = data.DATASETS[name], tmp_path / name
    {"stl10": write_stl10, "imagenet100": write_folders, "folder": write_folders}.get(
        name, lambda r: write_cifar(r, name)
    )(root)
    spec.check(root, name)  # the layout the helpers write is the one expected
    gone = root / spec.expected[-1]
    shutil.rmtree(gone) if gone.is_dir() else gone.unlink()
    with pytest.raises(FileNotFoundError, match=f"--data {name}: .* lacks {spec.expected[-1]} "):
        spec.check(root, name)


def test_the_probes_take_class_stratified_subsets_of_a_folders_splits(tmp_path) -> None:
    from helpers.datasets import CLASSES, write_folders

    train, val = data.DATASETS["folder"].splits(write_folders(tmp_path, per_class=4), None)
    assert (len(train), len(val)) == (4 * CLASSES, 2 * CLASSES)
    picked = data.subset(train, 10)
    assert sorted(train.targets[i] for i in picked.indices) == sorted(list(range(CLASSES)) * 2)
    assert data.subset(train, None) is train and data.subset(val, 99) is val
