"""The one report: tables from run results (``result.json`` dicts), the one statistical rule
(:func:`paired`: seeds paired, a gap is real when the 95 % interval of the per-seed differences
excludes 0; Holm's correction over every comparison), the regime, the verdicts, the figures."""

from __future__ import annotations

import csv
import json
import math
import os
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from benchmarks.recorder import read_records
from benchmarks.runs import PIXELS, QUESTIONS, UNTRAINED, Row, controls, row_of

#: (mean, sample std); std is None with fewer than 2 values, mean None with none.
MeanStd = Tuple[Optional[float], Optional[float]]
Result = Dict[str, Any]
ALPHA = 0.05


def table(head: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(map(str, head)) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(map(str, cells)) + " |" for cells in rows])


def section(title: str, *blocks: str) -> str:
    """A ``## title`` section of markdown blocks, each followed by an empty line."""
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


def holm(pvalues: Sequence[float], alpha: float = ALPHA) -> List[bool]:
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
    ("eff_num_positives", "eff. positives"),
    ("eff_num_negatives", "eff. negatives"),
    ("max_beta", "max beta"),
    ("push_ratio", "R (push / pull)"),
    ("argmax_same_class", "hardest negative same class"),
)
#: The representation at the end of training, from the diagnostics: record key, column title.
HEALTH = (
    ("train_attn_top1_push_share", "top-1 share of the push"),
    ("train_repr_alignment", "alignment (lower: closer views)"),
    ("val_repr_z_uniformity", "z uniformity"),
    ("val_repr_z_eff_rank", "z eff. rank"),
    ("train_nce_loss", "train loss (nats)"),
)


def activity(run_dir: str) -> Dict[str, float]:
    """The last epoch's attention (``train_attn_*``, with P and K, the positives and negatives per
    anchor) and diagnostics of a run. Records before the methods logged P and K give them from
    the run's config."""
    folder = Path(run_dir or "/nonexistent")
    if not (folder / "record.jsonl").is_file():
        return {}
    records = read_records(folder / "record.jsonl")
    last = next((r for r in reversed(records) if r.get("event") == "epoch"), {})
    keys = [f"train_attn_{k}" for k, _ in ACTIVITY] + [k for k, _ in HEALTH]
    keys += ["train_attn_num_positives", "train_attn_num_negatives"]
    found = {k.replace("train_attn_", ""): last.get(k, last.get(f"{k}_epoch")) for k in keys}
    if found["max_beta"] is None:
        return {k: v for k, v in found.items() if v is not None}
    if found["num_negatives"] is None:
        from omegaconf import OmegaConf

        cfg = OmegaConf.load(folder / "config.yaml")
        b, m = int(cfg.optimizer.batch_size), int(cfg.views.num_positives)
        moco = cfg.method == "mocov3_attentionnce"
        found["num_positives"] = m + 1 if moco else m
        found["num_negatives"] = b - 1 if moco else 2 * b - 2
    return {k: v for k, v in found.items() if v is not None}


@dataclass
class Line:
    """One row of a table: a (comparison, label) over its seeds."""

    comparison: str
    label: str
    seeds: List[int]
    failed: List[int]
    epochs: List[int]
    stats: Dict[str, MeanStd]
    per_seed: Dict[str, Dict[int, float]]
    commits: List[str]
    run_dirs: List[str]
    row: Optional[Row] = None


PROBES = (("offline_acc1", "linear"), ("offline_knn_acc1", "kNN"))
NUMBERS = (
    "knn_acc1 linear_acc1 offline_knn_acc1 offline_acc1 offline_uniformity offline_eff_rank "
    "seconds_per_epoch train_seconds"
).split()


def _provenance(result: Result) -> str:
    """``plugin version @ commit`` of the code that trained a run; "-" in records from before."""
    commit = result.get("commit")
    if not commit:
        return "-"
    return f"{result.get('plugin_version')} @ {commit[:8]}{'-dirty' * commit.endswith('-dirty')}"


