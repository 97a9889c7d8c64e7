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

The losses call :func:`prototype_attention`, which computes alpha and the prototype logit with two
batched matmuls, and :func:`fused_attention_nce`, which computes the negative similarities, beta and
the log-sum-exp in one autograd node that writes into a handful of [n, N] buffers in place and keeps
a single [n, N] tensor for backward (see ``docs/performance.md``). The same formulas written op by
op, the readable definition the fast paths are tested against, are in ``tests/helpers/op_by_op.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterable, NamedTuple, Optional, Tuple, Union

import torch

#: Added to the negative softmax before scaling by K, as in the published formula. It keeps every
#: beta strictly positive; it is also why d_neg -> inf gives beta = 1 + K * 1e-6 rather than 1.
BETA_EPS = 1e-6


#: The (anchor, candidate) entries that are not negatives (same dataset index): either
#: ``(rows [P], cols [P])`` long index pairs or an [n, N] bool mask (True = not a negative).
NonNegatives = Union[Tuple[torch.Tensor, torch.Tensor], torch.Tensor]


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


class LossWithAttention(NamedTuple):
    """What the ``*_loss_with_attention`` functions return.

    Attributes:
        loss: the scalar loss, as the matching ``*_loss_func`` returns it.
        attention: the detached attention weights of the call.
    """

    loss: torch.Tensor
    attention: AttentionWeights


def compute_dtype(*tensors: torch.Tensor) -> torch.dtype:
    """The dtype the losses compute in: fp64 when an input is fp64, else fp32.

    Half precision would overflow or lose the logits (they reach K / tau), so fp16 and bf16 inputs
    are computed in fp32; fp64 inputs (gradcheck, float64 references) keep their precision.

    fp32 is the dtype, not a promise of IEEE fp32 matmuls: the fp32 matmuls follow the process's
    ``torch.set_float32_matmul_precision`` (with ``"high"``, which Lightning suggests on Ampere and
    Hopper GPUs, they run in TF32: inputs rounded to a 10-bit mantissa, fp32 accumulation). The
    losses never change that setting; the softmaxes, log-sum-exps and everything elementwise stay
    IEEE fp32. See docs/reliability.md ("GPU paths").
    """
    out = torch.float32
    for t in tensors:
        out = torch.promote_types(out, t.dtype) if t.is_floating_point() else out
    return out


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


