"""Tables (markdown + CSV) and a chart from the benchmark's run results.

Per-run rows go to ``runs.csv``; rows aggregated over seeds (mean +- sample std, ddof = 1) go to
``summary.csv`` and ``results.md``; ``results.png`` charts the accuracies with std error bars next
to time per epoch and peak memory.
"""

from __future__ import annotations

import csv
import math
import re
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple

#: Accuracy metrics: (RunResult attribute, column title).
METRICS: Tuple[Tuple[str, str], ...] = (
    ("knn_acc1", "online kNN top-1 %"),
    ("linear_acc1", "online linear top-1 %"),
    ("offline_knn_acc1", "offline kNN top-1 %"),
    ("offline_acc1", "offline linear top-1 %"),
)

#: Representation health of the frozen val features (probe.offline_health): (attribute, title,
#: digits). Shown in their own table, which only appears when some run has them.
HEALTH: Tuple[Tuple[str, str, int], ...] = (
    ("offline_uniformity", "uniformity (lower = more spread)", 2),
    ("offline_eff_rank", "effective rank", 1),
)

COMPARISONS = ("equal-epoch", "equal-time", "ablation", "reference", "frontier")


@dataclass
class Row:
    """One table row: one label of one comparison, aggregated over its seeds."""

    comparison: str
    label: str
    method: str
    num_positives: int
    seeds: List[int]
    epochs: List[int]
    failed_seeds: List[int] = field(default_factory=list)
    stats: Dict[str, Tuple[Optional[float], Optional[float]]] = field(default_factory=dict)
    seconds_per_epoch: Optional[float] = None
    train_seconds: Optional[float] = None
    peak_mem_mib: Optional[float] = None
    matched_to: Optional[str] = None


def mean_std(values: Sequence[Optional[float]]) -> Tuple[Optional[float], Optional[float]]:
    """Mean and sample std (ddof 1) of the non-missing values; std is None for fewer than 2."""
    vals = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not vals:
        return None, None
    mean = statistics.fmean(vals)
    return mean, (statistics.stdev(vals) if len(vals) > 1 else None)


def _get(result: Any, name: str) -> Any:
    if isinstance(result, dict):
        return result.get(name)
    value = getattr(result, name, None)
    return value


def aggregate(results: Iterable[Any]) -> List[Row]:
    """Group run results (RunResult objects or dicts) by (comparison, label), keeping first-seen
    order, and compute the per-row statistics over the successful seeds."""
    groups: Dict[Tuple[str, str], List[Any]] = {}
    for r in results:
        groups.setdefault((_get(r, "comparison"), _get(r, "label")), []).append(r)
    rows = []
    for (comparison, label), runs in groups.items():
        ok = [r for r in runs if _get(r, "status") == "ok"]
        first = runs[0]
        row = Row(
            comparison=comparison,
            label=label,
            method=_get(first, "method"),
            num_positives=int(_get(first, "num_positives") or 0),
            seeds=[int(_get(r, "seed")) for r in ok],
            epochs=sorted({int(_get(r, "epochs")) for r in ok}),
            failed_seeds=[int(_get(r, "seed")) for r in runs if _get(r, "status") != "ok"],
            matched_to=_get(first, "matched_to"),
        )
        for attr, _ in METRICS:
            row.stats[attr] = mean_std([_get(r, attr) for r in ok])
        for attr, _, _ in HEALTH:
            row.stats[attr] = mean_std([_get(r, attr) for r in ok])
        row.seconds_per_epoch = mean_std([_get(r, "seconds_per_epoch") for r in ok])[0]
        row.train_seconds = mean_std([_get(r, "train_seconds") for r in ok])[0]
        mems = [_mem(r) for r in ok]
        mems = [m for m in mems if m is not None]
        row.peak_mem_mib = max(mems) if mems else None
        rows.append(row)
    return rows


def _mem(result: Any) -> Optional[float]:
    pss = _get(result, "peak_pss_mib")
    return pss if pss is not None else _get(result, "peak_rss_mib")


