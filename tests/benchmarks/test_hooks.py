"""The benchmark's one change inside main_pretrain.py: validation at the training size
(benchmarks/hooks.py), against solo-learn's own transform, in-process."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf
from PIL import Image

from attnce_plugin.install import require_solo
from benchmarks.hooks import ValidateAtTrainSize, val_transform

require_solo()  # loudly: these tests need solo-learn

import solo.data.classification_dataloader as cls_data  # noqa: E402


def test_custom_val_transform_is_at_training_size(monkeypatch) -> None:
    # The hook replaces solo-learn's builder; monkeypatch puts the original back afterwards.
    monkeypatch.setattr(cls_data, "build_custom_pipeline", cls_data.build_custom_pipeline)
    _, t_val = cls_data.prepare_transforms("custom")
    assert t_val(Image.new("RGB", (32, 32))).shape == (3, 224, 224)  # solo's own
    pipeline = {"mean": [0.5] * 3, "std": [0.25] * 3}
    ValidateAtTrainSize(32).on_job_start(OmegaConf.create({"augmentations": [pipeline]}))
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
