"""AttentionNCE losses, pure functions in the style of solo-learn's ``*_loss_func``; torch only.

Both forms share one head (:func:`_attention_nce`): the positive logit is the anchor's similarity
to the prototype of its positives weighted by ``alpha = softmax_m(stop_grad(s_m) / d_pos)``; each
negative is weighted by ``beta_j = (softmax_j(stop_grad(n_j) / d_neg) + 1e-6) * K``, inside its
logit (``logit``, the paper's) or on its exp term (``importance``, ours: HCL's weighting). The
math, the options and the numerics: docs/design.md.
"""

from __future__ import annotations

import contextlib
import functools
import math
from dataclasses import dataclass
from typing import Any, Dict, List, NamedTuple, Optional, Tuple, Union

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


class Scales(NamedTuple):
    temperature: float
    d_pos: float
    d_neg: float
    neg_weighting: str
    neg_temperature: float


@functools.lru_cache(maxsize=64, typed=True)
def scales(
    temperature: float, d_pos: float, d_neg: float, neg_weighting: str, neg_temperature: Any
) -> Scales:
    """The settings, checked once each (cached: a training loop's later calls check nothing);
    ``neg_temperature`` None is ``temperature``."""
    tau_neg = temperature if neg_temperature is None else neg_temperature
    s = Scales(temperature, d_pos, d_neg, neg_weighting, tau_neg)
    for name, value in s._asdict().items():
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if name != "neg_weighting" and not (number and math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    if neg_weighting not in NEG_WEIGHTINGS:
        raise ValueError(f"neg_weighting={neg_weighting!r}: allowed values are {NEG_WEIGHTINGS}")
    return s


def _full_precision(device: torch.device) -> Any:
    """Autocast off on ``device`` (``meta``, which tests use, has no autocast)."""
    if torch.amp.is_autocast_available(device.type):
        return torch.autocast(device_type=device.type, enabled=False)
    return contextlib.nullcontext()


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
    s: Scales,
    with_weights: bool,
) -> Tuple[torch.Tensor, Optional[AttentionWeights]]:
    """``(loss [n], weights when asked)``: per-anchor ``logsumexp([pos, neg]) - pos`` over the
    valid candidates, beta held constant (stop-gradient) as in the published code. Each negative's
    logit is ``offset + sim * scale``: ``(0, beta / tau_neg)`` for ``logit``, ``(log beta, 1 /
    tau_neg)`` for ``importance``, the offset the dtype's lowest number where the candidate is no
    negative."""
    sim = anchors @ candidates.T
    with torch.no_grad():
        k = valid.sum(dim=1, keepdim=True).to(sim.dtype)
        # The dtype's lowest number marks the candidates that are no negatives, not -inf: a row
        # without negatives (one image on one process) then stays finite, and exp gives 0 there.
        lowest, invalid = torch.finfo(sim.dtype).min, ~valid
        w = torch.softmax((sim / s.d_neg).masked_fill_(invalid, lowest), dim=1).add_(BETA_EPS)
        if s.neg_weighting == "logit":
            scale = w.mul_(k / s.neg_temperature)
            offset = torch.where(valid, sim.new_zeros(()), lowest)
        else:  # log beta is finite on the valid candidates: beta >= K * 1e-6 there
            scale = sim.new_tensor(1.0 / s.neg_temperature)
            offset = w.mul_(k).log_().masked_fill_(invalid, lowest)
    neg = torch.addcmul(offset, sim, scale)
    # logsumexp shifts by the row's max: no logit is exponentiated as it is.
    loss = torch.logaddexp(pos_logit, torch.logsumexp(neg, dim=1)) - pos_logit
    return loss, (
        _weights(pos_logit, neg, alpha, scale, offset, valid, s) if with_weights else None
    )


