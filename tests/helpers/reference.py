"""Plain float64 implementations of the published AttentionNCE formulas, one anchor at a time.

Written straight from the paper's equations (docs in ../shared/docs/attentionnce.md), in exp space
and with explicit loops, sharing no code with attnce_plugin. alpha and beta come from detached
similarities: the published formula's stop-gradient on the attention. ``neg_weighting="importance"``
puts beta outside the exponent (``beta * exp(n / tau)``); :func:`hcl_row_loss` is HCL's estimator
(Robinson et al., ICLR 2021, joshr17/HCL ``image/main.py``); ``log_space=True`` takes the same
ratio as a log-sum-exp, where the published exp-space order overflows even float64."""

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
    neg_weighting: str = "logit",
    tau_neg: Optional[float] = None,
) -> torch.Tensor:
    """Loss of one anchor [d] with positives [P, d] and negatives [K, d].

    ``d_pos=None`` means the mean prototype (alpha = 1/P); ``d_neg=None`` plain InfoNCE (beta = 1);
    ``tau_neg`` divides the negatives' similarities in place of ``tau`` (None: ``tau``).
    """
    tau_neg = tau if tau_neg is None else tau_neg
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
    if neg_weighting == "importance":
        neg_logits = n / tau_neg + torch.log(beta)
        neg = (beta * torch.exp(n / tau_neg)).sum()
    else:
        neg_logits = beta * n / tau_neg
        neg = torch.exp(beta * n / tau_neg).sum()
    if log_space:
        return torch.logsumexp(torch.cat([pos_logit.view(1), neg_logits]), 0) - pos_logit
    pos = torch.exp(pos_logit)
    return -torch.log(pos / (pos + neg))


def hcl_row_loss(
    anchor: torch.Tensor, pos_items: torch.Tensor, neg_items: torch.Tensor, tau: float, b: float
) -> torch.Tensor:
    """HCL with concentration ``b`` and no debiasing (tau+ = 0), for one anchor: the negatives'
    term ``N * sum(imp * e^(n / tau)) / sum(imp)`` with ``imp = e^(b n / tau)`` (not detached),
    clamped below at ``N e^(-1 / tau)``; the positive is the mean prototype's logit."""
    pos = torch.exp((pos_items @ anchor).mean() / tau)
    neg = torch.exp(neg_items @ anchor / tau)
    imp = neg.pow(b)
    ng = (imp * neg).sum() / imp.mean()
    ng = torch.clamp(ng, min=len(neg) * torch.exp(torch.tensor(-1.0 / tau, dtype=ng.dtype)))
    return -torch.log(pos / (pos + ng))


def simclr_form(anchors, positives, indexes, tau, d_pos, d_neg, labels=None, **row) -> torch.Tensor:
    """Reference for ``attentionnce_loss_func``: anchors [V*b, d], positives [b, M, d], indexes
    [b], class ``labels`` [b] whose same-class anchors are no negatives; ``row``: the keywords of
    :func:`_row_loss`."""
    b = positives.shape[0]
    a, p = _unit(anchors), _unit(positives)
    row_index = [int(indexes[i % b]) for i in range(a.shape[0])]
    row_class = [None if labels is None else int(labels[i % b]) for i in range(a.shape[0])]
    losses = []
    for i in range(a.shape[0]):
        negs = [j for j in range(a.shape[0]) if row_index[j] != row_index[i]]
        negs = [j for j in negs if row_class[j] is None or row_class[j] != row_class[i]]
        losses.append(_row_loss(a[i], p[i % b], a[negs], tau, d_pos, d_neg, **row))
    return torch.stack(losses).mean()


def mocov3_form(query, key, positive_keys, tau, d_pos, d_neg, key_in_prototype, labels=None, **row):
    """Reference for ``attentionnce_mocov3_loss_func``: query, key [b, d], positive_keys [b, M, d].
    ``key_in_prototype=False``: the positives are the M positive keys alone; ``labels`` as in
    :func:`simclr_form`."""
    q, k, pk = _unit(query), _unit(key), _unit(positive_keys)
    losses = []
    for i in range(q.shape[0]):
        pos_items = torch.cat([k[i : i + 1], pk[i]]) if key_in_prototype else pk[i]
        negs = [j for j in range(k.shape[0]) if j != i]
        negs = [j for j in negs if labels is None or int(labels[j]) != int(labels[i])]
        losses.append(_row_loss(q[i], pos_items, k[negs], tau, d_pos, d_neg, **row))
    return torch.stack(losses).mean() * (2 * tau)
