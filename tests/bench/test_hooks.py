"""The Hydra callback the bench declares inside main_pretrain.py runs, tested in-process."""

from __future__ import annotations

import inspect

import pytest

from attnce_plugin.solo_compat import require_solo

require_solo()  # loudly: these tests need solo-learn


def test_custom_val_transform_is_at_training_size() -> None:
    import solo.data.classification_dataloader as cls_data
    from PIL import Image

    from attnce_bench.hooks import _patch_custom_val_transform

    original = cls_data.build_custom_pipeline
    try:
        _, t_val = cls_data.prepare_transforms("custom")
        assert t_val(Image.new("RGB", (32, 32))).shape == (3, 224, 224)  # solo's default
        _patch_custom_val_transform(32, (0.5, 0.5, 0.5), (0.25, 0.25, 0.25))
        _, t_val = cls_data.prepare_transforms("custom")
        out = t_val(Image.new("RGB", (32, 32), (128, 128, 128)))
        assert out.shape == (3, 32, 32)
        assert abs(float(out.mean()) - (128 / 255 - 0.5) / 0.25) < 1e-4  # our normalisation
    finally:
        cls_data.build_custom_pipeline = original


def test_trainer_patch_keeps_signature_and_adds_logger(tmp_path) -> None:
    from lightning.pytorch import Trainer

    from attnce_bench import hooks

    original = Trainer.__init__
    try:
        hooks._patch_trainer(str(tmp_path / "epochs.jsonl"))
        # main_pretrain.py filters its config keys by this signature: it must stay Trainer's.
        assert "max_epochs" in inspect.signature(Trainer.__init__).parameters
        trainer = Trainer(
            max_epochs=1,
            accelerator="cpu",
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
        )
        assert any(type(cb).__name__ == "EpochLogger" for cb in trainer.callbacks)
    finally:
        Trainer.__init__ = original


def test_negative_val_size_is_refused() -> None:
    from attnce_bench.hooks import BenchHooks

    with pytest.raises(ValueError, match="val_size"):
        BenchHooks(val_size=-1)
