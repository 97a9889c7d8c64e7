"""What one training step of a shipped config keeps for its backward, measured on the CPU: the
bytes of every tensor autograd saves (each storage counted once) in ``training_step`` on a small
batch, per image, and what that gives for the recipe's batch on one GPU and split over several::

    python3 -m benchmarks.activation_memory                     # the paper recipe, CIFAR-10
    python3 -m benchmarks.activation_memory --config pretrain/stl10/attentionnce_paper.yaml

Weights, gradients and Adam's two moments come on top (the "model state" column); cuDNN's
workspaces and the allocator's fragmentation are not counted, so a GPU needs more than this."""

from __future__ import annotations

import argparse
import sys
from typing import Dict, Optional, Sequence

import torch

from benchmarks.report import table
from benchmarks.step_cost import build

GIB = 2**30


def saved_bytes(model: torch.nn.Module, batch: list, precision: str) -> int:
    """Bytes of the tensors autograd keeps from one ``training_step`` of ``batch``."""
    storages: Dict[int, int] = {}

    def keep(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return t

    autocast = torch.autocast("cpu", torch.bfloat16, enabled=precision == "bf16-mixed")
    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t), autocast:
        model.training_step(batch, 0)
    return sum(storages.values())


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--config", default="pretrain/cifar/attentionnce_paper.yaml")
    p.add_argument("--images", type=int, default=8, help="images in the measured batch")
    p.add_argument("--gpus", type=int, nargs="+", default=[1, 2, 4])
    args = p.parse_args(argv)
    torch.set_num_threads(2)
    model, cfg = build(args.config, ["trainer=cpu", "++precision=32"])
    model.train()
    model.log = lambda *a, **k: None  # no trainer attached: nothing to log to
    gen = torch.Generator().manual_seed(0)
    sizes = [int(a.crop_size) for a in cfg.augmentations for _ in range(int(a.num_crops))]
    crops = [torch.randn(args.images, 3, s, s, generator=gen) for s in sizes]
    batch = [torch.arange(args.images), crops, torch.zeros(args.images, dtype=torch.long)]
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    state = 4 * params  # weights, gradients, Adam's first and second moments
    global_batch = int(cfg.optimizer.batch_size) * len(cfg.devices)
    rows = []
    for precision in ("32", "bf16-mixed"):
        per_image = saved_bytes(model, batch, precision) / args.images
        for gpus in args.gpus:
            share = global_batch // gpus
            rows.append(
                [precision, f"{per_image / 2**20:.1f}", gpus, share]
                + [f"{share * per_image / GIB:.1f}", f"{state / GIB:.2f}"]
                + [f"{(share * per_image + state) / GIB:.1f}"]
            )
    head = f"{args.config}: {cfg.backbone.name}, {len(sizes)} views of sizes {sorted(set(sizes))} "
    head += f"px, global batch {global_batch}; saved tensors of one training_step on {args.images} "
    head += "images on the CPU (bf16-mixed: under CPU autocast), scaled to each GPU's share"
    cols = ["precision", "MiB per image", "GPUs", "images per GPU", "activations GiB per GPU"]
    cols += ["model state GiB", "total GiB per GPU"]
    command = " ".join(["python3 -m benchmarks.activation_memory", *argv])
    print(f"<!-- {command} -->\n\n{head}\n\n{table(cols, rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
