"""Gathering tensors across processes for the losses.

Kept here rather than imported from solo-learn so that the loss functions need only torch.
"""

from __future__ import annotations

from typing import Tuple

import torch
import torch.distributed as dist


def is_distributed() -> bool:
    """Whether a process group with more than one process is running."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def world_size() -> int:
    """Number of processes (1 outside distributed runs)."""
    return dist.get_world_size() if is_distributed() else 1


def rank() -> int:
    """This process's rank (0 outside distributed runs)."""
    return dist.get_rank() if is_distributed() else 0


class _AllGatherWithGrad(torch.autograd.Function):
    """all_gather whose backward sums the gradients of every process for this process's slice.

    The same pattern as solo-learn's ``GatherLayer`` (``solo/utils/misc.py``), which its SimCLR
    loss uses; written here so that the losses import with torch alone.

    With the per-process losses averaged by DDP afterwards, the parameter gradients equal those of
    one process computing the mean loss over the whole global batch.
    """

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


def gather_with_grad(x: torch.Tensor) -> torch.Tensor:
    """Concatenate ``x`` [n, ...] from all processes along dim 0, differentiably.

    Returns:
        [W*n, ...], rank-major; ``x`` itself when not distributed.
    """
    if not is_distributed():
        return x
    return torch.cat(_AllGatherWithGrad.apply(x), dim=0)


@torch.no_grad()
def gather_no_grad(x: torch.Tensor) -> torch.Tensor:
    """Concatenate ``x`` [n, ...] from all processes along dim 0, without gradient.

    Returns:
        [W*n, ...], rank-major; ``x`` itself when not distributed.
    """
    if not is_distributed():
        return x
    out = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(out, x.contiguous())
    return torch.cat(out, dim=0)
