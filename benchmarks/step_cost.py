"""Training-step cost through Lightning, from the shipped configs: seconds per step, images per
second and peak memory of SimCLR, AttentionNCE, MoCo v3 and AttentionNCE's MoCo form.

Each method is built as solo-learn's ``main_pretrain.py`` builds it: the shipped
``pretrain/custom/<config>.yaml`` composed with the overrides below, solo-learn's ``parse_cfg``
wrapped by the plugin, ``METHODS[cfg.method](cfg)``, ``make_contiguous``, channels_last unless
``performance.disable_channel_last``, and a Lightning ``Trainer`` from the config's own trainer keys
(LARS and the warm-up/cosine schedule from ``configure_optimizers``, the GradScaler under
``16-mixed``). The SimCLR and MoCo v3 rows are the AttentionNCE configs with solo-learn's loss and
no positive crops (tested step for step against solo-learn's own methods). The batch is one fixed
set of random crops already on the device, so data loading is not timed.

Timing and memory come from the run recorder (``diagnostics.record``,
:mod:`attnce_plugin.callbacks.recorder`): ``--warmup`` steps are trained first (``torch.compile``
compiles there), then ``--rounds`` timed ``fit`` calls of ``--steps`` steps each; a fit's s/step is
its epoch's ``train_seconds`` / steps, the row's is the median over the fits, printed with their
range. One fit per row was not enough: two H200 runs of one 20-step fit put the same row up to
24 % apart. Peak memory: CUDA ``max_memory_allocated`` over the timed fits; on the CPU the
process's peak RSS so far (it only grows: rows run in the order shown).

    python3 -m benchmarks.step_cost --device cuda --out bench_out/step_cuda.md        # 16-mixed
    python3 -m benchmarks.step_cost --device cuda --precision bf16-mixed --compile
    python3 -m benchmarks.step_cost --device cpu --size 32 --batch-size 16 --out bench_out/step.md
"""

from __future__ import annotations

import argparse
import inspect
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import torch

from benchmarks.report import table
from benchmarks.runs import METHODS
from benchmarks.timing import median

#: The rows: methods of the run table (benchmarks/runs.py), each with the baseline it is compared with.
BASELINE: Dict[str, str] = {
    "simclr": "simclr",
    "attentionnce": "simclr",
    "mocov3": "mocov3",
    "mocov3_attentionnce": "mocov3",
}


def overrides(args: argparse.Namespace, train_path: str, record: Path, method: str) -> List[str]:
    """Every override of one row after the method's own: device, sizes, options, the recorder."""
    out = list(METHODS[method][1])
    if args.device == "cpu":
        out += ["trainer=cpu"]
    else:  # one GPU: SyncBatchNorm would do nothing there, and compile refuses it
        out += ["++devices=[0]", "++strategy=auto", "++sync_batchnorm=False"]
    out += [
        f"++precision={args.precision}",
        f"++data.train_path={train_path}",
        "~data.val_path",
        f"++views.crop_size={args.size}",
        f"++optimizer.batch_size={args.batch_size}",
        f"++method_kwargs.compile={str(args.compile).lower()}",
        f"++performance.disable_channel_last={str(not args.channels_last).lower()}",
        "++knn_eval.enabled=False",
        "++scheduler.warmup_epochs=0",
        "++max_epochs=1",
        f"++diagnostics.record={record}",
    ]
    if args.small_heads:
        out += ["++method_kwargs.proj_hidden_dim=64", "++method_kwargs.proj_output_dim=32"]
        if "mocov3" in method:
            out.append("++method_kwargs.pred_hidden_dim=64")
    return out


def build(config: str, overrides: Sequence[str]) -> Tuple[Any, Any]:
    """(model, cfg) as main_pretrain.py builds them from ``pretrain/custom/<config>.yaml``."""
    import solo.args.pretrain as solo_pretrain_args
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf
    from solo.methods import METHODS as SOLO_METHODS
    from solo.utils.misc import make_contiguous

    import attnce_plugin
    from attnce_plugin.patches import wrap_pretrain_parse_cfg

    attnce_plugin.register()
    with initialize_config_module("attnce_plugin.configs", version_base="1.2"):
        cfg = compose(f"pretrain/custom/{config}.yaml", overrides=list(overrides))
    OmegaConf.set_struct(cfg, False)
    cfg = wrap_pretrain_parse_cfg(solo_pretrain_args.parse_cfg)(cfg)
    model = SOLO_METHODS[cfg.method](cfg)
    make_contiguous(model)
    if not cfg.performance.disable_channel_last:
        model = model.to(memory_format=torch.channels_last)
    return model, cfg


class RepeatBatch:
    """The same on-device batch ``length`` times (no data loading)."""

    def __init__(self, batch: List[Any], length: int) -> None:
        self.batch, self.length = batch, length

    def __len__(self) -> int:
        return self.length

    def __iter__(self) -> Iterator[List[Any]]:
        return iter([self.batch] * self.length)


