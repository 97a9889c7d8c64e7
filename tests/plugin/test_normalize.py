"""l2_normalize against a plain float64 x / max(||x||, eps) and against F.normalize."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnce_plugin.normalize import NORM_EPS, l2_normalize


def _reference(x: torch.Tensor) -> torch.Tensor:
    """The formula written out in float64, differentiated by autograd."""
    norm = x.double().pow(2).sum(dim=-1, keepdim=True).sqrt()
    return x.double() / torch.clamp(norm, min=NORM_EPS)


def _value_and_grad(fn, x: torch.Tensor, upstream: torch.Tensor):
    x = x.detach().clone().requires_grad_(True)
    y = fn(x)
    (grad,) = torch.autograd.grad((y.double() * upstream).sum(), x)
    return y.detach().double(), grad.double()


@pytest.mark.parametrize("shape", [(7, 16), (5, 3, 128), (2, 4, 3, 8), (1, 1)])
def test_value_and_gradient_match_float64_formula(shape):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=g) * 3.0
    upstream = torch.randn(*shape, generator=g, dtype=torch.float64)
    y, grad = _value_and_grad(l2_normalize, x, upstream)
    y_ref, grad_ref = _value_and_grad(_reference, x.double(), upstream)
    torch.testing.assert_close(y, y_ref, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(grad, grad_ref, rtol=1e-5, atol=1e-6)


def test_gradcheck_in_float64():
    x = torch.randn(4, 3, 6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(l2_normalize, (x,))


def test_zero_and_sub_eps_rows_match_f_normalize():
    # Rows at or below the clamp: the denominator is the constant eps, so dx = g / eps there,
    # exactly as autograd through F.normalize gives; the other rows use the full Jacobian.
    x = torch.randn(4, 8, dtype=torch.float64)
    x[0] = 0.0
    x[1] = 1e-14
    upstream = torch.randn(4, 8, dtype=torch.float64)
    y, grad = _value_and_grad(l2_normalize, x, upstream)
    y_ref, grad_ref = _value_and_grad(lambda t: F.normalize(t, dim=-1), x, upstream)
    torch.testing.assert_close(y, y_ref)
    torch.testing.assert_close(grad, grad_ref)
    assert torch.isfinite(grad).all()


def test_rows_are_unit_and_input_is_untouched():
    x = torch.randn(6, 32) * 100
    before = x.clone()
    y = l2_normalize(x)
    torch.testing.assert_close(y.norm(dim=-1), torch.ones(6))
    assert torch.equal(x, before)


def test_without_gradient_equals_f_normalize():
    x = torch.randn(5, 4, 16)
    x[0, 0] = 0.0
    torch.testing.assert_close(l2_normalize(x), F.normalize(x, dim=-1))
    with torch.no_grad():
        y = l2_normalize(x.clone().requires_grad_(True))
    assert not y.requires_grad
    torch.testing.assert_close(y, F.normalize(x, dim=-1))
