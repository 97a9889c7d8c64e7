"""``python3 -m benchmarks`` (``make bench``): the benchmark, its frontier and its experiments.

Examples::

    python3 -m benchmarks                                # the quick demo (~13 min on 2 CPUs)
    python3 -m benchmarks --preset smoke                 # a minute-scale end-to-end check
    python3 -m benchmarks --ablation                     # + M / d_pos / d_neg grids
    python3 -m benchmarks --frontier --seeds 0,1,2       # accuracy against training time
    python3 -m benchmarks --experiment false_negatives   # one experiment (docs/)
    python3 -m benchmarks --set optimizer.lr=0.3 --set attentionnce:method_kwargs.d_neg=1
    python3 -m benchmarks --report-only --out bench_out  # tables from the run records only
    python3 -m benchmarks --preset reference --part seed0-a --out benchmarks/results/reference
    python3 -m benchmarks --curve-every 10 --epochs 71   # + each 10th checkpoint probed
    python3 -m benchmarks -- ++trainer_option=value      # raw Hydra overrides, every run
"""

from __future__ import annotations

import datetime
import importlib
import json
import os
import platform
import shlex
import signal
import sys
import threading
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from benchmarks.options import Options, parse
from benchmarks.report import (
    bench_markdown,
    get,
    regime_markdown,
    table,
    trained_on,
    verdicts_markdown,
    write_outputs,
)
from benchmarks.runner import (
    BenchConfigError,
    Budget,
    Data,
    Result,
    check_curve_epochs,
    compose,
    config_name,
    cpu_name,
    execute,
    load_result,
    parse_set,
    reference_results,
    unmatchable,
)
from benchmarks.runs import DATASETS, PRESETS, Grids, Run, bench_runs, reference_parts


def prepare_data(opts: Options, out: Path, classes: Optional[Sequence[int]] = None) -> Data:
    """The embedded Fashion-MNIST subset (converted once into ``<data cache>``) or the given
    folders."""
    preset = PRESETS[opts.preset]
    classes = opts.classes if classes is None else classes
    if opts.dataset == "fashion_mnist":
        from benchmarks.data import prepare_fashion_mnist

        n_train, n_val = opts.num_train or preset.num_train, opts.num_val or preset.num_val
        crop = opts.crop_size or 32
        cache = Path(opts.data_cache).resolve() if opts.data_cache else out / "data"
        splits = prepare_fashion_mnist(cache, n_train, n_val, image_size=crop, classes=classes)
        which = "" if classes is None else f", classes {list(classes)}"
        return Data(
            opts.dataset, str(splits.train), str(splits.val),
            f"Fashion-MNIST (Debian dataset-fashion-mnist{which}): {n_train} training images "
            f"(class-stratified subset of the 60,000), {n_val} validation images (of the 10,000 "
            f"test images), {crop} px RGB", str(cache),
        )  # fmt: skip
    if classes is not None:
        raise BenchConfigError("--classes: only the embedded fashion_mnist data has class subsets")
    if not opts.train_path:
        raise BenchConfigError(f"--dataset {opts.dataset} needs --train-path (and --val-path)")
    train = str(Path(opts.train_path).expanduser().resolve())
    val = str(Path(opts.val_path).expanduser().resolve()) if opts.val_path else None
    return Data(opts.dataset, train, val, f"{opts.dataset}: train {train}, val {val}")


def budget(opts: Options, data: Data) -> Budget:
    """What every run shares, from the options and the preset."""
    preset = PRESETS[opts.preset]
    sets = opts.hardware_sets() + list(preset.sets) + list(opts.sets)
    for s in sets:
        parse_set(s)  # a bad --set fails before anything trains
    scale = opts.crop_min_scale if opts.crop_min_scale is not None else preset.crop_min_scale
    workers = opts.num_workers
    if workers is None and opts.dataset == "fashion_mnist":
        workers = preset.num_workers  # sized for the embedded data on a small CPU
    return Budget(
        data, opts.batch_size or preset.batch_size, workers, opts.crop_size,
        opts.limit_train_batches, (opts.accelerator or "cpu") == "cpu", sets, opts.overrides,
        opts.curve_every, scale,
    )  # fmt: skip