@torch.no_grad()
def _weights(
    pos_logit: torch.Tensor,
    neg: torch.Tensor,
    alpha: torch.Tensor,
    scale: torch.Tensor,
    offset: torch.Tensor,
    valid: torch.Tensor,
    s: Scales,
) -> AttentionWeights:
    """The call's :class:`AttentionWeights`, from what the loss computed: beta is ``scale *
    tau_neg`` (``logit``) or ``exp(offset)`` (``importance``); the push on negative j is tau
    times the derivative of the loss in its cosine, ``q_j * scale * tau``."""
    q = torch.softmax(torch.cat([pos_logit.unsqueeze(1), neg], dim=1), dim=1)  # the pull: 1 - q_0
    if s.neg_weighting == "logit":
        beta = (scale * s.neg_temperature).masked_fill_(~valid, 0.0)
    else:
        beta = offset.exp()  # 0 where offset is the lowest number
    push = q[:, 1:] * (scale * s.temperature)
    return AttentionWeights(alpha, beta, valid, push, 1.0 - q[:, 0])


def _other_class(valid: torch.Tensor, labels: Optional[torch.Tensor], views: int) -> torch.Tensor:
    """``valid``, less the candidates of the anchor's own class when ``labels`` are given."""
    if labels is None:
        return valid
    local = labels.repeat(views)
    return valid & (local.unsqueeze(1) != gather(local, False).unsqueeze(0))


