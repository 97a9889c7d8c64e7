"""The two loss functions against the plain float64 reference in tests/helpers/reference.py."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import reference

from attnce_plugin.attention import attention_stats
from attnce_plugin.losses import (
    attentionnce_loss_func,
    attentionnce_loss_with_attention,
    attentionnce_mocov3_loss_func,
    attentionnce_mocov3_loss_with_attention,
)

# (b, M, d, tau, d_pos, d_neg), spanning the paper's settings and both extremes of the scales.
SETTINGS = [
    (4, 4, 8, 0.5, 1.0, 10.0),  # CIFAR recipe
    (6, 4, 16, 0.5, 2.0, 0.5),  # STL-10 recipe
    (5, 2, 8, 0.2, 4.0, 1.0),
    (3, 1, 4, 0.1, 0.3, 0.05),
    (8, 8, 32, 1.0, 0.1, 100.0),
]


def _inputs(b: int, m: int, d: int, views: int = 2, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    anchors = torch.randn(views * b, d, generator=g)
    positives = torch.randn(b, m, d, generator=g)
    # Pull each image's views together so the attention has something to discriminate.
    centre = torch.randn(b, d, generator=g)
    anchors += 2 * centre.repeat(views, 1)
    positives += 2 * centre.unsqueeze(1)
    indexes = torch.randperm(max(1000, 4 * b), generator=g)[:b]
    return anchors, positives, indexes


@pytest.mark.parametrize("b,m,d,tau,d_pos,d_neg", SETTINGS)
def test_simclr_form_matches_reference(b, m, d, tau, d_pos, d_neg):
    anchors, positives, indexes = _inputs(b, m, d)
    got = attentionnce_loss_func(anchors, positives, indexes, tau, d_pos, d_neg)
    want = reference.simclr_form(anchors, positives, indexes, tau, d_pos, d_neg)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("b,m,d,tau,d_pos,d_neg", SETTINGS)
def test_simclr_form_both_mask_paths_match_reference(b, m, d, tau, d_pos, d_neg, monkeypatch):
    """Index pairs (the CPU path above DENSE_MASK_MAX_ENTRIES) and the dense mask (the GPU path,
    and small batches everywhere), each forced on this CPU."""
    import attnce_plugin.attention as head

    anchors, positives, indexes = _inputs(b, m, d)
    want = reference.simclr_form(anchors, positives, indexes, tau, d_pos, d_neg)
    local = indexes.repeat(2)
    grads = {}
    for path, devices, max_entries in [("pairs", (), 0), ("dense", ("cpu", "cuda"), 0)]:
        monkeypatch.setattr(head, "DENSE_MASK_DEVICES", devices)
        monkeypatch.setattr(head, "DENSE_MASK_MAX_ENTRIES", max_entries)
        x = anchors.clone().requires_grad_(True)
        got, weights = attentionnce_loss_with_attention(x, positives, indexes, tau, d_pos, d_neg)
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5, msg=path)
        torch.testing.assert_close(weights.valid, local[:, None] != local[None, :], msg=path)
        got.backward()
        grads[path] = x.grad
    # Gradients: the same on both paths (checked against the formula elsewhere).
    torch.testing.assert_close(grads["dense"], grads["pairs"], rtol=1e-5, atol=1e-6)


def test_mask_path_follows_device_and_size(monkeypatch):
    import attnce_plugin.attention as head

    small, large = torch.arange(8), torch.arange(2 * head.DENSE_MASK_MAX_ENTRIES)
    assert isinstance(head.non_negatives(small, small)[0], torch.Tensor)
    assert isinstance(head.non_negatives(large[:8], large)[0], tuple)
    monkeypatch.setattr(head, "DENSE_MASK_DEVICES", ("cpu",))
    assert isinstance(head.non_negatives(large[:8], large)[0], torch.Tensor)


@pytest.mark.parametrize("views", [1, 3])
def test_simclr_form_other_view_counts(views):
    anchors, positives, indexes = _inputs(5, 3, 8, views=views)
    got = attentionnce_loss_func(anchors, positives, indexes, 0.5, 1.0, 2.0)
    want = reference.simclr_form(anchors, positives, indexes, 0.5, 1.0, 2.0)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("b,m,d,tau,d_pos,d_neg", SETTINGS)
def test_mocov3_form_matches_reference(b, m, d, tau, d_pos, d_neg):
    g = torch.Generator().manual_seed(1)
    query, key = torch.randn(b, d, generator=g), torch.randn(b, d, generator=g)
    pos_keys = torch.randn(b, m, d, generator=g) + key.unsqueeze(1)
    got = attentionnce_mocov3_loss_func(query, key, pos_keys, tau, d_pos, d_neg)
    want = reference.mocov3_form(query, key, pos_keys, tau, d_pos, d_neg)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("b,m,d,tau,d_pos,d_neg", SETTINGS)
def test_mocov3_form_without_the_partner_key_matches_reference(b, m, d, tau, d_pos, d_neg):
    """key_in_prototype=False: the prototype is over the positives' keys alone; the partner key is
    neither positive nor negative; the weights' alpha has M columns."""
    g = torch.Generator().manual_seed(2)
    query, key = torch.randn(b, d, generator=g), torch.randn(b, d, generator=g)
    pos_keys = torch.randn(b, m, d, generator=g) + key.unsqueeze(1)
    got = attentionnce_mocov3_loss_func(
        query, key, pos_keys, tau, d_pos, d_neg, key_in_prototype=False
    )
    want = reference.mocov3_form(query, key, pos_keys, tau, d_pos, d_neg, key_in_prototype=False)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    _, weights = attentionnce_mocov3_loss_with_attention(
        query, key, pos_keys, tau, d_pos, d_neg, key_in_prototype=False
    )
    assert weights.alpha.shape == (b, m)


