"""``python3 -m benchmarks`` (``make bench``): train the run table's rows through solo-learn, probe
them, print the tables. A long preset runs in parts, each a command line; finished runs in
``--out`` are reused::

    python3 -m benchmarks                                # the demo, then the reference tables
    python3 -m benchmarks --preset smoke                 # a minute-scale end-to-end check
    python3 -m benchmarks --preset reference --methods simclr,attentionnce --seeds 1 \\
        --out benchmarks/results/reference               # one part of the reference preset
    python3 -m benchmarks --preset reference --report-only --out benchmarks/results/reference
    python3 -m benchmarks --row d_pos=1,d_neg=1,neg_weighting=importance --row d_pos=1,d_neg=0.3
    python3 -m benchmarks --set optimizer.lr=0.3 --set attentionnce:method_kwargs.d_neg=1
    python3 -m benchmarks -- ++trainer_option=value      # raw Hydra overrides, every run
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import shlex
import signal
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Callable, List, Optional, Sequence

# Third-party deprecations (pkg_resources, timm) and solo-learn's logged warnings are not ours to
# show: each run's own output, warnings included, goes to its train.log.
warnings.filterwarnings("ignore")
logging.getLogger().setLevel(logging.ERROR)

from benchmarks import report, runner  # noqa: E402
from benchmarks import runs as table  # noqa: E402

REFERENCE = runner.REPO_ROOT / "benchmarks" / "results" / "reference"


def _list(kind: type) -> Callable[[str], tuple]:
    return lambda text: tuple(kind(x.strip()) for x in text.split(",") if x.strip())


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser("python3 -m benchmarks", description=__doc__)
    p.formatter_class = argparse.RawDescriptionHelpFormatter  # the docstring's layout, kept
    p.epilog = "Options left out take the preset's values. Arguments after '--' go unchanged to "
    p.epilog += "every run."
    add = p.add_argument
    presets = "; ".join(f"{k}: {v.description}" for k, v in table.PRESETS.items())
    add("--preset", default="default", choices=list(table.PRESETS), help=presets)
    add("--methods", type=_list(str), help=f"some of {','.join(table.METHODS)}")
    add("--seeds", type=_list(int), help="e.g. 0,1,2")
    add("--epochs", type=int, help="equal-epoch budget")
    add("--batch-size", type=int, help="images per step per device")
    add("--num-train", type=int, help="Fashion-MNIST training images")
    add("--num-val", type=int, help="Fashion-MNIST validation images")
    add("--num-positives", type=int, default=4, help="M of the AttentionNCE rows")
    add("--extra-m", type=_list(int), help="more M rows of attentionnce")
    add("--no-time-matched", dest="time_matched", action="store_false", default=None)
    h = "an ablation row: METHOD (default attentionnce) at --num-positives with these "
    h += "method_kwargs, which win over --set; repeatable"
    add("--row", dest="rows", action="append", default=[], metavar="[METHOD:]KEY=VALUE,...", help=h)
    one = "a config value, for every run or one method's"
    add("--set", dest="sets", action="append", default=[], metavar="[METHOD:]KEY=VALUE", help=one)
    add("--out", default="bench_out", help="output folder (default ./bench_out)")
    add("--data-cache", help="converted Fashion-MNIST (default <out>/data)")
    add("--no-offline-probe", dest="offline_probe", action="store_false")
    add("--no-references", dest="references", action="store_false", help="no untrained/pixels")
    add("--keep-checkpoints", action="store_true")
    add("--dry-run", action="store_true", help="write each run's config and command only")
    add("--report-only", action="store_true", help="the tables from the records in --out only")
    return p


def plan(args: argparse.Namespace) -> List[table.Run]:
    preset = table.PRESETS[args.preset]
    rows = [table.parse_row(text, args.num_positives) for text in args.rows]
    extra_m = preset.extra_m if args.extra_m is None else args.extra_m
    time_matched = preset.time_matched if args.time_matched is None else args.time_matched
    seeds, epochs = args.seeds or preset.seeds, args.epochs or preset.epochs
    methods = args.methods or preset.methods
    return table.bench_runs(methods, seeds, epochs, args.num_positives, extra_m, time_matched, rows)


def read_results(out: Path, runs: Sequence[table.Run]) -> List[runner.Result]:
    """Every record in ``out/runs``: the plan's in its order, then the others by folder."""
    order = {r.key: i for i, r in enumerate(runs)}
    paths = sorted((out / "runs").glob("**/result.json"), key=str)
    results = [dict(json.loads(p.read_text()), run_dir=str(p.parent)) for p in paths]
    return sorted(results, key=lambda r: order.get(r["key"], len(order)))