def attentionnce_loss_func(
    anchors: torch.Tensor,
    positives: torch.Tensor,
    indexes: torch.Tensor,
    temperature: float = 0.5,
    d_pos: float = 1.0,
    d_neg: float = 1.0,
    neg_weighting: str = "logit",
    *,
    neg_temperature: Optional[float] = None,
    labels: Optional[torch.Tensor] = None,
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
        temperature, d_pos, d_neg: tau and the attention scales, each > 0.
        neg_weighting: ``logit`` (beta scales the negative's logit) or ``importance``.
        neg_temperature: tau_neg of the negatives' logits (our option); None: ``temperature``.
        labels: [b] class labels (an oracle, supervised): no negative of the anchor's class.
        return_attention: also return the call's :class:`AttentionWeights` (alpha [V*b, M]).

    Returns:
        The mean loss over the V*b anchors (fp32, or fp64 for fp64 inputs), and the attention
        when asked.
    """
    s = scales(temperature, d_pos, d_neg, neg_weighting, neg_temperature)
    if positives.dim() != 3 or 0 in positives.shape[:2]:
        raise ValueError(f"positives must be [b, M, d] with b, M >= 1, got {list(positives.shape)}")
    b, _, dim = positives.shape
    if indexes.shape != (b,) or (labels is not None and labels.shape != (b,)):
        got = [list(t.shape) for t in (indexes, labels) if t is not None]
        raise ValueError(f"indexes (and labels) must be [b] = [{b}], got {got}")
    if anchors.dim() != 2 or anchors.shape[1] != dim or anchors.shape[0] % b or not len(anchors):
        raise ValueError(f"anchors must be [V*b, d] = [V*{b}, {dim}], got {list(anchors.shape)}")
    views = anchors.shape[0] // b
    with _full_precision(anchors.device):
        a, p = _unit(anchors, positives)
        pos_logit, alpha = _prototype_logit(
            a.view(views, b, dim).transpose(0, 1), p, s.d_pos, s.temperature
        )
        local_idx = indexes.repeat(views)
        valid = local_idx.unsqueeze(1) != gather(local_idx, False).unsqueeze(0)
        valid = _other_class(valid, labels, views)
        loss, weights = _attention_nce(
            a, gather(a, True), pos_logit, alpha, valid, s, return_attention
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
    neg_temperature: Optional[float] = None,
    labels: Optional[torch.Tensor] = None,
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
        temperature, d_pos, d_neg, neg_weighting, neg_temperature, labels: as in
            :func:`attentionnce_loss_func`.
        key_in_prototype: False: the prototype is over ``positive_keys`` alone (then required);
            ``key[i]`` is still no negative of query i.
        return_attention: also return the call's :class:`AttentionWeights`; alpha [b, P], with
            column 0 for ``key`` when it is in the prototype.
    """
    s = scales(temperature, d_pos, d_neg, neg_weighting, neg_temperature)
    if query.dim() != 2 or not len(query) or key.shape != query.shape:
        raise ValueError(
            f"query and key must both be [b, d], b >= 1; got {list(query.shape)}, {list(key.shape)}"
        )
    b, dim = query.shape
    if labels is not None and labels.shape != (b,):
        raise ValueError(f"labels must be [b] = [{b}], got {list(labels.shape)}")
    if positive_keys is None:
        positive_keys = key.new_zeros(b, 0, dim)
    if positive_keys.dim() != 3 or positive_keys.shape[::2] != (b, dim):
        raise ValueError(
            f"positive_keys must be [b, M, d] = [{b}, M, {dim}], got {list(positive_keys.shape)}"
        )
    if not key_in_prototype and not positive_keys.shape[1]:
        raise ValueError("key_in_prototype=False needs positive_keys [b, M, d] with M >= 1")
    with _full_precision(query.device):
        q, key, positive_keys = _unit(query, key, positive_keys)
        keys = torch.cat([key.unsqueeze(1), positive_keys], dim=1)
        candidates = keys if key_in_prototype else keys[:, 1:]
        pos_logit, alpha = _prototype_logit(q.unsqueeze(1), candidates, s.d_pos, s.temperature)
        world, rank = world_and_rank()
        valid = torch.ones(b, world * b, dtype=torch.bool, device=q.device)
        # The query's own key; a view, not index tensors, which would live on the host.
        valid[:, rank * b : (rank + 1) * b].fill_diagonal_(False)
        valid = _other_class(valid, labels, 1)
        loss, weights = _attention_nce(
            q, gather(keys[:, 0], False), pos_logit, alpha, valid, s, return_attention
        )
        loss = loss.mean() * (2 * s.temperature)
    return (loss, weights) if return_attention else loss


@torch.no_grad()
def attention_stats(weights: AttentionWeights) -> Dict[str, torch.Tensor]:
    """How much the attention weighs and where the gradient goes, as scalars (means over anchors):

    * ``eff_num_positives`` ``1 / sum alpha^2`` (P when uniform, 1 when one positive takes all),
      ``alpha_entropy`` (nats), ``num_positives`` P;
    * ``max_beta`` (1 + K * 1e-6 when d_neg -> inf, up to about K), ``eff_num_negatives``
      ``(sum beta)^2 / sum beta^2`` (K when uniform), ``num_negatives`` K;
    * ``push_ratio`` R, the push on the negatives over the pull on the positive: ``(tau /
      tau_neg) sum_j beta_j q_j / (1 - q_0)`` for ``logit`` (> 1 once the attention is active),
      ``tau / tau_neg`` for ``importance`` and plain InfoNCE; ``top1_push_share``, the largest
      single negative's share of the push.
    """
    alpha, beta = weights.alpha.float(), weights.beta.float()
    push, pull = weights.push.float(), weights.pull.float()
    eff_neg = beta.sum(dim=1).square() / (beta * beta).sum(dim=1).clamp_min(1e-30)
    total_push = push.sum(dim=1)
    return {
        "eff_num_positives": (1.0 / (alpha * alpha).sum(dim=1)).mean(),
        "alpha_entropy": -(alpha * alpha.clamp_min(1e-30).log()).sum(dim=1).mean(),
        "num_positives": alpha.new_tensor(float(alpha.shape[1])),
        "max_beta": beta.max() if beta.numel() else beta.new_zeros(()),
        "eff_num_negatives": eff_neg.mean(),
        "num_negatives": weights.valid.sum(dim=1).float().mean(),
        "push_ratio": (total_push / pull.clamp_min(1e-30)).mean(),
        "top1_push_share": (push.amax(dim=1) / total_push.clamp_min(1e-30)).mean(),
    }


@torch.no_grad()
def same_class_counts(
    beta: torch.Tensor, labels: torch.Tensor, candidate_labels: torch.Tensor
) -> torch.Tensor:
    """``[same, known]``: of the anchors whose class and whose highest-beta negative's class are
    known (>= 0, solo-learn's unlabeled images have -1), how many share it, and how many there
    are. Counts rather than a fraction, so that processes add them up."""
    hardest = candidate_labels[beta.argmax(dim=1)]
    known = (labels >= 0) & (hardest >= 0)
    return torch.stack([(known & (hardest == labels)).sum(), known.sum()]).float()
