"""The one report: tables from run results (``result.json`` dicts), the one noise rule
(:func:`clear`), paired statistics over seeds, the regime, the verdicts, the output files."""

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
from benchmarks.runs import PIXELS, QUESTIONS, UNTRAINED

#: (mean, sample std); std is None with fewer than 2 values, mean None with none.
MeanStd = Tuple[Optional[float], Optional[float]]
Result = Dict[str, Any]


def table(head: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(map(str, head)) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(map(str, cells)) + " |" for cells in rows])


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


def clear(a: MeanStd, b: MeanStd) -> Optional[bool]:
    """The project's noise rule: a beats b clearly when mean_a - mean_b > std_a + std_b (sample
    stds over seeds); None (undecided) unless both have 2+ seeds."""
    if a[0] is None or b[0] is None or a[1] is None or b[1] is None:
        return None
    return a[0] - b[0] > a[1] + b[1]


def verdict(a: MeanStd, b: MeanStd) -> str:
    """``"+1.2, clear"`` / ``"-0.3, not clear"`` / ``"+0.5, one seed"``: a - b and the noise rule
    in whichever direction the gap points."""
    if a[0] is None or b[0] is None:
        return "n/a"
    gap = a[0] - b[0]
    decided = clear(a, b) if gap >= 0 else clear(b, a)
    return f"{gap:+.1f}, {'one seed' if decided is None else 'clear' if decided else 'not clear'}"


def t975(df: int) -> float:
    from scipy.stats import t  # solo-learn's own requirement

    return float(t.ppf(0.975, df))


def paired(a: Dict[int, float], b: Dict[int, float]) -> Optional[Dict[str, float]]:
    """Per-seed differences a - b over the seeds both have: their mean, sample std, the paired t
    (mean / (std / sqrt n)) and the smallest gap those seeds detect at that spread, the 95 %
    half-width t_{0.975, n-1} * std / sqrt(n). None under 2 common seeds."""
    diffs = [a[s] - b[s] for s in sorted(set(a) & set(b))]
    if len(diffs) < 2:
        return None
    n, mean, std = len(diffs), statistics.fmean(diffs), statistics.stdev(diffs)
    se = std / math.sqrt(n)
    t = mean / se if se > 0 else math.copysign(math.inf, mean) if mean else 0.0
    return {"n": n, "mean": mean, "std": std, "t": t, "detectable": t975(n - 1) * se}


#: The attention's activity at the end of training (issue 47): record key, column title.
ACTIVITY = (("eff_num_positives", "eff. positives"), ("eff_num_negatives", "eff. negatives"),
            ("max_beta", "max beta"))  # fmt: skip


def activity(run_dir: str) -> Dict[str, float]:
    """The last epoch's attention values of an AttentionNCE run, with P (positives an anchor
    weighs) and K (its negatives) from its config; {} for a run without them."""
    folder = Path(run_dir or "/nonexistent")
    if not (folder / "record.jsonl").is_file() or not (folder / "config.yaml").is_file():
        return {}
    records = read_records(folder / "record.jsonl")
    last = next((r for r in reversed(records) if r.get("event") == "epoch"), {})
    found = {k: last.get(f"train_attn_{k}", last.get(f"train_attn_{k}_epoch")) for k, _ in ACTIVITY}
    if None in found.values():
        return {}
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(folder / "config.yaml")
    world = next((r.get("world_size") or 1 for r in records if r.get("event") == "fit_start"), 1)
    b, m = int(cfg.optimizer.batch_size) * world, int(cfg.views.num_positives)
    kw = cfg.method_kwargs
    if cfg.method == "mocov3_attentionnce":  # one query against the batch's keys
        p, k = m + bool(kw.get("key_in_prototype", True)), b - 1
    else:
        p, k = m, (b - 1 if kw.get("anchor", "views") == "mean" else 2 * b - 2)
    return {**found, "P": p, "K": k}


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
    run_dir: str = ""
    matched_to: Optional[str] = None


METRICS = (("knn_acc1", "online kNN top-1 %"), ("linear_acc1", "online linear top-1 %"),
           ("offline_knn_acc1", "offline kNN top-1 %"),
           ("offline_acc1", "offline linear top-1 %"))  # fmt: skip
HEALTH = (("offline_uniformity", "uniformity (lower = more spread)"),
          ("offline_eff_rank", "effective rank"))  # fmt: skip
