#!/usr/bin/env python3
"""SimCLR against AttentionNCE as the share of false negatives grows (K-class Fashion-MNIST).

With K classes in equal shares and negatives drawn uniformly from the batch, about 1/K of an
anchor's negatives show an image of its own class (false negatives): (N/K - 1) / (N - 1) of them
for N training images. Training on K = 2, 5 and 10 classes of Fashion-MNIST therefore sets the
false-negative rate to about 1/2, 1/5 and 1/10, with everything else held fixed: the same total
number of training and validation images (class-stratified), the same budget, the same view recipe.

For each K this script runs the benchmark (:func:`attnce_bench.api.run_benchmark`) on a
class-subset copy of Fashion-MNIST (``BenchOptions.classes``) for SimCLR and AttentionNCE (SimCLR
form), plus one AttentionNCE run per ``--dneg-grid`` value (the bench's ablation with only its
d_neg grid). The K
classes are the first K of a seeded permutation of the 10 label ids (``--class-seed``, default 0:
4 coat, 6 shirt, 2 pullover, 7 sneaker, 3 dress, 5 sandal, 9 ankle boot, 0 t-shirt, 8 bag,
1 trouser), so the subsets are nested: each larger K adds classes to the smaller one.

The runs are the bench's Fashion-MNIST runs (the shipped configs plus the bench's overrides) on
the class subset. solo-learn counts class folders for its online linear classifier and the
validation classes for its kNN, so both see K classes.

Output under ``--out`` (default ``bench_out/false_negatives``): ``table.md`` (also printed),
``table.csv``, ``plot.png``, and per K the bench's own folder ``K<k>/`` (results.md, runs/, ...)
whose finished runs a re-run reuses; the converted images go to ``data/``.

Usage::

    python3 -m attnce_bench.experiments.false_negatives --preset smoke --classes 2,5   # minutes
    python3 -m attnce_bench.experiments.false_negatives --classes 2,5,10 --dneg-grid 1,10 --seeds 0,1
    python3 -m attnce_bench.experiments.false_negatives --preset long --out bench_out/fn_long \\
        -- --accelerator gpu --devices 0 --precision 16-mixed   # after --: more attnce-bench flags
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import math
import shlex
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

# solo-learn's dependencies warn at import; keep the output readable.
warnings.filterwarnings("ignore", category=FutureWarning)
warnings.filterwarnings("ignore", category=UserWarning)
warnings.filterwarnings("ignore", category=DeprecationWarning)

from attnce_bench.arglists import float_list, int_list  # noqa: E402
from attnce_bench.data import CLASS_NAMES, DatasetMissingError  # noqa: E402
from attnce_bench.plan import PRESETS  # noqa: E402
from attnce_bench.report import aggregate, fmt_mean_std, table  # noqa: E402

#: The K values 2..10 that a class subset of Fashion-MNIST allows (K = 1 has no negatives of
#: another class at all).
ALLOWED_K = range(2, len(CLASS_NAMES) + 1)

#: The bench methods compared (solo-learn's SimCLR and the plugin's SimCLR-form AttentionNCE).
METHODS = ("simclr", "attentionnce")

#: Bench options this script sets itself; passing them after ``--`` would break its layout.
RESERVED_BENCH_FLAGS = frozenset(
    {
        "--out",
        "--dataset",
        "--train-path",
        "--val-path",
        "--data-cache",
        "--methods",
        "--extra-m",
        "--no-time-matched",
        "--ablation",
        "--ablation-method",
        "--m-grid",
        "--dpos-grid",
        "--dneg-grid",
        "--anchor-grid",
        "--preset",
        "--seeds",
        "--epochs",
        "--batch-size",
        "--num-train",
        "--num-val",
        "--dry-run",
        "--crop-size",
        "--classes",
    }
)

#: (RunResult attribute, table column title) of the accuracies reported.
METRICS: Tuple[Tuple[str, str], ...] = (
    ("knn_acc1", "kNN top-1 %"),
    ("linear_acc1", "online linear top-1 %"),
    ("offline_knn_acc1", "offline kNN top-1 %"),
    ("offline_acc1", "offline linear top-1 %"),
)

MeanStd = Tuple[Optional[float], Optional[float]]


# --------------------------------------------------------------------------------------------
# Command line


def build_parser() -> argparse.ArgumentParser:
    """The command line (budget flags mean what they mean for ``attnce_bench``)."""
    p = argparse.ArgumentParser(
        prog="python3 -m attnce_bench.experiments.false_negatives",
        description=__doc__.split("\n\n")[0],
        epilog="Arguments after '--' go to every bench invocation unchanged (e.g. --accelerator "
        "gpu --devices 0, --no-offline-probe, --fresh, --set KEY=VALUE); a second '--' inside "
        "them starts the bench's raw Hydra overrides.",
    )
    p.add_argument(
        "--preset",
        default="default",
        choices=sorted(PRESETS),
        help="the bench's budget preset (default: default)",
    )
    p.add_argument("--seeds", type=int_list, help="e.g. 0,1 (default: the preset's)")
    p.add_argument("--epochs", type=int, help="pretraining epochs (default: the preset's)")
    p.add_argument("--batch-size", type=int, help="images per step (default: the preset's)")
    p.add_argument(
        "--num-train",
        type=int,
        help="training images at every K, stratified (default: the preset's)",
    )
    p.add_argument(
        "--num-val",
        type=int,
        help="validation images at every K, stratified (default: the preset's)",
    )
    p.add_argument(
        "--classes",
        type=int_list,
        default=[2, 5, 10],
        help="numbers of classes K, each in 2..10 (default 2,5,10)",
    )
    p.add_argument(
        "--class-seed",
        type=int,
        default=0,
        help="seed of the class permutation whose first K ids are used (default 0)",
    )
    p.add_argument(
        "--dneg-grid",
        type=float_list,
        default=[],
        help="extra AttentionNCE rows at these d_neg values, e.g. 1,10 (default none)",
    )
    p.add_argument(
        "--data-source",
        type=Path,
        help="folder with the 4 Fashion-MNIST IDX files (default: $FASHION_MNIST_DIR "
        "or Debian's /usr/share/datasets/fashion-mnist)",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path("bench_out/false_negatives"),
        help="output folder (default ./bench_out/false_negatives, git-ignored)",
    )
    return p


@dataclass(frozen=True)
class Budget:
    """The resolved budget: the preset's values, overridden by the flags given."""

    preset: str
    seeds: Tuple[int, ...]
    epochs: int
    batch_size: int
    num_train: int
    num_val: int
    num_workers: int


