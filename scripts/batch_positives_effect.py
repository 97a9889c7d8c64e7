#!/usr/bin/env python3
"""What ``method_kwargs.batch_positives: true`` does to accuracy and training time.

Runs the benchmark (``python3 -m attnce_plugin.bench``, solo-learn's ``main_pretrain.py`` on the
embedded Fashion-MNIST subset) for AttentionNCE (M = 4) six times: positives at the anchors'
size or at ``--small-size`` px, each with the positives forwarded per crop (solo-learn's way) or
batched, and the small ones also with ``positives_update_bn: false``. Same seeds, data and budget; SimCLR is run once beside them for scale. Each variant has
its own output folder, so a re-run reuses finished runs. Prints one table: kNN / online linear /
offline probe accuracy (mean +- std over seeds) and seconds per epoch.

Usage::

    python3 scripts/batch_positives_effect.py --out bench_out/batch_positives
    python3 scripts/batch_positives_effect.py --preset smoke --out bench_out/bp_smoke   # minutes
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from attnce_plugin.bench.report import fmt_mean_std, mean_std  # noqa: E402

#: (folder, positives description, extra --set values); the first also runs SimCLR.
Variant = Tuple[str, str, List[str]]


def variants(small_size: int) -> List[Variant]:
    """The settings compared: positive size x per-crop/batched, and for small positives whether
    they update BatchNorm's running statistics."""
    batched = ["attentionnce:method_kwargs.batch_positives=true"]
    small = [f"attentionnce:bench.positive_crop_size={small_size}"]
    frozen = ["attentionnce:method_kwargs.positives_update_bn=false"]
    return [
        ("full_per_crop", "anchor size, per crop", []),
        ("full_batched", "anchor size, batched", batched),
        ("small_per_crop", f"{small_size} px, per crop", small),
        ("small_batched", f"{small_size} px, batched", small + batched),
        # Small positives kept out of BatchNorm's running statistics (evaluation uses them).
        ("small_per_crop_bn_frozen", f"{small_size} px, per crop, positives_update_bn=false",
         small + frozen),
        ("small_batched_bn_frozen", f"{small_size} px, batched, positives_update_bn=false",
         small + batched + frozen),
    ]


def bench_command(out: Path, sets: Sequence[str], with_simclr: bool,
                  passthrough: Sequence[str]) -> List[str]:
    """The benchmark call of one variant."""
    cmd = [sys.executable, "-m", "attnce_plugin.bench", "--out", str(out),
           "--methods", "simclr,attentionnce" if with_simclr else "attentionnce",
           "--no-time-matched", "--extra-m", "", *passthrough]
    for value in sets:
        cmd += ["--set", value]
    return cmd


def load_rows(out: Path) -> List[Dict[str, Any]]:
    """The benchmark's per-run results of one variant folder."""
    return json.loads((out / "results.json").read_text())


def summary(runs: Sequence[Dict[str, Any]], label: str) -> Dict[str, str]:
    """Mean +- std over seeds of the runs labelled ``label`` (failed runs count as missing)."""
    mine = [r for r in runs if r["label"] == label and r["comparison"] == "equal-epoch"]
    ok = [r for r in mine if r["status"] == "ok"]
    cell = {k: fmt_mean_std(mean_std([r.get(k) for r in ok]))
            for k in ("knn_acc1", "linear_acc1", "offline_acc1")}
    cell["s_per_epoch"] = fmt_mean_std(mean_std([r.get("seconds_per_epoch") for r in ok]), 2)
    cell["seeds"] = f"{len(ok)}/{len(mine)}"
    return cell


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("bench_out/batch_positives"))
    parser.add_argument("--small-size", type=int, default=16, help="small positive crop size (px)")
    parser.add_argument("--preset", default="default", help="benchmark preset (smoke/default/long)")
    parser.add_argument("--seeds", default=None, help="e.g. 0,1 (default: the preset's)")
    args = parser.parse_args(argv)
    if args.small_size < 1:
        parser.error(f"--small-size must be an integer >= 1, got {args.small_size}")
    # One converted dataset for all variants; checkpoints kept for
    # scripts/attention_vs_augmentation.py.
    passthrough = ["--preset", args.preset, "--data-cache", str(args.out / "data"),
                   "--keep-checkpoints"] + (["--seeds", args.seeds] if args.seeds else [])

    rows: List[Tuple[str, Dict[str, str]]] = []
    simclr: Optional[Dict[str, str]] = None
    for i, (folder, description, sets) in enumerate(variants(args.small_size)):
        out = args.out / folder
        cmd = bench_command(out, sets, i == 0, passthrough)
        print("$ " + " ".join(shlex.quote(c) for c in cmd), file=sys.stderr, flush=True)
        done = subprocess.run(cmd, cwd=REPO)
        if done.returncode != 0:
            print(f"error: the benchmark failed for {folder} (exit {done.returncode})",
                  file=sys.stderr)
            return done.returncode
        runs = load_rows(out)
        rows.append((description, summary(runs, "AttentionNCE (M=4)")))
        if i == 0:
            simclr = summary(runs, "SimCLR")

    cli = " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    print(f"<!-- scripts/batch_positives_effect.py {cli} -->")
    print("| method | positives | kNN acc | online linear acc | offline probe acc | s/epoch | seeds ok |")
    print("|---|---|---|---|---|---|---|")
    table = ([("SimCLR", "(none)", simclr)] if simclr else []) + [
        ("AttentionNCE (M=4)", d, c) for d, c in rows]
    for method, description, c in table:
        print(f"| {method} | {description} | {c['knn_acc1']} | {c['linear_acc1']} | "
              f"{c['offline_acc1']} | {c['s_per_epoch']} | {c['seeds']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
