"""Part 2: solo-learn's own, unmodified ``main_pretrain.py`` on the shipped custom configs.

For ``pretrain/custom/{attentionnce, attentionnce_multicrop, mocov3_attentionnce}.yaml`` on the
carried Fashion-MNIST folders (32 px crops; the multi-crop positives at 16 px), a few dozen steps
each: on CUDA at ``16-mixed`` and ``bf16-mixed`` with ``strategy=ddp``, ``devices=[0]`` and
``sync_batchnorm=True`` (the shipped trainer settings); on the CPU at precision 32 without
SyncBatchNorm. Overrides in the style of :mod:`attnce_bench.compose`, visible in each run's log.

Checked per run: exit code 0; every step's loss finite (recorded by
:class:`attnce_bench.gpu_check.hooks.GpuCheckHooks`); crop roles 2 large + M small both in the
checkpoint's ``args.json`` and in the method Lightning trained; one checkpoint; on CUDA the
precision Lightning used, SyncBatchNorm layers present and a channels_last backbone.
"""

from __future__ import annotations

import json
import math
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

from attnce_bench.gpu_check.common import (
    PartContext,
    check,
    fmt,
    log_tail,
    part_main,
    python,
    run_logged,
)

CONFIGS = ("attentionnce", "attentionnce_multicrop", "mocov3_attentionnce")
#: Positive views per image in every shipped config (views.num_positives).
NUM_POSITIVES = 4
CROP, SMALL_CROP = 32, 16


@dataclass(frozen=True)
class Budget:
    """Size of the runs. The validation split is never limited: solo-learn's kNN sizes its one-hot
    by the classes present in the validation features, and the sorted image folder's first batches
    hold one class only (IndexError in ``WeightedKNNClassifier.compute``)."""

    batch_size: int
    steps: int
    workers: int
    jobs: int
    run_cap_s: float
    tiny_heads: bool = False


def budget(ctx: PartContext) -> Budget:
    if ctx.tiny:
        return Budget(batch_size=4, steps=2, workers=0, jobs=2, run_cap_s=120, tiny_heads=True)
    if ctx.cuda:
        return Budget(batch_size=32, steps=30, workers=4, jobs=2, run_cap_s=150)
    return Budget(batch_size=16, steps=6, workers=2, jobs=1, run_cap_s=300)


def precisions(ctx: PartContext) -> List[str]:
    return ["16-mixed", "bf16-mixed"] if ctx.cuda else ["32"]


def overrides(ctx: PartContext, b: Budget, config: str, precision: str, run_dir: Path) -> List[str]:
    """Hydra overrides of one run (after ``--config-path/--config-name``)."""
    data = ctx.args["data"]
    out = [
        f"++data.train_path={data['train']}",
        f"++data.val_path={data['val']}",
        f"++data.num_workers={b.workers}",
        f"++views.crop_size={CROP}",
        f"++name=gpucheck-{config}-{precision}",
        "++max_epochs=1",
        f"++optimizer.batch_size={b.batch_size}",
        f"++limit_train_batches={b.steps}",
        # solo's default of 10 warm-up epochs is longer than the run.
        "++scheduler.warmup_epochs=0",
        "++knn_eval.enabled=True",
        "++knn_eval.k=20",
        f"++checkpoint.dir={run_dir / 'ckpt'}",
        "++checkpoint.keep_prev=False",
        "++auto_resume.enabled=False",
        "++wandb.enabled=False",
        "++num_sanity_val_steps=0",
        "++enable_progress_bar=False",
        "++log_every_n_steps=1",
    ]
    if "multicrop" in config:
        out.append(f"++views.positive_crop_size={SMALL_CROP}")
    if ctx.cuda:
        out += [
            "++accelerator=gpu",
            "++devices=[0]",
            "++strategy=ddp",
            "++sync_batchnorm=True",
            f"++precision={precision}",
        ]
    else:
        # solo scales the lr by len(devices): a digit string is one CPU process.
        out += [
            "++accelerator=cpu",
            "++devices='1'",
            "++strategy=auto",
            "++sync_batchnorm=False",
            f"++precision='{precision}'",
        ]
    if b.tiny_heads:
        out += ["++method_kwargs.proj_hidden_dim=64", "++method_kwargs.proj_output_dim=32"]
        if "mocov3" in config:
            out.append("++method_kwargs.pred_hidden_dim=64")
    out += [
        # Validate at the training size (solo validates custom data at 224 px otherwise).
        "+hydra.callbacks.bench._target_=attnce_bench.hooks.BenchHooks",
        f"+hydra.callbacks.bench.val_size={CROP}",
        "+hydra.callbacks.gpucheck._target_=attnce_bench.gpu_check.hooks.GpuCheckHooks",
        f"+hydra.callbacks.gpucheck.record={run_dir / 'record.json'}",
    ]
    return out


