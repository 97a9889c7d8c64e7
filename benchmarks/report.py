"""The one table writer, the one noise rule and the one plot helper of every benchmark report."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple

#: (mean, sample std); std is None with fewer than 2 values, mean None with none.
MeanStd = Tuple[Optional[float], Optional[float]]


def table(head: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A markdown table: a header line, a rule, one line per row (cells shown with ``str``)."""
    lines = ["| " + " | ".join(map(str, head)) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(map(str, cells)) + " |" for cells in rows]
    return "\n".join(lines)


def mean_std(values: Sequence[Optional[float]]) -> MeanStd:
    """Mean and sample std (ddof 1) of the finite values given."""
    vals = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not vals:
        return None, None
    return statistics.fmean(vals), (statistics.stdev(vals) if len(vals) > 1 else None)


def fmt(pair: MeanStd, digits: int = 1) -> str:
    """``"mean ± std"``, ``"mean"`` for one value, ``"n/a"`` for none."""
    mean, std = pair
    if mean is None:
        return "n/a"
    return f"{mean:.{digits}f}" if std is None else f"{mean:.{digits}f} ± {std:.{digits}f}"


def clear(a: MeanStd, b: MeanStd) -> Optional[bool]:
    """The project's noise rule: a beats b clearly when mean_a - mean_b > std_a + std_b.

    Stds are the sample stds over seeds; None (undecided) unless both have 2+ seeds.
    """
    if a[0] is None or b[0] is None or a[1] is None or b[1] is None:
        return None
    return a[0] - b[0] > a[1] + b[1]


def verdict(a: MeanStd, b: MeanStd) -> str:
    """``"+1.2, clear"`` / ``"-0.3, not clear"`` / ``"+0.5, one seed"``: a - b and the noise rule,
    applied in whichever direction the gap points."""
    if a[0] is None or b[0] is None:
        return "n/a"
    gap = a[0] - b[0]
    decided = clear(a, b) if gap >= 0 else clear(b, a)
    word = "one seed" if decided is None else "clear" if decided else "not clear"
    return f"{gap:+.1f}, {word}"


def line_plot(
    series: Dict[str, Sequence[Tuple[float, MeanStd]]],
    path: Path,
    title: str,
    xlabel: str,
    ylabel: str,
) -> Optional[Path]:
    """One line with error bars per series ``{label: [(x, (mean, std)), ...]}``; None without
    matplotlib (the benchmark's tables do not need it)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, points in series.items():
        pts = sorted((x, m, s or 0.0) for x, (m, s) in points if m is not None)
        if pts:
            xs, ms, ss = zip(*pts)
            ax.errorbar(xs, ms, yerr=ss, marker="o", capsize=3, label=label)
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
