"""Fixtures and options shared by the tests; plain helper functions are in ``tests/helpers/``.

``--device cuda`` runs the tests that take the ``device`` fixture on the GPU (``pytest -m gpu
--device cuda`` is the GPU check, scripts/gpu_check.sh); the default is the CPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict

import pytest
import torch
from helpers.images import make_image_folder


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="device of the tests that take the `device` fixture (default cpu)",
    )


def pytest_configure(config: pytest.Config) -> None:
    # Asked for CUDA and none there: stop before any test, instead of testing the CPU again.
    if config.getoption("--device") == "cuda" and not torch.cuda.is_available():
        raise pytest.UsageError("--device cuda, but torch.cuda.is_available() is False")


@pytest.fixture(scope="session")
def device(request: pytest.FixtureRequest) -> torch.device:
    """The ``--device`` the tests marked ``gpu`` run on."""
    return torch.device(request.config.getoption("--device"))


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