def command(ctx: PartContext, b: Budget, config: str, precision: str, run_dir: Path) -> List[str]:
    main = Path(ctx.args["gpucheck"]) / "solo-learn" / "main_pretrain.py"
    return [
        python(),
        str(main),
        "--config-path",
        "pkg://attnce_plugin.configs",
        "--config-name",
        f"pretrain/custom/{config}.yaml",
        *overrides(ctx, b, config, precision, run_dir),
    ]


def _read_json(path: Path) -> Optional[Dict[str, Any]]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def evaluate(
    ctx: PartContext, b: Budget, config: str, precision: str, run_dir: Path, proc: Dict[str, Any]
) -> Dict[str, Any]:
    """One run's row: what it did and the list of checks that did not hold."""
    record = _read_json(run_dir / "record.json") or {}
    ckpts = sorted((run_dir / "ckpt").rglob("*.ckpt"))
    args = _read_json(ckpts[0].parent / "args.json") if ckpts else None
    losses = [float(x) for x in record.get("losses", [])]
    problems: List[str] = []
    if proc["timed_out"]:
        problems.append(f"timed out after {proc['seconds']:.0f} s")
    elif proc["rc"] != 0:
        problems.append(f"exit code {proc['rc']}")
    if not record.get("finished"):
        problems.append("training did not finish")
    if len(losses) != b.steps:
        problems.append(f"{len(losses)} steps recorded, expected {b.steps}")
    if not all(math.isfinite(x) for x in losses):
        problems.append(
            f"non-finite losses at steps "
            f"{[i for i, x in enumerate(losses) if not math.isfinite(x)][:10]}"
        )
    if not ckpts:
        problems.append("no checkpoint")
    crops_args = None
    if args is not None:
        crops_args = (args["data"]["num_large_crops"], args["data"]["num_small_crops"])
        if crops_args != (2, NUM_POSITIVES):
            problems.append(f"args.json crop roles {crops_args}, expected (2, {NUM_POSITIVES})")
    elif ckpts:
        problems.append("no args.json beside the checkpoint")
    crops_model = (record.get("num_large_crops"), record.get("num_positive_crops"))
    if record and crops_model != (2, NUM_POSITIVES):
        problems.append(
            f"the method trained with {crops_model[0]} anchors and {crops_model[1]} "
            f"positives, expected 2 and {NUM_POSITIVES}"
        )
    want_sizes = [CROP] * 2 + [SMALL_CROP if "multicrop" in config else CROP] * NUM_POSITIVES
    if record.get("losses") and record.get("crop_sizes") != want_sizes:
        problems.append(
            f"the batches held crops of {record.get('crop_sizes')} px, expected " f"{want_sizes}"
        )
    if ctx.cuda and record:
        if record.get("precision") != precision:
            problems.append(f"Lightning used precision {record.get('precision')}")
        if not record.get("sync_batchnorm_layers"):
            problems.append("no SyncBatchNorm layers (sync_batchnorm=True)")
        if not record.get("channels_last"):
            problems.append("backbone not channels_last")
        if not str(record.get("device", "")).startswith("cuda"):
            problems.append(f"trained on {record.get('device')}")
    metrics = record.get("metrics", {})
    return {
        "config": config,
        "precision": precision,
        "seconds": proc["seconds"],
        "steps": len(losses),
        "first_loss": losses[0] if losses else None,
        "last_loss": losses[-1] if losses else None,
        "finite": bool(losses) and all(math.isfinite(x) for x in losses),
        "crops_args": crops_args,
        "crops_model": crops_model,
        "crop_sizes": record.get("crop_sizes"),
        "sync_bn": record.get("sync_batchnorm_layers"),
        "bn": record.get("batchnorm_layers"),
        "channels_last": record.get("channels_last"),
        "strategy": record.get("strategy"),
        "knn_acc1": metrics.get("val_knn_acc1"),
        "val_acc1": metrics.get("val_acc1"),
        "checkpoint_dir": str(ckpts[0].parent) if ckpts else None,
        "problems": problems,
        "log": str(run_dir / "train.log"),
    }


def _sizes(sizes: Optional[List[int]]) -> str:
    """Crop sizes as runs, e.g. [32, 32, 16, 16] -> '2x32, 2x16'."""
    if not sizes:
        return "n/a"
    runs: List[List[int]] = []
    for s in sizes:
        if runs and runs[-1][1] == s:
            runs[-1][0] += 1
        else:
            runs.append([1, s])
    return ", ".join(f"{n}x{s}" for n, s in runs)


