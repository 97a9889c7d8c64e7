"""What ``method_kwargs.batch_positives: true`` does to accuracy and training time.

AttentionNCE (M = 4) six ways: positives at the anchors' size or at ``--small-size`` px, each
forwarded per crop (solo-learn's way) or batched, and the small ones also with
``positives_update_bn: false`` (kept out of BatchNorm's running statistics); SimCLR once beside
them for scale. Same seeds, data and budget; checkpoints are kept (attention_vs_augmentation
measures them)::

    python3 -m benchmarks --experiment batch_positives_effect --out bench_out/batch_positives
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, List, Sequence, Tuple

from benchmarks.options import Options
from benchmarks.report import aggregate, fmt, get, table
from benchmarks.runs import Run

LABEL = "AttentionNCE (M=4)"


def variants(small_size: int) -> List[Tuple[str, str, Tuple[str, ...]]]:
    """(folder, positives description, overrides) of each AttentionNCE row."""
    if small_size < 1:
        raise ValueError(f"--small-size={small_size}: allowed values are integers >= 1")
    batched = ("++method_kwargs.batch_positives=true",)
    small = (f"++views.positive_crop_size={small_size}",)
    frozen = ("++method_kwargs.positives_update_bn=false",)
    px = f"{small_size} px"
    return [
        ("full_per_crop", "anchor size, per crop", ()),
        ("full_batched", "anchor size, batched", batched),
        ("small_per_crop", f"{px}, per crop", small),
        ("small_batched", f"{px}, batched", small + batched),
        ("small_per_crop_bn_frozen", f"{px}, per crop, positives_update_bn=false", small + frozen),
        ("small_batched_bn_frozen", f"{px}, batched, positives_update_bn=false",
         small + batched + frozen),
    ]  # fmt: skip


def runs(seeds: Sequence[int], epochs: int, small_size: int) -> List[Run]:
    """Per seed: SimCLR, then each variant in its own folder (``group``)."""
    out: List[Run] = []
    for seed in seeds:
        out.append(Run("SimCLR", "simclr", "equal-epoch", seed, epochs, group="full_per_crop"))
        for folder, desc, ovr in variants(small_size):
            settings = ("++views.num_positives=4",) + ovr
            out.append(Run(f"{LABEL}, {desc}", "attentionnce", "equal-epoch", seed, epochs,
                           settings, group=folder))  # fmt: skip
    return out


def summary(results: Sequence[Any]) -> str:
    """One line per row: kNN, online linear, offline probe (mean ± std), s / epoch, seeds ok."""
    head = ["method", "positives", "kNN acc", "online linear acc", "offline probe acc", "s/epoch",
            "seeds ok"]  # fmt: skip
    body = []
    for r in aggregate(results):
        if r.comparison != "equal-epoch":
            continue
        method, _, desc = r.label.partition(", ")
        cells = [fmt(r.stats[a]) for a in ("knn_acc1", "linear_acc1", "offline_acc1")]
        n = len(r.seeds)
        body.append([method, desc or "(none)", *cells, fmt(r.stats["seconds_per_epoch"], 2),
                     f"{n}/{n + len(r.failed)}"])  # fmt: skip
    return table(head, body)


def main(opts: Options, command: str) -> int:
    from benchmarks.__main__ import prepare_data, train_and_report
    from benchmarks.experiments import out_dir, seeds_epochs, write_table

    out = out_dir(opts, "batch_positives")
    seeds, epochs = seeds_epochs(opts)
    the_runs = runs(seeds, epochs, opts.small_size)
    opts = replace(opts, keep_checkpoints=True)
    results, _ = train_and_report(
        opts, the_runs, prepare_data(opts, out), out, command, "batch_positives_effect"
    )
    if opts.dry_run:
        return 0
    write_table(out, command, summary(results))
    return 0 if all(get(r, "status") == "ok" for r in results) else 1
