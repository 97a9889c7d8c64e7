"""Reliability of the solo-learn methods: refusals before training, the NaN guard, faults.

* Config refusals (in-process, plus two runs of the real ``main_pretrain.py`` showing the refusal
  comes before any training step): momentum settings of the MoCo form, non-number values given on
  the command line, the guard's own setting.
* The finite-loss guard: a NaN loss stops training with an error naming the step, the loss and the
  settings, before solo-learn's Checkpointer can save the NaN model; under 2 gloo processes both
  raise at the same batch.
* Faults: SIGKILL in the middle of an epoch, then the same command resumes with solo-learn's
  auto-resume and finishes with the same configuration; an unreadable image is named.

Needs solo-learn >= 1.0.6 with its checkout; FAILS (not skips) without it. CPU only.
"""

from __future__ import annotations

import json
import os
import pickle
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
import torch.distributed as dist
import torch.multiprocessing as mp
from omegaconf import OmegaConf

from attnce_plugin.solo_compat import require_solo

require_solo()

import lightning.pytorch as pl  # noqa: E402
from helpers.configs import batches as _batches  # noqa: E402
from helpers.configs import compose_pretrain_cfg as _tiny_cfg  # noqa: E402
from helpers.configs import pretrain_argv  # noqa: E402
from helpers.images import make_image_folder  # noqa: E402
from helpers.scripts import find_checkpoints, run_script, subprocess_env  # noqa: E402
from helpers.trainer import cpu_trainer  # noqa: E402
from solo.utils.checkpointer import Checkpointer  # noqa: E402
from torchvision.datasets import ImageFolder  # noqa: E402

from attnce_plugin.methods import AttentionNCE, MethodConfigError, MoCoV3AttentionNCE  # noqa: E402
from attnce_plugin.methods.guard import FiniteLossGuard, NonFiniteLossError  # noqa: E402
from attnce_plugin.methods.images import (  # noqa: E402
    NameUnreadableImages,
    PathNamingLoader,
    UnreadableImageError,
    name_unreadable_images,
)

pytestmark = pytest.mark.integration  # trains through solo-learn or runs its scripts


MOMENTUM_ALLOWED = "0 <= base_tau <= final_tau <= 1"