def fmt_mean_std(pair: Tuple[Optional[float], Optional[float]], digits: int = 1) -> str:
    mean, std = pair
    if mean is None:
        return "n/a"
    if std is None:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def _fmt(value: Optional[float], digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _epochs(row: Row) -> str:
    return "/".join(str(e) for e in row.epochs) if row.epochs else "n/a"


def _seeds(row: Row) -> str:
    text = str(len(row.seeds))
    if row.failed_seeds:
        text += f" ({len(row.failed_seeds)} failed)"
    return text


def table(head: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A markdown table: a header line, a rule, one line per row (cells shown with ``str``).

    The one table writer of the benchmark and of every experiment in attnce_bench.
    """
    lines = ["| " + " | ".join(map(str, head)) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(map(str, cells)) + " |" for cells in rows]
    return "\n".join(lines)


def markdown_table(rows: Sequence[Row]) -> str:
    """A markdown table of rows: accuracies as mean ± std over seeds, time, memory."""
    head = (
        ["method", "epochs", "seeds"]
        + [title for _, title in METRICS]
        + ["s / epoch", "train s", "peak mem MiB"]
    )
    return table(
        head,
        [
            [row.label, _epochs(row), _seeds(row)]
            + [fmt_mean_std(row.stats.get(attr, (None, None))) for attr, _ in METRICS]
            + [_fmt(row.seconds_per_epoch), _fmt(row.train_seconds, 0), _fmt(row.peak_mem_mib, 0)]
            for row in rows
        ],
    )


def health_table(rows: Sequence[Row]) -> str:
    """A markdown table of the representation-health columns (mean ± std over seeds)."""
    head = ["method", "epochs", "seeds"] + [title for _, title, _ in HEALTH]
    return table(
        head,
        [
            [row.label, _epochs(row), _seeds(row)]
            + [
                fmt_mean_std(row.stats.get(attr, (None, None)), digits)
                for attr, _, digits in HEALTH
            ]
            for row in rows
        ],
    )


def _has_health(rows: Sequence[Row]) -> bool:
    return any(
        row.stats.get(attr, (None, None))[0] is not None for row in rows for attr, _, _ in HEALTH
    )


def _section_rows(rows: Sequence[Row], comparison: str) -> List[Row]:
    return [r for r in rows if r.comparison == comparison]


def equal_time_rows(rows: Sequence[Row]) -> List[Row]:
    """Each time-matched baseline followed by the AttentionNCE row whose time it matched."""
    by_label = {r.label: r for r in rows if r.comparison == "equal-epoch"}
    out: List[Row] = []
    for r in _section_rows(rows, "equal-time"):
        target = by_label.get(r.matched_to or "")
        out.append(r)
        if target is not None and target not in out:
            out.append(target)
    return out


def ablation_rows(rows: Sequence[Row], base_label: Optional[str]) -> List[Row]:
    out = [r for r in rows if r.comparison == "equal-epoch" and r.label == base_label]
    return out + _section_rows(rows, "ablation")


def render_markdown(
    rows: Sequence[Row], header: str, notes: Sequence[str] = (), ablation_base: Optional[str] = None
) -> str:
    """The whole results.md: header, one table per comparison present, notes."""
    parts = [header.rstrip(), ""]
    eq = _section_rows(rows, "equal-epoch") + _section_rows(rows, "reference")
    if eq:
        parts += [
            "## Equal epochs",
            "",
            "Every method for the same number of epochs, batch size "
            "and seeds"
            + (
                " (the last rows: the untrained backbone and the raw pixels, on "
                "the same images, for scale)"
                if _section_rows(rows, "reference")
                else ""
            )
            + ".",
            "",
            markdown_table(eq),
            "",
        ]
    et = equal_time_rows(rows)
    if et:
        parts += [
            "## Equal wall-clock",
            "",
            "Each baseline retrained for as many epochs as fit in "
            "the training time of the AttentionNCE variant listed under it (timed on the "
            "first seed's equal-epoch runs).",
            "",
            markdown_table(et),
            "",
        ]
    ab = ablation_rows(rows, ablation_base)
    if _section_rows(rows, "ablation"):
        parts += [
            "## Ablation",
            "",
            "One setting varied at a time around the base (first row).",
            "",
            markdown_table(ab),
            "",
        ]
    if _has_health(rows):
        # Frontier rows mix epoch budgets under one label: their table is the frontier's own.
        health_rows = [r for r in rows if r.seeds and r.comparison != "frontier"]
        parts += [
            "## Representation health",
            "",
            "Frozen backbone features of the validation "
            "images (the offline probe's), at most 2048 of them: uniformity (Wang & Isola, "
            "2020; t = 2, on L2-normalised features) and effective rank of their covariance "
            "(Roy & Vetterli, 2007; falls under dimensional collapse). See "
            "docs/attention-diagnostics.md.",
            "",
            health_table(health_rows),
            "",
        ]
    if notes:
        parts += ["## Notes", ""] + [f"- {n}" for n in notes] + [""]
    return "\n".join(parts)


def write_csvs(results: Sequence[Any], rows: Sequence[Row], out_dir: Path) -> Tuple[Path, Path]:
    """``runs.csv`` (one line per run) and ``summary.csv`` (one line per row)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    runs_path, summary_path = out_dir / "runs.csv", out_dir / "summary.csv"
    run_fields = [
        "comparison",
        "label",
        "method",
        "num_positives",
        "seed",
        "epochs",
        "status",
        "epochs_done",
        "knn_acc1",
        "linear_acc1",
        "offline_knn_acc1",
        "offline_acc1",
        "offline_l2",
        "offline_uniformity",
        "offline_eff_rank",
        "seconds_per_epoch",
        "train_seconds",
        "wall_seconds",
        "probe_seconds",
        "peak_rss_mib",
        "peak_pss_mib",
        "matched_to",
        "run_dir",
        "error",
    ]
    with runs_path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=run_fields, extrasaction="ignore")
        w.writeheader()
        for r in results:
            d = r if isinstance(r, dict) else asdict(r)
            w.writerow({k: d.get(k) for k in run_fields})
    with summary_path.open("w", newline="") as fh:
        w = csv.writer(fh)
        head = ["comparison", "label", "method", "num_positives", "epochs", "seeds", "failed_seeds"]
        for attr, _ in METRICS:
            head += [f"{attr}_mean", f"{attr}_std"]
        for attr, _, _ in HEALTH:
            head += [f"{attr}_mean", f"{attr}_std"]
        head += ["seconds_per_epoch", "train_seconds", "peak_mem_mib", "matched_to"]
        w.writerow(head)
        for row in rows:
            line: List[Any] = [
                row.comparison,
                row.label,
                row.method,
                row.num_positives,
                _epochs(row),
                " ".join(map(str, row.seeds)),
                " ".join(map(str, row.failed_seeds)),
            ]
            for attr in [a for a, _ in METRICS] + [a for a, _, _ in HEALTH]:
                mean, std = row.stats.get(attr, (None, None))
                line += [_num(mean), _num(std)]
            line += [
                _num(row.seconds_per_epoch),
                _num(row.train_seconds),
                _num(row.peak_mem_mib),
                row.matched_to or "",
            ]
            w.writerow(line)
    return runs_path, summary_path


def _num(value: Optional[float]) -> str:
    return "" if value is None else f"{value:.4f}"


def plot(rows: Sequence[Row], path: Path, title: str) -> Optional[Path]:
    """A PNG: grouped accuracy bars (mean, std error bars) per row, then s/epoch and memory.

    Returns None (and draws nothing) when there is no row with a result.
    """
    import matplotlib

    matplotlib.use("Agg")  # no display on servers / CI
    import matplotlib.pyplot as plt

    shown = [r for r in rows if r.seeds and r.comparison != "frontier"]
    if not shown:
        return None
    labels = [f"{r.label}\n[{r.comparison}, {_epochs(r)} ep]" for r in shown]
    y = list(range(len(shown)))
    fig, axes = plt.subplots(
        1,
        3,
        figsize=(16, 1.0 + 0.55 * len(shown) * 1.6),
        gridspec_kw={"width_ratios": [3, 1, 1]},
        sharey=True,
    )
    height = 0.8 / len(METRICS)
    for k, (attr, title_) in enumerate(METRICS):
        means = [r.stats[attr][0] or 0.0 for r in shown]
        errs = [r.stats[attr][1] or 0.0 for r in shown]
        offs = [v - 0.4 + height * (k + 0.5) for v in y]
        axes[0].barh(offs, means, height=height, xerr=errs, capsize=2, label=title_)
    axes[0].set_yticks(y)
    axes[0].set_yticklabels(labels, fontsize=8)
    axes[0].invert_yaxis()
    axes[0].set_xlabel("top-1 accuracy % (mean ± std over seeds)")
    axes[0].legend(
        fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=len(METRICS), frameon=False
    )
    axes[1].barh(y, [r.seconds_per_epoch or 0.0 for r in shown], color="gray")
    axes[1].set_xlabel("training s / epoch")
    axes[2].barh(y, [r.peak_mem_mib or 0.0 for r in shown], color="gray")
    axes[2].set_xlabel("peak memory MiB")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


#: Notes under every benchmark table (what each column is).
BENCH_NOTES = (
    "online kNN (k=20) and online linear probe: solo-learn's, inside main_pretrain.py, on the "
    "validation images after the last epoch (the kNN's train bank: the augmented anchor crops of "
    "the last epoch).",
    "offline kNN and offline linear probe: on frozen backbone features of the un-augmented "
    "training and validation images at the crop size (attnce_bench/probe.py): solo-learn's "
    "weighted kNN rule (k=20, cosine, T=0.07) and softmax regression (L-BFGS, L2 picked on a "
    "20 % hold-out); not solo's main_linear.py, which would upscale 32 px images to 224 px. "
    "'random init' is the same on the untrained backbone (one per seed), 'raw pixels' on the "
    "normalised images themselves.",
    "s / epoch: training time of an epoch (first batch to last batch, validation excluded), mean "
    "over epochs and seeds. train s: total training time of a run.",
    "peak mem: peak over the run of the summed PSS (RSS where PSS is unavailable) of the "
    "main_pretrain.py process tree, dataloader workers included; max over seeds.",
    "± is the sample standard deviation over seeds; a single seed shows no ±.",
)


def _last_line(text: str) -> str:
    lines = [
        t.strip()
        for t in text.splitlines()
        if t.strip() and not t.startswith("Set the environment")
    ]
    return lines[-1] if lines else "?"


def bench_markdown(
    results: Sequence[Any],
    command: str,
    preset: str,
    budget: Any,
    epochs: int,
    seeds: Sequence[int],
    data_note: str,
    total_seconds: float,
    machine: str,
    versions: str,
    when: str,
    ablation_base: Optional[str] = None,
    epochs_note: Optional[str] = None,
) -> str:
    """The benchmark's ``results.md``: header, tables, the runs' overrides, notes.

    ``epochs_note`` replaces "<epochs> epochs (equal-epoch)" in the header (the frontier's runs
    have several budgets)."""
    rows = aggregate(results)
    header = "\n".join(
        [
            "# attnce-bench results",
            "",
            f"- command: `{command}` (preset `{preset}`), {when}, total wall time "
            f"{total_seconds / 60:.1f} min",
            f"- machine: {machine}",
            f"- software: {versions}",
            f"- data: {data_note}",
            f"- budget: {epochs_note or f'{epochs} epochs (equal-epoch)'}, batch "
            f"{budget.batch_size}, seeds "
            f"{', '.join(map(str, seeds))}; each run is a shipped config plus the overrides below "
            "(its `config.yaml` and `command.sh` are in `runs/*/*/seed*/`)",
        ]
    )
    notes = list(BENCH_NOTES)
    failed = [r for r in results if _get(r, "status") != "ok"]
    if failed:
        notes.append(
            "FAILED or skipped runs: "
            + "; ".join(
                f"{_get(r, 'key')} ({_get(r, 'status')}: {_last_line(_get(r, 'error') or '')})"
                for r in failed
            )
        )
    md = render_markdown(rows, header, [], ablation_base=ablation_base)
    md += "\n" + overrides_section(results) + "\n## Notes\n\n" + "".join(f"- {n}\n" for n in notes)
    return md


def overrides_section(results: Sequence[Any]) -> str:
    """Which shipped config each kind of run used, and its overrides (the output folder shown as
    ``<out>``, seed-specific values as ``<seed>``, and, for a row trained at several epoch
    budgets as the frontier's are, the budget as ``<epochs>``)."""
    seen: Dict[str, Tuple[str, List[str]]] = {}
    budgets: Dict[str, Set[int]] = {}
    for r in results:
        run_dir = _get(r, "run_dir")
        label = str(_get(r, "label"))
        if run_dir and _get(r, "epochs") is not None:
            budgets.setdefault(label, set()).add(int(_get(r, "epochs")))
        if not run_dir or label in seen:
            continue
        path = Path(run_dir) / "config.yaml"
        if not path.is_file():
            continue
        lines = path.read_text().splitlines()
        name = lines[0].removeprefix("# ").split(" from ")[0] if lines else "?"
        # The output folder shown as <out>, so a report does not depend on where it was written.
        parts = Path(run_dir).parts
        out = (
            str(Path(*parts[: len(parts) - 1 - parts[::-1].index("runs")]))
            if "runs" in parts
            else None
        )
        lines = [ln.replace(out, "<out>") if out else ln for ln in lines]
        # One run per row is read; its seed-specific values (the run's name and folders, not the
        # data subset's "_seed0") stand for every seed's.
        overrides = [
            re.sub(
                r"(?<=[-/])seed\d+",
                "seed<seed>",
                re.sub(r"^\+\+seed=\d+$", "++seed=<seed>", ln[4:]),
            )
            for ln in lines[1:]
            if ln.startswith("#   ")
        ]
        seen[label] = (name, overrides)
    if not seen:
        return ""
    for label, (name, overrides) in seen.items():
        if len(budgets.get(label, ())) > 1:
            seen[label] = (
                name,
                [
                    re.sub(
                        r"/e\d+/",
                        "/e<epochs>/",
                        re.sub(r"^\+\+max_epochs=\d+$", "++max_epochs=<epochs>", o),
                    )
                    for o in overrides
                ],
            )
    common = set.intersection(*(set(o) for _, o in seen.values()))
    out = [
        "## Configs",
        "",
        "Every run is `main_pretrain.py --config-path pkg://attnce_plugin.configs "
        "--config-name <config> <overrides>`. Overrides of every run:",
        "",
    ]
    first = next(iter(seen.values()))[1]
    out += [f"    {o}" for o in first if o in common]
    out += ["", "| row | config | its own overrides |", "|---|---|---|"]
    for label, (name, overrides) in seen.items():
        own = " ".join(f"`{o}`" for o in overrides if o not in common) or "none"
        several = sorted(budgets.get(label, ()))
        if len(several) > 1:
            own += " (`<epochs>`: " + ", ".join(map(str, several)) + ")"
        out.append(f"| {label} | `{name}` | {own} |")
    return "\n".join(out) + "\n"


def write_bench_report(results: Sequence[Any], markdown: str, out: Path, title: str) -> None:
    """``results.md``, ``summary.csv``, ``runs.csv``, ``results.json`` and ``results.png``."""
    import json
    import sys

    out.mkdir(parents=True, exist_ok=True)
    (out / "results.md").write_text(markdown)
    rows = aggregate(results)
    write_csvs(results, rows, out)
    (out / "results.json").write_text(
        json.dumps([r if isinstance(r, dict) else asdict(r) for r in results], indent=2)
    )
    try:
        plot(rows, out / "results.png", title)
    except ImportError:
        print(
            "matplotlib is not installed: no results.png (pip install matplotlib)", file=sys.stderr
        )