def test_mocov3_form_without_the_partner_key_needs_positives():
    q, k = torch.randn(3, 4), torch.randn(3, 4)
    with pytest.raises(ValueError, match="key_in_prototype=False needs positive_keys"):
        attentionnce_mocov3_loss_func(q, k, None, key_in_prototype=False)
    with pytest.raises(TypeError, match="key_in_prototype must be True or False"):
        attentionnce_mocov3_loss_func(q, k, torch.randn(3, 2, 4), key_in_prototype="no")


def test_unnormalised_inputs_are_scale_free():
    anchors, positives, indexes = _inputs(4, 3, 8)
    base = attentionnce_loss_func(anchors, positives, indexes, 0.5, 1.0, 1.0)
    scaled = attentionnce_loss_func(anchors * 37.0, positives * 0.01, indexes, 0.5, 1.0, 1.0)
    torch.testing.assert_close(base, scaled)


# ----------------------------------------------------------------------------- limits


def test_d_neg_to_infinity_is_plain_infonce_negatives():
    anchors, positives, indexes = _inputs(6, 4, 16)
    got = attentionnce_loss_func(anchors, positives, indexes, 0.5, 1.0, 1e9)
    want = reference.simclr_form(anchors, positives, indexes, 0.5, 1.0, None)
    # beta = 1 + K * 1e-6 at the limit, hence the tolerance.
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)


def test_d_pos_to_infinity_is_mean_prototype():
    anchors, positives, indexes = _inputs(6, 4, 16)
    got = attentionnce_loss_func(anchors, positives, indexes, 0.5, 1e9, 3.0)
    want = reference.simclr_form(anchors, positives, indexes, 0.5, None, 3.0)
    torch.testing.assert_close(got.double(), want, rtol=1e-6, atol=1e-6)


