"""Fixtures and options shared by the tests (plain helper functions: ``tests/helpers/``).
``pytest -m gpu --device cuda`` (scripts/gpu_check.sh) runs the ``device`` tests on the GPU."""

from __future__ import annotations

from pathlib import Path
from typing import Dict

import pytest
import torch
from helpers.datasets import write_folders

from attnce_plugin.install import require_solo


def pytest_addoption(parser: pytest.Parser) -> None:
    text = "device of the tests that take the `device` fixture (default cpu)"
    parser.addoption("--device", choices=("cpu", "cuda"), default="cpu", help=text)


def pytest_configure(config: pytest.Config) -> None:
    require_solo()  # most tests need solo-learn: without it, stop loudly with install steps
    # Asked for CUDA and none there: stop before any test, instead of testing the CPU again.
    if config.getoption("--device") == "cuda" and not torch.cuda.is_available():
        raise pytest.UsageError("--device cuda, but torch.cuda.is_available() is False")


@pytest.fixture(scope="session")
def device(request: pytest.FixtureRequest) -> torch.device:
    return torch.device(request.config.getoption("--device"))


@pytest.fixture(scope="session")
def tiny_image_folder(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    """``{"train": <5 classes x 4 images>, "val": <5 x 2>}``, 40x40 PNGs (helpers.datasets)."""
    root = write_folders(tmp_path_factory.mktemp("tiny_images"))
    return {"train": root / "train", "val": root / "val"}
