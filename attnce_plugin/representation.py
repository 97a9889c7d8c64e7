"""Representation-health metrics from the theory contrastive learning rests on.

* alignment and uniformity of normalised embeddings (Wang & Isola, 2020): low alignment = positive
  pairs close together; low (more negative) uniformity = embeddings spread over the sphere;
* effective rank of the embedding covariance (Roy & Vetterli, 2007), which falls when the
  representation collapses onto a few dimensions;
* the InfoNCE mutual-information lower bound ``log(K + 1) - loss`` (Oord et al., 2018).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def alignment(x: torch.Tensor, y: torch.Tensor, alpha: float = 2.0) -> torch.Tensor:
    """Mean ``||f(x) - f(y)||^alpha`` over positive pairs of L2-normalised embeddings.

    Args:
        x: [n, d] embeddings of one view.
        y: [n, d] embeddings of the other view of the same n images.
        alpha: exponent (2 in the paper).

    Returns:
        Scalar in [0, 2^alpha]; lower is better aligned.
    """
    if x.shape != y.shape or x.dim() != 2:
        raise ValueError(f"x and y must both be [n, d], got {list(x.shape)} and {list(y.shape)}")
    x, y = F.normalize(x.float(), dim=1), F.normalize(y.float(), dim=1)
    return (x - y).norm(dim=1).pow(alpha).mean()


def uniformity(x: torch.Tensor, t: float = 2.0) -> torch.Tensor:
    """``log mean_{i<j} exp(-t ||f(x_i) - f(x_j)||^2)`` of L2-normalised embeddings.

    Args:
        x: [n, d] embeddings, n >= 2.
        t: kernel scale (2 in the paper).

    Returns:
        Scalar <= 0; lower (more negative) is more uniform.
    """
    if x.dim() != 2 or x.shape[0] < 2:
        raise ValueError(f"x must be [n, d] with n >= 2, got {list(x.shape)}")
    x = F.normalize(x.float(), dim=1)
    sq_dists = torch.pdist(x, p=2).pow(2)
    # log-mean-exp, stable for large t.
    return torch.logsumexp(-t * sq_dists, dim=0) - math.log(sq_dists.numel())


def covariance_spectrum(x: torch.Tensor) -> torch.Tensor:
    """Eigenvalues of the embedding covariance, largest first.

    Args:
        x: [n, d] embeddings (not normalised: collapse shows in the raw scale too).

    Returns:
        [d] non-negative eigenvalues, descending.
    """
    if x.dim() != 2 or x.shape[0] < 2:
        raise ValueError(f"x must be [n, d] with n >= 2, got {list(x.shape)}")
    x = x.double()
    centred = x - x.mean(dim=0, keepdim=True)
    cov = centred.T @ centred / (x.shape[0] - 1)
    return torch.linalg.eigvalsh(cov).clamp_min(0).flip(0)


def effective_rank(x: torch.Tensor) -> torch.Tensor:
    """``exp(entropy(p))`` with ``p`` the normalised covariance eigenvalues (Roy & Vetterli, 2007).

    Args:
        x: [n, d] embeddings.

    Returns:
        Scalar in [1, min(n - 1, d)]: d for isotropic embeddings, 1 for a collapse onto a line.
    """
    eig = covariance_spectrum(x)
    total = eig.sum()
    if total <= 0:
        return torch.ones((), dtype=torch.float64)
    p = eig / total
    p = p[p > 0]
    return torch.exp(-(p * p.log()).sum())


def infonce_mi_lower_bound(loss: float, num_negatives: int) -> float:
    """The contrastive mutual-information lower bound ``log(K + 1) - loss``.

    Args:
        loss: mean InfoNCE-style loss in nats (for the MoCo form, divide out its 2 * tau first).
        num_negatives: K, negatives per anchor.

    Returns:
        The bound in nats (can be negative early in training).
    """
    if num_negatives < 0:
        raise ValueError(f"num_negatives must be >= 0, got {num_negatives}")
    return math.log(num_negatives + 1) - float(loss)