def aggregate(results: Iterable[Result]) -> List[Line]:
    """Results grouped by (comparison, label) in first-seen order: mean ± std over the successful
    seeds of every number, the max peak memory, the attention's activity, the training commits."""
    groups: Dict[Tuple[str, str], List[Result]] = {}
    for r in results:
        groups.setdefault((r["comparison"], r["label"]), []).append(r)
    lines = []
    for (comparison, label), runs in groups.items():
        ok = [r for r in runs if r["status"] == "ok"]
        seeds = [int(r["seed"]) for r in ok]
        per_seed = {
            a: {s: r[a] for s, r in zip(seeds, ok) if r.get(a) is not None} for a in NUMBERS
        }
        stats = {a: mean_std(per_seed[a].values()) for a in NUMBERS}
        acts = [activity(r.get("run_dir", "")) for r in ok]
        keys = [k for k, _ in ACTIVITY] + [k.replace("train_attn_", "") for k, _ in HEALTH]
        for key in keys + ["num_positives", "num_negatives"]:
            stats[key] = mean_std(a.get(key) for a in acts)
        if stats["max_beta"][0] is not None:  # the max over seeds, as each record's is a max
            stats["max_beta"] = (max(a["max_beta"] for a in acts if "max_beta" in a), None)
        mems = [r["peak_mem_mib"] for r in ok if r.get("peak_mem_mib") is not None]
        stats["peak_mem_mib"] = (max(mems) if mems else None, None)
        failed = [int(r["seed"]) for r in runs if r["status"] != "ok"]
        epochs, dirs = sorted({int(r["epochs"]) for r in ok}), [r.get("run_dir", "") for r in ok]
        commits = sorted({_provenance(r) for r in ok})
        row = row_of(ok[0]) if ok and comparison == "ablation" else None
        lines.append(
            Line(comparison, label, seeds, failed, epochs, stats, per_seed, commits, dirs, row)
        )
    return lines


def _seeds(line: Line) -> str:
    failed = f" (failed: {','.join(map(str, line.failed))})" if line.failed else ""
    return (_joined(line.seeds) or "-") + failed


def _activity_cells(line: Line) -> List[str]:
    """Effective positives of P, negatives of K, max beta, R, same-class; "-" for other rows."""
    s = line.stats
    if s["max_beta"][0] is None:
        return ["-"] * len(ACTIVITY)
    p, k = (int(round(s[x][0])) for x in ("num_positives", "num_negatives"))
    cells = [f"{s['eff_num_positives'][0]:.2f} of {p}", f"{s['eff_num_negatives'][0]:.2f} of {k}"]
    return cells + ["n/a" if s[key][0] is None else f"{s[key][0]:.2f}" for key, _ in ACTIVITY[2:]]


def runs_table(lines: Sequence[Line]) -> str:
    head = ["method", "comparison", "epochs", "seeds", "online kNN", "online linear"]
    head += ["offline kNN", "offline linear", "uniformity", "eff. rank", "s / epoch", "train s"]
    head += ["peak mem MiB", "trained by"]
    body = []
    for r in lines:
        cells = [fmt(r.stats[a], 2 if a == "offline_uniformity" else 1) for a in NUMBERS[:6]]
        cells += [fmt((r.stats["seconds_per_epoch"][0], None), 1)]
        cells += [fmt((r.stats["train_seconds"][0], None), 0), fmt(r.stats["peak_mem_mib"], 0)]
        body.append([r.label, r.comparison, _joined(r.epochs) or "-", _seeds(r), *cells])
        body[-1].append(", ".join(r.commits) or "-")
    return table(head, body)


