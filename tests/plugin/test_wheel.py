"""The wheel of this repository: it carries only ``attnce_plugin`` and its configs (the benchmark
stays in the clone), and docs/solo-learn-usage.md's two ways to name a config run solo-learn's
``main_pretrain.py`` from it, installed (not editable) in a fresh venv, outside the repository.
Needs solo-learn; FAILS, never skips, without it."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from helpers.images import make_image_folder
from helpers.scripts import REPO_ROOT

from attnce_plugin.solo_compat import require_solo, solo_checkout_dir

pytestmark = pytest.mark.integration  # builds a wheel and runs solo-learn's scripts


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(dist), str(REPO_ROOT)],
        check=True, capture_output=True,
    )  # fmt: skip
    return next(dist.glob("attnce_plugin-*.whl"))


@pytest.fixture(scope="module")
def venv_bin(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv seeing this Python's packages (torch, solo-learn) with the wheel installed."""
    require_solo()
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    subprocess.run(
        # --force-reinstall: the checkout's egg-info on PYTHONPATH would pass for an install
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps",
         "--force-reinstall", str(wheel)],
        check=True, capture_output=True, env=_env(),
    )  # fmt: skip
    return venv / "bin"


def _env() -> dict:
    # No PYTHONPATH into the checkout: the installed package must do everything by itself.
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def test_wheel_holds_the_plugin_and_its_configs_only(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"attnce_plugin", wheel.name.split("-py")[0] + ".dist-info"}, tops
    assert "attnce_plugin/configs/pretrain/cifar/attentionnce.yaml" in names
    assert "attnce_plugin/configs/trainer/cpu.yaml" in names
    entry_points = (
        zipfile.ZipFile(wheel)
        .read(next(n for n in names if n.endswith("entry_points.txt")))
        .decode()
    )
    assert "attnce-configs" in entry_points and "bench" not in entry_points


def test_usage_commands_run_from_the_installed_wheel(venv_bin: Path, tmp_path: Path) -> None:
    """The folder printed by attnce-configs, and pkg://attnce_plugin.configs (2 CPU steps each)."""
    train = make_image_folder(tmp_path / "train", num_classes=2, per_class=4)
    folder = subprocess.run(
        [str(venv_bin / "attnce-configs"), "pretrain/custom"],
        env=_env(), capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert "site-packages" in folder and str(REPO_ROOT) not in folder
    small = [
        "trainer=cpu", "data.num_workers=0", f"data.train_path={train}", "~data.val_path",
        "views.crop_size=32", "optimizer.batch_size=4", "max_epochs=1", "++limit_train_batches=2",
        "++scheduler.warmup_epochs=0", "auto_resume.enabled=False",
        "method_kwargs.proj_hidden_dim=32", "method_kwargs.proj_output_dim=16",
    ]  # fmt: skip
    namings = (
        ["--config-path", folder, "--config-name", "attentionnce.yaml"],
        ["--config-path", "pkg://attnce_plugin.configs",
         "--config-name", "pretrain/custom/attentionnce.yaml"],
    )  # fmt: skip
    for i, naming in enumerate(namings):
        ckpt = tmp_path / f"ckpt{i}"
        proc = subprocess.run(
            [str(venv_bin / "python"), str(solo_checkout_dir() / "main_pretrain.py"), *naming,
             *small, f"checkpoint.dir={ckpt}"],
            cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        assert list(ckpt.rglob("*.ckpt")), naming
