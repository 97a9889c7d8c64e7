"""W gloo processes on the CPU give the loss and gradients of one process on the whole batch.

DDP averages gradients over processes, so with per-process mean losses the reference for rank r's
tensors is ``grad_r / W == d(one-process loss) / d(rank r's slice)``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from attnce_plugin.losses import attentionnce_loss_func, attentionnce_mocov3_loss_func

B_LOCAL, M, D, VIEWS = 4, 3, 8, 2
TAU, D_POS, D_NEG = 0.5, 2.0, 0.5


# integration: spawns processes; gpu: on the `--device` (tests/conftest.py), both ranks on GPU 0
# with gloo and CUDA tensors (NCCL refuses two ranks on one device)
pytestmark = [pytest.mark.integration, pytest.mark.gpu]


def _global_batch(world: int, repeat: bool):
    g = torch.Generator().manual_seed(11)
    n = world * B_LOCAL
    views = torch.randn(VIEWS, n, D, generator=g)
    positives = torch.randn(n, M, D, generator=g)
    indexes = torch.arange(100, 100 + n)
    if repeat:
        # As a padding DistributedSampler does: the last images of the last rank repeat the first
        # samples of rank 0 (same dataset index, different augmentations).
        indexes[-2:] = indexes[:2]
    return views, positives, indexes


def _local(rank: int, views, positives, indexes):
    sl = slice(rank * B_LOCAL, (rank + 1) * B_LOCAL)
    anchors = views[:, sl].reshape(VIEWS * B_LOCAL, D)  # view-major, as solo's torch.cat(out["z"])
    return anchors, positives[sl], indexes[sl]


def _worker(rank: int, world: int, store: str, out_dir: str, repeat: bool, device: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        views, positives, indexes = _global_batch(world, repeat)
        anchors, pos, idx = (t.to(device) for t in _local(rank, views, positives, indexes))
        anchors.requires_grad_(True)
        pos.requires_grad_(True)
        loss = attentionnce_loss_func(anchors, pos, idx, TAU, D_POS, D_NEG)
        loss.backward()

        n = world * B_LOCAL
        g = torch.Generator().manual_seed(12)
        q_all, k_all = torch.randn(n, D, generator=g), torch.randn(n, D, generator=g)
        pk_all = torch.randn(n, M, D, generator=g)
        sl = slice(rank * B_LOCAL, (rank + 1) * B_LOCAL)
        q = q_all[sl].clone().to(device).requires_grad_(True)
        k, pk = k_all[sl].to(device), pk_all[sl].to(device)
        mloss = attentionnce_mocov3_loss_func(q, k, pk, TAU, D_POS, D_NEG)
        mloss.backward()
        torch.save(
            {
                "loss": loss.detach(),
                "anchors_grad": anchors.grad,
                "positives_grad": pos.grad,
                "mloss": mloss.detach(),
                "q_grad": q.grad,
            },
            os.path.join(out_dir, f"rank{rank}.pt"),
        )
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world,repeat", [(2, False), (3, False), (2, True), (3, True)])
def test_world_size_matches_one_process(tmp_path: Path, world: int, repeat: bool, device):
    mp.spawn(
        _worker,
        args=(world, str(tmp_path / "store"), str(tmp_path), repeat, str(device)),
        nprocs=world,
        join=True,
    )
    # Compared on the CPU with the one-process reference below.
    results = [torch.load(tmp_path / f"rank{r}.pt", map_location="cpu") for r in range(world)]

    views, positives, indexes = _global_batch(world, repeat)
    anchors = views.reshape(VIEWS * world * B_LOCAL, D).clone().requires_grad_(True)
    pos = positives.clone().requires_grad_(True)
    loss = attentionnce_loss_func(anchors, pos, indexes, TAU, D_POS, D_NEG)
    loss.backward()
    anchors_grad = anchors.grad.view(VIEWS, world * B_LOCAL, D)

    torch.testing.assert_close(torch.stack([r["loss"] for r in results]).mean(), loss.detach())
    for rank, res in enumerate(results):
        sl = slice(rank * B_LOCAL, (rank + 1) * B_LOCAL)
        want = anchors_grad[:, sl].reshape(VIEWS * B_LOCAL, D)
        torch.testing.assert_close(res["anchors_grad"] / world, want)
        torch.testing.assert_close(res["positives_grad"] / world, pos.grad[sl])

    n = world * B_LOCAL
    g = torch.Generator().manual_seed(12)
    q_all, k_all = torch.randn(n, D, generator=g), torch.randn(n, D, generator=g)
    pk_all = torch.randn(n, M, D, generator=g)
    q_all.requires_grad_(True)
    mloss = attentionnce_mocov3_loss_func(q_all, k_all, pk_all, TAU, D_POS, D_NEG)
    mloss.backward()
    torch.testing.assert_close(torch.stack([r["mloss"] for r in results]).mean(), mloss.detach())
    for rank, res in enumerate(results):
        sl = slice(rank * B_LOCAL, (rank + 1) * B_LOCAL)
        torch.testing.assert_close(res["q_grad"] / world, q_all.grad[sl])