def prototype_attention(
    anchors: torch.Tensor, positives: torch.Tensor, d_pos: float, temperature: float
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Positive attention and prototype logit of every anchor of an image, by batched matmuls.

    The same values and gradients as ``prototype_logit(s, positive_attention(s, d_pos), tau)`` with
    ``s = <anchor, positive>``, but computed as ``<anchor, sum_m alpha_m p_m> / tau``: the
    similarities (no gradient, alpha needs none) and the prototypes are two batched matmuls, and
    no [V, b, M, d] product is materialised, in forward or in backward.

    Args:
        anchors: [b, V, d] the V anchor views of each of the b images (carry the gradient).
        positives: [b, M, d] the M positives of each image (with or without gradient).
        d_pos: positive-attention scale > 0.
        temperature: tau > 0.

    Returns:
        ``(pos_logit [b, V], alpha [b, V, M])``, alpha detached.
    """
    with torch.no_grad():
        alpha = positive_attention(torch.bmm(anchors, positives.transpose(1, 2)), d_pos)
        # 1 / tau on the small constant alpha, not on the logit: no division in backward.
        alpha_t = alpha / temperature
    prototypes = torch.bmm(alpha_t, positives)
    return (anchors * prototypes).sum(dim=-1), alpha


class _FusedAttentionNCE(torch.autograd.Function):
    """Per-anchor AttentionNCE loss from the anchors and candidates, in one node (see
    :func:`fused_attention_nce` for the contract).

    Forward, with S = anchors @ candidates^T and invalid entries set to -inf in place:
    ``e = exp((S - max_j S) / d_neg)`` (0 where invalid), ``beta / tau = e * K / (tau * sum_j e) +
    1e-6 * K / tau`` (the published ``(softmax + 1e-6) * K``, divided by tau), logits
    ``L = (beta / tau) * S`` written over S (-inf where invalid, since beta > 0), then the
    max-shifted log-sum-exp of ``[pos_logit, L]``. Backward needs only
    ``W = exp(L - max) * beta / tau`` [n, N], kept in S's buffer: ``dloss_i / dS_ij =
    W_ij / sumexp_i`` (beta held constant) and ``dloss_i / dpos_i = exp(pos_i - max_i) / sumexp_i - 1``.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx,
        anchors: torch.Tensor,
        candidates: torch.Tensor,
        pos_logit: torch.Tensor,
        invalid: NonNegatives,
        num_valid: torch.Tensor,
        temperature: float,
        d_neg: float,
        return_beta: bool,
    ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        sim = anchors @ candidates.T
        fill_non_negatives_(sim, invalid, float("-inf"))
        k_t = num_valid.to(sim.dtype).unsqueeze(1).div_(temperature)  # K / tau
        # A row without negatives (K = 0) is all -inf. Its amax is -inf; clamping to the lowest
        # finite value changes only such rows and keeps (S - shift) at -inf there instead of NaN.
        # Every other row's exp-sum is >= 1 (its maximum contributes exp(0)), so the clamp to 1
        # changes only the empty rows' 0, whose scale stays K / tau = 0. Their offset uses
        # max(K, 1) so that beta / tau > 0 and their logits stay -inf (not -inf * 0 = NaN).
        shift = sim.amax(dim=1, keepdim=True).clamp_min_(torch.finfo(sim.dtype).min)
        expd = torch.sub(sim, shift).div_(d_neg).exp_()
        scale = k_t / expd.sum(dim=1, keepdim=True).clamp_min_(1.0)
        offset = k_t.clamp_min(1.0 / temperature).mul_(BETA_EPS)
        beta_t = torch.addcmul(offset, expd, scale, out=expd)  # beta / tau, in expd's buffer
        beta: Optional[torch.Tensor] = None
        if return_beta:
            # An empty row is all non-negatives, so this also zeroes its beta.
            beta = beta_t * temperature
            fill_non_negatives_(beta, invalid, 0.0)
        logits = sim.mul_(beta_t)  # beta * S / tau, -inf where invalid
        row_max = torch.maximum(logits.amax(dim=1), pos_logit)
        probs = logits.sub_(row_max.unsqueeze(1)).exp_()
        pos_exp = torch.exp(pos_logit - row_max)
        sumexp = probs.sum(dim=1) + pos_exp
        loss = row_max + sumexp.log() - pos_logit
        weights = probs.mul_(beta_t)  # exp(L - max) * beta / tau; 0 where invalid
        del beta_t, expd
        ctx.same_tensor = candidates is anchors
        ctx.save_for_backward(anchors, candidates, weights, sumexp, pos_exp)
        if beta is not None:
            ctx.mark_non_differentiable(beta)
        return loss, beta

    @staticmethod
    def backward(  # type: ignore[override]
        ctx, grad_loss: torch.Tensor, _grad_beta: Optional[torch.Tensor]
    ) -> Tuple[Optional[torch.Tensor], ...]:
        anchors, candidates, weights, sumexp, pos_exp = ctx.saved_tensors
        row_grad = grad_loss / sumexp
        grad_sim = weights * row_grad.unsqueeze(1)
        grad_anchors = grad_candidates = None
        if ctx.same_tensor and ctx.needs_input_grad[0]:
            # Candidates are the anchors (one process): hand autograd the sum of both gradients
            # once instead of two tensors for it to add.
            grad_anchors = torch.addmm(grad_sim @ candidates, grad_sim.T, anchors)
        else:
            if ctx.needs_input_grad[0]:
                grad_anchors = grad_sim @ candidates
            if ctx.needs_input_grad[1]:
                grad_candidates = grad_sim.T @ anchors
        # grad_loss * (pos_exp / sumexp - 1), from row_grad = grad_loss / sumexp.
        grad_pos = torch.mul(row_grad, pos_exp).sub_(grad_loss) if ctx.needs_input_grad[2] else None
        return grad_anchors, grad_candidates, grad_pos, None, None, None, None, None


def fused_attention_nce(
    anchors: torch.Tensor,
    candidates: torch.Tensor,
    pos_logit: torch.Tensor,
    invalid: NonNegatives,
    num_valid: torch.Tensor,
    temperature: float,
    d_neg: float,
    return_beta: bool = False,
) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Per-anchor AttentionNCE loss, negatives and beta computed inside one autograd node.

    Equal (up to fp rounding) to ``attention_nce(pos_logit, S, negative_attention(S, valid, d_neg),
    valid, temperature)`` with ``S = anchors @ candidates.T`` and ``valid`` False exactly at the
    entries ``invalid`` names, but with about half the passes over [n, N] and one [n, N]
    tensor kept for backward. Beta is held constant in backward (stop-gradient). Not twice
    differentiable.

    Args:
        anchors: [n, d] unit anchors (carry the gradient).
        candidates: [N, d] unit candidates (with or without gradient).
        pos_logit: [n] prototype logits (see :func:`prototype_logit`).
        invalid: the (anchor, candidate) entries that are not negatives: ``(rows [P], cols [P])``
            long index pairs (distinct), or an [n, N] bool mask (see :data:`NonNegatives`).
        num_valid: [n] long, K of each row = N minus its number of invalid entries.
        temperature: tau > 0.
        d_neg: negative-attention scale > 0.
        return_beta: also return beta [n, N] (detached; 0 where invalid).

    Returns:
        ``(loss [n], beta [n, N] or None)``.
    """
    return _FusedAttentionNCE.apply(
        anchors, candidates, pos_logit, invalid, num_valid, temperature, d_neg, return_beta
    )


def index_match_pairs(
    local_idx: torch.Tensor, all_idx: torch.Tensor
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """All pairs (r, c) with ``local_idx[r] == all_idx[c]``, without an [n, N] comparison.

    Sorts ``all_idx`` once and finds each row's equal run with ``searchsorted``: O((n + N) log N)
    work and O(matches) memory, whatever the duplicates (e.g. a sample repeated on two processes).

    Args:
        local_idx: [n] dataset index of each anchor row.
        all_idx: [N] dataset index of each candidate column.

    Returns:
        ``(rows [P], cols [P], num_valid [n])`` with P the number of matches and
        ``num_valid[r] = N - (matches of row r)``.
    """
    sorted_idx, order = torch.sort(all_idx)
    first = torch.searchsorted(sorted_idx, local_idx, side="left")
    count = torch.searchsorted(sorted_idx, local_idx, side="right") - first
    rows = torch.repeat_interleave(torch.arange(local_idx.numel(), device=local_idx.device), count)
    # Position of each match inside sorted_idx: its row's first match plus its rank in the run.
    run_start = torch.cumsum(count, dim=0) - count
    rank_in_run = torch.arange(rows.numel(), device=local_idx.device) - run_start[rows]
    cols = order[first[rows] + rank_in_run]
    return rows, cols, all_idx.numel() - count


def index_match_mask(
    local_idx: torch.Tensor, all_idx: torch.Tensor
) -> Tuple[torch.Tensor, torch.Tensor]:
    """[n, N] bool mask of ``local_idx[r] == all_idx[c]``, and K per row; no host sync.

    :func:`index_match_pairs` needs the number of matches on the host (``repeat_interleave``),
    which makes a GPU stream wait once per call; this comparison queues without waiting, at the
    price of an [n, N] bool tensor (a quarter of the fp32 similarity matrix).

    Args:
        local_idx: [n] dataset index of each anchor row.
        all_idx: [N] dataset index of each candidate column.

    Returns:
        ``(invalid [n, N] bool, num_valid [n] long)``.
    """
    invalid = local_idx.unsqueeze(1) == all_idx.unsqueeze(0)
    return invalid, all_idx.numel() - invalid.sum(dim=1)


#: Device types on which the SimCLR form builds its non-negatives as a dense [n, N] mask
#: (:func:`index_match_mask`, sync-free) instead of index pairs (:func:`index_match_pairs`,
#: O(matches) memory, one host sync per call).
DENSE_MASK_DEVICES: Tuple[str, ...] = ("cuda",)

#: Up to this many [n, N] entries the dense mask is used on every device: comparing a small
#: matrix is cheaper than sorting and matching (CPU crossover between B = 128 and 256 images with
#: two views; docs/performance.md, ``bench_loss.py --mask``).
DENSE_MASK_MAX_ENTRIES = 1 << 16


def non_negatives(
    local_idx: torch.Tensor, all_idx: torch.Tensor
) -> Tuple[NonNegatives, torch.Tensor]:
    """The entries with equal dataset indexes (not negatives), in the form suited to the device.

    Returns:
        ``(invalid, num_valid [n])``: a [n, N] bool mask on :data:`DENSE_MASK_DEVICES` or when
        n * N <= :data:`DENSE_MASK_MAX_ENTRIES`, else ``(rows, cols)`` index pairs.
    """
    dense_here = local_idx.device.type in DENSE_MASK_DEVICES
    if dense_here or local_idx.numel() * all_idx.numel() <= DENSE_MASK_MAX_ENTRIES:
        return index_match_mask(local_idx, all_idx)
    rows, cols, num_valid = index_match_pairs(local_idx, all_idx)
    return (rows, cols), num_valid


def fill_non_negatives_(t: torch.Tensor, invalid: NonNegatives, value: float) -> torch.Tensor:
    """Write ``value`` into [n, N] ``t`` at the entries ``invalid`` names, in place."""
    if isinstance(invalid, torch.Tensor):
        return t.masked_fill_(invalid, value)
    return t.index_put_(invalid, t.new_full((), value))


def valid_from_invalid(invalid: NonNegatives, n: int, total: int) -> torch.Tensor:
    """[n, total] bool mask, True everywhere except at the entries ``invalid`` names."""
    if isinstance(invalid, torch.Tensor):
        return ~invalid
    valid = torch.ones(n, total, dtype=torch.bool, device=invalid[0].device)
    return fill_non_negatives_(valid, invalid, False)


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
        weights: the ``attention`` of a ``*_loss_with_attention`` call.
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


def mean_stats(stats: Iterable[Dict[str, torch.Tensor]]) -> Dict[str, torch.Tensor]:
    """Combine the :func:`attention_stats` of several loss calls: mean, but max for ``max_beta``."""
    stats = list(stats)
    out: Dict[str, torch.Tensor] = {}
    for key in stats[0]:
        values = torch.stack([s[key].float() for s in stats])
        out[key] = values.max() if key == "max_beta" else values.mean()
    return out
