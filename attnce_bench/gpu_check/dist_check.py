"""Part 4: two ranks give one process's loss and gradients (the logic of
tests/plugin/losses/test_losses_distributed.py, on the check's device and at a larger size).

On the GPU machine both ranks share the one GPU: NCCL refuses two ranks on one device, gloo with
CUDA tensors works. DDP averages gradients over ranks, so with per-rank mean losses the reference
for rank r is ``grad_r / W == d(one-process loss) / d(rank r's slice)``. Checked for the SimCLR
form (anchors gathered with gradient; once with a sample repeated across ranks, as a padding
DistributedSampler produces) and the MoCo v3 form (keys gathered without gradient).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Tuple

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from attnce_bench.gpu_check.common import PartContext, check, fmt, part_main
from attnce_plugin.losses import attentionnce_loss_func, attentionnce_mocov3_loss_func

WORLD = 2
TAU, D_POS, D_NEG = 0.5, 2.0, 0.5
#: fp32 on both sides; only the order of the reductions differs (per-rank blocks vs one matmul).
RTOL, ATOL = 1e-4, 1e-6


def global_batch(b_local: int, m: int, d: int, repeat: bool) -> Dict[str, torch.Tensor]:
    """The whole batch over both ranks (CPU; each rank slices its part)."""
    g = torch.Generator().manual_seed(11)
    n = WORLD * b_local
    views = torch.randn(2, n, d, generator=g)
    positives = torch.randn(n, m, d, generator=g)
    indexes = torch.arange(100, 100 + n)
    if repeat:
        indexes[-2:] = indexes[:2]  # the last rank's last images repeat rank 0's first samples
    query, key = torch.randn(n, d, generator=g), torch.randn(n, d, generator=g)
    pos_keys = torch.randn(n, m, d, generator=g)
    return {
        "views": views,
        "positives": positives,
        "indexes": indexes,
        "query": query,
        "key": key,
        "pos_keys": pos_keys,
    }


def local_inputs(
    x: Dict[str, torch.Tensor], rank: int, b_local: int, device: torch.device
) -> Dict[str, torch.Tensor]:
    """Rank ``rank``'s slice, view-major anchors as solo-learn concatenates them."""
    sl = slice(rank * b_local, (rank + 1) * b_local)
    d = x["views"].shape[-1]
    return {
        "anchors": x["views"][:, sl].reshape(2 * b_local, d).to(device).requires_grad_(True),
        "positives": x["positives"][sl].to(device).requires_grad_(True),
        "indexes": x["indexes"][sl].to(device),
        "query": x["query"][sl].to(device).requires_grad_(True),
        "key": x["key"][sl].to(device),
        "pos_keys": x["pos_keys"][sl].to(device),
    }


