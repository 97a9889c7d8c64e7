"""Representation health (attnce_plugin/callbacks/health.py, ``diagnostics.representation_health``):
the metrics against numpy float64 evaluations of their definitions, and the callback's logged
values against the same definitions on embeddings recomputed here from the trained model, not the
values the code under test kept.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import List, Sequence

import numpy as np
import pytest
import torch

from attnce_plugin.solo_compat import require_solo

require_solo()

import lightning.pytorch as pl  # noqa: E402
from helpers.configs import compose_pretrain_cfg  # noqa: E402
from helpers.trainer import cpu_trainer  # noqa: E402

from attnce_plugin.callbacks.health import (  # noqa: E402
    RepresentationHealth,
    alignment,
    effective_rank,
    representation_health,
    uniformity,
)
from attnce_plugin.methods import AttentionNCE  # noqa: E402


def _np_uniformity(x: np.ndarray) -> float:
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    sq = ((u[:, None, :] - u[None, :, :]) ** 2).sum(-1)[np.triu_indices(len(u), 1)]
    return float(np.log(np.mean(np.exp(-2 * sq))))


def _np_eff_rank(x: np.ndarray) -> float:
    eig = np.clip(np.linalg.eigvalsh(np.cov(x, rowvar=False)), 0, None)
    p = eig / eig.sum()
    p = p[p > 0]
    return float(math.exp(-np.sum(p * np.log(p))))


def test_representation_health_matches_numpy():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 6)) * np.array([4.0, 2.0, 1.0, 1.0, 0.5, 0.1])
    got = representation_health(torch.tensor(x))
    assert float(got["uniformity"]) == pytest.approx(_np_uniformity(x), rel=1e-5)
    assert float(got["eff_rank"]) == pytest.approx(_np_eff_rank(x), rel=1e-5)


def _unit(a: np.ndarray) -> np.ndarray:
    return a / np.linalg.norm(a, axis=1, keepdims=True)


def test_alignment_and_uniformity_match_definitions():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(40, 6)), rng.normal(size=(40, 6))
    xu, yu = _unit(x), _unit(y)
    want_align = np.mean(np.linalg.norm(xu - yu, axis=1) ** 2)
    pair = [np.exp(-2 * np.sum((xu[i] - xu[j]) ** 2)) for i in range(40) for j in range(i + 1, 40)]
    want_unif = np.log(np.mean(pair))
    assert float(alignment(torch.tensor(x), torch.tensor(y))) == pytest.approx(want_align, rel=1e-5)
    assert float(uniformity(torch.tensor(x))) == pytest.approx(want_unif, rel=1e-5)


def test_effective_rank_extremes_and_definition():
    rng = np.random.default_rng(1)
    line = rng.normal(size=(200, 1)) * rng.normal(size=(1, 8))
    assert float(effective_rank(torch.tensor(line))) == pytest.approx(1.0, abs=1e-6)
    iso = rng.normal(size=(20000, 8))
    assert float(effective_rank(torch.tensor(iso))) == pytest.approx(8.0, rel=0.01)
    x = rng.normal(size=(300, 5)) * np.array([3.0, 2.0, 1.0, 0.5, 0.1])
    eig = np.clip(np.linalg.eigvalsh(np.cov(x, rowvar=False)), 0, None)
    p = eig / eig.sum()
    assert float(effective_rank(torch.tensor(x))) == pytest.approx(
        math.exp(-np.sum(p * np.log(p))), rel=1e-9
    )


def test_metric_errors():
    with pytest.raises(ValueError, match=r"\[n, d\]"):
        uniformity(torch.randn(1, 4))
    with pytest.raises(ValueError, match=r"\[3, 4\] and \[2, 4\]"):
        alignment(torch.randn(3, 4), torch.randn(2, 4))


def _cfg(train_path: Path, overrides: Sequence[str] = ()):
    return compose_pretrain_cfg("attentionnce_multicrop.yaml", train_path, overrides)


class _NoGrad(pl.Callback):
    """Names learnable parameter groups left without a gradient (DDP needs every one)."""

    def __init__(self) -> None:
        self.missing: List[str] = []

    def on_after_backward(self, trainer, module) -> None:
        self.missing += [
            g["name"] for g in module.learnable_params for p in g["params"] if p.grad is None
        ]


@pytest.mark.integration  # trains through solo-learn
def test_anchor_mean_training_logs_health_of_a_capped_random_subset(tiny_image_folder):
    """One in-process run of ``anchor: mean`` with validation (the only slow test of the two
    files): every parameter gets a gradient, the MI bound uses K = B - 1, and the val metrics
    equal numpy's on the documented random subset, recomputed from the trained model."""
    pl.seed_everything(2)
    # The shipped health callback is switched off; one with a small cap is passed instead.
    overrides = ["+method_kwargs.anchor=mean", "diagnostics.representation_health=false"]
    model = AttentionNCE(_cfg(tiny_image_folder["train"], overrides))
    health = RepresentationHealth(max_samples=7)
    g = torch.Generator().manual_seed(0)
    train = [
        [
            torch.arange(4),
            [
                torch.randn(4, 3, 32 if i < 2 else 16, 32 if i < 2 else 16, generator=g)
                for i in range(6)
            ],
            torch.randint(0, 5, (4,), generator=g),
        ]
    ]
    val_x = torch.randn(12, 3, 32, 32, generator=g)
    val = [[val_x[i : i + 4], torch.randint(0, 5, (4,), generator=g)] for i in range(0, 12, 4)]
    no_grad = _NoGrad()
    trainer = cpu_trainer(num_sanity_val_steps=0, callbacks=[no_grad, health])
    loader = lambda data: torch.utils.data.DataLoader(data, batch_size=None)  # noqa: E731
    trainer.fit(model, train_dataloaders=loader(train), val_dataloaders=loader(val))
    m = trainer.callback_metrics

    # The subset the callback documents: keys from a generator seeded with 0, 7 smallest kept.
    keys = torch.rand(12, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    keep = torch.argsort(keys)[:7]
    model.eval()
    with torch.no_grad():
        feats = model.backbone(val_x[keep]).double()
        z = model.projector(feats.float()).double()
    for kind, x in (("feats", feats.numpy()), ("z", z.numpy())):
        assert float(m[f"val_repr_{kind}_uniformity"]) == pytest.approx(_np_uniformity(x), rel=1e-4)
        assert float(m[f"val_repr_{kind}_eff_rank"]) == pytest.approx(_np_eff_rank(x), rel=1e-4)
    assert "train_repr_alignment" in m and 0.0 <= float(m["train_repr_alignment"]) <= 4.0
    assert not no_grad.missing
    # anchor: mean gives one anchor per image, 4 images: K = 3 negatives per anchor.
    assert float(m["train_repr_mi_bound"]) == pytest.approx(
        math.log(4) - float(m["train_nce_loss"]), abs=1e-5
    )
    assert health.sample.size == 0  # emptied after logging


@pytest.mark.integration  # trains through solo-learn
def test_moco_form_logs_health_with_its_loss_in_nats(tiny_image_folder):
    """``mocov3_attentionnce`` logs the same health keys; its MI bound uses K = B - 1 keys per
    query and the loss with MoCo's 2 * tau scale divided out (mean of the two symmetric terms)."""
    from attnce_plugin.methods import MoCoV3AttentionNCE

    pl.seed_everything(3)
    cfg = compose_pretrain_cfg(
        "mocov3_attentionnce.yaml", tiny_image_folder["train"], ["method_kwargs.pred_hidden_dim=32"]
    )
    model = MoCoV3AttentionNCE(cfg)
    crops = cfg.data.num_large_crops + cfg.data.num_small_crops
    size = cfg.augmentations[0].crop_size
    g = torch.Generator().manual_seed(0)
    train = [
        [
            torch.arange(4),
            [torch.randn(4, 3, size, size, generator=g) for _ in range(crops)],
            torch.randint(0, 5, (4,), generator=g),
        ]
    ]
    val = [[torch.randn(4, 3, size, size, generator=g), torch.randint(0, 5, (4,), generator=g)]]
    trainer = cpu_trainer(
        num_sanity_val_steps=0,
    )
    loader = lambda data: torch.utils.data.DataLoader(data, batch_size=None)  # noqa: E731
    trainer.fit(model, train_dataloaders=loader(train), val_dataloaders=loader(val))
    m = trainer.callback_metrics
    nats = float(m["train_contrastive_loss"]) / (2 * cfg.method_kwargs.temperature) / 2
    assert float(m["train_repr_mi_bound"]) == pytest.approx(math.log(4) - nats, abs=1e-5)
    assert 0.0 <= float(m["train_repr_alignment"]) <= 4.0
    for key in ("val_repr_feats_uniformity", "val_repr_feats_eff_rank", "val_repr_z_eff_rank"):
        assert key in m and math.isfinite(float(m[key]))
