"""Shared helpers for the tests that run solo-learn's own scripts as subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import pytest

#: This checkout, put first on the subprocesses' PYTHONPATH so that they test this code even when
#: the editable install points at another clone.
REPO_ROOT = Path(__file__).resolve().parent.parent

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


def subprocess_env(threads: int = 2) -> Dict[str, str]:
    """Environment for the script subprocesses: quiet warnings, bounded threads, no wandb."""
    env = dict(os.environ)
    env.update(
        {
            "PYTHONWARNINGS": "ignore",
            "OMP_NUM_THREADS": str(threads),
            "MKL_NUM_THREADS": str(threads),
            "WANDB_MODE": "disabled",
            "HYDRA_FULL_ERROR": "1",
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p
            ),
        }
    )
    return env


#: Runs a solo-learn script with an explicit CSV logger (see that file for why).
CSV_LOGGER_LAUNCHER = REPO_ROOT / "tests" / "run_with_csv_logger.py"


def run_script(
    argv: Sequence[str],
    cwd: Path,
    *,
    timeout: float = 600,
    threads: int = 2,
    check: bool = True,
    csv_logger: bool = False,
) -> subprocess.CompletedProcess:
    """Run ``python <argv...>`` in ``cwd``; with ``check`` fail the test showing the output tail.

    Args:
        csv_logger: run the script (``argv[0]``) through :data:`CSV_LOGGER_LAUNCHER`, so that its
            metrics land in ``cwd/lightning_logs/*/metrics.csv`` (:func:`read_metrics_csv`) also
            where tensorboard is installed and Lightning would default to TensorBoard.

    Returns:
        The completed process, ``stdout`` holding stdout and stderr together.
    """
    if csv_logger:
        argv = [str(CSV_LOGGER_LAUNCHER), *argv]
    proc = subprocess.run(
        [sys.executable, *argv],
        cwd=str(cwd),
        env=subprocess_env(threads),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        pytest.fail(
            f"{' '.join(argv[:3])} ... exited with {proc.returncode}:\n{proc.stdout[-6000:]}",
            pytrace=False,
        )
    return proc


def find_checkpoints(ckpt_dir: Path) -> List[Path]:
    """All ``*.ckpt`` files under ``ckpt_dir``, sorted by path."""
    return sorted(ckpt_dir.rglob("*.ckpt"))


def read_metrics_csv(cwd: Path) -> Optional[List[Dict[str, str]]]:
    """Rows of the CSV logger's ``metrics.csv`` written under ``cwd/lightning_logs``, or None.

    Only a run started with ``run_script(..., csv_logger=True)`` is sure to have one: otherwise
    Lightning logs to TensorBoard wherever tensorboard is installed.
    """
    import csv

    files = sorted(cwd.glob("lightning_logs/*/metrics.csv"))
    if not files:
        return None
    with open(files[-1]) as fh:
        return list(csv.DictReader(fh))


def compose_pretrain_cfg(
    config_name: str, train_path: Path, overrides: Sequence[str] = (), family: str = "cifar"
):
    """Compose the shipped ``pretrain/<family>/<config_name>`` for a tiny in-process CPU model and run
    it through solo-learn's ``parse_cfg`` wrapped by the plugin (crop roles set).

    Small projector, batch 4, 1 epoch, custom data at ``train_path`` without validation; the
    multicrop configs' positive crops shrink to 16 px. ``overrides`` come last.
    """
    import solo.args.pretrain as solo_pretrain_args
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from attnce_plugin.configs import config_dir
    from attnce_plugin.patches import wrap_pretrain_parse_cfg

    base = [
        "data.dataset=custom", f"data.train_path={train_path}", "~data.val_path",
        "method_kwargs.proj_hidden_dim=32", "method_kwargs.proj_output_dim=16",
        "optimizer.batch_size=4", 'devices="1"', "++scheduler.warmup_epochs=0", "max_epochs=1",
    ]
    if "multicrop" in config_name:
        base.append("views.positive_crop_size=16")
    with initialize_config_dir(config_dir=str(config_dir() / "pretrain" / family), version_base="1.2"):
        cfg = compose(config_name, overrides=[*base, *overrides])
    OmegaConf.set_struct(cfg, False)
    return wrap_pretrain_parse_cfg(solo_pretrain_args.parse_cfg)(cfg)
