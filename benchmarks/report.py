"""The one report: tables from run results (``result.json`` dicts), the one statistical rule
(:func:`paired`: seeds paired, a gap is real when the 95 % interval of the per-seed differences
excludes 0; Holm's correction within each family of comparisons named before its runs), the
regime, the verdicts, the figures."""

from __future__ import annotations

import csv
import math
import os
import statistics
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from benchmarks.recorder import read_records
from benchmarks.runs import (
    FAMILIES,
    MOCO_ATTN,
    PIXELS,
    TWO_BY_TWO,
    UNTRAINED,
    Families,
    Result,
    Row,
    controls,
    label_of,
    row_of,
)

#: (mean, sample std); std is None with fewer than 2 values, mean None with none.
MeanStd = Tuple[Optional[float], Optional[float]]


def table(head: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(map(str, head)) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(map(str, cells)) + " |" for cells in rows])


def section(title: str, *blocks: str) -> str:
    return "\n".join([f"## {title}", ""] + [x for block in blocks for x in (block, "")])


def _joined(values: Iterable[Any]) -> str:
    return ",".join(map(str, values))


def mean_std(values: Iterable[Optional[float]]) -> MeanStd:
    """Mean and sample std (ddof 1) of the finite values given."""
    vals = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not vals:
        return None, None
    return statistics.fmean(vals), (statistics.stdev(vals) if len(vals) > 1 else None)


def fmt(pair: MeanStd, digits: int = 1) -> str:
    mean, std = pair
    if mean is None:
        return "n/a"
    return f"{mean:.{digits}f}" if std is None else f"{mean:.{digits}f} ± {std:.{digits}f}"


def paired(a: Dict[int, float], b: Dict[int, float]) -> Optional[Dict[str, float]]:
    """Per-seed differences a - b over the seeds both have: n, their mean and sample std, the
    paired t = mean / (std / sqrt n), its two-sided p, and the 95 % half-width t_0.975,n-1 * std /
    sqrt n. None under 2 common seeds."""
    from scipy.stats import t as student  # solo-learn's own requirement

    diffs = [a[s] - b[s] for s in sorted(set(a) & set(b))]
    if len(diffs) < 2:
        return None
    n, mean, std = len(diffs), statistics.fmean(diffs), statistics.stdev(diffs)
    se = std / math.sqrt(n)
    t = mean / se if se > 0 else math.copysign(math.inf, mean) if mean else 0.0
    p, half = float(2 * student.sf(abs(t), n - 1)), float(student.ppf(0.975, n - 1)) * se
    return {"n": n, "mean": mean, "std": std, "t": t, "p": p, "half": half}


def holm(pvalues: Sequence[float], alpha: float = 0.05) -> List[bool]:
    """Which of the hypotheses Holm's step-down procedure rejects at family-wise ``alpha``."""
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    out = [False] * len(pvalues)
    for rank, i in enumerate(order):
        if pvalues[i] > alpha / (len(pvalues) - rank):
            break
        out[i] = True
    return out


#: The attention's activity and mechanism at the end of training: record key, column title.
ACTIVITY = (
    ("train_attn_eff_num_positives", "eff. positives"),
    ("train_attn_eff_num_negatives", "eff. negatives"),
    ("train_attn_max_beta", "max beta"),
    ("train_attn_push_ratio", "R (push / pull)"),
    ("train_attn_argmax_same_class", "hardest negative same class"),
)
#: The representation at the end of training, from the diagnostics: record key, column title.
HEALTH = (
    ("train_attn_top1_push_share", "top-1 share of the push"),
    ("train_repr_alignment", "alignment (lower: closer views)"),
    ("val_repr_z_uniformity", "z uniformity"),
    ("val_repr_z_eff_rank", "z eff. rank"),
    ("train_nce_loss", "train loss (nats)"),
)
BETA = "train_attn_max_beta"
#: The keys of a run's last epoch record that its line averages: P and K (the positives and
#: negatives per anchor), the activity, the health.
RECORDED = ["train_attn_num_positives", "train_attn_num_negatives", *dict(ACTIVITY), *dict(HEALTH)]


