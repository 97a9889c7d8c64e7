#!/usr/bin/env python3
"""Attention diagnostics and representation health at their limits and on random inputs.

Prints one markdown table (the numbers docs/attention-diagnostics.md quotes), from the package's
own loss (``attentionnce_loss_with_attention(...)``), ``attention_stats`` and
``representation`` metrics on synthetic projections:

* random: independent random unit vectors (an untrained network looks roughly like this);
* the limits d_pos -> inf / 0 and d_neg -> inf / 0 (as 1e6 / 1e-3), each on the random inputs;
* aligned: every positive view a small perturbation of its anchor, negatives random (what a
  healthy, trained representation tends toward);
* collapsed: every projection the same vector plus tiny noise (complete collapse);
* dimensional collapse: random vectors confined to 2 of the d dimensions.

alignment is between the two anchor views; uniformity, effective rank and total variance are of
the first anchor view's B projections (so the effective rank is at most B - 1).

Usage: python3 -m attnce_bench.experiments.attention_limits [--images 64] [--positives 4] [--dim 128] [--seed 0]
"""

from __future__ import annotations

import argparse
import math
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F

from attnce_plugin.attention import attention_stats
from attnce_plugin.losses import attentionnce_loss_with_attention
from attnce_plugin.representation import (
    alignment,
    covariance_spectrum,
    effective_rank,
    uniformity,
)


def _case(
    anchors: torch.Tensor, positives: torch.Tensor, d_pos: float, d_neg: float, tau: float
) -> Dict[str, float]:
    """Stats of one loss call; anchors [2b, d] view-major, positives [b, M, d]."""
    b = positives.shape[0]
    loss, weights = attentionnce_loss_with_attention(
        anchors, positives, torch.arange(b), tau, d_pos, d_neg
    )
    stats = {k: float(v) for k, v in attention_stats(weights).items()}
    k = 2 * b - 2
    stats.update(
        loss=float(loss),
        mi_bound=math.log(k + 1) - float(loss),
        alignment=float(alignment(anchors[:b], anchors[b:])),
        uniformity=float(uniformity(anchors[:b])),
        eff_rank=float(effective_rank(anchors[:b])),
        # Effective rank ignores scale: a point plus tiny noise looks full-rank; the total
        # variance (trace of the covariance) tells that case apart.
        variance=float(covariance_spectrum(anchors[:b]).sum()),
    )
    return stats


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--images", type=int, default=64, help="B images (K = 2B - 2 negatives)")
    p.add_argument("--positives", type=int, default=4, help="M positive views per image")
    p.add_argument("--dim", type=int, default=128, help="projection dimension")
    p.add_argument("--tau", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    b, m, d = args.images, args.positives, args.dim
    g = torch.Generator().manual_seed(args.seed)

    def rnd(*shape: int) -> torch.Tensor:
        return F.normalize(torch.randn(*shape, d, generator=g), dim=-1)

    rand_a, rand_p = rnd(2 * b), rnd(b, m)
    base = rnd(b)
    aligned_a = torch.cat([base + 0.1 * rnd(b), base + 0.1 * rnd(b)])
    aligned_p = base.unsqueeze(1) + 0.3 * rnd(b, m)
    one = rnd(1)
    coll_a = one + 1e-3 * rnd(2 * b)
    coll_p = one.unsqueeze(0) + 1e-3 * rnd(b, m)
    low = torch.zeros(d)
    low[:2] = 1.0
    dim_a, dim_p = F.normalize(rnd(2 * b) * low, dim=-1), F.normalize(rnd(b, m) * low, dim=-1)

    cases: List[Tuple[str, torch.Tensor, torch.Tensor, float, float]] = [
        ("random, d_pos=1, d_neg=10 (paper CIFAR)", rand_a, rand_p, 1.0, 10.0),
        ("random, d_pos -> inf (1e6)", rand_a, rand_p, 1e6, 10.0),
        ("random, d_pos -> 0 (1e-3)", rand_a, rand_p, 1e-3, 10.0),
        ("random, d_neg -> inf (1e6)", rand_a, rand_p, 1.0, 1e6),
        ("random, d_neg -> 0 (1e-3)", rand_a, rand_p, 1.0, 1e-3),
        ("aligned, d_pos=1, d_neg=10", aligned_a, aligned_p, 1.0, 10.0),
        ("collapsed, d_pos=1, d_neg=10", coll_a, coll_p, 1.0, 10.0),
        ("2-dim collapse, d_pos=1, d_neg=10", dim_a, dim_p, 1.0, 10.0),
    ]
    cols = [
        "eff_num_positives",
        "alpha_entropy",
        "max_beta",
        "eff_num_negatives",
        "loss",
        "mi_bound",
        "alignment",
        "uniformity",
        "eff_rank",
        "variance",
    ]
    print(
        f"B = {b} images, M = {m}, K = 2B - 2 = {2 * b - 2} negatives per anchor, d = {d}, "
        f"tau = {args.tau}, seed {args.seed}; log M = {math.log(m):.4f}, "
        f"1 + K * 1e-6 = {1 + (2 * b - 2) * 1e-6:.6f}, log(K + 1) = {math.log(2 * b - 1):.4f}"
    )
    print()
    print("| case | " + " | ".join(cols) + " |")
    print("|---|" + "---|" * len(cols))
    for name, a, pos, d_pos, d_neg in cases:
        s = _case(a, pos, d_pos, d_neg, args.tau)
        cells = [
            (
                f"{s[c]:.6f}"
                if c == "max_beta"
                else f"{s[c]:.3g}" if c == "variance" else f"{s[c]:.4f}"
            )
            for c in cols
        ]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
