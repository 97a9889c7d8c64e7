"""attnce_bench.cost.bench_loss: its operation counter, its mask switch, and one tiny end-to-end run."""

from __future__ import annotations

import importlib

import pytest
import torch

import attnce_plugin.attention as head


@pytest.fixture(scope="module")
def bench():
    module = importlib.import_module("attnce_bench.cost.bench_loss")
    return module


def test_count_ops_counts_kernels_not_views(bench):
    x = torch.randn(4, 3)

    def call():
        y = (x * 2).t().unsqueeze(0)  # mul, then two views
        return (y.exp(), x.view(3, 4) + 1)  # exp, a view, add

    assert bench.count_ops(call) == 3


def test_count_ops_includes_backward(bench):
    x = torch.randn(5, requires_grad=True)
    # Forward: mul, sum. Backward: the seed gradient (ones_like), then mul (expand is a view).
    assert bench.count_ops(lambda: torch.autograd.grad((x * x).sum(), x)) >= 4


def test_mask_switch_forces_each_path_and_restores(bench, monkeypatch):
    monkeypatch.setattr(head, "DENSE_MASK_DEVICES", head.DENSE_MASK_DEVICES)
    monkeypatch.setattr(head, "DENSE_MASK_MAX_ENTRIES", head.DENSE_MASK_MAX_ENTRIES)
    small = torch.arange(4)
    bench.set_mask_path("pairs")
    assert isinstance(head.non_negatives(small, small)[0], tuple)
    bench.set_mask_path("dense")
    large = torch.arange(2 * head.DENSE_MASK_MAX_ENTRIES)
    assert isinstance(head.non_negatives(large[:8], large)[0], torch.Tensor)


def test_tiny_run_prints_every_table(bench, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(head, "DENSE_MASK_DEVICES", head.DENSE_MASK_DEVICES)
    monkeypatch.setattr(head, "DENSE_MASK_MAX_ENTRIES", head.DENSE_MASK_MAX_ENTRIES)
    out = tmp_path / "loss.md"
    assert (
        bench.main(
            [
                "--batches",
                "4",
                "--views",
                "2",
                "--dim",
                "8",
                "--repeats",
                "2",
                "--mask",
                "pairs",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    for title in (
        "SimCLR form: forward+backward time",
        "peak memory",
        "MoCo v3 form",
        "Finite loss",
        "Operations per forward+backward",
    ):
        assert title in text
    assert out.read_text().strip() == text.strip()
    counts = [line for line in text.splitlines() if line.startswith("| ")][-1]
    solo, dense, pairs = (int(c) for c in counts.strip("|").split("|")[:3])
    # The index-pair path dispatches more (sort, searchsorted, ...) than the dense comparison.
    assert 0 < solo and 0 < dense < pairs


def test_authors_port_equals_the_float64_formula_and_overflows_where_theirs_does(bench):
    """The port of the authors' function against tests/helpers/reference.py (unique indexes, so their
    position mask is the index mask); at tau = 0.05 with a hard negative, their exp(beta * n /
    tau) overflows fp32 while the plugin's loss stays finite."""
    from helpers import reference

    from attnce_plugin.losses import attentionnce_loss_func

    g = torch.Generator().manual_seed(0)
    anchors = torch.randn(2 * 6, 8, generator=g, dtype=torch.float64)
    positives = torch.randn(6, 3, 8, generator=g, dtype=torch.float64)
    want = reference.simclr_form(anchors, positives, torch.arange(6), 0.5, 1.0, 2.0)
    got = bench.authors_loss(anchors, positives, 0.5, 1.0, 2.0)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)

    hard = anchors.float().clone()
    hard[1] = hard[0] + 1e-3 * torch.randn(8, generator=g)  # image 1's anchor ~ image 0's
    pos = positives.float()
    assert not torch.isfinite(bench.authors_loss(hard, pos, 0.05, 1.0, 0.01))
    assert torch.isfinite(attentionnce_loss_func(hard, pos, torch.arange(6), 0.05, 1.0, 0.01))
