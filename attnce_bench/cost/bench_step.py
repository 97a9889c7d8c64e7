#!/usr/bin/env python3
"""Training-step time of solo-learn methods: SimCLR, AttentionNCE and MoCo v3 (+ AttentionNCE).

Each method is built in this process from an OmegaConf config, the way solo-learn's own tests
build them (``add_and_assert_specific_cfg`` then the class), and fed random image tensors, so no
data on disk is needed. One timed step is ``training_step`` (solo-learn's full step: every crop
through the networks, the online linear probe, the loss) + ``backward`` + a LARS optimizer step
+ zero_grad, and for the momentum methods the EMA update of the momentum networks that
``on_train_batch_end`` does. No Trainer is attached, so ``self.log`` calls return at once (they
cost the same for every method).

Methods timed, all resnet18 with solo-learn's ImageNet stem (``data.dataset: custom``) unless
``--dataset cifar10``:

* ``simclr``: 2 crops of ``--size`` px (the reference, view ratio 1.00);
* ``attentionnce M=4 full``: 2 anchors + M positives, all ``--size`` px (the paper's setting);
* ``attentionnce M=4 small``: 2 anchors + M positives of ``--small-size`` px;
* ``mocov3``: 2 crops, online + momentum networks;
* ``mocov3_attentionnce M=4 full``: 2 anchors + M positive crops through the momentum network;
* rows marked ``compiled`` (only with ``--compile``): ``method_kwargs.compile: true``, backbone and
  projector compiled with ``torch.compile`` (the warm-up steps include the compilation);
* rows marked ``batched`` (skip with ``--no-batched-positives``): the same methods with
  ``method_kwargs.batch_positives: true``, which sends the M positive crops through the network as
  one batch (see :mod:`attnce_plugin.methods.positives`).

Steps are numbered 0, 1, 2, ... as ``batch_idx``, so the attention diagnostics are computed on
every ``method_kwargs.attention_log_every``-th step (default 10) as in training; ``--attention-log-every
1`` times the every-step cost.

All methods are timed interleaved (round-robin, order rotated every repeat) in one process; the
table gives medians, the ratio to SimCLR's step and to the method's base (SimCLR or MoCo v3), next
to the view-count ratio (2 + M) / 2 and the pixel ratio (crops weighted by pixel count, which is
what a small-crop step should be compared with).

Usage::

    python3 -m attnce_bench.cost.bench_step                     # CPU, batch 32, 32 px crops
    python3 -m attnce_bench.cost.bench_step --device cuda --batch-size 256
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

# solo-learn, timm and lightning warn about deprecations on import; they do not concern a benchmark.
warnings.filterwarnings("ignore", category=FutureWarning)
warnings.filterwarnings("ignore", category=UserWarning)
warnings.filterwarnings("ignore", category=DeprecationWarning)

from omegaconf import DictConfig, OmegaConf  # noqa: E402
from solo.methods import METHODS  # noqa: E402
from solo.utils.lars import LARS  # noqa: E402

import attnce_plugin  # noqa: E402

attnce_plugin.register()  # the plugin's methods into solo.methods.METHODS

# solo-learn's augmentation keys are irrelevant here (we feed tensors), but the crop-layout
# resolution reads crop_size and num_crops of every pipeline.
_PIPELINE_TEMPLATE: Dict[str, Any] = {
    "rrc": {"enabled": True, "crop_min_scale": 0.08, "crop_max_scale": 1.0},
    "color_jitter": {
        "prob": 0.8,
        "brightness": 0.4,
        "contrast": 0.4,
        "saturation": 0.2,
        "hue": 0.1,
    },
    "grayscale": {"prob": 0.2},
    "gaussian_blur": {"prob": 0.0},
    "solarization": {"prob": 0.0},
    "equalization": {"prob": 0.0},
    "horizontal_flip": {"prob": 0.5},
}


def _pipeline(crop_size: int, num_crops: int) -> Dict[str, Any]:
    return {**_PIPELINE_TEMPLATE, "crop_size": crop_size, "num_crops": num_crops}


def make_cfg(
    method: str,
    method_kwargs: Dict[str, Any],
    crops: Sequence[Tuple[int, int]],
    batch_size: int,
    dataset: str,
    momentum: bool,
    accelerator: str = "cpu",
) -> DictConfig:
    """A minimal pretrain config for ``method``; ``crops`` is [(crop_size, num_crops), ...]."""
    cfg: Dict[str, Any] = {
        "name": "bench_step",
        "method": method,
        "backbone": {"name": "resnet18"},
        "data": {
            "dataset": dataset,
            "train_path": ".",
            "val_path": ".",
            "format": "image_folder",
            "num_workers": 0,
            "num_large_crops": 2,
            "num_small_crops": sum(n for _, n in crops) - 2,
            "num_classes": 10,
        },
        "augmentations": [_pipeline(size, n) for size, n in crops],
        "optimizer": {
            "name": "lars",
            "batch_size": batch_size,
            "lr": 0.4,
            "classifier_lr": 0.1,
            "weight_decay": 1e-5,
            "kwargs": {"clip_lr": True, "eta": 0.02, "exclude_bias_n_norm": True},
        },
        "scheduler": {"name": "warmup_cosine"},
        "checkpoint": {"enabled": False},
        "auto_resume": {"enabled": False},
        "knn_eval": {"enabled": False},
        "max_epochs": 1,
        "devices": 1,
        "accelerator": accelerator,
        "num_nodes": 1,
        "method_kwargs": method_kwargs,
    }
    if momentum:
        cfg["momentum"] = {"base_tau": 0.99, "final_tau": 1.0}
    conf = OmegaConf.create(cfg)
    OmegaConf.set_struct(conf, False)
    return conf


SIMCLR_KW = {"proj_hidden_dim": 2048, "proj_output_dim": 128, "temperature": 0.5}
ATTNCE_KW = {**SIMCLR_KW, "d_pos": 1.0, "d_neg": 10.0}
MOCO_KW = {
    "proj_hidden_dim": 2048,
    "proj_output_dim": 256,
    "pred_hidden_dim": 2048,
    "temperature": 0.2,
}
MOCO_ATTNCE_KW = {**MOCO_KW, "loss": "attentionnce", "d_pos": 1.0, "d_neg": 10.0}


class StepRunner:
    """One method, its optimizer and a fixed random batch; ``step()`` runs one training step."""

    def __init__(
        self,
        cfg: DictConfig,
        crop_sizes: Sequence[int],
        batch_size: int,
        device: torch.device,
        seed: int,
    ) -> None:
        cls = METHODS[cfg.method]
        cfg = cls.add_and_assert_specific_cfg(cfg)
        torch.manual_seed(seed)
        self.model = cls(cfg).to(device)
        self.model.train()
        params = [p for group in self.model.learnable_params for p in group["params"]]
        self.optimizer = LARS(
            params,
            lr=0.1,
            momentum=0.9,
            weight_decay=1e-5,
            eta=0.02,
            clip_lr=True,
            exclude_bias_n_norm=True,
        )
        gen = torch.Generator().manual_seed(seed)
        crops = [torch.randn(batch_size, 3, s, s, generator=gen).to(device) for s in crop_sizes]
        indexes = torch.arange(batch_size, device=device)
        targets = torch.randint(0, 10, (batch_size,), generator=gen).to(device)
        self.batch = [indexes, crops, targets]
        self.momentum = hasattr(self.model, "momentum_pairs")
        self.batch_idx = 0

    def step(self) -> float:
        loss = self.model.training_step(self.batch, self.batch_idx)
        self.batch_idx += 1
        loss = loss["loss"] if isinstance(loss, dict) else loss
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.momentum:
            with torch.no_grad():
                for pair in self.model.momentum_pairs:
                    self.model.momentum_updater.update(*pair)
        return float(loss.detach())


def build_runners(
    args: argparse.Namespace, device: torch.device
) -> Dict[str, Tuple[StepRunner, float, float, str]]:
    """name -> (runner, view-count ratio (2+M)/2, pixel ratio, reference name)."""
    size, small, m = args.size, args.small_size, args.num_positives
    full_crops = [(size, 2), (size, m)]
    small_crops = [(size, 2), (small, m)]
    pixel_ratio = (2 * size**2 + m * small**2) / (2 * size**2)
    views = (2 + m) / 2
    log_kw = {"attention_log_every": args.attention_log_every}
    attn_kw = {**ATTNCE_KW, **log_kw}
    moco_attn_kw = {**MOCO_ATTNCE_KW, **log_kw}
    batched_kw = {"batch_positives": True}
    Spec = Tuple[str, str, Dict[str, Any], List[Tuple[int, int]], bool, float, float, str]
    specs: List[Spec] = [
        ("simclr", "simclr", SIMCLR_KW, [(size, 2)], False, 1.0, 1.0, "simclr"),
        (
            f"attentionnce M={m} full ({size} px)",
            "attentionnce",
            attn_kw,
            full_crops,
            False,
            views,
            views,
            "simclr",
        ),
        (
            f"attentionnce M={m} small ({small} px)",
            "attentionnce",
            attn_kw,
            small_crops,
            False,
            views,
            pixel_ratio,
            "simclr",
        ),
        ("mocov3", "mocov3", MOCO_KW, [(size, 2)], True, 1.0, 1.0, "mocov3"),
        (
            f"mocov3_attentionnce M={m} full ({size} px)",
            "mocov3_attentionnce",
            moco_attn_kw,
            full_crops,
            True,
            views,
            views,
            "mocov3",
        ),
    ]
    if args.batched_positives:
        specs += [
            (
                f"attentionnce M={m} full, batched",
                "attentionnce",
                {**attn_kw, **batched_kw},
                full_crops,
                False,
                views,
                views,
                "simclr",
            ),
            (
                f"attentionnce M={m} small, batched",
                "attentionnce",
                {**attn_kw, **batched_kw},
                small_crops,
                False,
                views,
                pixel_ratio,
                "simclr",
            ),
            (
                f"mocov3_attentionnce M={m} full, batched",
                "mocov3_attentionnce",
                {**moco_attn_kw, **batched_kw},
                full_crops,
                True,
                views,
                views,
                "mocov3",
            ),
        ]
    if args.compile:
        compiled_kw = {"compile": True}
        specs += [
            (
                f"attentionnce M={m} full, compiled",
                "attentionnce",
                {**attn_kw, **compiled_kw},
                full_crops,
                False,
                views,
                views,
                "simclr",
            ),
            (
                f"attentionnce M={m} small, batched, compiled",
                "attentionnce",
                {**attn_kw, **batched_kw, **compiled_kw},
                small_crops,
                False,
                views,
                pixel_ratio,
                "simclr",
            ),
        ]
    runners = {}
    for name, method, kwargs, crops, momentum, view_ratio, pix_ratio, ref in specs:
        accelerator = "gpu" if device.type == "cuda" else "cpu"
        cfg = make_cfg(
            method, dict(kwargs), crops, args.batch_size, args.dataset, momentum, accelerator
        )
        sizes = [s for s, n in crops for _ in range(n)]
        runner = StepRunner(cfg, sizes, args.batch_size, device, args.seed)
        runners[name] = (runner, view_ratio, pix_ratio, ref)
    return runners


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--size", type=int, default=32, help="anchor crop size (px)")
    parser.add_argument("--small-size", type=int, default=16, help="small positive crop size (px)")
    parser.add_argument("--num-positives", type=int, default=4, help="M")
    parser.add_argument(
        "--dataset", default="custom", help="custom (ImageNet stem) or cifar10 (CIFAR stem)"
    )
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="CPU threads (default 1: on a shared machine a 2-thread OpenMP barrier stalls whenever "
        "another process holds a core; 0 = torch's default)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--no-batched-positives",
        dest="batched_positives",
        action="store_false",
        help="skip the rows with method_kwargs.batch_positives: true",
    )
    parser.add_argument(
        "--attention-log-every",
        type=int,
        default=10,
        help="method_kwargs.attention_log_every of the AttentionNCE rows (default 10, the methods' "
        "default; 1 = diagnostics every step)",
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="add rows with method_kwargs.compile: true (torch.compile; compiled during warm-up, "
        "which takes about a minute per model and crop size on a small CPU)",
    )
    parser.add_argument("--out", type=Path, default=None, help="also write the table to this file")
    args = parser.parse_args(argv)

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda but torch.cuda.is_available() is False", file=sys.stderr)
        return 2
    if device.type == "cpu" and args.threads > 0:
        torch.set_num_threads(args.threads)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    runners = build_runners(args, device)
    names = list(runners)
    for _ in range(args.warmup):
        for name in names:
            runners[name][0].step()
    sync()
    samples: Dict[str, List[float]] = {name: [] for name in names}
    for rep in range(args.repeats):
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            sync()
            start = time.perf_counter()
            runners[name][0].step()
            sync()
            samples[name].append(time.perf_counter() - start)
    med = {name: statistics.median(v) for name, v in samples.items()}

    lines: List[str] = []

    def emit(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    emit(f"<!-- bench_step.py {' '.join(sys.argv[1:])} -->")
    emit(
        f"device: {device.type}{' (' + torch.cuda.get_device_name(device) + ')' if device.type == 'cuda' else ''}, "
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, resnet18 "
        f"({'CIFAR' if 'cifar' in args.dataset else 'ImageNet'} stem), batch {args.batch_size}, "
        f"{args.repeats} timed steps per method (median), interleaved"
    )
    emit()
    emit(
        "| method | s/step | to simclr | to its base method | view-count ratio (2+M)/2 | "
        "pixel ratio | (to base) / (view-count ratio) |"
    )
    emit("|---|---|---|---|---|---|---|")
    for name in names:
        _, view_ratio, pix_ratio, ref = runners[name]
        to_simclr = med[name] / med["simclr"]
        to_base = med[name] / med[ref]
        emit(
            f"| {name} | {med[name]:.3f} | {to_simclr:.2f}x | {to_base:.2f}x ({ref}) | "
            f"{view_ratio:.2f} | {pix_ratio:.2f} | {to_base / view_ratio:.2f} |"
        )
    emit()
    if args.batched_positives:
        emit(
            "batched: method_kwargs.batch_positives: true (the M positive crops go through the "
            "network as one batch, so BatchNorm uses statistics over M*b images instead of b per "
            "crop; accuracy effect in docs/performance.md)."
        )
        emit()
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