def activity(run_dir: str) -> Dict[str, float]:
    """The ``RECORDED`` values of a run's last epoch (its ``_epoch`` means) that it holds."""
    last = (read_records(Path(run_dir, "record.jsonl"), "epoch") or [{}])[-1] if run_dir else {}
    found = {k: last.get(k, last.get(f"{k}_epoch")) for k in RECORDED}
    return {k: v for k, v in found.items() if v is not None}


@dataclass
class Line:
    """One row of a table, a (comparison, label): its successful runs, its failed seeds."""

    comparison: str
    label: str
    ok: List[Result]
    failed: List[int]
    stats: Dict[str, MeanStd] = field(default_factory=dict)
    row: Optional[Row] = None
    #: A recorded key that only some seeds' records hold (older ones predate it): those seeds.
    partial: Dict[str, List[int]] = field(default_factory=dict)

    @property
    def seeds(self) -> List[int]:
        return [int(r["seed"]) for r in self.ok]

    @property
    def epochs(self) -> str:
        return _joined(sorted({int(r["epochs"]) for r in self.ok})) or "-"

    def per_seed(self, key: str) -> Dict[int, float]:
        return {int(r["seed"]): r[key] for r in self.ok if r.get(key) is not None}


PROBES = (("offline_acc1", "linear"), ("offline_knn_acc1", "kNN"))
NUMBERS = (
    "knn_acc1 linear_acc1 offline_knn_acc1 offline_acc1 seconds_per_epoch train_seconds"
).split()


def _provenance(result: Result) -> str:
    """``plugin version @ commit`` of the code that trained a run; "-" in records from before."""
    commit = result.get("commit") or ""  # 40 hex digits, then "-dirty" where it was
    return f"{result.get('plugin_version')} @ {commit[:8]}{commit[40:]}" if commit else "-"


def aggregate(results: Iterable[Result]) -> List[Line]:
    """Results grouped by (comparison, label) in first-seen order: mean ± std over the successful
    seeds of every number and of the attention's activity, the max peak memory."""
    groups: Dict[Tuple[str, str], List[Result]] = {}
    for r in results:
        groups.setdefault((r["comparison"], label_of(r)), []).append(r)
    lines = []
    for (comparison, label), runs in groups.items():
        ok = [r for r in runs if r["status"] == "ok"]
        line = Line(comparison, label, ok, [int(r["seed"]) for r in runs if r["status"] != "ok"])
        line.row = row_of(ok[0]) if ok and comparison == "ablation" else None
        stats, acts = line.stats, [activity(r.get("run_dir", "")) for r in ok]
        stats.update({a: mean_std(line.per_seed(a).values()) for a in NUMBERS})
        stats.update({k: mean_std(a.get(k) for a in acts) for k in RECORDED})
        for k in RECORDED:
            having = [s for s, a in zip(line.seeds, acts) if k in a]
            if 0 < len(having) < len(ok):
                line.partial[k] = having
        if stats[BETA][0] is not None:  # the max over seeds, as each record's is a max
            stats[BETA] = (max(a[BETA] for a in acts if BETA in a), None)
        mems = [r["peak_mem_mib"] for r in ok if r.get("peak_mem_mib") is not None]
        stats["peak_mem_mib"] = (max(mems) if mems else None, None)
        lines.append(line)
    return lines


def _seeds(line: Line) -> str:
    failed = f" (failed: {','.join(map(str, line.failed))})" if line.failed else ""
    return (_joined(line.seeds) or "-") + failed


def _only(line: Line, key: str, text: str) -> str:
    """``text``, naming the seeds it comes from when not all of the row's seeds recorded ``key``."""
    seeds = line.partial.get(key)
    return f"{text} (seed{'s' * (len(seeds) > 1)} {_joined(seeds)})" if seeds else text


