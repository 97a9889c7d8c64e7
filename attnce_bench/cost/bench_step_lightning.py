#!/usr/bin/env python3
"""Training-step time through Lightning, from the shipped configs, with mixed precision,
channels_last and optionally ``torch.compile``.

:mod:`attnce_bench.cost.bench_step` times the methods without a Trainer, in fp32. This script
times what a GPU user runs: each method is built the way solo-learn's ``main_pretrain.py`` builds
it (the shipped ``pretrain/custom/*.yaml`` composed with overrides, solo-learn's ``parse_cfg``
wrapped by the plugin, ``METHODS[cfg.method](cfg)``, ``make_contiguous``, channels_last) and
trained by a Lightning ``Trainer`` at the chosen precision (GradScaler under ``16-mixed``), with
solo-learn's LARS and warm-up/cosine schedule from ``configure_optimizers``. The batch is one fixed
set of random crops already on the device, yielded every step, so data loading is not timed.

A step is the time between the starts of two consecutive training batches (device synchronised),
so it includes the forward, the loss, backward, the optimizer step, the momentum update of the
MoCo forms and Lightning's own work; the first ``--warmup`` steps (``torch.compile``'s compilation
among them) are left out and the median of the next ``--steps`` is reported. Methods run one
after another in this process (not interleaved), each with a fresh Trainer.

Methods (the bench's SimCLR and MoCo v3 are the AttentionNCE configs with solo-learn's loss and no
positive crops: :data:`attnce_bench.compose.METHOD_RECIPES`, tested step for step against
solo-learn's own methods):

* ``simclr``: ``attentionnce.yaml`` with ``method_kwargs.loss=simclr``, 2 crops;
* ``attentionnce M=4``: ``attentionnce.yaml`` (2 anchors + 4 positives, all ``--size`` px);
* ``attentionnce multicrop``: ``attentionnce_multicrop.yaml`` (4 positives of ``--small-size`` px);
* ``mocov3``: ``mocov3_attentionnce.yaml`` with ``method_kwargs.loss=mocov3``, 2 crops;
* ``mocov3_attentionnce M=4``: ``mocov3_attentionnce.yaml``.

Usage::

    python3 -m attnce_bench.cost.bench_step_lightning --device cuda           # 224 px, batch 128
    python3 -m attnce_bench.cost.bench_step_lightning --device cuda --compile
    python3 -m attnce_bench.cost.bench_step_lightning --device cpu --size 32 --small-size 16 \\
        --batch-size 8 --precision 32 --warmup 1 --steps 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import torch

warnings.filterwarnings("ignore", category=FutureWarning)
warnings.filterwarnings("ignore", category=UserWarning)
warnings.filterwarnings("ignore", category=DeprecationWarning)


@dataclass(frozen=True)
class Spec:
    """One timed method: the shipped recipe, its extra overrides, the method it is compared with."""

    name: str
    recipe: str
    overrides: Tuple[str, ...]
    base: str


def specs(small_size: int) -> List[Spec]:
    from attnce_bench.compose import METHOD_RECIPES

    return [
        Spec("simclr", "attentionnce", METHOD_RECIPES["simclr"][1], "simclr"),
        Spec("attentionnce M=4", "attentionnce", (), "simclr"),
        Spec("mocov3", "mocov3_attentionnce", METHOD_RECIPES["mocov3"][1], "mocov3"),
        Spec("mocov3_attentionnce M=4", "mocov3_attentionnce", (), "mocov3"),
        Spec(
            f"attentionnce multicrop M=4 ({small_size} px)",
            "attentionnce_multicrop",
            (f"++views.positive_crop_size={small_size}",),
            "simclr",
        ),
    ]


class RepeatBatch:
    """An iterable yielding the same (on-device) batch ``length`` times: no data loading."""

    def __init__(self, batch: List[Any], length: int) -> None:
        self.batch, self.length = batch, length

    def __len__(self) -> int:
        return self.length

    def __iter__(self) -> Iterator[List[Any]]:
        for _ in range(self.length):
            yield self.batch


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def make_timer(device: torch.device) -> Any:
    from lightning.pytorch.callbacks import Callback

    class StepTimer(Callback):
        """Marks the start of every training batch and the end of the epoch (synchronised)."""

        def __init__(self) -> None:
            self.marks: List[float] = []

        def on_train_batch_start(self, *args: Any, **kwargs: Any) -> None:
            _sync(device)
            self.marks.append(time.perf_counter())

        def on_train_epoch_end(self, *args: Any, **kwargs: Any) -> None:
            _sync(device)
            self.marks.append(time.perf_counter())

    return StepTimer()


def build_method(spec: Spec, args: argparse.Namespace, train_path: str) -> Tuple[Any, Any]:
    """The method as main_pretrain.py builds it from the shipped config; returns (model, cfg)."""
    import solo.args.pretrain as solo_pretrain_args
    from omegaconf import OmegaConf
    from solo.methods import METHODS
    from solo.utils.misc import make_contiguous

    import attnce_plugin
    from attnce_bench.compose import compose
    from attnce_plugin.patches import wrap_pretrain_parse_cfg

    attnce_plugin.register()
    cuda = args.device == "cuda"
    overrides = [
        *spec.overrides,
        f"++views.crop_size={args.size}",
        f"++optimizer.batch_size={args.batch_size}",
        f"++data.train_path={train_path}",
        "~data.val_path",
        f"++method_kwargs.compile={str(args.compile).lower()}",
        f"++performance.disable_channel_last={str(not args.channels_last).lower()}",
        # One device, no DDP: SyncBatchNorm would do nothing and compile refuses it.
        "++sync_batchnorm=False",
        f"++accelerator={'gpu' if cuda else 'cpu'}",
        "++devices=[0]" if cuda else "++devices='1'",
        "++knn_eval.enabled=False",
        "++wandb.enabled=False",
        "++max_epochs=1",
        "++scheduler.warmup_epochs=0",
    ]
    if args.tiny_heads:
        overrides += ["++method_kwargs.proj_hidden_dim=64", "++method_kwargs.proj_output_dim=32"]
        if "mocov3" in spec.recipe:
            overrides.append("++method_kwargs.pred_hidden_dim=64")
    cfg = compose(f"pretrain/custom/{spec.recipe}.yaml", overrides)
    OmegaConf.set_struct(cfg, False)
    cfg = wrap_pretrain_parse_cfg(solo_pretrain_args.parse_cfg)(cfg)
    model = METHODS[cfg.method](cfg)
    make_contiguous(model)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    return model, cfg


def make_batch(
    cfg: Any, batch_size: int, device: torch.device, seed: int
) -> Tuple[List[Any], List[int]]:
    """``[indexes, [crop_0 .. crop_n-1], targets]`` in the config's crop order, and the sizes."""
    gen = torch.Generator().manual_seed(seed)
    sizes = [int(p.crop_size) for p in cfg.augmentations for _ in range(int(p.num_crops))]
    crops = [torch.randn(batch_size, 3, s, s, generator=gen).to(device) for s in sizes]
    indexes = torch.arange(batch_size, device=device)
    targets = torch.randint(0, int(cfg.data.num_classes), (batch_size,), generator=gen).to(device)
    return [indexes, crops, targets], sizes


