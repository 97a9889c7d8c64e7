"""The benchmark's one command line and the one options dataclass it builds.

The benchmark, its frontier and its experiments share these flags; each mode reads the ones it
needs (an experiment's own flags are listed under its group).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

from benchmarks.runs import ALL_METHODS, ATTENTION_METHODS, BENCH_METHODS, DATASETS, PRESETS

EXPERIMENTS = (
    "attention_limits",
    "attention_vs_augmentation",
    "batch_positives_effect",
    "false_negatives",
    "moco_settings",
    "step_profile",
)


def _ints(text: str) -> Tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def _floats(text: str) -> Tuple[float, ...]:
    return tuple(float(x) for x in text.split(",") if x.strip())


def _strs(text: str) -> Tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


@dataclass
class Options:
    """Every flag of ``python3 -m benchmarks`` (None: the preset's value)."""

    preset: str = "default"
    epochs: Optional[int] = None
    batch_size: Optional[int] = None
    seeds: Optional[Tuple[int, ...]] = None
    num_train: Optional[int] = None
    num_val: Optional[int] = None
    num_workers: Optional[int] = None
    limit_train_batches: Optional[int] = None
    methods: Optional[Tuple[str, ...]] = None
    num_positives: int = 4
    extra_m: Tuple[int, ...] = (2,)
    time_matched: bool = True
    ablation: bool = False
    ablation_method: str = "attentionnce"
    m_grid: Tuple[int, ...] = (1, 2, 4)
    dpos_grid: Tuple[float, ...] = (0.5, 1.0, 2.0, 4.0)
    dneg_grid: Tuple[float, ...] = (0.5, 1.0, 10.0)
    anchor_grid: Tuple[str, ...] = ()
    part: Optional[str] = None
    frontier: bool = False
    frontier_epochs: Optional[Tuple[int, ...]] = None
    experiment: Optional[str] = None
    dataset: str = "fashion_mnist"
    classes: Optional[Tuple[int, ...]] = None
    train_path: Optional[str] = None
    val_path: Optional[str] = None
    crop_size: Optional[int] = None
    crop_min_scale: Optional[float] = None
    accelerator: Optional[str] = None
    devices: Optional[str] = None
    precision: Optional[str] = None
    backbone: Optional[str] = None
    data_format: Optional[str] = None
    sets: List[str] = field(default_factory=list)
    overrides: List[str] = field(default_factory=list)
    out: str = "bench_out"
    data_cache: Optional[str] = None
    offline_probe: bool = True
    references: bool = True
    keep_checkpoints: bool = False
    curve_every: Optional[int] = None
    fresh: bool = False
    dry_run: bool = False
    report_only: bool = False
    # experiments' own
    class_counts: Tuple[int, ...] = (2, 5, 10)
    class_seed: int = 0
    small_size: int = 16
    ckpt: Optional[str] = None
    data: Optional[str] = None
    scales: Tuple[float, ...] = (1.0, 0.5, 0.25, 0.12, 0.06)
    num_images: int = 512
    repeats: int = 4
    d_pos: Optional[float] = None
    args_json: Optional[str] = None
    reference_aug: str = "checkpoint"
    probe_photometric: str = "same"
    dim: int = 128
    images: int = 64

    def hardware_sets(self) -> List[str]:
        """The hardware flags as ``--set`` values (solo-learn / Lightning keys).

        Raises:
            ValueError: a value outside the allowed ones.
        """
        out: List[str] = []
        accel = self.accelerator or "cpu"
        if accel not in ("cpu", "gpu", "cuda", "auto"):
            raise ValueError(f"--accelerator={accel!r}: allowed values are cpu, gpu, cuda, auto")
        if accel != "cpu":
            ids = [int(x) for x in (self.devices or "0").split(",") if x.strip()]
            out += [f"accelerator={accel}", f"devices=[{','.join(map(str, ids))}]"]
            out += ["strategy=ddp" if len(ids) > 1 else "strategy=auto"]
            out += [f"sync_batchnorm={'true' if len(ids) > 1 else 'false'}"]
        elif self.devices is not None:
            if not self.devices.isdigit() or int(self.devices) < 1:
                raise ValueError(f"--devices={self.devices!r}: on cpu a process count, e.g. 1")
            # solo scales the lr by len(devices), Lightning reads int(devices): "02" is 2
            # processes of length 2 (docs/solo-learn.md).
            n = int(self.devices)
            out.append(f"devices='{str(n).zfill(n)}'")
            out += ["strategy=ddp"] if n > 1 else []
        if self.precision is not None:
            out.append(f"precision='{self.precision}'")
        if self.backbone is not None:
            out.append(f"backbone.name={self.backbone}")
        if self.data_format is not None:
            out.append(f"data.format={self.data_format}")
        return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python3 -m benchmarks",
        description="SimCLR, MoCo v3 and AttentionNCE side by side, each a shipped config plus "
        "overrides trained by solo-learn's own main_pretrain.py.",
        epilog="Arguments after '--' go unchanged to every main_pretrain.py run.",
    )
    g = p.add_argument_group("budget")
    g.add_argument("--preset", default="default", choices=sorted(PRESETS), help=", ".join(
        f"{k}: {v.description}" for k, v in PRESETS.items()))  # fmt: skip
    g.add_argument("--epochs", type=int, help="equal-epoch budget (overrides the preset's)")
    g.add_argument("--batch-size", type=int, help="images per step per device")
    g.add_argument("--seeds", type=_ints, help="e.g. 0,1,2")
    g.add_argument("--num-train", type=int, help="Fashion-MNIST training subset size")
    g.add_argument("--num-val", type=int, help="Fashion-MNIST validation subset size")
    g.add_argument("--num-workers", type=int, help="dataloader workers per run")
    g.add_argument("--limit-train-batches", type=int, help="Lightning limit_train_batches")

    g = p.add_argument_group("what to compare")
    g.add_argument("--methods", type=_strs, default=None,
                   help="default: the preset's (" + ",".join(BENCH_METHODS) + "; reference: also "
                   + ",".join(ALL_METHODS[4:]) + ")")  # fmt: skip
    g.add_argument("--num-positives", type=int, default=4, help="M of the AttentionNCE rows")
    g.add_argument("--extra-m", type=_ints, default=(2,), help="more M rows (SimCLR form)")
    g.add_argument("--no-time-matched", dest="time_matched", action="store_false",
                   help="skip the equal-time baseline runs")  # fmt: skip
    g.add_argument("--ablation", action="store_true", help="also the M / d_pos / d_neg grids")
    g.add_argument("--ablation-method", default="attentionnce", choices=ATTENTION_METHODS)
    g.add_argument("--m-grid", type=_ints, default=(1, 2, 4))
    g.add_argument("--dpos-grid", type=_floats, default=(0.5, 1.0, 2.0, 4.0))
    g.add_argument("--dneg-grid", type=_floats, default=(0.5, 1.0, 10.0))
    g.add_argument("--anchor-grid", type=_strs, default=(), help="with --ablation: e.g. mean")
    g.add_argument(
        "--part",
        help="--preset reference: train only this part (e.g. seed0-a); "
        "the rest of the table is read from the records in --out",
    )
    g.add_argument("--frontier", action="store_true",
                   help="every variant at each --frontier-epochs: accuracy against time")  # fmt: skip
    g.add_argument("--frontier-epochs", type=_ints, help="default: the preset's (2,4,8)")
    g.add_argument("--experiment", choices=EXPERIMENTS, help="run one experiment (docs/)")

    g = p.add_argument_group("data and hardware")
    g.add_argument("--dataset", default="fashion_mnist", choices=list(DATASETS))
    g.add_argument("--classes", type=_ints, help="fashion_mnist: label ids to keep, e.g. 0,3")
    g.add_argument("--train-path", help="training data (unless --dataset fashion_mnist)")
    g.add_argument("--val-path", help="validation data")
    g.add_argument("--data-format", choices=["image_folder", "h5", "dali"])
    g.add_argument("--crop-size", type=int, help="view size (and validation size, custom data)")
    g.add_argument("--crop-min-scale", type=float,
                   help="every crop's RandomResizedCrop minimum scale (default: the preset's)")  # fmt: skip
    g.add_argument("--backbone", help="solo-learn backbone name (default resnet18)")
    g.add_argument("--accelerator", help="cpu (default) or gpu")
    g.add_argument("--devices", help="cpu: a process count; gpu: ids such as 0,1")
    g.add_argument("--precision", help="e.g. 32, 16-mixed, bf16-mixed")
    g.add_argument("--set", dest="sets", action="append", default=[],
                   metavar="[METHOD:]KEY=VALUE", help="a config value, all runs or one method's")  # fmt: skip

    g = p.add_argument_group("evaluation and output")
    g.add_argument("--out", default="bench_out", help="output folder (default ./bench_out)")
    g.add_argument("--data-cache", help="converted Fashion-MNIST (default <out>/data)")
    g.add_argument("--no-offline-probe", dest="offline_probe", action="store_false")
    g.add_argument("--no-references", dest="references", action="store_false",
                   help="skip the untrained-backbone and raw-pixel rows")  # fmt: skip
    g.add_argument("--keep-checkpoints", action="store_true")
    g.add_argument(
        "--curve-every",
        type=int,
        metavar="N",
        help="learning curves: probe a checkpoint every N epochs of each run",
    )
    g.add_argument("--fresh", action="store_true", help="re-run runs already finished in --out")
    g.add_argument("--dry-run", action="store_true", help="write configs and commands only")
    g.add_argument("--report-only", action="store_true",
                   help="rebuild the tables from the run records in --out, train nothing")  # fmt: skip

    g = p.add_argument_group("experiments' own")
    g.add_argument("--class-counts", type=_ints, default=(2, 5, 10),
                   help="false_negatives: numbers of classes K")  # fmt: skip
    g.add_argument("--class-seed", type=int, default=0, help="false_negatives: class order")
    g.add_argument("--small-size", type=int, default=16, help="batch_positives_effect: px")
    g.add_argument("--ckpt", help="attention_vs_augmentation: a trained checkpoint")
    g.add_argument("--data", help="attention_vs_augmentation: an image folder")
    g.add_argument("--scales", type=_floats, default=(1.0, 0.5, 0.25, 0.12, 0.06))
    g.add_argument("--num-images", type=int, default=512)
    g.add_argument("--repeats", type=int, default=4)
    g.add_argument("--d-pos", type=float, help="attention_vs_augmentation: for a simclr ckpt")
    g.add_argument("--args", dest="args_json", help="attention_vs_augmentation: its args.json")
    g.add_argument("--reference-aug", choices=("checkpoint", "standard"), default="checkpoint")
    g.add_argument("--probe-photometric", choices=("same", "none"), default="same")
    g.add_argument("--dim", type=int, default=128, help="attention_limits: projection dim")
    g.add_argument("--images", type=int, default=64, help="attention_limits: images B")
    return p


def parse(argv: Sequence[str]) -> Options:
    """The :class:`Options` of a command line (``--`` starts the raw Hydra overrides)."""
    argv = list(argv)
    raw: List[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, raw = argv[:cut], argv[cut + 1 :]
    ns = vars(build_parser().parse_args(argv))
    return Options(**ns, overrides=raw)
