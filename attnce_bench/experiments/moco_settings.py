#!/usr/bin/env python3
"""The MoCo form's own settings: does any beat MoCo v3 at equal epochs and at equal time?

The MoCo form (``mocov3_attentionnce``, this project's design) took its attention settings from the
SimCLR form's defaults. This sweep varies, one at a time around the shipped config (tau 0.2,
d_pos 1, d_neg 10 on the CIFAR family, the partner view's key inside the prototype):

* ``temperature`` 0.5 (the SimCLR form's) instead of MoCo v3's 0.2,
* ``d_neg`` 1 instead of 10,
* ``d_pos`` 4 instead of 1,
* ``key_in_prototype`` false: the prototype over the positives' keys only.

One benchmark (:func:`attnce_bench.api.run_benchmark`) gives MoCo v3, the MoCo form with the
shipped settings, and MoCo v3 retrained for the MoCo form's training time (equal wall-clock); one
more per variant trains the MoCo form with that setting. All share seeds, data and budget. Each
row's gap to MoCo v3 is reported at equal epochs and at equal time (against the time-matched
MoCo v3: the variants cost what the shipped setting costs, within noise, which the s / epoch
column shows), with the rule of docs/results.md: a gap is clear when it exceeds the two standard
deviations added.

Usage::

    python3 -m attnce_bench.experiments.moco_settings --seeds 0,1,2 --out bench_out/moco_settings
    python3 -m attnce_bench.experiments.moco_settings --preset smoke --out bench_out/ms_smoke   # minutes
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from attnce_bench.api import BenchOptions
from attnce_bench.arglists import int_list
from attnce_bench.report import fmt_mean_std, mean_std, table

#: (folder, description, --set values for the MoCo form); the first is the shipped setting.
VARIANTS: Tuple[Tuple[str, str, Tuple[str, ...]], ...] = (
    ("base", "shipped (tau 0.2, d_pos 1, d_neg 10, key in prototype)", ()),
    ("tau_0.5", "temperature 0.5", ("mocov3_attentionnce:method_kwargs.temperature=0.5",)),
    ("d_neg_1", "d_neg 1", ("mocov3_attentionnce:method_kwargs.d_neg=1.0",)),
    ("d_pos_4", "d_pos 4", ("mocov3_attentionnce:method_kwargs.d_pos=4.0",)),
    (
        "key_out",
        "key_in_prototype false",
        ("mocov3_attentionnce:method_kwargs.key_in_prototype=false",),
    ),
)

#: (result attribute, column title), the first decides.
METRICS = (
    ("knn_acc1", "online kNN"),
    ("linear_acc1", "online linear"),
    ("offline_acc1", "offline linear"),
)

MOCO = "MoCo v3"
MOCO_TIME = "MoCo v3 (time of MoCo v3 + AttentionNCE)"
FORM = "MoCo v3 + AttentionNCE (M=4)"

MeanStd = Tuple[Optional[float], Optional[float]]


def bench_options(
    base: BenchOptions, folder: Path, sets: Sequence[str], first: bool
) -> BenchOptions:
    """The benchmark of one variant: the first also trains MoCo v3 and its time-matched run."""
    return dataclasses.replace(
        base,
        out=str(folder),
        sets=list(sets),
        extra_m=(),
        methods=("mocov3", "mocov3_attentionnce") if first else ("mocov3_attentionnce",),
        time_matched=first,
    )


def stats(runs: Sequence[Dict[str, Any]], label: str, comparison: str) -> Dict[str, MeanStd]:
    """Mean and sample std over the seeds of the successful runs of one row."""
    ok = [
        r
        for r in runs
        if r["label"] == label and r["comparison"] == comparison and r["status"] == "ok"
    ]
    out = {attr: mean_std([r.get(attr) for r in ok]) for attr, _ in METRICS}
    out["seconds_per_epoch"] = mean_std([r.get("seconds_per_epoch") for r in ok])
    out["epochs"] = (ok[0]["epochs"], None) if ok else (None, None)
    out["seeds"] = (len(ok), None)
    return out


def gap(a: MeanStd, b: MeanStd) -> Tuple[Optional[float], Optional[bool]]:
    """(a - b, whether it exceeds std_a + std_b); None parts where unknown."""
    if a[0] is None or b[0] is None:
        return None, None
    if a[1] is None or b[1] is None:
        return a[0] - b[0], None
    return a[0] - b[0], abs(a[0] - b[0]) > a[1] + b[1]


def _gap_text(g: Tuple[Optional[float], Optional[bool]]) -> str:
    value, is_clear = g
    if value is None:
        return "n/a"
    word = "clear" if is_clear else "not clear" if is_clear is False else "one seed"
    return f"{value:+.1f} ({word})"


def summarise(
    rows: Dict[str, Dict[str, MeanStd]], moco: Dict[str, MeanStd], moco_time: Dict[str, MeanStd]
) -> Tuple[str, List[str]]:
    """The table, and the variants that clearly beat MoCo v3 in kNN at equal epochs and time."""
    head = (
        ["MoCo form setting", "epochs", "seeds"]
        + [t for _, t in METRICS]
        + ["s / epoch", "kNN gap vs MoCo v3, equal epochs", "kNN gap vs MoCo v3, equal time"]
    )
    lines = []
    for name, row in (("MoCo v3", moco), ("MoCo v3 at the MoCo form's time", moco_time)):
        lines.append(
            [name, str(row["epochs"][0]), str(row["seeds"][0])]
            + [fmt_mean_std(row[a]) for a, _ in METRICS]
            + [fmt_mean_std(row["seconds_per_epoch"], 2), "—", "—"]
        )
    winners = []
    for desc, row in rows.items():
        eq_epochs = gap(row["knn_acc1"], moco["knn_acc1"])
        eq_time = gap(row["knn_acc1"], moco_time["knn_acc1"])
        if eq_epochs[1] and eq_time[1] and eq_epochs[0] > 0 and eq_time[0] > 0:
            winners.append(desc)
        lines.append(
            [desc, str(row["epochs"][0]), str(row["seeds"][0])]
            + [fmt_mean_std(row[a]) for a, _ in METRICS]
            + [fmt_mean_std(row["seconds_per_epoch"], 2), _gap_text(eq_epochs), _gap_text(eq_time)]
        )
    return table(head, lines), winners


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("bench_out/moco_settings"))
    parser.add_argument("--preset", default="default", help="benchmark preset")
    parser.add_argument("--seeds", type=int_list, help="e.g. 0,1,2 (default: the preset's)")
    args = parser.parse_args(argv)

    from attnce_bench.api import run_benchmark

    base = BenchOptions(
        preset=args.preset, seeds=args.seeds, references=False, data_cache=str(args.out / "data")
    )
    rows: Dict[str, Dict[str, MeanStd]] = {}
    moco: Dict[str, MeanStd] = {}
    moco_time: Dict[str, MeanStd] = {}
    for i, (folder, desc, sets) in enumerate(VARIANTS):
        report = run_benchmark(
            bench_options(base, args.out / folder, sets, i == 0), command=f"moco_settings {folder}"
        )
        if report.failed:
            print(f"error: runs failed for {folder}; see {report.out}/results.md", file=sys.stderr)
            return 1
        runs = [dataclasses.asdict(r) for r in report.results]
        rows[desc] = stats(runs, FORM, "equal-epoch")
        if i == 0:
            moco = stats(runs, MOCO, "equal-epoch")
            moco_time = stats(runs, MOCO_TIME, "equal-time")
    md, winners = summarise(rows, moco, moco_time)
    cli = " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    text = (
        f"<!-- python3 -m attnce_bench.experiments.moco_settings {cli} -->\n\n{md}\n\n"
        + (
            "Settings that clearly beat MoCo v3 in online kNN at equal epochs and at equal "
            f"time: {', '.join(winners)}."
            if winners
            else "No setting clearly beats MoCo v3 in online kNN at both equal epochs and equal "
            "time."
        )
        + "\n"
    )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "table.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