@pytest.fixture
def one_thread():
    """Train the tiny in-process models on one thread: on a shared 2-core machine, 2 OpenMP
    threads spin-waiting for each other made these steps several times slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# --------------------------------------------------------------------------- config refusals


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["~momentum"], "needs momentum settings"),
        (["~momentum.base_tau"], "momentum.base_tau is required"),
        (["~momentum.final_tau"], "momentum.final_tau is required"),
        (["momentum.final_tau=1.5"], "momentum.final_tau must be a number in [0, 1], got 1.5"),
        (["momentum.base_tau=-0.1"], "momentum.base_tau must be a number in [0, 1], got -0.1"),
        (["momentum.base_tau=abc"], "momentum.base_tau must be a number in [0, 1], got 'abc'"),
        (["momentum.base_tau=.nan"], "momentum.base_tau must be a number in [0, 1]"),
        (["momentum.base_tau=1.0", "momentum.final_tau=0.99"], "must be <= momentum.final_tau"),
        (["+momentum.base_tua=0.9"], "did you mean 'base_tau'"),
    ],
)
def test_mocov3_momentum_settings_refused(overrides, message, tiny_image_folder):
    cfg = _tiny_cfg(
        "mocov3_attentionnce.yaml",
        tiny_image_folder["train"],
        ["method_kwargs.pred_hidden_dim=32", *overrides],
    )
    with pytest.raises(MethodConfigError) as err:
        MoCoV3AttentionNCE(cfg)
    assert message in str(err.value)
    if "did you mean" in message:
        assert "allowed keys: base_tau, final_tau, classifier" in str(err.value)
    else:
        assert MOMENTUM_ALLOWED in str(err.value)  # the allowed values are named


def test_mocov3_momentum_classifier_must_be_bool(tiny_image_folder):
    cfg = _tiny_cfg(
        "mocov3_attentionnce.yaml",
        tiny_image_folder["train"],
        ["method_kwargs.pred_hidden_dim=32", "+momentum.classifier=maybe"],
    )
    with pytest.raises(MethodConfigError, match="momentum.classifier must be True or False"):
        MoCoV3AttentionNCE(cfg)


NUMBER = "must be a finite number > 0, got"
INTERVAL = "method_kwargs.finite_check_every must be an integer >= 1, got"


@pytest.mark.parametrize(
    "method_cls,config",
    [(AttentionNCE, "attentionnce.yaml"), (MoCoV3AttentionNCE, "mocov3_attentionnce.yaml")],
)
@pytest.mark.parametrize(
    "override,message",
    [
        ("method_kwargs.d_neg=abc", f"method_kwargs.d_neg {NUMBER} 'abc' of type str"),
        ("method_kwargs.d_pos=abc", f"method_kwargs.d_pos {NUMBER} 'abc' of type str"),
        ("method_kwargs.temperature=abc", f"method_kwargs.temperature {NUMBER} 'abc'"),
        ("method_kwargs.d_neg=true", f"method_kwargs.d_neg {NUMBER} True of type bool"),
        ("method_kwargs.temperature=0", f"method_kwargs.temperature {NUMBER} 0.0"),
        ("+method_kwargs.dneg=2", "did you mean 'd_neg'"),
        ("+method_kwargs.finite_check_every=0", f"{INTERVAL} 0"),
        ("+method_kwargs.finite_check_every=abc", f"{INTERVAL} 'abc'"),
    ],
)
def test_non_numbers_and_typos_refused(method_cls, config, override, message, tiny_image_folder):
    extra = ["method_kwargs.pred_hidden_dim=32"] if method_cls is MoCoV3AttentionNCE else []
    cfg = _tiny_cfg(config, tiny_image_folder["train"], [*extra, override])
    with pytest.raises(MethodConfigError) as err:
        method_cls(cfg)
    assert message in str(err.value)


def test_guard_defaults_recorded_in_config(tiny_image_folder):
    """The guard's interval is filled in (so it lands in args.json) and momentum is untouched."""
    cfg = _tiny_cfg(
        "mocov3_attentionnce.yaml", tiny_image_folder["train"], ["method_kwargs.pred_hidden_dim=32"]
    )
    model = MoCoV3AttentionNCE(cfg)
    assert model.cfg.method_kwargs.finite_check_every == 50
    assert (model.cfg.momentum.base_tau, model.cfg.momentum.final_tau) == (0.99, 1.0)


def _refused_run(argv: List[str], cwd: Path, ckpt_dir: Path, message: str) -> None:
    proc = run_script(argv, cwd, check=False, threads=1)
    out = proc.stdout
    assert proc.returncode != 0, out[-3000:]
    assert "MethodConfigError" in out and message in out, out[-3000:]
    # Before training: no progress bar, no checkpoint, not even the checkpoint folder's args.json.
    assert "Epoch 0" not in out
    assert not find_checkpoints(ckpt_dir) and not list(ckpt_dir.rglob("args.json"))


def test_main_pretrain_refuses_non_number_d_neg(tiny_image_folder, tmp_path):
    ckpt_dir = tmp_path / "ckpt"
    argv = pretrain_argv("custom", "attentionnce_multicrop.yaml", tiny_image_folder, ckpt_dir)
    _refused_run(
        argv + ["method_kwargs.d_neg=abc"],
        tmp_path,
        ckpt_dir,
        "method_kwargs.d_neg must be a finite number > 0, got 'abc'",
    )


def test_main_pretrain_refuses_moco_without_momentum(tiny_image_folder, tmp_path):
    ckpt_dir = tmp_path / "ckpt"
    argv = pretrain_argv("custom", "mocov3_attentionnce.yaml", tiny_image_folder, ckpt_dir)
    _refused_run(argv + ["~momentum"], tmp_path, ckpt_dir, "needs momentum settings")


# --------------------------------------------------------------------------- the NaN guard