def shipped(method: str, dataset: str, key: str) -> float:
    """A ``method_kwargs`` value of the shipped config (the ablation's base)."""
    return float(compose(config_name(method, dataset), []).method_kwargs[key])


def machine() -> str:
    """The CPU, GPU and package versions, for a report's header."""
    import torch

    cpu = cpu_name()
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    packages = []
    for name in ("solo-learn", "lightning", "torchmetrics", "hydra-core"):
        try:
            packages.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            packages.append(f"{name} ?")
    return (
        f"{cpu}, {os.cpu_count()} CPU cores visible, {gpu}; Python {platform.python_version()}, "
        f"torch {torch.__version__}, " + ", ".join(packages)
    )


def train_and_report(
    opts: Options,
    runs: List[Run],
    data: Data,
    out: Path,
    command: str,
    title: str,
    only: Optional[Set[str]] = None,
) -> Tuple[List[Any], str]:
    """Train (or reuse, or with ``--report-only`` only read) the runs, add the reference rows,
    write the outputs; returns the results and the markdown. With ``only`` (a part's run keys)
    the other runs are read from their records where they have run."""
    started = time.perf_counter()
    b = budget(opts, data)
    seeds = sorted({r.seed for r in runs})
    if opts.report_only:
        # Every record in the folder, in the plan's order where the plan has it.
        order = {r.key: i for i, r in enumerate(runs)}
        paths = sorted((out / "runs").glob("**/result.json"), key=lambda p: str(p))
        results: List[Any] = [
            load_result(p.parent) or dict(json.loads(p.read_text()), run_dir=str(p.parent))
            for p in paths
        ]
        results.sort(
            key=lambda r: order.get(r.key if isinstance(r, Result) else r["key"], len(order))
        )
        results += unmatchable(runs, results)
    else:
        results = execute(
            runs, b, out, opts.offline_probe, opts.fresh, opts.dry_run, opts.keep_checkpoints,
            only,
        )  # fmt: skip
        if opts.dry_run:
            return results, ""
        if opts.references and opts.offline_probe:
            results += reference_results(results, b, seeds, out)
    header = [
        f"command: `{command}`, {datetime.datetime.now():%Y-%m-%d %H:%M}, "
        f"{(time.perf_counter() - started) / 60:.1f} min",
        f"machine: {machine()}",
        f"trained on: {trained_on(results) or 'no trained run'}",
        f"data: {data.note}",
        f"budget: batch {b.batch_size}, seeds {', '.join(map(str, seeds))}; each run is a shipped "
        "config plus the overrides below (its config.yaml and command.sh are in runs/)",
    ]
    md = bench_markdown(results, header)
    write_outputs(results, md, out, title)
    return results, md


def parts_markdown(
    runs: Sequence[Run], results: Sequence[Any], parts: Dict[str, Tuple[int, Tuple[str, ...]]]
) -> str:
    """Which parts of the reference preset have run: their records are in the table above."""
    done = {get(r, "key") for r in results if get(r, "status") == "ok"}
    rows = []
    for name, (seed, labels) in parts.items():
        keys = [r.key for r in runs if r.seed == seed and r.label in labels]
        n = sum(k in done for k in keys)
        state = (
            "not in this plan" if not keys
            else "done" if n == len(keys) else "not run" if n == 0 else f"{n} of {len(keys)} runs"
        )  # fmt: skip
        rows.append([f"`{name}`", seed, "; ".join(labels), state])
    return (
        "## Parts\n\nEach part trains in one sitting (`--part NAME`); the table is rebuilt from "
        "the records of the parts that have run (`--report-only`).\n\n"
        + table(["part", "seed", "rows", "state"], rows) + "\n"
    )  # fmt: skip


