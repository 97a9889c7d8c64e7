"""The MoCo form's own settings: does any beat MoCo v3 at equal epochs and at equal time?

The MoCo form (``mocov3_attentionnce``) took its attention settings from the SimCLR form's
defaults. One setting at a time is varied around the shipped config (tau 0.2, d_pos 1, d_neg 10
on the CIFAR family, the partner view's key inside the prototype), next to MoCo v3 at equal
epochs and MoCo v3 retrained for the shipped MoCo form's training time (the variants cost what
the shipped setting costs, within noise: the s / epoch column shows it). Each row's kNN gap to
MoCo v3 is judged by the one noise rule (:func:`benchmarks.report.verdict`)::

    python3 -m benchmarks --experiment moco_settings --seeds 0,1,2 --out bench_out/moco_settings
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Dict, List, Sequence, Tuple

from benchmarks.options import Options
from benchmarks.report import Row, aggregate, clear, fmt, get, table, verdict
from benchmarks.runs import Run, attention_run, bench_runs

FORM = "mocov3_attentionnce"
#: (description, method_kwargs) of each MoCo form row; the first is the shipped setting.
VARIANTS: Tuple[Tuple[str, Dict[str, Any]], ...] = (
    ("shipped (tau 0.2, d_pos 1, d_neg 10, key in prototype)", {}),
    ("temperature 0.5", {"temperature": 0.5}),
    ("d_neg 1", {"d_neg": 1.0}),
    ("d_pos 4", {"d_pos": 4.0}),
    ("key_in_prototype false", {"key_in_prototype": False}),
)
METRICS = (("knn_acc1", "online kNN"), ("linear_acc1", "online linear"),
           ("offline_acc1", "offline linear"))  # fmt: skip


def runs(seeds: Sequence[int], epochs: int, m: int = 4) -> List[Run]:
    """Per seed: MoCo v3, the MoCo form shipped and varied, then MoCo v3 at the shipped form's
    training time (fixed by the first seed's timings)."""
    out: List[Run] = []
    for seed in seeds:
        base = bench_runs(("mocov3", FORM), [seed], epochs, m, extra_m=())
        varied = [attention_run(FORM, m, "equal-epoch", seed, epochs, **kw) for _, kw in VARIANTS]
        out += base[:2] + varied[1:] + base[2:]
    return out


def summarise(results: Sequence[Any], m: int = 4) -> Tuple[str, List[str]]:
    """The table, and the settings clearly ahead of MoCo v3 in kNN at equal epochs and time."""
    rows = {(r.comparison, r.label): r for r in aggregate(results)}
    moco = rows.get(("equal-epoch", "MoCo v3"))
    moco_time = next((r for r in rows.values() if r.comparison == "equal-time"), None)
    head = ["MoCo form setting", "epochs", "seeds", *[t for _, t in METRICS], "s / epoch",
            "kNN vs MoCo v3, equal epochs", "kNN vs MoCo v3, equal time"]  # fmt: skip

    def cells(name: str, r: Row, *gaps: str) -> List[str]:
        return [name, ",".join(map(str, r.epochs)) or "-", str(len(r.seeds)),
                *[fmt(r.stats[a]) for a, _ in METRICS], fmt(r.stats["seconds_per_epoch"], 2),
                *gaps]  # fmt: skip

    body = [cells(n, r, "—", "—") for n, r in
            (("MoCo v3", moco), ("MoCo v3 at the MoCo form's time", moco_time)) if r]  # fmt: skip
    winners = []
    for (desc, kw), label in zip(VARIANTS, [attention_run(FORM, m, "", 0, 0, **kw).label
                                            for _, kw in VARIANTS]):  # fmt: skip
        row = rows.get(("equal-epoch", label))
        if row is None:
            continue
        knn = row.stats["knn_acc1"]
        refs = [moco.stats["knn_acc1"] if moco else (None, None),
                moco_time.stats["knn_acc1"] if moco_time else (None, None)]  # fmt: skip
        if all(clear(knn, ref) for ref in refs):
            winners.append(desc)
        body.append(cells(desc, row, *[verdict(knn, ref) for ref in refs]))
    return table(head, body), winners


def main(opts: Options, command: str) -> int:
    from benchmarks.__main__ import prepare_data, train_and_report
    from benchmarks.experiments import out_dir, seeds_epochs, write_table

    out = out_dir(opts, "moco_settings")
    seeds, epochs = seeds_epochs(opts)
    opts = replace(opts, references=False)  # the rows compare pretrained models only
    the_runs = runs(seeds, epochs, opts.num_positives)
    results, _ = train_and_report(
        opts, the_runs, prepare_data(opts, out), out, command, "moco_settings"
    )
    if opts.dry_run:
        return 0
    md, winners = summarise(results, opts.num_positives)
    write_table(out, command, md + "\n\n" + (
        "Settings that clearly beat MoCo v3 in online kNN at equal epochs and at equal time: "
        + ", ".join(winners) + "." if winners else "No setting clearly beats MoCo v3 in online "
        "kNN at both equal epochs and equal time."
    ))  # fmt: skip
    return 0 if all(get(r, "status") == "ok" for r in results) else 1