def time_method(spec: Spec, args: argparse.Namespace, train_path: str) -> Dict[str, Any]:
    """Build, train ``warmup + steps`` steps through Lightning, return the row."""
    from lightning.pytorch import Trainer

    device = torch.device(args.device)
    model, cfg = build_method(spec, args, train_path)
    batch, sizes = make_batch(cfg, args.batch_size, device, args.seed)
    timer = make_timer(device)
    total = args.warmup + args.steps
    trainer = Trainer(
        accelerator="gpu" if device.type == "cuda" else "cpu",
        devices=1,
        precision=args.precision,
        max_epochs=1,
        limit_train_batches=total,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=[timer],
    )
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    trainer.fit(model, train_dataloaders=RepeatBatch(batch, total))
    steps = [b - a for a, b in zip(timer.marks, timer.marks[1:])]
    if len(steps) != total:
        raise RuntimeError(f"{spec.name}: {len(steps)} steps timed, expected {total}")
    timed = steps[args.warmup :]
    base_pixels = 2 * args.size**2
    row = {
        "method": spec.name,
        "base": spec.base,
        "compile": bool(args.compile),
        "s_per_step": statistics.median(timed),
        "first_step_s": steps[0],
        "views": len(sizes),
        "view_ratio": len(sizes) / 2,
        "pixel_ratio": sum(s * s for s in sizes) / base_pixels,
        "peak_gib": (
            torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
        ),
    }
    del trainer, model, batch
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return row


