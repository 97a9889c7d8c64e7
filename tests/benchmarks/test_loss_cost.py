"""benchmarks.loss_cost: the calls it times are the losses (solo-learn's SimCLR loss is the
AttentionNCE loss with one positive, the partner view, and flat negative attention), and a tiny
run prints both tables."""

from __future__ import annotations

import torch

from attnce_plugin.seam import require_solo
from benchmarks import loss_cost

require_solo()  # loudly: solo-learn's losses are the baselines


def test_every_call_returns_the_gradients_a_step_takes() -> None:
    calls = loss_cost.loss_calls(8, 3, 16, torch.device("cpu"), 0.5, 1.0, 10.0)
    assert list(calls) == ["solo_simclr", "ours", "solo_mocov3", "ours_moco"]
    shapes = {name: [tuple(g.shape) for g in call()] for name, call in calls.items()}
    assert shapes["solo_simclr"] == [(16, 16)] and shapes["ours"] == [(16, 16), (8, 3, 16)]
    assert shapes["ours_moco"] == [(8, 16)]


def test_the_baseline_is_the_loss_it_is_compared_with() -> None:
    from solo.losses.simclr import simclr_loss_func

    from attnce_plugin.losses import attentionnce_loss_func

    view, idx = torch.randn(6, 8, generator=torch.Generator().manual_seed(0)), torch.arange(6)
    # Two identical anchor views, the view its one positive: each anchor's positive is its
    # partner, and d_neg -> inf makes beta 1: SimCLR's InfoNCE over the same negatives.
    ours = attentionnce_loss_func(torch.cat([view, view]), view[:, None], idx, 0.3, 1.0, 1e12)
    torch.testing.assert_close(ours, simclr_loss_func(torch.cat([view, view]), idx.repeat(2), 0.3))


def test_a_tiny_run_prints_time_and_memory_tables(tmp_path, capsys) -> None:
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
    rows = [ln.strip("|").split("|") for ln in text.splitlines() if ln.startswith("| ")]
    assert [r[0].strip() for r in rows if r[0].strip().isdigit()] == ["4", "8", "4", "8"]
    assert "### Forward+backward time" in text and "### Peak memory" in text
    assert all(r[-1].strip().endswith("x") for r in rows if r[0].strip().isdigit())