def resolve_budget(args: argparse.Namespace) -> Budget:
    """Fill the budget flags left out with the preset's values."""
    pre = PRESETS[args.preset]

    def pick(flag: Any, preset_value: Any) -> Any:
        return preset_value if flag is None else flag

    return Budget(
        preset=pre.name,
        seeds=tuple(pick(args.seeds, pre.seeds)),
        epochs=pick(args.epochs, pre.epochs),
        batch_size=pick(args.batch_size, pre.batch_size),
        num_train=pick(args.num_train, pre.num_train),
        num_val=pick(args.num_val, pre.num_val),
        num_workers=pre.num_workers,
    )


def validate(args: argparse.Namespace, budget: Budget, bench_extra: Sequence[str]) -> None:
    """Refuse bad inputs before anything is trained.

    Raises:
        ValueError: naming the flag and the allowed values.
    """
    ks = args.classes
    bad = [k for k in ks if k not in ALLOWED_K]
    if not ks or bad:
        raise ValueError(
            f"--classes={','.join(map(str, ks)) or '(empty)'}: allowed values are "
            f"K in {ALLOWED_K.start}..{ALLOWED_K.stop - 1}"
            + (f" ({bad[0]} is not)" if bad else ", at least one")
        )
    if len(set(ks)) != len(ks):
        raise ValueError(f"--classes={','.join(map(str, ks))}: each K at most once")
    if not budget.seeds or len(set(budget.seeds)) != len(budget.seeds):
        raise ValueError(
            f"--seeds={list(budget.seeds)}: allowed values are distinct integers, " "at least one"
        )
    bad_d = [d for d in args.dneg_grid if not (math.isfinite(d) and d > 0)]
    if bad_d:
        raise ValueError(
            f"--dneg-grid: {bad_d[0]} is not allowed; allowed values are finite " "numbers > 0"
        )
    if len(set(args.dneg_grid)) != len(args.dneg_grid):
        raise ValueError(f"--dneg-grid={args.dneg_grid}: each value at most once")
    if budget.epochs < 1 or budget.batch_size < 1:
        raise ValueError(
            f"--epochs={budget.epochs} / --batch-size={budget.batch_size}: allowed "
            "values are >= 1"
        )
    if budget.num_train < budget.batch_size:
        # solo-learn's training loader drops the last incomplete batch: no step at all otherwise.
        raise ValueError(
            f"--num-train={budget.num_train}: allowed values are >= --batch-size "
            f"({budget.batch_size})"
        )
    if budget.num_val < max(ks):
        # solo's kNN counts classes from the validation targets: every class must be there.
        raise ValueError(
            f"--num-val={budget.num_val}: allowed values are >= the largest K ({max(ks)})"
        )
    for token in bench_extra:
        if token == "--":
            break  # the rest are Hydra overrides for main_pretrain.py
        if token.split("=", 1)[0] in RESERVED_BENCH_FLAGS:
            raise ValueError(
                f"{token.split('=', 1)[0]} after '--': this script sets it; use its own "
                "flag (see --help) instead"
            )


