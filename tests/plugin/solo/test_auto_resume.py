"""SIGKILL in the middle of an epoch, then the same ``main_pretrain.py`` command resumes with
solo-learn's auto-resume and finishes with the same configuration.

Needs solo-learn >= 1.0.6 with its checkout; FAILS (not skips) without it. CPU only.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List

import pytest
import torch
from omegaconf import OmegaConf

from attnce_plugin.solo_compat import require_solo

require_solo()

from helpers.configs import pretrain_argv  # noqa: E402
from helpers.images import make_image_folder  # noqa: E402
from helpers.scripts import find_checkpoints, run_script, subprocess_env  # noqa: E402

from attnce_plugin.methods import AttentionNCE  # noqa: E402

pytestmark = pytest.mark.integration  # trains through solo-learn or runs its scripts


STEPS_PER_EPOCH, EPOCHS = 4, 2


def _resume_argv(data: Dict[str, Path], ckpt_dir: Path) -> List[str]:
    argv = pretrain_argv("custom", "attentionnce_multicrop.yaml", data, ckpt_dir)
    return argv + [
        f"max_epochs={EPOCHS}",
        f"++limit_train_batches={STEPS_PER_EPOCH}",
        "augmentations.1.num_crops=1",  # M = 1: cheaper steps, same code path
        "checkpoint.frequency=1",
        "auto_resume.enabled=True",
    ]


class _OutputReader(threading.Thread):
    """Collects a subprocess's merged output as it comes (tqdm redraws with \\r, not \\n)."""

    def __init__(self, proc: subprocess.Popen) -> None:
        super().__init__(daemon=True)
        self.proc, self.chunks, self.lock = proc, [], threading.Lock()

    def run(self) -> None:
        fd = self.proc.stdout.fileno()
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                return
            with self.lock:
                self.chunks.append(chunk.decode(errors="replace"))

    def text(self) -> str:
        with self.lock:
            return "".join(self.chunks)


def _epoch_steps_seen(text: str, epoch: int) -> int:
    """Most training steps of ``epoch`` shown by the progress bar so far."""
    done = [int(m) for m in re.findall(rf"Epoch {epoch}:\s+\d+%\|[^|]*\| (\d+)/", text)]
    return max(done, default=0)


def test_sigkill_mid_epoch_then_auto_resume(tmp_path):
    # 4 classes x 4 images, batch 4: 4 steps per epoch.
    data = {"train": make_image_folder(tmp_path / "train", num_classes=4, per_class=4)}
    ckpt_dir = tmp_path / "ckpt"
    argv = [sys.executable, *_resume_argv(data, ckpt_dir)]

    proc = subprocess.Popen(
        argv,
        cwd=str(tmp_path),
        env=subprocess_env(threads=1),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    reader = _OutputReader(proc)
    reader.start()
    deadline = time.monotonic() + 240
    try:
        # Kill once epoch 0's checkpoint exists and epoch 1 has trained a step: mid-epoch.
        while time.monotonic() < deadline and proc.poll() is None:
            if find_checkpoints(ckpt_dir) and _epoch_steps_seen(reader.text(), 1) >= 1:
                break
            time.sleep(0.05)
        assert proc.poll() is None, f"run ended before it could be killed:\n{reader.text()[-3000:]}"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(timeout=10)
    first = reader.text()
    assert proc.returncode == -signal.SIGKILL
    steps_in_epoch_1 = _epoch_steps_seen(first, 1)
    assert 1 <= steps_in_epoch_1 < STEPS_PER_EPOCH, first[-2000:]
    killed_ckpts = find_checkpoints(ckpt_dir)
    assert [c.name.endswith("-ep=0.ckpt") for c in killed_ckpts] == [True], killed_ckpts

    # The same command again: solo-learn's auto-resume finds epoch 0's checkpoint.
    second = run_script(argv[1:], tmp_path, timeout=300, threads=1)
    out = second.stdout
    assert "Resuming from previous checkpoint that matches specifications" in out, out[-3000:]
    assert str(killed_ckpts[0]) in out
    assert "Epoch 0:" not in out and f"Epoch {EPOCHS - 1}:" in out  # epoch 0 not trained again

    final = [c for c in find_checkpoints(ckpt_dir) if c != killed_ckpts[0]]
    assert len(final) == 1 and final[0].name.endswith(f"-ep={EPOCHS - 1}.ckpt"), final
    state = torch.load(final[0], map_location="cpu", weights_only=False)
    assert state["epoch"] == EPOCHS - 1 and state["global_step"] == EPOCHS * STEPS_PER_EPOCH
    before = torch.load(killed_ckpts[0], map_location="cpu", weights_only=False)
    assert before["global_step"] == STEPS_PER_EPOCH
    assert state["state_dict"].keys() == before["state_dict"].keys()

    # Same configuration: the resumed run's args.json equals the killed run's, but for the run id.
    args_before = json.loads((killed_ckpts[0].parent / "args.json").read_text())
    args_after = json.loads((final[0].parent / "args.json").read_text())
    args_before.pop("wandb_run_id")
    args_after.pop("wandb_run_id")
    assert args_after == args_before
    assert args_after["max_epochs"] == EPOCHS and args_after["data"]["num_small_crops"] == 1

    # The resumed checkpoint's backbone loads strictly into a fresh model built from args.json,
    # as main_linear.py does (main_linear itself is run by test_solo_integration).
    cfg = OmegaConf.create(args_after)
    model = AttentionNCE(cfg)
    backbone_state = {
        k[len("backbone.") :]: v
        for k, v in state["state_dict"].items()
        if k.startswith("backbone.")
    }
    model.backbone.load_state_dict(backbone_state, strict=True)