PROBES = ("offline_acc1", "offline_knn_acc1")
NUMBERS = [m for m, _ in METRICS + HEALTH] + ["seconds_per_epoch", "train_seconds"]  # fmt: skip


def aggregate(results: Iterable[Result]) -> List[Line]:
    """Results grouped by (comparison, label) in first-seen order: mean ± std over the successful
    seeds of every number, the max peak memory, the attention's activity."""
    groups: Dict[Tuple[str, str], List[Result]] = {}
    for r in results:
        groups.setdefault((r["comparison"], r["label"]), []).append(r)
    lines = []
    for (comparison, label), runs in groups.items():
        ok = [r for r in runs if r["status"] == "ok"]
        seeds = [int(r["seed"]) for r in ok]
        acts = [activity(r.get("run_dir", "")) for r in ok]
        per_seed = {a: {s: r[a] for s, r in zip(seeds, ok) if r.get(a) is not None}
                    for a in NUMBERS}  # fmt: skip
        stats = {a: mean_std(per_seed[a].values()) for a in NUMBERS}
        for key in [k for k, _ in ACTIVITY] + ["P", "K"]:
            stats[key] = mean_std(a.get(key) for a in acts)
        mems = [r["peak_mem_mib"] for r in ok if r.get("peak_mem_mib") is not None]
        stats["peak_mem_mib"] = (max(mems) if mems else None, None)
        failed = [int(r["seed"]) for r in runs if r["status"] != "ok"]
        epochs = sorted({int(r["epochs"]) for r in ok})
        run_dir = next((r.get("run_dir", "") for r in ok), "")
        lines.append(Line(comparison, label, seeds, failed, epochs, stats, per_seed, run_dir,
                          runs[0].get("matched_to")))  # fmt: skip
    return lines


def rows_table(lines: Sequence[Line], columns: Sequence[Tuple[str, str]] = METRICS) -> str:
    head = ["method", "epochs", "seeds", *[t for _, t in columns], "s / epoch", "train s"]
    tail = (("seconds_per_epoch", 1), ("train_seconds", 0), ("peak_mem_mib", 0))
    body = []
    for r in lines:
        seeds = (",".join(map(str, r.seeds)) or "-") + (
            f" (failed: {','.join(map(str, r.failed))})" if r.failed else "")  # fmt: skip
        cells = [fmt(r.stats[a], 2 if a == "offline_uniformity" else 1) for a, _ in columns]
        cells += [fmt((r.stats[a][0], None), d) for a, d in tail]  # means only
        body.append([r.label, ",".join(map(str, r.epochs)) or "-", seeds, *cells])
    return table(head + ["peak mem MiB"], body)


#: The learning regime's bars (issue 19), on the offline probes' means: step 1, linear and kNN
#: both beat the untrained backbone by STEP1 points; step 2, linear beats the raw pixels by STEP2.
STEP1, STEP2 = 3.0, 2.0


def _gap(a: Optional[float], b: Optional[float]) -> Optional[float]:
    # Rounded so that float32 noise cannot decide a bar (83.99999737 - 81.99999928 is 2).
    return None if a is None or b is None else round(a - b, 4)


def _references(lines: Sequence[Line], seeds: Optional[Sequence[int]] = None) -> List[MeanStd]:
    """Untrained linear, kNN (over ``seeds``, all by default), pixels linear, kNN."""
    by = {r.label: r for r in lines if r.comparison == "reference"}
    out = []
    for label, metric in [(UNTRAINED, m) for m in PROBES] + [(PIXELS, m) for m in PROBES]:
        vals = by[label].per_seed[metric] if label in by else {}
        pick = seeds if label == UNTRAINED and seeds is not None else list(vals)
        out.append(mean_std(vals[s] for s in pick if s in vals))
    return out


