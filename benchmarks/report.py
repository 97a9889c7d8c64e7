"""The one table writer, the one noise rule and the one plot helper of every benchmark report."""

from __future__ import annotations

import math
import os
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from benchmarks.runs import REFERENCE_LABELS

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


# ------------------------------------------------------------------ the benchmark's results.md

#: (result attribute, column title) of the accuracies, then of the representation health.
METRICS: Tuple[Tuple[str, str], ...] = (
    ("knn_acc1", "online kNN top-1 %"),
    ("linear_acc1", "online linear top-1 %"),
    ("offline_knn_acc1", "offline kNN top-1 %"),
    ("offline_acc1", "offline linear top-1 %"),
)
#: The offline probes a learning-curve point holds.
PROBES = ("offline_acc1", "offline_knn_acc1")
HEALTH: Tuple[Tuple[str, str], ...] = (
    ("offline_uniformity", "uniformity (lower = more spread)"),
    ("offline_eff_rank", "effective rank"),
)

NOTES = (
    "online kNN (k=20) and online linear: solo-learn's, inside main_pretrain.py, on the validation "
    "images after the last epoch (the kNN's bank: the last epoch's augmented anchor crops).",
    "offline kNN and linear: frozen backbone features of the un-augmented training and validation "
    "images at the crop size (benchmarks/probe.py): solo-learn's weighted kNN rule (k=20, cosine, "
    "T=0.07) and softmax regression (L-BFGS, L2 picked on a 20 % hold-out). 'random init' is the "
    "untrained backbone (one per seed), 'raw pixels' the normalised images themselves.",
    "s / epoch: training time of an epoch (its start to its last batch, validation excluded), mean over "
    "epochs and seeds; train s: a run's total. peak mem: peak summed PSS of the main_pretrain.py "
    "process tree (dataloader workers included), max over seeds.",
    "± is the sample std over seeds. A gap is clear when it exceeds the two stds added "
    "(benchmarks/report.py: clear).",
)


@dataclass
class Row:
    """One label of one comparison, over its seeds."""

    comparison: str
    label: str
    seeds: List[int]
    failed: List[int]
    epochs: List[int]
    stats: Dict[str, MeanStd]
    matched_to: Optional[str] = None
    run_dir: str = ""
    #: Seeds not run for a stated reason (an equal-time row whose timings are on two CPUs).
    skipped: List[int] = field(default_factory=list)


def get(result: Any, name: str) -> Any:
    """An attribute of a result object or a key of its ``result.json`` dict."""
    return result.get(name) if isinstance(result, dict) else getattr(result, name, None)


def trained_on(results: Iterable[Any]) -> str:
    """Each CPU the trained rows ran on, with its rows: parts run on different machines add up
    to one table, and their seconds compare only within one CPU."""
    rows: Dict[str, List[str]] = {}
    for r in results:
        if get(r, "status") == "ok" and get(r, "comparison") != "reference":
            labels = rows.setdefault(get(r, "cpu") or "not recorded", [])
            label = f"{get(r, 'label')} ({get(r, 'comparison')})"
            if label not in labels:
                labels.append(label)
    return "; ".join(f"{cpu}: {', '.join(labels)}" for cpu, labels in rows.items())


def aggregate(results: Iterable[Any]) -> List[Row]:
    """Results grouped by (comparison, label) in first-seen order, with mean ± std over the
    successful seeds of every metric, ``seconds_per_epoch``, ``train_seconds``; peak memory is the
    max."""
    groups: Dict[Tuple[str, str], List[Any]] = {}
    for r in results:
        groups.setdefault((get(r, "comparison"), get(r, "label")), []).append(r)
    rows = []
    for (comparison, label), runs in groups.items():
        ok = [r for r in runs if get(r, "status") == "ok"]
        stats = {
            a: mean_std([get(r, a) for r in ok])
            for a in [m for m, _ in METRICS + HEALTH] + ["seconds_per_epoch", "train_seconds"]
        }
        mems = [get(r, "peak_mem_mib") for r in ok if get(r, "peak_mem_mib") is not None]
        stats["peak_mem_mib"] = (max(mems) if mems else None, None)
        rows.append(
            Row(
                comparison, label, [int(get(r, "seed")) for r in ok],
                [int(get(r, "seed")) for r in runs if get(r, "status") not in ("ok", "skipped")],
                sorted({int(get(r, "epochs")) for r in ok}), stats,
                get(runs[0], "matched_to"), next((get(r, "run_dir") for r in ok), ""),
                [int(get(r, "seed")) for r in runs if get(r, "status") == "skipped"],
            )
        )  # fmt: skip
    return rows


