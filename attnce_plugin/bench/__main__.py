"""``python3 -m attnce_plugin.bench`` (also ``attnce-bench``, ``make bench``).

Pretrains SimCLR, MoCo v3 (solo-learn's own), AttentionNCE (SimCLR form) and MoCo v3 +
AttentionNCE with solo-learn's ``main_pretrain.py``, evaluates each (online kNN and online linear
probe inside main_pretrain, plus an offline linear probe on frozen features, see
:mod:`attnce_plugin.bench.probe`), and writes ``results.md``, ``summary.csv``, ``runs.csv`` and
``results.png`` into one output folder (default ``./bench_out``).

Examples::

    python3 -m attnce_plugin.bench                      # embedded default, ~15-20 min on 2 CPUs
    python3 -m attnce_plugin.bench --preset smoke       # a minute-scale end-to-end check
    python3 -m attnce_plugin.bench --ablation           # + M / d_pos / d_neg grids
    python3 -m attnce_plugin.bench --dataset cifar10 --train-path ~/data --val-path ~/data \\
        --epochs 200 --batch-size 256 --accelerator gpu --devices 0 --precision 16-mixed
    python3 -m attnce_plugin.bench --set optimizer.lr=0.3 --set attentionnce:method_kwargs.d_neg=1
    python3 -m attnce_plugin.bench -- ++trainer_option=value   # raw Hydra overrides, all runs
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shlex
import shutil
import signal
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from attnce_plugin.bench import plan as plan_mod
from attnce_plugin.bench.arglists import float_list, int_list, str_list
from attnce_plugin.bench.plan import PRESETS, PlanOptions, RunSpec, build_plan, matched_epochs
from attnce_plugin.bench.runner import (
    DATASETS,
    DEFAULT_CONFIG_DIR,
    BenchConfigError,
    Budget,
    RunResult,
    compose_config,
    config_digest,
    find_checkpoint,
    load_result,
    parse_set,
    run_pretrain,
    save_result,
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="attnce-bench",
        description="Side-by-side benchmark of AttentionNCE against solo-learn's SimCLR and MoCo "
        "v3, trained with solo-learn's own main_pretrain.py.",
        epilog="Arguments after '--' are passed unchanged to every main_pretrain.py run as Hydra "
        "overrides.",
    )
    g = p.add_argument_group("budget")
    g.add_argument("--preset", default="default", choices=sorted(PRESETS),
                   help="budget: " + "; ".join(f"{k}: {v.description}" for k, v in PRESETS.items()))
    g.add_argument("--epochs", type=int, help="equal-epoch budget (overrides the preset)")
    g.add_argument("--batch-size", type=int, help="images per step per device")
    g.add_argument("--seeds", type=int_list, help="e.g. 0,1,2")
    g.add_argument("--num-train", type=int, help="Fashion-MNIST training subset size")
    g.add_argument("--num-val", type=int, help="Fashion-MNIST validation subset size")
    g.add_argument("--num-workers", type=int, help="dataloader workers per run")
    g.add_argument("--limit-train-batches", type=int, help="Lightning limit_train_batches")

    g = p.add_argument_group("what to compare")
    g.add_argument("--methods", type=str_list, default=list(plan_mod.METHODS),
                   help=f"subset of {','.join(plan_mod.METHODS)}")
    g.add_argument("--num-positives", type=int, default=4,
                   help="M, positive views per image of the AttentionNCE methods (default 4)")
    g.add_argument("--extra-m", type=int_list, default=[2],
                   help="additional M values for AttentionNCE (SimCLR form); default 2")
    g.add_argument("--no-time-matched", action="store_true",
                   help="skip the equal-wall-clock baseline runs")
    g.add_argument("--ablation", action="store_true",
                   help="also run the M / d_pos / d_neg grids (one varied at a time)")
    g.add_argument("--ablation-method", default="attentionnce",
                   choices=list(plan_mod.ATTENTION_METHODS))
    g.add_argument("--m-grid", type=int_list, default=[1, 2, 4])
    g.add_argument("--dpos-grid", type=float_list, default=[0.5, 1.0, 2.0, 4.0])
    g.add_argument("--dneg-grid", type=float_list, default=[0.5, 1.0, 10.0])
    g.add_argument("--anchor-grid", type=str_list, default=[],
                   help="with --ablation: anchor modes to add, e.g. 'mean' (AttentionNCE*)")

    g = p.add_argument_group("data and hardware")
    g.add_argument("--dataset", default="fashion_mnist", choices=list(DATASETS))
    g.add_argument("--train-path", help="training data (required unless --dataset fashion_mnist)")
    g.add_argument("--val-path", help="validation data")
    g.add_argument("--data-format", choices=["image_folder", "h5", "dali"],
                   help="solo-learn data.format; dali needs a GPU and nvidia-dali")
    g.add_argument("--crop-size", type=int, help="view size (and validation size for custom data)")
    g.add_argument("--backbone", help="solo-learn backbone name (default resnet18)")
    g.add_argument("--accelerator", default=None, help="cpu (default) or gpu")
    g.add_argument("--devices", default=None, help="cpu: a count ('1'); gpu: ids such as 0,1")
    g.add_argument("--precision", default=None, help="e.g. 32, 16-mixed, bf16-mixed")
    g.add_argument("--set", dest="sets", action="append", default=[], metavar="[METHOD:]KEY=VALUE",
                   help="config value for all runs, or for one method's runs (repeatable)")

    g = p.add_argument_group("evaluation and output")
    g.add_argument("--out", default="bench_out", help="output folder (default ./bench_out)")
    g.add_argument("--data-cache", help="where converted Fashion-MNIST goes (default <out>/data)")
    g.add_argument("--no-offline-probe", action="store_true", help="skip the offline linear probe")
    g.add_argument("--keep-checkpoints", action="store_true",
                   help="keep each run's checkpoint (~100 MB for resnet18) after the probe")
    g.add_argument("--fresh", action="store_true",
                   help="re-run runs that already finished with the same config in --out")
    g.add_argument("--dry-run", action="store_true",
                   help="write every run's config.yaml and command.sh, run nothing")
    g.add_argument("--config-dir", default=str(DEFAULT_CONFIG_DIR), help=argparse.SUPPRESS)
    return p


def _hardware_sets(args: argparse.Namespace) -> List[str]:
    """Translate hardware flags into --set values (solo/Lightning keys)."""
    out: List[str] = []
    accel = args.accelerator
    if accel is not None:
        if accel not in ("cpu", "gpu", "cuda", "auto"):
            raise BenchConfigError(f"--accelerator={accel!r}: allowed values are cpu, gpu, cuda, auto")
        out.append(f"accelerator={accel}")
    if args.devices is not None:
        if (accel or "cpu") == "cpu":
            if not args.devices.isdigit():
                raise BenchConfigError(f"--devices={args.devices!r}: on cpu give a process count, e.g. 1")
            # solo scales the lr by len(devices) and Lightning reads int(devices): "02" is 2
            # processes with len 2 (docs/solo-learn.md).
            n = int(args.devices)
            out.append(f"devices='{str(n).zfill(n)}'")
            if n > 1:
                out += ["strategy=ddp"]
        else:
            ids = int_list(args.devices)
            out.append(f"devices=[{','.join(map(str, ids))}]")
            if len(ids) > 1:
                out += ["strategy=ddp", "sync_batchnorm=true"]
    if args.precision is not None:
        out.append(f"precision='{args.precision}'")
    if args.backbone is not None:
        out.append(f"backbone.name={args.backbone}")
    if args.data_format is not None:
        out.append(f"data.format={args.data_format}")
    if args.crop_size is not None:
        out.append(f"view.crop_size={args.crop_size}")
        if args.dataset in ("custom", "fashion_mnist"):  # validate at the new size too
            out.append(f"bench.val_size={args.crop_size}")
    return out


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return (f"{cpu}, {os.cpu_count()} CPU cores visible, {gpu}; Python {platform.python_version()}, "
            f"torch {torch.__version__}")


def _versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    parts = []
    for name in ("solo-learn", "lightning", "torchmetrics", "hydra-core"):
        try:
            parts.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            parts.append(f"{name} ?")
    return ", ".join(parts)


def _progress(total: int, desc: str, position: int, leave: bool) -> Any:
    try:
        from tqdm import tqdm
    except ImportError:  # tqdm is in the [bench] extra; without it, plain lines
        return None
    return tqdm(total=total, desc=desc, position=position, leave=leave, dynamic_ncols=True,
                file=sys.stderr)


def _seconds_per_epoch(results: Sequence[RunResult], label: str, seed: int) -> Optional[float]:
    for r in results:
        if r.label == label and r.seed == seed and r.comparison == "equal-epoch" and r.status == "ok":
            return r.seconds_per_epoch
    return None


def _resolve_matched(spec: RunSpec, results: Sequence[RunResult], first_seed: int,
                     cache: Dict[str, int]) -> Optional[int]:
    """Epochs of an equal-time run, fixed once (from the first seed) for all seeds."""
    if spec.label in cache:
        return cache[spec.label]
    base_label = plan_mod.DISPLAY[spec.method]
    base = _seconds_per_epoch(results, base_label, first_seed)
    target = _seconds_per_epoch(results, spec.matched_to or "", first_seed)
    if base is None or target is None:
        return None
    base_epochs = next(r.epochs for r in results if r.label == base_label)
    cache[spec.label] = matched_epochs(base_epochs, base, target)
    return cache[spec.label]


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    passthrough: List[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, passthrough = argv[:cut], argv[cut + 1:]
    args = build_parser().parse_args(argv)
    # A plain `kill` should stop the training subprocess too: turn SIGTERM into SystemExit, which
    # run_pretrain() answers by terminating its child before re-raising.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        return _run(args, passthrough, argv)
    except (BenchConfigError, ValueError, FileNotFoundError, ImportError) as err:
        print(f"attnce-bench: error: {err}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace, passthrough: List[str], argv: Sequence[str]) -> int:
    from attnce_plugin.solo_compat import require_solo, solo_checkout_dir

    started = time.perf_counter()
    preset = PRESETS[args.preset]
    out = Path(args.out).resolve()
    config_dir = Path(args.config_dir)
    seeds = args.seeds if args.seeds is not None else list(preset.seeds)
    epochs = args.epochs if args.epochs is not None else preset.epochs
    sets = [parse_set(s) for s in _hardware_sets(args) + list(args.sets)]
    unknown = [m for m, _, _ in sets if m is not None and m not in plan_mod.METHODS]
    if unknown:
        raise BenchConfigError(f"--set: unknown method {unknown[0]!r}; allowed values are "
                               f"{list(plan_mod.METHODS)}")

    require_solo()
    main_pretrain = solo_checkout_dir() / "main_pretrain.py"

    # ---- data
    if args.dataset == "fashion_mnist":
        from attnce_plugin.bench.data import prepare_fashion_mnist

        crop = args.crop_size or 32
        cache = Path(args.data_cache).resolve() if args.data_cache else out / "data"
        print(f"Preparing Fashion-MNIST ({args.num_train or preset.num_train} train / "
              f"{args.num_val or preset.num_val} val images at {crop} px) in {cache} ...",
              file=sys.stderr)
        splits = prepare_fashion_mnist(cache, args.num_train or preset.num_train,
                                       args.num_val or preset.num_val, image_size=crop)
        train_path, val_path = str(splits.train), str(splits.val)
        data_note = (f"Fashion-MNIST (Debian dataset-fashion-mnist): {splits.num_train} training "
                     f"images (class-stratified subset of the 60,000) and {splits.num_val} "
                     f"validation images (subset of the 10,000 test images), {crop} px RGB")
    else:
        if not args.train_path:
            raise BenchConfigError(f"--dataset {args.dataset} needs --train-path (and --val-path "
                                   "for validation and the offline probe)")
        train_path = str(Path(args.train_path).expanduser().resolve())
        val_path = str(Path(args.val_path).expanduser().resolve()) if args.val_path else None
        data_note = f"{args.dataset}: train {train_path}, val {val_path}"

    budget = Budget(
        batch_size=args.batch_size or preset.batch_size,
        # The preset's worker count is sized for the embedded data on a small CPU; other
        # datasets keep their dataset file's value unless --num-workers says otherwise.
        num_workers=(args.num_workers if args.num_workers is not None
                     else preset.num_workers if args.dataset == "fashion_mnist" else None),
        limit_train_batches=args.limit_train_batches or preset.limit_train_batches,
        limit_val_batches=preset.limit_val_batches,
        train_path=train_path, val_path=val_path, sets=tuple(sets),
    )

    # ---- plan (the ablation's base d values are whatever the method config says)
    from omegaconf import OmegaConf

    abl_cfg = OmegaConf.load(config_dir / "methods" / f"{args.ablation_method}.yaml")
    opts = PlanOptions(
        methods=args.methods, seeds=seeds, epochs=epochs, num_positives=args.num_positives,
        extra_m=args.extra_m, time_matched=not args.no_time_matched, ablation=args.ablation,
        ablation_method=args.ablation_method, m_grid=args.m_grid, dpos_grid=args.dpos_grid,
        dneg_grid=args.dneg_grid, anchor_grid=args.anchor_grid,
        base_d_pos=float(abl_cfg.method_kwargs.d_pos),
        base_d_neg=float(abl_cfg.method_kwargs.d_neg),
    )
    specs = build_plan(opts)
    out.mkdir(parents=True, exist_ok=True)
    print(f"attnce-bench: preset '{preset.name}', {len(specs)} runs, seeds {seeds}, {epochs} "
          f"epochs, batch {budget.batch_size}; output in {out}", file=sys.stderr)

    results: List[RunResult] = []
    matched: Dict[str, int] = {}
    last_cfg: Any = None
    outer = _progress(len(specs), "runs", 0, True)
    for i, spec in enumerate(specs):
        if spec.comparison == "equal-time":
            n = _resolve_matched(spec, results, seeds[0], matched)
            if n is None:
                results.append(RunResult(
                    key=spec.key, label=spec.label, method=spec.method, comparison=spec.comparison,
                    seed=spec.seed, epochs=0, num_positives=0, matched_to=spec.matched_to,
                    status="skipped", error=f"no timing of '{spec.matched_to}' or of the baseline "
                    f"on seed {seeds[0]} (a run failed), so the time-matched epochs are unknown"))
                if outer is not None:
                    outer.update(1)
                continue
            spec = spec.with_epochs(n)
        run_dir = out / "runs" / spec.key
        cfg = compose_config(spec, args.dataset, budget, run_dir, config_dir)
        digest = config_digest(cfg)
        last_cfg = cfg
        desc = f"[{i + 1}/{len(specs)}] {spec.label} seed {spec.seed}"
        if outer is not None:
            outer.set_description(desc)
        else:
            print(desc, file=sys.stderr)
        if args.dry_run:
            run_dir.mkdir(parents=True, exist_ok=True)
            OmegaConf.save(cfg, run_dir / "config.yaml")
            print(f"  would run: cd {run_dir} && python3 {main_pretrain} --config-path {run_dir} "
                  f"--config-name config {' '.join(map(shlex.quote, passthrough))}", file=sys.stderr)
            if outer is not None:
                outer.update(1)
            continue
        prior = None if args.fresh else load_result(run_dir, digest)
        if prior is not None:
            results.append(prior)
            if outer is not None:
                outer.update(1)
            continue
        inner = _progress(spec.epochs, "  epochs", 1, False)

        def on_epoch(rec: Dict[str, Any], bar: Any = inner) -> None:
            msg = (f"{rec.get('train_seconds', 0):.0f}s/ep kNN {rec.get('val_knn_acc1', float('nan')):.1f} "
                   f"lin {rec.get('val_acc1', float('nan')):.1f}")
            if bar is not None:
                bar.set_postfix_str(msg)
                bar.update(1)
            else:
                print(f"  epoch {rec.get('epoch')}: {msg}", file=sys.stderr)

        result = run_pretrain(spec, cfg, run_dir, main_pretrain, passthrough, on_epoch)
        if inner is not None:
            inner.close()
        if result.status == "ok" and not args.no_offline_probe:
            _offline_probe(result, cfg, run_dir, train_path, val_path)
        if not args.keep_checkpoints:
            shutil.rmtree(run_dir / "ckpt", ignore_errors=True)
        save_result(result, digest)
        results.append(result)
        if result.status != "ok":
            msg = f"run {spec.key} FAILED:\n{result.error}"
            (outer.write if outer is not None else print)(msg)
        if outer is not None:
            outer.update(1)
    if outer is not None:
        outer.close()
    if args.dry_run:
        return 0
    if last_cfg is not None and not args.no_offline_probe and val_path is not None:
        # Reference row: the same probe on the untrained backbone, one per seed.
        for seed in seeds:
            ref = RunResult(key=f"reference/random-init/seed{seed}", label="random init (no pretraining)",
                            method="none", comparison="reference", seed=seed, epochs=0,
                            num_positives=0, matched_to=None)
            ref_cfg = last_cfg.copy()
            ref_cfg.seed = seed
            _offline_probe(ref, ref_cfg, None, train_path, val_path)
            if ref.offline_acc1 is None:
                ref.status = "failed"
            results.append(ref)

    total = time.perf_counter() - started
    cmd = "python3 -m attnce_plugin.bench" + ("" if not argv else " " + " ".join(map(shlex.quote, argv)))
    if passthrough:
        cmd += " -- " + " ".join(map(shlex.quote, passthrough))
    return _report(results, out, cmd, preset.name, budget, epochs, seeds, data_note, total, args)


def _offline_probe(result: RunResult, cfg: Any, run_dir: Optional[Path], train_path: str,
                   val_path: Optional[str]) -> None:
    """Fill ``result.offline_*``; ``run_dir=None`` probes the untrained backbone."""
    from omegaconf import OmegaConf

    from attnce_plugin.bench.probe import linear_probe, probe_settings

    ckpt = find_checkpoint(run_dir) if run_dir is not None else None
    if (run_dir is not None and ckpt is None) or val_path is None or cfg.data.format == "h5":
        result.error = "offline probe skipped: " + (
            "no checkpoint" if ckpt is None else "no --val-path" if val_path is None
            else "h5 data is not read by the probe")
        return
    plain = OmegaConf.to_container(cfg, resolve=True)
    settings = probe_settings(plain)
    try:
        probe = linear_probe(ckpt, plain, Path(train_path), Path(val_path), **settings)
    except Exception as err:  # a probe failure must not lose the pretraining result
        result.error = f"offline probe failed: {type(err).__name__}: {err}"
        return
    result.offline_acc1 = probe.acc1
    result.offline_l2 = probe.l2
    result.offline_uniformity = probe.uniformity
    result.offline_eff_rank = probe.eff_rank
    result.probe_seconds = probe.seconds


def _last_line(text: str) -> str:
    lines = [t.strip() for t in text.splitlines() if t.strip() and not t.startswith("Set the environment")]
    return lines[-1] if lines else "?"


def _report(results: List[RunResult], out: Path, cmd: str, preset: str, budget: Budget,
            epochs: int, seeds: Sequence[int], data_note: str, total: float,
            args: argparse.Namespace) -> int:
    from attnce_plugin.bench import report

    rows = report.aggregate(results)
    failed = [r for r in results if r.status != "ok"]
    now = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    header = "\n".join([
        "# attnce-bench results",
        "",
        f"- command: `{cmd}` (preset `{preset}`), {now}, total wall time {total / 60:.1f} min",
        f"- machine: {_machine()}",
        f"- software: {_versions()}",
        f"- data: {data_note}",
        f"- budget: {epochs} epochs (equal-epoch), batch {budget.batch_size}, seeds "
        f"{', '.join(map(str, seeds))}, resnet18 unless overridden; per-run configs in "
        "`runs/*/*/seed*/config.yaml`",
    ])
    notes = [
        "online kNN (k=20) and online linear probe: solo-learn's, inside main_pretrain.py, "
        "on the validation images after the last epoch.",
        "offline linear probe: softmax regression (L-BFGS, L2 picked on a 20 % hold-out) on "
        "frozen backbone features of the un-augmented training images, scored on the validation "
        "images (attnce_plugin/bench/probe.py); not solo's main_linear.py, which would upscale "
        "32 px images to 224 px. 'random init' is the same probe on the untrained backbone.",
        "s / epoch: training time of an epoch (first batch to last batch, validation excluded), "
        "mean over epochs and seeds. train s: total training time of a run.",
        "peak mem: peak over the run of the summed PSS (RSS where PSS is unavailable) of the "
        "main_pretrain.py process tree, dataloader workers included; max over seeds.",
        "± is the sample standard deviation over seeds; a single seed shows no ±.",
    ]
    if failed:
        notes.append("FAILED or skipped runs: " + "; ".join(
            f"{r.key} ({r.status}: {_last_line(r.error)})" for r in failed))
    ablation_base = None
    if args.ablation:
        ablation_base = plan_mod.attention_label(args.ablation_method, args.num_positives)
    md = report.render_markdown(rows, header, notes, ablation_base=ablation_base)
    (out / "results.md").write_text(md)
    report.write_csvs(results, rows, out)
    (out / "results.json").write_text(json.dumps([asdict(r) for r in results], indent=2))
    try:
        png = report.plot(rows, out / "results.png", f"attnce-bench ({preset}): {cmd}")
    except ImportError:
        png = None
        print("matplotlib is not installed: no results.png (pip install matplotlib, or "
              "pip install -e '.[bench]')", file=sys.stderr)

    print()
    print(md)
    print(f"Wrote {out / 'results.md'}, {out / 'summary.csv'}, {out / 'runs.csv'}"
          + (f", {png}" if png else "") + f"  ({total / 60:.1f} min in all)")
    if failed:
        print(f"{len(failed)} of {len(results)} runs failed or were skipped; see the notes above "
              "and each run's train.log.", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
