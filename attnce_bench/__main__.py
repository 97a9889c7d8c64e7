"""``attnce-bench`` (also ``python3 -m attnce_bench``, ``make bench``): the benchmark's command line.

Trains SimCLR, MoCo v3, AttentionNCE (SimCLR form) and MoCo v3 + AttentionNCE with solo-learn's
own ``main_pretrain.py``, each from a shipped config plus visible overrides, evaluates them and
writes ``results.md``, ``summary.csv``, ``runs.csv`` and ``results.png`` into one output folder
(default ``./bench_out``). The same from Python: :func:`attnce_bench.api.run_benchmark`.

Examples::

    attnce-bench                                  # embedded default, ~20 min on 2 CPUs
    attnce-bench --preset smoke                   # a minute-scale end-to-end check
    attnce-bench --ablation                       # + M / d_pos / d_neg grids
    attnce-bench --frontier --seeds 0,1,2         # accuracy against training time, ~2 h
    attnce-bench --dataset cifar10 --train-path ~/data --val-path ~/data \\
        --epochs 200 --batch-size 256 --accelerator gpu --devices 0 --precision 16-mixed
    attnce-bench --set optimizer.lr=0.3 --set attentionnce:method_kwargs.d_neg=1
    attnce-bench -- ++trainer_option=value        # raw Hydra overrides, all runs
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import threading
from typing import List, Optional, Sequence

from attnce_bench import plan as plan_mod
from attnce_bench.api import BenchOptions, run_benchmark
from attnce_bench.arglists import float_list, int_list, str_list
from attnce_bench.compose import DATASETS, BenchConfigError
from attnce_bench.plan import PRESETS


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="attnce-bench",
        description="Side-by-side benchmark of AttentionNCE against solo-learn's SimCLR and MoCo "
        "v3, trained with solo-learn's own main_pretrain.py.",
        epilog="Each run is a shipped config (attnce-configs --list) plus overrides, listed in "
        "results.md. Arguments after '--' are passed unchanged to every main_pretrain.py run as "
        "Hydra overrides.",
    )
    g = p.add_argument_group("budget")
    g.add_argument(
        "--preset",
        default="default",
        choices=sorted(PRESETS),
        help="budget: " + "; ".join(f"{k}: {v.description}" for k, v in PRESETS.items()),
    )
    g.add_argument("--epochs", type=int, help="equal-epoch budget (overrides the preset)")
    g.add_argument("--batch-size", type=int, help="images per step per device")
    g.add_argument("--seeds", type=int_list, help="e.g. 0,1,2")
    g.add_argument("--num-train", type=int, help="Fashion-MNIST training subset size")
    g.add_argument("--num-val", type=int, help="Fashion-MNIST validation subset size")
    g.add_argument("--num-workers", type=int, help="dataloader workers per run")
    g.add_argument("--limit-train-batches", type=int, help="Lightning limit_train_batches")

    g = p.add_argument_group("what to compare")
    g.add_argument(
        "--methods",
        type=str_list,
        default=list(plan_mod.METHODS),
        help=f"subset of {','.join(plan_mod.METHODS)}",
    )
    g.add_argument(
        "--num-positives",
        type=int,
        default=4,
        help="M, positive views per image of the AttentionNCE methods (default 4)",
    )
    g.add_argument(
        "--extra-m",
        type=int_list,
        default=[2],
        help="additional M values for AttentionNCE (SimCLR form); default 2",
    )
    g.add_argument(
        "--no-time-matched", action="store_true", help="skip the equal-wall-clock baseline runs"
    )
    g.add_argument(
        "--ablation",
        action="store_true",
        help="also run the M / d_pos / d_neg grids (one varied at a time)",
    )
    g.add_argument(
        "--ablation-method", default="attentionnce", choices=list(plan_mod.ATTENTION_METHODS)
    )
    g.add_argument("--m-grid", type=int_list, default=[1, 2, 4])
    g.add_argument("--dpos-grid", type=float_list, default=[0.5, 1.0, 2.0, 4.0])
    g.add_argument("--dneg-grid", type=float_list, default=[0.5, 1.0, 10.0])
    g.add_argument(
        "--frontier",
        action="store_true",
        help="instead of the tables: every variant (SimCLR, MoCo v3, AttentionNCE "
        "M=1/2/4, multicrop per crop and batched, the MoCo form) at each of "
        "--frontier-epochs, accuracy against training time",
    )
    g.add_argument(
        "--frontier-epochs",
        type=int_list,
        help="epoch budgets of --frontier (default: the preset's, 2,4,8)",
    )
    g.add_argument(
        "--anchor-grid",
        type=str_list,
        default=[],
        help="with --ablation: anchor modes to add, e.g. 'mean' (AttentionNCE*)",
    )

    g = p.add_argument_group("data and hardware")
    g.add_argument("--dataset", default="fashion_mnist", choices=list(DATASETS))
    g.add_argument(
        "--classes",
        type=int_list,
        help="fashion_mnist only: the label ids to keep, e.g. 0,3 (default: all 10)",
    )
    g.add_argument("--train-path", help="training data (required unless --dataset fashion_mnist)")
    g.add_argument("--val-path", help="validation data")
    g.add_argument(
        "--data-format",
        choices=["image_folder", "h5", "dali"],
        help="solo-learn data.format; dali needs a GPU and nvidia-dali",
    )
    g.add_argument("--crop-size", type=int, help="view size (and validation size for custom data)")
    g.add_argument("--backbone", help="solo-learn backbone name (default resnet18)")
    g.add_argument("--accelerator", default=None, help="cpu (default) or gpu")
    g.add_argument("--devices", default=None, help="cpu: a count ('1'); gpu: ids such as 0,1")
    g.add_argument("--precision", default=None, help="e.g. 32, 16-mixed, bf16-mixed")
    g.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="[METHOD:]KEY=VALUE",
        help="config value for all runs, or for one method's runs (repeatable)",
    )

    g = p.add_argument_group("evaluation and output")
    g.add_argument("--out", default="bench_out", help="output folder (default ./bench_out)")
    g.add_argument("--data-cache", help="where converted Fashion-MNIST goes (default <out>/data)")
    g.add_argument(
        "--no-offline-probe",
        action="store_true",
        help="skip the offline probe (and the reference rows)",
    )
    g.add_argument(
        "--no-references",
        action="store_true",
        help="skip the reference rows (untrained backbone, raw pixels)",
    )
    g.add_argument(
        "--keep-checkpoints",
        action="store_true",
        help="keep each run's checkpoint (~100 MB for resnet18) after the probe",
    )
    g.add_argument(
        "--fresh",
        action="store_true",
        help="re-run runs that already finished with the same config in --out",
    )
    g.add_argument(
        "--dry-run",
        action="store_true",
        help="write every run's config.yaml and command.sh, run nothing",
    )
    return p


def options_from_args(args: argparse.Namespace, passthrough: Sequence[str]) -> BenchOptions:
    """The :class:`BenchOptions` of a parsed command line."""
    return BenchOptions(
        preset=args.preset,
        epochs=args.epochs,
        batch_size=args.batch_size,
        seeds=args.seeds,
        num_train=args.num_train,
        num_val=args.num_val,
        num_workers=args.num_workers,
        limit_train_batches=args.limit_train_batches,
        methods=args.methods,
        num_positives=args.num_positives,
        extra_m=args.extra_m,
        time_matched=not args.no_time_matched,
        ablation=args.ablation,
        ablation_method=args.ablation_method,
        m_grid=args.m_grid,
        dpos_grid=args.dpos_grid,
        dneg_grid=args.dneg_grid,
        anchor_grid=args.anchor_grid,
        frontier=args.frontier,
        frontier_epochs=args.frontier_epochs,
        dataset=args.dataset,
        train_path=args.train_path,
        val_path=args.val_path,
        classes=args.classes,
        data_format=args.data_format,
        crop_size=args.crop_size,
        backbone=args.backbone,
        accelerator=args.accelerator,
        devices=args.devices,
        precision=args.precision,
        sets=list(args.sets),
        overrides=list(passthrough),
        out=args.out,
        data_cache=args.data_cache,
        offline_probe=not args.no_offline_probe,
        references=not args.no_references,
        keep_checkpoints=args.keep_checkpoints,
        fresh=args.fresh,
        dry_run=args.dry_run,
    )


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the benchmark from a command line; 0 when every run succeeded, 1 if some failed, 2 on
    bad settings."""
    argv = list(sys.argv[1:] if argv is None else argv)
    passthrough: List[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, passthrough = argv[:cut], argv[cut + 1 :]
    args = build_parser().parse_args(argv)
    # A plain `kill` should stop the training subprocess too: turn SIGTERM into SystemExit, which
    # run_pretrain() answers by terminating its child before re-raising.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    command = "attnce-bench" + ("" if not argv else " " + " ".join(map(shlex.quote, argv)))
    if passthrough:
        command += " -- " + " ".join(map(shlex.quote, passthrough))
    try:
        report = run_benchmark(options_from_args(args, passthrough), command)
    except (BenchConfigError, ValueError, FileNotFoundError, ImportError) as err:
        print(f"attnce-bench: error: {err}", file=sys.stderr)
        return 2
    if args.dry_run:
        return 0
    print()
    print(report.markdown)
    print(f"Wrote {report.out / 'results.md'}, summary.csv, runs.csv, results.png")
    if report.failed:
        print(
            f"{len(report.failed)} of {len(report.results)} runs failed or were skipped; see "
            "the notes above and each run's train.log.",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