def fit(model: Any, cfg: Any, batch: List[Any], steps: int) -> None:
    """``steps`` training steps with the config's trainer keys, as main_pretrain.py passes them."""
    from lightning.pytorch import Trainer
    from omegaconf import OmegaConf

    keys = inspect.signature(Trainer.__init__).parameters
    kwargs = {k: v for k, v in OmegaConf.to_container(cfg).items() if k in keys}
    kwargs.update(
        max_epochs=1,
        limit_train_batches=steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    Trainer(**kwargs).fit(model, train_dataloaders=RepeatBatch(batch, steps))


def measure(method: str, args: argparse.Namespace, train_path: str, tmp: Path) -> Dict[str, Any]:
    """Warm up, then time ``args.steps`` steps of one method; its row as a dict."""
    from attnce_plugin.callbacks.recorder import read_records

    record = tmp / f"{method}.jsonl"
    model, cfg = build(METHODS[method][0], overrides(args, train_path, record, method))
    device = torch.device(args.device)
    gen = torch.Generator().manual_seed(args.seed)
    sizes = [int(p.crop_size) for p in cfg.augmentations for _ in range(int(p.num_crops))]
    crops = [torch.randn(args.batch_size, 3, s, s, generator=gen).to(device) for s in sizes]
    targets = torch.randint(0, int(cfg.data.num_classes), (args.batch_size,), generator=gen)
    batch = [torch.arange(args.batch_size, device=device), crops, targets.to(device)]
    if args.warmup:
        fit(model, cfg, batch, args.warmup)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    seconds = []
    for _ in range(args.rounds):
        record.unlink(missing_ok=True)
        fit(model, cfg, batch, args.steps)
        records = read_records(record)
        start = next(r for r in records if r["event"] == "fit_start")
        epoch = next(r for r in records if r["event"] == "epoch")
        losses = [r["loss"] for r in records if r["event"] == "step"]
        if len(losses) != args.steps or None in losses:  # None: the recorder's non-finite loss
            raise RuntimeError(f"{method}: step losses {losses}, expected {args.steps} finite ones")
        seconds.append(epoch["train_seconds"] / args.steps)
    # Both peaks only grow (CUDA's is reset once, above): the last fit's is the peak over all.
    peak = epoch["peak_cuda_mib"] if device.type == "cuda" else epoch["peak_rss_mib"]
    del model, batch, crops
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return {
        "method": method,
        "base": BASELINE[method],
        "views": len(sizes),
        "precision": start["precision"],
        "s": median(seconds),
        "s_range": (min(seconds), max(seconds)),
        "peak_mib": peak,
    }


def report(rows: Sequence[Dict[str, Any]], args: argparse.Namespace, argv: Sequence[str]) -> str:
    """The header line and the markdown table."""
    by = {r["method"]: r for r in rows}

    def ratio(r: Dict[str, Any], other: str) -> str:
        return f"{r['s'] / by[other]['s']:.2f}x" if other in by else "n/a"

    device = args.device
    if device == "cuda":
        device += f" ({torch.cuda.get_device_name(0)})"
    mem = "CUDA max_memory_allocated" if args.device == "cuda" else "process peak RSS so far"
    head = [
        f"<!-- python3 -m benchmarks.step_cost {' '.join(argv)} -->",
        f"device {device}, torch {torch.__version__}, threads {torch.get_num_threads()}, "
        f"resnet18 (ImageNet stem), batch {args.batch_size}, {args.size} px, channels_last "
        f"{'on' if args.channels_last else 'off'}, compile {'on' if args.compile else 'off'}, "
        f"s/step: median of {args.rounds} fits of {args.steps} steps each (range: their min-max) "
        f"after {args.warmup} warm-up steps; peak memory: {mem}",
    ]
    cols = ["method", "views", "precision", "s/step", "range", "images/s", "to simclr"]
    cols += ["to its base", "peak MiB"]
    cells = [
        [
            r["method"],
            r["views"],
            r["precision"],
            f"{r['s']:.4f}",
            "{:.4f}-{:.4f}".format(*r["s_range"]),
            f"{args.batch_size / r['s']:.1f}",
        ]
        + [ratio(r, "simclr"), f"{ratio(r, r['base'])} ({r['base']})", f"{r['peak_mib']:.0f}"]
        for r in rows
    ]
    return "\n\n".join(head + [table(cols, cells)]) + "\n"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--out", type=Path, default=None, help="also write the table to this file")
    p.add_argument(
        "--precision",
        default=None,
        help="Lightning precision (default 16-mixed on cuda, 32 on cpu)",
    )
    p.add_argument("--compile", action="store_true", help="method_kwargs.compile=true")
    p.add_argument(
        "--channels-last",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="channels_last networks (performance.disable_channel_last=false; default on)",
    )
    p.add_argument("--batch-size", type=int, default=None, help="default 128 on cuda, 16 on cpu")
    p.add_argument(
        "--size", type=int, default=None, help="crop px (default 224 on cuda, 32 on cpu)"
    )
    p.add_argument("--steps", type=int, default=20, help="timed steps per fit")
    p.add_argument("--rounds", type=int, default=5, help="timed fits per method (median)")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first (compiling)")
    p.add_argument("--methods", nargs="+", choices=list(BASELINE), default=list(BASELINE))
    p.add_argument("--small-heads", action="store_true", help="64/32-wide heads (tests)")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="CPU threads (default 1: on a shared machine a 2-thread OpenMP barrier stalls whenever "
        "another process holds a core; 0 = torch's default)",
    )
    p.add_argument("--seed", type=int, default=0)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        print("error: --device cuda but torch.cuda.is_available() is False", file=sys.stderr)
        return 2
    args.precision = args.precision or ("16-mixed" if cuda else "32")
    args.batch_size = args.batch_size or (128 if cuda else 16)
    args.size = args.size or (224 if cuda else 32)
    if args.steps < 1 or args.rounds < 1 or args.warmup < 0:
        print("error: --steps and --rounds must be >= 1, --warmup >= 0", file=sys.stderr)
        return 2
    if not cuda and args.threads > 0:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")  # solo-learn's and Lightning's deprecations and hints
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(10):  # parse_cfg counts data.train_path's class folders
            (Path(tmp) / "data" / f"class{k}").mkdir(parents=True)
        for method in args.methods:
            rows.append(measure(method, args, str(Path(tmp) / "data"), Path(tmp)))
            print(f"  [{method}: {rows[-1]['s']:.4f} s/step]", file=sys.stderr, flush=True)
    text = report(rows, args, argv)
    print(text, end="")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
