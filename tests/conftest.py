"""Fixtures shared by the tests; plain helper functions are in ``tests/helpers/``."""

from __future__ import annotations

from pathlib import Path
from typing import Dict

import pytest
from helpers.images import make_image_folder


@pytest.fixture(scope="session")
def tiny_image_folder(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    """A tiny labelled dataset: ``{"train": <5 classes x 4 images>, "val": <5 x 2>}``, 40x40 PNGs.

    5 classes because solo-learn's ``main_linear.py`` computes top-5 accuracy unguarded.
    """
    root = tmp_path_factory.mktemp("tiny_images")
    return {
        "train": make_image_folder(root / "train", num_classes=5, per_class=4, seed=0),
        "val": make_image_folder(root / "val", num_classes=5, per_class=2, seed=1),
    }
