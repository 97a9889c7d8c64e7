"""Attention diagnostics and representation health at their limits and on random inputs.

Prints one markdown table (the numbers docs/attention-diagnostics.md quotes), from the package's
own loss (``attentionnce_loss_with_attention``), ``attention_stats`` and representation metrics on
synthetic projections, no training:

* random: independent random unit vectors (an untrained network looks roughly like this);
* the limits d_pos -> inf / 0 and d_neg -> inf / 0 (as 1e6 / 1e-3), each on the random inputs;
* aligned: every positive view a small perturbation of its anchor, negatives random;
* collapsed: every projection the same vector plus tiny noise (complete collapse);
* dimensional collapse: random vectors confined to 2 of the d dimensions.

alignment is between the two anchor views; uniformity, effective rank and total variance are of
the first anchor view's B projections (so the effective rank is at most B - 1)::

    python3 -m benchmarks --experiment attention_limits [--images 64] [--num-positives 4] \\
        [--dim 128] [--seeds 0]
"""

from __future__ import annotations

import math
from typing import Dict, List, Tuple

import torch
import torch.nn.functional as F

from attnce_plugin.attention import attention_stats
from attnce_plugin.callbacks.health import (
    alignment,
    covariance_spectrum,
    effective_rank,
    uniformity,
)
from attnce_plugin.losses import attentionnce_loss_with_attention
from benchmarks.options import Options
from benchmarks.report import table


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


#: The temperature of the table (the SimCLR form's).
TAU = 0.5


def main(opts: Options, command: str) -> int:
    """Print the table: --images B, --num-positives M, --dim d, the first of --seeds."""
    b, m, d, tau = opts.images, opts.num_positives, opts.dim, TAU
    seed = (opts.seeds or (0,))[0]
    if b < 2 or m < 1 or d < 2:
        raise ValueError(f"--images={b}, --num-positives={m}, --dim={d}: allowed >= 2, 1, 2")
    g = torch.Generator().manual_seed(seed)

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
        f"tau = {tau}, seed {seed}; log M = {math.log(m):.4f}, "
        f"1 + K * 1e-6 = {1 + (2 * b - 2) * 1e-6:.6f}, log(K + 1) = {math.log(2 * b - 1):.4f}"
    )
    rows = []
    for name, a, pos, d_pos, d_neg in cases:
        s = _case(a, pos, d_pos, d_neg, tau)
        digits = {"max_beta": ".6f", "variance": ".3g"}
        rows.append([name, *[format(s[c], digits.get(c, ".4f")) for c in cols]])
    print("\n" + table(["case", *cols], rows))
    return 0