def _nan_batches(num_steps: int, bad_step: int, num_crops: int = 3):
    """Fixed batches (2 anchors at 32 px, the rest at 16 px); from ``bad_step`` on, one anchor
    crop is NaN, so the backbone's features and the loss are NaN."""
    batches = _batches(num_steps=num_steps, num_crops=num_crops)
    for step in range(bad_step, num_steps):
        batches[step][1][0] = torch.full_like(batches[step][1][0], float("nan"))
    return batches


def _loader(batches) -> torch.utils.data.DataLoader:
    # batch_size=None: the ready-made batches come out as they are, in order.
    return torch.utils.data.DataLoader(batches, batch_size=None)


def _trainer(callbacks=()) -> pl.Trainer:
    return cpu_trainer(
        callbacks=list(callbacks),
    )


class _StepCounter(pl.Callback):
    """Counts finished training batches (callbacks' on_train_batch_end runs before the module's)."""

    def __init__(self) -> None:
        self.batches = 0

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        self.batches += 1


def _model(method_cls, config: str, path: Path, overrides: List[str]):
    # 2 anchors at 32 px and 1 positive at 16 px, as _nan_batches builds them; the MoCo config
    # has one pipeline per anchor, so its positives are pipeline 2.
    if method_cls is MoCoV3AttentionNCE:
        extra = [
            "method_kwargs.pred_hidden_dim=32",
            "augmentations.2.crop_size=16",
            "augmentations.2.num_crops=1",
        ]
    else:
        extra = ["augmentations.1.crop_size=16", "augmentations.1.num_crops=1"]
    cfg = _tiny_cfg(config, path, [*extra, *overrides])
    pl.seed_everything(5)
    return method_cls(cfg)


def test_nan_images_stop_training(tiny_image_folder, one_thread):
    """End to end: NaN pixels make the backbone's features, the projections and the loss NaN.
    (One NaN step only: NaN through BatchNorm's backward is slow on CPU.)"""
    model = _model(
        AttentionNCE,
        "attentionnce_multicrop.yaml",
        tiny_image_folder["train"],
        ["+method_kwargs.finite_check_every=1"],
    )
    counter = _StepCounter()
    with pytest.raises(NonFiniteLossError) as err:
        _trainer([counter]).fit(model, train_dataloaders=_loader(_nan_batches(3, bad_step=0)))
    assert "first at global step 0 (loss = nan)" in str(err.value)
    assert counter.batches == 1


def _poison_loss(monkeypatch, model, module, names: List[str], first_step: int) -> None:
    """Make ``module.<name>`` for each name (the loss functions a method calls: with and without
    attention) return NaN from ``first_step`` on.

    The NaN is a constant added to the value: gradients stay finite, so nothing but the guard can
    notice, and the test stays fast.
    """
    for name in names:
        original = getattr(module, name)

        def poisoned(*args, _original=original, **kwargs):
            out = _original(*args, **kwargs)
            if model.trainer.global_step < first_step:
                return out
            nan = torch.tensor(float("nan"))
            return type(out)(out[0] + nan, *out[1:]) if isinstance(out, tuple) else out + nan

        monkeypatch.setattr(module, name, poisoned)


def _loss_module(method_cls, loss_flag):
    import solo.methods.mocov3

    import attnce_plugin.methods.attentionnce as simclr_form
    import attnce_plugin.methods.mocov3_attentionnce as moco_form

    if method_cls is AttentionNCE:
        return simclr_form, ["attentionnce_loss_func", "attentionnce_loss_with_attention"]
    if loss_flag == "attentionnce":
        return moco_form, [
            "attentionnce_mocov3_loss_func",
            "attentionnce_mocov3_loss_with_attention",
        ]
    return solo.methods.mocov3, ["mocov3_loss_func"]


