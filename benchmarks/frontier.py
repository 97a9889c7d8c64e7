"""The accuracy-per-time frontier (``python3 -m benchmarks --frontier``).

Each variant is trained for several epoch budgets, each a full run with its own learning-rate
schedule, on every seed; every point is (measured training seconds, accuracy). For a grid of time
budgets the report names the best variant within the budget and the next one, and the best
AttentionNCE variant against the best of SimCLR and MoCo v3, each gap judged by the one noise rule
(:func:`benchmarks.report.verdict`). Where the leader changes between budgets, the curves cross.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from benchmarks.report import MeanStd, fmt, get, line_plot, mean_std, table, verdict
from benchmarks.runs import Run, attention_run

#: The curves in table order: (label, method, M, method_kwargs); M = 0 is solo-learn's own loss.
VARIANTS: Tuple[Tuple[str, str, int, Dict[str, object]], ...] = (
    ("SimCLR", "simclr", 0, {}),
    ("MoCo v3", "mocov3", 0, {}),
    ("AttentionNCE (M=1)", "attentionnce", 1, {}),
    ("AttentionNCE (M=2)", "attentionnce", 2, {}),
    ("AttentionNCE (M=4)", "attentionnce", 4, {}),
    ("AttentionNCE multicrop (M=4, small)", "attentionnce_multicrop", 4, {}),
    ("AttentionNCE multicrop (M=4, small, batched)", "attentionnce_multicrop", 4,
     {"batch_positives": True}),
    ("MoCo v3 + AttentionNCE (M=4)", "mocov3_attentionnce", 4, {}),
)  # fmt: skip

#: The curves that are solo-learn's own methods; every other one uses AttentionNCE.
BASELINES: Tuple[str, ...] = ("SimCLR", "MoCo v3")

#: (result attribute, title) of the accuracies reported; online kNN decides.
METRICS: Tuple[Tuple[str, str], ...] = (
    ("knn_acc1", "online kNN top-1 %"),
    ("linear_acc1", "online linear top-1 %"),
    ("offline_acc1", "offline linear top-1 %"),
)


def runs(methods: Sequence[str], epochs: Sequence[int], seeds: Sequence[int]) -> List[Run]:
    """Every (variant, epoch budget) run, seed-major so that a first seed completes early; the
    multi-crop variants come with ``attentionnce``.

    Raises:
        ValueError: no variant for ``methods``, or a budget below 1.
    """
    wanted = set(methods) | ({"attentionnce_multicrop"} if "attentionnce" in methods else set())
    chosen = [v for v in VARIANTS if v[1] in wanted]
    if not chosen:
        raise ValueError(f"--frontier: no variant for --methods {list(methods)}")
    if not epochs or any(int(e) < 1 for e in epochs):
        raise ValueError(f"--frontier-epochs={list(epochs)}: allowed values are integers >= 1")
    out = []
    for seed in seeds:
        for label, method, m, kwargs in chosen:
            for e in sorted({int(x) for x in epochs}):
                run = attention_run(method, m, "frontier", seed, e, **kwargs) if m else None
                out.append(
                    replace(run, label=label) if run else Run(label, method, "frontier", seed, e)
                )
    return out


@dataclass
class Point:
    """One variant at one epoch budget, over its successful seeds."""

    label: str
    epochs: int
    seeds: int
    failed: int
    seconds: MeanStd
    stats: Dict[str, MeanStd]


def points(results: Sequence[Any]) -> List[Point]:
    """The frontier runs grouped by (variant, epochs), in :data:`VARIANTS` then epoch order."""
    groups: Dict[Tuple[str, int], List[Any]] = {}
    for r in results:
        if get(r, "comparison") == "frontier":
            groups.setdefault((get(r, "label"), int(get(r, "epochs"))), []).append(r)
    order = {v[0]: i for i, v in enumerate(VARIANTS)}
    out = []
    for (label, epochs), rs in sorted(
        groups.items(), key=lambda kv: (order.get(kv[0][0], 99), kv[0][1])
    ):
        ok = [r for r in rs if get(r, "status") == "ok"]
        stats = {a: mean_std([get(r, a) for r in ok]) for a, _ in METRICS}
        seconds = mean_std([get(r, "train_seconds") for r in ok])
        out.append(Point(label, epochs, len(ok), len(rs) - len(ok), seconds, stats))
    return out


def budgets(pts: Sequence[Point], steps: int = 6) -> List[float]:
    """Time budgets from the fastest point to the slowest, evenly spaced in log time."""
    secs = sorted(p.seconds[0] for p in pts if p.seconds[0] is not None)
    if not secs or secs[-1] <= secs[0]:
        return secs[:1]
    lo, hi = secs[0], secs[-1]
    return [lo * (hi / lo) ** (i / (steps - 1)) for i in range(steps)]


def best(pts: Sequence[Point], budget: float, metric: str, skip: Sequence[str] = (),
         baselines: Optional[bool] = None) -> Optional[Point]:  # fmt: skip
    """The point of highest mean ``metric`` trained within ``budget`` seconds, leaving out the
    labels in ``skip``; ``baselines`` True / False keeps only SimCLR and MoCo v3 / only the rest."""
    fits = [
        p for p in pts
        if p.seconds[0] is not None and p.seconds[0] <= budget and p.stats[metric][0] is not None
        and p.label not in skip and (baselines is None or (p.label in BASELINES) == baselines)
    ]  # fmt: skip
    return max(fits, key=lambda p: p.stats[metric][0], default=None)


def _cell(p: Optional[Point], metric: str) -> str:
    return "n/a" if p is None else f"{p.label}, {p.epochs} ep: {fmt(p.stats[metric])}"


def _gap(a: Optional[Point], b: Optional[Point], metric: str) -> str:
    return "n/a" if a is None or b is None else verdict(a.stats[metric], b.stats[metric])


def markdown(results: Sequence[Any]) -> str:
    """The frontier section of results.md: the points, then per metric and time budget the best
    variant, its lead over the next, and the best AttentionNCE variant against the best baseline."""
    pts = points(results)
    if not pts:
        return ""
    rows = [
        [p.label, p.epochs, f"{p.seeds}" + (f" ({p.failed} failed)" if p.failed else ""),
         fmt(p.seconds, 0), *[fmt(p.stats[a]) for a, _ in METRICS]]
        for p in pts
    ]  # fmt: skip
    parts = [
        "## Accuracy per training time (frontier)",
        "",
        "Each variant trained for each epoch budget (a full run with its own schedule), mean ± "
        "std over seeds; train s is the measured training time of the run.", "",
        table(["variant", "epochs", "seeds", "train s", *[t for _, t in METRICS]], rows), "",
        "A time budget admits every point trained within it. Gaps are judged by the one noise "
        "rule: clear when larger than the two stds added (benchmarks/report.py: verdict).", "",
    ]  # fmt: skip
    head = ["budget s", "best", "next variant", "lead", "best baseline", "best AttentionNCE"]
    for attr, title in METRICS:
        body, leaders = [], []
        for b in budgets(pts):
            top = best(pts, b, attr)
            nxt = best(pts, b, attr, skip=[top.label]) if top else None
            base, attn = best(pts, b, attr, baselines=True), best(pts, b, attr, baselines=False)
            leaders.append((b, top))
            body.append([f"{b:.0f}", _cell(top, attr), _cell(nxt, attr), _gap(top, nxt, attr),
                         _cell(base, attr), _cell(attn, attr), _gap(attn, base, attr)])  # fmt: skip
        cross = [
            f"between {b0:.0f} s and {b1:.0f} s: {p0.label} -> {p1.label}"
            for (b0, p0), (b1, p1) in zip(leaders, leaders[1:])
            if p0 and p1 and p0.label != p1.label
        ]
        parts += [f"### Best {title} within a time budget", "",
                  table(head + ["AttentionNCE - baseline"], body), "",
                  f"Leader changes (curves crossing): {'; '.join(cross) or 'none'}.",
                  ""]  # fmt: skip
    return "\n".join(parts)


def plot(results: Sequence[Any], path: Path, title: str) -> Optional[Path]:
    """Online kNN against training seconds, one line per variant, std error bars."""
    series: Dict[str, List[Tuple[float, MeanStd]]] = {}
    for p in points(results):
        if p.seconds[0] is not None:
            series.setdefault(p.label, []).append((p.seconds[0], p.stats["knn_acc1"]))
    if not series:
        return None
    return line_plot(series, path, title, "training seconds", "online kNN top-1 % (mean ± std)")
