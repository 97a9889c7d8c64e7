"""Training-step cost through Lightning: s/step, images/s and peak memory of SimCLR, AttentionNCE,
MoCo v3 and AttentionNCE's MoCo form, each beside its baseline::

    python3 -m benchmarks.step_cost --device cuda > step_cuda.md                      # 16-mixed
    python3 -m benchmarks.step_cost --threads 2 --methods simclr attentionnce    # 32 px, fp32
    python3 -m benchmarks.step_cost --threads 2 --methods simclr attentionnce --multicrop

A method row: the shipped ``pretrain/custom/`` config with the run table's overrides, built as
``main_pretrain.py`` builds it, trained through Lightning on one fixed batch of random crops:
``--warmup`` steps, then ``--rounds`` fits of ``--steps`` steps; s/step is the median fit's (range:
min-max), its peak memory the run recorder's. GFLOP/step: one more step under torch's
``FlopCounterMode`` (forward, backward and the optimizer's step): its ratio to SimCLR's is the floor
that the time ratio approaches where the step is compute-bound."""

from __future__ import annotations

import argparse
import inspect
import statistics
import sys
import tempfile
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from omegaconf import OmegaConf
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.recorder import RunRecorder, read_records
from benchmarks.report import table
from benchmarks.runner import compose
from benchmarks.runs import METHODS, TIME_MATCH

#: The rows, each with the baseline it is compared with (the run table's equal-time pairs).
BASELINE = {m: base for base, target in TIME_MATCH.items() for m in (base, target)}


def overrides(args: argparse.Namespace, train_path: str, method: str) -> List[str]:
    # One GPU: SyncBatchNorm would do nothing there.
    gpu = ["++devices=[0]", "++strategy=auto", "++sync_batchnorm=False"]
    out = [*METHODS[method].overrides, *(["trainer=cpu"] if args.device == "cpu" else gpu)]
    out += [f"++precision={args.precision}", f"++data.train_path={train_path}", "~data.val_path"]
    out += [f"++views.crop_size={args.size}", f"++optimizer.batch_size={args.batch_size}"]
    out += ["++knn_eval.enabled=False", "++scheduler.warmup_epochs=0", "++max_epochs=1"]
    return out


def build(config: str, overrides: Sequence[str]) -> Any:
    """(model, cfg) as main_pretrain.py builds them from the shipped ``config`` (e.g.
    ``pretrain/custom/attentionnce.yaml``), the shipped configs' Hydra callback called as Hydra
    calls it, on main_pretrain.py's globals."""
    import solo.args.pretrain
    from solo.methods import METHODS as SOLO_METHODS
    from solo.utils.misc import make_contiguous

    from attnce_plugin.seam import SoloLearnCallback

    cfg = compose(config, overrides)
    task = SimpleNamespace(__globals__={"parse_cfg": solo.args.pretrain.parse_cfg})
    SoloLearnCallback().on_job_start(cfg, task_function=task)
    OmegaConf.set_struct(cfg, False)
    cfg = task.__globals__["parse_cfg"](cfg)
    model = SOLO_METHODS[cfg.method](cfg)
    make_contiguous(model)
    if not cfg.performance.disable_channel_last:
        model = model.to(memory_format=torch.channels_last)
    return model, cfg


def fit(model: Any, cfg: Any, batch: List[Any], steps: int, record: Path) -> Tuple[Dict, str]:
    """``steps`` steps of the same batch with the config's trainer keys: the recorder's epoch line
    and the precision Lightning ran."""
    from lightning.pytorch import Trainer

    keys = inspect.signature(Trainer.__init__).parameters
    kwargs = {k: v for k, v in OmegaConf.to_container(cfg).items() if k in keys}
    kwargs.update(callbacks=[RunRecorder(record)], max_epochs=1, limit_train_batches=steps)
    kwargs.update(logger=False, enable_checkpointing=False, enable_progress_bar=False)
    kwargs.update(enable_model_summary=False, num_sanity_val_steps=0)
    # batch_size=None: the items are the batches, passed through as they are.
    loader = torch.utils.data.DataLoader([batch] * steps, batch_size=None)
    record.unlink(missing_ok=True)
    trainer = Trainer(**kwargs)
    trainer.fit(model, train_dataloaders=loader)
    (epoch,) = read_records(record)
    return epoch, str(trainer.precision)