@pytest.mark.parametrize(
    "method_cls,config,loss_flag",
    [
        (AttentionNCE, "attentionnce_multicrop.yaml", None),
        (MoCoV3AttentionNCE, "mocov3_attentionnce.yaml", "attentionnce"),
        (MoCoV3AttentionNCE, "mocov3_attentionnce.yaml", "mocov3"),
    ],
)
def test_nan_loss_stops_training_naming_step_and_settings(
    method_cls, config, loss_flag, tiny_image_folder, monkeypatch, one_thread
):
    overrides = ["+method_kwargs.finite_check_every=1", "method_kwargs.d_neg=0.5"]
    if loss_flag:
        overrides.append(f"method_kwargs.loss={loss_flag}")
    model = _model(method_cls, config, tiny_image_folder["train"], overrides)
    _poison_loss(monkeypatch, model, *_loss_module(method_cls, loss_flag), first_step=1)
    counter = _StepCounter()
    with pytest.raises(NonFiniteLossError) as err:
        _trainer([counter]).fit(model, train_dataloaders=_loader(_batches(4, num_crops=3)))
    msg = str(err.value)
    assert "first at global step 1 (loss = nan)" in msg, msg
    assert "detected after batch 1 of epoch 0" in msg, msg
    assert "d_neg=0.5" in msg and "temperature=" in msg and "lr=" in msg, msg
    assert counter.batches == 2  # stopped at the first check after the NaN, not at the end


def test_nan_between_checks_is_caught_at_epoch_end_before_checkpoint(
    tiny_image_folder, tmp_path, monkeypatch, one_thread
):
    """With a long interval the NaN of step 0 is still caught at the epoch's last batch, before
    solo-learn's Checkpointer (an on_train_epoch_end callback) runs: no checkpoint is written.
    The same run without NaN writes one, so the check is not vacuous."""
    path = tiny_image_folder["train"]
    overrides = ["+method_kwargs.finite_check_every=100"]

    good_dir = tmp_path / "good"
    model = _model(AttentionNCE, "attentionnce_multicrop.yaml", path, overrides)
    _trainer([Checkpointer(model.cfg, logdir=good_dir)]).fit(
        model, train_dataloaders=_loader(_batches(2, num_crops=3))
    )
    assert len(find_checkpoints(good_dir)) == 1

    bad_dir = tmp_path / "bad"
    model = _model(AttentionNCE, "attentionnce_multicrop.yaml", path, overrides)
    _poison_loss(monkeypatch, model, *_loss_module(AttentionNCE, None), first_step=0)
    caught = r"first at global step 0 .* detected after batch 1 of epoch 0"
    with pytest.raises(NonFiniteLossError, match=caught):
        _trainer([Checkpointer(model.cfg, logdir=bad_dir)]).fit(
            model, train_dataloaders=_loader(_batches(2, num_crops=3))
        )
    assert not find_checkpoints(bad_dir)


