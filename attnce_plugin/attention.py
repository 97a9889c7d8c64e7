"""The prototype-attention head shared by both AttentionNCE losses.

Three pieces, each a small function so that the losses, the methods (for logging) and analysis
scripts use one definition:

* positive attention ``alpha = softmax_m(stop_grad(s) / d_pos)`` over an anchor's positive
  similarities ``s`` [n, M];
* the prototype logit ``sum_m alpha_m s_m / tau``, i.e. the similarity between the anchor and the
  attention-weighted (not re-normalised) prototype ``sum_m alpha_m p_m``;
* negative attention ``beta = (softmax_j(stop_grad(n_j) / d_neg) + 1e-6) * K`` over the K valid
  negatives of each row, so that beta averages about 1 and only re-weights negatives relative to
  each other.

Everything works in log space: the logits ``beta * n / tau`` can reach ``K / tau`` (about 8e5 for
K = 8190, tau = 0.01), which overflows ``exp`` in fp32 and in fp16 but is harmless inside a
max-shifted log-sum-exp.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict

import torch

#: Added to the negative softmax before scaling by K, as in the published formula. It keeps every
#: beta strictly positive; it is also why d_neg -> inf gives beta = 1 + K * 1e-6 rather than 1.
BETA_EPS = 1e-6


@dataclass
class AttentionWeights:
    """Attention weights of one loss call, detached, for logging and analysis.

    Attributes:
        alpha: [n, P] positive attention of each of the n local anchors over its P positives.
        beta: [n, N] negative attention over the N gathered candidates; 0 where ``valid`` is False.
        valid: [n, N] bool, True where candidate j is a negative of anchor i.
    """

    alpha: torch.Tensor
    beta: torch.Tensor
    valid: torch.Tensor


def positive_attention(pos_sim: torch.Tensor, d_pos: float) -> torch.Tensor:
    """Attention of each anchor over its positives.

    Args:
        pos_sim: [n, P] similarities between each anchor and its P positives.
        d_pos: softmax scale; larger spreads weight towards the harder (less similar) positives,
            d_pos -> inf gives the mean prototype, d_pos -> 0 only the most similar positive.

    Returns:
        [n, P] weights (no gradient), each row summing to 1.
    """
    return torch.softmax(pos_sim.detach() / d_pos, dim=-1)


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


@torch.no_grad()
def attention_stats(weights: AttentionWeights) -> Dict[str, torch.Tensor]:
    """Diagnostics of one loss call's attention, as detached scalar tensors.

    * ``eff_num_positives``: mean over anchors of ``1 / sum_m alpha_m^2`` (P when alpha is uniform,
      1 when one positive takes all the weight);
    * ``alpha_entropy``: mean entropy of alpha in nats (log P when uniform);
    * ``max_beta``: the largest beta in the batch (1 + K * 1e-6 when d_neg -> inf, up to about K
      when one negative takes all the attention);
    * ``eff_num_negatives``: mean over anchors of ``(sum_j beta_j)^2 / sum_j beta_j^2`` (K when beta is
      uniform).

    Args:
        weights: what a loss returned with ``return_attention=True``.
    """
    alpha = weights.alpha.float()
    beta = weights.beta.float()
    entropy = -(alpha * alpha.clamp_min(1e-30).log()).sum(dim=1)
    beta_sq = (beta * beta).sum(dim=1)
    eff_neg = beta.sum(dim=1).square() / beta_sq.clamp_min(1e-30)
    return {
        "eff_num_positives": (1.0 / (alpha * alpha).sum(dim=1)).mean(),
        "alpha_entropy": entropy.mean(),
        "max_beta": beta.max() if beta.numel() else beta.new_zeros(()),
        "eff_num_negatives": eff_neg.mean(),
    }