def run(ctx: PartContext) -> None:
    b = budget(ctx)
    jobs = [(c, p) for p in precisions(ctx) for c in CONFIGS]
    threads = max(1, (os.cpu_count() or 2) // b.jobs)
    env = dict(os.environ)
    if not ctx.cuda:
        env.update({"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)})
    ctx.emit(
        f"solo-learn's main_pretrain.py from {ctx.args['gpucheck']}/solo-learn, shipped "
        f"configs pretrain/custom/*.yaml, Fashion-MNIST {CROP} px; batch {b.batch_size}, "
        f"{b.steps} steps, {b.workers} loader workers, {b.jobs} runs at a time. Command of "
        "each run: first line of its train.log (in logs.tar.gz)."
    )
    ctx.emit()
    rows: List[Dict[str, Any]] = []

    def one(index: int, config: str, precision: str) -> Dict[str, Any]:
        run_dir = ctx.out / f"{config}-{precision}"
        timeout = min(b.run_cap_s, ctx.left() - 5)
        if timeout < 20:
            return {
                "config": config,
                "precision": precision,
                "seconds": 0.0,
                "steps": 0,
                "problems": [f"skipped: {ctx.left():.0f} s left"],
                "skipped": True,
            }
        run_env = dict(env)
        run_env["MASTER_PORT"] = str(29500 + 17 * index)  # runs in parallel must not share a port
        run_dir.mkdir(parents=True, exist_ok=True)
        proc = run_logged(
            command(ctx, b, config, precision, run_dir),
            run_dir,
            run_dir / "train.log",
            timeout,
            run_env,
        )
        row = evaluate(ctx, b, config, precision, run_dir, proc)
        if row["problems"]:
            print(
                f"--- {config} {precision}: {row['problems']}\n{log_tail(run_dir / 'train.log')}",
                flush=True,
            )
        return row

    with ThreadPoolExecutor(max_workers=b.jobs) as pool:
        futures = [pool.submit(one, i, c, p) for i, (c, p) in enumerate(jobs)]
        for fut in futures:
            row = fut.result()
            rows.append(row)
            ctx.data["runs"] = rows
            # Part 3 runs attnce-knn on the first passing paper-layout checkpoint; offered as soon
            # as there is one, so that a later timeout of this part does not take it away.
            if (
                row["config"] == "attentionnce"
                and not row["problems"]
                and "provides" not in ctx.data
            ):
                ctx.data["provides"] = {"checkpoint_dir": row["checkpoint_dir"]}
            ctx.save()

    table = []
    for r in rows:
        crops = r.get("crops_args")
        table.append(
            [
                r["config"],
                r["precision"],
                r["steps"],
                f"{fmt(r.get('first_loss'))} -> {fmt(r.get('last_loss'))}",
                "yes" if r.get("finite") else "NO",
                (f"{crops[0]}+{crops[1]}" if crops else "n/a")
                + f" ({_sizes(r.get('crop_sizes'))})",
                f"{r.get('sync_bn')}/{r.get('bn')}" if r.get("bn") is not None else "n/a",
                {True: "yes", False: "no"}.get(r.get("channels_last"), "n/a"),
                fmt(r.get("knn_acc1")),
                "yes" if r.get("checkpoint_dir") else "NO",
                f"{r['seconds']:.0f}",
                "ok" if not r["problems"] else "; ".join(r["problems"]),
            ]
        )
    ctx.table(
        [
            "config",
            "precision",
            "steps",
            "loss first -> last",
            "finite",
            "crops large+small, args.json (batch px)",
            "SyncBN/BN layers",
            "channels_last",
            "online kNN top-1",
            "ckpt",
            "s",
            "check",
        ],
        table,
    )

    good = [r for r in rows if not r["problems"]]
    knn = [r["knn_acc1"] for r in good if r.get("knn_acc1") is not None]
    ctx.key = (
        f"{len(good)}/{len(rows)} runs ok ({', '.join(precisions(ctx))}); crops 2+"
        f"{NUM_POSITIVES}; online kNN top-1 " + (f"{min(knn):.1f}-{max(knn):.1f}" if knn else "n/a")
    )
    check(
        len(good) == len(rows),
        "; ".join(
            f"{r['config']} {r['precision']}: " + ", ".join(r["problems"])
            for r in rows
            if r["problems"]
        ),
    )


if __name__ == "__main__":
    sys.exit(part_main(run))