def summary_table(lines: Sequence[Line]) -> str:
    """The compact table README.md shows: each row's offline probes and attention."""
    body = []
    for r in (r for r in lines if r.seeds):
        act = _activity_cells(r)
        cell = "-" if act[0] == "-" else f"{act[0]} pos., {act[1]} neg., max beta {act[2]}"
        probes = [fmt(r.stats[m], 2) for m, _ in PROBES]
        body.append([r.label, _joined(r.epochs), _seeds(r), *probes, cell])
    return table(["method", "epochs", "seeds", "offline linear", "offline kNN", "attention"], body)


#: The learning regime's bars, on the offline probes' means: step 1, linear and kNN both beat
#: the untrained backbone by STEP1 points; step 2, linear beats the raw pixels by STEP2.
STEP1, STEP2 = 3.0, 2.0


def _gap(a: Optional[float], b: Optional[float]) -> Optional[float]:
    # Rounded so that float32 noise cannot decide a bar (83.99999737 - 81.99999928 is 2).
    return None if a is None or b is None else round(a - b, 4)


def _references(lines: Sequence[Line], seeds: Optional[Sequence[int]] = None) -> List[MeanStd]:
    """Untrained linear, kNN (over ``seeds``, all by default), pixels linear, kNN."""
    by = {r.label: r for r in lines if r.comparison == "reference"}
    out = []
    for label in (UNTRAINED, PIXELS):
        for metric, _ in PROBES:
            vals = by[label].per_seed[metric] if label in by else {}
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
        gaps = [_gap(lin[0], u_lin[0]), _gap(knn[0], u_knn[0]), _gap(lin[0], p_lin[0])]
        step1 = "n/a" if None in gaps[:2] else "yes" if min(gaps[:2]) >= STEP1 else "no"
        step2 = "n/a" if gaps[2] is None else "yes" if gaps[2] >= STEP2 else "no"
        body.append([r.label, _joined(r.epochs), _joined(r.seeds), fmt(lin, 2), fmt(knn, 2)])
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
        "Attention at the last epoch, mean over seeds (`train_attn_*` of each record): effective "
        "positives 1 / sum alpha^2 of P, effective negatives (sum beta)^2 / sum beta^2 of K, the "
        "largest beta (max over seeds), R = the push on the negatives over the pull on the "
        "positive (1 for plain InfoNCE and the `importance` form), and the fraction of anchors "
        "whose highest-beta negative has their class (labels feed this diagnostic only); uniform "
        "weights give P, K and 1; n/a: a record from before the diagnostic.",
    )


def mechanism_markdown(lines: Sequence[Line]) -> str:
    """The representation and the push at the end of training of every row with diagnostics."""
    keys = [k.replace("train_attn_", "") for k, _ in HEALTH]
    body = [
        [r.label, _joined(r.seeds), *[fmt(r.stats[k], 3 if k == keys[0] else 2) for k in keys]]
        for r in lines
        if r.seeds and r.stats[keys[1]][0] is not None
    ]
    if not body:
        return ""
    return section(
        "Mechanism",
        table(["method", "seeds", *[t for _, t in HEALTH]], body),
        "At the last epoch, mean ± std over seeds (each record's `_epoch` value): the largest "
        "negative's share of an anchor's push, the anchor views' squared distance "
        "(`train_repr_alignment`, 0 to 4), the uniformity and effective rank of the validation "
        "projections, and the contrastive loss in nats (n/a: not logged by that form or record).",
    )


def comparisons(lines: Sequence[Line]) -> List[Tuple[str, Line, Line]]:
    """(question, row a, row b): the preset's questions, then each ablation row against its
    controls (runs.controls), where both rows have records."""
    rows = {r.label: r for r in lines if r.seeds}
    pairs = [(q, rows.get(a.label), rows.get(b.label)) for q, a, b in QUESTIONS]
    for r in (r for r in lines if r.row is not None and r.seeds):
        pairs += [("Ablation:", r, rows.get(control.label)) for control in controls(r.row)]
    return [(q, a, b) for q, a, b in pairs if a is not None and b is not None]