def regime_markdown(lines: Sequence[Line]) -> str:
    """Each trained row's mean probes against the untrained backbone and the raw pixels, which
    step of the regime they reach, and an AttentionNCE row's attention activity."""
    body = []
    for r in (r for r in lines if r.seeds and r.comparison != "reference"):
        lin, knn = (r.stats[m] for m in PROBES)
        u_lin, u_knn, p_lin, _ = _references(lines, r.seeds)
        gaps = [_gap(lin[0], u_lin[0]), _gap(knn[0], u_knn[0]), _gap(lin[0], p_lin[0])]
        step1 = "n/a" if None in gaps[:2] else "yes" if min(gaps[:2]) >= STEP1 else "no"
        step2 = "n/a" if gaps[2] is None else "yes" if gaps[2] >= STEP2 else "no"
        act = ["-"] * 3
        if r.stats["max_beta"][0] is not None:
            p, k = (int(r.stats[x][0]) for x in ("P", "K"))
            pos, neg, beta = (r.stats[a][0] for a, _ in ACTIVITY)
            act = [f"{pos:.2f} of {p}", f"{neg:.2f} of {k}", f"{beta:.2f}"]
        body.append([r.label, ",".join(map(str, r.epochs)), ",".join(map(str, r.seeds)),
                     fmt(lin, 2), fmt(knn, 2), *["n/a" if g is None else f"{g:+.2f}" for g in gaps],
                     step1, step2, *act])  # fmt: skip
    u_lin, u_knn, p_lin, p_knn = _references(lines)
    head = ["method", "epochs", "seeds", "offline linear", "offline kNN", "linear - untrained",
            "kNN - untrained", "linear - pixels", f"step 1 (both >= untrained + {STEP1:g})",
            f"step 2 (linear >= pixels + {STEP2:g})", *[t for _, t in ACTIVITY]]  # fmt: skip
    return "\n".join([
        "## Regime", "",
        f"Gaps are of the means over the row's seeds, against the untrained backbone's mean over "
        f"the same seeds (over all seeds: linear {fmt(u_lin, 2)}, kNN {fmt(u_knn, 2)}) and the "
        f"raw pixels (linear {fmt(p_lin, 2)}, kNN {fmt(p_knn, 2)}).", "",
        table(head, body), "",
        "Attention at the last epoch, mean over seeds (`train_attn_*` of each record): effective "
        "positives 1 / sum alpha^2 of P, effective negatives (sum beta)^2 / sum beta^2 of K, and "
        "the largest beta; uniform weights give P, K and 1.", "",
    ])  # fmt: skip


def verdicts_markdown(lines: Sequence[Line]) -> str:
    """Per question: row a minus row b on both offline probes with the noise rule, then the
    paired statistics of the per-seed differences; "" when no question has both rows. Each
    ablation row is set against the same views, the attention off and equal-time SimCLR."""
    rows = {r.label: r for r in lines if r.seeds}
    out = []
    ablated = [r for r in lines if r.comparison == "ablation" and r.seeds  # the controls' M
               and r.label.startswith(QUESTIONS[2][1].label[:-1] + ",")]  # fmt: skip
    extra = [("Ablation:", r, QUESTIONS[i][2]) for r in ablated for i in (1, 2, 0)]
    for question, row_a, row_b in [*QUESTIONS, *extra]:
        a, b = rows.get(row_a.label), rows.get(row_b.label)
        if a is None or b is None:
            gone = [f"'{x.label}'" for x, y in ((row_a, a), (row_b, b)) if y is None]
            out.append(f"- {question} Not run yet ({' and '.join(gone)} "
                       f"{'have' if len(gone) > 1 else 'has'} no record).")  # fmt: skip
            continue
        gaps = [f"{name} {verdict(a.stats[m], b.stats[m])}"
                for m, name in zip(PROBES, ("offline linear", "offline kNN"))]  # fmt: skip
        seeds = f"seeds {','.join(map(str, a.seeds))} / {','.join(map(str, b.seeds))}"
        out.append(f"- {question} {a.label} minus {b.label}: {'; '.join(gaps)} ({seeds}).")
        stats = {name: paired(a.per_seed[m], b.per_seed[m])
                 for m, name in zip(PROBES, ("linear", "kNN"))}  # fmt: skip
        said = [f"{name} {s['mean']:+.2f} ± {s['std']:.2f}, t = {s['t']:+.2f}, detectable "
                f"{s['detectable']:.2f}" for name, s in stats.items() if s]  # fmt: skip
        if said:
            n = next(s["n"] for s in stats.values() if s)
            out.append(f"  - paired over {n} seeds: {'; '.join(said)}.")
    if all("Not run yet" in line for line in out):
        return ""
    return "\n".join(["## Verdicts", "", *out, "",
                      "Paired: the per-seed differences (each seed the same data and seed on both "
                      "sides), their mean ± std, the paired t = mean / (std / sqrt n), and the "
                      "smallest gap those n seeds detect at that spread, t_0.975,n-1 * std / "
                      "sqrt n (the 95 % half-width); the noise rule above is the verdict.",
                      ""])  # fmt: skip