def make_budget(args: argparse.Namespace, out: Path) -> runner.Budget:
    from benchmarks.data import prepare_fashion_mnist

    preset = table.PRESETS[args.preset]
    sets = list(preset.sets) + list(args.sets)
    for s in sets:
        runner.parse_set(s)  # a bad --set fails before anything trains
    n_train, n_val = args.num_train or preset.num_train, args.num_val or preset.num_val
    cache = Path(args.data_cache).resolve() if args.data_cache else out / "data"
    data = prepare_fashion_mnist(cache, n_train, n_val, image_size=runner.CROP)
    note = f"Fashion-MNIST (Debian dataset-fashion-mnist): {n_train} training images (class-"
    note += f"stratified subset of the 60,000), {n_val} validation images (of the 10,000 test "
    note += f"images), {runner.CROP} px RGB"
    batch, keep = args.batch_size or preset.batch_size, args.keep_checkpoints
    scale, probe = preset.crop_min_scale, args.offline_probe
    return runner.Budget(data, note, batch, scale, sets, args.overrides, probe, keep)


def machine() -> str:
    from importlib.metadata import version

    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    names = ("solo-learn", "lightning", "torchmetrics", "hydra-core")
    text = f"{runner.cpu_name()}, {os.cpu_count()} CPU cores visible, {gpu}; Python "
    text += f"{sys.version.split()[0]}, torch {torch.__version__}, "
    return text + ", ".join(f"{n} {version(n)}" for n in names)


def reference_tables() -> str:
    runs = plan(build_parser().parse_args(["--preset", "reference"]))
    lines = report.aggregate(read_results(REFERENCE, runs))
    title = "# The real result: the reference preset (6,000 images, 29 epochs, 3 to 5 seeds), "
    title += "rebuilt from its committed records"
    how = "`python3 -m benchmarks --preset reference --report-only --out benchmarks/results/"
    how += "reference` prints all its tables."
    tables = [report.summary_table(lines), "", report.verdicts_markdown(lines)]
    return "\n".join(["", title, "", how, "", *tables])


def bench(args: argparse.Namespace, command: str) -> int:
    started = time.perf_counter()
    out, preset = Path(args.out).resolve(), table.PRESETS[args.preset]
    if args.report_only:
        results = read_results(out, plan(args))
        seeds = args.seeds or [int(r["seed"]) for r in results]  # the raw pixels: one, seed 0
        results = [r for r in results if int(r["seed"]) in seeds or r["label"] == table.PIXELS]
        shown = os.path.relpath(out / "runs") if out.is_relative_to(Path.cwd()) else out / "runs"
        note, batch = f"as recorded in {shown}", args.batch_size or preset.batch_size
    else:
        from attnce_plugin.install import require_solo

        require_solo()
        runs, budget = plan(args), make_budget(args, out)
        print(f"benchmarks: {len(runs)} runs; output in {out}", file=sys.stderr)
        results = runner.execute(runs, budget, out, args.dry_run)
        if args.dry_run:
            return 0
        if args.references and args.offline_probe:
            results += runner.reference_results(results, budget, out)
        note, batch = budget.note, budget.batch_size
    # The raw pixels have seed 0 only.
    seeds = sorted({int(r["seed"]) for r in results if r["label"] != table.PIXELS})
    header = [
        f"command: `{command}`, {datetime.datetime.now():%Y-%m-%d %H:%M}, "
        f"{(time.perf_counter() - started) / 60:.1f} min",
        f"machine: {machine()}",
        "trained on: each run's processor is the cpu column of runs.csv",
        f"data: {note}",
        f"budget: batch {batch}, seeds {', '.join(map(str, seeds))}; each run is a shipped "
        "config plus the overrides below (its config.yaml and command.sh are in runs/)",
    ]
    md = report.bench_markdown(results, header)
    subset = args.report_only and args.seeds  # printed only: the folder's files cover every seed
    print("\n" + md + ("" if subset else report.write_outputs(results, md, out)))
    if preset.show_reference and out != REFERENCE.resolve():
        print(reference_tables())
    failed = [r for r in results if r["status"] != "ok"]
    if failed:
        print(f"{len(failed)} of {len(results)} runs failed or were skipped", file=sys.stderr)
    return 1 if failed else 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """0 when every run succeeded, 1 if some failed, 2 on bad settings (before any training)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if threading.current_thread() is threading.main_thread():
        # A plain `kill` stops the training subprocess too (subprocess.run kills it on exit).
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    command = " ".join(["python3 -m benchmarks", *map(shlex.quote, argv)])
    cut = argv.index("--") if "--" in argv else len(argv)
    try:
        args = build_parser().parse_args(argv[:cut])
        args.overrides = argv[cut + 1 :]
        return bench(args, command)
    except (ValueError, FileNotFoundError, ImportError) as err:  # bad settings, no data
        print(f"benchmarks: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
