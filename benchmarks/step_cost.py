"""Training-step cost through Lightning: s/step, images/s and peak memory of SimCLR, AttentionNCE,
MoCo v3 and AttentionNCE's MoCo form, each beside its plain-torch bound::

    python3 -m benchmarks.step_cost --device cuda --out bench_out/step_cuda.md        # 16-mixed
    python3 -m benchmarks.step_cost --threads 2 --methods simclr attentionnce    # 32 px, fp32

A method: built as ``main_pretrain.py`` builds it (the shipped ``pretrain/custom/`` config with the
run table's overrides, the plugin's ``parse_cfg``), trained on one fixed batch of random crops on
the device: ``--warmup`` steps, then ``--rounds`` fits of ``--steps`` steps; s/step is the median
fit's (range: min-max; single fits of one H200 row differed by up to 24 %), from the recorder's
``train_seconds``, and its phases the recorder's (host time): data, forward (``training_step``),
backward, rest (optimizer and hooks). Peak memory: CUDA ``max_memory_allocated``, on the CPU the
process's peak RSS so far (rows run in order). Its ``bound``: copies of its backbone and projector
in plain torch (no Lightning, loader or solo-learn) on the same crops, channels_last and precision,
each view forwarded alone as solo-learn does, a squared-norm loss, torch's SGD; the MoCo forms'
differentiates the 2 anchors and runs every view through a no-grad copy (the momentum network);
its phases: the median step less its median forward and optimizer step, timed interleaved.
"""

from __future__ import annotations

import argparse
import copy
import inspect
import statistics
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import torch
from omegaconf import OmegaConf

from benchmarks.loss_cost import emit, parser, start, time_interleaved
from benchmarks.recorder import PHASES, read_records
from benchmarks.report import table
from benchmarks.runner import compose
from benchmarks.runs import METHODS, POSITIVE_METHODS, Row, Run

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
    from solo.methods import METHODS as SOLO_METHODS
    from solo.utils.misc import make_contiguous

    from attnce_plugin.seam import register, wrap_parse_cfg

    register()
    cfg = compose(f"pretrain/custom/{config}.yaml", overrides)
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

    from benchmarks.recorder import RunRecorder

    keys = inspect.signature(Trainer.__init__).parameters
    kwargs = {k: v for k, v in OmegaConf.to_container(cfg).items() if k in keys}
    kwargs.update(callbacks=[RunRecorder(record)], max_epochs=1, limit_train_batches=steps,
                  logger=False, enable_checkpointing=False, enable_progress_bar=False,
                  enable_model_summary=False, num_sanity_val_steps=0)  # fmt: skip
    # batch_size=None: the items are the batches, passed through as they are.
    loader = torch.utils.data.DataLoader([batch] * steps, batch_size=None)
    Trainer(**kwargs).fit(model, train_dataloaders=loader)


def bound(model: Any, crops: List[torch.Tensor], mocov3: bool, args: argparse.Namespace) -> Dict:
    """The plain-torch step of ``model``'s network on ``crops`` (see the module docstring): the
    medians of a step, its forward and its optimizer step, timed interleaved."""
    parts = [copy.deepcopy(m) for m in (model.backbone, model.projector)]  # Lightning left them
    net = torch.nn.Sequential(*parts).to(crops[0].device)  # on the CPU after its fits
    momentum = copy.deepcopy(net).requires_grad_(False) if mocov3 else None
    opt = torch.optim.SGD(net.parameters(), lr=1e-3, momentum=0.9)
    crops = [c.to(memory_format=torch.channels_last) if args.channels_last else c for c in crops]
    dtype = {"16-mixed": torch.float16, "bf16-mixed": torch.bfloat16}.get(args.precision)

    def forward() -> torch.Tensor:
        with torch.autocast(crops[0].device.type, dtype=dtype, enabled=dtype is not None):
            with torch.no_grad():
                [momentum(c) for c in (crops if momentum is not None else [])]
            return sum(net(c).float().square().mean() for c in crops[: 2 if mocov3 else None])

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        forward().backward()
        opt.step()  # the gradients stay: the optimizer's own timing steps on them

    for _ in range(args.warmup):
        step()
    t = time_interleaved({"step": step, "forward": forward, "optimizer": opt.step},
                         args.rounds * args.steps, crops[0].device)  # fmt: skip
    return {"s": t["step"], "range": None, "forward": t["forward"], "optimizer": t["optimizer"],
            "backward": t["step"] - t["forward"] - t["optimizer"]}  # fmt: skip