def _equal_time(lines: Sequence[Line]) -> List[Line]:
    """Each equal-time row followed by the row whose training time it matched."""
    by_label = {r.label: r for r in lines if r.comparison == "equal-epoch"}
    out: List[Line] = []
    for r in (r for r in lines if r.comparison == "equal-time"):
        out.append(r)
        target = by_label.get(r.matched_to or "")
        if target is not None and target not in out:
            out.append(target)
    return out


NOTES = (
    "online kNN (k=20) and online linear: solo-learn's, inside main_pretrain.py, on the validation "
    "images after the last epoch (the kNN's bank: the last epoch's augmented anchor crops).",
    "offline kNN and linear: frozen backbone features of the un-augmented training and validation "
    "images at the crop size (benchmarks/probe.py): solo-learn's weighted kNN rule (k=20, cosine, "
    "T=0.07) and softmax regression (L-BFGS, L2 picked on a 20 % hold-out). 'random init' is the "
    "untrained backbone (one per seed), 'raw pixels' the normalised images themselves.",
    "s / epoch: training time of an epoch (its start to its last batch, validation excluded), mean "
    "over epochs and seeds; train s: a run's total. peak mem: the training process's peak RSS "
    "(records of 0.5.0 and before: the peak summed PSS of its process tree), max over seeds.",
    "± is the sample std over seeds. A gap is clear when it exceeds the two stds added "
    "(benchmarks/report.py: clear).",
)


def bench_markdown(results: Sequence[Result], header: Sequence[str]) -> str:
    """``results.md``: header lines, one table per comparison, health, regime, verdicts, notes."""
    lines = aggregate(results)
    md = ["# Benchmark results", "", *[f"- {h}" for h in header], ""]
    ablated = {r.label.split(" (")[0] for r in lines if r.comparison == "ablation"}
    sections = (
        ("Equal epochs", "Every method for the same epochs, batch size and seeds; the untrained "
         "backbone and the raw pixels on the same images last.",
         [r for r in lines if r.comparison in ("equal-epoch", "reference")]),
        ("Equal wall-clock", "Each baseline retrained for as many epochs as fit in the training "
         "time of the row under it (timed on the first seed's equal-epoch runs).",
         _equal_time(lines)),
        ("Ablation", "One setting varied at a time around the shipped one; the same method's "
         "equal-epoch rows (the shipped setting) first.",
         [r for r in lines if r.comparison == "equal-epoch" and r.label.split(" (")[0] in ablated]
         + [r for r in lines if r.comparison == "ablation"]),
    )  # fmt: skip
    for title, text, chosen in sections:
        if any(r.comparison != "reference" for r in chosen):
            md += [f"## {title}", "", text, "", rows_table(chosen), ""]
    healthy = [r for r in lines if r.seeds and r.stats["offline_eff_rank"][0] is not None]
    if healthy:
        md += ["## Representation health", "", "Frozen backbone features of the validation "
               "images (at most 2048): uniformity (Wang & Isola, 2020) and effective rank of "
               "their covariance (Roy & Vetterli, 2007).", "",
               rows_table(healthy, HEALTH), ""]  # fmt: skip
    md += [regime_markdown(lines), verdicts_markdown(lines)]
    notes = list(NOTES) + [
        f"{'FAILED or skipped' if r['status'] != 'ok' else 'Note'}: {r['key']}: "
        f"{(r.get('error') or '?').strip().splitlines()[-1]}"
        for r in results
        if r["status"] != "ok" or r.get("error")
    ]
    return "\n".join(md) + "\n## Notes\n\n" + "".join(f"- {n}\n" for n in notes)


def write_outputs(results: Sequence[Result], markdown: str, out: Path) -> str:
    """``results.md``, ``results.json``, ``runs.csv`` (each run's folder relative to ``out``)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.md").write_text(markdown)
    dicts = [dict(r, run_dir=os.path.relpath(r["run_dir"], out) if r.get("run_dir") else "")
             for r in results]  # fmt: skip
    (out / "results.json").write_text(json.dumps(dicts, indent=2) + "\n")
    scalar = [k for d in dicts for k, v in d.items() if not isinstance(v, (dict, list))]
    with open(out / "runs.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, list(dict.fromkeys(scalar)), extrasaction="ignore")
        writer.writeheader()
        writer.writerows(dicts)
    return f"\nWrote {out / 'results.md'}, results.json and runs.csv"