def test_d_pos_to_zero_keeps_only_the_most_similar_positive():
    anchors, positives, indexes = _inputs(4, 4, 8)
    _, weights = attentionnce_loss_with_attention(anchors, positives, indexes, 0.5, 1e-6, 1.0)
    a = torch.nn.functional.normalize(anchors, dim=-1).view(2, 4, 8)
    p = torch.nn.functional.normalize(positives, dim=-1)
    best = torch.einsum("vbd,bmd->vbm", a, p).reshape(8, 4).argmax(dim=1)
    torch.testing.assert_close(weights.alpha, torch.nn.functional.one_hot(best, 4).float())


def test_single_positive_ignores_d_pos():
    anchors, positives, indexes = _inputs(5, 1, 8)
    losses = [
        attentionnce_loss_func(anchors, positives, indexes, 0.5, dp, 2.0) for dp in (1e-3, 1.0, 1e3)
    ]
    for loss in losses[1:]:
        torch.testing.assert_close(loss, losses[0])
    want = reference.simclr_form(anchors, positives, indexes, 0.5, None, 2.0)
    torch.testing.assert_close(losses[0].double(), want, rtol=1e-6, atol=1e-6)


def test_mocov3_form_reduces_to_solo_mocov3():
    from attnce_plugin.solo_compat import require_solo

    require_solo()
    from solo.losses.mocov3 import mocov3_loss_func

    g = torch.Generator().manual_seed(3)
    q1 = torch.randn(16, 32, generator=g, requires_grad=True)
    q2 = q1.detach().clone().requires_grad_(True)
    key = torch.randn(16, 32, generator=g)
    ours = attentionnce_mocov3_loss_func(q1, key, None, 0.2, 1.0, 1e12)
    theirs = mocov3_loss_func(q2, key, 0.2)
    ours.backward()
    theirs.backward()
    # beta = 1 + K * 1e-6 with K = 15: logits differ by at most 1.5e-5 / tau.
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(q1.grad, q2.grad, rtol=1e-3, atol=1e-5)


def test_mocov3_form_empty_positive_keys_equals_none():
    g = torch.Generator().manual_seed(4)
    query, key = torch.randn(6, 8, generator=g), torch.randn(6, 8, generator=g)
    a = attentionnce_mocov3_loss_func(query, key, None, 0.2, 1.0, 1.0)
    b = attentionnce_mocov3_loss_func(query, key, torch.empty(6, 0, 8), 0.2, 1.0, 1.0)
    torch.testing.assert_close(a, b)


# ----------------------------------------------------------------------------- gradients


