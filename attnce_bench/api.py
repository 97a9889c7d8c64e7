"""The benchmark as a Python API: :func:`run_benchmark` of :class:`BenchOptions`.

``attnce-bench`` (:mod:`attnce_bench.__main__`) is this with a command line; the experiments in
:mod:`attnce_bench.experiments` call it directly. Steps:

1. data: the embedded Fashion-MNIST subset (converted once, see :mod:`attnce_bench.data`) or the
   given folders;
2. the plan: every run (method, seed, epochs, settings; :mod:`attnce_bench.plan`);
3. each run: a shipped config plus overrides (:mod:`attnce_bench.compose`), trained by solo-learn's
   own ``main_pretrain.py`` in a subprocess (:mod:`attnce_bench.runner`), reused when an identical
   run already finished in the output folder;
4. offline evaluation of each checkpoint (:mod:`attnce_bench.probe`), and the reference rows: the
   untrained backbone and the raw pixels, on the same images;
5. the report (:mod:`attnce_bench.report`).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

from attnce_bench import plan as plan_mod
from attnce_bench.compose import (
    DATASETS,
    BenchConfigError,
    Budget,
    base_setting,
    parse_set,
    run_config,
)
from attnce_bench.plan import PRESETS, PlanOptions, RunSpec, build_plan, matched_epochs
from attnce_bench.runner import (
    RunResult,
    config_digest,
    find_checkpoint,
    load_result,
    run_pretrain,
    save_result,
)


@dataclass
class BenchOptions:
    """Everything a benchmark invocation can set (the command line's flags; None = the preset's).

    Budget: ``preset``, ``epochs``, ``batch_size``, ``seeds``, ``num_train``, ``num_val``,
    ``num_workers``, ``limit_train_batches``. What to compare: ``methods``, ``num_positives`` (M),
    ``extra_m``, ``time_matched``, ``ablation`` and its grids; or ``frontier`` (every variant of
    :mod:`attnce_bench.frontier` at each of ``frontier_epochs``, instead of the tables). Data and hardware: ``dataset``,
    ``train_path``, ``val_path``, ``classes`` (a Fashion-MNIST class subset), ``data_format``,
    ``crop_size``, ``backbone``, ``accelerator``, ``devices``, ``precision``, ``sets``
    (``[METHOD:]KEY=VALUE``), ``overrides`` (raw Hydra overrides for every run). Output:
    ``out``, ``data_cache``, ``offline_probe``, ``references``, ``keep_checkpoints``, ``fresh``,
    ``dry_run``.
    """

    preset: str = "default"
    epochs: Optional[int] = None
    batch_size: Optional[int] = None
    seeds: Optional[Sequence[int]] = None
    num_train: Optional[int] = None
    num_val: Optional[int] = None
    num_workers: Optional[int] = None
    limit_train_batches: Optional[int] = None
    methods: Sequence[str] = plan_mod.METHODS
    num_positives: int = 4
    extra_m: Sequence[int] = (2,)
    time_matched: bool = True
    ablation: bool = False
    ablation_method: str = "attentionnce"
    m_grid: Sequence[int] = (1, 2, 4)
    dpos_grid: Sequence[float] = (0.5, 1.0, 2.0, 4.0)
    dneg_grid: Sequence[float] = (0.5, 1.0, 10.0)
    anchor_grid: Sequence[str] = ()
    frontier: bool = False
    frontier_epochs: Optional[Sequence[int]] = None
    dataset: str = "fashion_mnist"
    train_path: Optional[str] = None
    val_path: Optional[str] = None
    classes: Optional[Sequence[int]] = None
    data_format: Optional[str] = None
    crop_size: Optional[int] = None
    backbone: Optional[str] = None
    accelerator: Optional[str] = None
    devices: Optional[str] = None
    precision: Optional[str] = None
    sets: Sequence[str] = ()
    overrides: Sequence[str] = ()
    out: str = "bench_out"
    data_cache: Optional[str] = None
    offline_probe: bool = True
    references: bool = True
    keep_checkpoints: bool = False
    fresh: bool = False
    dry_run: bool = False


@dataclass
class BenchReport:
    """What :func:`run_benchmark` produced (also written to ``out``)."""

    results: List[RunResult]
    markdown: str
    out: Path
    failed: List[RunResult] = field(default_factory=list)


def hardware_sets(opts: BenchOptions) -> List[str]:
    """``--set`` values of the hardware flags (solo-learn / Lightning keys).

    Raises:
        BenchConfigError: a value outside the allowed ones.
    """
    out: List[str] = []
    accel = opts.accelerator
    if accel is not None:
        if accel not in ("cpu", "gpu", "cuda", "auto"):
            raise BenchConfigError(
                f"--accelerator={accel!r}: allowed values are cpu, gpu, cuda, auto"
            )
        out.append(f"accelerator={accel}")
    if opts.devices is not None:
        if (accel or "cpu") == "cpu":
            if not opts.devices.isdigit():
                raise BenchConfigError(
                    f"--devices={opts.devices!r}: on cpu give a process count, e.g. 1"
                )
            # solo scales the lr by len(devices) and Lightning reads int(devices): "02" is 2
            # processes with len 2 (docs/solo-learn.md).
            n = int(opts.devices)
            out.append(f"devices='{str(n).zfill(n)}'")
            if n > 1:
                out.append("strategy=ddp")
        else:
            ids = [int(x) for x in opts.devices.split(",") if x.strip()]
            out.append(f"devices=[{','.join(map(str, ids))}]")
            out += ["strategy=ddp", f"sync_batchnorm={'true' if len(ids) > 1 else 'false'}"]
    if accel not in (None, "cpu") and opts.devices is None:
        out += ["devices=[0]", "strategy=auto", "sync_batchnorm=false"]
    if opts.precision is not None:
        out.append(f"precision='{opts.precision}'")
    if opts.backbone is not None:
        out.append(f"backbone.name={opts.backbone}")
    if opts.data_format is not None:
        out.append(f"data.format={opts.data_format}")
    return out


def machine() -> str:
    """The CPU, GPU and software versions, for the report header."""
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
    return (
        f"{cpu}, {os.cpu_count()} CPU cores visible, {gpu}; Python "
        f"{platform.python_version()}, torch {torch.__version__}"
    )


def versions() -> str:
    """Versions of the packages the runs depend on."""
    from importlib.metadata import PackageNotFoundError, version

    parts = []
    for name in ("attnce-plugin", "solo-learn", "lightning", "torchmetrics", "hydra-core"):
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
    return tqdm(
        total=total, desc=desc, position=position, leave=leave, dynamic_ncols=True, file=sys.stderr
    )


def _seconds_per_epoch(results: Sequence[RunResult], label: str, seed: int) -> Optional[float]:
    for r in results:
        if (
            r.label == label
            and r.seed == seed
            and r.comparison == "equal-epoch"
            and r.status == "ok"
        ):
            return r.seconds_per_epoch
    return None


def _resolve_matched(
    spec: RunSpec, results: Sequence[RunResult], first_seed: int, cache: Dict[str, int]
) -> Optional[int]:
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


@dataclass
class _Data:
    train: str
    val: Optional[str]
    note: str


def _prepare_data(opts: BenchOptions, out: Path, num_train: int, num_val: int) -> _Data:
    if opts.dataset == "fashion_mnist":
        from attnce_bench.data import prepare_fashion_mnist

        crop = opts.crop_size or 32
        cache = Path(opts.data_cache).resolve() if opts.data_cache else out / "data"
        print(
            f"Preparing Fashion-MNIST ({num_train} train / {num_val} val images at {crop} px) "
            f"in {cache} ...",
            file=sys.stderr,
        )
        splits = prepare_fashion_mnist(
            cache, num_train, num_val, image_size=crop, classes=opts.classes
        )
        which = "" if opts.classes is None else f", classes {list(opts.classes)}"
        return _Data(
            str(splits.train),
            str(splits.val),
            f"Fashion-MNIST (Debian dataset-fashion-mnist{which}): {splits.num_train} "
            f"training images (class-stratified subset of the 60,000) and "
            f"{splits.num_val} validation images (subset of the 10,000 test images), "
            f"{crop} px RGB",
        )
    if opts.classes is not None:
        raise BenchConfigError("classes: only the embedded fashion_mnist data has class subsets")
    if not opts.train_path:
        raise BenchConfigError(
            f"--dataset {opts.dataset} needs --train-path (and --val-path for "
            "validation and the offline probe)"
        )
    train = str(Path(opts.train_path).expanduser().resolve())
    val = str(Path(opts.val_path).expanduser().resolve()) if opts.val_path else None
    return _Data(train, val, f"{opts.dataset}: train {train}, val {val}")


def run_benchmark(
    opts: BenchOptions,
    command: str = "",
    on_epoch: Optional[Callable[[RunSpec, Dict[str, Any]], None]] = None,
) -> BenchReport:
    """Plan, train, evaluate and report (see the module docstring).

    Args:
        opts: the settings.
        command: the command line shown in the report header (default: this call's options).
        on_epoch: called with each epoch record of each run while it trains.

    Raises:
        BenchConfigError, ValueError: bad settings (before any training).
        DatasetMissingError: Fashion-MNIST is not installed.
        SoloLearnMissingError: solo-learn is not installed.
    """
    from attnce_plugin.solo_compat import require_solo, solo_checkout_dir

    started = time.perf_counter()
    if opts.preset not in PRESETS:
        raise BenchConfigError(f"--preset={opts.preset!r}: allowed values are {sorted(PRESETS)}")
    if opts.dataset not in DATASETS:
        raise BenchConfigError(f"--dataset={opts.dataset!r}: allowed values are {list(DATASETS)}")
    preset = PRESETS[opts.preset]
    out = Path(opts.out).resolve()
    seeds = list(opts.seeds) if opts.seeds is not None else list(preset.seeds)
    epochs = opts.epochs if opts.epochs is not None else preset.epochs
    sets = [parse_set(s) for s in hardware_sets(opts) + list(opts.sets)]
    unknown = [m for m, _, _ in sets if m is not None and m not in plan_mod.METHODS]
    if unknown:
        raise BenchConfigError(
            f"--set: unknown method {unknown[0]!r}; allowed values are " f"{list(plan_mod.METHODS)}"
        )
    require_solo()
    main_pretrain = solo_checkout_dir() / "main_pretrain.py"
    data = _prepare_data(
        opts, out, opts.num_train or preset.num_train, opts.num_val or preset.num_val
    )
    budget = Budget(
        dataset=opts.dataset,
        batch_size=opts.batch_size or preset.batch_size,
        # The preset's worker count is sized for the embedded data on a small CPU; other datasets
        # keep the config's unless num_workers says otherwise.
        num_workers=(
            opts.num_workers
            if opts.num_workers is not None
            else preset.num_workers if opts.dataset == "fashion_mnist" else None
        ),
        train_path=data.train,
        val_path=data.val,
        crop_size=opts.crop_size,
        limit_train_batches=opts.limit_train_batches or preset.limit_train_batches,
        limit_val_batches=preset.limit_val_batches,
        cpu=(opts.accelerator or "cpu") == "cpu",
        sets=tuple(sets),
    )

    plan_opts = PlanOptions(
        methods=opts.methods,
        seeds=seeds,
        epochs=epochs,
        num_positives=opts.num_positives,
        extra_m=opts.extra_m,
        time_matched=opts.time_matched,
        ablation=opts.ablation,
        ablation_method=opts.ablation_method,
        m_grid=opts.m_grid,
        dpos_grid=opts.dpos_grid,
        dneg_grid=opts.dneg_grid,
        anchor_grid=opts.anchor_grid,
        # The ablation's base is whatever the shipped config says.
        base_d_pos=base_setting(opts.ablation_method, opts.dataset, "d_pos"),
        base_d_neg=base_setting(opts.ablation_method, opts.dataset, "d_neg"),
    )
    if opts.frontier:
        from attnce_bench.frontier import build_frontier_plan

        frontier_epochs = list(opts.frontier_epochs or preset.frontier_epochs)
        specs = build_frontier_plan(opts.methods, frontier_epochs, seeds)
    else:
        specs = build_plan(plan_opts)
    out.mkdir(parents=True, exist_ok=True)
    print(
        f"attnce-bench: preset '{preset.name}', {len(specs)} runs, seeds {seeds}, {epochs} "
        f"epochs, batch {budget.batch_size}; output in {out}",
        file=sys.stderr,
    )

    results: List[RunResult] = []
    matched: Dict[str, int] = {}
    outer = _progress(len(specs), "runs", 0, True)
    for i, spec in enumerate(specs):
        if spec.comparison == "equal-time":
            n = _resolve_matched(spec, results, seeds[0], matched)
            if n is None:
                results.append(
                    RunResult(
                        key=spec.key,
                        label=spec.label,
                        method=spec.method,
                        comparison=spec.comparison,
                        seed=spec.seed,
                        epochs=0,
                        num_positives=0,
                        matched_to=spec.matched_to,
                        status="skipped",
                        error=f"no timing of '{spec.matched_to}' or of the baseline "
                        f"on seed {seeds[0]} (a run failed), so the time-matched epochs are unknown",
                    )
                )
                if outer is not None:
                    outer.update(1)
                continue
            spec = spec.with_epochs(n)
        run_dir = out / "runs" / spec.key
        run = run_config(spec, budget, run_dir)
        run.overrides += list(opts.overrides)
        desc = f"[{i + 1}/{len(specs)}] {spec.label} seed {spec.seed}"
        if outer is not None:
            outer.set_description(desc)
        else:
            print(desc, file=sys.stderr)
        if opts.dry_run:
            from attnce_bench.compose import save_run_config

            save_run_config(run, run_dir / "config.yaml")
            if outer is not None:
                outer.update(1)
            continue
        digest = config_digest(run)
        prior = None if opts.fresh else load_result(run_dir, digest)
        if prior is not None:
            results.append(prior)
            if outer is not None:
                outer.update(1)
            continue
        inner = _progress(spec.epochs, "  epochs", 1, False)

        def epoch_cb(rec: Dict[str, Any], bar: Any = inner, spec: RunSpec = spec) -> None:
            msg = (
                f"{rec.get('train_seconds', 0):.0f}s/ep kNN "
                f"{rec.get('val_knn_acc1', float('nan')):.1f} lin "
                f"{rec.get('val_acc1', float('nan')):.1f}"
            )
            if bar is not None:
                bar.set_postfix_str(msg)
                bar.update(1)
            else:
                print(f"  epoch {rec.get('epoch')}: {msg}", file=sys.stderr)
            if on_epoch is not None:
                on_epoch(spec, rec)

        result = run_pretrain(spec, run, run_dir, main_pretrain, (), epoch_cb)
        if inner is not None:
            inner.close()
        ckpt = find_checkpoint(run_dir)
        if ckpt is not None and (ckpt.parent / "args.json").is_file():
            # The parsed config solo-learn saved: the reference rows rebuild the backbone from it.
            shutil.copy(ckpt.parent / "args.json", run_dir / "args.json")
        if result.status == "ok" and opts.offline_probe:
            _probe_run(result, run_dir, budget, run.resolved)
        if not opts.keep_checkpoints:
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
    if opts.dry_run:
        return BenchReport(results, "", out)
    if opts.references and opts.offline_probe and data.val is not None:
        results += _reference_results(results, seeds, budget, out)

    total = time.perf_counter() - started
    from attnce_bench.report import bench_markdown, write_bench_report

    header_cmd = command or f"run_benchmark({_options_text(opts)})"
    md = bench_markdown(
        results,
        header_cmd,
        preset.name,
        budget,
        epochs,
        seeds,
        data.note,
        total,
        machine(),
        versions(),
        _dt.datetime.now().strftime("%Y-%m-%d %H:%M"),
        ablation_base=(
            plan_mod.attention_label(opts.ablation_method, opts.num_positives)
            if opts.ablation
            else None
        ),
        epochs_note=(
            "epoch budgets " + ", ".join(map(str, frontier_epochs)) + " (--frontier)"
            if opts.frontier
            else None
        ),
    )
    if opts.frontier:
        from attnce_bench import frontier

        md = md.replace("## Configs", frontier.markdown(results) + "\n## Configs", 1)
        try:
            frontier.plot(results, out / "frontier.png", f"attnce-bench --frontier ({preset.name})")
        except ImportError:
            print("matplotlib is not installed: no frontier.png", file=sys.stderr)
    write_bench_report(results, md, out, f"attnce-bench ({preset.name}): {header_cmd}")
    return BenchReport(results, md, out, [r for r in results if r.status != "ok"])


def _options_text(opts: BenchOptions) -> str:
    default = BenchOptions()
    changed = {k: v for k, v in asdict(opts).items() if v != getattr(default, k)}
    return ", ".join(f"{k}={v!r}" for k, v in changed.items())


def _probe_run(result: RunResult, run_dir: Path, budget: Budget, cfg: Any) -> None:
    """Fill ``result``'s offline columns from its checkpoint (errors are recorded, not raised)."""
    from attnce_bench.probe import load_pretrained_backbone

    ckpt = find_checkpoint(run_dir)
    if ckpt is None:
        result.error = "offline probe skipped: no checkpoint"
        return
    _probe_into(result, lambda: load_pretrained_backbone(ckpt), budget, cfg)


def _probe_into(
    result: RunResult, make_backbone: Callable[[], Any], budget: Budget, cfg: Any
) -> None:
    from omegaconf import OmegaConf

    from attnce_bench.probe import probe_backbone, probe_settings

    if budget.val_path is None or cfg.data.format == "h5":
        result.error = "offline probe skipped: " + (
            "no val path" if budget.val_path is None else "h5 data is not read by the probe"
        )
        return
    try:
        settings = probe_settings(OmegaConf.to_container(cfg, resolve=True))
        probe = probe_backbone(
            make_backbone(),
            str(cfg.data.dataset),
            Path(budget.train_path),
            Path(budget.val_path),
            **settings,
        )
    except Exception as err:  # a probe failure must not lose the pretraining result
        result.error = f"offline probe failed: {type(err).__name__}: {err}"
        return
    result.offline_acc1 = probe.acc1
    result.offline_knn_acc1 = probe.knn_acc1
    result.offline_l2 = probe.l2
    result.offline_uniformity = probe.uniformity
    result.offline_eff_rank = probe.eff_rank
    result.probe_seconds = probe.seconds


#: The reference rows: (label, key) of the untrained backbone and the raw pixels.
REFERENCES = (("random init (no pretraining)", "random-init"), ("raw pixels", "raw-pixels"))


def _reference_results(
    results: Sequence[RunResult], seeds: Sequence[int], budget: Budget, out: Path
) -> List[RunResult]:
    """The untrained backbone (one per seed) and the raw pixels, probed on the same images.

    The untrained backbone is built from the saved config (``args.json``) of a finished run.
    """
    from attnce_bench.probe import Pixels, random_backbone

    sources = [Path(r.run_dir) / "args.json" for r in results if r.status == "ok" and r.run_dir]
    args_json = next((p for p in sources if p.is_file()), None)
    if args_json is None:
        return []
    cfg = _load_args(args_json)
    refs: List[RunResult] = []
    for label, key in REFERENCES:
        for seed in (seeds if key == "random-init" else seeds[:1]):
            ref = RunResult(
                key=f"reference/{key}/seed{seed}",
                label=label,
                method="none",
                comparison="reference",
                seed=seed,
                epochs=0,
                num_positives=0,
                matched_to=None,
            )
            make = (
                (lambda s=seed: random_backbone(args_json, s)) if key == "random-init" else Pixels
            )
            _probe_into(ref, make, budget, cfg)
            if ref.offline_acc1 is None:
                ref.status = "failed"
            refs.append(ref)
    return refs


def _load_args(path: Path) -> Any:
    from omegaconf import OmegaConf

    return OmegaConf.create(json.loads(path.read_text()))
