"""The offline probe (benchmarks/probe.py) against independent references: solo-learn's own online
kNN classifier, separable data for the linear probe, closed forms for the health values."""

from __future__ import annotations

import pytest
import torch

from attnce_plugin.seam import require_solo
from benchmarks import probe

require_solo()  # loudly: solo-learn's kNN is the reference


def test_knn_is_solo_learns_weighted_knn_rule() -> None:
    from solo.utils.knn import WeightedKNNClassifier

    g = torch.Generator().manual_seed(0)
    centres = torch.randn(5, 16, generator=g)
    train_y, val_y = torch.randint(0, 5, (300,), generator=g), torch.randint(
        0, 5, (120,), generator=g
    )
    train_x = centres[train_y] + 1.5 * torch.randn(300, 16, generator=g)
    val_x = centres[val_y] + 1.5 * torch.randn(120, 16, generator=g)
    solo = WeightedKNNClassifier(k=20, T=0.07, distance_fx="cosine")
    solo.update(train_features=train_x, train_targets=train_y, test_features=val_x,
                test_targets=val_y)  # fmt: skip
    top1, _ = solo.compute()
    ours = probe.knn_accuracy(train_x, train_y, val_x, val_y, chunk=50)
    assert 20 < ours < 100 and ours == pytest.approx(float(top1), abs=1e-6)


def test_linear_probe_separates_separable_classes_and_picks_from_the_grid() -> None:
    g = torch.Generator().manual_seed(1)
    y = torch.arange(200) % 4
    x = torch.nn.functional.one_hot(y, 4).float() * 5 + 0.3 * torch.randn(200, 4, generator=g)
    x = torch.cat([x, torch.randn(200, 6, generator=g)], dim=1)  # plus noise dimensions
    acc, l2 = probe.linear_probe(x[:150], y[:150], x[150:], y[150:])
    assert acc == 100.0 and l2 in probe.L2_GRID
    fit, hold = probe.holdout_split(y[:150], 0.2, seed=0)
    assert len(set(fit.tolist()) & set(hold.tolist())) == 0 and len(fit) + len(hold) == 150
    assert torch.bincount(y[hold], minlength=4).tolist() == [8, 8, 7, 7]  # 20 % of 38, 38, 37, 37


def test_pixels_are_the_images_themselves() -> None:
    x = torch.arange(2 * 3 * 4 * 4, dtype=torch.float32).view(2, 3, 4, 4)
    assert torch.equal(probe.Pixels()(x), x.view(2, -1))
