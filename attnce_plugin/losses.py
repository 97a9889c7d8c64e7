"""AttentionNCE losses, pure functions in the style of solo-learn's ``*_loss_func``; torch only.

Both forms share one head (:func:`_attention_nce`): the positive logit is the anchor's similarity
to the attention-weighted prototype of its positives, ``alpha = softmax_m(stop_grad(s_m) / d_pos)``,
and each valid negative is weighted by ``beta_j = (softmax_j(stop_grad(n_j) / d_neg) + 1e-6) * K``
(mean about 1). ``neg_weighting`` says where beta goes: ``logit`` (the paper's) scales the logit,
``beta_j n_j / tau``; ``importance`` (our option) weights the exp term, ``n_j / tau + log beta_j``,
which is HCL's importance weighting (Robinson et al., 2021) with concentration ``tau / d_neg``.
``logit`` logits reach ``K / tau`` (8e5 at K = 8190, tau = 0.01), which overflows ``exp`` in fp32
and fp16, so the loss is a max-shifted log-sum-exp and never exponentiates a logit; it computes in
fp32 inside fp16/bf16 autocast, and in fp64 for fp64 inputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple, Union

import torch
import torch.distributed as dist
import torch.nn.functional as F

#: Added to the negative softmax before scaling by K, as in the published formula: d_neg -> inf
#: gives beta = 1 + K * 1e-6, not 1.
BETA_EPS = 1e-6
#: Where beta acts: on the negative's logit (the paper's) or on its exp term (importance weights).
NEG_WEIGHTINGS = ("logit", "importance")


@dataclass
class AttentionWeights:
    """One loss call's attention, detached: ``alpha`` [n, P] over each anchor's P positives,
    ``beta`` [n, N] over the N gathered candidates (0 where ``valid`` [n, N] is False), and
    the gradient's split: ``push`` [n, N], tau times the anchor loss's derivative in each
    candidate's cosine, and ``pull`` [n], minus that in the positive's (``1 - q_0``)."""

    alpha: torch.Tensor
    beta: torch.Tensor
    valid: torch.Tensor
    push: torch.Tensor
    pull: torch.Tensor


LossOut = Union[torch.Tensor, Tuple[torch.Tensor, AttentionWeights]]


def world_and_rank() -> Tuple[int, int]:
    """(processes, this one's rank): (1, 0) outside a process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0


class _GatherWithGrad(torch.autograd.Function):
    """all_gather whose backward sums every process's gradient of this process's slice; the
    pattern of solo-learn's ``GatherLayer`` (``solo/utils/misc.py``), here so the loss needs torch
    alone."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> Tuple[torch.Tensor, ...]:  # type: ignore[override]
        out = [torch.empty_like(x) for _ in range(dist.get_world_size())]
        dist.all_gather(out, x.contiguous())
        return tuple(out)

    @staticmethod
    def backward(ctx, *grads: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        stacked = torch.stack(grads)
        dist.all_reduce(stacked)
        return stacked[dist.get_rank()]


def gather(x: torch.Tensor, with_grad: bool) -> torch.Tensor:
    """``x`` [n, ...] of every process, rank-major [W*n, ...]; ``x`` itself on one process."""
    if world_and_rank()[0] == 1:
        return x if with_grad else x.detach()
    if with_grad:
        return torch.cat(_GatherWithGrad.apply(x))
    out = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(out, x.detach().contiguous())
    return torch.cat(out)


def _check(temperature: float, d_pos: float, d_neg: float, neg_weighting: str) -> None:
    for name, value in (("temperature", temperature), ("d_pos", d_pos), ("d_neg", d_neg)):
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not (number and math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    if neg_weighting not in NEG_WEIGHTINGS:
        raise ValueError(f"neg_weighting={neg_weighting!r}: allowed values are {NEG_WEIGHTINGS}")


def _unit(*tensors: torch.Tensor) -> List[torch.Tensor]:
    """L2-normalised in fp32, or fp64 when an input is fp64: half precision would lose the K / tau
    logits."""
    dtype = torch.float64 if torch.float64 in {t.dtype for t in tensors} else torch.float32
    return [F.normalize(t.to(dtype), dim=-1) for t in tensors]


def _prototype_logit(
    anchors: torch.Tensor, positives: torch.Tensor, d_pos: float, temperature: float
) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(pos_logit [V*b], alpha [V*b, P])``, view-major, of anchors [b, V, d] over positives
    [b, P, d]."""
    sim = torch.bmm(anchors, positives.transpose(1, 2)).transpose(0, 1).flatten(0, 1)
    alpha = torch.softmax(sim.detach() / d_pos, dim=-1)
    return (alpha * sim).sum(-1) / temperature, alpha


def _attention_nce(
    anchors: torch.Tensor,
    candidates: torch.Tensor,
    pos_logit: torch.Tensor,
    alpha: torch.Tensor,
    valid: torch.Tensor,
    temperature: float,
    d_neg: float,
    neg_weighting: str,
) -> Tuple[torch.Tensor, AttentionWeights]:
    """``(loss [n], weights)``: per-anchor ``logsumexp([pos, neg]) - pos`` over the valid
    candidates, beta held constant (stop-gradient) as in the published code."""
    sim = anchors @ candidates.T
    with torch.no_grad():
        k = valid.sum(dim=1, keepdim=True).to(sim.dtype)
        attn = torch.softmax(torch.where(valid, sim / d_neg, float("-inf")), dim=1)
        # A row without negatives (one image on one process) is NaN here: it gets 0.
        beta = torch.where(valid, (attn + BETA_EPS) * k, 0.0)
    if neg_weighting == "logit":
        neg = sim * beta / temperature
    else:  # log beta is finite on the valid candidates: beta >= K * 1e-6 there
        neg = sim / temperature + beta.log()
    logits = torch.cat([pos_logit.unsqueeze(1), torch.where(valid, neg, float("-inf"))], dim=1)
    with torch.no_grad():
        q = torch.softmax(logits, dim=1)  # each logit's share; the pull is 1 - q_0
        push = q[:, 1:] * beta if neg_weighting == "logit" else q[:, 1:]
    # logsumexp shifts by the row's max: no logit is exponentiated as it is.
    loss = torch.logsumexp(logits, dim=1) - pos_logit
    return loss, AttentionWeights(alpha, beta, valid, push, 1.0 - q[:, 0])


def attentionnce_loss_func(
    anchors: torch.Tensor,
    positives: torch.Tensor,
    indexes: torch.Tensor,
    temperature: float = 0.5,
    d_pos: float = 1.0,
    d_neg: float = 1.0,
    neg_weighting: str = "logit",
    *,
    return_attention: bool = False,
) -> LossOut:
    """AttentionNCE, SimCLR form (the paper's): the local anchors against the global batch.

    Each anchor is pulled towards the attention prototype of its image's M positives and pushed
    from the anchors of every other image (by dataset index: the image's other anchor views, and a
    copy of the sample on another process, are neither positive nor negative). Under DDP the
    anchors are gathered with gradient, so W processes of b images reproduce one of W*b.

    Args:
        anchors: [V*b, d] anchor projections, view-major (view 0 of every image, then view 1...).
        positives: [b, M, d] projections of each image's M positive views.
        indexes: [b] dataset index of each local image.
        temperature, d_pos, d_neg: tau and the attention scales, each > 0 (a larger d_pos weighs
            the harder positives more, a smaller d_neg the harder negatives).
        neg_weighting: ``logit`` (the paper's: beta scales the negative's logit) or
            ``importance`` (beta weights its exp term: ``log beta`` added to the logit).
        return_attention: also return the call's :class:`AttentionWeights` (alpha [V*b, M]).

    Returns:
        The mean loss over the V*b anchors (fp32, or fp64 for fp64 inputs), and the attention
        when asked.
    """
    _check(temperature, d_pos, d_neg, neg_weighting)
    if positives.dim() != 3 or 0 in positives.shape[:2]:
        raise ValueError(f"positives must be [b, M, d] with b, M >= 1, got {list(positives.shape)}")
    b, _, dim = positives.shape
    if indexes.shape != (b,):
        raise ValueError(f"indexes must be [b] = [{b}], got {list(indexes.shape)}")
    if anchors.dim() != 2 or anchors.shape[1] != dim or anchors.shape[0] % b or not len(anchors):
        raise ValueError(f"anchors must be [V*b, d] = [V*{b}, {dim}], got {list(anchors.shape)}")
    views = anchors.shape[0] // b
    with torch.autocast(device_type=anchors.device.type, enabled=False):
        a, p = _unit(anchors, positives)
        pos_logit, alpha = _prototype_logit(
            a.view(views, b, dim).transpose(0, 1), p, d_pos, temperature
        )
        local_idx = indexes.repeat(views)
        valid = local_idx.unsqueeze(1) != gather(local_idx, False).unsqueeze(0)
        loss, weights = _attention_nce(
            a, gather(a, True), pos_logit, alpha, valid, temperature, d_neg, neg_weighting
        )
    return (loss.mean(), weights) if return_attention else loss.mean()


def attentionnce_mocov3_loss_func(
    query: torch.Tensor,
    key: torch.Tensor,
    positive_keys: Optional[torch.Tensor] = None,
    temperature: float = 0.2,
    d_pos: float = 1.0,
    d_neg: float = 1.0,
    neg_weighting: str = "logit",
    *,
    key_in_prototype: bool = True,
    return_attention: bool = False,
) -> LossOut:
    """AttentionNCE with MoCo v3's queries and momentum keys (our design: the authors' code has
    only the SimCLR form); a drop-in for ``solo.losses.mocov3.mocov3_loss_func``.

    The positive of query i is the attention prototype over image i's momentum keys: ``key[i]``
    (MoCo v3's positive) and ``positive_keys[i]``. The negatives are the other images' keys,
    gathered without gradient. Scaled by ``2 * temperature`` like MoCo v3's loss, to which it
    reduces (up to the 1e-6 in beta) with no positive keys and a huge d_neg.

    Args:
        query: [b, d] online predictions of one anchor view.
        key: [b, d] momentum keys of the other anchor view.
        positive_keys: [b, M, d] momentum keys of the M positive views, or None.
        temperature, d_pos, d_neg, neg_weighting: as in :func:`attentionnce_loss_func`.
        key_in_prototype: False: the prototype is over ``positive_keys`` alone (then required);
            ``key[i]`` is still no negative of query i.
        return_attention: also return the call's :class:`AttentionWeights`; alpha [b, P], with
            column 0 for ``key`` when it is in the prototype.
    """
    _check(temperature, d_pos, d_neg, neg_weighting)
    if query.dim() != 2 or not len(query) or key.shape != query.shape:
        raise ValueError(
            f"query and key must both be [b, d], b >= 1; got {list(query.shape)}, {list(key.shape)}"
        )
    b, dim = query.shape
    if positive_keys is None:
        positive_keys = key.new_zeros(b, 0, dim)
    if positive_keys.dim() != 3 or positive_keys.shape[::2] != (b, dim):
        raise ValueError(
            f"positive_keys must be [b, M, d] = [{b}, M, {dim}], got {list(positive_keys.shape)}"
        )
    if not key_in_prototype and not positive_keys.shape[1]:
        raise ValueError("key_in_prototype=False needs positive_keys [b, M, d] with M >= 1")
    with torch.autocast(device_type=query.device.type, enabled=False):
        q, key, positive_keys = _unit(query, key, positive_keys)
        keys = torch.cat([key.unsqueeze(1), positive_keys], dim=1)
        candidates = keys if key_in_prototype else keys[:, 1:]
        pos_logit, alpha = _prototype_logit(q.unsqueeze(1), candidates, d_pos, temperature)
        world, rank = world_and_rank()
        valid = torch.ones(b, world * b, dtype=torch.bool, device=q.device)
        valid[torch.arange(b), rank * b + torch.arange(b)] = False  # the query's own key
        loss, weights = _attention_nce(
            q, gather(keys[:, 0], False), pos_logit, alpha, valid, temperature, d_neg, neg_weighting
        )
        loss = loss.mean() * (2 * temperature)
    return (loss, weights) if return_attention else loss


@torch.no_grad()
def attention_stats(
    weights: AttentionWeights,
    labels: Optional[torch.Tensor] = None,
    candidate_labels: Optional[torch.Tensor] = None,
) -> Dict[str, torch.Tensor]:
    """How much the attention weighs and where the gradient goes, as scalars (means over anchors):

    * ``eff_num_positives`` ``1 / sum alpha^2`` (P when uniform, 1 when one positive takes all),
      ``alpha_entropy`` (nats), ``num_positives`` P;
    * ``max_beta`` (1 + K * 1e-6 when d_neg -> inf, up to about K), ``eff_num_negatives``
      ``(sum beta)^2 / sum beta^2`` (K when uniform), ``num_negatives`` K;
    * ``push_ratio`` R, the push on the negatives over the pull on the positive: ``sum_j beta_j
      q_j / (1 - q_0)`` for ``logit`` (> 1 once the attention is active), 1 for ``importance``
      and plain InfoNCE; ``top1_push_share``, the largest single negative's share of the push;
    * ``argmax_same_class``, with class ``labels`` [n] of the anchors and ``candidate_labels`` [N]
      (none negative): the fraction of anchors whose highest-beta negative has their class.
    """
    alpha, beta = weights.alpha.float(), weights.beta.float()
    push, pull = weights.push.float(), weights.pull.float()
    eff_neg = beta.sum(dim=1).square() / (beta * beta).sum(dim=1).clamp_min(1e-30)
    total_push = push.sum(dim=1)
    out = {
        "eff_num_positives": (1.0 / (alpha * alpha).sum(dim=1)).mean(),
        "alpha_entropy": -(alpha * alpha.clamp_min(1e-30).log()).sum(dim=1).mean(),
        "num_positives": alpha.new_tensor(float(alpha.shape[1])),
        "max_beta": beta.max() if beta.numel() else beta.new_zeros(()),
        "eff_num_negatives": eff_neg.mean(),
        "num_negatives": weights.valid.sum(dim=1).float().mean(),
        "push_ratio": (total_push / pull.clamp_min(1e-30)).mean(),
        "top1_push_share": (push.amax(dim=1) / total_push.clamp_min(1e-30)).mean(),
    }
    if labels is not None and candidate_labels is not None and labels.min() >= 0:
        hardest = candidate_labels[beta.argmax(dim=1)]
        out["argmax_same_class"] = (hardest == labels).float().mean()
    return out