def run_rows(args: argparse.Namespace) -> Iterator[Dict[str, Any]]:
    """Time each selected method in turn; yields its row as soon as it is measured."""
    with tempfile.TemporaryDirectory() as tmp:
        train_path = args.train_path
        if train_path is None:
            # parse_cfg counts class folders of data.train_path for the online classifier.
            for k in range(10):
                (Path(tmp) / f"class{k}").mkdir()
            train_path = tmp
        for spec in specs(args.small_size):
            if (
                args.methods
                and spec.name.split(" ")[0] not in args.methods
                and spec.name not in args.methods
            ):
                continue
            yield time_method(spec, args, str(train_path))


def table(rows: Sequence[Dict[str, Any]], args: argparse.Namespace) -> List[str]:
    """Markdown lines: one row per method, ratios to SimCLR and to the method's base."""
    by_name = {r["method"]: r for r in rows}
    lines = [
        f"device {args.device}"
        + (f" ({torch.cuda.get_device_name(0)})" if args.device == "cuda" else "")
        + f", torch {torch.__version__}, precision {args.precision}, channels_last "
        f"{'on' if args.channels_last else 'off'}, compile {'on' if args.compile else 'off'}, "
        f"resnet18 (ImageNet stem), batch {args.batch_size}, {args.size} px, median of "
        f"{args.steps} steps after {args.warmup} warm-up steps",
        "",
        "| method | compile | s/step | to simclr | to its base | views | pixel ratio | "
        "(to base) / (view ratio) | first step s | peak GiB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    simclr = by_name.get("simclr")
    for r in rows:
        base = by_name.get(r["base"])
        to_simclr = f"{r['s_per_step'] / simclr['s_per_step']:.2f}x" if simclr else "n/a"
        to_base, per_view = "n/a", "n/a"
        if base:
            ratio = r["s_per_step"] / base["s_per_step"]
            to_base = f"{ratio:.2f}x ({r['base']})"
            per_view = f"{ratio / r['view_ratio']:.2f}"
        peak = "n/a" if r["peak_gib"] is None else f"{r['peak_gib']:.1f}"
        lines.append(
            f"| {r['method']} | {'on' if r['compile'] else 'off'} | {r['s_per_step']:.4f} | "
            f"{to_simclr} | {to_base} | {r['views']} | {r['pixel_ratio']:.2f} | {per_view} | "
            f"{r['first_step_s']:.1f} | {peak} |"
        )
    return lines


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--device", default="cuda", help="cuda or cpu (default cuda)")
    p.add_argument("--size", type=int, default=224, help="anchor (and paper-layout positive) px")
    p.add_argument(
        "--small-size",
        type=int,
        default=None,
        help="multicrop positives' px (default: the shipped 96 at 224, scaled)",
    )
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--precision", default="16-mixed", help="Lightning precision (default 16-mixed)")
    p.add_argument("--no-channels-last", dest="channels_last", action="store_false")
    p.add_argument("--compile", action="store_true", help="method_kwargs.compile=true")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument(
        "--methods",
        nargs="*",
        default=None,
        help="subset: simclr attentionnce mocov3 mocov3_attentionnce (first word of "
        "the row name)",
    )
    p.add_argument(
        "--train-path",
        default=None,
        help="an image folder root (only its class folders are counted)",
    )
    p.add_argument("--tiny-heads", action="store_true", help="64/32-wide projector (tests)")
    p.add_argument("--threads", type=int, default=0, help="CPU threads (0: torch's default)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None, help="also write the table here")
    p.add_argument("--json", type=Path, default=None, help="also write the rows here")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.small_size is None:
        args.small_size = max(8, round(args.size * 96 / 224))
    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda but torch.cuda.is_available() is False", file=sys.stderr)
        return 2
    if args.device == "cpu" and args.threads > 0:
        torch.set_num_threads(args.threads)
    rows: List[Dict[str, Any]] = []
    for row in run_rows(args):
        rows.append(row)
        print(f"  [{row['method']}: {row['s_per_step']:.4f} s/step]", file=sys.stderr, flush=True)
    lines = table(rows, args)
    print("\n".join(lines))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines) + "\n")
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
