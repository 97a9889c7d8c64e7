"""Fixtures and options shared by the tests (plain helper functions: ``tests/helpers/``).
``pytest -m gpu --device cuda`` (scripts/gpu_check.sh) runs the ``device`` tests on the GPU."""

from __future__ import annotations

from pathlib import Path
from typing import Dict

import numpy as np
import pytest
import torch
from PIL import Image


def pytest_addoption(parser: pytest.Parser) -> None:
    text = "device of the tests that take the `device` fixture (default cpu)"
    parser.addoption("--device", choices=("cpu", "cuda"), default="cpu", help=text)


def pytest_configure(config: pytest.Config) -> None:
    # Asked for CUDA and none there: stop before any test, instead of testing the CPU again.
    if config.getoption("--device") == "cuda" and not torch.cuda.is_available():
        raise pytest.UsageError("--device cuda, but torch.cuda.is_available() is False")


@pytest.fixture(scope="session")
def device(request: pytest.FixtureRequest) -> torch.device:
    return torch.device(request.config.getoption("--device"))


@pytest.fixture(scope="session")
def tiny_image_folder(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    """``{"train": <5 classes x 4 images>, "val": <5 x 2>}``, 40x40 PNGs; 5 classes because
    solo-learn's ``main_linear.py`` computes top-5 accuracy unguarded."""
    root = tmp_path_factory.mktemp("tiny_images")
    rng = np.random.default_rng(0)
    for split, per_class in (("train", 4), ("val", 2)):
        for k in range(5):
            (root / split / f"class{k}").mkdir(parents=True)
            for i in range(per_class):
                pixels = rng.integers(0, 256, size=(40, 40, 3))  # larger than every test crop
                # A per-class colour cast keeps the classes separable for the linear probe.
                pixels[..., k % 3] = np.clip(pixels[..., k % 3] + 80, 0, 255)
                Image.fromarray(pixels.astype("uint8")).save(root / f"{split}/class{k}/{i}.png")
    return {"train": root / "train", "val": root / "val"}
