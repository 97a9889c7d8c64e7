"""Training-step cost through Lightning: seconds per step, images per second and peak memory of
SimCLR, AttentionNCE, MoCo v3 and AttentionNCE's MoCo form::

    python3 -m benchmarks.step_cost --device cuda --out bench_out/step_cuda.md        # 16-mixed
    python3 -m benchmarks.step_cost --device cpu --size 32 --batch-size 16 --out bench_out/step.md

Each method built as ``main_pretrain.py`` builds it (the shipped ``pretrain/custom/`` config with
the run table's overrides, the plugin's ``parse_cfg``, channels_last unless told not), trained on
one fixed batch of random crops on the device (loading is not timed): ``--warmup`` steps, then
``--rounds`` fits of ``--steps`` steps, each fit's s/step from the recorder's ``train_seconds``, a
row's the median with the range (single fits of one H200 row differed by up to 24 %). Peak memory:
CUDA ``max_memory_allocated``; on the CPU the process's peak RSS so far (rows run in order).
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import torch

from benchmarks.loss_cost import emit, parser, start
from benchmarks.report import read_records, table
from benchmarks.runs import METHODS

#: The rows, each with the baseline it is compared with.
BASELINE = {"simclr": "simclr", "attentionnce": "simclr", "mocov3": "mocov3",
            "mocov3_attentionnce": "mocov3"}  # fmt: skip


def overrides(args: argparse.Namespace, train_path: str, method: str) -> List[str]:
    out = list(METHODS[method][2])
    # One GPU: SyncBatchNorm would do nothing there.
    out += ["trainer=cpu"] if args.device == "cpu" else ["++devices=[0]", "++strategy=auto",
                                                         "++sync_batchnorm=False"]  # fmt: skip
    out += [f"++precision={args.precision}", f"++data.train_path={train_path}", "~data.val_path",
            f"++views.crop_size={args.size}", f"++optimizer.batch_size={args.batch_size}",
            f"++performance.disable_channel_last={str(not args.channels_last).lower()}",
            "++knn_eval.enabled=False", "++scheduler.warmup_epochs=0",
            "++max_epochs=1"]  # fmt: skip
    if args.small_heads:
        out += ["++method_kwargs.proj_hidden_dim=64", "++method_kwargs.proj_output_dim=32"]
        out += ["++method_kwargs.pred_hidden_dim=64"] if "mocov3" in method else []
    return out


def build(config: str, overrides: Sequence[str]) -> Any:
    """(model, cfg) as main_pretrain.py builds them from ``pretrain/custom/<config>.yaml``."""
    import solo.args.pretrain
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf
    from solo.methods import METHODS as SOLO_METHODS
    from solo.utils.misc import make_contiguous

    from attnce_plugin.seam import register, wrap_parse_cfg

    register()
    with initialize_config_module("attnce_plugin.configs", version_base="1.2"):
        cfg = compose(f"pretrain/custom/{config}.yaml", overrides=list(overrides))
    OmegaConf.set_struct(cfg, False)
    cfg = wrap_parse_cfg(solo.args.pretrain.parse_cfg)(cfg)
    model = SOLO_METHODS[cfg.method](cfg)
    make_contiguous(model)
    if not cfg.performance.disable_channel_last:
        model = model.to(memory_format=torch.channels_last)
    return model, cfg


def fit(model: Any, cfg: Any, batch: List[Any], steps: int, record: Path) -> None:
    """``steps`` steps of the same batch, with the config's trainer keys and the run recorder."""
    from lightning.pytorch import Trainer
    from omegaconf import OmegaConf

    from benchmarks.recorder import RunRecorder

    keys = inspect.signature(Trainer.__init__).parameters
    kwargs = {k: v for k, v in OmegaConf.to_container(cfg).items() if k in keys}
    kwargs.update(callbacks=[RunRecorder(record)], max_epochs=1, limit_train_batches=steps,
                  logger=False, enable_checkpointing=False, enable_progress_bar=False,
                  enable_model_summary=False, num_sanity_val_steps=0)  # fmt: skip
    # batch_size=None: the items are the batches, passed through as they are.
    loader = torch.utils.data.DataLoader([batch] * steps, batch_size=None)
    Trainer(**kwargs).fit(model, train_dataloaders=loader)


