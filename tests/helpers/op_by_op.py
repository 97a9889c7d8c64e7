"""The attention head written op by op: the readable definition of the formulas, which the fused
paths of ``attnce_plugin.attention`` are tested against (same dtype, vectorised, unlike the
per-anchor float64 ``tests/helpers/reference.py``)."""

from __future__ import annotations

import torch

from attnce_plugin.attention import BETA_EPS


def prototype_logit(pos_sim: torch.Tensor, alpha: torch.Tensor, temperature: float) -> torch.Tensor:
    """Logit of the attention-weighted prototype.

    Args:
        pos_sim: [n, P] anchor-positive similarities (carry the gradient).
        alpha: [n, P] positive attention (treated as constant).
        temperature: softmax temperature tau.

    Returns:
        [n] ``sum_m alpha_m * s_m / tau``.
    """
    return (alpha * pos_sim).sum(dim=-1) / temperature


def negative_attention(neg_sim: torch.Tensor, valid: torch.Tensor, d_neg: float) -> torch.Tensor:
    """Re-weighting of each anchor's negatives towards the hard ones.

    Args:
        neg_sim: [n, N] similarities between each anchor and N candidates.
        valid: [n, N] bool, True where the candidate is a negative of that anchor.
        d_neg: softmax scale; smaller focuses harder on the most similar negatives,
            d_neg -> inf gives beta -> 1 (plain InfoNCE).

    Returns:
        [n, N] beta (no gradient), 0 where ``valid`` is False. A row with no valid
        negative is all 0 instead of NaN.
    """
    scores = (neg_sim.detach() / d_neg).masked_fill(~valid, float("-inf"))
    num_valid = valid.sum(dim=1, keepdim=True)
    # A row without negatives would be softmax(all -inf) = NaN; give it zeros, it has K = 0.
    scores = scores.masked_fill(num_valid == 0, 0.0)
    probs = torch.softmax(scores, dim=1)
    beta = (probs + BETA_EPS) * num_valid.to(probs.dtype)
    return beta.masked_fill(~valid, 0.0)


def attention_nce(
    pos_logit: torch.Tensor,
    neg_sim: torch.Tensor,
    beta: torch.Tensor,
    valid: torch.Tensor,
    temperature: float,
) -> torch.Tensor:
    """Per-anchor AttentionNCE loss ``logsumexp([pos, beta * n / tau]) - pos``, in log space.

    Args:
        pos_logit: [n] prototype logits (see :func:`prototype_logit`).
        neg_sim: [n, N] anchor-candidate similarities (carry the gradient).
        beta: [n, N] negative attention (treated as constant).
        valid: [n, N] bool mask of negatives.
        temperature: softmax temperature tau.

    Returns:
        [n] loss of each anchor (>= 0; 0 for an anchor without negatives).
    """
    neg_logits = (beta * neg_sim / temperature).masked_fill(~valid, float("-inf"))
    logits = torch.cat([pos_logit.unsqueeze(1), neg_logits], dim=1)
    return torch.logsumexp(logits, dim=1) - pos_logit