def measure(method: str, args: argparse.Namespace, tmp: Path) -> Dict[str, Any]:
    """The method's row: s/step of each fit (median, range), the config's views, peak memory."""
    config, ovr = METHODS[method].config, overrides(args, str(tmp / "data"), method)
    if args.multicrop and method == "attentionnce":  # its positives at the config's 96 / 224
        config += "_multicrop"
        ovr.append(f"++views.positive_crop_size={round(args.size * 96 / 224)}")
    model, cfg = build(f"pretrain/custom/{config}.yaml", ovr)
    device, gen = torch.device(args.device), torch.Generator().manual_seed(0)
    sizes = [int(p.crop_size) for p in cfg.augmentations for _ in range(int(p.num_crops))]
    crops = [torch.randn(args.batch_size, 3, s, s, generator=gen).to(device) for s in sizes]
    targets = torch.randint(0, int(cfg.data.num_classes), (args.batch_size,), generator=gen)
    batch = [torch.arange(args.batch_size, device=device), crops, targets.to(device)]
    if args.warmup:
        fit(model, cfg, batch, args.warmup, tmp / "record.jsonl")
    with FlopCounterMode(display=False) as counted:
        fit(model, cfg, batch, 1, tmp / "record.jsonl")
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    seconds = []
    for _ in range(args.rounds):
        epoch, precision = fit(model, cfg, batch, args.steps, tmp / "record.jsonl")
        # Each logged loss's epoch mean: null (non-finite) if any step's was.
        losses = {k: v for k, v in epoch.items() if k.endswith("loss_epoch")}
        if not losses or None in losses.values():
            raise RuntimeError(f"{method}: epoch losses {losses}, expected finite ones")
        seconds.append(epoch["train_seconds"] / args.steps)
    peak = epoch["peak_cuda_mib" if device.type == "cuda" else "peak_rss_mib"]  # only grows
    row = {"method": method, "views": len(sizes), "precision": precision, "peak": peak}
    row.update(config=config, gflop=counted.get_total_flops() / 1e9)
    return {**row, "s": statistics.median(seconds), "range": (min(seconds), max(seconds))}


def report(rows: Sequence[Dict], args: argparse.Namespace, argv: Sequence[str]) -> str:
    gpu = f" ({torch.cuda.get_device_name(0)})" if args.device == "cuda" else ""
    peak = "CUDA max_memory_allocated" if gpu else "process peak RSS so far"
    head = (
        f"device {args.device}{gpu}, torch {torch.__version__}, threads {torch.get_num_threads()}, "
        f"resnet18 (ImageNet stem), batch {args.batch_size}, {args.size} px, channels_last; "
        f"s/step: median of {args.rounds} fits of {args.steps} steps each (range: their min-max) "
        f"after {args.warmup} warm-up steps; peak memory: {peak}"
    )
    cols = ["method", "config", "views", "precision", "s/step", "range", "images/s", "to simclr"]
    cols += ["to its base", "peak MiB", "GFLOP/step", "FLOPs to simclr"]
    by, body = {r["method"]: r for r in rows}, []
    for r in rows:
        base = BASELINE[r["method"]]
        x = {k: f"{r['s'] / by[k]['s']:.2f}x" if k in by else "n/a" for k in ("simclr", base)}
        cells = [r["method"], r["config"], r["views"], r["precision"], f"{r['s']:.4f}"]
        cells += ["{:.4f}-{:.4f}".format(*r["range"]), f"{args.batch_size / r['s']:.1f}"]
        flops = f"{r['gflop'] / by['simclr']['gflop']:.2f}x" if "simclr" in by else "n/a"
        cells += [x["simclr"], f"{x[base]} ({base})", f"{r['peak']:.0f}", f"{r['gflop']:.1f}"]
        body.append(cells + [flops])
    command = " ".join(["python3 -m benchmarks.step_cost", *argv])
    return f"<!-- {command} -->\n\n{head}\n\n{table(cols, body)}\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add = p.add_argument
    add("--device", choices=("cpu", "cuda"), default="cpu")
    # 1 thread: on a shared machine a 2-thread OpenMP barrier stalls while another process runs.
    add("--threads", type=int, default=1, help="CPU threads (0: torch's default)")
    add("--precision", help="Lightning's (default 16-mixed on cuda, 32 on cpu)")
    add("--batch-size", type=int, default=128)
    add("--size", type=int, help="crop px (default 224 on cuda, 32 on cpu)")
    add("--steps", type=int, default=20, help="timed steps per fit")
    add("--rounds", type=int, default=5, help="timed fits per method (median)")
    add("--warmup", type=int, default=5, help="untimed steps first")
    add("--methods", nargs="+", choices=list(BASELINE), default=list(BASELINE))
    add("--multicrop", action="store_true", help="attentionnce: the multicrop config")
    args = p.parse_args(argv)
    if args.steps < 1 or args.rounds < 1 or args.warmup < 0:
        p.error("--steps and --rounds must be >= 1, --warmup >= 0")
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda but torch.cuda.is_available() is False")
    if args.device == "cpu" and args.threads > 0:
        torch.set_num_threads(args.threads)
    args.precision = args.precision or ("16-mixed" if args.device == "cuda" else "32")
    args.size = args.size or (224 if args.device == "cuda" else 32)
    warnings.filterwarnings("ignore")  # solo-learn's and Lightning's deprecations and hints
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(10):  # parse_cfg counts data.train_path's class folders
            (Path(tmp) / "data" / f"class{k}").mkdir(parents=True)
        for method in args.methods:
            rows.append(measure(method, args, Path(tmp)))
            print(f"  [{method}: {rows[-1]['s']:.4f} s/step]", file=sys.stderr, flush=True)
    print(report(rows, args, argv), end="")  # the table alone on stdout: `> step.md` keeps it
    return 0


if __name__ == "__main__":
    sys.exit(main())
