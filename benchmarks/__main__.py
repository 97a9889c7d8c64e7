"""``python3 -m benchmarks`` (``make bench``): train the run table's rows through solo-learn, probe
them, print the tables. A long preset runs in parts, each a command line; finished runs in
``--out`` are reused::

    python3 -m benchmarks                                # the demo, then the reference tables
    python3 -m benchmarks --preset smoke                 # a minute-scale end-to-end check
    python3 -m benchmarks --preset reference --methods simclr,attentionnce --seeds 1 \\
        --out benchmarks/results/reference               # one part of the reference preset
    python3 -m benchmarks --preset reference --report-only --out benchmarks/results/reference
    python3 -m benchmarks --row d_pos=1,d_neg=1,neg_weighting=importance --row d_pos=1,d_neg=0.3
    python3 -m benchmarks --preset reference --data cifar10 --data-dir ~/data --methods \
        attentionnce,attentionnce_off,byol,vicreg    # your data, and solo-learn's own methods
    python3 -m benchmarks --preset paper-cifar10 --plan  # the runs and their GPU hours
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import logging
import os
import shlex
import signal
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Callable, Optional, Sequence

# Third-party deprecations (pkg_resources, timm) and solo-learn's logged warnings are not ours to
# show: each run's own output, warnings included, goes to its train.log.
warnings.filterwarnings("ignore")
logging.getLogger().setLevel(logging.ERROR)

from benchmarks import report, runner  # noqa: E402
from benchmarks import runs as table  # noqa: E402
from benchmarks.data import DATASETS  # noqa: E402

REFERENCE = runner.REPO_ROOT / "benchmarks" / "results" / "reference"


def _list(kind: type) -> Callable[[str], tuple]:
    return lambda text: tuple(kind(x.strip()) for x in text.split(",") if x.strip())


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser("python3 -m benchmarks", description=__doc__)
    p.formatter_class = argparse.RawDescriptionHelpFormatter  # the docstring's layout, kept
    p.epilog = "Options left out take the preset's values."
    add = p.add_argument
    presets = "; ".join(f"{k}: {v.description}" for k, v in table.PRESETS.items())
    add("--preset", default="default", choices=list(table.PRESETS), help=presets)
    data = "cifar10, cifar100, stl10 (torchvision's layouts under --data-dir), imagenet100, "
    data += "folder (train/ and val/ under --data-dir); default: the preset's"
    add("--data", choices=list(DATASETS), help=data)
    add("--data-dir", help="the data set's folder")
    h = f"ours ({','.join(table.METHODS)}) or any of solo-learn's, e.g. byol,vicreg"
    add("--methods", type=_list(str), help=h)
    add("--seeds", type=_list(int), help="e.g. 0,1,2")
    add("--epochs", type=int, help="equal-epoch budget")
    add("--batch-size", type=int, help="images per step per device")
    add("--num-train", type=int, help="training images probed (Fashion-MNIST: converted)")
    add("--num-val", type=int, help="validation images probed (Fashion-MNIST: converted)")
    add("--num-positives", type=int, help="M of the AttentionNCE rows (default 4)")
    add("--extra-m", type=_list(int), help="more M rows of attentionnce")
    add("--no-time-matched", dest="time_matched", action="store_false", default=None)
    h = "an ablation row: METHOD (default attentionnce) at --num-positives with these "
    h += "method_kwargs, which win over --set; repeatable"
    add("--row", dest="rows", action="append", default=[], metavar="[METHOD:]KEY=VALUE,...", help=h)
    one = "a config value of every run (one method's: run it alone with --methods); after the"
    one += " run's own, before its row's"
    add("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE", help=one)
    add("--out", default="bench_out", help="output folder (default ./bench_out)")
    add("--data-cache", help="converted Fashion-MNIST (default <out>/data)")
    add("--no-offline-probe", dest="offline_probe", action="store_false")
    add("--report-only", action="store_true", help="the tables from the records in --out only")
    add("--plan", action="store_true", help="print the runs and their cost; train nothing")
    add("raw", nargs="*", metavar="-- OVERRIDE", help="Hydra overrides of every run, as --set")
    return p


def settings(args: argparse.Namespace) -> table.Preset:
    """The preset with the options the command line gives (its ``--set`` values after the
    preset's)."""
    preset = table.PRESETS[args.preset]
    given = {f.name: getattr(args, f.name, None) for f in dataclasses.fields(table.Preset)}
    given = {
        k: tuple(v) if isinstance(v, list) else v for k, v in given.items() if v not in (None, [])
    }
    sets = preset.sets + tuple(map(runner.parse_set, args.sets)) + tuple(args.raw)
    return dataclasses.replace(preset, **dict(given, sets=sets))


def make_budget(args: argparse.Namespace, chosen: table.Preset, out: Path) -> runner.Budget:
    """The data: Fashion-MNIST converted under ``--data-cache``, or ``--data-dir`` checked for
    the files its format needs (FileNotFoundError names them)."""
    from benchmarks.data import prepare_fashion_mnist

    if chosen.data != "fashion-mnist":
        if not args.data_dir:
            raise ValueError(f"--data {chosen.data} needs --data-dir (the folder holding it)")
        root = Path(args.data_dir).expanduser().resolve()
        DATASETS[chosen.data].check(root, chosen.data)
        budget = runner.Budget(chosen.data, root, "", chosen, args.offline_probe)
        subsets = f"{budget.num_train or 'all'} train, {chosen.num_val or 'all'} validation"
        budget.note = f"{chosen.data} in {root}: pretraining on its train split as solo-learn "
        budget.note += f"reads it; probed on {subsets} images (class-stratified)"
        return budget
    cache = Path(args.data_cache).resolve() if args.data_cache else out / "data"
    n_train, n_val = chosen.num_train or 60000, chosen.num_val or 10000
    root = prepare_fashion_mnist(cache, n_train, n_val, image_size=runner.CROP)
    note = f"Fashion-MNIST (Debian dataset-fashion-mnist): {n_train} training images (class-"
    note += f"stratified subset of the 60,000), {n_val} validation images (of the 10,000 test "
    note += f"images), {runner.CROP} px RGB"
    return runner.Budget(chosen.data, root, note, chosen, args.offline_probe)


def machine() -> str:
    from importlib.metadata import version

    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    names = ("solo-learn", "lightning", "torchmetrics", "hydra-core")
    text = f"{runner.cpu_name()}, {os.cpu_count()} CPU cores visible, {gpu}; Python "
    text += f"{sys.version.split()[0]}, torch {torch.__version__}, "
    return text + ", ".join(f"{n} {version(n)}" for n in names)


def reference_tables() -> str:
    """The reference's answer on one screen: the questions' verdicts and every family's counts,
    and where the rest is."""
    runs = settings(build_parser().parse_args(["--preset", "reference"])).runs()
    lines = report.aggregate(runner.read_results(REFERENCE, runs))
    title = "# The real result: the reference preset (6,000 images, 29 epochs, 3 to 5 seeds), "
    title += "rebuilt from its committed records"
    how = "Every row and family's lines: `python3 -m benchmarks --preset reference --report-only "
    how += "--out benchmarks/results/reference` (its results.md); what they say: docs/results.md."
    questions = report.verdicts_markdown(lines, [table.QUESTIONS_FAMILY])
    return "\n".join(["", title, "", questions, how])


PERFORMANCE = runner.REPO_ROOT / "docs" / "performance.md"


def plan(name: str, chosen: table.Preset) -> str:
    """A preset's runs and device hours, at the seconds per epoch that docs/performance.md's
    "Seconds per epoch" table gives for (preset, method, device); "none measured" elsewhere."""
    text = PERFORMANCE.read_text() if PERFORMANCE.is_file() else ""
    cells = [[c.strip() for c in ln.strip("|").split("|")] for ln in text.splitlines()]
    known = {(c[0], c[1]): (c[2], float(c[3])) for c in cells if len(c) > 3 and c[0] == name}
    runs, rows, hours = chosen.runs(), [], 0.0
    for row in dict.fromkeys(r.row for r in runs):
        seeds = [r.seed for r in runs if r.row == row]
        device, per_epoch = known.get((name, row.method), ("none measured", None))
        cost = per_epoch * chosen.epochs * len(seeds) / 3600 if per_epoch else None
        hours += cost or 0.0
        cells = [row.label, ", ".join(map(str, seeds)), chosen.epochs, device]
        rows.append(cells + [per_epoch or "-", f"{cost:.1f}" if cost else "-"])
    head = ["row", "seeds", "epochs", "measured on", "s/epoch", "device hours"]
    missing = sum(r[-1] == "-" for r in rows)
    total = f"{len(runs)} runs on {chosen.data}, batch {chosen.batch_size} per device: "
    total += f"{hours:.1f} device hours for the rows measured"
    total += f"; {missing} rows without a measured s/epoch" * bool(missing)
    return "\n".join([f"# {name}: {chosen.description}", "", report.table(head, rows), "", total])


def bench(args: argparse.Namespace, command: str) -> int:
    started = time.perf_counter()
    out, chosen = Path(args.out).resolve(), settings(args)
    if args.plan:
        print(plan(args.preset, chosen))
        return 0
    if args.report_only:
        results = runner.read_results(out, chosen.runs())
        shown = os.path.relpath(out / "runs") if out.is_relative_to(Path.cwd()) else out / "runs"
        note = f"as recorded in {shown}"
    else:
        from attnce_plugin.install import require_solo

        require_solo()
        runs, budget = chosen.runs(), make_budget(args, chosen, out)
        print(f"benchmarks: {len(runs)} runs; output in {out}", file=sys.stderr)
        results = runner.execute(runs, budget, out)
        if args.offline_probe:  # the references are probes too
            results += runner.reference_results(results, budget, out)
        note = budget.note
    # The raw pixels have seed 0 only.
    seeds = sorted({int(r["seed"]) for r in results if r["label"] != table.PIXELS})
    header = [
        f"command: `{command}`, {datetime.datetime.now():%Y-%m-%d %H:%M}, "
        f"{(time.perf_counter() - started) / 60:.1f} min",
        f"machine: {machine()}",
        "trained on: runs.csv's cpu column; columns and rule: attnce-plugin's docs/results.md",
        f"data: {note}",
        f"budget: batch {chosen.batch_size}, seeds {', '.join(map(str, seeds))}; each run is a "
        "shipped config plus the overrides below (its config.yaml and command.sh are in runs/)",
    ]
    md = report.bench_markdown(results, header, chosen.families)
    print("\n" + md + report.write_outputs(results, md, out))
    if chosen.show_reference and out != REFERENCE.resolve():
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
    try:
        return bench(build_parser().parse_args(argv), command)
    except (ValueError, FileNotFoundError, ImportError) as err:  # bad settings, no data
        print(f"benchmarks: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