def verdicts_markdown(lines: Sequence[Line]) -> str:
    """One line per comparison and probe with its one statistic: the paired 95 % interval, real
    when it excludes 0, marked where it survives Holm's correction over every paired line; and the
    count of comparisons. "" when no comparison has both rows."""
    pairs = comparisons(lines)
    if not pairs:
        return ""
    tests = [[paired(a.per_seed[m], b.per_seed[m]) for m, _ in PROBES] for _, a, b in pairs]
    flat = [s for row in tests for s in row if s is not None]
    survives = holm([s["p"] for s in flat])
    out = []
    for (question, a, b), row in zip(pairs, tests):
        parts = []
        for (metric, name), s in zip(PROBES, row):
            if s is None:
                common = sorted(set(a.per_seed[metric]) & set(b.per_seed[metric]))
                gap = [a.per_seed[metric][k] - b.per_seed[metric][k] for k in common]
                parts.append(f"{name} {gap[0]:+.2f}, one seed: no test" if gap else f"{name} n/a")
                continue
            real = abs(s["mean"]) > s["half"]
            holm_ok = survives[next(i for i, x in enumerate(flat) if x is s)]
            mark = (", real" + (", survives Holm" if holm_ok else "")) if real else ", not shown"
            more = "; |t| > 2: seeds 3 and 4 asked" if not real and abs(s["t"]) > 2 else ""
            parts.append(
                f"{name} {s['mean']:+.2f} ± {s['half']:.2f} (95 % half-width, {s['n']} seeds, "
                f"t = {s['t']:+.2f}){mark}{more}"
            )
        out.append(f"- {question} {a.label} minus {b.label}: {'; '.join(parts)}.")
    head = ["lines (comparison x probe)", "paired (2+ common seeds)", "interval excludes 0"]
    real = sum(abs(s["mean"]) > s["half"] for s in flat)
    counts = [len(pairs) * len(PROBES), len(flat), real, sum(survives)]
    return section(
        "Verdicts",
        "\n".join(out),
        table([*head, "survive Holm"], [counts]),
        "Each line: row a minus row b on one probe, per seed (the same data and seed on both "
        "sides), mean ± the 95 % half-width t_0.975,n-1 * std / sqrt n of those differences. A "
        f"gap is real when that interval excludes 0; Holm's step-down correction at {ALPHA:g} "
        "runs over every paired line above (both probes).",
    )


NOTES = (
    "online kNN (k=20) and online linear: solo-learn's, inside main_pretrain.py, on the validation "
    "images after the last epoch (the kNN's bank: the last epoch's augmented anchor crops).",
    "offline kNN and linear: frozen backbone features of the un-augmented training and validation "
    "images at the crop size (benchmarks/probe.py). 'random init' is the untrained backbone (one "
    "per seed), 'raw pixels' the normalised images themselves.",
    "s / epoch: training time of an epoch (validation excluded), mean over epochs and seeds; train "
    "s: a run's total. peak mem: the training process's peak RSS, max over seeds. trained by: the "
    "commit that trained the row's runs (result.json), where recorded.",
    "± is the sample std over seeds.",
)


def bench_markdown(results: Sequence[Result], header: Sequence[str]) -> str:
    """``results.md``: header lines, the summary, every run, the regime, the verdicts, notes."""
    lines = aggregate(results)
    md = ["# Benchmark results", "", *[f"- {h}" for h in header], ""]
    md += [section("Summary", summary_table(lines)), section("Runs", runs_table(lines))]
    md += [regime_markdown(lines), mechanism_markdown(lines), verdicts_markdown(lines)]
    notes = list(NOTES) + [
        f"{'FAILED or skipped' if r['status'] != 'ok' else 'Note'}: {r['key']}: "
        f"{(r.get('error') or '?').strip().splitlines()[-1]}"
        for r in results
        if r["status"] != "ok" or r.get("error")
    ]
    return "\n".join(md) + "\n## Notes\n\n" + "".join(f"- {n}\n" for n in notes)


