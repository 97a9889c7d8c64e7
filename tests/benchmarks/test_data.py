"""Fashion-MNIST -> image folder conversion of the benchmark, on a few fake IDX images."""

from __future__ import annotations

import gzip
import json
import struct
from pathlib import Path

import numpy as np
import pytest
from helpers.images import write_fake_fashion_mnist

from benchmarks.data import (
    CLASS_NAMES,
    DatasetMissingError,
    prepare_fashion_mnist,
    read_idx,
    stratified_subset,
)


def _write_idx(path: Path, array: np.ndarray) -> None:
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(">" + "I" * array.ndim, *array.shape)
    with gzip.open(path, "wb") as fh:
        fh.write(header + array.astype(np.uint8).tobytes())


@pytest.fixture()
def fake_fmnist(tmp_path: Path) -> Path:
    """4 IDX files: 30 train and 20 test 28x28 images, 10 classes, pixel value = label * 20."""
    return write_fake_fashion_mnist(tmp_path / "fmnist", train_per_class=3, test_per_class=2)


def test_read_idx_round_trip(tmp_path: Path) -> None:
    data = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    _write_idx(tmp_path / "x.gz", data)
    np.testing.assert_array_equal(read_idx(tmp_path / "x.gz"), data)


def test_read_idx_rejects_garbage(tmp_path: Path) -> None:
    (tmp_path / "bad").write_bytes(b"\x01\x02\x08\x01\x00\x00\x00\x01\x00")
    with pytest.raises(ValueError, match="magic"):
        read_idx(tmp_path / "bad")


def test_stratified_subset_balances_classes() -> None:
    labels = np.repeat(np.arange(10), 50)
    idx = stratified_subset(labels, 25, seed=0)
    counts = np.bincount(labels[idx], minlength=10)
    assert idx.size == 25 and counts.max() - counts.min() <= 1
    np.testing.assert_array_equal(idx, stratified_subset(labels, 25, seed=0))  # reproducible


def test_conversion_writes_rgb_32px_folders(fake_fmnist: Path, tmp_path: Path) -> None:
    from PIL import Image

    splits = prepare_fashion_mnist(
        tmp_path / "cache", num_train=20, num_val=10, seed=0, source=fake_fmnist
    )
    assert sorted(p.name for p in splits.train.iterdir()) == sorted(CLASS_NAMES)
    train_files = list(splits.train.rglob("*.png"))
    val_files = list(splits.val.rglob("*.png"))
    assert len(train_files) == 20 and len(val_files) == 10
    img = Image.open(train_files[0])
    assert img.size == (32, 32) and img.mode == "RGB"
    # Folder = label: a class-k image has pixel value 20k (constant image survives resizing).
    for f in train_files[:5]:
        k = CLASS_NAMES.index(f.parent.name)
        assert np.asarray(Image.open(f))[16, 16].tolist() == [20 * k] * 3

    # Second call reuses the cache (no rewrite).
    mtime = train_files[0].stat().st_mtime_ns
    again = prepare_fashion_mnist(
        tmp_path / "cache", num_train=20, num_val=10, seed=0, source=fake_fmnist
    )
    assert again == splits and train_files[0].stat().st_mtime_ns == mtime


def test_missing_dataset_says_what_to_install(tmp_path: Path) -> None:
    with pytest.raises(DatasetMissingError, match="apt-get install dataset-fashion-mnist"):
        prepare_fashion_mnist(tmp_path / "cache", 10, 10, source=tmp_path / "nowhere")


def test_class_subset_keeps_totals_and_only_those_folders(
    fake_fmnist: Path, tmp_path: Path
) -> None:
    from PIL import Image

    splits = prepare_fashion_mnist(
        tmp_path / "cache", num_train=6, num_val=4, seed=0, source=fake_fmnist, classes=[7, 3]
    )
    root = splits.train.parent
    # Class ids (sorted) in the cache name and the marker, so each subset has its own cache.
    assert root.name == "fashion-mnist_32px_train6_val4_seed0_classes3-7"
    assert json.loads((root / "READY.json").read_text())["classes"] == [3, 7]
    for folder, per_class in ((splits.train, 3), (splits.val, 2)):
        # Only the kept classes have folders (solo counts them for data.num_classes), stratified.
        assert sorted(p.name for p in folder.iterdir()) == ["3_dress", "7_sneaker"]
        for sub in folder.iterdir():
            files = list(sub.glob("*.png"))
            assert len(files) == per_class
            assert np.asarray(Image.open(files[0]))[16, 16, 0] == 20 * int(sub.name[0])

    # Without classes: the cache name and marker are what they always were (old caches reused).
    full = prepare_fashion_mnist(
        tmp_path / "cache", num_train=6, num_val=4, seed=0, source=fake_fmnist
    )
    assert full.train.parent.name == "fashion-mnist_32px_train6_val4_seed0"
    assert "classes" not in json.loads((full.train.parent / "READY.json").read_text())


@pytest.mark.parametrize("classes", [[3], [3, 3], [3, 10], [-1, 2]])
def test_class_subset_refuses_bad_ids(fake_fmnist: Path, tmp_path: Path, classes) -> None:
    with pytest.raises(ValueError, match="distinct label ids in 0..9"):
        prepare_fashion_mnist(tmp_path / "cache", 4, 4, source=fake_fmnist, classes=classes)


def test_class_subset_too_small_for_the_total(fake_fmnist: Path, tmp_path: Path) -> None:
    # 2 classes x 3 training images cannot give 7; no image of another class fills the gap.
    with pytest.raises(ValueError, match="subset size 7"):
        prepare_fashion_mnist(tmp_path / "cache", 7, 4, source=fake_fmnist, classes=[0, 1])
