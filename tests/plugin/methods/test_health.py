"""Representation-health metrics at validation (methods) and in the benchmark's offline probe.

References are numpy float64 evaluations of the definitions, on embeddings recomputed here from
the trained model, not the values the code under test kept.
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

from attnce_bench import report  # noqa: E402
from attnce_bench.probe import offline_health  # noqa: E402
from attnce_plugin.methods import AttentionNCE  # noqa: E402
from attnce_plugin.methods.health import ValidationSample, representation_health  # noqa: E402

pytestmark = pytest.mark.integration  # trains through solo-learn or runs its scripts


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


def test_offline_health_subsamples_and_matches_numpy():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(30, 5))
    full = offline_health(torch.tensor(x), max_samples=100)
    assert full["uniformity"] == pytest.approx(_np_uniformity(x), rel=1e-5)
    assert full["eff_rank"] == pytest.approx(_np_eff_rank(x), rel=1e-5)
    sub = offline_health(torch.tensor(x), max_samples=10)
    again = offline_health(torch.tensor(x), max_samples=10)
    assert sub == again  # the subset is seeded
    idx = torch.randperm(30, generator=torch.Generator().manual_seed(0))[:10].numpy()
    assert sub["eff_rank"] == pytest.approx(_np_eff_rank(x[idx]), rel=1e-5)
    with pytest.raises(ValueError, match="max_samples"):
        offline_health(torch.tensor(x), max_samples=1)


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


def test_anchor_mean_training_logs_health_of_a_capped_random_subset(tiny_image_folder):
    """One in-process run of ``anchor: mean`` with validation (the only slow test of the two
    files): every parameter gets a gradient, the MI bound uses K = B - 1, and the val metrics
    equal numpy's on the documented random subset, recomputed from the trained model."""
    pl.seed_everything(2)
    model = AttentionNCE(_cfg(tiny_image_folder["train"], ["+method_kwargs.anchor=mean"]))
    model.val_sample = ValidationSample(max_samples=7)
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
    trainer = cpu_trainer(
        num_sanity_val_steps=0,
        callbacks=[no_grad],
    )
    loader = lambda data: torch.utils.data.DataLoader(data, batch_size=None)  # noqa: E731
    trainer.fit(model, train_dataloaders=loader(train), val_dataloaders=loader(val))
    m = trainer.callback_metrics

    # The subset the mixin documents: keys from a generator seeded with 0, 7 smallest kept.
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
    assert model.val_sample.size == 0  # emptied after logging


def test_report_health_section(tmp_path: Path):
    base = dict(
        comparison="equal-epoch",
        num_positives=0,
        epochs=3,
        status="ok",
        knn_acc1=70.0,
        linear_acc1=70.0,
        offline_acc1=71.0,
        seconds_per_epoch=1.0,
        train_seconds=3.0,
        peak_rss_mib=1.0,
        matched_to=None,
    )
    results: List[dict] = [
        dict(
            base,
            label="SimCLR",
            method="simclr",
            seed=0,
            offline_uniformity=-3.0,
            offline_eff_rank=40.0,
        ),
        dict(
            base,
            label="SimCLR",
            method="simclr",
            seed=1,
            offline_uniformity=-3.5,
            offline_eff_rank=44.0,
        ),
        dict(base, label="MoCo v3", method="mocov3", seed=0),  # probe without health values
    ]
    rows = report.aggregate(results)
    md = report.render_markdown(rows, "# h")
    section = md.split("## Representation health")[1]
    assert "| SimCLR | 3 | 2 | -3.25 ± 0.35 | 42.0 ± 2.8 |" in section
    assert "| MoCo v3 | 3 | 1 | n/a | n/a |" in section
    _, summary = report.write_csvs(results, rows, tmp_path)
    assert "offline_eff_rank_mean" in summary.read_text().splitlines()[0]
    # No health values anywhere: no section (older results files).
    plain = [
        {
            k: v
            for k, v in r.items()
            if not k.startswith("offline_u") and not k.startswith("offline_e")
        }
        for r in results
    ]
    assert "Representation health" not in report.render_markdown(report.aggregate(plain), "# h")


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