def _activity_cells(line: Line) -> List[str]:
    """Effective positives of P, negatives of K, max beta, R, same-class; "-" for other rows."""
    s = {k: mean for k, (mean, _) in line.stats.items()}
    if s[BETA] is None:
        return ["-"] * len(ACTIVITY)
    of = [f" of {s[n]:.0f}" if s[n] is not None else "" for n in RECORDED[:2]]  # older: no P, K
    cells = [f"{s[k]:.2f}{o}" for (k, _), o in zip(ACTIVITY[:2], of)]
    cells += ["n/a" if s[k] is None else f"{s[k]:.2f}" for k, _ in ACTIVITY[2:]]
    return [_only(line, k, c) for (k, _), c in zip(ACTIVITY, cells)]


def runs_table(lines: Sequence[Line]) -> str:
    head = ["method", "comparison", "epochs", "seeds", "online kNN", "online linear", "offline kNN"]
    head += ["offline linear", "s / epoch", "train s", "peak mem MiB", "trained by"]
    body = []
    for r in lines:
        cells = [fmt(r.stats[a]) for a in NUMBERS[:4]]
        cells += [fmt((r.stats["seconds_per_epoch"][0], None), 1)]
        cells += [fmt((r.stats["train_seconds"][0], None), 0), fmt(r.stats["peak_mem_mib"], 0)]
        trained_by = ", ".join(sorted({_provenance(x) for x in r.ok})) or "-"
        body.append([r.label, r.comparison, r.epochs, _seeds(r), *cells, trained_by])
    return table(head, body)


def summary_table(lines: Sequence[Line]) -> str:
    """The compact table README.md shows: each row's offline probes and attention."""
    body = []
    for r in (r for r in lines if r.seeds):
        act = _activity_cells(r)
        cell = "-" if act[0] == "-" else f"{act[0]} pos., {act[1]} neg., max beta {act[2]}"
        probes = [fmt(r.stats[m], 2) for m, _ in PROBES]
        body.append([r.label, r.epochs, _seeds(r), *probes, cell])
    return table(["method", "epochs", "seeds", "offline linear", "offline kNN", "attention"], body)


#: The learning regime's bars, on the offline probes' means: step 1, linear and kNN both beat
#: the untrained backbone by STEP1 points; step 2, linear beats the raw pixels by STEP2.
STEP1, STEP2 = 3.0, 2.0


def _references(lines: Sequence[Line], seeds: Optional[Sequence[int]] = None) -> List[MeanStd]:
    """Untrained linear, kNN (over ``seeds``, all by default), pixels linear, kNN."""
    by = {r.label: r for r in lines if r.comparison == "reference"}
    out = []
    for label in (UNTRAINED, PIXELS):
        for metric, _ in PROBES:
            vals = by[label].per_seed(metric) if label in by else {}
            pick = seeds if label == UNTRAINED and seeds is not None else list(vals)
            out.append(mean_std(vals[s] for s in pick if s in vals))
    return out


def regime_markdown(lines: Sequence[Line]) -> str:
    """Each trained row's mean probes against the untrained backbone and the raw pixels, which
    step of the regime they reach, and an AttentionNCE row's attention and mechanism."""
    body = []
    for r in (r for r in lines if r.seeds and r.comparison != "reference"):
        lin, knn = (r.stats[m] for m, _ in PROBES)
        u_lin, u_knn, p_lin, _ = _references(lines, r.seeds)
        # Rounded so that float32 noise cannot decide a bar (83.99999737 - 81.99999928 is 2).
        pairs = ((lin[0], u_lin[0]), (knn[0], u_knn[0]), (lin[0], p_lin[0]))
        gaps = [None if None in ab else round(ab[0] - ab[1], 4) for ab in pairs]
        step1 = "n/a" if None in gaps[:2] else "yes" if min(gaps[:2]) >= STEP1 else "no"
        step2 = "n/a" if gaps[2] is None else "yes" if gaps[2] >= STEP2 else "no"
        body.append([r.label, r.epochs, _joined(r.seeds), fmt(lin, 2), fmt(knn, 2)])
        body[-1] += ["n/a" if g is None else f"{g:+.2f}" for g in gaps]
        body[-1] += [step1, step2, *_activity_cells(r)]
    u_lin, u_knn, p_lin, p_knn = _references(lines)
    head = ["method", "epochs", "seeds", "offline linear", "offline kNN", "linear - untrained"]
    head += ["kNN - untrained", "linear - pixels", f"step 1 (both >= untrained + {STEP1:g})"]
    head += [f"step 2 (linear >= pixels + {STEP2:g})", *[t for _, t in ACTIVITY]]
    return section(
        "Regime",
        "Gaps are of the means over the row's seeds, against the untrained backbone's mean over "
        f"the same seeds (over all seeds: linear {fmt(u_lin, 2)}, kNN {fmt(u_knn, 2)}) and the "
        f"raw pixels (linear {fmt(p_lin, 2)}, kNN {fmt(p_knn, 2)}).",
        table(head, body),
    )


