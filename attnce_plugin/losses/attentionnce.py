"""AttentionNCE, SimCLR form (the paper's setting)."""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from attnce_plugin.attention import (
    AttentionWeights,
    LossWithAttention,
    compute_dtype,
    fused_attention_nce,
    non_negatives,
    prototype_attention,
    valid_from_invalid,
)
from attnce_plugin.checks import check_positive_finite, check_shape
from attnce_plugin.distributed import gather_no_grad, gather_with_grad
from attnce_plugin.normalize import l2_normalize


def attentionnce_loss_func(
    anchors: torch.Tensor,
    positives: torch.Tensor,
    indexes: torch.Tensor,
    temperature: float = 0.5,
    d_pos: float = 1.0,
    d_neg: float = 1.0,
) -> torch.Tensor:
    """AttentionNCE loss of the local anchors against the gathered global batch.

    Each anchor is pulled towards the attention-weighted prototype of its image's M positive views
    and pushed from the anchor views of every other image in the global batch, whose logits are
    re-weighted by the negative attention beta. The other anchor view of the same image (and any
    copy of the same sample on another process) is neither positive nor negative.

    Args:
        anchors: [V*b, d] anchor projections of the b local images, view-major (view 0 of every
            image, then view 1, ...; V = 2 in the paper). Need not be normalised.
        positives: [b, M, d] projections of each image's M positive views. Need not be normalised.
        indexes: [b] dataset index of each local image; negatives are masked by index, so a
            sample repeated on two processes is never its own negative.
        temperature: tau > 0.
        d_pos: positive-attention scale > 0.
        d_neg: negative-attention scale > 0.

    Returns:
        Scalar mean loss over the V*b local anchors, in fp32 for fp32/fp16/bf16 inputs (also under
        autocast) and in fp64 for fp64 inputs.

    The matmuls (similarities, prototypes) follow ``torch.get_float32_matmul_precision()``, which
    this function leaves as it is: under ``"high"`` or ``"medium"`` on an Ampere/Hopper GPU they run
    in TF32 (a CPU emulation moved the loss by 5e-7 to 3e-5 relative; docs/reliability.md). Call
    ``torch.set_float32_matmul_precision("highest")`` for IEEE fp32 matmuls.

    Under DDP the anchors are gathered with gradient; with the per-process losses averaged as DDP
    averages gradients, W processes reproduce one process on the W*b images.
    """
    return _attentionnce(anchors, positives, indexes, temperature, d_pos, d_neg, False)[0]


def attentionnce_loss_with_attention(
    anchors: torch.Tensor,
    positives: torch.Tensor,
    indexes: torch.Tensor,
    temperature: float = 0.5,
    d_pos: float = 1.0,
    d_neg: float = 1.0,
) -> LossWithAttention:
    """:func:`attentionnce_loss_func` and the attention weights of the call, for logging.

    Returns:
        ``LossWithAttention(loss, attention)``: the same loss, and detached weights with alpha
        [V*b, M] and beta [V*b, W*V*b] (0 where ``valid`` is False).
    """
    loss, weights = _attentionnce(anchors, positives, indexes, temperature, d_pos, d_neg, True)
    assert weights is not None
    return LossWithAttention(loss, weights)


def _attentionnce(
    anchors: torch.Tensor,
    positives: torch.Tensor,
    indexes: torch.Tensor,
    temperature: float,
    d_pos: float,
    d_neg: float,
    with_attention: bool,
) -> Tuple[torch.Tensor, Optional[AttentionWeights]]:
    """Both public functions: ``(loss, weights)``, weights None unless ``with_attention``."""
    temperature = check_positive_finite("temperature", temperature)
    d_pos = check_positive_finite("d_pos", d_pos)
    d_neg = check_positive_finite("d_neg", d_neg)
    check_shape("positives", positives, (None, None, None), "[b, M, d]")
    b, num_pos, dim = positives.shape
    if b == 0 or num_pos == 0:
        raise ValueError(
            f"positives must have b >= 1 images and M >= 1 views, got {list(positives.shape)}"
        )
    check_shape("indexes", indexes, (b,), "[b]")
    check_shape("anchors", anchors, (None, dim), "[V*b, d]")
    if anchors.shape[0] == 0 or anchors.shape[0] % b:
        raise ValueError(
            f"anchors must have V*b rows (b = {b} images from positives {list(positives.shape)}), "
            f"got {list(anchors.shape)}"
        )
    num_views = anchors.shape[0] // b

    dtype = compute_dtype(anchors, positives)
    # The logits reach K / tau; half precision would overflow or lose them, so work in fp32 (or
    # the inputs' fp64).
    with torch.autocast(device_type=anchors.device.type, enabled=False):
        # Anchors and positives normalised in one call (one cat) rather than two; split, not
        # slicing, so that backward joins the two gradients in one kernel.
        unit = l2_normalize(torch.cat([anchors.to(dtype), positives.to(dtype).reshape(-1, dim)]))
        a, p = unit.split([anchors.shape[0], b * num_pos])
        p = p.view(b, num_pos, dim)
        # [b, V, d] view of the view-major anchors: each image's anchors next to its positives.
        pos_logit, alpha = prototype_attention(
            a.view(num_views, b, dim).transpose(0, 1), p, d_pos, temperature
        )
        pos_logit = pos_logit.T.reshape(-1)

        local_idx = indexes.repeat(num_views)
        all_idx = gather_no_grad(local_idx)
        all_anchors = gather_with_grad(a)
        # Masks by index: a dense [n, N] mask on GPU (no host sync) and for small batches,
        # (row, col) pairs of same-image entries otherwise (no [n, N] comparison).
        invalid, num_valid = non_negatives(local_idx, all_idx)
        per_anchor, beta = fused_attention_nce(
            a, all_anchors, pos_logit, invalid, num_valid, temperature, d_neg, with_attention
        )
        loss = per_anchor.mean()

    if not with_attention:
        return loss, None
    valid = valid_from_invalid(invalid, a.shape[0], all_idx.shape[0])
    alpha = alpha.transpose(0, 1).reshape(-1, num_pos)
    return loss, AttentionWeights(alpha=alpha, beta=beta, valid=valid)