# --------------------------------------------------------------------------------------------
# Classes and data


def class_order(seed: int) -> List[int]:
    """The 10 Fashion-MNIST label ids in a seeded random order; K classes are its first K."""
    import numpy as np

    return [int(c) for c in np.random.default_rng(seed).permutation(len(CLASS_NAMES))]


def classes_for(k: int, order: Sequence[int]) -> List[int]:
    """The K label ids used at K, sorted (nested: classes_for(k) is inside classes_for(k + 1))."""
    return sorted(order[:k])


def false_negative_rate(k: int) -> float:
    """Share of an anchor's negatives that show its class, with K balanced classes (large N)."""
    return 1.0 / k


def bench_options(
    budget: Budget,
    classes: Sequence[int],
    out: Path,
    data_cache: Path,
    dneg_grid: Sequence[float],
    extra: Sequence[str],
) -> Any:
    """The benchmark's options for one K: SimCLR and AttentionNCE on the class subset, plus the
    ``--dneg-grid`` AttentionNCE rows; ``extra`` are attnce-bench flags (and after a second
    ``--``, raw Hydra overrides) for hardware and evaluation."""
    from attnce_bench.__main__ import build_parser, options_from_args

    flags, overrides = (list(extra), [])
    if "--" in flags:
        cut = flags.index("--")
        flags, overrides = flags[:cut], flags[cut + 1 :]
    base = options_from_args(build_parser().parse_args(flags), overrides)
    return dataclasses.replace(
        base,
        preset=budget.preset,
        seeds=budget.seeds,
        epochs=budget.epochs,
        batch_size=budget.batch_size,
        num_train=budget.num_train,
        num_val=budget.num_val,
        classes=list(classes),
        methods=METHODS,
        time_matched=False,
        extra_m=(),
        # The bench's ablation with empty M and d_pos grids adds exactly one AttentionNCE run per
        # d_neg (at the shipped config's M and d_pos); a d_neg equal to the config's is the
        # equal-epoch run already, which the bench does not repeat.
        ablation=bool(dneg_grid),
        m_grid=(),
        dpos_grid=(),
        dneg_grid=tuple(dneg_grid),
        out=str(out),
        data_cache=str(data_cache),
    )


# --------------------------------------------------------------------------------------------
# Aggregation and table (pure: dicts in, rows and text out)


@dataclass
class KRow:
    """One table row: one method setting at one K, over its seeds."""

    k: int
    label: str
    method: str
    d_neg: Optional[float]
    epochs: str
    seeds: int
    failed_seeds: int = 0
    stats: Dict[str, MeanStd] = field(default_factory=dict)
    #: AttentionNCE minus SimCLR kNN accuracy at the same K (mean, combined std); None otherwise.
    knn_gap: Optional[MeanStd] = None

    @property
    def chance(self) -> float:
        return 100.0 / self.k


def _run_method_kwargs(result: Dict[str, Any]) -> Dict[str, Any]:
    """method_kwargs of the config a run used (its run folder's config.yaml); {} if unreadable."""
    path = Path(result.get("run_dir") or "") / "config.yaml"
    if not result.get("run_dir") or not path.is_file():
        return {}
    from omegaconf import OmegaConf

    kwargs = OmegaConf.to_container(OmegaConf.load(path)).get("method_kwargs")
    return dict(kwargs) if isinstance(kwargs, dict) else {}


