"""``python -m attnce_bench.gpu_check prepare|run`` (what ``scripts/gpu_check.sh`` calls).

prepare [--dir .gpucheck]                 here, where pip reaches PyPI: build the carried folder
run [--cpu] [--tiny] [--out DIR]          on the GPU machine (or --cpu here): every part, one
    [--deadline 540] [--dir .gpucheck]    deadline, tables and logs in --out (default $OUT)
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Optional, Sequence

from attnce_bench.gpu_check import DEFAULT_DIR


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpu_check", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("prepare", help="build the folder that travels to the GPU machine")
    p.add_argument("--dir", type=Path, default=DEFAULT_DIR, help=f"default {DEFAULT_DIR}")
    p.add_argument("--num-train", type=int, default=None, help="Fashion-MNIST training images")
    p.add_argument("--num-val", type=int, default=None, help="Fashion-MNIST validation images")
    p.add_argument(
        "--wheel-cache",
        type=Path,
        default=None,
        help="downloaded wheels kept here between runs (default "
        "$ATTNCE_GPUCHECK_WHEEL_CACHE or ~/.cache/attnce_plugin/gpucheck-wheels)",
    )

    r = sub.add_parser("run", help="run the check (on the GPU machine, or --cpu here)")
    r.add_argument("--dir", type=Path, default=DEFAULT_DIR, help=f"default {DEFAULT_DIR}")
    r.add_argument(
        "--out",
        type=Path,
        default=None,
        help="where summary.md, report.md, results.json and logs.tar.gz go "
        "(default $OUT, else bench_out/gpu_check)",
    )
    r.add_argument(
        "--work",
        type=Path,
        default=None,
        help="scratch folder for checkpoints and logs (default: a new folder in /tmp; "
        "kept out of --out, which the device tool brings back)",
    )
    r.add_argument("--cpu", action="store_true", help="run the parts that need no CUDA, on the CPU")
    r.add_argument(
        "--tiny",
        action="store_true",
        help="smallest sizes everywhere (what tests/bench/test_gpu_check.py runs)",
    )
    r.add_argument(
        "--deadline",
        type=float,
        default=540.0,
        help="seconds for everything, setup included (default 540 = 9 minutes)",
    )
    r.add_argument(
        "--only",
        default=None,
        help="comma-separated part ids to run (e.g. 1,4); the rest are skipped",
    )
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "prepare":
        from attnce_bench.gpu_check.prepare import (
            DEFAULT_NUM_TRAIN,
            DEFAULT_NUM_VAL,
            PrepareError,
            prepare,
        )

        try:
            prepare(
                args.dir,
                num_train=args.num_train or DEFAULT_NUM_TRAIN,
                num_val=args.num_val or DEFAULT_NUM_VAL,
                cache=args.wheel_cache,
            )
        except PrepareError as err:
            print(f"gpu_check prepare: {err}", file=sys.stderr)
            return 2
        return 0

    from attnce_bench.gpu_check.driver import run_all

    out = args.out or (
        Path(os.environ["OUT"]) if os.environ.get("OUT") else Path("bench_out") / "gpu_check"
    )
    only = [s.strip() for s in args.only.split(",")] if args.only else None
    return run_all(
        gpucheck=args.dir,
        out=out,
        work=args.work,
        cpu=args.cpu,
        tiny=args.tiny,
        deadline_s=args.deadline,
        only=only,
    )


if __name__ == "__main__":
    sys.exit(main())
