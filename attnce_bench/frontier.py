"""The accuracy-per-time frontier (``attnce-bench --frontier``).

Each variant (SimCLR, MoCo v3, AttentionNCE with M = 1, 2, 4, the multi-crop variant with small
positives per crop and batched, the MoCo form) is trained for several epoch budgets, each a full
run with its own learning-rate schedule, on every seed. Every point is (measured training seconds,
accuracy); the report says, for a grid of time budgets, which variant reaches the best accuracy
within the budget, by how much, and whether the lead is clear by the rule of docs/results.md (a
difference is clear when it exceeds the two standard deviations added); where the leader changes
from one budget to the next, the curves cross.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from attnce_bench.plan import RunSpec
from attnce_bench.report import fmt_mean_std, mean_std, table

MeanStd = Tuple[Optional[float], Optional[float]]


@dataclass(frozen=True)
class Variant:
    """One curve of the frontier: a bench method with its settings."""

    label: str
    method: str
    num_positives: int
    settings: Tuple[Tuple[str, object], ...] = ()


#: The curves, in table order. The multi-crop variant is the shipped attentionnce_multicrop.yaml.
VARIANTS: Tuple[Variant, ...] = (
    Variant("SimCLR", "simclr", 0),
    Variant("MoCo v3", "mocov3", 0),
    Variant("AttentionNCE (M=1)", "attentionnce", 1),
    Variant("AttentionNCE (M=2)", "attentionnce", 2),
    Variant("AttentionNCE (M=4)", "attentionnce", 4),
    Variant("AttentionNCE multicrop (M=4, small)", "attentionnce_multicrop", 4),
    Variant(
        "AttentionNCE multicrop (M=4, small, batched)",
        "attentionnce_multicrop",
        4,
        (("method_kwargs.batch_positives", True),),
    ),
    Variant("MoCo v3 + AttentionNCE (M=4)", "mocov3_attentionnce", 4),
)

#: (result attribute, title) of the accuracies the frontier reports; the first decides.
METRICS: Tuple[Tuple[str, str], ...] = (
    ("knn_acc1", "online kNN top-1 %"),
    ("linear_acc1", "online linear top-1 %"),
    ("offline_acc1", "offline linear top-1 %"),
)


def variants_for(methods: Sequence[str]) -> List[Variant]:
    """The variants whose bench method is in ``methods`` (the multi-crop ones go with
    ``attentionnce``)."""
    wanted = set(methods)
    if "attentionnce" in wanted:
        wanted.add("attentionnce_multicrop")
    return [v for v in VARIANTS if v.method in wanted]


def build_frontier_plan(
    methods: Sequence[str], epochs: Sequence[int], seeds: Sequence[int]
) -> List[RunSpec]:
    """Every (variant, epoch budget, seed) run, seed-major so a first seed completes early.

    Raises:
        ValueError: no variant selected, or a budget < 1.
    """
    chosen = variants_for(methods)
    if not chosen:
        raise ValueError(f"--frontier: no variant for methods {list(methods)}")
    if not epochs or any(int(e) < 1 for e in epochs):
        raise ValueError(f"--frontier-epochs={list(epochs)}: allowed values are integers >= 1")
    return [
        RunSpec(v.label, v.method, "frontier", seed, int(e), v.num_positives, v.settings)
        for seed in seeds
        for v in chosen
        for e in sorted(set(int(x) for x in epochs))
    ]


@dataclass
class Point:
    """One variant at one epoch budget, over its seeds."""

    label: str
    epochs: int
    seeds: int
    failed: int
    seconds: MeanStd
    stats: Dict[str, MeanStd] = field(default_factory=dict)


def _get(r: Any, name: str) -> Any:
    return r.get(name) if isinstance(r, dict) else getattr(r, name, None)


def frontier_points(results: Sequence[Any]) -> List[Point]:
    """Aggregate the frontier runs over seeds: one :class:`Point` per (label, epochs)."""
    groups: Dict[Tuple[str, int], List[Any]] = {}
    for r in results:
        if _get(r, "comparison") == "frontier":
            groups.setdefault((_get(r, "label"), int(_get(r, "epochs"))), []).append(r)
    order = {v.label: i for i, v in enumerate(VARIANTS)}
    points = []
    for (label, epochs), runs in sorted(
        groups.items(), key=lambda kv: (order.get(kv[0][0], 99), kv[0][1])
    ):
        ok = [r for r in runs if _get(r, "status") == "ok"]
        points.append(
            Point(
                label=label,
                epochs=epochs,
                seeds=len(ok),
                failed=len(runs) - len(ok),
                seconds=mean_std([_get(r, "train_seconds") for r in ok]),
                stats={attr: mean_std([_get(r, attr) for r in ok]) for attr, _ in METRICS},
            )
        )
    return points


def clear(a: MeanStd, b: MeanStd) -> Optional[bool]:
    """Whether mean a exceeds mean b by more than std_a + std_b (None without both stds)."""
    if a[0] is None or b[0] is None or a[1] is None or b[1] is None:
        return None
    return a[0] - b[0] > a[1] + b[1]


def best_within(points: Sequence[Point], budget: float, metric: str) -> Dict[str, Point]:
    """Each variant's best point (by mean ``metric``) among those trained in <= ``budget`` s."""
    best: Dict[str, Point] = {}
    for p in points:
        secs, value = p.seconds[0], p.stats[metric][0]
        if secs is None or value is None or secs > budget:
            continue
        if p.label not in best or value > best[p.label].stats[metric][0]:
            best[p.label] = p
    return best