def bench(opts: Options, command: str) -> int:
    """The benchmark (or, with ``--frontier``, the frontier); 0 ok, 1 some run failed."""
    if opts.dataset not in DATASETS:
        raise BenchConfigError(f"--dataset={opts.dataset!r}: allowed values are {list(DATASETS)}")
    if opts.curve_every is not None and (opts.curve_every < 1 or not opts.offline_probe):
        raise BenchConfigError(
            f"--curve-every={opts.curve_every}: needs an epoch count of at least 1 and the "
            "offline probe (not --no-offline-probe)"
        )
    if opts.crop_min_scale is not None and not 0.0 < opts.crop_min_scale <= 1.0:
        raise BenchConfigError(
            f"--crop-min-scale={opts.crop_min_scale}: allowed values are in (0, 1]"
        )
    preset = PRESETS[opts.preset]
    out = Path(opts.out).resolve()
    seeds = list(opts.seeds or preset.seeds)
    epochs = opts.epochs or preset.epochs
    methods = opts.methods or preset.methods
    if opts.frontier:
        from benchmarks import frontier

        runs = frontier.runs(methods, opts.frontier_epochs or preset.frontier_epochs, seeds)
    else:
        grids = None
        if opts.ablation:
            grids = Grids(opts.ablation_method, opts.m_grid, opts.dpos_grid, opts.dneg_grid,
                          opts.anchor_grid)  # fmt: skip
        base = tuple(shipped(opts.ablation_method, opts.dataset, k) for k in ("d_pos", "d_neg"))
        runs = bench_runs(methods, seeds, epochs, opts.num_positives, opts.extra_m,
                          opts.time_matched, grids, base)  # fmt: skip
    if opts.curve_every:
        check_curve_epochs(runs, opts.curve_every)
    only = None
    if opts.part is not None:
        if opts.seeds is not None:
            raise BenchConfigError("--part: the parts are the preset's seeds; drop --seeds")
        parts = reference_parts(seeds)
        if opts.preset != "reference" or opts.part not in parts:
            raise BenchConfigError(
                f"--part={opts.part!r}: a part of --preset reference; allowed values are "
                f"{list(parts)}"
            )
        planned = {(seed, label) for seed, labels in parts.values() for label in labels}
        seed, labels = parts[opts.part]
        only = {r.key for r in runs if r.seed == seed and r.label in labels}
        if opts.frontier or {(r.seed, r.label) for r in runs} != planned:
            raise BenchConfigError(
                f"--part={opts.part}: the parts split the reference preset's own plan; drop "
                "--frontier, --methods, --num-positives, --extra-m, --no-time-matched, --ablation"
            )
    if opts.report_only:  # the records are all it reads: no data conversion
        shown = os.path.relpath(out / "runs") if out.is_relative_to(Path.cwd()) else out / "runs"
        data = Data(opts.dataset, "", None, f"as recorded in {shown}")
    else:
        data = prepare_data(opts, out)
    print(f"benchmarks: {len(runs)} runs, seeds {seeds}; output in {out}", file=sys.stderr)
    results, md = train_and_report(
        opts, runs, data, out, command, f"{command} ({opts.preset})", only
    )
    if opts.dry_run:
        return 0
    if opts.preset == "reference":
        head, sep, notes = md.partition("\n## Notes")
        state = parts_markdown(runs, results, reference_parts(seeds))
        md = head + "\n" + regime_markdown(results) + "\n" + verdicts_markdown(results)
        md += "\n" + state + sep + notes
        (out / "results.md").write_text(md)
    if opts.frontier:
        from benchmarks import frontier

        head, sep, notes = md.partition("\n## Notes")
        md = head + "\n" + frontier.markdown(results) + sep + notes
        (out / "results.md").write_text(md)
        frontier.plot(results, out / "frontier.png", command)
    print("\n" + md + f"\nWrote {out / 'results.md'}, runs.csv, results.json, results.png")
    # --report-only trains nothing: a row it can only explain (skipped) is not this command failing.
    allowed = ("ok", "skipped") if opts.report_only else ("ok",)
    failed = [r for r in results if get(r, "status") not in allowed]
    if failed:
        print(f"{len(failed)} of {len(results)} runs failed or were skipped", file=sys.stderr)
    return 1 if failed else 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """0 when every run succeeded, 1 if some failed, 2 on bad settings (before any training)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if threading.current_thread() is threading.main_thread():
        # A plain `kill` stops the training subprocess too (the runner terminates it on exit).
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    command = " ".join(["python3 -m benchmarks", *map(shlex.quote, argv)])
    try:
        opts = parse(argv)
        if opts.experiment:
            module = importlib.import_module(f"benchmarks.experiments.{opts.experiment}")
            return int(module.main(opts, command) or 0)
        return bench(opts, command)
    except (BenchConfigError, ValueError, FileNotFoundError, ImportError) as err:
        print(f"benchmarks: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
