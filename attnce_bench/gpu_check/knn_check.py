"""Part 3: ``attnce-knn`` on the paper-layout checkpoint of part 2.

``python -m attnce_plugin.cli.knn`` is solo-learn's ``main_knn.py`` with the plugin's methods
registered.

``main_knn.py`` validates custom data with its own transform (Resize 256, CenterCrop 224), so the
32 px images are upscaled here; the numbers only show that the checkpoint loads and evaluates.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any, Dict, List

from attnce_bench.gpu_check.common import (
    PartContext,
    check,
    log_tail,
    part_main,
    python,
    run_logged,
)

_PARAMS = re.compile(r"Running k-NN with params: distance_fx=(\S+), k=(\d+), T=([^.\s]+(?:\.\d+)?)")
_RESULT = re.compile(r"Result: acc@1=([-\d.naninf]+), acc@5=([-\d.naninf]+)")


def parse_results(text: str) -> List[Dict[str, Any]]:
    """The (feature type, distance, k, T, acc@1, acc@5) lines that ``main_knn.py`` printed."""
    rows: List[Dict[str, Any]] = []
    feature, params = "?", None
    for line in text.splitlines():
        if line.startswith("### ") and line.endswith(" ###"):
            feature = line.strip("# ").lower()
        match = _PARAMS.search(line)
        if match:
            params = match.groups()
        match = _RESULT.search(line)
        if match and params is not None:
            rows.append(
                {
                    "feature": feature,
                    "distance": params[0],
                    "k": int(params[1]),
                    "T": params[2],
                    "acc1": float(match.group(1)),
                    "acc5": float(match.group(2)),
                }
            )
    return rows


def run(ctx: PartContext) -> None:
    ckpt_dir = ctx.args.get("checkpoint_dir")
    check(bool(ckpt_dir) and Path(ckpt_dir).is_dir(), f"no checkpoint folder: {ckpt_dir!r}")
    data = ctx.args["data"]
    cmd = [
        python(),
        "-m",
        "attnce_plugin.cli.knn",
        "--pretrained_checkpoint_dir",
        ckpt_dir,
        "--dataset",
        "custom",
        "--train_data_path",
        data["train"],
        "--val_data_path",
        data["val"],
        "--data_format",
        "image_folder",
        "--batch_size",
        "128",
        "--num_workers",
        "4",
        "--k",
        "20",
        "--temperature",
        "0.07",
        "--distance_function",
        "cosine",
        "euclidean",
        "--feature_type",
        "backbone",
        "projector",
    ]
    log = ctx.out / "knn.log"
    proc = run_logged(cmd, ctx.out, log, max(ctx.left() - 3, 1))
    rows = parse_results(log_tail(log, 10**6))
    ctx.emit(
        f"`python -m attnce_plugin.cli.knn --pretrained_checkpoint_dir {ckpt_dir} --dataset "
        "custom ... --k 20 --temperature 0.07 --distance_function cosine euclidean "
        f"--feature_type backbone projector` ({proc['seconds']:.0f} s)"
    )
    ctx.emit()
    ctx.table(
        ["features", "distance", "k", "T", "top-1", "top-5"],
        [
            [r["feature"], r["distance"], r["k"], r["T"], f"{r['acc1']:.2f}", f"{r['acc5']:.2f}"]
            for r in rows
        ],
    )
    ctx.data["results"] = rows
    best = max((r["acc1"] for r in rows if r["feature"] == "backbone"), default=None)
    ctx.key = (
        f"{len(rows)} results; backbone top-1 {best:.1f}"
        if best is not None
        else f"{len(rows)} results"
    )
    check(not proc["timed_out"], f"timed out after {proc['seconds']:.0f} s")
    check(proc["rc"] == 0, f"exit code {proc['rc']}:\n{log_tail(log)}")
    check(len(rows) == 4, f"expected 4 results (2 feature types x 2 distances), got {len(rows)}")
    check(all(0.0 <= r["acc1"] <= 100.0 for r in rows), "an accuracy outside [0, 100]")


if __name__ == "__main__":
    sys.exit(part_main(run))
