"""Plain float64 implementations of the published AttentionNCE formulas, one anchor at a time.

Written straight from the paper's equations (docs in ../shared/docs/attentionnce.md), in exp space
and with explicit loops, sharing no code with attnce_plugin: the tests compare the package against
these. alpha and beta are computed from detached similarities, which is how the published formula
is differentiated (stop-gradient on the attention). ``log_space=True`` takes the same ratio as a
log-sum-exp, for the cases where the published exp-space order overflows even float64.
"""

from __future__ import annotations

from typing import Optional

import torch

BETA_EPS = 1e-6


def _unit(x: torch.Tensor) -> torch.Tensor:
    x = x.double()
    return x / x.norm(dim=-1, keepdim=True).clamp_min(1e-12)


def _row_loss(
    anchor: torch.Tensor,
    pos_items: torch.Tensor,
    neg_items: torch.Tensor,
    tau: float,
    d_pos: Optional[float],
    d_neg: Optional[float],
    log_space: bool = False,
) -> torch.Tensor:
    """Loss of one anchor [d] with positives [P, d] and negatives [K, d].

    ``d_pos=None`` means the mean prototype (alpha = 1/P); ``d_neg=None`` plain InfoNCE (beta = 1).
    """
    s = pos_items @ anchor
    if d_pos is None:
        alpha = torch.full_like(s, 1.0 / s.numel())
    else:
        e = torch.exp(s.detach() / d_pos)
        alpha = e / e.sum()
    pos_logit = (alpha * s).sum() / tau
    n = neg_items @ anchor
    k = n.numel()
    if d_neg is None:
        beta = torch.ones_like(n)
    else:
        w = torch.exp(n.detach() / d_neg)
        beta = (w / w.sum() + BETA_EPS) * k
    if log_space:
        return torch.logsumexp(torch.cat([pos_logit.view(1), beta * n / tau]), 0) - pos_logit
    pos = torch.exp(pos_logit)
    neg = torch.exp(beta * n / tau).sum()
    return -torch.log(pos / (pos + neg))


def simclr_form(
    anchors: torch.Tensor,
    positives: torch.Tensor,
    indexes: torch.Tensor,
    tau: float,
    d_pos: Optional[float],
    d_neg: Optional[float],
    log_space: bool = False,
) -> torch.Tensor:
    """Reference for ``attentionnce_loss_func``: anchors [V*b, d], positives [b, M, d], indexes [b]."""
    b = positives.shape[0]
    a = _unit(anchors)
    p = _unit(positives)
    row_index = [int(indexes[i % b]) for i in range(a.shape[0])]
    losses = []
    for i in range(a.shape[0]):
        negs = [j for j in range(a.shape[0]) if row_index[j] != row_index[i]]
        losses.append(_row_loss(a[i], p[i % b], a[negs], tau, d_pos, d_neg, log_space))
    return torch.stack(losses).mean()


def mocov3_form(
    query: torch.Tensor,
    key: torch.Tensor,
    positive_keys: Optional[torch.Tensor],
    tau: float,
    d_pos: Optional[float],
    d_neg: Optional[float],
    key_in_prototype: bool = True,
    log_space: bool = False,
) -> torch.Tensor:
    """Reference for ``attentionnce_mocov3_loss_func``: query, key [b, d], positive_keys [b, M, d].
    ``key_in_prototype=False``: the positives are the M positive keys alone."""
    q = _unit(query)
    k = _unit(key)
    pk = None if positive_keys is None else _unit(positive_keys)
    losses = []
    for i in range(q.shape[0]):
        pos_items = k[i : i + 1] if pk is None else torch.cat([k[i : i + 1], pk[i]], dim=0)
        if not key_in_prototype:
            pos_items = pk[i]
        negs = [j for j in range(k.shape[0]) if j != i]
        losses.append(_row_loss(q[i], pos_items, k[negs], tau, d_pos, d_neg, log_space))
    return torch.stack(losses).mean() * (2 * tau)
