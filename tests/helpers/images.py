"""Small image datasets written by the tests: ImageFolder trees."""

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