def measure(method: str, args: argparse.Namespace, tmp: Path) -> List[Dict[str, Any]]:
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
    seconds, phases = [], []
    for _ in range(args.rounds):
        record.unlink(missing_ok=True)
        fit(model, cfg, batch, args.steps, record)
        records = read_records(record)
        start, epoch = (next(r for r in records if r["event"] == e) for e in ("fit_start", "epoch"))
        losses = [r["loss"] for r in records if r["event"] == "step"]
        if len(losses) != args.steps or None in losses:  # None: a non-finite loss
            raise RuntimeError(f"{method}: step losses {losses}, expected {args.steps} finite ones")
        seconds.append(epoch["train_seconds"] / args.steps)
        phases.append(step_phases(epoch, args.steps))
    peak = epoch["peak_cuda_mib" if device.type == "cuda" else "peak_rss_mib"]  # only grows
    row = {"method": method, "views": len(sizes), "precision": start["precision"], "peak": peak,
           "s": statistics.median(seconds), "range": (min(seconds), max(seconds)),
           **{k: statistics.fmean(p[k] for p in phases) for k in phases[0]}}  # fmt: skip
    plain = {**row, "method": "bound", "data": 0.0, "peak": None,
             **bound(model, crops, "mocov3" in method, args)}  # fmt: skip
    del model, batch, crops
    torch.cuda.empty_cache()  # a no-op unless CUDA is initialised
    ran = [{**row, **run_row(method, args.runs, args)}] if args.runs else []
    return [row, *ran, plain]


def run_row(method: str, out: Path, args: argparse.Namespace) -> Dict[str, Any]:
    """The same method's step in a real run of ``python3 -m benchmarks`` (its loader included):
    from the first seed's record in ``out``, the last epoch's s/step and phases (range: over the
    epochs)."""
    key = Run(Row(method, 4 if method in POSITIVE_METHODS else 0), 0, 0).key
    found = sorted((out / "runs" / key).parent.glob("seed*/record.jsonl"))
    if not found:
        raise FileNotFoundError(f"--runs {out}: no record of {method} under {out / 'runs'}")
    cfg = OmegaConf.load(found[0].with_name("config.yaml"))
    got, want = (cfg.optimizer.batch_size, cfg.views.crop_size), (args.batch_size, args.size)
    if got != want:
        raise ValueError(f"--runs: {found[0].parent} trained at (batch, px) {got}, not {want}")
    records = read_records(found[0])
    n = next(r["num_training_batches"] for r in records if r["event"] == "fit_start")
    epochs = [r for r in records if r["event"] == "epoch"]
    per_step = [e["train_seconds"] / n for e in epochs]
    return {"method": f"{method} (run)", "s": per_step[-1], "peak": epochs[-1]["peak_rss_mib"],
            "range": (min(per_step), max(per_step)), **step_phases(epochs[-1], n)}  # fmt: skip


def step_phases(epoch: Dict[str, Any], steps: int) -> Dict[str, float]:
    return {k: epoch[f"{k}_seconds"] / steps for k in PHASES}  # "optimizer" is printed "rest"


def cell(r: Dict[str, Any], args: argparse.Namespace) -> List[str]:
    return [r["method"], r["views"], r["precision"], f"{r['s']:.4f}",
            "{:.4f}-{:.4f}".format(*r["range"]) if r["range"] else "-",
            f"{args.batch_size / r['s']:.1f}",
            *(f"{r[k]:.4f}" for k in PHASES)]  # fmt: skip