def attention_setting(result: Dict[str, Any]) -> Tuple[Optional[float], Optional[float]]:
    """(d_pos, d_neg) of an AttentionNCE run: its plan settings, else its config.yaml."""
    settings = result.get("settings") or {}
    kwargs: Dict[str, Any] = {}
    if not {"method_kwargs.d_pos", "method_kwargs.d_neg"} <= settings.keys():
        kwargs = _run_method_kwargs(result)  # the base run: its d values are the config's
    d_pos = settings.get("method_kwargs.d_pos", kwargs.get("d_pos"))
    d_neg = settings.get("method_kwargs.d_neg", kwargs.get("d_neg"))
    return (None if d_pos is None else float(d_pos)), (None if d_neg is None else float(d_neg))


def display_label(result: Dict[str, Any]) -> str:
    """Row name: "SimCLR", "AttentionNCE (M=4, d_pos=1, d_neg=10)", "random init"."""
    if result.get("comparison") == "reference":
        return str(result["label"])
    if result.get("method") != "attentionnce":
        return str(result["label"])
    d_pos, d_neg = attention_setting(result)
    if d_pos is None or d_neg is None:
        return str(result["label"])
    return f"AttentionNCE (M={result.get('num_positives')}, d_pos={d_pos:g}, d_neg={d_neg:g})"


def combined_gap(a: MeanStd, b: MeanStd) -> MeanStd:
    """a - b for two (mean, std) pairs; the std is sqrt(std_a^2 + std_b^2) (independent runs),
    None unless both stds are known."""
    if a[0] is None or b[0] is None:
        return None, None
    std = math.hypot(a[1], b[1]) if a[1] is not None and b[1] is not None else None
    return a[0] - b[0], std


def build_rows(results_by_k: Dict[int, Sequence[Dict[str, Any]]]) -> List[KRow]:
    """Aggregate each K's run results (the bench's results.json dicts) over seeds into rows.

    Rows come in K order, then in the bench's run order (SimCLR, AttentionNCE, its d_neg grid,
    random init). Every AttentionNCE row gets its kNN gap to the SimCLR row of the same K.
    """
    rows: List[KRow] = []
    for k in sorted(results_by_k):
        relabelled = [dict(r, label=display_label(r)) for r in results_by_k[k]]
        d_negs = {
            r["label"]: attention_setting(r)[1]
            for r in relabelled
            if r.get("method") == "attentionnce"
        }
        k_rows = []
        for row in aggregate(relabelled):
            k_rows.append(
                KRow(
                    k=k,
                    label=row.label,
                    method=row.method,
                    d_neg=d_negs.get(row.label),
                    epochs="/".join(map(str, row.epochs)) or "n/a",
                    seeds=len(row.seeds),
                    failed_seeds=len(row.failed_seeds),
                    stats={attr: row.stats.get(attr, (None, None)) for attr, _ in METRICS},
                )
            )
        simclr = next((r for r in k_rows if r.method == "simclr"), None)
        for r in k_rows:
            if r.method == "attentionnce" and simclr is not None:
                r.knn_gap = combined_gap(r.stats["knn_acc1"], simclr.stats["knn_acc1"])
        rows.extend(k_rows)
    return rows


def _signed(pair: Optional[MeanStd]) -> str:
    if pair is None:
        return "—"  # not an AttentionNCE row
    if pair[0] is None:
        return "n/a"
    mean, std = pair
    return f"{mean:+.1f}" + ("" if std is None else f" ± {std:.1f}")


def markdown_table(rows: Sequence[KRow]) -> str:
    """The combined table: one line per K x method setting."""
    head = (
        ["K", "false-neg. rate", "chance %", "method", "epochs", "seeds"]
        + [t for _, t in METRICS]
        + ["kNN gap vs SimCLR (points)"]
    )
    return table(
        head,
        [
            [
                str(r.k),
                f"1/{r.k} = {false_negative_rate(r.k):.2f}",
                f"{r.chance:.1f}",
                r.label,
                r.epochs,
                str(r.seeds) + (f" ({r.failed_seeds} failed)" if r.failed_seeds else ""),
            ]
            + [fmt_mean_std(r.stats.get(a, (None, None))) for a, _ in METRICS]
            + [_signed(r.knn_gap)]
            for r in rows
        ],
    )