def mechanism_markdown(lines: Sequence[Line]) -> str:
    keys = [k for k, _ in HEALTH]
    body = [
        [r.label, _joined(r.seeds)]
        + [_only(r, k, fmt(r.stats[k], 3 if k == keys[0] else 2)) for k in keys]
        for r in lines
        if r.seeds and r.stats[keys[1]][0] is not None
    ]
    if not body:
        return ""
    return section("Mechanism", table(["method", "seeds", *[t for _, t in HEALTH]], body))


def two_by_two_markdown(lines: Sequence[Line]) -> str:
    """runs.TWO_BY_TWO's cells: each row's offline probes over its seeds, R and how often the
    hardest negative has the anchor's class; "" before any of its rows has a record."""
    rows = {r.label: r for r in lines if r.seeds}

    def cell(row: Optional[Row]) -> str:
        r = rows.get(row.label) if row is not None else None
        if r is None:
            return "-"
        act = _activity_cells(r)
        probes = ", ".join(f"{name} {fmt(r.stats[m], 2)}" for m, name in PROBES)
        return f"{probes} (seeds {_joined(r.seeds)}); R {act[3]}, same class {act[4]}"

    body = [[name, cell(a), cell(b)] for name, (a, b) in TWO_BY_TWO.items()]
    if all(c == "-" for row in body for c in row[1:]):
        return ""
    return section("Imbalance and aim", table(["", "uniform", "aimed at the nearest"], body))


#: A family's name, and its comparisons (question, row a, row b) whose rows have records.
Family = Tuple[str, List[Tuple[str, Line, Line]]]
ABLATION = "ablation: "


def families(lines: Sequence[Line], declared: Families = FAMILIES) -> List[Family]:
    """The families of paired comparisons, each named before its rows trained: the preset's
    (``declared``: the reference's by default), and each ablation row against its controls; a
    family's comparisons where both rows have records, families without any left out."""
    rows = {r.label: r for r in lines if r.seeds}
    named = list(declared.items())
    for r in (r for r in lines if r.row is not None and r.seeds):
        named.append((f"{ABLATION}{r.label}", [("", r.row, c) for c in controls(r.row)]))
    out = []
    for name, pairs in named:
        found = [(q, rows.get(a.label), rows.get(b.label)) for q, a, b in pairs]
        found = [(q, a, b) for q, a, b in found if a is not None and b is not None]
        # A declared family is listed before its rows train; other families once they have.
        out += [(name, found)] if found or name in declared else []  # type: ignore[list-item]
    return out


def leave_one_out(a: Dict[int, float], b: Dict[int, float]) -> Tuple[int, int]:
    """(k, n): of the n subsets that leave one common seed out, k whose interval excludes 0."""
    common = sorted(set(a) & set(b))
    tests = [paired({s: a[s] for s in common if s != out}, b) for out in common]
    return sum(t is not None and abs(t["mean"]) > t["half"] for t in tests), len(common)


