"""Small image datasets written by the tests: ImageFolder trees and fake Fashion-MNIST IDX files."""

from __future__ import annotations

from pathlib import Path

#: Image size of the generated dataset: small, but larger than every test crop.
TINY_IMAGE_SIZE = 40


def make_image_folder(root: Path, num_classes: int = 2, per_class: int = 8, seed: int = 0) -> Path:
    """Write ``root/class<k>/<i>.png`` random RGB images (a torchvision ImageFolder).

    Args:
        root: folder to create.
        num_classes: number of class sub-folders.
        per_class: images per class.
        seed: numpy seed, so that every test run sees the same pixels.

    Returns:
        ``root``.
    """
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    for k in range(num_classes):
        folder = root / f"class{k}"
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            # A per-class colour cast keeps the classes separable for the linear-probe smoke test.
            pixels = rng.integers(0, 256, size=(TINY_IMAGE_SIZE, TINY_IMAGE_SIZE, 3))
            pixels[..., k % 3] = np.clip(pixels[..., k % 3] + 80, 0, 255)
            Image.fromarray(pixels.astype("uint8")).save(folder / f"{i}.png")
    return root


def write_fake_fashion_mnist(root: Path, train_per_class: int, test_per_class: int) -> Path:
    """Write the 4 gzipped Fashion-MNIST IDX files with constant 28x28 images: every image of
    class k has pixel value 20k, labels cycle 0..9 (``n`` per class per split).

    Returns:
        ``root``, usable as ``prepare_fashion_mnist(source=...)`` or ``$FASHION_MNIST_DIR``.
    """
    import gzip
    import struct

    import numpy as np

    def write_idx(path: Path, array: np.ndarray) -> None:
        header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(">" + "I" * array.ndim, *array.shape)
        with gzip.open(path, "wb") as fh:
            fh.write(header + array.astype(np.uint8).tobytes())

    root.mkdir(parents=True, exist_ok=True)
    for prefix, per_class in (("train", train_per_class), ("t10k", test_per_class)):
        labels = np.arange(10 * per_class) % 10
        images = np.repeat(labels * 20, 28 * 28).reshape(-1, 28, 28)
        write_idx(root / f"{prefix}-images-idx3-ubyte.gz", images)
        write_idx(root / f"{prefix}-labels-idx1-ubyte.gz", labels)
    return root