def write_csv(rows: Sequence[KRow], path: Path, classes_by_k: Dict[int, Sequence[int]]) -> Path:
    """One line per row, numbers unformatted (empty where missing)."""

    def num(value: Optional[float]) -> str:
        return "" if value is None else f"{value:.4f}"

    head = [
        "k",
        "false_negative_rate",
        "chance_acc",
        "classes",
        "method",
        "label",
        "d_neg",
        "epochs",
        "seeds",
        "failed_seeds",
    ]
    for attr, _ in METRICS:
        head += [f"{attr}_mean", f"{attr}_std"]
    head += ["knn_gap_mean", "knn_gap_std"]
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(head)
        for r in rows:
            gap = r.knn_gap or (None, None)
            line = [
                r.k,
                num(false_negative_rate(r.k)),
                num(r.chance),
                " ".join(map(str, classes_by_k.get(r.k, ()))),
                r.method,
                r.label,
                num(r.d_neg),
                r.epochs,
                r.seeds,
                r.failed_seeds,
            ]
            for attr, _ in METRICS:
                line += [num(v) for v in r.stats.get(attr, (None, None))]
            w.writerow(line + [num(gap[0]), num(gap[1])])
    return path


def plot(rows: Sequence[KRow], path: Path, title: str) -> Optional[Path]:
    """Accuracy against false-negative rate (1/K), one line per method, std error bars, chance
    dashed; last panel the AttentionNCE - SimCLR kNN gap. None when no row has a result."""
    import matplotlib

    matplotlib.use("Agg")  # no display on servers / CI
    import matplotlib.pyplot as plt

    panels = [
        (a, t) for a, t in METRICS if any(r.stats.get(a, (None, None))[0] is not None for r in rows)
    ]
    if not panels:
        return None
    ks = sorted({r.k for r in rows})
    rates = [false_negative_rate(k) for k in ks]
    # One colour per method across all panels, so the gap panel reads against the others.
    colours = {label: f"C{i}" for i, label in enumerate(dict.fromkeys(r.label for r in rows))}
    fig, axes = plt.subplots(
        1, len(panels) + 1, figsize=(4.6 * (len(panels) + 1), 4.8), squeeze=False
    )

    def lines(ax: Any, value: Any) -> None:
        for label, colour in colours.items():
            pts = [
                (false_negative_rate(r.k), *value(r))
                for r in rows
                if r.label == label and value(r)[0] is not None
            ]
            if pts:
                ax.errorbar(
                    [p[0] for p in pts],
                    [p[1] for p in pts],
                    yerr=[p[2] or 0.0 for p in pts],
                    marker="o",
                    capsize=3,
                    color=colour,
                    label=label,
                )

    for ax, (attr, name) in zip(axes[0], panels):
        ax.plot(rates, [100.0 * r for r in rates], "k--", lw=1, label="chance (100/K)")
        lines(ax, lambda r, a=attr: r.stats.get(a, (None, None)))
        ax.set_title(name, fontsize=10)
        ax.set_ylabel("top-1 accuracy % (mean ± std over seeds)")
    gap_ax = axes[0][-1]
    gap_ax.axhline(0.0, color="k", lw=1)
    lines(gap_ax, lambda r: r.knn_gap or (None, None))
    gap_ax.set_title("AttentionNCE - SimCLR, kNN top-1", fontsize=10)
    gap_ax.set_ylabel("points (± combined std)")
    for ax in axes[0]:
        ax.set_xticks(rates)
        ax.set_xticklabels([f"1/{k}" for k in ks])
        ax.set_xlabel("false-negative rate 1/K")
    handles = {}
    for ax in axes[0]:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    fig.legend(
        handles.values(),
        handles.keys(),
        loc="lower center",
        ncol=min(4, len(handles)),
        fontsize=8,
        frameon=False,
    )
    fig.suptitle(title, fontsize=9)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def render(
    rows: Sequence[KRow],
    command: str,
    budget: Budget,
    classes_by_k: Dict[int, Sequence[int]],
    failures: Sequence[str],
) -> str:
    """table.md: the command as a comment line, the setting, the table, how to read it."""
    names = "; ".join(
        f"K={k}: " + ", ".join(CLASS_NAMES[c] for c in classes_by_k[k])
        for k in sorted(classes_by_k)
    )
    parts = [
        f"<!-- {command} -->",
        "",
        f"False negatives: SimCLR vs AttentionNCE on K-class Fashion-MNIST (preset "
        f"`{budget.preset}`: {budget.epochs} epoch{'s' if budget.epochs != 1 else ''}, "
        f"batch {budget.batch_size}, seeds "
        f"{','.join(map(str, budget.seeds))}; {budget.num_train} training / {budget.num_val} "
        f"validation images at every K, class-stratified; classes {names}).",
        "",
        markdown_table(rows),
        "",
        "- false-neg. rate: share of an anchor's negatives from its own class, about 1/K with "
        "balanced classes. Accuracies of different K are not comparable (chance is 100/K and the "
        "classes differ); compare methods within a K, e.g. with the gap column.",
        "- kNN (k=20) and online linear: solo-learn's, on the validation images after the last "
        "epoch; offline kNN and linear: the bench's on frozen features (random init: the untrained "
        "backbone; raw pixels: the images). ± is the sample std over seeds; the gap's ± is "
        "sqrt(std_A^2 + std_SimCLR^2).",
    ]
    if failures:
        parts.append("- FAILED: " + "; ".join(failures))
    return "\n".join(parts) + "\n"


