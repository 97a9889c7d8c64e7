"""AttentionNCE, MoCo v3 form: a drop-in for solo-learn's ``mocov3_loss_func``."""

from __future__ import annotations

from functools import lru_cache
from typing import Optional, Tuple

import torch

from attnce_plugin.attention import (
    AttentionWeights,
    LossWithAttention,
    compute_dtype,
    fused_attention_nce,
    prototype_attention,
    valid_from_invalid,
)
from attnce_plugin.checks import check_positive_finite, check_shape
from attnce_plugin.distributed import gather_no_grad, rank
from attnce_plugin.normalize import l2_normalize


@lru_cache(maxsize=16)
def _own_key_pairs(
    b: int, total: int, offset: int, device: torch.device
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The entries that are not negatives, cached per shape and device: row i, column
    ``offset + i`` (the query's own key). Returns ``(rows [b], cols [b], num_valid [b])``."""
    rows = torch.arange(b, device=device)
    return rows, rows + offset, torch.full((b,), total - 1, dtype=torch.long, device=device)


def attentionnce_mocov3_loss_func(
    query: torch.Tensor,
    key: torch.Tensor,
    positive_keys: Optional[torch.Tensor] = None,
    temperature: float = 0.2,
    d_pos: float = 1.0,
    d_neg: float = 1.0,
    *,
    key_in_prototype: bool = True,
) -> torch.Tensor:
    """AttentionNCE with MoCo v3's queries and momentum keys (this project's design: the authors'
    public code has only the SimCLR form).

    The positive of query i is the attention prototype over the momentum keys of image i: ``key[i]``
    (the other anchor view, MoCo v3's positive) and ``positive_keys[i]``. The negatives are the
    other images' ``key`` rows, gathered from all processes without gradient, re-weighted by beta.
    The result is scaled by ``2 * temperature`` like ``solo.losses.mocov3.mocov3_loss_func``, to which
    it reduces (up to the 1e-6 inside beta) when ``positive_keys`` is None and d_neg is huge.

    Args:
        query: [b, d] online predictions for one anchor view.
        key: [b, d] momentum keys of the other anchor view.
        positive_keys: [b, M, d] momentum keys of the M positive views, or None (M = 0).
        temperature: tau > 0.
        d_pos: positive-attention scale > 0.
        d_neg: negative-attention scale > 0.
        key_in_prototype: whether ``key[i]`` is one of the prototype's candidates (the default,
            which makes ``positive_keys=None`` MoCo v3's loss); False: the prototype is over
            ``positive_keys`` alone (required then), and ``key[i]`` is still no negative of query i.

    Returns:
        Scalar loss, in fp32 for fp32/fp16/bf16 inputs (also under autocast) and in fp64 for fp64
        inputs.

    The matmuls (similarities, prototypes) follow ``torch.get_float32_matmul_precision()``, which
    this function leaves as it is: under ``"high"`` or ``"medium"`` on an Ampere/Hopper GPU they run
    in TF32 (a CPU emulation moved the loss by 5e-7 to 3e-5 relative; docs/reliability.md). Call
    ``torch.set_float32_matmul_precision("highest")`` for IEEE fp32 matmuls.
    """
    args = (query, key, positive_keys, temperature, d_pos, d_neg, key_in_prototype)
    return _mocov3_form(*args, False)[0]


def attentionnce_mocov3_loss_with_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    positive_keys: Optional[torch.Tensor] = None,
    temperature: float = 0.2,
    d_pos: float = 1.0,
    d_neg: float = 1.0,
    *,
    key_in_prototype: bool = True,
) -> LossWithAttention:
    """:func:`attentionnce_mocov3_loss_func` and the attention weights of the call, for logging.

    Returns:
        ``LossWithAttention(loss, attention)``: the same loss, and detached weights with alpha
        [b, M+1] (column 0 is ``key``; [b, M] without it when ``key_in_prototype`` is False) and
        beta [b, W*b].
    """
    args = (query, key, positive_keys, temperature, d_pos, d_neg, key_in_prototype)
    loss, weights = _mocov3_form(*args, True)
    assert weights is not None
    return LossWithAttention(loss, weights)


def _mocov3_form(
    query: torch.Tensor,
    key: torch.Tensor,
    positive_keys: Optional[torch.Tensor],
    temperature: float,
    d_pos: float,
    d_neg: float,
    key_in_prototype: bool,
    with_attention: bool,
) -> Tuple[torch.Tensor, Optional[AttentionWeights]]:
    """Both public functions: ``(loss, weights)``, weights None unless ``with_attention``."""
    if not isinstance(key_in_prototype, bool):
        raise TypeError(f"key_in_prototype must be True or False, got {key_in_prototype!r}")
    temperature = check_positive_finite("temperature", temperature)
    d_pos = check_positive_finite("d_pos", d_pos)
    d_neg = check_positive_finite("d_neg", d_neg)
    check_shape("query", query, (None, None), "[b, d]")
    b, dim = query.shape
    if b == 0:
        raise ValueError("query must hold at least one image, got shape [0, d]")
    check_shape("key", key, (b, dim), "[b, d]")
    if positive_keys is not None:
        check_shape("positive_keys", positive_keys, (b, None, dim), "[b, M, d]")
    if not key_in_prototype and (positive_keys is None or positive_keys.shape[1] == 0):
        raise ValueError(
            "key_in_prototype=False needs positive_keys [b, M, d] with M >= 1: the prototype is "
            "over the positives' keys alone"
        )

    dtype = compute_dtype(query, key, *([] if positive_keys is None else [positive_keys]))
    with torch.autocast(device_type=query.device.type, enabled=False):
        q = l2_normalize(query.to(dtype))
        candidates = key.to(dtype).unsqueeze(1)
        if positive_keys is not None and positive_keys.shape[1] > 0:
            candidates = torch.cat([candidates, positive_keys.to(dtype)], dim=1)
        # [b, M + 1, d]: all keys normalised in one call; column 0 is MoCo v3's own key.
        candidates = l2_normalize(candidates)
        k = candidates[:, 0]
        if not key_in_prototype:
            candidates = candidates[:, 1:]

        pos_logit, alpha = prototype_attention(q.unsqueeze(1), candidates, d_pos, temperature)
        pos_logit, alpha = pos_logit.squeeze(1), alpha.squeeze(1)

        all_keys = gather_no_grad(k)
        rows, cols, num_valid = _own_key_pairs(b, all_keys.shape[0], rank() * b, q.device)
        per_query, beta = fused_attention_nce(
            q, all_keys, pos_logit, (rows, cols), num_valid, temperature, d_neg, with_attention
        )
        loss = per_query.mean() * (2 * temperature)

    if not with_attention:
        return loss, None
    valid = valid_from_invalid((rows, cols), b, all_keys.shape[0])
    return loss, AttentionWeights(alpha=alpha, beta=beta, valid=valid)
