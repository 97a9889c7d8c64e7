"""prototype_attention (batched matmuls) against the op-by-op definition in float64."""

from __future__ import annotations

import pytest
import torch

from attnce_plugin.attention import positive_attention, prototype_attention


def _reference(a: torch.Tensor, p: torch.Tensor, d_pos: float, tau: float):
    """Loops over images and views, float64: s_vm = <a_v, p_m>, alpha = softmax(s / d_pos),
    logit = sum_m alpha_m s_m / tau with alpha held constant."""
    b, views, _ = a.shape
    logits, alphas = [], []
    for i in range(b):
        for v in range(views):
            s = torch.stack([a[i, v] @ p[i, m] for m in range(p.shape[1])])
            alpha = torch.softmax(s.detach() / d_pos, dim=0)
            logits.append((alpha * s).sum() / tau)
            alphas.append(alpha)
    return torch.stack(logits).view(b, views), torch.stack(alphas).view(b, views, -1)


@pytest.mark.parametrize("b,views,m,d", [(5, 2, 4, 16), (3, 1, 1, 8), (4, 3, 8, 32)])
@pytest.mark.parametrize("d_pos,tau", [(1.0, 0.5), (0.05, 0.1), (20.0, 1.0)])
def test_matches_float64_reference_in_value_and_gradient(b, views, m, d, d_pos, tau):
    g = torch.Generator().manual_seed(b * 100 + m)
    a = torch.nn.functional.normalize(torch.randn(b, views, d, generator=g), dim=-1)
    p = torch.nn.functional.normalize(torch.randn(b, m, d, generator=g), dim=-1)
    upstream = torch.randn(b, views, generator=g, dtype=torch.float64)

    a32, p32 = a.clone().requires_grad_(True), p.clone().requires_grad_(True)
    logit, alpha = prototype_attention(a32, p32, d_pos, tau)
    grads = torch.autograd.grad((logit.double() * upstream).sum(), (a32, p32))

    a64, p64 = a.double().requires_grad_(True), p.double().requires_grad_(True)
    logit_ref, alpha_ref = _reference(a64, p64, d_pos, tau)
    grads_ref = torch.autograd.grad((logit_ref * upstream).sum(), (a64, p64))

    assert logit.shape == (b, views) and alpha.shape == (b, views, m)
    assert not alpha.requires_grad
    torch.testing.assert_close(logit.double(), logit_ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(alpha.double(), alpha_ref.detach(), rtol=1e-5, atol=1e-6)
    for got, want in zip(grads, grads_ref):
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-5)


def test_alpha_is_positive_attention_of_the_similarities():
    a = torch.randn(3, 2, 8)
    p = torch.randn(3, 5, 8)
    _, alpha = prototype_attention(a, p, 0.7, 0.5)
    sims = torch.einsum("bvd,bmd->bvm", a, p)
    torch.testing.assert_close(alpha, positive_attention(sims, 0.7))


def test_positives_without_gradient():
    a = torch.randn(4, 2, 8, requires_grad=True)
    p = torch.randn(4, 3, 8)
    logit, _ = prototype_attention(a, p, 1.0, 0.5)
    (grad,) = torch.autograd.grad(logit.sum(), a)
    assert torch.isfinite(grad).all()