# --------------------------------------------------------------------------------------------


def _command(argv: Sequence[str]) -> str:
    return " ".join(
        ["python3 -m attnce_bench.experiments.false_negatives", *map(shlex.quote, argv)]
    )


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Validate, prepare one class subset per K, run the bench per K, then tabulate and plot."""
    argv = list(sys.argv[1:] if argv is None else argv)
    ours, extra = (
        (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    )
    parser = build_parser()
    args = parser.parse_args(ours)
    budget = resolve_budget(args)
    try:
        validate(args, budget, extra)
    except ValueError as err:
        parser.error(str(err))  # exits 2

    from attnce_bench.api import run_benchmark
    from attnce_bench.compose import BenchConfigError
    from attnce_bench.data import prepare_fashion_mnist
    from attnce_plugin.solo_compat import require_solo

    out = args.out.resolve()
    order = class_order(args.class_seed)
    classes_by_k = {k: classes_for(k, order) for k in args.classes}
    # All data first: a missing IDX folder or a class too small for --num-train stops the script
    # before any training rather than after the first K.
    try:
        require_solo()
        for k in args.classes:
            prepare_fashion_mnist(
                out / "data",
                budget.num_train,
                budget.num_val,
                source=args.data_source,
                classes=classes_by_k[k],
            )
        opts = {
            k: bench_options(
                budget, classes_by_k[k], out / f"K{k}", out / "data", args.dneg_grid, extra
            )
            for k in args.classes
        }
    except (DatasetMissingError, ValueError, ImportError, SystemExit) as err:
        print(f"false_negatives: error: {err}", file=sys.stderr)
        return 2

    results_by_k: Dict[int, List[Dict[str, Any]]] = {}
    failures: List[str] = []
    for k in sorted(args.classes):
        print(f"== K={k} (classes {classes_by_k[k]})", file=sys.stderr, flush=True)
        try:
            report = run_benchmark(opts[k], command=f"false_negatives K={k}")
        except (BenchConfigError, ValueError) as err:  # every K would fail the same way
            print(f"false_negatives: error: the bench refused its settings: {err}", file=sys.stderr)
            return 2
        results_by_k[k] = [dataclasses.asdict(r) for r in report.results]
        if report.failed or not report.results:
            failures.append(
                f"K={k}: {len(report.failed)} run(s) failed, see {report.out}/results.md"
            )

    rows = build_rows(results_by_k)
    md = render(rows, _command(argv), budget, classes_by_k, failures)
    (out / "table.md").write_text(md)
    write_csv(rows, out / "table.csv", classes_by_k)
    try:
        png = plot(rows, out / "plot.png", _command(argv))
    except ImportError:
        png = None
        print("matplotlib is not installed: no plot.png (pip install matplotlib)", file=sys.stderr)
    print(md)
    print(f"Wrote {out / 'table.md'}, {out / 'table.csv'}" + (f", {png}" if png else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
