"""attnce_plugin/losses.py against independent references: the float64 formula of
tests/helpers/reference.py (values and gradients), solo-learn's MoCo v3 loss, hand-computed
limits, and one process on the whole batch for W gloo processes. Needs solo-learn for the MoCo v3
comparison; FAILS there, never skips, without it."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from helpers import reference
from torch.testing import assert_close
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from attnce_plugin import losses
from attnce_plugin.losses import attentionnce_loss_func, attentionnce_mocov3_loss_func

WEIGHTINGS = ("logit", "importance")

# (b, M, views, tau, d_pos, d_neg): the paper's recipes and both ends of the scales.
SETTINGS = [
    (4, 4, 2, 0.5, 1.0, 10.0),  # CIFAR
    (6, 4, 2, 0.5, 2.0, 0.5),  # STL-10
    (5, 2, 1, 0.2, 4.0, 1.0),
    (3, 1, 2, 0.1, 0.05, 0.05),
    (7, 3, 1, 1.0, 1e6, 1e6),
    (8, 8, 2, 0.07, 0.3, 100.0),
]


def _inputs(b, m, views=2, d=8, seed=0, device="cpu"):
    """float64 anchors [V*b, d] (view-major), positives [b, M, d], indexes [b]; each image's views
    pulled together so that the attention has something to weigh."""
    g = torch.Generator().manual_seed(seed)
    centre = 2 * torch.randn(b, d, generator=g, dtype=torch.float64)
    anchors = torch.randn(views * b, d, generator=g, dtype=torch.float64) + centre.repeat(views, 1)
    positives = torch.randn(b, m, d, generator=g, dtype=torch.float64) + centre.unsqueeze(1)
    indexes = torch.randperm(1000, generator=g)[:b]
    return [t.to(device).requires_grad_() for t in (anchors, positives)] + [indexes.to(device)]


def _value_and_grads(loss, *tensors):
    return loss.detach().cpu(), [g.cpu() for g in torch.autograd.grad(loss, tensors)]


def _forms_match_reference(
    b, m, views, scales, weighting, device, kip=True, labels=None, tau_neg=None
):
    """Both forms' values and gradients against the reference's on float64 CPU copies; the MoCo
    form's query and key are the views of 2-view inputs. Returns the MoCo form's loss."""
    lab = None if labels is None else torch.tensor(labels)
    options = dict(neg_temperature=tau_neg, labels=None if lab is None else lab.to(device))
    row = dict(labels=lab, neg_weighting=weighting, tau_neg=tau_neg)
    a, p, idx = _inputs(b, m, views, device=device)
    a_p = [t.detach().cpu().requires_grad_() for t in (a, p)]
    got = attentionnce_loss_func(a, p, idx, *scales, weighting, **options)
    want = reference.simclr_form(*a_p, idx.cpu(), *scales, **row)
    qk, pk, _ = _inputs(b, m, 2, device=device)
    q, k = qk[:b], qk[b:].detach()
    q_pk = [t.detach().cpu().requires_grad_() for t in (q, pk)]
    mgot = attentionnce_mocov3_loss_func(
        q, k, pk, *scales, weighting, key_in_prototype=kip, **options
    )
    mwant = reference.mocov3_form(q_pk[0], k.cpu(), q_pk[1], *scales, kip, **row)
    for ours, theirs in (((got, a, p), (want, *a_p)), ((mgot, q, pk), (mwant, *q_pk))):
        ours = _value_and_grads(*ours)
        assert ours[0].dtype == torch.float64  # fp64 inputs compute in fp64
        assert_close(ours, _value_and_grads(*theirs), rtol=1e-9, atol=1e-10)
    return mgot.detach()


@pytest.mark.gpu
@pytest.mark.parametrize("b,m,views,tau,d_pos,d_neg", SETTINGS)
@pytest.mark.parametrize("key_in_prototype", [True, False])
@pytest.mark.parametrize("weighting", WEIGHTINGS)
def test_both_forms_match_reference(
    b, m, views, tau, d_pos, d_neg, key_in_prototype, weighting, device
):
    _forms_match_reference(b, m, views, (tau, d_pos, d_neg), weighting, device, key_in_prototype)


@pytest.mark.gpu
@pytest.mark.parametrize("tau_neg", [None, 0.15, 0.6])
@pytest.mark.parametrize("labels", [None, [0, 1, 0, 2, 1, 0], [3, 3, 3, 3, 3, 3]])
@pytest.mark.parametrize("weighting", WEIGHTINGS)
def test_neg_temperature_and_the_same_class_oracle_match_reference(
    tau_neg, labels, weighting, device
):
    """tau_neg divides the negatives' similarities, the positive keeps tau; labels drop every
    same-class candidate from the negatives (one class alone: no negatives, loss 0)."""
    moco = _forms_match_reference(
        6, 3, 2, (0.2, 1.0, 0.5), weighting, device, True, labels, tau_neg
    )
    if labels and len(set(labels)) == 1:
        assert float(moco) == 0.0


@pytest.mark.parametrize("tau,d_neg", [(0.5, 0.5), (0.2, 1.0), (0.2, 0.3), (0.1, 10.0)])
def test_importance_form_is_hcl_with_concentration_tau_over_d_neg(tau, d_neg):
    """HCL (tau+ = 0, b = tau / d_neg) normalises its weights by their mean exactly; ours adds
    the published 1e-6 to the softmax: the values agree to that term. HCL differentiates through
    its weights, so the gradients are the importance formula's (test above), not HCL's."""
    a, p, idx = _inputs(6, 3, 2, seed=4)
    got = attentionnce_loss_func(a, p, idx, tau, 1e12, d_neg, "importance")
    an, pn, r, b = F.normalize(a, dim=1), F.normalize(p, dim=2), idx.repeat(2), tau / d_neg
    want = [reference.hcl_row_loss(an[i], pn[i % 6], an[r != r[i]], tau, b) for i in range(12)]
    assert_close(got, torch.stack(want).mean(), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("tau_neg", [None, 0.15])
@pytest.mark.parametrize("d_neg", [0.3, 1.0, 1e9])
@pytest.mark.parametrize("weighting", WEIGHTINGS)
def test_push_ratio_and_top1_share_follow_autograd(d_neg, weighting, tau_neg):
    """Per anchor, from autograd on the float64 reference, the push is tau dL/dn_j of each negative
    and the pull -tau sum_m dL/ds_m over the positives (the anchor is a unit vector, so a derivative
    in a candidate's cosine is the gradient in that candidate's vector projected on the anchor).
    Balanced forms push exactly tau / tau_neg times their pull."""
    a, p, idx = _inputs(5, 3, 2, seed=6)
    w = attentionnce_loss_func(
        a, p, idx, 0.2, 1.0, d_neg, weighting, neg_temperature=tau_neg, return_attention=True
    )[1]
    stats = losses.attention_stats(w)
    an, pn, rows = F.normalize(a.detach(), dim=1), F.normalize(p.detach(), dim=2), idx.repeat(2)
    out = []
    for i in range(len(an)):
        pos, neg = pn[i % 5].clone().requires_grad_(), an[rows != rows[i]].clone().requires_grad_()
        row = dict(neg_weighting=weighting, tau_neg=tau_neg)
        loss = reference._row_loss(an[i], pos, neg, 0.2, 1.0, d_neg, **row)
        g_pos, g_neg = torch.autograd.grad(loss, (pos, neg))
        out.append((0.2 * (g_neg @ an[i]), -0.2 * (g_pos @ an[i]).sum()))
    ratio = torch.stack([push.sum() / pull for push, pull in out]).mean()
    share = torch.stack([push.max() / push.sum() for push, _ in out]).mean()
    assert_close(stats["push_ratio"].double(), ratio, rtol=1e-5, atol=1e-6)
    assert_close(stats["top1_push_share"].double(), share, rtol=1e-5, atol=1e-6)
    uniform = 0.2 / (tau_neg or 0.2)
    if weighting == "importance" or d_neg > 1e6:  # balanced, but for tau / tau_neg
        assert float(ratio) == pytest.approx(uniform, rel=1e-5)  # beta: 1 + K * 1e-6
    else:  # the paper's form pushes the negatives harder still
        assert float(ratio) > 1.01 * uniform


def test_mocov3_form_without_positive_keys_is_solo_learns_mocov3():
    from solo.losses.mocov3 import mocov3_loss_func  # ImportError: a failure, not a skip

    a, _, _ = _inputs(16, 1, 2, d=32, seed=3)
    q, k = a[:16], a[16:].detach()
    ours = attentionnce_mocov3_loss_func
    for tau in (0.2, 1.0):
        got = _value_and_grads(ours(q, k, None, tau, 1.0, 1e9), q)
        want = _value_and_grads(mocov3_loss_func(q, k, tau), q)
        # beta = 1 + K * 1e-6 (K = 15), not 1: the logits differ by 1.5e-5 relative.
        assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert_close(ours(q, k, torch.zeros(16, 0, 32, dtype=torch.float64), 0.2), ours(q, k, None))


@pytest.mark.parametrize("weighting", WEIGHTINGS)
def test_limits_of_the_scales(weighting):
    """d_pos, d_neg -> inf: InfoNCE with the mean prototype (alpha = 1/M; beta = 1 + K * 1e-6, not
    1); d_pos -> 0: only the most similar positive counts; M = 1: d_pos has nothing to weigh."""
    a, p, idx = _inputs(6, 4, 2, seed=8)
    want = reference.simclr_form(a, p, idx, 0.3, None, None)
    got = attentionnce_loss_func(a, p, idx, 0.3, 1e12, 1e12, weighting)
    assert_close(got, want, rtol=1e-4, atol=1e-6)
    a, p, idx = _inputs(5, 4, 2)
    a1 = a[:5]  # one anchor view
    sims = torch.einsum("bd,bmd->bm", F.normalize(a1, dim=1), F.normalize(p, dim=2))
    best = p[torch.arange(5), sims.argmax(1)].unsqueeze(1)
    got = attentionnce_loss_func(a1, p, idx, 0.5, 1e-6, 2.0, weighting)
    assert_close(got, attentionnce_loss_func(a1, best, idx, 0.5, 1.0, 2.0, weighting))
    one = p[:, :1]
    want = reference.simclr_form(a, one, idx, 0.5, None, 2.0, neg_weighting=weighting)
    for d_pos in (0.05, 1.0, 1e6):
        assert_close(attentionnce_loss_func(a, one, idx, 0.5, d_pos, 2.0, weighting), want)


def test_finite_and_exact_where_exp_space_overflows():
    """tau 0.01, d_neg 0.01, K = 510: near-duplicate negatives push beta * n / tau far past
    float64's exp range; the log-space loss still equals the formula."""
    a, p, idx = _inputs(256, 2, 2, d=4, seed=1)
    args = (idx, 0.01, 1.0, 0.01)
    with torch.no_grad():
        a[1], a[2] = a[0] + 1e-3, a[0] + 2e-3
        assert not torch.isfinite(reference.simclr_form(a, p, *args))  # the published exp space
    got = _value_and_grads(attentionnce_loss_func(a, p, *args), a, p)
    want = _value_and_grads(reference.simclr_form(a, p, *args, log_space=True), a, p)
    assert torch.isfinite(got[0]) and all(torch.isfinite(g).all() for g in got[1])
    assert_close(got, want, rtol=1e-7, atol=1e-9)
    # In fp32, either form: finite, and close to its fp64 formula.
    a32, p32 = a.detach().float().requires_grad_(), p.detach().float().requires_grad_()
    for weighting in WEIGHTINGS:
        got = _value_and_grads(attentionnce_loss_func(a32, p32, *args, weighting), a32, p32)
        want = reference.simclr_form(a, p, *args, log_space=True, neg_weighting=weighting)
        assert got[0].dtype == torch.float32 and all(torch.isfinite(g).all() for g in got[1])
        assert_close(got[0].double(), want.detach(), rtol=1e-4, atol=1e-3)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_autocast_is_finite_fp32_and_close(dtype, device):
    torch.manual_seed(0)
    proj = torch.nn.Linear(32, 16).to(device)
    x, xp, idx = torch.randn(256, 32), torch.randn(128, 4, 32), torch.arange(128)
    x, xp, idx = x.to(device), xp.to(device), idx.to(device)
    with torch.autocast(device.type, dtype=dtype):
        z, zp = proj(x), proj(xp)
        assert z.dtype == dtype
        loss = attentionnce_loss_func(z, zp, idx, 0.01, 1.0, 0.01)
        mloss = attentionnce_mocov3_loss_func(z[:128], z[128:], zp, 0.01, 1.0, 0.01)
    assert loss.dtype == mloss.dtype == torch.float32
    (loss + mloss).backward()
    assert torch.isfinite(loss) and torch.isfinite(mloss)
    assert all(torch.isfinite(q.grad).all() for q in proj.parameters())
    z, zp = z.detach().cpu(), zp.detach().cpu()
    want = reference.simclr_form(z, zp, idx.cpu(), 0.01, 1.0, 0.01, log_space=True)
    assert_close(loss.detach().cpu().double(), want, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("views", [1, 2])
def test_one_image_has_zero_loss_and_zero_gradients(views):
    a, p, idx = _inputs(1, 3, views)
    loss = attentionnce_loss_func(a, p, idx, 0.1, 1.0, 0.05)
    q, k = a[:1], a[-1:].detach()
    mloss = attentionnce_mocov3_loss_func(q, k, p, 0.1, 1.0, 0.05)
    for value, tensors in ((loss, (a, p)), (mloss, (q, p))):
        assert float(value.detach()) == 0.0
        for g in torch.autograd.grad(value, tensors):
            assert torch.equal(g, torch.zeros_like(g))


def test_attention_weights_follow_the_formula():
    a, p, idx = _inputs(4, 3, 2, seed=5)
    tau, d_pos, d_neg = 0.5, 0.7, 0.3
    # Image 2 is image 0 again (a padding sampler): their rows have 8 - 4 = 4 negatives, others 6.
    idx = torch.tensor([1, 2, 1, 3])
    loss, w = attentionnce_loss_func(a, p, idx, tau, d_pos, d_neg, return_attention=True)
    assert_close(loss, reference.simclr_form(a, p, idx, tau, d_pos, d_neg))
    an, pn = F.normalize(a.detach(), dim=1), F.normalize(p.detach(), dim=2)
    rows = idx.repeat(2)  # neither the repeated sample nor the other view is a negative
    assert torch.equal(w.valid, rows[:, None] != rows[None, :])
    assert w.valid[0].tolist() == [False, True, False, True] * 2
    for i in range(8):
        s = pn[i % 4] @ an[i]
        assert_close(w.alpha[i], torch.exp(s / d_pos) / torch.exp(s / d_pos).sum())
        negs = rows != rows[i]
        n, k = an[negs] @ an[i], int(negs.sum())
        beta = (torch.exp(n / d_neg) / torch.exp(n / d_neg).sum() + reference.BETA_EPS) * k
        assert_close(w.beta[i, negs], beta)
        assert torch.equal(w.beta[i, ~negs], torch.zeros(8 - k, dtype=torch.float64))
    # MoCo form: column 0 of alpha is the key; the query's own key is no negative.
    q, key = a[:4].detach(), a[4:].detach()
    _, mw = attentionnce_mocov3_loss_func(q, key, p, tau, d_pos, d_neg, return_attention=True)
    assert mw.alpha.shape == (4, 4) and torch.equal(mw.valid, ~torch.eye(4, dtype=torch.bool))
    assert_close(mw.beta.sum(1), torch.full((4,), 3 * (1 + 3 * reference.BETA_EPS)).double())


def test_attention_stats_by_hand():
    weights = losses.AttentionWeights(
        alpha=torch.tensor([[0.5, 0.5], [1.0, 0.0]]),
        beta=torch.tensor([[1.0, 1.0, 0.0], [2.0, 0.0, 0.0]]),
        valid=torch.tensor([[True, True, False], [True, False, False]]),
        push=torch.tensor([[0.2, 0.6, 0.0], [0.5, 0.0, 0.0]]),
        pull=torch.tensor([0.4, 0.5]),
    )
    labels = torch.tensor([0, 0, 1])  # each anchor's hardest negative has class 0
    stats = {k: float(v) for k, v in losses.attention_stats(weights).items()}
    assert stats["eff_num_positives"] == pytest.approx((2 + 1) / 2)
    assert stats["alpha_entropy"] == pytest.approx(math.log(2) / 2)
    assert stats["max_beta"] == 2.0
    assert stats["eff_num_negatives"] == pytest.approx((4 / 2 + 4 / 4) / 2)
    assert (stats["num_positives"], stats["num_negatives"]) == (2.0, 1.5)
    assert stats["push_ratio"] == pytest.approx((0.8 / 0.4 + 0.5 / 0.5) / 2)
    assert stats["top1_push_share"] == pytest.approx((0.75 + 1.0) / 2)
    # anchor 0's class, not anchor 1's; unknown classes (-1) are not counted
    assert losses.same_class_counts(weights.beta, labels[1:], labels).tolist() == [1.0, 2.0]
    assert losses.same_class_counts(weights.beta, labels[1:] - 1, labels).tolist() == [1.0, 1.0]
    assert losses.same_class_counts(weights.beta, labels[1:], labels - 1).tolist() == [0.0, 0.0]


def test_bad_arguments_are_refused_naming_them_and_what_they_allow():
    a, p, idx = _inputs(3, 2)
    simclr, moco = attentionnce_loss_func, attentionnce_mocov3_loss_func  # both check alike
    cases = [
        (lambda: simclr(a, p, idx, temperature=0.0), "temperature.*finite number > 0"),
        (lambda: moco(a[:3], a[3:], p, d_pos=float("nan")), "d_pos.*finite number > 0"),
        (lambda: simclr(a, p, idx, d_neg="0.5"), "d_neg.*finite number > 0"),
        (lambda: moco(a[:3], a[3:], p, d_neg=True), "d_neg.*finite number > 0"),
        (lambda: simclr(a, p, idx, neg_weighting="hcl"), "neg_weighting.*logit.*importance"),
        (lambda: moco(a[:3], a[3:], p, neg_temperature=0), "neg_temperature.*finite number > 0"),
        (lambda: simclr(a, p, idx, labels=idx[:2]), "labels"),
        (lambda: moco(a[:3], a[3:], p, labels=idx[:2]), "labels"),
        (lambda: simclr(a, p[0], idx), "positives"),
        (lambda: simclr(a, p[:, :0], idx), "positives"),
        (lambda: simclr(a, p, idx[:2]), "indexes"),
        (lambda: simclr(a[:5], p, idx), "anchors"),
        (lambda: simclr(a[:, :4], p, idx), "anchors"),
        (lambda: moco(a[:3], a[:2], p), "query and key"),
        (lambda: moco(a[:3], a[3:], p[:2]), "positive_keys"),
        (lambda: moco(a[:3], a[3:], None, key_in_prototype=False), "key_in_prototype"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()


class _HostIndexes(TorchDispatchMode):
    """Records each op that mixes a CPU tensor of one or more dimensions (an index, a mask) with
    a tensor elsewhere: on a GPU that op copies it over and waits for the copy."""

    def __init__(self) -> None:
        super().__init__()
        self.mixed: list = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        tensors = [t for t in tree_leaves((args, kwargs or {})) if isinstance(t, torch.Tensor)]
        devices = {t.device.type for t in tensors if t.dim() > 0}
        if "cpu" in devices and len(devices) > 1:
            self.mixed.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("return_attention", [False, True])
def test_no_op_mixes_a_host_index_with_a_device_tensor(return_attention):
    """Both forms on ``meta`` tensors (a device without data), forward and backward, with every
    option: each op's index and mask tensors live on the inputs' device."""
    a, p, idx = (t.detach().to("meta") for t in _inputs(4, 3, 2))
    a, p, labels = a.requires_grad_(), p.requires_grad_(), idx % 2
    options = dict(neg_temperature=0.1, labels=labels, return_attention=return_attention)
    with _HostIndexes() as check:
        for weighting in WEIGHTINGS:
            out = attentionnce_loss_func(a, p, idx, 0.2, 1.0, 0.5, weighting, **options)
            out = out[0] if return_attention else out
            out.backward()
            out = attentionnce_mocov3_loss_func(a[:4], a[4:], p, 0.2, 1.0, 0.5, **options)
            (out[0] if return_attention else out).backward()
    assert check.mixed == []


# ------------------------------------------------------------------------------------ DDP

B_LOCAL = 3


def _global(world):
    """The whole batch: sample 0 repeats on the last rank, as a padding DistributedSampler does."""
    a, p, idx = _inputs(world * B_LOCAL, 3, 2, seed=world)
    idx[-1] = idx[0]
    return a.detach(), p.detach(), idx


def _slices(rank, world, a, p, idx):
    sl = slice(rank * B_LOCAL, (rank + 1) * B_LOCAL)
    return a.view(2, world * B_LOCAL, -1)[:, sl].reshape(2 * B_LOCAL, -1), p[sl], idx[sl]


def _all(a, p, idx):
    """Both forms' losses and gradients (MoCo's query and key: the two views), without labels, then
    with the same-class oracle (classes from the dataset index)."""
    out = []
    for labels in (None, idx % 3):
        q, k = a[: len(idx)].clone().requires_grad_(), a[len(idx) :]
        ac, pc = a.clone().requires_grad_(), p.clone().requires_grad_()
        loss = attentionnce_loss_func(ac, pc, idx, 0.2, 2.0, 0.3, labels=labels)
        mloss = attentionnce_mocov3_loss_func(q, k, p, 0.2, 2.0, 0.3, labels=labels)
        grads = torch.autograd.grad(loss, (ac, pc)) + torch.autograd.grad(mloss, q)
        out += [loss.detach(), mloss.detach(), *grads]
    return out


def _worker(rank, world, store, out, device):
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        result = _all(*(t.to(device) for t in _slices(rank, world, *_global(world))))
        torch.save([t.cpu() for t in result], os.path.join(out, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.gpu
@pytest.mark.parametrize("world", [2, 3])
def test_processes_equal_one_process_on_the_whole_batch(world, tmp_path, device, monkeypatch):
    """DDP averages gradients, so rank r's gradient / W is the one-process gradient of its slice;
    the mean of the per-process losses is the one-process loss."""
    monkeypatch.syspath_prepend(str(Path(__file__).parents[2]))  # spawn imports tests.plugin.*
    mp.spawn(_worker, (world, str(tmp_path / "store"), str(tmp_path), str(device)), nprocs=world)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(world)]
    whole = _all(*_global(world))
    for part in (0, 5):  # without labels, with the oracle
        loss, mloss, ga, gp, gq = whole[part : part + 5]
        assert_close(torch.stack([r[part] for r in ranks]).mean(), loss)
        assert_close(torch.stack([r[part + 1] for r in ranks]).mean(), mloss)
        for rank, result in enumerate(ranks):
            # the one-process gradients, cut as the ranks hold their tensors
            grads = tuple(g / world for g in result[part + 2 : part + 5])
            assert_close(grads, _slices(rank, world, ga, gp, gq))