@pytest.mark.parametrize("b,m,d,tau,d_pos,d_neg", SETTINGS[:3])
def test_simclr_form_gradients_hold_attention_constant(b, m, d, tau, d_pos, d_neg):
    anchors, positives, indexes = _inputs(b, m, d)
    a64 = anchors.double().requires_grad_(True)
    p64 = positives.double().requires_grad_(True)
    reference.simclr_form(a64, p64, indexes, tau, d_pos, d_neg).backward()

    a32 = anchors.clone().requires_grad_(True)
    p32 = positives.clone().requires_grad_(True)
    attentionnce_loss_func(a32, p32, indexes, tau, d_pos, d_neg).backward()
    torch.testing.assert_close(a32.grad.double(), a64.grad, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(p32.grad.double(), p64.grad, rtol=1e-4, atol=1e-6)


def test_mocov3_form_gradients_hold_attention_constant():
    g = torch.Generator().manual_seed(5)
    query = torch.randn(6, 16, generator=g)
    key = torch.randn(6, 16, generator=g)
    pos_keys = torch.randn(6, 3, 16, generator=g)
    q64 = query.double().requires_grad_(True)
    reference.mocov3_form(q64, key, pos_keys, 0.2, 2.0, 0.5).backward()
    q32 = query.clone().requires_grad_(True)
    attentionnce_mocov3_loss_func(q32, key, pos_keys, 0.2, 2.0, 0.5).backward()
    torch.testing.assert_close(q32.grad.double(), q64.grad, rtol=1e-4, atol=1e-6)


# ----------------------------------------------------------------------------- stability


def _exp_space_published(anchors, positives, indexes, tau, d_pos, d_neg, dtype):
    """The published computation order (exp of the logits, then log of the ratio) in ``dtype``."""
    with torch.no_grad():
        return reference.simclr_form(
            anchors.to(dtype), positives.to(dtype), indexes, tau, d_pos, d_neg
        )


def test_finite_where_exp_space_overflows():
    b, m, d = 64, 4, 16
    anchors, positives, indexes = _inputs(b, m, d)
    # A near-duplicate negative: with d_neg tiny its beta approaches K and exp(beta * n / tau)
    # is far beyond float64's range.
    anchors[1] = anchors[0] + 1e-3
    anchors = anchors.requires_grad_(True)
    positives = positives.requires_grad_(True)
    exp_space = reference.simclr_form(
        anchors.detach(), positives.detach(), indexes, 0.01, 1.0, 1e-4
    )
    assert not torch.isfinite(exp_space)
    loss = attentionnce_loss_func(anchors, positives, indexes, 0.01, 1.0, 1e-4)
    loss.backward()
    assert torch.isfinite(loss)
    assert torch.isfinite(anchors.grad).all() and torch.isfinite(positives.grad).all()


def test_finite_at_batch_4096_small_temperature_and_d_neg():
    anchors, positives, indexes = _inputs(4096, 2, 16, seed=7)
    anchors.requires_grad_(True)
    loss, weights = attentionnce_loss_with_attention(anchors, positives, indexes, 0.01, 1e-4, 1e-4)
    loss.backward()
    assert torch.isfinite(loss)
    assert torch.isfinite(anchors.grad).all()
    k = 2 * 4096 - 2
    assert float(weights.beta.max()) <= k * (1 + 1e-6) + 1e-3


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_half_precision_is_finite_and_close_to_fp32(dtype):
    torch.manual_seed(0)
    proj = torch.nn.Linear(32, 16)
    x = torch.randn(2 * 128, 32)
    xp = torch.randn(128, 4, 32)
    indexes = torch.arange(128)
    with torch.autocast("cpu", dtype=dtype):
        z, zp = proj(x), proj(xp)
        assert z.dtype == dtype  # the projections really are half precision
        loss = attentionnce_loss_func(z, zp, indexes, 0.05, 1.0, 0.01)
        mloss = attentionnce_mocov3_loss_func(z[:128], z[128:], zp, 0.05, 1.0, 0.01)
    (loss + mloss).backward()
    assert loss.dtype == torch.float32 and torch.isfinite(loss) and torch.isfinite(mloss)
    assert all(torch.isfinite(p.grad).all() for p in proj.parameters())
    ref = attentionnce_loss_func(z.float(), zp.float(), indexes, 0.05, 1.0, 0.01)
    torch.testing.assert_close(loss, ref)  # same half inputs: only the loss's arithmetic differs


def test_half_inputs_without_autocast():
    anchors, positives, indexes = _inputs(32, 4, 16)
    loss = attentionnce_loss_func(anchors.half(), positives.bfloat16(), indexes, 0.01, 1.0, 1e-4)
    assert torch.isfinite(loss)


def test_single_image_has_no_negatives_and_zero_loss():
    anchors, positives, indexes = _inputs(1, 3, 8)
    loss = attentionnce_loss_func(anchors, positives, indexes)
    assert torch.isfinite(loss) and float(loss) == 0.0


# ----------------------------------------------------------------------------- attention output


def test_attention_weights_and_stats():
    anchors, positives, indexes = _inputs(6, 4, 8)
    _, w = attentionnce_loss_with_attention(anchors, positives, indexes, 0.5, 1.0, 1.0)
    assert w.alpha.shape == (12, 4) and w.beta.shape == (12, 12) and w.valid.shape == (12, 12)
    torch.testing.assert_close(w.alpha.sum(1), torch.ones(12))
    # Each anchor has 2 * 6 - 2 negatives: itself and its partner view are excluded.
    assert (w.valid.sum(1) == 10).all()
    torch.testing.assert_close(w.beta.sum(1), torch.full((12,), 10 * (1 + 10 * 1e-6)))
    stats = attention_stats(w)
    assert 1.0 <= float(stats["eff_num_positives"]) <= 4.0
    assert 0.0 <= float(stats["alpha_entropy"]) <= math.log(4) + 1e-6
    assert float(stats["max_beta"]) >= 1.0
    assert 1.0 <= float(stats["eff_num_negatives"]) <= 10.0 + 1e-4
    _, flat = attentionnce_loss_with_attention(anchors, positives, indexes, 0.5, 1e9, 1e9)
    flat_stats = attention_stats(flat)
    assert float(flat_stats["eff_num_positives"]) == pytest.approx(4.0, rel=1e-6)
    assert float(flat_stats["alpha_entropy"]) == pytest.approx(math.log(4), rel=1e-6)
    assert float(flat_stats["eff_num_negatives"]) == pytest.approx(10.0, rel=1e-6)


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize("name", ["temperature", "d_pos", "d_neg"])
@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf"), "0.5", None, True])
def test_bad_scalars_are_refused_with_the_name(name, bad):
    anchors, positives, indexes = _inputs(4, 2, 8)
    kwargs = {"temperature": 0.5, "d_pos": 1.0, "d_neg": 1.0, name: bad}
    with pytest.raises(ValueError, match=name):
        attentionnce_loss_func(anchors, positives, indexes, **kwargs)
    with pytest.raises(ValueError, match=name):
        attentionnce_mocov3_loss_func(anchors[:4], anchors[4:], positives, **kwargs)


@pytest.mark.parametrize(
    "anchors_shape,positives_shape,indexes_shape,needle",
    [
        ((8, 8), (4, 2, 16), (4,), r"anchors must have shape \[V\*b, d\].*\[8, 8\]"),
        ((7, 8), (4, 2, 8), (4,), r"anchors must have V\*b rows.*\[7, 8\]"),
        ((8, 8), (4, 8), (4,), r"positives must have shape \[b, M, d\].*\[4, 8\]"),
        ((8, 8), (4, 2, 8), (8,), r"indexes must have shape \[b\].*\[8\]"),
        ((8, 8), (4, 0, 8), (4,), r"M >= 1"),
    ],
)
def test_simclr_form_shape_errors_show_shapes(
    anchors_shape, positives_shape, indexes_shape, needle
):
    with pytest.raises(ValueError, match=needle):
        attentionnce_loss_func(
            torch.randn(anchors_shape), torch.randn(positives_shape), torch.arange(indexes_shape[0])
        )


def test_mocov3_form_shape_errors_show_shapes():
    with pytest.raises(ValueError, match=r"key must have shape \[b, d\].*\[5, 8\]"):
        attentionnce_mocov3_loss_func(torch.randn(4, 8), torch.randn(5, 8), None)
    with pytest.raises(ValueError, match=r"positive_keys must have shape \[b, M, d\].*\[4, 2, 7\]"):
        attentionnce_mocov3_loss_func(torch.randn(4, 8), torch.randn(4, 8), torch.randn(4, 2, 7))


@pytest.mark.parametrize("form", ["pairs", "mask"])
def test_fused_node_equals_op_by_op_head(form):
    """The fused autograd node the losses use against the head's op-by-op definition, with the
    non-negatives given as index pairs (CPU path) or as a dense mask (GPU path)."""
    from helpers.op_by_op import attention_nce, negative_attention

    from attnce_plugin.attention import (
        fused_attention_nce,
        index_match_mask,
        index_match_pairs,
        valid_from_invalid,
    )

    g = torch.Generator().manual_seed(9)
    a = torch.nn.functional.normalize(torch.randn(12, 8, generator=g), dim=1)
    cand = torch.nn.functional.normalize(torch.randn(18, 8, generator=g), dim=1)
    local_idx = torch.tensor([0, 1, 2, 3, 4, 5] * 2)
    all_idx = torch.tensor([0, 1, 2, 3, 4, 5, 6, 7, 8] * 2)
    all_idx[-1] = 0  # a sample repeated on "another process"
    pos_logit = torch.randn(12, generator=g)
    if form == "pairs":
        rows, cols, num_valid = index_match_pairs(local_idx, all_idx)
        invalid = (rows, cols)
    else:
        invalid, num_valid = index_match_mask(local_idx, all_idx)
    valid = valid_from_invalid(invalid, 12, 18)
    torch.testing.assert_close(valid, local_idx[:, None] != all_idx[None, :])
    torch.testing.assert_close(num_valid, valid.sum(dim=1))

    a1, c1, p1 = (t.clone().requires_grad_(True) for t in (a, cand, pos_logit))
    fused, beta = fused_attention_nce(a1, c1, p1, invalid, num_valid, 0.1, 0.05, True)
    a2, c2, p2 = (t.clone().requires_grad_(True) for t in (a, cand, pos_logit))
    sim = a2 @ c2.T
    beta_ref = negative_attention(sim, valid, 0.05)
    plain = attention_nce(p2, sim, beta_ref, valid, 0.1)
    torch.testing.assert_close(fused, plain)
    torch.testing.assert_close(beta, beta_ref)
    fused.sum().backward()
    plain.sum().backward()
    # Logits reach K / tau = 170 here; fp32 rounding differs between the two orders of operations.
    for x, y in ((a1, a2), (c1, c2), (p1, p2)):
        torch.testing.assert_close(x.grad, y.grad, rtol=1e-4, atol=2e-4)


def test_fused_node_rows_without_negatives_next_to_rows_with_them():
    """Rows whose every candidate is a non-negative give loss 0, beta 0 and zero gradient, and
    leave the other rows equal to the op-by-op head (which handles them separately)."""
    from helpers.op_by_op import attention_nce, negative_attention

    from attnce_plugin.attention import fused_attention_nce

    g = torch.Generator().manual_seed(3)
    a = torch.nn.functional.normalize(torch.randn(5, 8, generator=g), dim=1)
    cand = torch.nn.functional.normalize(torch.randn(7, 8, generator=g), dim=1)
    pos_logit = torch.randn(5, generator=g)
    invalid = torch.zeros(5, 7, dtype=torch.bool)
    invalid[1] = True
    invalid[3] = True
    invalid[0, 2] = True
    valid = ~invalid

    a1, c1, p1 = (t.clone().requires_grad_(True) for t in (a, cand, pos_logit))
    fused, beta = fused_attention_nce(a1, c1, p1, invalid, valid.sum(dim=1), 0.2, 0.01, True)
    a2, c2, p2 = (t.clone().requires_grad_(True) for t in (a, cand, pos_logit))
    sim = a2 @ c2.T
    beta_ref = negative_attention(sim, valid, 0.01)
    plain = attention_nce(p2, sim, beta_ref, valid, 0.2)
    assert torch.isfinite(fused).all() and torch.isfinite(beta).all()
    assert fused[1] == 0 and fused[3] == 0 and (beta[[1, 3]] == 0).all()
    torch.testing.assert_close(fused, plain)
    torch.testing.assert_close(beta, beta_ref)
    fused.sum().backward()
    plain.sum().backward()
    for x, y in ((a1, a2), (c1, c2), (p1, p2)):
        assert torch.isfinite(x.grad).all()
        torch.testing.assert_close(x.grad, y.grad, rtol=1e-4, atol=2e-4)
    assert (a1.grad[[1, 3]] == 0).all() and (p1.grad[[1, 3]] == 0).all()
