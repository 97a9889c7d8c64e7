"""Parts 6a / 6b: step time through Lightning (:mod:`attnce_bench.cost.bench_step_lightning`).

CUDA: 224 px, batch 128, ``16-mixed``, channels_last; SimCLR, AttentionNCE M=4 (paper layout),
MoCo v3, its AttentionNCE form, and the multi-crop config (4 x 96 px positives), eager (6a) or with
``method_kwargs.compile=true`` (6b; the warm-up steps hold the compilation). Rows are saved as they
are measured, so a part stopped by its timeout still reports the methods it finished.
"""

from __future__ import annotations

import sys
from typing import Any, Dict, List

from attnce_bench.gpu_check.common import PartContext, check, part_main


def bench_argv(ctx: PartContext) -> List[str]:
    compile_ = ["--compile"] if ctx.args.get("compile") else []
    data = ["--train-path", ctx.args["data"]["train"]]
    if ctx.tiny:
        return [
            "--device",
            "cpu",
            "--size",
            "32",
            "--small-size",
            "16",
            "--batch-size",
            "4",
            "--precision",
            "32",
            "--warmup",
            "1",
            "--steps",
            "2",
            "--tiny-heads",
            *compile_,
            *data,
        ]
    if ctx.cuda:
        return [
            "--device",
            "cuda",
            "--size",
            "224",
            "--batch-size",
            "128",
            "--precision",
            "16-mixed",
            "--warmup",
            "5",
            "--steps",
            "20",
            *compile_,
            *data,
        ]
    return [
        "--device",
        "cpu",
        "--size",
        "32",
        "--small-size",
        "16",
        "--batch-size",
        "16",
        "--precision",
        "32",
        "--warmup",
        "2",
        "--steps",
        "5",
        *compile_,
        *data,
    ]


def _ratio(rows: Dict[str, Dict[str, Any]], name: str, base: str) -> str:
    if name in rows and base in rows:
        return f"{rows[name]['s_per_step'] / rows[base]['s_per_step']:.2f}x"
    return "n/a"


def run(ctx: PartContext) -> None:
    from attnce_bench.cost import bench_step_lightning as bench

    argv = bench_argv(ctx)
    args = bench.build_parser().parse_args(argv)
    if args.small_size is None:
        args.small_size = max(8, round(args.size * 96 / 224))
    rows: List[Dict[str, Any]] = []
    header = f"`python3 -m attnce_bench.cost.bench_step_lightning {' '.join(argv)}`"

    def publish() -> None:
        ctx.lines = [header, "", *bench.table(rows, args), ""]
        by = {r["method"]: r for r in rows}
        multicrop = next((r["method"] for r in rows if "multicrop" in r["method"]), "")
        ctx.key = (
            f"{len(rows)}/5 methods; AttentionNCE M=4 {_ratio(by, 'attentionnce M=4', 'simclr')}"
            f" SimCLR, multicrop {_ratio(by, multicrop, 'simclr')}, MoCo form "
            f"{_ratio(by, 'mocov3_attentionnce M=4', 'mocov3')} MoCo v3"
        )
        if "simclr" in by:
            ctx.key += f"; SimCLR {by['simclr']['s_per_step'] * 1e3:.1f} ms/step"
        ctx.data["rows"] = rows
        ctx.save()

    publish()
    for row in bench.run_rows(args):
        rows.append(row)
        print(
            f"[{row['method']}] {row['s_per_step']:.4f} s/step, first step "
            f"{row['first_step_s']:.1f} s",
            flush=True,
        )
        publish()
    check(len(rows) == 5, f"{len(rows)} of 5 methods timed")


if __name__ == "__main__":
    sys.exit(part_main(run))
