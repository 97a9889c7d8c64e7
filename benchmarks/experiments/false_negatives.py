"""SimCLR against AttentionNCE as the share of false negatives grows (K-class Fashion-MNIST).

With K balanced classes about 1/K of an anchor's negatives show its own class. Training on the
first K classes of a seeded permutation of the ten labels (``--class-seed``, default 0: coat,
shirt, pullover, sneaker, dress, sandal, ankle boot, t-shirt, bag, trouser; the subsets are
nested) sets that rate with everything else fixed: the same numbers of training and validation
images at every K (class-stratified), the same budget and views. Per K: SimCLR, AttentionNCE at
the shipped d_neg and at each ``--dneg-grid`` value, and the reference rows; each K has its own
benchmark folder ``<out>/K<k>/`` (results.md, runs/, reused by digest)::

    python3 -m benchmarks --experiment false_negatives --class-counts 2,5,10 --dneg-grid 1,10 \\
        --seeds 0,1 --out bench_out/false_negatives
"""

from __future__ import annotations

import csv
import math
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

from benchmarks.options import Options
from benchmarks.report import aggregate, fmt, get, line_plot, table, verdict
from benchmarks.runs import PRESETS, Run, attention_run

METRICS = (
    ("knn_acc1", "kNN top-1 %"),
    ("linear_acc1", "online linear top-1 %"),
    ("offline_knn_acc1", "offline kNN top-1 %"),
    ("offline_acc1", "offline linear top-1 %"),
)


def class_order(seed: int) -> List[int]:
    """The 10 label ids in a seeded order; K classes are its first K."""
    import numpy as np

    return [int(c) for c in np.random.default_rng(seed).permutation(10)]


def validate(opts: Options) -> None:
    """Refuse bad settings before any training (errors name the flag and the allowed values)."""
    preset = PRESETS[opts.preset]
    ks, seeds = opts.class_counts, list(opts.seeds or preset.seeds)
    if not ks or any(k not in range(2, 11) for k in ks) or len(set(ks)) != len(ks):
        raise ValueError(f"--class-counts={list(ks)}: allowed values are distinct K in 2..10")
    if opts.dataset != "fashion_mnist":
        raise ValueError("--experiment false_negatives: only --dataset fashion_mnist has classes")
    if opts.classes is not None:  # the old spelling of --class-counts meant something else here
        raise ValueError("--experiment false_negatives picks its classes: give the numbers of "
                         "classes as --class-counts (e.g. 2,5,10), not --classes")  # fmt: skip
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds={seeds}: allowed values are distinct integers, at least one")
    if any(not (math.isfinite(d) and d > 0) for d in opts.dneg_grid):
        raise ValueError(f"--dneg-grid={list(opts.dneg_grid)}: allowed values are numbers > 0")
    n_train, n_val = opts.num_train or preset.num_train, opts.num_val or preset.num_val
    if n_train < (opts.batch_size or preset.batch_size):  # solo drops the incomplete batch
        raise ValueError(f"--num-train={n_train}: allowed values are >= --batch-size")
    if n_val < max(ks):  # solo's kNN counts classes from the validation targets
        raise ValueError(f"--num-val={n_val}: allowed values are >= the largest K ({max(ks)})")


def runs(
    seeds: Sequence[int], epochs: int, m: int, d_pos: float, d_negs: Sequence[float]
) -> List[Run]:
    """One K's runs, per seed: SimCLR, then AttentionNCE at each d_neg (the shipped one first)."""
    out: List[Run] = []
    for seed in seeds:
        out.append(Run("SimCLR", "simclr", "equal-epoch", seed, epochs))
        out += [attention_run("attentionnce", m, "equal-epoch", seed, epochs, d_pos=d_pos,
                              d_neg=float(d)) for d in dict.fromkeys(d_negs)]  # fmt: skip
    return out


def rows(results_by_k: Dict[int, Sequence[Any]]) -> List[Tuple[int, Any, str]]:
    """(K, aggregated row, kNN verdict against SimCLR at that K or "—"), in K then run order."""
    out = []
    for k in sorted(results_by_k):
        agg = aggregate(results_by_k[k])
        simclr = next((r for r in agg if r.label == "SimCLR"), None)
        for r in agg:
            attn = r.label.startswith("AttentionNCE") and simclr is not None
            gap = verdict(r.stats["knn_acc1"], simclr.stats["knn_acc1"]) if attn else "—"
            out.append((k, r, gap))
    return out