def _family_verdicts(name: str, pairs: List[Tuple[str, Line, Line]]) -> Tuple[List[str], List]:
    """A family's verdict lines (Holm within the family) and its counts row."""
    tests = [[paired(a.per_seed(m), b.per_seed(m)) for m, _ in PROBES] for _, a, b in pairs]
    flat = [s for row in tests for s in row if s is not None]
    for s, survives in zip(flat, holm([s["p"] for s in flat])):
        s.update(real=abs(s["mean"]) > s["half"], holm=survives)
    out = []
    for (question, a, b), row in zip(pairs, tests):
        parts = []
        for (metric, probe), s in zip(PROBES, row):
            x, y = a.per_seed(metric), b.per_seed(metric)
            if s is None:  # under 2 common seeds
                gap = [x[k] - y[k] for k in x if k in y]
                parts.append(f"{probe} {gap[0]:+.2f}, one seed: no test" if gap else f"{probe} n/a")
                continue
            mark = ", not shown"
            if s["real"]:
                mark = ", real" + ", survives Holm" * s["holm"]
                mark += ", real in {} of {} leave-one-seed-out subsets".format(*leave_one_out(x, y))
            parts.append(
                f"{probe} {s['mean']:+.2f} ± {s['half']:.2f} (95 % half-width, {s['n']} seeds, "
                f"t = {s['t']:+.2f}){mark}"
            )
        out.append(f"- {question + ' ' if question else ''}{a.label} minus {b.label}: ")
        out[-1] += f"{'; '.join(parts)}."
    real, survive = (sum(s[k] for s in flat) for k in ("real", "holm"))
    return out, [name, len(pairs) * len(PROBES), len(flat), real, survive]


COUNTS = ["family", "lines (comparison x probe)", "paired (2+ common seeds)"]
COUNTS += ["interval excludes 0", "survive Holm (within the family)"]


def verdicts_markdown(
    lines: Sequence[Line], shown: Optional[Iterable[str]] = None, declared: Families = FAMILIES
) -> str:
    """A line per comparison and probe, family by family: the paired 95 % interval, real when it
    excludes 0, marked where it survives Holm's correction within its family, and a real line's
    leave-one-seed-out count; each family's counts. ``shown``: the families whose lines are
    printed (all where None); every family's counts are. "" without pairs."""
    blocks, counts = [], []
    for name, pairs in families(lines, declared):
        out, row = _family_verdicts(name, pairs)
        counts.append(row)
        if out and (shown is None or name in shown):
            blocks += [f"{name[0].upper()}{name[1:]}:", "\n".join(out)]
    if not counts:
        return ""
    return section("Verdicts", *blocks, table(COUNTS, counts))


def bench_markdown(
    results: Sequence[Result], header: Sequence[str], declared: Families = FAMILIES
) -> str:
    lines = aggregate(results)
    md = ["# Benchmark results", "", *[f"- {h}" for h in header], ""]
    md += [section("Summary", summary_table(lines)), section("Runs", runs_table(lines))]
    md += [regime_markdown(lines), mechanism_markdown(lines), two_by_two_markdown(lines)]
    md += [verdicts_markdown(lines, declared=declared)]
    # "running" and "incomplete": a run killed before it finished; the same command resumes it.
    says = {"ok": "Note", "running": "INCOMPLETE", "incomplete": "INCOMPLETE"}
    notes = [
        f"- {says.get(r['status'], r['status'].upper())}: {r['key']}: "
        f"{(r.get('error') or '?').strip().splitlines()[-1]}"
        for r in results
        if r["status"] != "ok" or r.get("error")
    ]
    return "\n".join(md + ([section("Notes", "\n".join(notes))] if notes else []))


def _curves(line: Line, seeds: Sequence[int]) -> Dict[int, float]:
    per: Dict[int, List[float]] = {}
    for run in (r for r in line.ok if int(r["seed"]) in seeds):
        path = Path(run.get("run_dir", ""), "record.jsonl")
        for r in read_records(path, "epoch"):
            if r.get("val_knn_acc1") is not None:
                per.setdefault(int(r["epoch"]), []).append(float(r["val_knn_acc1"]))
    return {e: statistics.fmean(v) for e, v in sorted(per.items())}