def report(groups: Sequence[List[Dict]], args: argparse.Namespace, argv: Sequence[str]) -> str:
    by = {r["method"]: r for group in groups for r in group[:-1]}
    gpu = f" ({torch.cuda.get_device_name(0)})" if args.device == "cuda" else ""
    head = [f"<!-- {' '.join(['python3 -m benchmarks.step_cost', *argv])} -->",
            f"device {args.device}{gpu}, torch {torch.__version__}, threads "
            f"{torch.get_num_threads()}, resnet18 (ImageNet stem), batch {args.batch_size}, "
            f"{args.size} px, channels_last {'on' if args.channels_last else 'off'}, s/step: "
            f"median of {args.rounds} fits of {args.steps} steps each (range: their min-max) "
            f"after {args.warmup} warm-up steps; phases: mean s/step; peak memory: "
            f"{'CUDA max_memory_allocated' if gpu else 'process peak RSS so far'}"]  # fmt: skip
    cols = ["method", "views", "precision", "s/step", "range", "images/s", "data", "forward",
            "backward", "rest", "to its bound", "to simclr", "to its base", "peak MiB"]  # fmt: skip
    cells = []
    for *rows, plain in groups:
        base = BASELINE[rows[0]["method"]]
        for row in rows:  # a run row is compared with run rows
            tag = row["method"][len(rows[0]["method"]) :]
            x = {k: f"{row['s'] / r['s']:.2f}x" if r else "n/a" for k, r in (("bound", plain),
                 ("simclr", by.get("simclr" + tag)), (base, by.get(base + tag)))}  # fmt: skip
            extra = [x["bound"], x["simclr"], f"{x[base]} ({base})", f"{row['peak']:.0f}"]
            cells.append(cell(row, args) + extra)
        cells.append(cell(plain, args) + ["-"] * 4)
    return "\n\n".join(head + [table(cols, cells)]) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    p = parser(__doc__)
    p.add_argument("--precision", help="Lightning's (default 16-mixed on cuda, 32 on cpu)")
    p.add_argument("--channels-last", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--size", type=int, help="crop px (default 224 on cuda, 32 on cpu)")
    p.add_argument("--steps", type=int, default=20, help="timed steps per fit")
    p.add_argument("--rounds", type=int, default=5, help="timed fits per method (median)")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    p.add_argument("--methods", nargs="+", choices=list(BASELINE), default=list(BASELINE))
    p.add_argument("--small-heads", action="store_true", help="64/32-wide heads (tests)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--runs", type=Path, help="also each method's step in the records of a "
                   "python3 -m benchmarks --out folder (loader included)")  # fmt: skip
    args = p.parse_args(argv)
    if args.steps < 1 or args.rounds < 1 or args.warmup < 0:
        print("error: --steps and --rounds must be >= 1, --warmup >= 0", file=sys.stderr)
        return 2
    if not start(args):
        return 2
    args.precision = args.precision or ("16-mixed" if args.device == "cuda" else "32")
    args.size = args.size or (224 if args.device == "cuda" else 32)
    try:  # the records asked for exist, before anything is timed
        [run_row(method, args.runs, args) for method in args.methods if args.runs]
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    warnings.filterwarnings("ignore")  # solo-learn's and Lightning's deprecations and hints
    groups = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(10):  # parse_cfg counts data.train_path's class folders
            (Path(tmp) / "data" / f"class{k}").mkdir(parents=True)
        for method in args.methods:
            groups.append(measure(method, args, Path(tmp)))
            print(f"  [{method}: {groups[-1][0]['s']:.4f} s/step, bound {groups[-1][-1]['s']:.4f}]",
                  file=sys.stderr, flush=True)  # fmt: skip
    return emit(report(groups, args, argv), args.out)


if __name__ == "__main__":
    sys.exit(main())
