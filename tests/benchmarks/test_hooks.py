"""The benchmark's hook inside main_pretrain.py (benchmarks/hooks.py), in-process: the run
recorder on every trainer, validation at the training size against solo-learn's own transform."""

from __future__ import annotations

import pytest
import solo.data.classification_dataloader as cls_data
from omegaconf import OmegaConf
from PIL import Image

from benchmarks.hooks import Bench, val_transform
from benchmarks.recorder import RunRecorder


def test_every_trainer_gets_the_recorder_beside_its_own_callbacks(monkeypatch, tmp_path) -> None:
    from lightning.pytorch import Trainer
    from lightning.pytorch.callbacks import LearningRateMonitor

    monkeypatch.setattr(Trainer, "__init__", Trainer.__init__)  # put back afterwards
    Bench(str(tmp_path / "record.jsonl")).on_job_start(OmegaConf.create({}))
    trainer = Trainer(callbacks=[LearningRateMonitor()], logger=False, enable_progress_bar=False)
    recorders = [c for c in trainer.callbacks if isinstance(c, RunRecorder)]
    assert len(recorders) == 1 and recorders[0].path == tmp_path / "record.jsonl"
    assert any(isinstance(c, LearningRateMonitor) for c in trainer.callbacks)


def test_custom_val_transform_is_at_training_size(monkeypatch, tmp_path) -> None:
    from lightning.pytorch import Trainer

    # The hook replaces solo-learn's builder and Trainer.__init__: monkeypatch puts them back.
    monkeypatch.setattr(cls_data, "build_custom_pipeline", cls_data.build_custom_pipeline)
    monkeypatch.setattr(Trainer, "__init__", Trainer.__init__)
    _, t_val = cls_data.prepare_transforms("custom")
    assert t_val(Image.new("RGB", (32, 32))).shape == (3, 224, 224)  # solo's own
    pipeline = {"mean": [0.5] * 3, "std": [0.25] * 3}
    hook = Bench(str(tmp_path / "record.jsonl"), size=32)
    hook.on_job_start(OmegaConf.create({"augmentations": [pipeline]}))
    _, t_val = cls_data.prepare_transforms("custom")
    out = t_val(Image.new("RGB", (32, 32), (128, 128, 128)))
    assert out.shape == (3, 32, 32)
    assert abs(float(out.mean()) - (128 / 255 - 0.5) / 0.25) < 1e-4  # our normalisation


@pytest.mark.parametrize("given", [[], ["++augmentations.0.mean=[0.5,0.5,0.5]"]])
def test_validation_and_the_probe_normalise_as_solo_learns_custom_training_pipeline(given) -> None:
    from solo.data.pretrain_dataloader import build_transform_pipeline
    from torchvision import transforms

    from benchmarks.runner import compose

    cfg = compose("pretrain/custom/attentionnce.yaml", given)
    steps = build_transform_pipeline("custom", cfg.augmentations[0]).transforms
    solo = next(t for t in steps if isinstance(t, transforms.Normalize))
    ours = val_transform(32, cfg.augmentations[0]).transforms[-1]
    assert (tuple(ours.mean), tuple(ours.std)) == (tuple(solo.mean), tuple(solo.std))