def draw(lines: Sequence[Line], out: Path) -> List[str]:
    """``results.png``: each row's offline probes (a point a seed) against training time, the
    references as lines; ``curves.png``: each ablation row's online kNN per epoch beside its
    attention-off control (the MoCo form's: the shipped MoCo form, near uniform at d_neg 10)."""
    from matplotlib.figure import Figure  # no pyplot: no GUI backend, no figure to close

    figures = {"results.png": Figure(figsize=(13, 8), layout="constrained")}
    axes, refs = figures["results.png"].subplots(1, 2, sharex=True), _references(lines)
    trained = [r for r in lines if r.seeds and r.comparison != "reference"]
    for ax, (metric, name), ref in zip(axes, PROBES, (refs[::2], refs[1::2])):
        for i, r in enumerate(trained):  # 10 colours, then the next marker: no two rows alike
            x, y = r.per_seed("train_seconds"), r.per_seed(metric)
            pts = [(x[s] / 60, y[s]) for s in r.seeds if s in x and s in y]
            look = dict(color=f"C{i % 10}", marker="os^Dv"[i // 10 % 5], s=18, label=r.label)
            ax.scatter(*zip(*pts), **look) if pts else None
        for (mean, _), text, style in zip(ref, (UNTRAINED, PIXELS), ("--", ":")):
            if mean is not None:
                ax.axhline(mean, color="k", linestyle=style, label=text)
        ax.set(xlabel="training minutes", ylabel=f"offline {name} top-1 %", title=name)
    figures["results.png"].legend(
        *axes[0].get_legend_handles_labels(), loc="outside lower center", ncols=2, fontsize=7
    )
    ablations = [
        (a, b) for f, pairs in families(lines) for _, a, b in pairs if f.startswith(ABLATION)
    ]
    pairs = [(a, b) for a, b in ablations if "off" in b.label or b.label == MOCO_ATTN.label]
    if pairs:
        n = math.ceil(len(pairs) / 4)  # one panel a row, four a line
        figures["curves.png"] = fig = Figure(figsize=(16, 3.2 * n), layout="constrained")
        axes = list(fig.subplots(n, 4, sharex=True, squeeze=False).flat)
        for ax, (a, b) in zip(axes, pairs):
            seeds = [s for s in a.seeds if s in b.seeds]
            ax.plot(*zip(*_curves(a, seeds).items()), label="this row")
            ax.plot(*zip(*_curves(b, seeds).items()), "k--", label=b.label)
            ax.set_title(textwrap.fill(f"{a.label}, seeds {_joined(seeds)}", 60), fontsize=7)
            ax.legend(fontsize=6, loc="lower right")
        for ax in axes[len(pairs) :]:  # the panels left over
            ax.set_visible(False)
        fig.supxlabel("epoch")
        fig.supylabel("online kNN top-1 % (mean over the seeds both rows have)")
    for name, fig in figures.items():
        fig.savefig(out / name, dpi=110)
    return list(figures)


def write_outputs(results: Sequence[Result], markdown: str, out: Path) -> str:
    """``results.md``, ``runs.csv`` (results' scalars, folders relative to ``out``), figures."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.md").write_text(markdown)
    relative = [os.path.relpath(r["run_dir"], out) if r.get("run_dir") else "" for r in results]
    dicts = [dict(r, run_dir=d) for r, d in zip(results, relative)]
    scalar = [k for d in dicts for k, v in d.items() if not isinstance(v, (dict, list))]
    with open(out / "runs.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, list(dict.fromkeys(scalar)), extrasaction="ignore")
        writer.writeheader()
        writer.writerows(dicts)
    figures = draw(aggregate(results), out)
    return f"\nWrote {out / 'results.md'}, runs.csv and {', '.join(figures)}"
