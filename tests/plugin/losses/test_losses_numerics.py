"""No NaN or inf in loss or gradients over a seeded sweep of scales, sizes, degenerate inputs and dtypes.

The sweep draws temperature log-uniformly in [0.01, 1], d_pos and d_neg in [1e-4, 1e4], M up to 16
and mixes in degenerate batches; the largest batch (B = 4096) is checked at the extreme corner of
the scales, where the published exp-space code overflows.
"""

from __future__ import annotations

import math
import random

import pytest
import torch

from attnce_plugin.losses import attentionnce_loss_func, attentionnce_mocov3_loss_func

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
DEGENERATE = ["random", "identical_views", "all_zero", "duplicated_images", "huge_norm"]
N_CASES = 60

pytestmark = pytest.mark.gpu  # on the `--device` (tests/conftest.py)


def _log_uniform(rng: random.Random, lo: float, hi: float) -> float:
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


def _batch(kind: str, b: int, m: int, d: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    anchors = torch.randn(2 * b, d, generator=g)
    positives = torch.randn(b, m, d, generator=g)
    if kind == "identical_views":
        base = torch.randn(b, d, generator=g)
        anchors = base.repeat(2, 1)
        positives = base.unsqueeze(1).expand(b, m, d).clone()
    elif kind == "all_zero":
        anchors.zero_()
        positives.zero_()
    elif kind == "duplicated_images":
        anchors = anchors[:1].expand(2 * b, d).clone()
        positives = positives[:1].expand(b, m, d).clone()
    elif kind == "huge_norm":
        anchors *= 1e4
        positives *= 1e-4
    return anchors, positives, torch.arange(b)


def _cases():
    rng = random.Random(2025)
    cases = []
    for i in range(N_CASES):
        cases.append(
            (
                rng.choice([2, 3, 16, 64, 256]),
                rng.choice([1, 2, 4, 8, 16]),
                rng.choice([8, 32, 128]),
                _log_uniform(rng, 0.01, 1.0),
                _log_uniform(rng, 1e-4, 1e4),
                _log_uniform(rng, 1e-4, 1e4),
                DEGENERATE[i % len(DEGENERATE)],
                DTYPES[i % len(DTYPES)],
                i,
            )
        )
    return cases


def _assert_finite_both_forms(anchors, positives, indexes, tau, d_pos, d_neg, dtype, device):
    anchors, positives, indexes = anchors.to(device), positives.to(device), indexes.to(device)
    b = positives.shape[0]
    a = anchors.to(dtype).clone().requires_grad_(True)
    p = positives.to(dtype).clone().requires_grad_(True)
    loss = attentionnce_loss_func(a, p, indexes, tau, d_pos, d_neg)
    loss.backward()
    assert torch.isfinite(loss), float(loss)
    assert torch.isfinite(a.grad).all() and torch.isfinite(p.grad).all()

    q = anchors[:b].to(dtype).clone().requires_grad_(True)
    mloss = attentionnce_mocov3_loss_func(
        q, anchors[b:].to(dtype), positives.to(dtype), tau, d_pos, d_neg
    )
    mloss.backward()
    assert torch.isfinite(mloss), float(mloss)
    assert torch.isfinite(q.grad).all()


@pytest.mark.parametrize("b,m,d,tau,d_pos,d_neg,kind,dtype,seed", _cases())
def test_sweep_is_finite(b, m, d, tau, d_pos, d_neg, kind, dtype, seed, device):
    anchors, positives, indexes = _batch(kind, b, m, d, seed)
    _assert_finite_both_forms(anchors, positives, indexes, tau, d_pos, d_neg, dtype, device)


@pytest.mark.parametrize(
    "tau,d_pos,d_neg,dtype",
    [
        (0.01, 1e-4, 1e-4, torch.float32),
        (0.01, 1e4, 1e-4, torch.float16),
        (1.0, 1e4, 1e4, torch.bfloat16),
    ],
)
def test_largest_batch_at_extreme_scales(tau, d_pos, d_neg, dtype, device):
    anchors, positives, indexes = _batch("random", 4096, 2, 16, seed=1)
    _assert_finite_both_forms(anchors, positives, indexes, tau, d_pos, d_neg, dtype, device)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_sixteen_positives_under_autocast(dtype, device):
    proj = torch.nn.Linear(16, 32).to(device)
    x, xp = torch.randn(2 * 64, 16).to(device), torch.randn(64, 16, 16).to(device)
    with torch.autocast(device.type, dtype=dtype):
        loss = attentionnce_loss_func(
            proj(x), proj(xp), torch.arange(64, device=device), 0.01, 1e-4, 1e-4
        )
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in proj.parameters())