def _curves(run_dirs: Sequence[str]) -> Dict[int, float]:
    """Online kNN per epoch, mean over the runs' records."""
    per: Dict[int, List[float]] = {}
    for d in run_dirs:
        path = Path(d, "record.jsonl")
        for r in read_records(path, "epoch") if path.is_file() else []:
            if r.get("val_knn_acc1") is not None:
                per.setdefault(int(r["epoch"]), []).append(float(r["val_knn_acc1"]))
    return {e: statistics.fmean(v) for e, v in sorted(per.items())}


def draw(lines: Sequence[Line], out: Path) -> List[str]:
    """``results.png``: offline linear and kNN of every row, each seed a point, against training
    time, the untrained backbone and raw pixels as lines; ``curves.png``: the online kNN per epoch
    of each AttentionNCE ablation row beside its attention-off control on the same seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 5.5), sharex=True)
    refs = _references(lines)
    for ax, (metric, name), ref in zip(axes, PROBES, (refs[::2], refs[1::2])):
        for r in (r for r in lines if r.seeds and r.comparison != "reference"):
            xs = [r.per_seed["train_seconds"].get(s) for s in r.seeds]
            ys = [r.per_seed[metric].get(s) for s in r.seeds]
            pts = [(x / 60, y) for x, y in zip(xs, ys) if x is not None and y is not None]
            ax.scatter(*zip(*pts), label=r.label, s=18) if pts else None
        for (mean, _), text, style in zip(ref, (UNTRAINED, PIXELS), ("--", ":")):
            if mean is not None:
                ax.axhline(mean, color="k", linestyle=style, label=text)
        ax.set(xlabel="training minutes", ylabel=f"offline {name} top-1 %", title=name)
    axes[1].legend(fontsize=6, loc="lower right")
    fig.tight_layout()
    fig.savefig(out / "results.png", dpi=110)
    plt.close(fig)
    pairs = [(a, b) for q, a, b in comparisons(lines) if q == "Ablation:" and "off" in b.label]
    if not pairs:
        return ["results.png"]
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for a, b in pairs:
        seeds = [s for s in a.seeds if s in b.seeds]
        pick = [d for s, d in zip(a.seeds, a.run_dirs) if s in seeds]
        ctrl = [d for s, d in zip(b.seeds, b.run_dirs) if s in seeds]
        (line,) = ax.plot(*zip(*_curves(pick).items()), label=f"{a.label}, seeds {seeds}")
        ax.plot(*zip(*_curves(ctrl).items()), linestyle="--", color=line.get_color())
    ax.set(xlabel="epoch", ylabel="online kNN top-1 % (mean over seeds)")
    ax.set_title("AttentionNCE rows (solid) and their attention-off control (dashed)")
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(out / "curves.png", dpi=110)
    plt.close(fig)
    return ["results.png", "curves.png"]


def write_outputs(results: Sequence[Result], markdown: str, out: Path) -> str:
    """``results.md``, ``results.json``, ``runs.csv`` (each run's folder relative to ``out``) and
    the figures."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.md").write_text(markdown)
    relative = [os.path.relpath(r["run_dir"], out) if r.get("run_dir") else "" for r in results]
    dicts = [dict(r, run_dir=d) for r, d in zip(results, relative)]
    (out / "results.json").write_text(json.dumps(dicts, indent=2) + "\n")
    scalar = [k for d in dicts for k, v in d.items() if not isinstance(v, (dict, list))]
    with open(out / "runs.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, list(dict.fromkeys(scalar)), extrasaction="ignore")
        writer.writeheader()
        writer.writerows(dicts)
    figures = draw(aggregate(results), out)
    return f"\nWrote {out / 'results.md'}, results.json, runs.csv and {', '.join(figures)}"