def budget_grid(points: Sequence[Point], steps: int = 6) -> List[float]:
    """Time budgets from the fastest point to the slowest, evenly spaced in log time."""
    secs = sorted(p.seconds[0] for p in points if p.seconds[0] is not None)
    if not secs:
        return []
    lo, hi = secs[0], secs[-1]
    if hi <= lo:
        return [lo]
    return [lo * (hi / lo) ** (i / (steps - 1)) for i in range(steps)]


@dataclass
class Verdict:
    """The leader at one time budget."""

    budget: float
    leader: Optional[Point]
    runner_up: Optional[Point]
    margin: Optional[float]
    is_clear: Optional[bool]


def verdicts(
    points: Sequence[Point], metric: str = "knn_acc1", budgets: Optional[Sequence[float]] = None
) -> List[Verdict]:
    """The best variant within each time budget, its margin over the second, and whether that
    margin is clear."""
    out = []
    for budget in budgets if budgets is not None else budget_grid(points):
        ranked = sorted(
            best_within(points, budget, metric).values(),
            key=lambda p: p.stats[metric][0],
            reverse=True,
        )
        leader = ranked[0] if ranked else None
        second = ranked[1] if len(ranked) > 1 else None
        margin = None
        is_clear = None
        if leader is not None and second is not None:
            margin = leader.stats[metric][0] - second.stats[metric][0]
            is_clear = clear(leader.stats[metric], second.stats[metric])
        out.append(Verdict(budget, leader, second, margin, is_clear))
    return out


#: The curves that are solo-learn's own methods; every other variant uses AttentionNCE.
BASELINES: Tuple[str, ...] = ("SimCLR", "MoCo v3")


@dataclass
class FamilyVerdict:
    """The best AttentionNCE variant against the best baseline at one time budget."""

    budget: float
    baseline: Optional[Point]
    attention: Optional[Point]
    gap: Optional[float]
    is_clear: Optional[bool]


def family_verdicts(
    points: Sequence[Point], metric: str = "knn_acc1", budgets: Optional[Sequence[float]] = None
) -> List[FamilyVerdict]:
    """At each time budget, the best AttentionNCE point against the best baseline point (SimCLR
    or MoCo v3); ``gap`` is AttentionNCE minus baseline, ``is_clear`` whether ``|gap|`` exceeds the
    two stds added (the sign says who leads)."""
    out = []
    for budget in budgets if budgets is not None else budget_grid(points):
        best = best_within(points, budget, metric)
        sides = []
        for is_base in (True, False):
            own = [p for p in best.values() if (p.label in BASELINES) == is_base]
            sides.append(max(own, key=lambda p: p.stats[metric][0]) if own else None)
        base, attn = sides
        gap = is_clear = None
        if base is not None and attn is not None:
            gap = attn.stats[metric][0] - base.stats[metric][0]
            a, b = (attn, base) if gap >= 0 else (base, attn)
            is_clear = clear(a.stats[metric], b.stats[metric])
        out.append(FamilyVerdict(budget, base, attn, gap, is_clear))
    return out


def crossings(found: Sequence[Verdict]) -> List[str]:
    """Where the leader changes from one budget to the next."""
    out = []
    for before, after in zip(found, found[1:]):
        if before.leader and after.leader and before.leader.label != after.leader.label:
            out.append(
                f"between {before.budget:.0f} s and {after.budget:.0f} s: "
                f"{before.leader.label} -> {after.leader.label}"
            )
    return out


def _point_label(p: Optional[Point]) -> str:
    return "n/a" if p is None else f"{p.label}, {p.epochs} ep"


