"""The finite-loss guard (attnce_plugin/callbacks/guard.py, ``diagnostics.finite_loss_guard``): a
NaN loss stops training with an error naming the step, the loss and the settings, before
solo-learn's Checkpointer can save the NaN model; under 2 gloo processes both raise at the same
batch. Needs solo-learn >= 1.0.6; FAILS (not skips) without it. CPU only.
"""

from __future__ import annotations

from pathlib import Path
from typing import List

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from attnce_plugin.solo_compat import require_solo

require_solo()

import lightning.pytorch as pl  # noqa: E402
from helpers.configs import batches as _batches  # noqa: E402
from helpers.configs import compose_pretrain_cfg as _tiny_cfg  # noqa: E402
from helpers.scripts import find_checkpoints  # noqa: E402
from helpers.trainer import cpu_trainer  # noqa: E402
from solo.utils.checkpointer import Checkpointer  # noqa: E402

from attnce_plugin.callbacks.guard import FiniteLossGuard, NonFiniteLossError  # noqa: E402
from attnce_plugin.methods import AttentionNCE, MoCoV3AttentionNCE  # noqa: E402

pytestmark = pytest.mark.integration  # trains through solo-learn or runs its scripts


@pytest.fixture
def one_thread():
    """Train the tiny in-process models on one thread: on a shared 2-core machine, 2 OpenMP
    threads spin-waiting for each other made these steps several times slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


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
        ["diagnostics.finite_check_every=1"],
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
    overrides = ["diagnostics.finite_check_every=1", "method_kwargs.d_neg=0.5"]
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
    overrides = ["diagnostics.finite_check_every=100"]

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
