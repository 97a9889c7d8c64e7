#!/usr/bin/env python3
"""What ``method_kwargs.batch_positives: true`` does to accuracy and training time.

Runs the benchmark (:func:`attnce_bench.api.run_benchmark`, solo-learn's ``main_pretrain.py``
on the embedded Fashion-MNIST subset) for AttentionNCE (M = 4) six times: positives at the anchors'
size or at ``--small-size`` px, each with the positives forwarded per crop (solo-learn's way) or
batched, and the small ones also with ``positives_update_bn: false``. Same seeds, data and budget; SimCLR is run once beside them for scale. Each variant has
its own output folder, so a re-run reuses finished runs. Prints one table: kNN / online linear /
offline probe accuracy (mean +- std over seeds) and seconds per epoch.

Usage::

    python3 -m attnce_bench.experiments.batch_positives_effect --out bench_out/batch_positives
    python3 -m attnce_bench.experiments.batch_positives_effect --preset smoke --out bench_out/bp_smoke   # minutes
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from attnce_bench.api import BenchOptions
from attnce_bench.report import fmt_mean_std, mean_std, table

#: (folder, positives description, extra --set values); the first also runs SimCLR.
Variant = Tuple[str, str, List[str]]


def variants(small_size: int) -> List[Variant]:
    """The settings compared: positive size x per-crop/batched, and for small positives whether
    they update BatchNorm's running statistics."""
    batched = ["attentionnce:method_kwargs.batch_positives=true"]
    small = [f"attentionnce:views.positive_crop_size={small_size}"]
    frozen = ["attentionnce:method_kwargs.positives_update_bn=false"]
    return [
        ("full_per_crop", "anchor size, per crop", []),
        ("full_batched", "anchor size, batched", batched),
        ("small_per_crop", f"{small_size} px, per crop", small),
        ("small_batched", f"{small_size} px, batched", small + batched),
        # Small positives kept out of BatchNorm's running statistics (evaluation uses them).
        (
            "small_per_crop_bn_frozen",
            f"{small_size} px, per crop, positives_update_bn=false",
            small + frozen,
        ),
        (
            "small_batched_bn_frozen",
            f"{small_size} px, batched, positives_update_bn=false",
            small + batched + frozen,
        ),
    ]


def bench_options(
    out: Path, sets: Sequence[str], with_simclr: bool, base: BenchOptions
) -> BenchOptions:
    """The benchmark's options for one variant (``base`` holds the budget)."""
    return dataclasses.replace(
        base,
        out=str(out),
        sets=list(sets),
        time_matched=False,
        extra_m=(),
        methods=("simclr", "attentionnce") if with_simclr else ("attentionnce",),
    )


def summary(runs: Sequence[Dict[str, Any]], label: str) -> Dict[str, str]:
    """Mean +- std over seeds of the runs labelled ``label`` (failed runs count as missing)."""
    mine = [r for r in runs if r["label"] == label and r["comparison"] == "equal-epoch"]
    ok = [r for r in mine if r["status"] == "ok"]
    cell = {
        k: fmt_mean_std(mean_std([r.get(k) for r in ok]))
        for k in ("knn_acc1", "linear_acc1", "offline_acc1")
    }
    cell["s_per_epoch"] = fmt_mean_std(mean_std([r.get("seconds_per_epoch") for r in ok]), 2)
    cell["seeds"] = f"{len(ok)}/{len(mine)}"
    return cell


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=Path("bench_out/batch_positives"))
    parser.add_argument("--small-size", type=int, default=16, help="small positive crop size (px)")
    parser.add_argument("--preset", default="default", help="benchmark preset (smoke/default/long)")
    parser.add_argument("--seeds", default=None, help="e.g. 0,1 (default: the preset's)")
    args = parser.parse_args(argv)
    if args.small_size < 1:
        parser.error(f"--small-size must be an integer >= 1, got {args.small_size}")
    from attnce_bench.api import run_benchmark

    # One converted dataset for all variants; checkpoints kept for
    # attnce_bench.experiments.attention_vs_augmentation.
    base = BenchOptions(
        preset=args.preset,
        data_cache=str(args.out / "data"),
        keep_checkpoints=True,
        seeds=[int(x) for x in args.seeds.split(",")] if args.seeds else None,
    )
    rows: List[Tuple[str, Dict[str, str]]] = []
    simclr: Optional[Dict[str, str]] = None
    for i, (folder, description, sets) in enumerate(variants(args.small_size)):
        report = run_benchmark(
            bench_options(args.out / folder, sets, i == 0, base),
            command=f"batch_positives_effect {folder}",
        )
        if report.failed:
            print(
                f"error: the benchmark failed for {folder}; see {report.out}/results.md",
                file=sys.stderr,
            )
            return 1
        runs = [dataclasses.asdict(r) for r in report.results]
        rows.append((description, summary(runs, "AttentionNCE (M=4)")))
        if i == 0:
            simclr = summary(runs, "SimCLR")

    cli = " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    print(f"<!-- python3 -m attnce_bench.experiments.batch_positives_effect {cli} -->")
    shown = ([("SimCLR", "(none)", simclr)] if simclr else []) + [
        ("AttentionNCE (M=4)", d, c) for d, c in rows
    ]
    print(
        table(
            [
                "method",
                "positives",
                "kNN acc",
                "online linear acc",
                "offline probe acc",
                "s/epoch",
                "seeds ok",
            ],
            [
                [
                    m,
                    d,
                    c["knn_acc1"],
                    c["linear_acc1"],
                    c["offline_acc1"],
                    c["s_per_epoch"],
                    c["seeds"],
                ]
                for m, d, c in shown
            ],
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