def markdown(found: Sequence[Tuple[int, Any, str]]) -> str:
    head = ["K", "false-neg. rate", "chance %", "method", "epochs", "seeds",
            *[t for _, t in METRICS], "kNN vs SimCLR"]  # fmt: skip
    body = [
        [k, f"1/{k} = {1 / k:.2f}", f"{100 / k:.1f}", r.label, ",".join(map(str, r.epochs)) or "0",
         str(len(r.seeds)) + (f" ({len(r.failed)} failed)" if r.failed else ""),
         *[fmt(r.stats[a]) for a, _ in METRICS], gap]
        for k, r, gap in found
    ]  # fmt: skip
    notes = [
        "false-neg. rate: share of an anchor's negatives from its own class, about 1/K. "
        "Accuracies of different K are not comparable (chance is 100/K and the classes differ); "
        "compare methods within a K.",
        "kNN vs SimCLR: the gap and the one noise rule (clear when it exceeds the two stds "
        "added; benchmarks/report.py). ± is the sample std over seeds.",
    ]
    return table(head, body) + "\n\n" + "".join(f"- {n}\n" for n in notes)


def write_csv(found: Sequence[Tuple[int, Any, str]], path: Path) -> None:
    """One line per row, numbers unformatted (empty where missing)."""
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        stat_cols = [f"{a}_{s}" for a, _ in METRICS for s in ("mean", "std")]
        w.writerow(["k", "label", "epochs", "seeds", *stat_cols, "knn_vs_simclr"])
        for k, r, gap in found:
            stats = ["" if v is None else f"{v:.4f}" for a, _ in METRICS for v in r.stats[a]]
            w.writerow([k, r.label, ",".join(map(str, r.epochs)), len(r.seeds), *stats, gap])


def main(opts: Options, command: str) -> int:
    from benchmarks.__main__ import prepare_data, shipped, train_and_report
    from benchmarks.data import CLASS_NAMES
    from benchmarks.experiments import out_dir, seeds_epochs, write_table

    validate(opts)
    root = out_dir(opts, "false_negatives")
    opts = replace(opts, data_cache=opts.data_cache or str(root / "data"))
    seeds, epochs = seeds_epochs(opts)
    order = class_order(opts.class_seed)
    classes = {k: sorted(order[:k]) for k in opts.class_counts}
    data = {k: prepare_data(opts, root, classes=classes[k]) for k in classes}  # all data first
    d_pos, d_neg = (shipped("attentionnce", opts.dataset, key) for key in ("d_pos", "d_neg"))
    the_runs = runs(seeds, epochs, opts.num_positives, d_pos, (d_neg, *opts.dneg_grid))
    results_by_k: Dict[int, List[Any]] = {}
    for k in sorted(classes):
        results_by_k[k], _ = train_and_report(
            opts, the_runs, data[k], root / f"K{k}", f"{command} (K={k})", f"false_negatives K={k}"
        )
    if opts.dry_run:
        return 0
    found = rows(results_by_k)
    names = "; ".join(f"K={k}: " + ", ".join(CLASS_NAMES[c] for c in classes[k]) for k in classes)
    write_table(root, command, f"False negatives: SimCLR vs AttentionNCE on K-class Fashion-MNIST "
                f"({epochs} epochs, seeds {','.join(map(str, seeds))}; classes {names}).\n\n"
                + markdown(found))  # fmt: skip
    write_csv(found, root / "table.csv")
    series: Dict[str, List[Tuple[float, Any]]] = {}
    for k, r, _ in found:
        series.setdefault(r.label, []).append((1 / k, r.stats["knn_acc1"]))
    line_plot(series, root / "plot.png", command, "false-negative rate 1/K", "kNN top-1 %")
    failed = [r for rs in results_by_k.values() for r in rs if get(r, "status") != "ok"]
    return 1 if failed else 0