def markdown(results: Sequence[Any]) -> str:
    """The frontier section of results.md: the points, then the verdict per time budget."""
    points = frontier_points(results)
    if not points:
        return ""
    rows = [
        [
            p.label,
            str(p.epochs),
            str(p.seeds) + (f" ({p.failed} failed)" if p.failed else ""),
            fmt_mean_std(p.seconds, 0),
        ]
        + [fmt_mean_std(p.stats[a]) for a, _ in METRICS]
        for p in points
    ]
    parts = [
        "## Accuracy per training time (frontier)",
        "",
        "Each variant trained for each epoch budget (a full run with its own schedule), mean ± "
        "std over seeds; train s is the measured training time of the run.",
        "",
        table(["variant", "epochs", "seeds", "train s"] + [t for _, t in METRICS], rows),
        "",
    ]
    for attr, title in METRICS:
        found = verdicts(points, attr)
        vrows = []
        for v in found:
            verdict = (
                "clear"
                if v.is_clear
                else "not clear (within the stds added)" if v.is_clear is False else "n/a"
            )
            vrows.append(
                [
                    f"{v.budget:.0f}",
                    _point_label(v.leader),
                    "n/a" if v.leader is None else fmt_mean_std(v.leader.stats[attr]),
                    _point_label(v.runner_up),
                    "n/a" if v.margin is None else f"{v.margin:+.1f}",
                    verdict,
                ]
            )
        parts += [
            f"### Best {title} within a time budget",
            "",
            table(["budget s", "best", "its accuracy", "second", "margin (points)", "lead"], vrows),
            "",
        ]
        cross = crossings(found)
        parts += [
            "Leader changes (curves crossing): " + ("; ".join(cross) if cross else "none") + ".",
            "",
        ]
        frows = []
        for f in family_verdicts(points, attr):
            lead = (
                "n/a"
                if f.is_clear is None
                else ("AttentionNCE" if f.gap >= 0 else "baseline")
                + (" ahead, clear" if f.is_clear else " ahead, not clear")
            )
            frows.append(
                [
                    f"{f.budget:.0f}",
                    _point_label(f.baseline),
                    "n/a" if f.baseline is None else fmt_mean_std(f.baseline.stats[attr]),
                    _point_label(f.attention),
                    "n/a" if f.attention is None else fmt_mean_std(f.attention.stats[attr]),
                    "n/a" if f.gap is None else f"{f.gap:+.1f}",
                    lead,
                ]
            )
        parts += [
            f"Best AttentionNCE variant against the best of SimCLR and MoCo v3, {title}:",
            "",
            table(
                ["budget s", "best baseline", "its accuracy", "best AttentionNCE", "its accuracy"]
                + ["gap (points)", "lead"],
                frows,
            ),
            "",
        ]
    return "\n".join(parts)


def plot(results: Sequence[Any], path: Path, title: str) -> Optional[Path]:
    """Accuracy against training seconds (top) and against epochs (bottom), one line per
    variant, std error bars. None when there is nothing to plot."""
    points = frontier_points(results)
    if not points:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(METRICS), figsize=(5.2 * len(METRICS), 8.5), squeeze=False)
    labels = list(dict.fromkeys(p.label for p in points))
    for row, x_of in enumerate((lambda p: p.seconds[0], lambda p: p.epochs)):
        for col, (attr, name) in enumerate(METRICS):
            ax = axes[row][col]
            for i, label in enumerate(labels):
                pts = [
                    p
                    for p in points
                    if p.label == label and p.stats[attr][0] is not None and x_of(p) is not None
                ]
                if not pts:
                    continue
                ax.errorbar(
                    [x_of(p) for p in pts],
                    [p.stats[attr][0] for p in pts],
                    yerr=[p.stats[attr][1] or 0.0 for p in pts],
                    marker="o",
                    capsize=3,
                    color=f"C{i}",
                    label=label,
                )
            ax.set_title(name, fontsize=10)
            ax.set_xlabel("training seconds" if row == 0 else "epochs")
            if row == 0:
                ax.set_xscale("log")
            ax.set_ylabel("top-1 % (mean ± std over seeds)")
    handles, names = axes[0][0].get_legend_handles_labels()
    fig.legend(
        handles, names, loc="lower center", ncol=min(4, len(names)), fontsize=8, frameon=False
    )
    fig.suptitle(title, fontsize=9)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def one_line_verdicts(results: Sequence[Any], metric: str = "knn_acc1") -> List[str]:
    """One line per time budget: who leads, by how much, clear or not."""
    out = []
    for v in verdicts(frontier_points(results), metric):
        if v.leader is None:
            continue
        lead = (
            ""
            if v.margin is None
            else (
                f" by {v.margin:+.1f} over {v.runner_up.label} ({v.runner_up.epochs} ep), "
                + ("clear" if v.is_clear else "not clear" if v.is_clear is False else "no std")
            )
        )
        out.append(
            f"<= {v.budget:.0f} s: {v.leader.label} ({v.leader.epochs} ep, "
            f"{fmt_mean_std(v.leader.stats[metric])}){lead}"
        )
    return out