def _guard_worker(rank: int, world: int, store: str, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        guard = FiniteLossGuard("attentionnce", 1, lambda: "temperature=0.5")
        for step in range(3):
            # Only rank 1 sees a NaN, at step 1: every rank must still stop at that check.
            loss = torch.tensor(float("nan") if (rank == 1 and step == 1) else 1.0)
            guard.record(loss, step)
            try:
                guard.check(batch_idx=step)
            except NonFiniteLossError as err:
                Path(out_dir, f"rank{rank}.txt").write_text(f"{step}\n{err}")
                return
        Path(out_dir, f"rank{rank}.txt").write_text("none")
    finally:
        dist.destroy_process_group()


def test_guard_stops_every_process_together(tmp_path):
    """2 gloo processes, NaN on rank 1 only: both raise at the same batch (no rank is left waiting
    in a collective); rank 1 names its loss, rank 0 points to the other process."""
    mp.spawn(_guard_worker, args=(2, str(tmp_path / "store"), str(tmp_path)), nprocs=2, join=True)
    r0 = (tmp_path / "rank0.txt").read_text().split("\n", 1)
    r1 = (tmp_path / "rank1.txt").read_text().split("\n", 1)
    assert r0[0] == r1[0] == "1"
    assert "first at global step" in r1[1] and "loss = nan" in r1[1]
    assert "on another process" in r0[1]


# --------------------------------------------------------------------------- unreadable images


def _corrupt_copy(good: Path, bad: Path) -> Path:
    """A PNG cut in half: PIL opens the header, then fails to decode without naming the file."""
    data = good.read_bytes()
    bad.write_bytes(data[: len(data) // 2])
    return bad


def test_truncated_image_error_names_the_file(tmp_path):
    root = make_image_folder(tmp_path / "imgs", num_classes=2, per_class=2)
    bad = _corrupt_copy(root / "class0" / "0.png", root / "class1" / "broken.png")
    (root / "class1" / "junk.png").write_bytes(b"not an image")

    plain = ImageFolder(str(root))
    idx = plain.samples.index((str(bad), 1))
    with pytest.raises(OSError) as raw:
        plain[idx]
    assert str(bad) not in str(raw.value)  # what PIL alone says: no file name

    dataset = name_unreadable_images(ImageFolder(str(root)))
    assert name_unreadable_images(dataset).loader is dataset.loader  # idempotent, no nesting
    for path in (bad, root / "class1" / "junk.png"):
        i = [p for p, _ in dataset.samples].index(str(path))
        named = re.escape(f"cannot read image file '{path}'")
        with pytest.raises(UnreadableImageError, match=named) as err:
            dataset[i]
        assert isinstance(err.value.__cause__, OSError)  # PIL's own error stays in the chain
    good_index = [p for p, _ in dataset.samples].index(str(root / "class0" / "0.png"))
    assert dataset[good_index][0].size == plain[good_index][0].size  # good images unchanged
    # DataLoader workers started with "spawn" pickle the dataset.
    assert isinstance(pickle.loads(pickle.dumps(dataset)).loader, PathNamingLoader)


def test_unreadable_image_naming_covers_the_runs_loaders_and_patches_nothing(tmp_path):
    """The methods' callback wraps the datasets of the run's own train and val loaders (as
    Lightning holds them), idempotently; solo-learn's dataset functions stay unpatched, so its own
    methods and main_linear.py behave as without the plugin."""
    import solo.data.classification_dataloader as cls_data
    import solo.data.pretrain_dataloader as pre_data
    from lightning.pytorch.utilities import CombinedLoader
    from torch.utils.data import DataLoader

    root = make_image_folder(tmp_path / "imgs", num_classes=2, per_class=2)
    train, val = ImageFolder(str(root)), ImageFolder(str(root))

    class _Trainer:
        train_dataloader = CombinedLoader(DataLoader(train), "max_size_cycle")
        val_dataloaders = [DataLoader(val)]

    callback = NameUnreadableImages()
    callback.on_train_start(_Trainer(), None)
    callback.on_validation_start(_Trainer(), None)
    callback.on_validation_start(_Trainer(), None)  # idempotent: no nesting
    assert isinstance(train.loader, PathNamingLoader) and isinstance(val.loader, PathNamingLoader)
    assert not isinstance(val.loader.loader, PathNamingLoader)
    for fn in (pre_data.prepare_datasets, cls_data.prepare_datasets):
        assert not hasattr(fn, "__attnce_original__")


def test_main_pretrain_names_unreadable_image(tmp_path):
    # 8 images, batch 4, 2 batches: every image, the broken one included, is read in epoch 0.
    root = make_image_folder(tmp_path / "train", num_classes=2, per_class=4)
    bad = _corrupt_copy(root / "class0" / "0.png", root / "class1" / "3.png")
    ckpt_dir = tmp_path / "ckpt"
    argv = pretrain_argv("custom", "attentionnce_multicrop.yaml", {"train": root}, ckpt_dir)
    proc = run_script(argv + ["augmentations.1.num_crops=1"], tmp_path, check=False, threads=1)
    assert proc.returncode != 0
    assert f"cannot read image file '{bad}'" in proc.stdout, proc.stdout[-3000:]
    assert "UnreadableImageError" in proc.stdout
    assert not find_checkpoints(ckpt_dir)


# --------------------------------------------------------------------------- SIGKILL and resume

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