def losses_and_grads(y: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    loss = attentionnce_loss_func(y["anchors"], y["positives"], y["indexes"], TAU, D_POS, D_NEG)
    ga, gp = torch.autograd.grad(loss, [y["anchors"], y["positives"]])
    mloss = attentionnce_mocov3_loss_func(y["query"], y["key"], y["pos_keys"], TAU, D_POS, D_NEG)
    (gq,) = torch.autograd.grad(mloss, [y["query"]])
    return {
        "loss": loss.detach().cpu(),
        "anchors": ga.cpu(),
        "positives": gp.cpu(),
        "mloss": mloss.detach().cpu(),
        "query": gq.cpu(),
    }


def _worker(
    rank: int, store: str, out_dir: str, device: str, sizes: Tuple[int, int, int], repeat: bool
) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD)
    try:
        dev = torch.device(device)
        if dev.type == "cuda":
            torch.cuda.set_device(0)  # both ranks on the one GPU
        torch.set_num_threads(1)
        b_local, m, d = sizes
        x = global_batch(b_local, m, d, repeat)
        out = losses_and_grads(local_inputs(x, rank, b_local, dev))
        out["gathered_on"] = str(dev)
        torch.save(out, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def compare(
    results: List[Dict[str, torch.Tensor]],
    x: Dict[str, torch.Tensor],
    b_local: int,
    device: torch.device,
) -> Dict[str, float]:
    """Largest |difference| of each quantity against one process on the whole batch (checked
    against RTOL / ATOL by :func:`torch.testing.assert_close`)."""
    n, d = WORLD * b_local, x["views"].shape[-1]
    whole = {
        "anchors": x["views"].reshape(2 * n, d).to(device).requires_grad_(True),
        "positives": x["positives"].to(device).requires_grad_(True),
        "indexes": x["indexes"].to(device),
        "query": x["query"].to(device).requires_grad_(True),
        "key": x["key"].to(device),
        "pos_keys": x["pos_keys"].to(device),
    }
    want = losses_and_grads(whole)
    anchors_grad = want["anchors"].view(2, n, d)
    diffs: Dict[str, float] = {}

    def close(name: str, got: torch.Tensor, exp: torch.Tensor) -> None:
        diffs[name] = max(diffs.get(name, 0.0), float((got - exp).abs().max()))
        torch.testing.assert_close(got, exp, rtol=RTOL, atol=ATOL, msg=lambda m: f"{name}: {m}")

    close("loss", torch.stack([r["loss"] for r in results]).mean(), want["loss"])
    close("moco loss", torch.stack([r["mloss"] for r in results]).mean(), want["mloss"])
    for rank, res in enumerate(results):
        sl = slice(rank * b_local, (rank + 1) * b_local)
        close("anchor grads", res["anchors"] / WORLD, anchors_grad[:, sl].reshape(2 * b_local, d))
        close("positive grads", res["positives"] / WORLD, want["positives"][sl])
        close("query grads", res["query"] / WORLD, want["query"][sl])
    return diffs


def run(ctx: PartContext) -> None:
    device = torch.device(ctx.device)
    sizes = (4, 3, 8) if ctx.tiny else (64, 4, 128)
    ctx.emit(
        f"{WORLD} ranks (gloo, {'CUDA tensors, both on GPU 0' if ctx.cuda else 'CPU tensors'})"
        f" against one process on the whole batch, on {ctx.device}; b = {sizes[0]} per rank,"
        f" M = {sizes[1]}, d = {sizes[2]}, tau {TAU}, d_pos {D_POS}, d_neg {D_NEG}; largest "
        f"absolute difference (checked at rtol {RTOL}, atol {ATOL})."
    )
    ctx.emit()
    # The worker is pickled by reference: take it from the importable module, not __main__.
    from attnce_bench.gpu_check.dist_check import _worker as worker

    rows = []
    worst = 0.0
    for repeat in (False, True):
        with tempfile.TemporaryDirectory(dir=ctx.out) as tmp:
            mp.spawn(
                worker,
                args=(str(Path(tmp) / "store"), tmp, ctx.device, sizes, repeat),
                nprocs=WORLD,
                join=True,
            )
            results = [torch.load(Path(tmp) / f"rank{r}.pt") for r in range(WORLD)]
        check(
            all(r["gathered_on"] == str(device) for r in results),
            f"ranks ran on {[r['gathered_on'] for r in results]}, expected {device}",
        )
        x = global_batch(*sizes, repeat)
        diffs = compare(results, x, sizes[0], device)
        worst = max(worst, *diffs.values())
        rows.append(
            [
                "yes" if repeat else "no",
                *[
                    fmt(diffs[k])
                    for k in ("loss", "anchor grads", "positive grads", "moco loss", "query grads")
                ],
            ]
        )
        ctx.data[f"repeat={repeat}"] = diffs
        ctx.save()
    ctx.table(
        [
            "sample repeated across ranks",
            "loss",
            "anchor grads",
            "positive grads",
            "MoCo loss",
            "query grads",
        ],
        rows,
    )
    ctx.key = f"{WORLD} ranks == 1 process on {ctx.device}; max abs diff {fmt(worst, 2)}"


if __name__ == "__main__":
    sys.exit(part_main(run))
