"""benchmarks.loss_cost: the authors' formulation against the float64 reference and solo-learn's
SimCLR loss, the operation counter, the mask switch, and one tiny run's tables."""

from __future__ import annotations

import pytest
import torch
from helpers import reference

import attnce_plugin.attention as head
from attnce_plugin.losses import attentionnce_loss_func
from benchmarks import loss_cost


@pytest.fixture
def restore_mask_path(monkeypatch):
    monkeypatch.setattr(head, "DENSE_MASK_DEVICES", head.DENSE_MASK_DEVICES)
    monkeypatch.setattr(head, "DENSE_MASK_MAX_ENTRIES", head.DENSE_MASK_MAX_ENTRIES)


def test_authors_loss_equals_the_float64_formula_and_overflows_where_theirs_does():
    """Unique indexes, so their position mask is the index mask; at tau = 0.05 with a hard
    negative their exp(beta * n / tau) overflows fp32 while the plugin's loss stays finite."""
    g = torch.Generator().manual_seed(0)
    anchors = torch.randn(2 * 6, 8, generator=g, dtype=torch.float64)
    positives = torch.randn(6, 3, 8, generator=g, dtype=torch.float64)
    want = reference.simclr_form(anchors, positives, torch.arange(6), 0.5, 1.0, 2.0)
    got = loss_cost.authors_loss(anchors, positives, 0.5, 1.0, 2.0)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)

    hard = anchors.float().clone()
    hard[1] = hard[0] + 1e-3 * torch.randn(8, generator=g)  # image 1's anchor ~ image 0's
    pos = positives.float()
    assert not torch.isfinite(loss_cost.authors_loss(hard, pos, 0.05, 1.0, 0.01))
    assert torch.isfinite(attentionnce_loss_func(hard, pos, torch.arange(6), 0.05, 1.0, 0.01))


def test_authors_loss_is_solo_simclr_with_flat_attention_and_the_partner_as_positive():
    """d_neg -> inf makes beta 1 (plain InfoNCE negatives); with identical views and the view as
    the one positive, every row's positive is its partner, as in solo-learn's SimCLR loss."""
    from solo.losses.simclr import simclr_loss_func

    g = torch.Generator().manual_seed(1)
    view = torch.randn(5, 16, generator=g, dtype=torch.float64)
    anchors = torch.cat([view, view])
    got = loss_cost.authors_loss(anchors, view.unsqueeze(1), 0.3, 1.0, 1e12)
    want = simclr_loss_func(anchors, torch.arange(5).repeat(2), 0.3)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=0)


def test_count_ops_counts_kernels_not_views():
    x = torch.randn(4, 3)

    def call():
        y = (x * 2).t().unsqueeze(0)  # mul, then two views
        return (y.exp(), x.view(3, 4) + 1)  # exp, a view, add

    assert loss_cost.count_ops(call) == 3


def test_mask_switch_forces_each_path(restore_mask_path):
    small = torch.arange(4)
    loss_cost.set_mask_path("pairs")
    assert isinstance(head.non_negatives(small, small)[0], tuple)
    loss_cost.set_mask_path("dense")
    large = torch.arange(2 * head.DENSE_MASK_MAX_ENTRIES)
    assert isinstance(head.non_negatives(large[:8], large)[0], torch.Tensor)


def test_tiny_run_writes_every_table(restore_mask_path, capsys, tmp_path):
    out = tmp_path / "loss.md"
    argv = [
        "--batches",
        "4",
        "8",
        "--views",
        "2",
        "--dim",
        "8",
        "--repeats",
        "2",
        "--out",
        str(out),
    ]
    assert loss_cost.main(argv) == 0
    text = out.read_text()
    assert capsys.readouterr().out == text
    for title in ("forward+backward time", "peak memory", "MoCo v3 form", "Finite", "Operations"):
        assert title in text
    rows = [line.strip("|").split("|") for line in text.splitlines() if line.startswith("| ")]
    assert sum(r[0].strip() in ("4", "8") for r in rows) == 3 * 2 + 2  # 3 grid tables, finite
    solo, dense, pairs = (int(c) for c in rows[-1][:3])
    # The index-pair path dispatches more (sort, searchsorted, ...) than the dense comparison.
    assert 0 < solo and 0 < dense < pairs