def _num(value: Optional[float], digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def rows_table(rows: Sequence[Row], columns: Sequence[Tuple[str, str]] = METRICS) -> str:
    """Rows as a markdown table: label, epochs, seeds, ``columns`` as mean ± std, time, memory."""
    head = ["method", "epochs", "seeds", *[t for _, t in columns], "s / epoch", "train s"]
    head += ["peak mem MiB"]
    body = []
    for r in rows:
        seeds = ",".join(map(str, r.seeds)) or "-"
        for word, which in (("failed", r.failed), ("skipped", r.skipped)):
            if which:
                seeds += f" ({word}: {','.join(map(str, which))})"
        body.append(
            [r.label, ",".join(map(str, r.epochs)) or "-", seeds]
            + [fmt(r.stats[a], 2 if a == "offline_uniformity" else 1) for a, _ in columns]
            + [_num(r.stats["seconds_per_epoch"][0]), _num(r.stats["train_seconds"][0], 0)]
            + [_num(r.stats["peak_mem_mib"][0], 0)]
        )
    return table(head, body)


def _equal_time(rows: Sequence[Row]) -> List[Row]:
    """Each equal-time baseline followed by the row whose training time it matched."""
    by_label = {r.label: r for r in rows if r.comparison == "equal-epoch"}
    out: List[Row] = []
    for r in (r for r in rows if r.comparison == "equal-time"):
        out.append(r)
        target = by_label.get(r.matched_to or "")
        if target is not None and target not in out:
            out.append(target)
    return out


def configs_section(rows: Sequence[Row]) -> str:
    """Each row's shipped config and overrides, as its ``config.yaml`` header lists them, with
    the output folder shown as ``<out>`` and seed-specific values as ``<seed>``."""
    import re

    seen: Dict[str, Tuple[str, List[str]]] = {}
    for r in rows:
        path = Path(r.run_dir or "/nonexistent") / "config.yaml"
        if r.label in seen or not path.is_file():
            continue
        lines = path.read_text().splitlines()
        parts = Path(r.run_dir).parts
        out = (
            str(Path(*parts[: len(parts) - parts[::-1].index("runs") - 1]))
            if "runs" in parts
            else "\0"
        )
        ovr = [
            re.sub(r"(?<=[-/=])seed\d+|(?<=^\+\+seed=)\d+", lambda m: "<seed>" if m.group().isdigit() else "seed<seed>", ln[4:].replace(out, "<out>"))
            for ln in lines[1:] if ln.startswith("#   ")
        ]  # fmt: skip
        seen[r.label] = (lines[0][2:].split(" from ")[0], ovr)
    if not seen:
        return ""
    common = set.intersection(*(set(o) for _, o in seen.values()))
    first = next(iter(seen.values()))[1]
    lines = [
        "## Configs", "",
        "Every run is `main_pretrain.py --config-path pkg://attnce_plugin.configs --config-name "
        "<config> <overrides>`. Overrides of every run:", "",
        *[f"    {o}" for o in first if o in common], "",
        "| row | config | its own overrides |", "|---|---|---|",
    ]  # fmt: skip
    for label, (name, ovr) in seen.items():
        own = " ".join(f"`{o}`" for o in ovr if o not in common) or "none"
        lines.append(f"| {label} | `{name}` | {own} |")
    return "\n".join(lines) + "\n"


#: The learning regime's two bars (issue 19), on the offline probes' means: pretraining has
#: learned something when linear and kNN both beat the untrained backbone by STEP1 points; the
#: representation beats its input when the linear probe also beats the raw pixels by STEP2.
STEP1, STEP2 = 3.0, 2.0


def _reference(
    results: Sequence[Any], label: str, metric: str, seeds: Optional[Sequence[int]] = None
) -> MeanStd:
    return mean_std([get(r, metric) for r in results if get(r, "label") == label
                     and get(r, "comparison") == "reference" and get(r, "status") == "ok"
                     and (seeds is None or int(get(r, "seed")) in seeds)])  # fmt: skip


def _gap(a: Optional[float], b: Optional[float]) -> Optional[float]:
    """a - b, rounded so that float32 noise cannot decide a bar: probes are float32 percentages
    (83.99999737739563 - 81.99999928474426 is a gap of 2), and real gaps between them lie on a
    grid far coarser than 1e-4."""
    return None if a is None or b is None else round(a - b, 4)


def curve_points(results: Sequence[Any]) -> Dict[str, Dict[int, List[Dict[str, float]]]]:
    """ "<label> (<E>-epoch run)" -> epochs -> the ``curve`` points of its seeds there (points of
    one schedule only: a run of other epochs has another learning-rate schedule)."""
    out: Dict[str, Dict[int, List[Dict[str, float]]]] = {}
    for r in results:
        name = f"{get(r, 'label')} ({get(r, 'epochs')}-epoch run)"
        for point in (get(r, "curve") or []) if get(r, "status") == "ok" else []:
            out.setdefault(name, {}).setdefault(int(point["epochs"]), []).append(point)
    return out


def extrapolate(points: Sequence[Tuple[float, float]], target: float) -> Optional[float]:
    """The seconds at which the least-squares line ``accuracy = a + b * ln(seconds)`` through
    ``(seconds, accuracy)`` points reaches ``target``; None for fewer than 3 points or no rise."""
    if len(points) < 3:
        return None
    xs, ys = [math.log(x) for x, _ in points], [y for _, y in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    return math.exp(mx + (target - my) / slope) if slope > 0 else None


def _bars(
    name: str,
    by_epoch: Dict[int, List[Dict[str, float]]],
    bars: Sequence[Tuple[str, str, Optional[float]]],
) -> str:
    """Where a curve passes each bar (metric, what, level): measured, or extrapolated from a
    log-linear fit of the later half of its points."""
    pts = [
        (mean_std([p["train_seconds"] for p in v])[0] or 0.0, v)
        for _, v in sorted(by_epoch.items())
    ]
    said = []
    for metric, what, level in bars:
        if level is None:
            continue
        line = [(x, mean_std([p[metric] for p in v])[0]) for x, v in pts]
        hit = next((x for x, y in line if y is not None and _gap(y, level) >= 0), None)
        if hit is not None:
            said.append(f"{what} ({level:.1f}) passed at {hit:.0f} s")
            continue
        late = [(x, y) for x, y in line[len(line) // 2 :] if y is not None and x > 0]
        at = extrapolate(late, level)
        fit = (f"a log-linear fit of the last {len(late)} points reaches it at ~{at:.0f} s" if at
               else f"the last {len(late)} points do not rise" if len(late) >= 3
               else "too few points to extrapolate")  # fmt: skip
        said.append(f"{what} ({level:.1f}) not passed by {line[-1][0]:.0f} s; {fit}")
    return f"- {name}: " + "; ".join(said) + "."


def _against_references(
    lin: MeanStd, knn: MeanStd, untrained: Sequence[MeanStd], pixels: Sequence[MeanStd]
) -> List[str]:
    """The regime's cells for one row of probes: its gaps to the untrained backbone and the raw
    pixels, and whether it passes step 1 and step 2 (issue 19)."""
    lin_u, knn_u, lin_p = (_gap(a[0], b[0]) for a, b in
                           ((lin, untrained[0]), (knn, untrained[1]), (lin, pixels[0])))  # fmt: skip
    step1 = "n/a" if None in (lin_u, knn_u) else "yes" if min(lin_u, knn_u) >= STEP1 else "no"
    step2 = "n/a" if lin_p is None else "yes" if lin_p >= STEP2 else "no"
    return ["n/a" if g is None else f"{g:+.2f}" for g in (lin_u, knn_u, lin_p)] + [step1, step2]


REGIME_HEAD = ("offline linear", "offline kNN", "linear - untrained", "kNN - untrained",
               "linear - pixels", f"step 1 (both >= untrained + {STEP1:g})",
               f"step 2 (linear >= pixels + {STEP2:g})")  # fmt: skip


def _references(
    results: Sequence[Any], seeds: Optional[Sequence[int]] = None
) -> Tuple[List[MeanStd], List[MeanStd]]:
    """(untrained backbone, raw pixels): each a (linear, kNN) pair, the untrained backbone's over
    ``seeds`` (all by default); the pixels have no seed."""
    untrained = [_reference(results, REFERENCE_LABELS[0], m, seeds) for m in PROBES]
    return untrained, [_reference(results, REFERENCE_LABELS[1], m) for m in PROBES]


def regime_markdown(results: Sequence[Any]) -> str:
    """Each trained row's mean probes against the untrained backbone and the raw pixels, and
    which step of the learning regime its means reach."""
    body = []
    for r in aggregate(results):
        if r.seeds and r.comparison != "reference":
            lin, knn = (r.stats[m] for m in PROBES)
            cells = _against_references(lin, knn, *_references(results, r.seeds))
            body.append([r.label, ",".join(map(str, r.epochs)), ",".join(map(str, r.seeds)),
                         fmt(lin, 2), fmt(knn, 2), *cells])  # fmt: skip
    untrained, pixels = _references(results)
    refs = (f"Gaps are of the means over the row's seeds, against the untrained backbone's mean "
            f"over the same seeds (over all seeds: linear {fmt(untrained[0], 2)}, kNN "
            f"{fmt(untrained[1], 2)}) and the raw pixels (linear {fmt(pixels[0], 2)}, kNN "
            f"{fmt(pixels[1], 2)}).")  # fmt: skip
    return "\n".join(
        ["## Regime", "", refs, "", table(["method", "epochs", "seeds", *REGIME_HEAD], body), ""]
    )


def curve_markdown(results: Sequence[Any]) -> str:
    """The learning curves (``--curve-every``): each kept checkpoint's offline probes, their gaps
    to the untrained backbone and the raw pixels, and which bar of the regime they pass."""
    curves = curve_points(results)
    if not curves:
        return ""
    untrained, pixels = _references(results)
    body = []
    for label, by_epoch in curves.items():
        for n, pts in sorted(by_epoch.items()):
            lin, knn = (mean_std([p[m] for p in pts]) for m in PROBES)
            seconds = mean_std([p["train_seconds"] for p in pts])[0]
            body.append([label, n, len(pts), _num(seconds, 0), fmt(lin), fmt(knn),
                         *_against_references(lin, knn, untrained, pixels)])  # fmt: skip
    head = ["method", "epochs", "n seeds", "train s", *REGIME_HEAD]

    refs = (f"untrained backbone: linear {fmt(untrained[0])}, kNN {fmt(untrained[1])}; raw pixels: "
            f"linear {fmt(pixels[0])}, kNN {fmt(pixels[1])} (same images, same probes).")  # fmt: skip
    text = ("Each run's kept checkpoints (`--curve-every`), probed as its last one is; train s "
            "sums the record's epochs up to the checkpoint. A point inside a run is not the end "
            "of a shorter run: its learning rate has not yet decayed (one cosine schedule).")  # fmt: skip
    def plus(ref: MeanStd, margin: float) -> Optional[float]:
        return None if ref[0] is None else ref[0] + margin

    bars = [(PROBES[0], f"linear >= untrained + {STEP1:g}", plus(untrained[0], STEP1)),
            (PROBES[1], f"kNN >= untrained + {STEP1:g}", plus(untrained[1], STEP1)),
            (PROBES[0], f"linear >= pixels + {STEP2:g}", plus(pixels[0], STEP2))]  # fmt: skip
    where = [_bars(name, by_epoch, bars) for name, by_epoch in curves.items()]
    fit = ("Extrapolation: a least-squares line of accuracy against ln(training seconds) "
           "through the later half of the points; points inside one schedule, so a guess.")  # fmt: skip
    return "\n".join(
        ["## Learning curves", "", text, "", refs, "", table(head, body), "", *where, "", fit, ""]
    )


def curve_plot(results: Sequence[Any], path: Path, title: str) -> Optional[Path]:
    """Offline linear and kNN against training seconds, the references as flat lines."""
    series: Dict[str, List[Tuple[float, MeanStd]]] = {}
    xs: List[float] = []
    for label, by_epoch in curve_points(results).items():
        for metric, name in zip(PROBES, ("linear", "kNN")):
            for pts in by_epoch.values():
                x = mean_std([p["train_seconds"] for p in pts])[0] or 0.0
                xs.append(x)
                series.setdefault(f"{label} {name}", []).append(
                    (x, mean_std([p[metric] for p in pts]))
                )
    if not series:
        return None
    for ref in REFERENCE_LABELS:
        for metric, name in zip(PROBES, ("linear", "kNN")):
            level = _reference(results, ref, metric)
            series[f"{ref} {name}"] = [(min(xs), level), (max(xs), level)]
    return line_plot(series, path, title, "training seconds", "offline top-1 %")


#: The reference preset's four questions (issue 19): (question, row a, row b); a beats b?
QUESTIONS: Tuple[Tuple[str, str, str], ...] = (
    ("Does AttentionNCE beat SimCLR at equal time?",
     "AttentionNCE (M=4)", "SimCLR (time of AttentionNCE)"),
    ("Does it beat SimCLR on the same views?",
     "AttentionNCE (M=4)", "SimCLR on the same views (M=4)"),
    ("Is the attention itself responsible?",
     "AttentionNCE (M=4)", "AttentionNCE, attention off (M=4)"),
    ("Does the MoCo form beat MoCo v3 (equal time)?",
     "MoCo v3 + AttentionNCE (M=4)", "MoCo v3 (time of MoCo v3 + AttentionNCE)"),
)  # fmt: skip


def verdicts_markdown(results: Sequence[Any]) -> str:
    """One line per question: row a minus row b on both offline probes, with the noise rule."""
    rows = {r.label: r for r in aggregate(results) if r.seeds}
    lines = []
    for question, a, b in QUESTIONS:
        missing = [f"'{x}'" for x in (a, b) if x not in rows]
        if missing:
            verb = "has" if len(missing) == 1 else "have"
            # A row skipped for a reason (timings on two CPUs) says it, not just "no record".
            why = next((get(r, "error").strip().splitlines()[-1] for r in results
                        if f"'{get(r, 'label')}'" in missing and get(r, "status") == "skipped"
                        and (get(r, "error") or "").strip()), "")  # fmt: skip
            why = f": {why.rstrip('.')}" if why else ""
            lines.append(
                f"- {question} Not run yet ({' and '.join(missing)} {verb} no record{why})."
            )
            continue
        gaps = [f"{name} {verdict(rows[a].stats[m], rows[b].stats[m])}"
                for m, name in zip(PROBES, ("offline linear", "offline kNN"))]  # fmt: skip
        seeds = f"seeds {','.join(map(str, rows[a].seeds))} / {','.join(map(str, rows[b].seeds))}"
        lines.append(f"- {question} {a} minus {b}: {'; '.join(gaps)} ({seeds}).")
    return "## Verdicts\n\n" + "\n".join(lines) + "\n"


def bench_markdown(results: Sequence[Any], header: Sequence[str]) -> str:
    """``results.md``: the header lines, one table per comparison present, configs, notes."""
    rows = aggregate(results)
    parts = ["# Benchmark results", "", *[f"- {h}" for h in header], ""]
    sections = (
        ("Equal epochs", "Every method for the same epochs, batch size and seeds; the untrained "
         "backbone and the raw pixels on the same images last.", ("equal-epoch", "reference")),
        ("Equal wall-clock", "Each baseline retrained for as many epochs as fit in the training "
         "time of the row under it (timed on the first seed's equal-epoch runs).", ("equal-time",)),
        ("Ablation", "One setting varied at a time around the shipped one; the same method's "
         "equal-epoch rows (the shipped setting) first.", ("ablation",)),
    )  # fmt: skip
    ablated = {r.label.split(" (")[0] for r in rows if r.comparison == "ablation"}
    for title, text, kinds in sections:
        chosen = _equal_time(rows) if kinds == ("equal-time",) else [
            r for r in rows if r.comparison in kinds
        ]  # fmt: skip
        if kinds == ("ablation",) and chosen:
            base = [r for r in rows if r.comparison == "equal-epoch"
                    and r.label.split(" (")[0] in ablated]  # fmt: skip
            chosen = base + chosen
        if chosen:
            parts += [f"## {title}", "", text, "", rows_table(chosen), ""]
    healthy = [r for r in rows if r.comparison not in ("frontier",) and r.seeds]
    if any(r.stats["offline_eff_rank"][0] is not None for r in healthy):
        parts += ["## Representation health", "", "Frozen backbone features of the validation "
                  "images (at most 2048): uniformity (Wang & Isola, 2020) and effective rank of "
                  "their covariance (Roy & Vetterli, 2007).", "", rows_table(healthy, HEALTH), ""]  # fmt: skip
    parts.append(curve_markdown(results))
    parts.append(configs_section(rows))
    notes = list(NOTES) + [
        f"{'FAILED or skipped' if get(r, 'status') != 'ok' else 'Note'}: {get(r, 'key')}: "
        f"{(get(r, 'error') or '?').strip().splitlines()[-1]}"
        for r in results
        if get(r, "status") != "ok" or get(r, "error")
    ]
    return "\n".join(parts) + "\n## Notes\n\n" + "".join(f"- {n}\n" for n in notes)


def write_outputs(results: Sequence[Any], markdown: str, out: Path, title: str) -> None:
    """``results.md``, ``runs.csv`` (one line per run), ``summary.csv`` (one per row),
    ``results.json`` and ``results.png``
    (each row's accuracies against its training time)."""
    import csv
    import json
    from dataclasses import asdict

    out.mkdir(parents=True, exist_ok=True)
    (out / "results.md").write_text(markdown)
    dicts = [dict(r if isinstance(r, dict) else asdict(r)) for r in results]
    for d in dicts:  # the run folders as the output folder shows them, not this machine's paths
        d["run_dir"] = os.path.relpath(d["run_dir"], out) if d.get("run_dir") else ""
    (out / "results.json").write_text(json.dumps(dicts, indent=2) + "\n")
    fields = [f for f in (dicts[0] if dicts else []) if f not in ("settings", "curve")]
    with (out / "runs.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(dicts)
    with (out / "summary.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        names = [a for a, _ in METRICS + HEALTH] + ["seconds_per_epoch", "train_seconds"]
        w.writerow(["comparison", "label", "epochs", "seeds", "failed_seeds"]
                   + [f"{a}_{s}" for a in names for s in ("mean", "std")] + ["peak_mem_mib"])  # fmt: skip
        for r in aggregate(results):
            w.writerow(
                [r.comparison, r.label, " ".join(map(str, r.epochs)), " ".join(map(str, r.seeds)),
                 " ".join(map(str, sorted(r.failed + r.skipped)))]
                + ["" if v is None else f"{v:.4f}" for a in names for v in r.stats[a]]
                + [r.stats["peak_mem_mib"][0] or ""]
            )  # fmt: skip
    rows = [r for r in aggregate(results) if r.stats["train_seconds"][0] is not None]
    series = {
        f"{r.label} [{r.comparison}]": [(r.stats["train_seconds"][0], r.stats["knn_acc1"])]
        for r in rows
    }
    line_plot(series, out / "results.png", title, "training seconds", "online kNN top-1 %")
    curve_plot(results, out / "curves.png", "learning curves: offline probes")