def measure(method: str, args: argparse.Namespace, tmp: Path) -> Dict[str, Any]:
    record = tmp / f"{method}.jsonl"
    model, cfg = build(METHODS[method][1], overrides(args, str(tmp / "data"), method))
    device, gen = torch.device(args.device), torch.Generator().manual_seed(args.seed)
    sizes = [int(p.crop_size) for p in cfg.augmentations for _ in range(int(p.num_crops))]
    crops = [torch.randn(args.batch_size, 3, s, s, generator=gen).to(device) for s in sizes]
    targets = torch.randint(0, int(cfg.data.num_classes), (args.batch_size,), generator=gen)
    batch = [torch.arange(args.batch_size, device=device), crops, targets.to(device)]
    if args.warmup:
        fit(model, cfg, batch, args.warmup, record)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    seconds = []
    for _ in range(args.rounds):
        record.unlink(missing_ok=True)
        fit(model, cfg, batch, args.steps, record)
        records = read_records(record)
        start, epoch = (next(r for r in records if r["event"] == e) for e in ("fit_start", "epoch"))
        losses = [r["loss"] for r in records if r["event"] == "step"]
        if len(losses) != args.steps or None in losses:  # None: a non-finite loss
            raise RuntimeError(f"{method}: step losses {losses}, expected {args.steps} finite ones")
        seconds.append(epoch["train_seconds"] / args.steps)
    peak = epoch["peak_cuda_mib" if device.type == "cuda" else "peak_rss_mib"]  # only grows
    del model, batch, crops
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return {"method": method, "views": len(sizes), "precision": start["precision"], "peak": peak,
            "s": statistics.median(seconds), "range": (min(seconds), max(seconds))}  # fmt: skip


def report(rows: Sequence[Dict[str, Any]], args: argparse.Namespace, argv: Sequence[str]) -> str:
    by = {r["method"]: r for r in rows}

    def ratio(r: Dict[str, Any], other: str) -> str:
        return f"{r['s'] / by[other]['s']:.2f}x" if other in by else "n/a"

    gpu = f" ({torch.cuda.get_device_name(0)})" if args.device == "cuda" else ""
    mem = "CUDA max_memory_allocated" if gpu else "process peak RSS so far"
    head = [f"<!-- {' '.join(['python3 -m benchmarks.step_cost', *argv])} -->",
            f"device {args.device}{gpu}, torch {torch.__version__}, threads "
            f"{torch.get_num_threads()}, resnet18 (ImageNet stem), batch {args.batch_size}, "
            f"{args.size} px, channels_last {'on' if args.channels_last else 'off'}, s/step: "
            f"median of {args.rounds} fits of {args.steps} steps each (range: their min-max) "
            f"after {args.warmup} warm-up steps; peak memory: {mem}"]  # fmt: skip
    cols = ["method", "views", "precision", "s/step", "range", "images/s", "to simclr"]
    cells = [[r["method"], r["views"], r["precision"], f"{r['s']:.4f}",
              "{:.4f}-{:.4f}".format(*r["range"]), f"{args.batch_size / r['s']:.1f}",
              ratio(r, "simclr"), f"{ratio(r, BASELINE[r['method']])} ({BASELINE[r['method']]})",
              f"{r['peak']:.0f}"] for r in rows]  # fmt: skip
    return "\n\n".join(head + [table(cols + ["to its base", "peak MiB"], cells)]) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    p = parser(__doc__)
    p.add_argument("--precision", help="Lightning's (default 16-mixed on cuda, 32 on cpu)")
    p.add_argument("--channels-last", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--batch-size", type=int, help="default 128 on cuda, 16 on cpu")
    p.add_argument("--size", type=int, help="crop px (default 224 on cuda, 32 on cpu)")
    p.add_argument("--steps", type=int, default=20, help="timed steps per fit")
    p.add_argument("--rounds", type=int, default=5, help="timed fits per method (median)")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    p.add_argument("--methods", nargs="+", choices=list(BASELINE), default=list(BASELINE))
    p.add_argument("--small-heads", action="store_true", help="64/32-wide heads (tests)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.steps < 1 or args.rounds < 1 or args.warmup < 0:
        print("error: --steps and --rounds must be >= 1, --warmup >= 0", file=sys.stderr)
        return 2
    if not start(args):
        return 2
    cuda = args.device == "cuda"
    args.precision = args.precision or ("16-mixed" if cuda else "32")
    args.batch_size = args.batch_size or (128 if cuda else 16)
    args.size = args.size or (224 if cuda else 32)
    warnings.filterwarnings("ignore")  # solo-learn's and Lightning's deprecations and hints
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(10):  # parse_cfg counts data.train_path's class folders
            (Path(tmp) / "data" / f"class{k}").mkdir(parents=True)
        for method in args.methods:
            rows.append(measure(method, args, Path(tmp)))
            print(f"  [{method}: {rows[-1]['s']:.4f} s/step]", file=sys.stderr, flush=True)
    return emit(report(rows, args, argv), args.out)


if __name__ == "__main__":
    sys.exit(main())
