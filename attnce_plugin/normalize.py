"""L2 normalisation in one autograd node.

``torch.nn.functional.normalize`` records a norm, a clamp, an expand and a division, and its
backward runs the backward of each in turn; on the [b, M, d] positive views that was the largest
M-dependent cost of the loss on the CPU (see ``docs/performance.md``). :func:`l2_normalize`
computes the same value and the same gradient in one node that saves the output and the norms and
runs six elementwise kernels in backward.
"""

from __future__ import annotations

from typing import Tuple

import torch

#: The norm's lower bound, as in ``F.normalize``'s default.
NORM_EPS = 1e-12


class _L2Normalize(torch.autograd.Function):
    """``y = x / max(||x||, eps)`` over the last dimension.

    Backward: where the norm exceeds eps, ``dx = (g - y <g, y>) / ||x||`` (the Jacobian of x/||x||);
    where it was clamped, the denominator is the constant eps and ``dx = g / eps``, as autograd
    through ``F.normalize`` gives.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True).clamp_min_(NORM_EPS)
        y = x / norm
        ctx.save_for_backward(y, norm)
        return y

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> Tuple[torch.Tensor]:  # type: ignore[override]
        y, norm = ctx.saved_tensors
        # norm > eps exactly where the clamp did not act; elsewhere the radial term is absent.
        radial = (grad * y).sum(dim=-1, keepdim=True).mul_(norm > NORM_EPS)
        return torch.addcmul(grad, y, radial, value=-1.0).div_(norm)


def l2_normalize(x: torch.Tensor) -> torch.Tensor:
    """Unit vectors along the last dimension, equal to ``F.normalize(x, dim=-1)`` in value and
    gradient (not twice differentiable).

    Args:
        x: [..., d] floating-point tensor.

    Returns:
        [..., d] ``x / max(||x||_2, 1e-12)``.
    """
    if not (x.requires_grad and torch.is_grad_enabled()):
        # No graph to record (e.g. MoCo's momentum keys): skip the autograd.Function's host cost.
        return x / torch.linalg.vector_norm(x, dim=-1, keepdim=True).clamp_min_(NORM_EPS)
    return _L2Normalize.apply(x)
