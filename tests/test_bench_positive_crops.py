"""``bench.positive_crop_size``: the benchmark's multi-crop runs (smaller positive crops)."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnce_plugin.bench.plan import RunSpec
from attnce_plugin.bench.runner import BenchConfigError, Budget, compose_config, parse_set


def _compose(tmp_path: Path, *sets: str):
    spec = RunSpec("AttentionNCE (M=4)", "attentionnce", "equal-epoch", 0, 1, 4)
    budget = Budget(batch_size=8, num_workers=0, train_path=str(tmp_path), val_path=None,
                    sets=[parse_set(s) for s in sets])
    return compose_config(spec, "fashion_mnist", budget, tmp_path / "run")


def test_positives_default_to_the_anchor_size(tmp_path: Path) -> None:
    cfg = _compose(tmp_path)
    assert [(a.crop_size, a.num_crops) for a in cfg.augmentations] == [(32, 2), (32, 4)]


def test_positive_crop_size_shrinks_only_the_positives(tmp_path: Path) -> None:
    cfg = _compose(tmp_path, "attentionnce:bench.positive_crop_size=16")
    assert [(a.crop_size, a.num_crops) for a in cfg.augmentations] == [(32, 2), (16, 4)]
    # Same recipe otherwise.
    assert cfg.augmentations[1].rrc == cfg.augmentations[0].rrc
    assert "bench" not in cfg


@pytest.mark.parametrize("value", ["0", "48", "true"])
def test_positive_crop_size_refusals(tmp_path: Path, value: str) -> None:
    with pytest.raises(BenchConfigError, match=r"bench.positive_crop_size=.*: must be an integer in 1\.\.32"):
        _compose(tmp_path, f"bench.positive_crop_size={value}")
